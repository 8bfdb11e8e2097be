// Reductions over rows (the last axes of a row-contiguous input) as cooperative kernels: a
// threadgroup per row (or per piece of a long row), each thread striding over the row (coalesced
// on CUDA), combined with simd shuffles and one threadgroup exchange. Used on CUDA, where one
// thread per output (kernels.cpp) leaves most of the GPU idle. Softmax and logsumexp over the
// last axis are fused into one such kernel (MLX's Softmax / LogSumExp primitives).
#pragma once
#include <string>
#include <vector>

#include "ops/kernels.h"
#include "ops/op_primitive.h"

namespace alloy::ops {

/// How a cooperative row kernel covers [N, L]: `threads` per row (a power of two in [32, 256],
/// about 32 elements per thread), `rows` per threadgroup (more than one only when a row has one
/// simdgroup: no threadgroup memory or barrier then), 64-bit indices when N * L needs them.
/// Measured on an H100 against torch (docs/performance.md): fewer threads per row with more
/// elements each, and several short rows per threadgroup, beat a threadgroup of 1,024 per row.
struct RowLayout {
  int threads = 32;
  int rows = 1;
  bool wide = true;
};
RowLayout row_layout(int64_t rows, int64_t len);

/// Reduction `op` (sum, prod, max, min) of an [N, L] row-major input with `layout`: threadgroups
/// of threads * rows threads along x, P of them along x per group of `rows` rows, the groups
/// along y (and z past 65,535): threadgroup (p, g) reduces the p-th of P equal pieces of rows
/// g * rows ... into out[r * P + p] (P = 1: one piece per row).
OpKernel row_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out,
                           RowLayout layout = {});

/// Whether row_reduce_kernel handles this reduction (sum/prod/max/min with a 32- or 64-bit
/// accumulator).
bool row_reduce_supported(const std::string& op, Dtype acc);

/// Evaluates the reduction of `x` ([N, L] row-major) over its rows into outputs[0] (N elements)
/// with row_reduce_kernel: long rows in few outputs first reduce pieces on many threadgroups.
void reduce_rows(const std::string& op, const Array& x, Dtype acc, std::vector<Array>& outputs,
                 bool gpu);

/// Softmax (or logsumexp when `log`) over the last axis of an [N, L] input, computing in
/// `compute`: cooperative (a threadgroup per row: an online max / sum pair combined across
/// threads, then the outputs) or one thread per row (the CPU's form).
OpKernel row_softmax_kernel(bool log, Dtype in, Dtype compute, Dtype out, bool cooperative,
                            RowLayout layout = {});

/// MLX's Softmax / LogSumExp over the last axis (LogSumExp keeps it as size 1).
class RowSoftmax : public OpPrimitive {
 public:
  RowSoftmax(bool log, bool precise) : log_(log), precise_(precise) {}
  const char* name() const override { return log_ ? "LogSumExp" : "Softmax"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  bool log_, precise_;
};

/// softmax / logsumexp of `x` (already of its compute dtype) over its last axis as one
/// RowSoftmax node on x's device (or the stream given); the caller checked the axes.
Array row_softmax(const Array& x, bool log, bool precise, StreamOrDevice s);

/// Test hook: the fused softmax/logsumexp on the CPU uses the cooperative (GPU) kernel instead
/// of the thread-per-row one, and Reduce uses reduce_rows on the CPU too, so the GPU's texts are
/// checked on the CPU backend.
void set_cooperative_rows_on_cpu(bool on);
bool cooperative_rows_on_cpu();

}  // namespace alloy::ops
