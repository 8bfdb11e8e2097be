// Device memory owned by arrays. A Buffer frees itself through its backend when the last array
// (view) that uses it goes away.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "alloy/device.h"

namespace alloy {

/// Counts buffers alive (live_buffers() in array_node.h): one counter per thread that creates or
/// frees buffers, written by that thread alone with a plain store (no atomic read-modify-write
/// per buffer: issue 9's launch overhead), summed by live_buffers().
namespace live_count {
struct Slot {
  std::atomic<int64_t> n{0};
  Slot* next = nullptr;  // the registry's list (live_count in array.cpp)
};
/// This thread's slot; null before its first buffer and after the thread's exit began.
extern thread_local constinit Slot* t_slot;
/// Adds `d` for a thread with no slot (registers one, or counts on the shared total).
void add_slow(int64_t d);
inline void add(int64_t d) {
  if (Slot* s = t_slot)
    s->n.store(s->n.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  else
    add_slow(d);
}
}  // namespace live_count

struct Buffer {
  void* ptr = nullptr;
  size_t nbytes = 0;
  Device device;
  std::function<void(void*, size_t)> release;  // returns the memory to its allocator
  // Or a plain function does, release_fn(release_owner, ptr, release_arg): an allocator's own
  // (the CUDA allocator's: no std::function to make, call and destroy per buffer, issue 9 item 7).
  void (*release_fn)(void* owner, void* ptr, size_t arg) = nullptr;
  void* release_owner = nullptr;
  size_t release_arg = 0;

  Buffer(void* p, size_t n, Device d, std::function<void(void*, size_t)> r)
      : ptr(p), nbytes(n), device(d), release(std::move(r)) {
    live_count::add(1);
  }
  Buffer(void* p, size_t n, Device d, void (*fn)(void*, void*, size_t), void* owner, size_t arg)
      : ptr(p), nbytes(n), device(d), release_fn(fn), release_owner(owner), release_arg(arg) {
    live_count::add(1);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    live_count::add(-1);
    if (!ptr) return;
    if (release_fn)
      release_fn(release_owner, ptr, release_arg);
    else if (release)
      release(ptr, nbytes);
  }
};

/// Allocates `nbytes` on `device` (CPU: 64-byte aligned host memory; GPU: the CUDA allocator).
std::shared_ptr<Buffer> allocate(Device device, size_t nbytes);

}  // namespace alloy
