// The built-in ops' primitives. Names are MLX's primitive names, so an MLX graph (.mlxfn) maps
// onto them by name:
//   - Elementwise: one class for every functor op, named after MLX's primitive for it ("Exp",
//     "Add", "Select", ...). Where MLX keeps one primitive with a field, the same name is shared
//     and the state's "op" says which: "Log" (log, log2, log10: MLX's Log::base), "Sqrt" (sqrt,
//     rsqrt: MLX's Sqrt::recip), "BitwiseBinary" (bitwise_and/or/xor, left/right_shift: MLX's
//     BitwiseBinary::op).
//   - Reduce (MLX's Reduce: sum, prod, max, min, all = And, any = Or) over axes; the output keeps
//     the reduced axes as size 1 (the ops squeeze them unless keepdims), as MLX's.
//   - ArgReduce (MLX's ArgReduce: argmax, argmin) over one axis, uint32 indices, axis kept.
// State (version 1): {"op": the op's name}; Reduce adds "axes", ArgReduce "axis".
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ops/functors.h"
#include "ops/op_primitive.h"

namespace alloy::ops {

/// The dtypes of one elementwise application: what each input is promoted to, what the functor
/// computes in, and the output dtype. Throws std::invalid_argument for dtypes the op rejects.
struct ElementwisePlan {
  std::vector<Dtype> via, compute;
  Dtype out;
};
ElementwisePlan plan_elementwise(const OpInfo& op, const std::vector<Dtype>& inputs);

class Elementwise : public OpPrimitive {
 public:
  explicit Elementwise(const std::string& op);
  const char* name() const override { return info_->primitive; }
  std::string label() const override;
  const std::string& op() const { return op_; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  /// d out / d input[k] as an array (for vjp and jvp).
  Array partial(const std::vector<Array>& primals, const Array& out, int k) const;
  std::string op_;
  const OpInfo* info_;
};

/// The accumulator and output dtypes of a reduction of `in` (MLX's: sums of small integers in
/// (u)int32, of floats in their own dtype, computed in float for half/bfloat).
std::pair<Dtype, Dtype> reduce_dtypes(const std::string& op, Dtype in);

class Reduce : public OpPrimitive {
 public:
  Reduce(std::string op, std::vector<int> axes);
  const char* name() const override { return "Reduce"; }
  std::string label() const override { return "Reduce(" + op_ + ")"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  std::string op_;
  std::vector<int> axes_;
};

class ArgReduce : public OpPrimitive {
 public:
  ArgReduce(std::string op, int axis);
  const char* name() const override { return "ArgReduce"; }
  std::string label() const override { return "ArgReduce(" + op_ + ")"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  std::string op_;
  int axis_;
};

/// MLX's Concatenate: inputs of one dtype and rank, equal but along `axis`.
class Concatenate : public OpPrimitive {
 public:
  explicit Concatenate(int axis) : axis_(axis) {}
  const char* name() const override { return "Concatenate"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  int axis_;
};

}  // namespace alloy::ops
