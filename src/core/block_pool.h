// Per-thread pools of small heap blocks for the objects a kernel call makes and drops every time
// (a pending op, the reference-count block of an output node, a Buffer): an allocator for
// std::allocate_shared and shared_ptr's control blocks. A block freed on a thread goes to that
// thread's pool (no lock, no atomic: each pool is its thread's alone; a fork() copies only the
// calling thread's); a pool keeps at most kCapacity blocks per size class and frees them at its
// thread's exit, after which that thread uses the heap directly. Issue 9 item 7 (the host cost
// of a cached launch): a pool's pop or push costs a few instructions where malloc/free cost tens.
#pragma once
#include <cstddef>
#include <new>

namespace alloy::block_pool {

inline constexpr size_t kGranule = 64;    // size classes: multiples of 64 bytes
inline constexpr size_t kMaxBlock = 512;  // larger requests go to the heap
inline constexpr size_t kCapacity = 256;  // spare blocks a thread keeps per size class

void* allocate(size_t bytes);
void deallocate(void* p, size_t bytes) noexcept;
/// Spare blocks of the calling thread's pool for requests of `bytes` (tests).
size_t pooled(size_t bytes);

template <class T>
struct Allocator {
  using value_type = T;
  Allocator() = default;
  template <class U>
  Allocator(const Allocator<U>&) noexcept {}
  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    return static_cast<T*>(block_pool::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { block_pool::deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const Allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace alloy::block_pool
