#include "core/host_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/env.h"

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

// The bytes of a block from its start to the guard page after it: the array and its slack,
// rounded up to the 64-byte alignment (never more than the size class).
size_t tail_bytes(size_t n) {
  return (n + kSlack + 63) & ~size_t{63};
}

// Guard pages (issue 16, item 7; docs/reliability.md). A guarded block is its own mapping:
//   [guard region][data pages ...][guard region]
// and the block is placed at the END of its data pages (64-byte aligned), so that a kernel running
// past the array (beyond the 64 bytes of slack, DESIGN.md §2) faults in the guard region at once,
// whatever the array's size: a 4-byte array too. A kernel reading before the array reads the
// unused front of its own data pages (never another array) and faults once it passes them. The
// fault becomes an alloy::Error naming the kernel and the buffer (src/backend/cpu/fault_guard.h)
// instead of overwriting the allocator's metadata or another array.
//
// Each guard region is as large as the block's data pages, and at least kMinGuard: a single guard
// page stops only the first 4 KiB of an overrun, and the threads of a parallel launch do not run
// in index order, so the first access of a worker thread that starts mid-grid (y[i + n] with i
// half-way: 2 KiB..16 KiB past a 16 KiB array) skipped a single guard page and wrote into
// whatever mapping the kernel had placed above it (seen: the main thread's TLS block, whose stack
// canary then aborted the process with "stack smashing detected"). With guard regions of one
// array length, any access within one array length (and kMinGuard) before or after an array
// faults in that array's own guard region. The regions are PROT_NONE address space only (no
// memory, no commit charge, one mapping each as before); where the address space is short, a
// block falls back to single guard pages.
//
// Cost: a block under a page takes a whole page (4 KiB) and two mappings of the process's
// vm.max_map_count (65,530 by default, shared with fiber stacks' guard pages and malloc). Live
// guarded blocks are capped at a fifth of that count: past it, cached guarded blocks are unmapped,
// then blocks come from the C heap (unguarded) until guarded ones are freed.
GuardMode guard_mode() {
  static const GuardMode m = host_guard_mode_from_env();
  return m;
}

size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

int64_t mapping_budget() {
  static const int64_t b = [] {
    int64_t max_maps = 65530;
    std::ifstream f("/proc/sys/vm/max_map_count");
    if (int64_t v = 0; f >> v && v > 0) max_maps = v;
    return max_maps / 5;
  }();
  return b;
}

// Whether blocks of class c are guarded in this mode (the budget aside).
bool guardable(size_t c) {
  switch (guard_mode()) {
    case GuardMode::all:
      return true;
    case GuardMode::large:
      return c >= page_size() && c % page_size() == 0;
    case GuardMode::none:
      return false;
  }
  return false;
}

// The data pages of a guarded block of class c.
size_t span(size_t c) {
  return (c + page_size() - 1) / page_size() * page_size();
}

// The guard region on each side of a guarded block of class c (see above).
constexpr size_t kMinGuard = size_t{64} << 10;
size_t guard_bytes(size_t c) {
  size_t g = span(c);
  if (g < kMinGuard) g = (kMinGuard + page_size() - 1) / page_size() * page_size();
  return g;
}

// Every guarded mapping, start -> end (guard pages included), for fault messages
// (host_guarded_mapping). Its own lock: map_guarded/unmap_guarded run outside the pool's.
struct Mappings {
  std::mutex mu;
  std::map<uintptr_t, uintptr_t> ranges;
};
Mappings& mappings() {
  static Mappings* m = new Mappings;  // never destroyed, as the pool
  return *m;
}

// A guarded mapping for class c: returns the start of its data pages, or null.
char* map_guarded(size_t c) {
  const size_t pg = page_size(), s = span(c);
  size_t guard = guard_bytes(c);
  void* base = MAP_FAILED;
  while (true) {
    base = ::mmap(nullptr, s + 2 * guard, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                  -1, 0);
    if (base != MAP_FAILED || guard == pg) break;
    guard = pg;  // no address space for full guard regions: single guard pages
  }
  if (base == MAP_FAILED) return nullptr;
  char* data = static_cast<char*>(base) + guard;
  if (::mprotect(data, s, PROT_READ | PROT_WRITE) != 0) {
    ::munmap(base, s + 2 * guard);
    return nullptr;
  }
#ifdef MADV_HUGEPAGE
  // Transparent huge pages for large blocks (as numpy asks for its arrays of 4 MiB and more):
  // where the system gives them only on request ("madvise" mode), a kernel streaming over a
  // large array otherwise takes a TLB miss every 4 KiB. Advice only: failure changes nothing.
  if (s >= (size_t{4} << 20)) ::madvise(data, s, MADV_HUGEPAGE);
#endif
  {
    Mappings& m = mappings();
    std::lock_guard lock(m.mu);
    auto b = reinterpret_cast<uintptr_t>(base);
    m.ranges[b] = b + s + 2 * guard;
  }
  return data;
}
// Unmaps the guarded mapping whose data pages start at `data` (its extent from the registry: the
// guard regions may be single pages).
void unmap_guarded(char* data) {
  uintptr_t lo = 0, hi = 0;
  {
    Mappings& m = mappings();
    std::lock_guard lock(m.mu);
    auto it = m.ranges.upper_bound(reinterpret_cast<uintptr_t>(data));
    if (it == m.ranges.begin()) return;  // not ours: cannot happen
    --it;
    lo = it->first;
    hi = it->second;
    m.ranges.erase(it);
  }
  ::munmap(reinterpret_cast<void*>(lo), hi - lo);
}

// Free lists: guarded blocks keyed by their class (holding the start of their data pages), blocks
// of the C heap by class + 1 (classes are multiples of 64, so the keys never meet). The
// power-of-two classes (up to 1 MiB) are found by index, the larger ones in a map.
class FreeLists {
 public:
  std::vector<void*>& operator[](size_t key) {
    if (int i = small_index(key); i >= 0) return small_[i];
    return large_[key];
  }
  // The list of `key`, or null when there is none yet.
  std::vector<void*>* find(size_t key) {
    if (int i = small_index(key); i >= 0) return &small_[i];
    auto it = large_.find(key);
    return it == large_.end() ? nullptr : &it->second;
  }
  template <class F>
  void for_each(F f) {  // f(key, list)
    for (size_t i = 0; i < small_.size(); ++i) f((size_t{64} << (i / 2)) + (i % 2), small_[i]);
    for (auto& [key, v] : large_) f(key, v);
  }

 private:
  static constexpr int kSmall = 15;  // classes 64 B .. 1 MiB
  static int small_index(size_t key) {
    size_t c = key & ~size_t{1};
    if (c > (size_t{1} << 20) || (c & (c - 1)) != 0) return -1;
    return 2 * (std::countr_zero(c) - 6) + static_cast<int>(key & 1);
  }
  std::array<std::vector<void*>, 2 * kSmall> small_;
  std::unordered_map<size_t, std::vector<void*>> large_;
};

struct Pool {
  std::mutex mu;
  FreeLists free;
  HostAllocatorStats stats;
  int64_t mappings = 0;                   // guarded blocks mapped (live and cached)
  std::unordered_set<void*> heap_blocks;  // heap blocks of guardable classes (budget fallback)
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: arrays may be released during static teardown
  return *p;
}

// Unmaps cached guarded blocks (pool lock held; returns them for unmapping outside the lock).
std::vector<std::pair<char*, size_t>> take_cached_guarded(Pool& p) {
  std::vector<std::pair<char*, size_t>> out;
  p.free.for_each([&](size_t key, std::vector<void*>& v) {
    if (key % 64 != 0) return;  // heap blocks
    for (void* b : v) {
      out.emplace_back(static_cast<char*>(b), key);
      p.stats.cached_bytes -= span(key);
      --p.mappings;
    }
    v.clear();
  });
  return out;
}

}  // namespace

void* host_alloc(size_t nbytes) {
  if (nbytes > SIZE_MAX / 2) throw std::bad_alloc();
  const size_t c = size_class(nbytes);
  const bool want_guard = guardable(c);
  Pool& p = pool();
  std::vector<std::pair<char*, size_t>> unmap;
  {
    std::lock_guard lock(p.mu);
    ++p.stats.allocations;
    if (want_guard) {
      auto* list = p.free.find(c);
      if (list && !list->empty()) {
        char* data = static_cast<char*>(list->back());
        list->pop_back();
        ++p.stats.cache_hits;
        p.stats.cached_bytes -= span(c);
        p.stats.active_bytes += span(c);
        return data + span(c) - tail_bytes(nbytes);
      }
      if (p.mappings >= mapping_budget()) unmap = take_cached_guarded(p);
    }
    auto* list = p.free.find(c + 1);
    if (list && !list->empty() && (!want_guard || p.mappings >= mapping_budget())) {
      void* b = list->back();
      list->pop_back();
      ++p.stats.cache_hits;
      p.stats.cached_bytes -= c;
      p.stats.active_bytes += c;
      if (want_guard) p.heap_blocks.insert(b);
      return b;
    }
  }
  for (auto& block : unmap) unmap_guarded(block.first);

  if (want_guard) {
    bool within_budget;
    {
      std::lock_guard lock(p.mu);
      within_budget = p.mappings < mapping_budget();
      if (within_budget) ++p.mappings;
    }
    if (within_budget) {
      if (char* data = map_guarded(c)) {
        std::lock_guard lock(p.mu);
        p.stats.active_bytes += span(c);
        return data + span(c) - tail_bytes(nbytes);
      }
      std::lock_guard lock(p.mu);
      --p.mappings;  // no mapping to be had (vm.max_map_count): the heap instead
    }
  }
  void* b = std::aligned_alloc(64, c);
  if (!b) throw std::bad_alloc();
  std::lock_guard lock(p.mu);
  p.stats.active_bytes += c;
  if (want_guard) p.heap_blocks.insert(b);
  return b;
}

void host_free(void* b, size_t nbytes) {
  const size_t c = size_class(nbytes);
  bool heap = !guardable(c);
  Pool& p = pool();
  {
    std::lock_guard lock(p.mu);
    if (!heap && !p.heap_blocks.empty()) heap = p.heap_blocks.erase(b) != 0;
    size_t bytes = heap ? c : span(c);
    void* key_block = heap ? b : static_cast<char*>(b) + tail_bytes(nbytes) - span(c);
    p.stats.active_bytes -= bytes;
    if (p.stats.cached_bytes + bytes <= kCacheLimit) {
      p.free[heap ? c + 1 : c].push_back(key_block);
      p.stats.cached_bytes += bytes;
      return;
    }
    if (!heap) --p.mappings;
  }
  if (heap)
    std::free(b);
  else
    unmap_guarded(static_cast<char*>(b) + tail_bytes(nbytes) - span(c));
}

bool host_guarded_mapping(uintptr_t address, uintptr_t* lo, uintptr_t* hi) {
  Mappings& m = mappings();
  std::lock_guard lock(m.mu);
  auto it = m.ranges.upper_bound(address);
  if (it == m.ranges.begin()) return false;
  --it;
  if (address >= it->second) return false;
  *lo = it->first;
  *hi = it->second;
  return true;
}

HostAllocatorStats host_allocator_stats() {
  std::lock_guard lock(pool().mu);
  return pool().stats;
}

void host_empty_cache() {
  Pool& p = pool();
  FreeLists blocks;
  {
    std::lock_guard lock(p.mu);
    std::swap(blocks, p.free);
    p.stats.cached_bytes = 0;
    blocks.for_each([&](size_t key, std::vector<void*>& v) {
      if (key % 64 == 0) p.mappings -= static_cast<int64_t>(v.size());
    });
  }
  blocks.for_each([](size_t key, std::vector<void*>& v) {
    for (void* b : v) {
      if (key % 64 == 0)
        unmap_guarded(static_cast<char*>(b));
      else
        std::free(b);
    }
  });
}

GuardMode host_guard_mode_from_env() {
  switch (env::choice("ALLOY_HOST_GUARD_PAGES", {"all", "large", "none", "0", "off"}).value_or(0)) {
    case 1:
      return GuardMode::large;
    case 2:
    case 3:
    case 4:
      return GuardMode::none;
    default:
      return GuardMode::all;
  }
}

}  // namespace alloy
