// Primitives of MLX's mx.fast transformer ops (src/ops/fast.cpp; public API include/alloy/fast.h),
// named and stated as MLX's so an .mlxfn row maps onto them field by field:
//   - RMSNorm {"eps"}: inputs x, weight (shape (D) or 0-d), output of x's shape and dtype.
//   - LayerNorm {"eps"}: inputs x, weight, bias (each (D) or 0-d).
//   - RoPE {"dims", "traditional", "base", "scale", "forward"}: inputs x, offset (int32, 0-d or one
//     per batch entry), optionally freqs (float32, dims / 2).
//   - ScaledDotProductAttention {"scale", "do_causal", "has_sinks", "output_logsumexp"}: inputs
//     q, k, v, then the mask (broadcast to (B, Hq, Lq, Lk)) when given, then the sinks.
// Each runs one generated Metal kernel (a thread per row) through the metal_kernel machinery on
// the CPU or the GPU; their math is MLX's fallback definitions (mlx/fast.cpp), computed in float
// (double for float64) with MLX's roundings to the output dtype between steps.
#pragma once
#include <vector>

#include "ops/op_primitive.h"

namespace alloy::ops {

class RMSNorm : public OpPrimitive {
 public:
  explicit RMSNorm(float eps) : eps_(eps) {}
  const char* name() const override { return "RMSNorm"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  float eps_;
};

class LayerNorm : public OpPrimitive {
 public:
  explicit LayerNorm(float eps) : eps_(eps) {}
  const char* name() const override { return "LayerNorm"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  float eps_;
};

class RoPE : public OpPrimitive {
 public:
  RoPE(int dims, bool traditional, float base, float scale, bool forward);
  const char* name() const override { return "RoPE"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  int dims_;
  bool traditional_;
  float base_, scale_;
  bool forward_;
};

class ScaledDotProductAttention : public OpPrimitive {
 public:
  ScaledDotProductAttention(float scale, bool do_causal, bool has_sinks, bool output_logsumexp);
  const char* name() const override { return "ScaledDotProductAttention"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  float scale_;
  bool do_causal_, has_sinks_;
};

}  // namespace alloy::ops
