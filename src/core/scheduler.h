// Evaluation: runs pending primitives in dependency order on their streams (alloy/stream.h).
//
// eval() walks the graph below the arrays asked for and hands every pending op that is not yet
// handed to a stream, in dependency order, to its stream:
//   - GPU streams: the op is enqueued from the calling thread with the backend's current stream
//     set to the op's stream; an input produced on another GPU stream is waited for with an event
//     (on the device), one produced on a CPU stream's worker is waited for on the host first.
//   - CPU streams: when the caller waits (eval) and the stream's worker has nothing queued, the op
//     runs on the calling thread (no hand-off: the cheap path of a cached call); otherwise it is
//     queued to the stream's worker thread, which waits for the op's inputs (other workers' ops,
//     GPU events) before running it.
// Every handed-off op carries an OpDone that its consumers and readers wait on. The graph (a
// node's `pending`, an op's `inputs`) is read and changed under one mutex; a primitive runs
// without it.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "alloy/stream.h"

namespace alloy {
class Array;
struct ArrayNode;
struct PendingOp;

/// Completion of one op handed to a stream.
struct OpDone {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;     // the op ran (CPU) or was enqueued (GPU)
  std::exception_ptr error;  // it failed
  bool gpu = false;          // enqueued on a GPU stream: completion on the device needs an event
  void* gpu_stream = nullptr;
  int gpu_index = 0;  // the GPU of gpu_stream

  void finish(std::exception_ptr e);
  /// Waits for `finished`; returns the error (null when none).
  std::exception_ptr wait();
  /// The same for a caller of eval/synchronize: runs the interrupt check while it waits, and
  /// returns Interrupted when it threw (core/interrupt_state.h).
  std::exception_ptr wait_interruptible();
};

namespace scheduler {

/// The stream of the calling thread's innermost StreamContext, if any.
std::optional<Stream> context_stream();

/// Whether the node's data can be read (no pending op; a view's buffer is set).
bool is_ready(const ArrayNode& node);

/// The pending ops below `roots`, each once, every op after the ops producing its inputs (an
/// iterative post-order walk: graphs can be deep). An op for which `skip` is true is left out
/// and not walked through. An empty root or input throws std::invalid_argument(`empty_message`).
std::vector<std::shared_ptr<PendingOp>> pending_ops(
    const std::vector<Array>& roots, const std::function<bool(const PendingOp&)>& skip,
    const char* empty_message);

/// The op that will produce the node (null when it is materialized), read under the graph mutex.
std::shared_ptr<PendingOp> pending_of(const ArrayNode& node);

/// eval() of one array; a kernel call on materialized inputs runs without allocating.
void eval_one(const Array& a);

/// The backend handle of a GPU stream (nullptr: the backend's default stream).
void* gpu_handle(const Stream& s);

/// The stream of an external GPU stream handle (registered on first use).
Stream wrap_gpu_stream(void* handle, int gpu_index = 0);

}  // namespace scheduler
}  // namespace alloy
