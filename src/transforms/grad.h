// The gradient transforms' primitives and rules (internal; the API is include/alloy/transforms.h,
// the decisions docs/transforms.md).
//
// - CustomTransforms: the node custom_function puts over a function's outputs. Its inputs are
//   the function's outputs (made row-contiguous) followed by its primals; evaluating it only
//   shares the first inputs' buffers, so the forward graph is an ordinary graph below it. Its vjp
//   and jvp call the user's functions; gradients never flow into the forward-output inputs.
// - StopGradient: an identity view through which no gradient flows.
// - Rules for the core's own primitives (views and moves), whose hooks cannot use the ops (core
//   sits below ops): Broadcast's vjp sums, Slice's vjp pads with zeros, and the views' jvps apply
//   the same view to the tangent.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloy/transforms.h"
#include "core/array_node.h"
#include "core/primitives.h"

namespace alloy::transforms {

class CustomTransforms : public Primitive {
 public:
  CustomTransforms(int num_outputs, ArraysFn fun, std::optional<CustomVjpFn> vjp,
                   std::optional<CustomJvpFn> jvp)
      : num_outputs_(num_outputs),
        fun_(std::move(fun)),
        vjp_(std::move(vjp)),
        jvp_(std::move(jvp)) {}
  const char* name() const override { return "CustomTransforms"; }
  int num_outputs() const { return num_outputs_; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  /// Only the output count: the functions are code, not state (such a node cannot be written to
  /// a file; its forward graph can).
  PrimitiveState state() const override;
  /// The same node only: two functions cannot be compared.
  bool is_equivalent(const Primitive& other) const override { return &other == this; }
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;

 private:
  int num_outputs_;
  ArraysFn fun_;
  std::optional<CustomVjpFn> vjp_;
  std::optional<CustomJvpFn> jvp_;
};

class StopGradient : public ViewPrimitive {
 public:
  const char* name() const override { return "StopGradient"; }
  ViewLayout layout(const Array& input) const override {
    return {input.shape(), input.strides(), input.offset()};
  }
  PrimitiveState state() const override { return PrimitiveState(1); }
};

/// Whether a gradient can flow from `p`'s outputs into its input `index` (StopGradient: never;
/// CustomTransforms: only into its primals).
bool differentiable_input(const Primitive& p, size_t index);

/// The vjp of a core primitive that needs ops (Broadcast, Slice, AsStrided, AsType, ToDevice);
/// std::nullopt for primitives whose own hook applies.
std::optional<std::vector<Array>> core_vjp(const PendingOp& op, const std::vector<Array>& inputs,
                                           const std::vector<Array>& cotangents,
                                           const std::vector<int>& argnums);
/// The jvp of a core primitive (views and moves) or Concatenate; std::nullopt for primitives
/// whose own hook applies.
std::optional<std::vector<Array>> core_jvp(const std::shared_ptr<PendingOp>& op,
                                           const std::vector<Array>& inputs,
                                           const std::vector<Array>& tangents,
                                           const std::vector<int>& argnums);

/// An array of zeros of this shape on `device` that costs one element (a broadcast 0-d array).
Array zeros_of(const Shape& shape, Dtype dtype, Device device);

}  // namespace alloy::transforms
