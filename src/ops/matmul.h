// Matrix products: MLX's Matmul primitive (BLAS: OpenBLAS on the CPU, cuBLAS on CUDA, both loaded
// at run time; src/core/blas.h) and the quantized products in MLX's affine layout
// (QuantizedMatmul, GatherQMM, and the quantize / dequantize helpers), which are generated Metal
// kernels run through the same machinery as the other ops (src/ops/quantized.cpp).
#pragma once
#include <string>
#include <vector>

#include "ops/kernels.h"
#include "ops/op_primitive.h"

namespace alloy::ops {

/// MLX's Matmul: inputs [batch..., M, K] and [batch..., K, N] of one floating dtype, batch dims
/// already broadcast (the op adds Broadcast views); output [batch..., M, N].
class Matmul : public OpPrimitive {
 public:
  const char* name() const override { return "Matmul"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override { return PrimitiveState(1); }
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
};

/// `x` itself when row-contiguous, else a row-major copy made now (for kernels that index their
/// inputs as flat row-major arrays; the ops add lazy copies, this covers graphs built otherwise).
Array row_contiguous_now(const Array& x, bool gpu);

/// The quantized ops' generated kernels (src/ops/quantized.cpp):
///   quantize: one thread per group; outputs w_q (uint32), scales, biases (the input's dtype).
///   dequantize: one thread per output element (inputs w_q, scales, biases).
///   products: inputs x, w, scales, biases (and, with `gather`, uint32 lhs / rhs indices of B
///   elements); transpose: a simdgroup per output element over a (32 N, M, B) grid, else a
///   thread per output over (N, M, B).
OpKernel quantize_kernel(Dtype in, int group_size, int bits);
OpKernel dequantize_kernel(Dtype out, int group_size, int bits);
OpKernel qmm_kernel(Dtype x, Dtype scales, Dtype out, int group_size, int bits, bool transpose,
                    bool gather);

/// The tiled product for many rows (prefill; src/ops/quantized_tiled.cpp), transpose only: a
/// threadgroup of 256 threads per 32 x 32 output tile over a (256 ceil(N / 32), ceil(M / 32), B)
/// grid, x's and W's dequantized 32 x 32 blocks staged in threadgroup memory per step along K.
/// Used on CUDA for M >= kTiledQmmRows; on the CPU only through the test hook.
constexpr int kTiledQmmRows = 32;
OpKernel qmm_tiled_kernel(Dtype x, Dtype scales, Dtype out, int group_size, int bits, bool gather);
void set_tiled_qmm_on_cpu(bool on);
bool tiled_qmm_on_cpu();

}  // namespace alloy::ops
