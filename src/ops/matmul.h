// Matrix products: MLX's Matmul primitive (BLAS: OpenBLAS on the CPU, cuBLAS on CUDA, both loaded
// at run time; src/core/blas.h) and the quantized products in MLX's affine layout
// (QuantizedMatmul, GatherQMM, and the quantize / dequantize helpers), which are generated Metal
// kernels run through the same machinery as the other ops (src/ops/quantized.cpp).
#pragma once
#include <string>
#include <vector>

#include "core/primitive.h"

namespace alloy::ops {

/// MLX's Matmul: inputs [batch..., M, K] and [batch..., K, N] of one floating dtype, batch dims
/// already broadcast (the op adds Broadcast views); output [batch..., M, N].
class Matmul : public Primitive {
 public:
  const char* name() const override { return "Matmul"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override { return PrimitiveState(1); }
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
};

}  // namespace alloy::ops
