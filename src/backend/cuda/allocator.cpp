#include "backend/cuda/allocator.h"

#include <fmt/format.h>

#include <bit>

#include "alloy/errors.h"
#include "core/hot.h"

namespace alloy::cuda {

Allocator::Allocator(const Driver& driver, std::function<void()> synchronize,
                     std::function<std::vector<CUstream>()> streams,
                     std::function<CUstream()> current, std::function<void()> enter,
                     const std::atomic<bool>* several_streams)
    : driver_(driver),
      synchronize_(std::move(synchronize)),
      streams_(std::move(streams)),
      current_(std::move(current)),
      enter_(std::move(enter)),
      several_streams_(several_streams) {}

Allocator::Fence::~Fence() {
  for (CUevent e : events) driver->cuEventDestroy(e);
}

ALLOY_HOT std::shared_ptr<Allocator::Fence> Allocator::make_fence() {
  if (several_streams_ && !several_streams_->load(std::memory_order_acquire)) return nullptr;
  std::vector<CUstream> streams = streams_();
  if (streams.size() < 2) return nullptr;
  auto fence = std::make_shared<Fence>();
  fence->driver = &driver_;
  for (CUstream s : streams) {
    CUevent e = nullptr;
    constexpr unsigned kDisableTiming = 0x2;
    if (driver_.cuEventCreate(&e, kDisableTiming) != CUDA_SUCCESS) {
      // No event: order conservatively by waiting for every stream here (rare: out of resources).
      synchronize_();
      return nullptr;
    }
    driver_.cuEventRecord(e, s);
    fence->events.push_back(e);
  }
  return fence;
}

ALLOY_HOT void Allocator::wait_fence(const std::shared_ptr<Fence>& fence) {
  if (!fence) return;
  enter_();
  CUstream s = current_();
  for (CUevent e : fence->events) driver_.cuStreamWaitEvent(s, e, 0);
}

ALLOY_HOT size_t Allocator::round_size(size_t nbytes) {
  if (nbytes <= kMinBlock) return kMinBlock;
  if (nbytes <= kSmallLimit) return std::bit_ceil(nbytes);
  return (nbytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

void* Allocator::allocate(size_t nbytes) {
  size_t block = 0;
  void* p = allocate(nbytes, &block);
  Lock lock(mu_);
  live_.emplace(reinterpret_cast<CUdeviceptr>(p), block);
  return p;
}

void Allocator::free(void* p) {
  if (!p) return;
  size_t block = 0;
  {
    Lock lock(mu_);
    auto it = live_.find(reinterpret_cast<CUdeviceptr>(p));
    if (it == live_.end()) return;  // not ours
    block = it->second;
    live_.erase(it);
  }
  free(p, block);
}

ALLOY_HOT bool Allocator::take_cached(size_t size, CUdeviceptr* ptr, size_t* block,
                                      std::shared_ptr<Fence>* fence) {
  Lock lock(mu_);
  if (size <= kSmallLimit) {
    auto& bucket = small_[small_bucket(size)];
    if (bucket.empty()) return false;
    *ptr = bucket.back().ptr;
    *fence = std::move(bucket.back().fence);
    bucket.pop_back();
  } else {
    // Best fit among cached blocks at most 1/8 larger than asked (larger ones would waste more).
    auto it = large_.lower_bound(size);
    if (it == large_.end() || it->first > size + size / 8) return false;
    *block = it->first;
    *ptr = it->second.ptr;
    *fence = std::move(it->second.fence);
    large_.erase(it);
  }
  stats_.cached_bytes -= *block;
  stats_.num_cache_hits++;
  note_active_locked(*block);
  return true;
}

ALLOY_HOT void Allocator::note_active_locked(size_t block) {
  stats_.active_bytes += block;
  if (stats_.active_bytes > stats_.peak_active_bytes)
    stats_.peak_active_bytes = stats_.active_bytes;
}

ALLOY_HOT void* Allocator::allocate(size_t nbytes, size_t* block_out) {
  size_t size = round_size(nbytes);
  CUdeviceptr ptr = 0;
  size_t block = size;
  {
    std::shared_ptr<Fence> fence;  // destroyed (its events too) after the lock
    if (take_cached(size, &ptr, &block, &fence)) {
      wait_fence(fence);
      *block_out = block;
      return reinterpret_cast<void*>(ptr);
    }
  }
  // A miss: the driver is called without the lock (it is a spin lock: nobody may wait on it
  // through a driver call).
  enter_();
  CUresult r = driver_.cuMemAlloc(&ptr, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    // Cached blocks go back to the driver first; none cached: another thread's empty_cache may
    // be giving them back right now (its lock is held until it has), so wait for it.
    if (stats().cached_bytes > 0) {
      empty_cache();
    } else {
      std::lock_guard wait(release_mu_);
    }
    enter_();
    r = driver_.cuMemAlloc(&ptr, size);
  }
  if (r != CUDA_SUCCESS) {
    MemoryStats s = stats();
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
      throw OutOfMemory(fmt::format(
          "cannot allocate {} bytes ({:.1f} GiB) for an array on the GPU ({} bytes in use by "
          "Alloy, {} cached)",
          nbytes, static_cast<double>(nbytes) / (1ull << 30), s.active_bytes, s.cached_bytes));
    throw Error("", fmt::format("cannot allocate {} bytes of GPU memory ({} bytes in use by "
                                "Alloy, {} cached): {}",
                                nbytes, s.active_bytes, s.cached_bytes, error_string(driver_, r)));
  }
  Lock lock(mu_);
  stats_.num_allocs++;
  note_active_locked(block);
  *block_out = block;
  return reinterpret_cast<void*>(ptr);
}

ALLOY_HOT void Allocator::free(void* p, size_t block) {
  if (!p) return;
  auto ptr = reinterpret_cast<CUdeviceptr>(p);
  std::shared_ptr<Fence> fence = make_fence();
  Lock lock(mu_);
  if (block <= kSmallLimit) {
    small_[small_bucket(block)].push_back({ptr, std::move(fence)});
  } else {
    large_.emplace(block, Cached{ptr, std::move(fence)});
  }
  stats_.active_bytes -= block;
  stats_.cached_bytes += block;
}

MemoryStats Allocator::stats() const {
  Lock lock(mu_);
  return stats_;
}

void Allocator::empty_cache() {
  // Cached blocks may still be read by enqueued work (their frees were stream-ordered).
  synchronize_();
  // Taken out under the lock, given back to the driver (and their fences' events destroyed)
  // without it.
  std::lock_guard releasing(release_mu_);
  std::vector<Cached> blocks;
  {
    Lock lock(mu_);
    for (auto& bucket : small_) {
      for (Cached& c : bucket) blocks.push_back(std::move(c));
      bucket.clear();
    }
    for (auto& [size, c] : large_) blocks.push_back(std::move(c));
    large_.clear();
    stats_.cached_bytes = 0;
    stats_.num_frees += blocks.size();
  }
  if (blocks.empty()) return;
  enter_();
  for (Cached& c : blocks) driver_.cuMemFree(c.ptr);
}

}  // namespace alloy::cuda
