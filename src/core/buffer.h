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

/// Buffers alive now (live_buffers() in array_node.h).
extern std::atomic<int64_t> g_live_buffers;

struct Buffer {
  void* ptr = nullptr;
  size_t nbytes = 0;
  Device device;
  std::function<void(void*, size_t)> release;  // returns the memory to its allocator

  Buffer(void* p, size_t n, Device d, std::function<void(void*, size_t)> r)
      : ptr(p), nbytes(n), device(d), release(std::move(r)) {
    g_live_buffers.fetch_add(1, std::memory_order_relaxed);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    g_live_buffers.fetch_sub(1, std::memory_order_relaxed);
    if (release && ptr) release(ptr, nbytes);
  }
};

/// Allocates `nbytes` on `device` (CPU: 64-byte aligned host memory; GPU: the CUDA allocator).
std::shared_ptr<Buffer> allocate(Device device, size_t nbytes);

}  // namespace alloy
