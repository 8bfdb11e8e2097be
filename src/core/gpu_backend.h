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
  /// Waits for every stream; rethrows errors of asynchronous work, naming the kernel.
  virtual void synchronize() = 0;

  // Streams and events. A stream handle is the backend's own (a CUstream); nullptr stands for
  // the backend's default stream. Enqueue calls above go to the calling thread's current stream.
  /// A new stream, owned by the backend for the rest of the process.
  virtual void* create_stream() = 0;
  /// Makes an external stream (e.g. PyTorch's) usable as a stream of Alloy's.
  virtual void register_stream(void* stream) = 0;
  /// The stream enqueue calls of the calling thread go to (nullptr: the default stream).
  virtual void set_current_stream(void* stream) = 0;
  /// Waits for the work enqueued on `stream`; rethrows its errors as synchronize() does.
  virtual void synchronize_stream(void* stream) = 0;
  /// An event that completes when the work enqueued on `stream` so far has completed.
  virtual std::shared_ptr<void> record_event(void* stream) = 0;
  /// Makes later work on `stream` wait for `event` (on the device; the host does not block).
  virtual void stream_wait(void* stream, const std::shared_ptr<void>& event) = 0;
  /// Blocks the host until `event` completed.
  virtual void event_synchronize(const std::shared_ptr<void>& event) = 0;
};

/// The registered GPU backend, or nullptr when there is none (no driver / no GPU).
GpuBackend* gpu_backend();

}  // namespace alloy
