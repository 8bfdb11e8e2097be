// Streams, as MLX has them: a stream is a queue of work on one device. Work on one stream runs in
// the order it was evaluated; work on different streams may overlap, and is ordered only by the
// arrays it shares (events between the streams, inserted by evaluation). Every device has a
// default stream; new_stream() makes more.
//   - CPU streams: eval() runs the work and returns when it is done (MLX); async_eval() hands it
//     to the stream's own worker thread and returns at once: the caller waits only when it reads
//     the data (or calls synchronize).
//   - GPU streams: one CUDA stream each (created by Alloy, or an external one wrapped with
//     cuda::stream_from_handle, such as PyTorch's current stream); work is enqueued and runs
//     asynchronously; reading data waits for it.
// An error raised by queued work surfaces at the next synchronize() of its stream and at every
// read of the arrays it should have produced; it names the kernel, and the stream stays usable.
#pragma once
#include <string>
#include <variant>

#include "alloy/device.h"

namespace alloy {

struct Stream {
  int index = 0;  // process-wide, unique among the streams of all devices
  Device device;

  constexpr Stream() = default;
  constexpr Stream(int i, Device d) : index(i), device(d) {}
  bool operator==(const Stream&) const = default;
  std::string str() const;  // "Stream(gpu:0, 1)"
};

/// Where an operation runs: a stream, a device (its default stream), or neither (the default
/// stream of the default device). MLX's `stream=` argument.
using StreamOrDevice = std::variant<std::monostate, Stream, Device>;

/// The default stream of `device` (std::invalid_argument for a GPU that is not available).
Stream default_stream(Device device);
/// Makes `s` the default stream of its device.
void set_default_stream(Stream s);
/// A new stream on `device`.
Stream new_stream(Device device);
/// The stream `s` names (see StreamOrDevice).
Stream to_stream(const StreamOrDevice& s);
/// Within its scope, on the calling thread, operations given neither a stream nor a device run on
/// `s` (a device: its default stream) and default_device() is its device: MLX's StreamContext
/// (Python: `with alloy.stream(s):`). Scopes nest; each restores the previous one.
class StreamContext {
 public:
  explicit StreamContext(const StreamOrDevice& s);
  ~StreamContext();
  StreamContext(const StreamContext&) = delete;
  StreamContext& operator=(const StreamContext&) = delete;

 private:
  bool had_previous_ = false;
  Stream previous_;
};

/// Waits for all work evaluated on `s`; rethrows the first error of that work since the last
/// synchronize of `s` (alloy::Error naming the kernel), after which the stream is usable again.
void synchronize(Stream s);

}  // namespace alloy
