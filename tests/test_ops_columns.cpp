// The cooperative column reduction (src/ops/reduce_columns.cpp, CUDA's kernel for leading and
// middle axes) run by the CPU backend through its test hook, against float64 references; its
// texts compile with NVRTC for sm_90. Outputs are poisoned (the suite's global environment).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "alloy/alloy.h"
#include "kernel/custom_kernel.h"
#include "ops/reduce_columns.h"
#include "reduce_reference.h"

using namespace alloy;

namespace {

struct CooperativeColumnsOnCpu {
  CooperativeColumnsOnCpu() {
    ops::set_poison_outputs(true);
    ops::set_cooperative_columns_on_cpu(true);
  }
  ~CooperativeColumnsOnCpu() { ops::set_cooperative_columns_on_cpu(false); }
};

std::vector<double> randoms(size_t n, uint64_t seed, bool integer) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = integer ? std::floor(u(rng) * 40) : u(rng);
  return v;
}

}  // namespace

TEST(OpsColumnReduce, CooperativeKernelMatchesReferenceOnTheCpuBackend) {
  StreamContext on_cpu(Device::cpu());
  CooperativeColumnsOnCpu coop;
  struct Case {
    Shape shape;
    std::vector<int> axes;
  };
  // Leading axes, middle axes, narrow and wide inner parts (tile widths 1..32 and a partial
  // tile), long columns split into pieces, an outer size past CUDA's 65,535 along y.
  std::vector<Case> cases = {
      {{300, 7}, {0}},         {{5, 40, 33}, {1}},     {{4, 3, 50, 2}, {1, 2}},
      {{6000, 3}, {0}},        {{2, 9000, 1, 2}, {1}}, {{3, 5, 8}, {0, 1}},
      {{70000, 2, 1, 2}, {1}}, {{17, 64, 96}, {0}},    {{1, 1, 5}, {0, 1}},
  };
  for (auto& c : cases) {
    int64_t n = 1;
    for (auto d : c.shape) n *= d;
    for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::int32, Dtype::float64}) {
      bool integer = t == Dtype::int32;
      auto v = Array::from_doubles(randoms(n, n + static_cast<int>(t), integer), {n}, t)
                   .to_doubles();  // the values the kernel reads
      Array x = Array::from_doubles(v, c.shape, t);
      for (std::string op : {"sum", "max", "min"}) {
        if (n > 100000 && op != "sum") continue;  // keep the CPU time small
        Array y = op == "sum"   ? sum(x, c.axes, true)
                  : op == "max" ? max(x, c.axes, true)
                                : min(x, c.axes, true);
        auto want = alloy::test::reduce_reference(op, v, c.shape, c.axes);
        auto got = y.to_doubles();
        ASSERT_EQ(got.size(), want.size());
        double rows = static_cast<double>(n) / static_cast<double>(want.size());
        double rtol = t == Dtype::float64 ? 1e-13 : t == Dtype::float16 ? 2e-3 : 1e-6;
        int bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          // Sums of +-1 values: an absolute tolerance scaled by the column length.
          double atol = op == "sum" ? rtol * std::sqrt(rows) * 4 : 0;
          if (t == Dtype::float16 && op == "sum")
            atol = 2e-3 * std::max(1.0, std::fabs(want[i]));  // rounded once to float16
          if (!(std::fabs(got[i] - want[i]) <= atol + (integer ? 0 : 1e-7)) && bad++ < 3)
            ADD_FAILURE() << fmt::format("{} {} ({}) axes ({}): element {} got {}, want {}", op,
                                         dtype_name(t), fmt::join(c.shape, ","),
                                         fmt::join(c.axes, ","), i, got[i], want[i]);
        }
      }
    }
  }
  // prod, all, any, and a bool input.
  Shape s{3, 700, 5};
  auto v = randoms(3 * 700 * 5, 99, false);
  for (auto& e : v) e = 1 + e / 700;
  Array x = Array::from_doubles(v, s, Dtype::float64);
  auto want = alloy::test::reduce_reference("prod", v, s, {1});
  auto got = prod(x, {1}, true).to_doubles();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * want[i]);
  std::vector<double> bits(3 * 700 * 5, 1.0);
  bits[2 * 3500 + 600 * 5 + 4] = 0;
  Array b = Array::from_doubles(bits, s, Dtype::bool_);
  EXPECT_EQ(all(b, {1}, true).to_doubles(), alloy::test::reduce_reference("all", bits, s, {1}));
  EXPECT_EQ(any(logical_not(b), std::vector<int>{0, 1}, true).to_doubles(),
            (std::vector<double>{0, 0, 0, 0, 1}));
  // Empty reduced axis: the identity.
  Array e = Array::from_doubles({}, {0, 4}, Dtype::float32);
  EXPECT_EQ(sum(e, 0).to_doubles(), (std::vector<double>{0, 0, 0, 0}));
}

TEST(OpsColumnReduce, KernelsCompileWithNvrtcForSm90) {
  Array x = Array::from_doubles(randoms(4 * 64 * 8, 3, false), {4, 64, 8}, Dtype::float32);
  int compiled = 0;
  for (auto [op, in, acc] : std::vector<std::tuple<std::string, Dtype, Dtype>>{
           {"sum", Dtype::float16, Dtype::float32},
           {"max", Dtype::bfloat16, Dtype::float32},
           {"min", Dtype::int64, Dtype::int64},
           {"prod", Dtype::float32, Dtype::float32},
           {"all", Dtype::bool_, Dtype::bool_},
           {"sum", Dtype::complex64, Dtype::complex64}}) {
    for (int tile : {1, 8, 32}) {
      auto k = ops::column_reduce_kernel(op, in, acc, acc, tile);
      KernelCall c;
      c.output_shapes = {{4, 1, 8}};
      c.output_dtypes = {acc};
      c.grid = {ops::kColumnThreads * (8 + tile - 1) / tile, 4, 1};
      c.threadgroup = {ops::kColumnThreads, 1, 1};
      std::string why = kernel::compile_call_cubin(MetalKernel(k.spec), {x.astype(in)}, c, "sm_90");
      if (!why.empty()) GTEST_SKIP() << why;
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, 18);
}

TEST(OpsColumnReduce, GpuMatchesCpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU";
  // On CUDA, leading and middle axes take the cooperative column kernel.
  for (auto [shape, axes] : std::vector<std::pair<Shape, std::vector<int>>>{
           {{4096, 3}, {0}}, {{6, 700, 33}, {1}}, {{70000, 2, 2}, {1}}, {{3, 9000, 2}, {0, 1}}}) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    Array x = Array::from_doubles(randoms(n, n, false), shape, Dtype::float32);
    Array xg = x.to(Device::gpu());
    auto want = sum(x, axes).to_doubles(), got = sum(xg, axes).to_doubles();
    auto wmax = max(x, axes).to_doubles(), gmax = max(xg, axes).to_doubles();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-3) << i;
      ASSERT_EQ(gmax[i], wmax[i]) << i;
    }
  }
}
