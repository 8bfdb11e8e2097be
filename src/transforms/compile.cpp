// compile(): traces per input signature, optimizes (transforms/compile_passes.h), caches and
// replays. See include/alloy/compile.h and docs/compile.md.
#include "alloy/compile.h"

#include <xxhash.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "transforms/compile_graph.h"
#include "transforms/compile_passes.h"
#include "transforms/trace.h"

namespace alloy {

namespace detail {

// The signature of a call: per input dtype, device, rank and (unless shapeless) dimensions.
using Signature = std::vector<int64_t>;

struct SignatureHash {
  size_t operator()(const Signature& s) const {
    return static_cast<size_t>(XXH3_64bits(s.data(), s.size() * sizeof(int64_t)));
  }
};

struct CompiledGraph {
  transforms::Trace trace;
  // Under shapeless: the trace holds shapes of the call it was traced for (a primitive's
  // shapes_from_state: reshape targets, slice bounds, explicit broadcasts, ...), so it replays
  // only on the traced input shapes (trace.input_shapes); other shapes are traced again.
  bool fixed_shapes = false;
  std::vector<Array> constants;  // made once; arrays are immutable
  // CUDA graph of the replay (transforms/compile_graph.h); after `constants`, so it is destroyed
  // (waiting for its last launch) before the constants its launches read.
  mutable transforms::GraphReplayState gpu;
};

struct CompileState {
  CompiledFunction::Fn fn;
  bool shapeless = false;
  std::mutex mu;
  std::unordered_map<Signature, std::shared_ptr<const CompiledGraph>, SignatureHash> cache;
  std::atomic<int> traces{0};

  // `dims`: with every input's dimensions even when shapeless (then marked, so that such a key
  // never equals a shapeless one).
  Signature signature(const std::vector<Array>& inputs, bool dims) const {
    Signature s;
    s.reserve(2 + inputs.size() * 6);
    if (dims && shapeless) s.push_back(-1);
    s.push_back(static_cast<int64_t>(inputs.size()));
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Array& a = inputs[i];
      if (!a.valid())
        throw std::invalid_argument("compile: input " + std::to_string(i) + " is an empty array");
      Device d = a.device();
      s.push_back(static_cast<int64_t>(a.dtype()));
      s.push_back(static_cast<int64_t>(d.type) * 65536 + d.index);
      s.push_back(a.ndim());
      if (dims) s.insert(s.end(), a.shape().begin(), a.shape().end());
    }
    return s;
  }

  std::shared_ptr<const CompiledGraph> graph(const std::vector<Array>& inputs) {
    auto g = lookup(signature(inputs, !shapeless), inputs);
    if (shapeless && g->fixed_shapes) {
      bool same = true;
      for (size_t i = 0; i < inputs.size() && same; ++i)
        same = inputs[i].shape() == g->trace.input_shapes[i];
      if (!same) g = lookup(signature(inputs, true), inputs);
    }
    return g;
  }

  std::shared_ptr<const CompiledGraph> lookup(Signature key, const std::vector<Array>& inputs) {
    {
      std::lock_guard lock(mu);
      auto it = cache.find(key);
      if (it != cache.end()) return it->second;
    }
    // Traced outside the lock: the function may call other compiled functions (or this one).
    auto g = std::make_shared<CompiledGraph>();
    g->trace = transforms::trace(fn, inputs);
    traces.fetch_add(1, std::memory_order_relaxed);
    // Shapes of the call are in the trace before optimization (folding can turn a primitive
    // holding them into a constant of the traced shape), the elementwise ops' own broadcasts
    // aside, which fusion reads through; after it, in any such primitive fusion left.
    if (shapeless) g->fixed_shapes = !transforms::call_shapes_held(g->trace, true).empty();
    transforms::optimize(g->trace);
    if (shapeless) g->fixed_shapes |= !transforms::call_shapes_held(g->trace, false).empty();
    g->constants = transforms::make_constants(g->trace, std::nullopt);
    std::lock_guard lock(mu);
    return cache.emplace(std::move(key), std::move(g)).first->second;
  }
};

}  // namespace detail

CompiledFunction::CompiledFunction(Fn fn, bool shapeless)
    : state_(std::make_shared<detail::CompileState>()) {
  if (!fn) throw std::invalid_argument("compile: the function is empty");
  state_->fn = std::move(fn);
  state_->shapeless = shapeless;
}

std::vector<Array> CompiledFunction::operator()(const std::vector<Array>& inputs) const {
  auto g = state_->graph(inputs);
  auto out = g->gpu.call(g->trace, inputs, g->constants);
  if (!out.empty()) return out;
  return transforms::replay(g->trace, inputs, std::nullopt, &g->constants);
}

int CompiledFunction::trace_count() const {
  return state_->traces.load(std::memory_order_relaxed);
}

std::vector<std::string> CompiledFunction::graph(const std::vector<Array>& inputs) const {
  auto g = state_->graph(inputs);
  std::vector<std::string> labels;
  for (auto& op : g->trace.ops) labels.push_back(op.primitive->label());
  return labels;
}

int CompiledFunction::constant_count(const std::vector<Array>& inputs) const {
  return static_cast<int>(state_->graph(inputs)->trace.constants.size());
}

namespace detail {
struct CompileAccess {
  static std::shared_ptr<const CompiledGraph> graph(const CompiledFunction& f,
                                                    const std::vector<Array>& inputs) {
    return f.state_->graph(inputs);
  }
};
}  // namespace detail

transforms::GraphReplayState::Info transforms::cuda_graph_info(const CompiledFunction& f,
                                                               const std::vector<Array>& inputs) {
  return detail::CompileAccess::graph(f, inputs)->gpu.info();
}

CompiledFunction compile(CompiledFunction::Fn fn, bool shapeless) {
  return CompiledFunction(std::move(fn), shapeless);
}

}  // namespace alloy
