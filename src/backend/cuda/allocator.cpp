#include "backend/cuda/allocator.h"

#include <fmt/format.h>

#include <bit>

#include "alloy/errors.h"

namespace alloy::cuda {

Allocator::Allocator(const Driver& driver, CUstream stream, std::function<void()> synchronize)
    : driver_(driver), stream_(stream), synchronize_(std::move(synchronize)) {}

size_t Allocator::round_size(size_t nbytes) {
  if (nbytes <= kMinBlock) return kMinBlock;
  if (nbytes <= kSmallLimit) return std::bit_ceil(nbytes);
  return (nbytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

void* Allocator::allocate(size_t nbytes) {
  size_t size = round_size(nbytes);
  std::unique_lock lock(mu_);
  CUdeviceptr ptr = 0;
  size_t block = size;
  if (size <= kSmallLimit) {
    auto it = small_.find(size);
    if (it != small_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
    }
  } else {
    // Best fit among cached blocks at most 1/8 larger than asked (larger ones would waste more).
    auto it = large_.lower_bound(size);
    if (it != large_.end() && it->first <= size + size / 8) {
      block = it->first;
      ptr = it->second;
      large_.erase(it);
    }
  }
  if (ptr) {
    stats_.cached_bytes -= block;
    stats_.num_cache_hits++;
  } else {
    CUresult r = driver_.cuMemAlloc(&ptr, size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && stats_.cached_bytes > 0) {
      lock.unlock();
      empty_cache();
      lock.lock();
      r = driver_.cuMemAlloc(&ptr, size);
    }
    if (r != CUDA_SUCCESS) {
      throw Error("", fmt::format("cannot allocate {} bytes of GPU memory ({} bytes in use by "
                                  "Alloy, {} cached): {}",
                                  nbytes, stats_.active_bytes, stats_.cached_bytes,
                                  error_string(driver_, r)));
    }
    stats_.num_allocs++;
  }
  live_.emplace(ptr, block);
  stats_.active_bytes += block;
  if (stats_.active_bytes > stats_.peak_active_bytes)
    stats_.peak_active_bytes = stats_.active_bytes;
  return reinterpret_cast<void*>(ptr);
}

void Allocator::free(void* p) {
  if (!p) return;
  auto ptr = reinterpret_cast<CUdeviceptr>(p);
  std::lock_guard lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours; never reached through Buffer
  size_t block = it->second;
  live_.erase(it);
  if (block <= kSmallLimit) {
    small_[block].push_back(ptr);
  } else {
    large_.emplace(block, ptr);
  }
  stats_.active_bytes -= block;
  stats_.cached_bytes += block;
}

MemoryStats Allocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Allocator::empty_cache() {
  // Cached blocks may still be read by enqueued work (their frees were stream-ordered).
  synchronize_();
  std::lock_guard lock(mu_);
  release_cached_locked();
}

void Allocator::release_cached_locked() {
  for (auto& [size, blocks] : small_) {
    for (CUdeviceptr p : blocks) {
      driver_.cuMemFree(p);
      stats_.num_frees++;
    }
  }
  for (auto& [size, p] : large_) {
    driver_.cuMemFree(p);
    stats_.num_frees++;
  }
  small_.clear();
  large_.clear();
  stats_.cached_bytes = 0;
}

}  // namespace alloy::cuda
