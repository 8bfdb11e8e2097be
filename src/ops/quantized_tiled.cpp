// The tiled quantized product for many rows of x (prefill): x @ W.T with W in MLX's affine layout
// (see quantized.cpp). A threadgroup of 256 threads computes a 32 x 32 tile of the output: per
// step of 32 along K it stages x's 32 x 32 block (as float) and W's dequantized 32 x 32 block in
// threadgroup memory, then each thread accumulates a 2 x 2 block of outputs from them. Each
// dequantized weight is reused by 32 rows of x (the per-row kernel dequantizes it once per row).
#include <fmt/format.h>

#include <atomic>

#include "ops/matmul.h"

namespace alloy::ops {
namespace {
std::atomic<bool> g_tiled_cpu{false};
}  // namespace

void set_tiled_qmm_on_cpu(bool on) {
  g_tiled_cpu = on;
}
bool tiled_qmm_on_cpu() {
  return g_tiled_cpu;
}

OpKernel qmm_tiled_kernel(Dtype x, Dtype t, Dtype out, int gs, int bits, bool gather) {
  std::string key = fmt::format("qmmtiled|{}|{}|{}|{}|{}|{}", dtype_name(x), dtype_name(t),
                                dtype_name(out), gs, bits, gather);
  return op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = gather ? "alloy_gather_qmm_tiled" : "alloy_quantized_matmul_tiled";
        spec.input_names = {"x", "w", "scales", "biases"};
        if (gather) {
          spec.input_names.push_back("lhs");
          spec.input_names.push_back("rhs");
        }
        spec.output_names = {"out"};
        std::string s = fmt::format(
            "  const int GS = {0};\n"
            "  const int BITS = {1};\n"
            "  const int PER = 32 / BITS;\n"
            "  const uint MASK = (1u << BITS) - 1u;\n"
            "  int64_t M = x_shape[x_ndim - 2];\n"
            "  int64_t K = x_shape[x_ndim - 1];\n"
            "  int64_t G = scales_shape[scales_ndim - 1];\n"
            "  int64_t N = w_shape[w_ndim - 2];\n"
            "  int64_t WC = w_shape[w_ndim - 1];\n"
            "  uint tid = thread_position_in_threadgroup.x;\n"
            "  int64_t n0 = int64_t(threadgroup_position_in_grid.x) * 32;\n"
            "  int64_t m0 = int64_t(threadgroup_position_in_grid.y) * 32;\n"
            "  int64_t b = threadgroup_position_in_grid.z;\n"
            "  int64_t xb = 0;\n"
            "  int64_t wb = 0;\n",
            gs, bits);
        if (gather)
          s += "  int64_t XB = 1;\n"
               "  int64_t WB = 1;\n"
               "  for (int d = 0; d < int(x_ndim) - 2; ++d) XB *= x_shape[d];\n"
               "  for (int d = 0; d < int(w_ndim) - 2; ++d) WB *= w_shape[d];\n"
               // Out-of-range indices are clamped (never read outside the arrays).
               "  xb = metal::min(int64_t(lhs[b]), XB - 1);\n"
               "  wb = metal::min(int64_t(rhs[b]), WB - 1);\n";
        s += fmt::format(
            // Rows padded to 33 floats: the 2 x 2 reads of a simdgroup fall in distinct banks.
            "  threadgroup float xs[32 * 33];\n"
            "  threadgroup float ws[32 * 33];\n"
            "  uint tm = tid / 16;\n"
            "  uint tn = tid % 16;\n"
            "  float c00 = 0.0f;\n"
            "  float c01 = 0.0f;\n"
            "  float c10 = 0.0f;\n"
            "  float c11 = 0.0f;\n"
            "  for (int64_t k0 = 0; k0 < K; k0 += 32) {{\n"
            "    for (uint e = tid; e < 1024; e += 256) {{\n"
            "      uint r = e / 32;\n"
            "      uint c = e % 32;\n"
            "      int64_t m = m0 + r;\n"
            "      int64_t k = k0 + c;\n"
            "      xs[r * 33 + c] = (m < M && k < K) ? static_cast<float>(x[(xb * M + m) * K + k]) "
            ": 0.0f;\n"
            "      int64_t n = n0 + r;\n"
            "      float v = 0.0f;\n"
            "      if (n < N && k < K) {{\n"
            "        int64_t row = wb * N + n;\n"
            "        uint word = w[row * WC + k / PER];\n"
            "        float q = float((word >> (BITS * uint(k % PER))) & MASK);\n"
            "        v = static_cast<float>(scales[row * G + k / GS]) * q +\n"
            "            static_cast<float>(biases[row * G + k / GS]);\n"
            "      }}\n"
            "      ws[r * 33 + c] = v;\n"
            "    }}\n"
            "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
            "    for (uint kk = 0; kk < 32; ++kk) {{\n"
            "      float a0 = xs[(2 * tm) * 33 + kk];\n"
            "      float a1 = xs[(2 * tm + 1) * 33 + kk];\n"
            "      float w0 = ws[(2 * tn) * 33 + kk];\n"
            "      float w1 = ws[(2 * tn + 1) * 33 + kk];\n"
            "      c00 += a0 * w0;\n"
            "      c01 += a0 * w1;\n"
            "      c10 += a1 * w0;\n"
            "      c11 += a1 * w1;\n"
            "    }}\n"
            "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
            "  }}\n"
            "  int64_t m = m0 + 2 * tm;\n"
            "  int64_t n = n0 + 2 * tn;\n"
            "  if (m < M && n < N) out[(b * M + m) * N + n] = static_cast<{0}>(c00);\n"
            "  if (m < M && n + 1 < N) out[(b * M + m) * N + n + 1] = static_cast<{0}>(c01);\n"
            "  if (m + 1 < M && n < N) out[(b * M + m + 1) * N + n] = static_cast<{0}>(c10);\n"
            "  if (m + 1 < M && n + 1 < N) out[(b * M + m + 1) * N + n + 1] = "
            "static_cast<{0}>(c11);\n",
            std::string(msl_type_name(out)));
        spec.source = s;
        return spec;
      },
      true);
}

}  // namespace alloy::ops
