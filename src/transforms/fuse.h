// Fusion of elementwise chains (compile's last pass).
//
// A chain is a connected set of Elementwise ops (the built-in functor ops of src/ops) of one
// output shape and device whose intermediate values are used only inside it, ending in one op
// (the sink) whose value leaves it. fuse_elementwise() replaces each chain of two or more ops by a
// FusedElementwise primitive over the chain's outside inputs. FusedElementwise generates ONE
// Metal kernel for its program: each input read once per thread, then every op's functor applied
// in order in registers, each intermediate rounded to the dtype the unfused op would have
// produced (so float16/bfloat16 chains round as eager evaluation does), and the sink written
// (the host compiler may still contract a * b + c into an FMA). The kernel is
// a metal_kernel specification run like the ops' own kernels (src/ops/kernels.h): same signature
// writer, variant cache, translator and CPU/NVRTC JITs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/primitive.h"
#include "ops/kernels.h"
#include "transforms/trace.h"

namespace alloy::transforms {

/// One op of a fused program: the functor op name and its arguments, each either an input of
/// the fused primitive (>= 0) or an earlier node (-1 - node index).
struct FusedNode {
  std::string op;
  std::vector<int64_t> args;
};

class FusedElementwise : public Primitive {
 public:
  explicit FusedElementwise(std::vector<FusedNode> nodes);
  const char* name() const override { return "FusedElementwise"; }
  /// "Fused(multiply,exp)": the ops in order.
  std::string label() const override;
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  /// Version 1: {"ops": [op names], "args": [[argument codes]]}.
  PrimitiveState state() const override;
  static std::shared_ptr<FusedElementwise> from_state(const PrimitiveState& s);
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;

  const std::vector<FusedNode>& nodes() const { return nodes_; }
  /// The output dtype for inputs of these dtypes (the sink's, by the ops' promotion rules).
  Dtype output_dtype(const std::vector<Dtype>& inputs) const;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu);
  std::vector<FusedNode> nodes_;
};

/// The generated kernel of a fused program for these inputs (layouts from their layouts; tests
/// compile its CUDA translation with NVRTC).
ops::OpKernel fused_kernel(const std::vector<FusedNode>& nodes, const std::vector<Array>& inputs,
                           const Shape& out_shape);

/// Replaces every elementwise chain of two or more ops in `t` by one FusedElementwise op.
void fuse_elementwise(Trace& t);

}  // namespace alloy::transforms
