// Device memory owned by arrays. A Buffer frees itself through its backend when the last array
// (view) that uses it goes away.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "alloy/device.h"

namespace alloy {

struct Buffer {
  void* ptr = nullptr;
  size_t nbytes = 0;
  Device device;
  std::function<void(void*, size_t)> release;  // returns the memory to its allocator

  Buffer(void* p, size_t n, Device d, std::function<void(void*, size_t)> r)
      : ptr(p), nbytes(n), device(d), release(std::move(r)) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (release && ptr) release(ptr, nbytes);
  }
};

/// Allocates `nbytes` on `device` (CPU: 64-byte aligned host memory; GPU: the CUDA allocator).
std::shared_ptr<Buffer> allocate(Device device, size_t nbytes);

}  // namespace alloy
