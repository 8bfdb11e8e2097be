// Host memory for CPU arrays: 64-byte aligned blocks kept in size classes and reused, so that a
// kernel called in a loop does not map (and page-fault) fresh memory on every call, as a CUDA
// caching allocator avoids cudaMalloc. Blocks carry slack at the end (DESIGN.md §2: kernels that
// read a little past the end before masking do not fault). Blocks are placed between guard pages
// (ALLOY_HOST_GUARD_PAGES; host_allocator.cpp says how), so a CPU kernel running past its buffer
// faults instead of corrupting the process.
#pragma once
#include <cstddef>
#include <cstdint>

namespace alloy {

struct HostAllocatorStats {
  uint64_t active_bytes = 0;  // in use by arrays (size-class bytes)
  uint64_t cached_bytes = 0;  // free, kept for reuse
  uint64_t allocations = 0;
  uint64_t cache_hits = 0;
};

/// A block of at least `nbytes` (+ slack), 64-byte aligned. Throws std::bad_alloc.
void* host_alloc(size_t nbytes);
/// Returns a block from host_alloc(nbytes) (the same `nbytes`) for reuse (or frees it past the
/// cache limit).
void host_free(void* p, size_t nbytes);
HostAllocatorStats host_allocator_stats();
/// The guarded mapping (guard pages included) that holds `address`, live or cached: [*lo, *hi).
/// False when the address is in none (fault messages: src/backend/cpu/fault_guard.cpp).
bool host_guarded_mapping(uintptr_t address, uintptr_t* lo, uintptr_t* hi);
/// Frees every cached block.
void host_empty_cache();

/// Which blocks get guard pages: ALLOY_HOST_GUARD_PAGES = "all" (default), "large" (only blocks
/// of a page or more, the behaviour before sub-page blocks were guarded), "none" / "0" / "off"
/// (the C heap for everything). Read once, at the first allocation; a malformed value throws
/// std::invalid_argument (core/env.h).
enum class GuardMode { all, large, none };
GuardMode host_guard_mode_from_env();

}  // namespace alloy
