#include "core/host_allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace alloy {
namespace {

constexpr size_t kSlack = 64;
constexpr uint64_t kCacheLimit = uint64_t{2} << 30;  // keep at most 2 GiB of free blocks

// Size classes: powers of two up to 1 MiB, then multiples of 1 MiB.
size_t size_class(size_t n) {
  n += kSlack;
  if (n <= (size_t{1} << 20)) {
    size_t c = 64;
    while (c < n) c <<= 1;
    return c;
  }
  return (n + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
}

struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;
  HostAllocatorStats stats;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: arrays may be released during static teardown
  return *p;
}

}  // namespace

void* host_alloc(size_t nbytes) {
  size_t c = size_class(nbytes);
  Pool& p = pool();
  {
    std::lock_guard lock(p.mu);
    ++p.stats.allocations;
    auto it = p.free.find(c);
    if (it != p.free.end() && !it->second.empty()) {
      void* b = it->second.back();
      it->second.pop_back();
      ++p.stats.cache_hits;
      p.stats.cached_bytes -= c;
      p.stats.active_bytes += c;
      return b;
    }
    p.stats.active_bytes += c;
  }
  void* b = std::aligned_alloc(64, c);
  if (!b) {
    std::lock_guard lock(p.mu);
    p.stats.active_bytes -= c;
    throw std::bad_alloc();
  }
  return b;
}

void host_free(void* b, size_t nbytes) {
  size_t c = size_class(nbytes);
  Pool& p = pool();
  {
    std::lock_guard lock(p.mu);
    p.stats.active_bytes -= c;
    if (p.stats.cached_bytes + c <= kCacheLimit) {
      p.free[c].push_back(b);
      p.stats.cached_bytes += c;
      return;
    }
  }
  std::free(b);
}

HostAllocatorStats host_allocator_stats() {
  std::lock_guard lock(pool().mu);
  return pool().stats;
}

void host_empty_cache() {
  Pool& p = pool();
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard lock(p.mu);
    blocks.swap(p.free);
    p.stats.cached_bytes = 0;
  }
  for (auto& [c, v] : blocks)
    for (void* b : v) std::free(b);
}

}  // namespace alloy
