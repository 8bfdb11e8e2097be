#include "core/host_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

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

// Blocks of whole pages come from their own mapping with an inaccessible guard page on each
// side (issue 16, item 7): a CPU kernel that runs past its buffer faults (an alloy::Error naming
// the kernel, src/backend/cpu/fault_guard.h) instead of overwriting the allocator's metadata or
// another array. Smaller blocks stay on the C heap.
size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}
bool guarded(size_t c) {
  return c >= page_size() && c % page_size() == 0;
}
void* block_alloc(size_t c) {
  if (!guarded(c)) return std::aligned_alloc(64, c);
  size_t pg = page_size();
  void* base =
      ::mmap(nullptr, c + 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  char* b = static_cast<char*>(base) + pg;
  if (::mprotect(b, c, PROT_READ | PROT_WRITE) != 0) {
    ::munmap(base, c + 2 * pg);
    return nullptr;
  }
#ifdef MADV_HUGEPAGE
  // Transparent huge pages for large blocks (as numpy asks for its arrays of 4 MiB and more):
  // where the system gives them only on request ("madvise" mode), a kernel streaming over a
  // large array otherwise takes a TLB miss every 4 KiB. Advice only: failure changes nothing.
  if (c >= (size_t{4} << 20)) ::madvise(b, c, MADV_HUGEPAGE);
#endif
  return b;
}
void block_free(void* b, size_t c) {
  if (!guarded(c)) return std::free(b);
  ::munmap(static_cast<char*>(b) - page_size(), c + 2 * page_size());
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
  void* b = block_alloc(c);
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
  block_free(b, c);
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
    for (void* b : v) block_free(b, c);
}

}  // namespace alloy
