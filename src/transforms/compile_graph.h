// compile()'s replay through a launch graph (CUDA graphs; docs/compile.md, "CUDA graphs").
//
// A cached graph whose ops all run on the GPU is recorded the first time it replays on
// materialized, row-contiguous GPU inputs: the replay is evaluated at once with the backend
// recording its launches (Backend::begin_recording / end_recording), and when everything it
// enqueued was kernel launches on one stream, later calls with inputs of the same layout make
// ONE pending node (GraphReplay) whose evaluation allocates the outputs and launches the
// recorded graph, with the inputs' and outputs' addresses substituted. Everything else replays
// op by op as before; the decisions are pure functions below, tested without a GPU.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "alloy/compile.h"
#include "core/backend.h"
#include "transforms/trace.h"

namespace alloy::transforms {

/// What the decision needs to know of one input of a call.
struct GraphInput {
  Device device;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  bool materialized = false;  // has its buffer (no pending op)
  bool from_graph = false;    // pending, produced by another graph replay
  static GraphInput of(const Array& a);
};

/// Why `t` can never replay through a launch graph ("" when it may). Checks: graphs enabled,
/// every op on the GPU, at least two ops that launch (views launch none), no device moves,
/// every output a distinct non-view op output.
std::string graph_trace_blocker(const Trace& t);

/// Why a call with `inputs` cannot record a graph (recorded == nullptr) or cannot use the one
/// recorded with `recorded` ("" when it can): inputs on the GPU and row-contiguous; recording
/// needs them materialized (recording evaluates the replay at once), a replay also accepts
/// outputs of other graph replays; a replay needs the recorded shapes, strides and offsets.
std::string graph_input_blocker(const std::vector<GraphInput>& inputs,
                                const std::vector<GraphInput>* recorded);

/// Graphs on or off for the process (default on unless ALLOY_CUDA_GRAPHS=0): tests and
/// benchmarks compare both paths.
bool cuda_graphs_enabled();
void set_cuda_graphs_enabled(bool on);

/// The launch-graph state of one cached trace.
class GraphReplayState {
 public:
  enum class Status { untried, recording, ready, rejected };

  /// The outputs of a call (lazy), through the graph when it is or can be made ready; empty
  /// when this call must replay op by op (the caller does). `constants` are the cache entry's.
  std::vector<Array> call(const Trace& t, const std::vector<Array>& inputs,
                          const std::vector<Array>& constants);

  struct Info {
    Status status = Status::untried;
    std::string reason;   // why rejected (or why the last call did not use the graph)
    int launches = 0;     // kernel nodes in the graph
    int64_t replays = 0;  // calls that used the graph
    int64_t updates = 0;  // node parameter rewrites
  };
  Info info() const;

 private:
  std::vector<Array> record(const Trace& t, const std::vector<Array>& inputs,
                            const std::vector<Array>& constants);
  // The inputs have the recorded layouts and are materialized or outputs of graph replays
  // (graph_input_blocker's verdict for a ready graph, without copies); under mu_.
  bool matches_recorded(const std::vector<Array>& inputs) const;

  mutable std::mutex mu_;
  Status status_ = Status::untried;
  std::string reason_;
  std::vector<GraphInput> recorded_;
  std::vector<Shape> out_shapes_;
  std::vector<Dtype> out_dtypes_;
  std::shared_ptr<LaunchGraph> graph_;
  std::shared_ptr<Primitive> prim_;  // the node every replay puts over its outputs
  int64_t replays_ = 0;
};

/// The launch-graph state of `f`'s cache entry for `inputs` (tracing it if needed).
GraphReplayState::Info cuda_graph_info(const CompiledFunction& f, const std::vector<Array>& inputs);

}  // namespace alloy::transforms
