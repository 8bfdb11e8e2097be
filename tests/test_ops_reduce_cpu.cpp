// The CPU backend's reductions (src/ops/reduce_cpu.cpp: lane kernels over rows, tile kernels over
// columns, their pieces and further passes) against float64 references, over the shapes that
// take each path (small inputs as one task, rows split into pieces, partial tiles, middle axes),
// dtypes (float32/16, bfloat16, float64, int32, bool) and ops; float32 sums keep a blocked
// summation's accuracy; NaN propagates through max/min. Outputs are poisoned.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "alloy/alloy.h"
#include "ops/kernels.h"
#include "reduce_reference.h"

using namespace alloy;

namespace {

std::vector<double> randoms(size_t n, uint64_t seed, double lo, double hi, bool integer) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = integer ? std::floor(u(rng) * 40) : u(rng);
  return v;
}

Array reduce(const std::string& op, const Array& x, const std::vector<int>& axes) {
  if (op == "sum") return sum(x, axes, true);
  if (op == "prod") return prod(x, axes, true);
  if (op == "max") return max(x, axes, true);
  if (op == "min") return min(x, axes, true);
  if (op == "all") return all(x, axes, true);
  return any(x, axes, true);
}

struct Poisoned {
  Poisoned() { ops::set_poison_outputs(true); }
};

}  // namespace

TEST(OpsReduceCpu, RowsAndColumnsMatchReference) {
  StreamContext on_cpu(Device::cpu());
  Poisoned poison;
  struct Case {
    Shape shape;
    std::vector<int> axes;
  };
  std::vector<Case> cases = {
      // Rows: small (one task), many rows (a row per thread), few long rows (pieces, a second
      // pass), lengths off the 32-lane and 512-element blocks, several trailing axes.
      {{7, 33}, {1}},
      {{300, 515}, {1}},
      {{3, 70001}, {1}},
      {{1, 300000}, {0, 1}},
      {{5, 4, 6}, {1, 2}},
      {{129, 9}, {1}},
      // Columns: small, partial tiles (inner 100, 70), narrow inner parts over many rows
      // (blocks of rows, further passes), middle axes, several leading axes.
      {{300, 7}, {0}},
      {{2000, 100}, {0}},
      {{4, 3000, 70}, {1}},
      {{70000, 2}, {0}},
      {{20, 64, 128}, {0}},
      {{9, 11, 700}, {0, 1}},
      {{3, 50, 4, 65}, {1, 2}},
  };
  for (auto& c : cases) {
    int64_t n = 1;
    for (auto d : c.shape) n *= d;
    for (Dtype t :
         {Dtype::float32, Dtype::float16, Dtype::bfloat16, Dtype::int32, Dtype::float64}) {
      bool integer = t == Dtype::int32;
      auto v = Array::from_doubles(randoms(n, n + static_cast<int>(t), -1, 1, integer), {n}, t)
                   .to_doubles();  // the values the kernels read
      Array x = Array::from_doubles(v, c.shape, t);
      for (std::string op : {"sum", "max", "min"}) {
        auto want = alloy::test::reduce_reference(op, v, c.shape, c.axes);
        auto got = reduce(op, x, c.axes).to_doubles();
        ASSERT_EQ(got.size(), want.size());
        double len = static_cast<double>(n) / static_cast<double>(want.size());
        // Output rounding of the dtype; sums of +-1 values add an error growing with the length.
        double rtol = t == Dtype::float64    ? 1e-13
                      : t == Dtype::float16  ? 1e-3
                      : t == Dtype::bfloat16 ? 8e-3
                                             : 1e-6;
        int bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          double tol = integer ? 0
                               : rtol * std::fabs(want[i]) +
                                     (op == "sum" ? 1e-6 * std::sqrt(len) + 1e-7 : 0);
          if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ < 3)
            ADD_FAILURE() << fmt::format("{} {} ({}) axes ({}): element {} got {}, want {}", op,
                                         dtype_name(t), fmt::join(c.shape, ","),
                                         fmt::join(c.axes, ","), i, got[i], want[i]);
        }
      }
    }
  }
}

TEST(OpsReduceCpu, ProdAllAnyMeanAndNan) {
  StreamContext on_cpu(Device::cpu());
  Poisoned poison;
  for (auto [shape, axes] : std::vector<std::pair<Shape, std::vector<int>>>{
           {{40, 3000}, {1}}, {{3000, 40}, {0}}, {{2, 70000}, {1}}, {{5, 20000, 3}, {1}}}) {
    int64_t n = shape[0] * shape[1] * (shape.size() > 2 ? shape[2] : 1);
    auto v = randoms(n, 7, -1, 1, false);
    for (auto& e : v) e = 1 + e / 4096;
    Array x = Array::from_doubles(v, shape, Dtype::float64);
    auto want = alloy::test::reduce_reference("prod", v, shape, axes);
    auto got = prod(x, axes, true).to_doubles();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12 * want[i]) << i;
    // mean in float32 against float64.
    auto wsum = alloy::test::reduce_reference("sum", v, shape, axes);
    auto gmean = mean(x.astype(Dtype::float32), axes, true).to_doubles();
    double len = static_cast<double>(n) / static_cast<double>(wsum.size());
    for (size_t i = 0; i < gmean.size(); ++i) ASSERT_NEAR(gmean[i], wsum[i] / len, 2e-6) << i;
    // all / any over bools: one zero (one non-zero) in the last output.
    std::vector<double> bits(n, 1.0);
    bits[n - 1] = 0;
    Array b = Array::from_doubles(bits, shape, Dtype::bool_);
    EXPECT_EQ(all(b, axes, true).to_doubles(),
              alloy::test::reduce_reference("all", bits, shape, axes));
    std::vector<double> one(n, 0.0);
    one[n - 1] = 1;
    Array o = Array::from_doubles(one, shape, Dtype::bool_);
    EXPECT_EQ(any(o, axes, true).to_doubles(),
              alloy::test::reduce_reference("any", one, shape, axes));
    // A NaN in the middle of the input reaches its max and min, in every lane position.
    auto w = randoms(n, 9, -1, 1, false);
    w[n / 2 + 3] = NAN;
    Array xn = Array::from_doubles(w, shape, Dtype::float32);
    for (std::string op : {"max", "min"}) {
      auto wn = alloy::test::reduce_reference(op, w, shape, axes);
      auto gn = reduce(op, xn, axes).to_doubles();
      int nans = 0;
      for (size_t i = 0; i < gn.size(); ++i) {
        ASSERT_EQ(std::isnan(gn[i]), std::isnan(wn[i])) << op << " " << i;
        nans += std::isnan(gn[i]);
      }
      EXPECT_EQ(nans, 1) << op;
    }
  }
}

TEST(OpsReduceCpu, Float32SumsAreBlocked) {
  // 2^22 positive float32 values summed over one row, over columns and over everything: a
  // sequential float32 sum drifts by ~1e-4 relative here; the blocked sums stay near numpy's
  // pairwise sum (a few float32 ulps).
  StreamContext on_cpu(Device::cpu());
  const int64_t n = int64_t{1} << 22;
  auto v = Array::from_doubles(randoms(n, 5, 0, 1, false), {n}, Dtype::float32).to_doubles();
  double total = 0;
  for (double e : v) total += e;
  Array x = Array::from_doubles(v, {n}, Dtype::float32);
  EXPECT_NEAR(sum(x).item(), total, 4e-7 * total);
  EXPECT_NEAR(sum(x.reshape({1, n}), 1).to_doubles()[0], total, 4e-7 * total);
  auto cols = sum(x.reshape({n / 4, 4}), 0).to_doubles();
  for (int c = 0; c < 4; ++c) {
    double want = 0;
    for (int64_t r = 0; r < n / 4; ++r) want += v[r * 4 + c];
    EXPECT_NEAR(cols[c], want, 4e-7 * want) << c;
  }
}
