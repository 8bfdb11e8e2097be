#include "transforms/compile_graph.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "alloy/errors.h"
#include "core/array_node.h"
#include "core/env.h"
#include "core/primitives.h"
#include "core/scheduler.h"

namespace alloy::transforms {
namespace {

std::atomic<int>& enabled_flag() {
  static std::atomic<int> on = [] { return env::flag("ALLOY_CUDA_GRAPHS", true) ? 1 : 0; }();
  return on;
}

// The node a graph replay puts over a call's outputs: its evaluation allocates them and
// launches the recorded graph. Internal to compile (never traced: see GraphInput).
class GraphReplay final : public Primitive {
 public:
  GraphReplay(std::shared_ptr<LaunchGraph> graph, std::vector<Shape> shapes)
      : graph_(std::move(graph)), shapes_(std::move(shapes)) {}
  const char* name() const override { return "CompiledGraphReplay"; }
  std::vector<Shape> output_shapes(const std::vector<Array>&) const override { return shapes_; }
  PrimitiveState state() const override {
    PrimitiveState s(1);
    s.set("launches", static_cast<int64_t>(graph_->launches()));
    return s;
  }
  bool is_equivalent(const Primitive& other) const override { return &other == this; }
  void eval_cpu(const std::vector<Array>&, std::vector<Array>&) override {
    throw Error(name(), "a compiled graph replay runs on the GPU only");
  }
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override {
    constexpr size_t kInline = 32;
    const void* small[kInline];
    std::vector<const void*> large;
    size_t n = inputs.size() + outputs.size();
    const void** ptrs = small;
    if (n > kInline) {
      large.resize(n);
      ptrs = large.data();
    }
    size_t k = 0;
    for (auto& in : inputs) ptrs[k++] = node_of(in)->data();
    for (auto& out : outputs) {
      allocate_output(out);
      ptrs[k++] = node_of(out)->data();
    }
    graph_->launch(ptrs, n);
  }

 private:
  std::shared_ptr<LaunchGraph> graph_;
  std::vector<Shape> shapes_;
};

bool same_layout(const GraphInput& a, const GraphInput& b) {
  return a.device == b.device && a.shape == b.shape && a.strides == b.strides &&
         a.offset == b.offset;
}

}  // namespace

GraphInput GraphInput::of(const Array& a) {
  GraphInput g;
  auto n = node_of(a);
  g.device = n->device;
  g.shape = n->shape;
  g.strides = n->strides;
  g.offset = n->offset;
  auto p = scheduler::pending_of(*n);
  g.materialized = !p && n->buffer;
  g.from_graph = p && dynamic_cast<const GraphReplay*>(p->primitive.get()) != nullptr;
  return g;
}

bool cuda_graphs_enabled() {
  return enabled_flag().load(std::memory_order_relaxed) != 0;
}

void set_cuda_graphs_enabled(bool on) {
  enabled_flag().store(on ? 1 : 0, std::memory_order_relaxed);
}

std::string graph_trace_blocker(const Trace& t) {
  if (!cuda_graphs_enabled()) return "CUDA graphs are disabled";
  int launching = 0;
  for (auto& op : t.ops) {
    if (op.device != Device::gpu(0))
      return fmt::format("{} runs on the {}", op.primitive->label(), op.device.str());
    if (dynamic_cast<const ToDevice*>(op.primitive.get()))
      return "the function moves data between devices";
    if (!dynamic_cast<const ViewPrimitive*>(op.primitive.get())) ++launching;
  }
  if (launching < 2) return "fewer than two ops launch kernels (a graph saves nothing)";
  // Constants stay (they are the cache entry's): small host ones travel inside the recorded
  // launches' parameter blocks, larger ones are moved by a copy, which the recording refuses.
  for (size_t i = 0; i < t.outputs.size(); ++i) {
    const ValueRef& r = t.outputs[i];
    if (r.kind != ValueRef::Kind::op)
      return fmt::format("output {} is an input or a constant of the function", i);
    if (dynamic_cast<const ViewPrimitive*>(t.ops.at(r.index).primitive.get()))
      return fmt::format("output {} is a view", i);
    for (size_t j = 0; j < i; ++j)
      if (t.outputs[j] == r) return fmt::format("outputs {} and {} are the same array", j, i);
  }
  return "";
}

std::string graph_input_blocker(const std::vector<GraphInput>& inputs,
                                const std::vector<GraphInput>* recorded) {
  if (recorded && recorded->size() != inputs.size()) return "another number of inputs";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const GraphInput& g = inputs[i];
    if (g.device != Device::gpu(0))  // (graphs are recorded on GPU 0's backend)
      return fmt::format("input {} is on the {}", i, g.device.str());
    if (!g.materialized && !(recorded && g.from_graph))
      return fmt::format("input {} is not computed yet", i);
    if (g.strides != row_major_strides(g.shape))
      return fmt::format("input {} is not row-contiguous", i);
    if (recorded && !same_layout(g, (*recorded)[i]))
      return fmt::format("input {} has another shape or layout than when the graph was recorded",
                         i);
  }
  return "";
}

std::vector<Array> GraphReplayState::call(const Trace& t, const std::vector<Array>& inputs,
                                          const std::vector<Array>& constants) {
  std::unique_lock lock(mu_);
  if (status_ == Status::rejected || status_ == Status::recording) return {};
  if (!gpu_backend() || !cuda_graphs_enabled()) return {};
  if (status_ == Status::untried) {
    std::string why = graph_trace_blocker(t);
    if (!why.empty()) {
      status_ = Status::rejected;
      reason_ = std::move(why);
      return {};
    }
  }
  if (status_ == Status::ready && matches_recorded(inputs)) {
    // The common case, without copying shapes: one node over the whole call.
    ++replays_;
    auto prim = prim_;
    lock.unlock();
    return make_pending(std::move(prim), inputs, out_shapes_, out_dtypes_, Device::gpu());
  }
  std::vector<GraphInput> in;
  in.reserve(inputs.size());
  for (auto& a : inputs) in.push_back(GraphInput::of(a));
  std::string why = graph_input_blocker(in, status_ == Status::ready ? &recorded_ : nullptr);
  if (status_ == Status::ready && why.empty())
    why = "internal: the inputs match the recorded ones only by the slow check";
  if (!why.empty()) {
    reason_ = std::move(why);
    return {};
  }
  status_ = Status::recording;
  recorded_ = std::move(in);
  lock.unlock();
  return record(t, inputs, constants);
}

bool GraphReplayState::matches_recorded(const std::vector<Array>& inputs) const {
  if (inputs.size() != recorded_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ArrayNode& n = *node_of(inputs[i]);
    const GraphInput& r = recorded_[i];
    if (n.device != r.device || n.offset != r.offset || n.shape != r.shape ||
        n.strides != r.strides)
      return false;
    auto p = scheduler::pending_of(n);
    if (p ? !dynamic_cast<const GraphReplay*>(p->primitive.get()) : !n.buffer) return false;
  }
  return true;
}

std::vector<Array> GraphReplayState::record(const Trace& t, const std::vector<Array>& inputs,
                                            const std::vector<Array>& constants) {
  Backend& gpu = *gpu_backend();
  auto finish = [&](Status s, std::string why) {
    std::lock_guard lock(mu_);
    status_ = s;
    reason_ = std::move(why);
  };
  std::vector<Array> out;
  try {
    out = replay(t, inputs, std::nullopt, &constants);
  } catch (...) {
    finish(Status::untried, "the replay failed");
    throw;
  }
  if (!gpu.begin_recording()) {
    finish(Status::rejected, "the GPU backend cannot record launches (no CUDA graph API)");
    return out;
  }
  std::string why;
  try {
    eval(out);
  } catch (...) {
    // The error belongs to the outputs' evaluation: reading them reports it (the failed ops keep
    // it, or run again), as for a lazy replay; nothing is recorded.
    gpu.end_recording({}, &why);
    finish(Status::untried, "the recorded replay failed");
    return out;
  }
  std::vector<ExternalRange> external;
  for (auto& a : inputs) external.push_back({node_of(a)->data(), a.nbytes()});
  for (size_t i = 0; i < out.size(); ++i) {
    auto n = node_of(out[i]);
    if (n->offset != 0 || !out[i].is_row_contiguous() || n->buffer->nbytes < out[i].nbytes()) {
      gpu.end_recording({}, &why);
      finish(Status::rejected, fmt::format("output {} does not own its buffer", i));
      return out;
    }
    external.push_back({n->data(), out[i].nbytes()});
  }
  std::shared_ptr<LaunchGraph> graph = gpu.end_recording(external, &why);
  if (graph) {
    for (size_t i = 0; i < out.size(); ++i)
      if (!graph->uses(inputs.size() + i)) {
        why = fmt::format("no kernel of the graph writes output {}", i);
        graph.reset();
        break;
      }
  }
  if (!graph) {
    finish(Status::rejected, why);
    return out;
  }
  std::lock_guard lock(mu_);
  out_shapes_.clear();
  out_dtypes_.clear();
  for (auto& o : out) {
    out_shapes_.push_back(o.shape());
    out_dtypes_.push_back(o.dtype());
  }
  graph_ = std::move(graph);
  prim_ = std::make_shared<GraphReplay>(graph_, out_shapes_);
  status_ = Status::ready;
  reason_.clear();
  return out;
}

GraphReplayState::Info GraphReplayState::info() const {
  std::lock_guard lock(mu_);
  Info i;
  i.status = status_;
  i.reason = reason_;
  i.replays = replays_;
  if (graph_) {
    i.launches = graph_->launches();
    i.updates = graph_->updates();
  }
  return i;
}

}  // namespace alloy::transforms
