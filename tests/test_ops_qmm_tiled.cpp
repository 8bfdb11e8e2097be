// The tiled quantized product (src/ops/quantized_tiled.cpp, CUDA's kernel for many rows) run by
// the CPU backend through its test hook, against a float64 reference computed from the packed
// codes, scales and biases here; partial tiles along M and N, gather_qmm, both bit widths and
// every group size. Its texts compile with NVRTC for sm_90.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "alloy/alloy.h"
#include "kernel/custom_kernel.h"
#include "ops/kernels.h"
#include "ops/matmul.h"

using namespace alloy;

namespace {

struct TiledOnCpu {
  TiledOnCpu() {
    ops::set_poison_outputs(true);
    ops::set_tiled_qmm_on_cpu(true);
  }
  ~TiledOnCpu() { ops::set_tiled_qmm_on_cpu(false); }
};

std::vector<double> randoms(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Dequantized [rows, K] in float64 from the packed words, scales and biases themselves.
std::vector<double> dequantized(const Array& wq, const Array& scales, const Array& biases,
                                int64_t rows, int64_t K, int gs, int bits) {
  auto q = wq.to_vector<uint32_t>();
  auto s = scales.to_doubles(), b = biases.to_doubles();
  int per = 32 / bits;
  std::vector<double> w(rows * K);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) {
      uint32_t word = q[r * (K / per) + k / per];
      double code = (word >> (bits * (k % per))) & ((1u << bits) - 1u);
      w[r * K + k] = s[r * (K / gs) + k / gs] * code + b[r * (K / gs) + k / gs];
    }
  return w;
}

}  // namespace

TEST(OpsQuantizedTiled, MatchesFloat64ReferenceOnTheCpuBackend) {
  StreamContext on_cpu(Device::cpu());
  TiledOnCpu tiled;
  struct Case {
    int64_t M, N, K;
    int gs, bits;
  };
  for (auto c : std::vector<Case>{{32, 32, 64, 64, 4},
                                  {45, 70, 128, 32, 4},
                                  {100, 33, 256, 128, 8},
                                  {64, 96, 96, 32, 8},
                                  {33, 8, 128, 64, 4}}) {
    for (Dtype t : {Dtype::float32, Dtype::float16}) {
      Array wf = Array::from_doubles(randoms(c.N * c.K, c.N + c.K), {c.N, c.K}, t);
      auto q = quantize(wf, c.gs, c.bits);
      Array x = Array::from_doubles(randoms(c.M * c.K, c.M), {c.M, c.K}, t);
      Array y = quantized_matmul(x, q[0], q[1], q[2], true, c.gs, c.bits);
      auto w = dequantized(q[0], q[1], q[2], c.N, c.K, c.gs, c.bits);
      auto xv = x.to_doubles();
      auto got = y.to_doubles();
      ASSERT_EQ(got.size(), static_cast<size_t>(c.M * c.N));
      double tol = t == Dtype::float16 ? 2e-2 : 1e-4;  // float accumulation; float16 output
      int bad = 0;
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            want += xv[m * c.K + k] * w[n * c.K + k];
            mag += std::fabs(xv[m * c.K + k] * w[n * c.K + k]);
          }
          double g = got[m * c.N + n];
          if (!(std::fabs(g - want) <= tol * (1 + mag) * (t == Dtype::float16 ? 1 : 0.1)) &&
              bad++ < 3)
            ADD_FAILURE() << fmt::format("M {} N {} K {} gs {} bits {} {}: ({}, {}) got {} want {}",
                                         c.M, c.N, c.K, c.gs, c.bits, dtype_name(t), m, n, g, want);
        }
    }
  }
}

TEST(OpsQuantizedTiled, GatherMatchesPerRowKernel) {
  StreamContext on_cpu(Device::cpu());
  const int64_t E = 3, M = 40, N = 36, K = 128;
  Array wf = Array::from_doubles(randoms(E * N * K, 5), {E, N, K}, Dtype::float32);
  auto q = quantize(wf, 64, 4);
  Array x = Array::from_doubles(randoms(2 * M * K, 6), {2, M, K}, Dtype::float32);
  Array lhs = Array::from_doubles({1, 0, 1, 1}, {4}, Dtype::uint32);
  Array rhs = Array::from_doubles({2, 0, 1, 2}, {4}, Dtype::uint32);
  auto per_row = gather_qmm(x, q[0], q[1], q[2], lhs, rhs, true, 64, 4).to_doubles();
  std::vector<double> tiled_out;
  {
    TiledOnCpu tiled;
    tiled_out = gather_qmm(x, q[0], q[1], q[2], lhs, rhs, true, 64, 4).to_doubles();
  }
  ASSERT_EQ(per_row.size(), static_cast<size_t>(4 * M * N));
  ASSERT_EQ(tiled_out.size(), per_row.size());
  for (size_t i = 0; i < per_row.size(); ++i)
    ASSERT_NEAR(tiled_out[i], per_row[i], 1e-4 * (1 + std::fabs(per_row[i]))) << i;
}

TEST(OpsQuantizedTiled, KernelsCompileWithNvrtcForSm90) {
  Array wf = Array::from_doubles(randoms(64 * 128, 1), {64, 128}, Dtype::float32);
  int compiled = 0;
  for (int bits : {4, 8})
    for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::bfloat16}) {
      auto q = quantize(wf.astype(t), 64, bits);
      eval({q[0], q[1], q[2]});
      Array x = Array::from_doubles(randoms(64 * 128, 2), {64, 128}, t);
      KernelCall c;
      c.output_shapes = {{64, 64}};
      c.output_dtypes = {t};
      c.grid = {512, 2, 1};
      c.threadgroup = {256, 1, 1};
      std::string why = kernel::compile_call_cubin(
          MetalKernel(ops::qmm_tiled_kernel(t, t, t, 64, bits, false).spec), {x, q[0], q[1], q[2]},
          c, "sm_90");
      if (!why.empty()) GTEST_SKIP() << why;
      ++compiled;
    }
  EXPECT_EQ(compiled, 6);
}

TEST(OpsQuantizedTiled, GpuMatchesCpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU";
  // On CUDA, M >= 32 rows take the tiled kernel; the CPU's per-row kernel is the reference.
  for (int bits : {4, 8}) {
    Array wf = Array::from_doubles(randoms(96 * 256, 3), {96, 256}, Dtype::float32);
    auto q = quantize(wf, 64, bits);
    Array x = Array::from_doubles(randoms(70 * 256, 4), {70, 256}, Dtype::float32);
    auto want = quantized_matmul(x, q[0], q[1], q[2], true, 64, bits).to_doubles();
    Device g = Device::gpu();
    auto got =
        quantized_matmul(x.to(g), q[0].to(g), q[1].to(g), q[2].to(g), true, 64, bits).to_doubles();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << bits << " " << i;
  }
}
