// compile(): a function of arrays traced once per input signature into a graph, optimized
// (constant folding, common subexpressions, dead code, elementwise chains fused into one generated
// kernel) and replayed on later calls without calling the function again, as MLX's mx.compile.
//
//   auto f = alloy::compile([](const std::vector<alloy::Array>& x) {
//     return std::vector<alloy::Array>{alloy::exp(alloy::multiply(x[0], x[1]))};
//   });
//   auto y = f({a, b})[0];  // traced now; later calls with the same signature replay
//
// The signature is each input's dtype, device and shape; with shapeless = true the shapes are
// left out (only the number of dimensions counts), so new sizes replay the same graph: every
// primitive recomputes its output shapes from its inputs, and a custom kernel's grid,
// threadgroup and output shapes follow when they were given as ShapeExprs (a kernel traced with
// constant geometry raises alloy::NotSupported naming it when its input shapes change). A trace
// that holds shapes of its call -- a reshape to a shape, a slice's bounds, an explicit
// broadcast_to (gradients of reductions and broadcasts make them), or a shape the function read
// (note_shape_read) -- replays only on the shapes it was traced for: other shapes trace the
// function again, so results are always those of calling it. See docs/compile.md.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloy/array.h"

namespace alloy {

namespace detail {
struct CompileState;
struct CompileAccess;  // internal introspection (src/transforms/compile.cpp)
}  // namespace detail

/// A compiled function: call it like the original. Copies share one cache of traces.
class CompiledFunction {
 public:
  using Fn = std::function<std::vector<Array>(const std::vector<Array>&)>;
  CompiledFunction(Fn fn, bool shapeless);

  /// The function's outputs for `inputs` (lazy). Traces on the first call with a new input
  /// signature, replays the cached graph afterwards. Exceptions thrown by the function while it
  /// is traced propagate unchanged and nothing is cached for that signature.
  std::vector<Array> operator()(const std::vector<Array>& inputs) const;

  /// How many times the function has been traced (one per distinct input signature).
  int trace_count() const;
  /// The primitives of the optimized graph for inputs like these (tracing it if needed), in
  /// evaluation order, by label: e.g. {"Fused(multiply,exp)"} for one fused chain. A fused chain
  /// runs as one generated kernel; views (Broadcast, Reshape...) launch none.
  std::vector<std::string> graph(const std::vector<Array>& inputs) const;
  /// Number of constants the optimized graph holds (folded values included).
  int constant_count(const std::vector<Array>& inputs) const;

 private:
  friend struct detail::CompileAccess;
  std::shared_ptr<detail::CompileState> state_;
};

/// Compiles `fn` (see the header comment). shapeless: one trace serves inputs of any shapes of
/// the same ranks.
CompiledFunction compile(CompiledFunction::Fn fn, bool shapeless = false);

/// For bindings: user code read the shape of an array that is not evaluated yet (in Python,
/// `x.shape`, `x.size`, `len(x)`...). While a function is traced (compile, export) that makes
/// its trace depend on the shapes of the call (a shapeless compile traces it again for new
/// shapes); elsewhere it does nothing. C++ functions that turn shapes into values or shapes
/// inside a shapeless compile must call it themselves.
void note_shape_read();

}  // namespace alloy
