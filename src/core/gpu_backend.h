// What the core needs from a GPU backend. The CUDA backend (src/backend/cuda) registers one at
// start-up when a driver and a GPU are found; without one, Device::gpu() is unavailable.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "alloy/array.h"
#include "core/buffer.h"

namespace alloy {

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  virtual std::string device_name() const = 0;
  /// Device memory from the caching allocator; freed stream-ordered.
  virtual std::shared_ptr<Buffer> allocate(size_t nbytes) = 0;
  /// Host -> device, enqueued on the current stream (the host memory may be reused at return).
  virtual void copy_to_device(void* dst, const void* src, size_t nbytes) = 0;
  /// Device -> host; synchronizes the stream first (reading an array waits for its producers).
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes) = 0;
  /// Device -> device, enqueued.
  virtual void copy_device(void* dst, const void* src, size_t nbytes) = 0;
  /// Strided copy of `shape` elements of `src_dtype` (element strides) into row-major `dst`,
  /// converted to `dst_dtype` (enqueued).
  virtual void copy_strided(const void* src, const Shape& shape, const Strides& strides,
                            Dtype src_dtype, void* dst, Dtype dst_dtype) = 0;
  /// Fills nbytes with a repeated 8/16/32-bit pattern (enqueued).
  virtual void fill(void* dst, size_t nbytes, uint32_t pattern, int pattern_bytes) = 0;
  /// Waits for the stream; rethrows errors of asynchronous work, naming the kernel.
  virtual void synchronize() = 0;
};

/// The registered GPU backend, or nullptr when there is none (no driver / no GPU).
GpuBackend* gpu_backend();

}  // namespace alloy
