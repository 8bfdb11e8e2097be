// Scans, indexing, functional updates, random bits and printing (src/ops/scan.cpp, indexing.cpp,
// random.cpp, print.cpp) against float64 references computed here, over dtypes and layouts
// (contiguous, transposed and stepped views, broadcasts, empty arrays); gradients against finite
// differences; primitive state round trips; the generated kernels compiled with NVRTC for sm_90.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <tuple>

#include "alloy/alloy.h"
#include "core/array_node.h"
#include "kernel/custom_kernel.h"
#include "ops/kernels.h"
#include "ops/misc_primitives.h"

using namespace alloy;

namespace {

struct PoisonOutputs : ::testing::Environment {
  void SetUp() override { ops::set_poison_outputs(true); }
};
const auto* const kPoison = ::testing::AddGlobalTestEnvironment(new PoisonOutputs);

std::vector<double> randoms(size_t n, double lo, double hi, uint64_t seed, bool integer = false) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = integer ? std::floor(u(rng)) : u(rng);
  return v;
}

double tol(Dtype t) {
  switch (t) {
    case Dtype::float16:
      return 4e-3;
    case Dtype::bfloat16:
      return 3e-2;
    case Dtype::float32:
      return 1e-5;
    case Dtype::float64:
      return 1e-12;
    default:
      return 0;
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok = std::isnan(want[i]) ? std::isnan(got[i])
                                  : std::fabs(got[i] - want[i]) <= rtol * (1 + std::fabs(want[i]));
    if (!ok && bad++ < 4)
      ADD_FAILURE() << what << fmt::format(": element {}: got {}, expected {}", i, got[i], want[i]);
  }
  EXPECT_EQ(bad, 0) << what;
}

// Row-major strides of a shape.
Strides rm(const Shape& s) {
  Strides st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

// Reference scan over `axis` of row-major values `v` of `shape`.
std::vector<double> ref_scan(const std::string& op, const std::vector<double>& v,
                             const Shape& shape, int axis, bool reverse, bool inclusive, Dtype t) {
  std::vector<double> out(v.size());
  int64_t n = shape[axis], inner = rm(shape)[axis];
  int64_t rows = n == 0 ? 0 : static_cast<int64_t>(v.size()) / n;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = (r / inner) * n * inner + r % inner;
    double acc = op == "sum" ? 0 : op == "prod" ? 1 : op == "max" ? -INFINITY : INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = reverse ? n - 1 - j : j;
      double x = v[base + k * inner];
      auto step = [&] {
        acc = op == "sum"    ? acc + x
              : op == "prod" ? acc * x
              : op == "max"  ? std::max(acc, x)
                             : std::min(acc, x);
      };
      if (inclusive) step();
      out[base + k * inner] = acc;
      if (!inclusive) step();
    }
  }
  return out;
}

}  // namespace

TEST(OpsScan, MatchReferencesOverDtypesLayoutsAndDirections) {
  for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::bfloat16, Dtype::float64, Dtype::int32,
                  Dtype::int8, Dtype::uint16, Dtype::int64}) {
    bool integer = !is_floating(t);
    Shape shape{3, 5, 4};
    auto v = randoms(60, integer ? -3 : 0.5, integer ? 4 : 1.5, 1, integer);
    if (t == Dtype::uint16)
      for (auto& x : v) x = std::fabs(x);
    Array base = Array::from_doubles(v, shape, t, Device::cpu());
    std::vector<double> rv = base.to_doubles();
    // A transposed view: reference on its row-major values.
    Array tr = base.transpose({2, 0, 1});
    std::vector<double> trv = tr.contiguous().to_doubles();
    // Every direction and axis in float32; one combination per op in the other dtypes (each
    // combination is a kernel to build).
    struct Combo {
      int axis;
      bool reverse, inclusive;
    };
    std::vector<Combo> combos = {{1, false, true}};
    if (t == Dtype::float32) combos = {{0, false, true}, {2, true, false}, {1, true, true}};
    for (std::string op : {"sum", "prod", "max", "min"}) {
      for (auto [axis_b, reverse_b, inclusive_b] : combos) {
        // Plain copies: clang 14 cannot capture structured bindings in lambdas.
        int axis = axis_b;
        bool reverse = reverse_b, inclusive = inclusive_b;
        {
          {
            if (!inclusive && (op == "max" || op == "min")) continue;  // identity is +-inf/limits
            auto f = [&](const Array& a) {
              return op == "sum"    ? cumsum(a, axis, reverse, inclusive)
                     : op == "prod" ? cumprod(a, axis, reverse, inclusive)
                     : op == "max"  ? cummax(a, axis, reverse, inclusive)
                                    : cummin(a, axis, reverse, inclusive);
            };
            std::string what = fmt::format("cum{} {} axis {} rev {} incl {}", op, dtype_name(t),
                                           axis, reverse, inclusive);
            Array y = f(base);
            EXPECT_EQ(y.dtype(), t) << what;
            auto want = ref_scan(op, rv, shape, axis, reverse, inclusive, t);
            // Integer products overflow in the reference only for large rows: wrap check
            // below is exact for these small values.
            double rt = tol(t) * (op == "prod" ? 8 : 2);
            if (t == Dtype::float16 || t == Dtype::bfloat16) {
              // The reference rounded to the dtype per output, as the kernel's float accumulator.
              want = Array::from_doubles(want, shape, t, Device::cpu()).to_doubles();
            }
            if (integer && op == "prod") {
              // Wrap to the integer width as the kernel's arithmetic does.
              want = Array::from_doubles(want, shape, Dtype::float64, Device::cpu())
                         .astype(Dtype::int64)
                         .astype(t)
                         .astype(Dtype::float64)
                         .to_doubles();
            }
            expect_close(y.to_doubles(), want, rt, what);
            Array yt = f(tr);
            auto want_t = ref_scan(op, trv, tr.shape(), axis, reverse, inclusive, t);
            if (t == Dtype::float16 || t == Dtype::bfloat16)
              want_t = Array::from_doubles(want_t, tr.shape(), t, Device::cpu()).to_doubles();
            if (integer && op == "prod")
              want_t = Array::from_doubles(want_t, tr.shape(), Dtype::float64, Device::cpu())
                           .astype(Dtype::int64)
                           .astype(t)
                           .astype(Dtype::float64)
                           .to_doubles();
            expect_close(yt.to_doubles(), want_t, rt, what + " transposed");
          }
        }
      }
    }
  }
  // bool: cumsum gives int32 counts; flattened when no axis; empty and broadcast inputs.
  Array b = Array::from_doubles({1, 0, 1, 1}, {2, 2}, Dtype::bool_);
  Array cb = cumsum(b);
  EXPECT_EQ(cb.dtype(), Dtype::int32);
  EXPECT_EQ(cb.to_doubles(), (std::vector<double>{1, 1, 2, 3}));
  EXPECT_EQ(cumprod(b, 1).dtype(), Dtype::bool_);
  EXPECT_EQ(cumsum(Array::from_doubles({}, {0, 3}, Dtype::float32), 0).shape(), (Shape{0, 3}));
  Array bc = broadcast_to(Array::from_doubles({1, 2, 3}, {3}, Dtype::int32), {2, 3});
  EXPECT_EQ(cumsum(bc, 0).to_doubles(), (std::vector<double>{1, 2, 3, 2, 4, 6}));
  EXPECT_EQ(
      cumsum(Array::from_doubles({1, 2, 3, 4}, {4}, Dtype::int32), 0, false, false).to_doubles(),
      (std::vector<double>{0, 1, 3, 6}));
  EXPECT_THROW(cumsum(Array::from_doubles({1}, {}, Dtype::float32), 0), std::invalid_argument);
  EXPECT_THROW(cumsum(bc, 2), std::invalid_argument);
}

TEST(OpsIndexing, TakeAndTakeAlongAxisMatchReferences) {
  for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::int64, Dtype::uint8, Dtype::bool_}) {
    auto v = randoms(24, 0, 100, 2, true);
    Array a = Array::from_doubles(v, {4, 6}, t);
    std::vector<double> av = a.to_doubles();
    // Every index dtype with float32 data; int32 indices otherwise (each pair is a kernel).
    std::vector<Dtype> index_dtypes = {Dtype::int32};
    if (t == Dtype::float32)
      index_dtypes = {Dtype::int32, Dtype::uint32, Dtype::int64, Dtype::int8};
    for (Dtype it : index_dtypes) {
      bool sgn = is_signed(it);
      std::vector<double> iv =
          sgn ? std::vector<double>{-1, 2, 0, 5, -6, 3} : std::vector<double>{5, 2, 0, 5, 1, 3};
      Array idx = Array::from_doubles(iv, {2, 3}, it);
      // Along axis 1: shape (4, 2, 3).
      Array y = take(a, idx, 1);
      ASSERT_EQ(y.shape(), (Shape{4, 2, 3}));
      std::vector<double> want;
      for (int r = 0; r < 4; ++r)
        for (double x : iv) want.push_back(av[r * 6 + static_cast<int>(x < 0 ? x + 6 : x)]);
      EXPECT_EQ(y.to_doubles(), want) << dtype_name(t) << " " << dtype_name(it);
      // Along axis 0 (indices < 4) of a transposed view, and flattened.
      Array idx0 = Array::from_doubles({3, 0, -1}, {3}, Dtype::int32);
      Array at = a.transpose();  // (6, 4)
      Array y0 = take(at, idx0, 1);
      ASSERT_EQ(y0.shape(), (Shape{6, 3}));
      want.clear();
      for (int r = 0; r < 6; ++r)
        for (int c : {3, 0, 3}) want.push_back(av[c * 6 + r]);
      EXPECT_EQ(y0.to_doubles(), want);
      Array yf = take(a, idx);
      want.clear();
      for (double x : iv) want.push_back(av[static_cast<int>(x < 0 ? x + 24 : x)]);
      EXPECT_EQ(yf.to_doubles(), want);
    }
    // take_along_axis: indices broadcast against a off the axis.
    Array ia = Array::from_doubles({0, 5, 2, 1, -1, 3}, {1, 6}, Dtype::int32);
    Array ta = take_along_axis(a, ia, 1);
    ASSERT_EQ(ta.shape(), (Shape{4, 6}));
    std::vector<double> want;
    for (int r = 0; r < 4; ++r)
      for (int c : {0, 5, 2, 1, 5, 3}) want.push_back(av[r * 6 + c]);
    EXPECT_EQ(ta.to_doubles(), want);
    // Along axis 0 with argmax-like indices (as argsort users do).
    Array i0 = Array::from_doubles({3, 1, 0, 2, 2, 1}, {1, 6}, Dtype::uint32);
    Array t0 = take_along_axis(a, i0, 0);
    want.clear();
    int rows[] = {3, 1, 0, 2, 2, 1};
    for (int c = 0; c < 6; ++c) want.push_back(av[rows[c] * 6 + c]);
    EXPECT_EQ(t0.to_doubles(), want);
  }
  // Scalars and empty.
  Array a = Array::from_doubles({10, 20, 30}, {3}, Dtype::float32);
  EXPECT_EQ(take(a, 1, 0).item(), 20);
  EXPECT_EQ(take(a, 1, 0).ndim(), 0);
  EXPECT_EQ(take(a, Array::from_doubles({}, {0}, Dtype::int32), 0).shape(), (Shape{0}));
  EXPECT_THROW(take(a, Array::from_doubles({1}, {1}, Dtype::float32), 0), std::invalid_argument);
  EXPECT_THROW(take_along_axis(a, Array::from_doubles({1}, {1, 1}, Dtype::int32), 0),
               std::invalid_argument);
}

TEST(OpsIndexing, GatherScatterPutAlongAxisAndSliceUpdate) {
  auto v = randoms(60, -5, 5, 3);
  Array a = Array::from_doubles(v, {3, 4, 5}, Dtype::float32);
  std::vector<double> av = a.to_doubles();
  // gather over axes 0 and 2 with full slices of axis 1: shape (2, 1, 4, 1).
  Array i0 = Array::from_doubles({2, 0}, {2}, Dtype::int32);
  Array i2 = Array::from_doubles({-1, 1}, {2}, Dtype::int64);
  Array g = gather(a, {i0, i2}, {0, 2}, {1, 4, 1});
  ASSERT_EQ(g.shape(), (Shape{2, 1, 4, 1}));
  std::vector<double> want;
  for (auto [r, c] : std::vector<std::pair<int, int>>{{2, 4}, {0, 1}})
    for (int m = 0; m < 4; ++m) want.push_back(av[r * 20 + m * 5 + c]);
  EXPECT_EQ(g.to_doubles(), want);
  // A partial slice: 2 x 3 windows starting at the index.
  Array gw = gather(a, {Array::from_doubles({1}, {1}, Dtype::int32)}, {1}, {3, 2, 3});
  ASSERT_EQ(gw.shape(), (Shape{1, 3, 2, 3}));
  want.clear();
  for (int r = 0; r < 3; ++r)
    for (int m = 1; m < 3; ++m)
      for (int c = 0; c < 3; ++c) want.push_back(av[r * 20 + m * 5 + c]);
  EXPECT_EQ(gw.to_doubles(), want);

  // scatter / scatter_add on axis 1 with a repeated index: last wins / all added.
  Array idx = Array::from_doubles({3, 0, 3}, {3}, Dtype::int32);
  auto uv = randoms(45, -1, 1, 4);
  Array upd = Array::from_doubles(uv, {3, 3, 1, 5}, Dtype::float32);
  Array s = scatter(a, {idx}, upd, {1});
  Array sa = scatter_add(a, {idx}, upd, {1});
  std::vector<double> ws = av, wa = av;
  for (int p = 0; p < 3; ++p) {
    int m = p == 1 ? 0 : 3;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 5; ++c) {
        double u = static_cast<float>(uv[p * 15 + r * 5 + c]);
        ws[r * 20 + m * 5 + c] = u;
        wa[r * 20 + m * 5 + c] += u;
      }
  }
  EXPECT_EQ(s.to_doubles(), ws);
  expect_close(sa.to_doubles(), wa, 1e-6, "scatter_add");
  // A scalar update broadcasts; indices out of range are dropped.
  Array s2 = scatter(a, {Array::from_doubles({1, 9}, {2}, Dtype::int32)},
                     Array::from_doubles({7}, {}, Dtype::float32), {0});
  want = av;
  for (int k = 20; k < 40; ++k) want[k] = 7;
  EXPECT_EQ(s2.to_doubles(), want);
  // A large axis (several chunks of the scatter kernel) on int32.
  {
    int64_t n = 10000;
    Array big = arange(0, static_cast<double>(n), 1, Dtype::int32);
    Array bi = Array::from_doubles({9999, 0, 5000, 4096, 4095}, {5}, Dtype::int32);
    Array bu = Array::from_doubles({-1, -2, -3, -4, -5}, {5, 1}, Dtype::int32);
    auto got = scatter(big, {bi}, bu, {0}).to_doubles();
    std::vector<double> w(n);
    for (int64_t k = 0; k < n; ++k) w[k] = static_cast<double>(k);
    w[9999] = -1, w[0] = -2, w[5000] = -3, w[4096] = -4, w[4095] = -5;
    EXPECT_EQ(got, w);
  }

  // put_along_axis.
  Array pidx = Array::from_doubles({4, 0}, {1, 1, 2}, Dtype::int32);
  Array pv = Array::from_doubles({100, 200}, {1, 1, 2}, Dtype::float32);
  Array pa = put_along_axis(a, pidx, pv, 2);
  want = av;
  for (int r = 0; r < 3; ++r)
    for (int m = 0; m < 4; ++m) {
      want[r * 20 + m * 5 + 4] = 100;
      want[r * 20 + m * 5 + 0] = 200;
    }
  EXPECT_EQ(pa.to_doubles(), want);

  // slice_update with steps (positive and negative) on a transposed source.
  Array at = a.transpose({2, 1, 0});  // (5, 4, 3)
  std::vector<double> atv = at.contiguous().to_doubles();
  Array u = Array::from_doubles(randoms(2 * 2 * 3, 10, 20, 5), {2, 2, 3}, Dtype::float32);
  std::vector<double> uvv = u.to_doubles();
  Array su = slice_update(at, u, {4, 0, 0}, {-6, 4, 3}, {-3, 2, 1});
  want = atv;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) want[(4 - 3 * i) * 12 + (2 * j) * 3 + k] = uvv[i * 6 + j * 3 + k];
  EXPECT_EQ(su.to_doubles(), want);
  // A broadcast scalar update, converted to the source dtype; an empty region.
  Array su2 = slice_update(a, Array::from_doubles({3}, {}, Dtype::int32), {0, 1, 0}, {3, 2, 5});
  want = av;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) want[r * 20 + 5 + c] = 3;
  EXPECT_EQ(su2.to_doubles(), want);
  EXPECT_EQ(slice_update(a, Array::from_doubles({3}, {}, Dtype::float32), {0, 2, 0}, {3, 2, 5})
                .to_doubles(),
            av);
  EXPECT_THROW(slice_update(a, u, {0, 0, 0}, {3, 4, 5}), std::invalid_argument);
}

TEST(OpsIndexing, SplitEyeTriTrilTriu) {
  Array a = Array::from_doubles(randoms(24, -1, 1, 6), {4, 6}, Dtype::float32);
  auto av = a.to_doubles();
  auto parts = split(a, 3, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].shape(), (Shape{4, 2}));
  EXPECT_EQ(parts[1].to_doubles(),
            (std::vector<double>{av[2], av[3], av[8], av[9], av[14], av[15], av[20], av[21]}));
  auto p2 = split(a, Shape{1, 3}, 0);
  ASSERT_EQ(p2.size(), 3u);
  EXPECT_EQ(p2[0].shape(), (Shape{1, 6}));
  EXPECT_EQ(p2[1].shape(), (Shape{2, 6}));
  EXPECT_EQ(p2[2].shape(), (Shape{1, 6}));
  EXPECT_THROW(split(a, 4, 1), std::invalid_argument);
  EXPECT_EQ(eye(2, 3, 1).to_doubles(), (std::vector<double>{0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(identity(2, Dtype::int32).to_doubles(), (std::vector<double>{1, 0, 0, 1}));
  EXPECT_EQ(tri(2, 3, 0).to_doubles(), (std::vector<double>{1, 0, 0, 1, 1, 0}));
  auto lo = tril(a, -1).to_doubles(), hi = triu(a, 1).to_doubles();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) {
      EXPECT_EQ(lo[r * 6 + c], c <= r - 1 ? av[r * 6 + c] : 0);
      EXPECT_EQ(hi[r * 6 + c], c >= r + 1 ? av[r * 6 + c] : 0);
    }
}

namespace {

// Threefry 2x32 (20 rounds), written from the paper's description, to check the kernel.
std::pair<uint32_t, uint32_t> threefry(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1) {
  const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  uint32_t x0 = c0 + ks[0], x1 = c1 + ks[1];
  for (int i = 0; i < 5; ++i) {
    for (int r : rot[i % 2]) {
      x0 += x1;
      x1 = (x1 << r) | (x1 >> (32 - r));
      x1 ^= x0;
    }
    x0 += ks[(i + 1) % 3];
    x1 += ks[(i + 2) % 3] + static_cast<uint32_t>(i + 1);
  }
  return {x0, x1};
}

}  // namespace

TEST(OpsRandom, BitsAreThreefryInMlxCounterLayout) {
  // The known-answer vector of Random123 (threefry2x32_20, key and counter pi digits).
  auto kat = threefry(0x13198a2e, 0x03707344, 0x243f6a88, 0x85a308d3);
  EXPECT_EQ(kat.first, 0xc4923a9cu);
  EXPECT_EQ(kat.second, 0x483df7a0u);
  Array k = random::key(0x123456789abcdefull);
  EXPECT_EQ(k.to_vector<uint32_t>(), (std::vector<uint32_t>{0x1234567u, 0x89abcdefu}));
  for (int64_t n : {1, 2, 7, 10, 33}) {
    auto got = random::bits({n}, 4, k).to_vector<uint32_t>();
    std::vector<uint32_t> want(n);
    uint32_t half = static_cast<uint32_t>(n / 2), odd = static_cast<uint32_t>(n % 2);
    for (uint32_t j = 0; j < half; ++j) {
      auto r = threefry(0x1234567u, 0x89abcdefu, j, j + half + odd);
      want[j] = r.first;
      want[j + half + odd] = r.second;
    }
    if (odd) want[half] = threefry(0x1234567u, 0x89abcdefu, half, 0).first;
    EXPECT_EQ(got, want) << n;
  }
  // split gives (num, 2) keys; uniform in [0, 1), bernoulli's frequency, randint's range.
  Array ks = random::split(k, 3);
  EXPECT_EQ(ks.shape(), (Shape{3, 2}));
  auto [k1, k2] = random::split(k);
  EXPECT_EQ(k1.shape(), (Shape{2}));
  EXPECT_NE(k1.to_vector<uint32_t>(), k2.to_vector<uint32_t>());
  auto u = random::uniform({4000}, Dtype::float32, k1).to_doubles();
  double mean = 0;
  for (double x : u) {
    EXPECT_GE(x, 0);
    EXPECT_LT(x, 1);
    mean += x / 4000;
  }
  EXPECT_NEAR(mean, 0.5, 0.03);
  auto un = random::uniform(Array(-2.0f), Array(3.0f), {100}, Dtype::float16, k2).to_doubles();
  for (double x : un) {
    EXPECT_GE(x, -2);
    EXPECT_LT(x, 3);
  }
  auto bn = random::bernoulli(Array(0.25f), {4000}, k1).to_doubles();
  double frac = 0;
  for (double x : bn) frac += x / 4000;
  EXPECT_NEAR(frac, 0.25, 0.03);
  auto ri = random::randint(Array(-3), Array(5), {500}, Dtype::int32, k2).to_doubles();
  for (double x : ri) {
    EXPECT_GE(x, -3);
    EXPECT_LT(x, 5);
  }
  auto nv = random::normal({4000}, Dtype::float32, 1.0, 2.0, k1).to_doubles();
  double m = 0, var = 0;
  for (double x : nv) m += x / 4000;
  for (double x : nv) var += (x - m) * (x - m) / 4000;
  EXPECT_NEAR(m, 1.0, 0.15);
  EXPECT_NEAR(std::sqrt(var), 2.0, 0.15);
  // No key: the process-wide sequence, reproducible after seed().
  random::seed(5);
  auto a1 = random::uniform({3}).to_doubles();
  random::seed(5);
  EXPECT_EQ(random::uniform({3}).to_doubles(), a1);
  EXPECT_THROW(random::bits({2}, 4, Array::from_doubles({1, 2, 3}, {3}, Dtype::uint32)),
               std::invalid_argument);
  EXPECT_THROW(random::uniform({2}, Dtype::int32, k), std::invalid_argument);
}

TEST(OpsPrint, MlxStyleTextAndSummaries) {
  std::ostringstream os;
  os << Array::from_doubles({1, 2, 3}, {3}, Dtype::int32);
  EXPECT_EQ(os.str(), "array([1, 2, 3], dtype=int32)");
  EXPECT_EQ(array_repr(Array::from_doubles({1.0 / 3, 1e-8, 1e10, NAN, INFINITY, -2.5}, {6},
                                           Dtype::float32)),
            "array([0.333333, 1e-08, 1e+10, nan, inf, -2.5], dtype=float32)");
  EXPECT_EQ(array_repr(Array::from_doubles({1, -20, 300, 4}, {2, 2}, Dtype::int32)),
            "array([[1, -20],\n       [300, 4]], dtype=int32)");
  EXPECT_EQ(array_repr(Array::from_doubles({1, 0}, {2}, Dtype::bool_), true),
            "array([True, False], dtype=bool)");
  EXPECT_EQ(array_repr(Array::from_doubles({1, 0}, {2}, Dtype::bool_)),
            "array([true, false], dtype=bool)");
  EXPECT_EQ(array_repr(Array::from_doubles({3}, {}, Dtype::float32)), "array(3, dtype=float32)");
  // Every axis longer than 6 is summarised (MLX's rule).
  EXPECT_EQ(array_repr(arange(0, 7, 1, Dtype::int32)),
            "array([0, 1, 2, ..., 4, 5, 6], dtype=int32)");
  EXPECT_EQ(array_repr(Array::from_doubles({}, {0}, Dtype::float32)), "array([], dtype=float32)");
  EXPECT_EQ(array_repr(Array::from_doubles({}, {2, 0}, Dtype::float32)),
            "array([[],\n       []], dtype=float32)");
  EXPECT_EQ(array_repr(arange(0, 3000, 1, Dtype::int32).reshape({1000, 3}).transpose().transpose()),
            "array([[0, 1, 2],\n       [3, 4, 5],\n       [6, 7, 8],\n       ...,\n"
            "       [2991, 2992, 2993],\n       [2994, 2995, 2996],\n       [2997, 2998, 2999]], "
            "dtype=int32)");
  EXPECT_EQ(array_repr(arange(0, 24, 1, Dtype::uint8).reshape({2, 3, 4})),
            "array([[[0, 1, 2, 3],\n        [4, 5, 6, 7],\n        [8, 9, 10, 11]],\n"
            "       [[12, 13, 14, 15],\n        [16, 17, 18, 19],\n        [20, 21, 22, 23]]], "
            "dtype=uint8)");
}

namespace {

std::vector<double> fd(const std::function<Array(const Array&)>& f, std::vector<double> x,
                       const Shape& shape, const std::vector<double>& cot) {
  std::vector<double> g(x.size());
  auto value = [&] {
    auto y = f(Array::from_doubles(x, shape, Dtype::float64, Device::cpu())).to_doubles();
    double s = 0;
    // Infinite outputs are constants (an exclusive cummax's first output, the identity): they
    // add nothing to the derivative.
    for (size_t i = 0; i < y.size(); ++i)
      if (std::isfinite(y[i])) s += cot[i] * y[i];
    return s;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    double x0 = x[i], h = 1e-6 * std::max(1.0, std::fabs(x0));
    x[i] = x0 + h;
    double up = value();
    x[i] = x0 - h;
    double down = value();
    x[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

void check_vjp(const std::string& what, const std::function<Array(const Array&)>& f,
               const std::vector<double>& x, const Shape& shape, bool jvp) {
  Array xa = Array::from_doubles(x, shape, Dtype::float64, Device::cpu());
  Array y = f(xa);
  auto p = node_of(y)->pending;
  ASSERT_TRUE(p) << what;
  auto prim = p->primitive;
  auto primals = p->inputs;
  auto cot = randoms(static_cast<size_t>(y.size()), 0.5, 1.5, 9);
  auto g = prim->vjp(primals, {Array::from_doubles(cot, y.shape(), Dtype::float64, Device::cpu())},
                     {0}, {y});
  expect_close(g.at(0).to_doubles(), fd(f, x, shape, cot), 2e-6, "vjp " + what);
  if (!jvp) return;
  auto tv = randoms(x.size(), -1, 1, 10);
  auto t = prim->jvp(primals, {Array::from_doubles(tv, shape, Dtype::float64, Device::cpu())}, {0});
  auto jd = t.at(0).to_doubles(), gd = g[0].to_doubles();
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < jd.size(); ++i) lhs += cot[i] * jd[i];
  for (size_t i = 0; i < gd.size(); ++i) rhs += gd[i] * tv[i];
  EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::fabs(rhs))) << "jvp " << what;
}

}  // namespace

TEST(OpsMiscGradients, MatchFiniteDifferences) {
  auto x = randoms(12, 0.5, 1.5, 11);
  // Zeros in the products (the first zero of a scan and the ones after it: MLX's rule) and
  // distinct values for the running extremes (no ties: differences are then valid).
  auto xz = x;
  xz[1] = 0;
  xz[6] = 0;
  xz[7] = 0;
  auto xd = randoms(12, -2, 2, 12);
  for (auto [axis_b, rev_b, incl_b] : std::vector<std::tuple<int, bool, bool>>{{0, false, true},
                                                                               {1, true, false},
                                                                               {1, false, true},
                                                                               {1, false, false},
                                                                               {0, true, true},
                                                                               {1, true, true}}) {
    int axis = axis_b;  // plain copies: clang 14 cannot capture structured bindings in lambdas
    bool rev = rev_b, incl = incl_b;
    std::string w = fmt::format("axis {} rev {} incl {}", axis, rev, incl);
    check_vjp(
        "cumsum " + w, [&](const Array& a) { return cumsum(a, axis, rev, incl); }, x, {3, 4}, true);
    check_vjp(
        "cumprod " + w, [&](const Array& a) { return cumprod(a, axis, rev, incl); }, x, {3, 4},
        true);
    check_vjp(
        "cumprod with zeros " + w, [&](const Array& a) { return cumprod(a, axis, rev, incl); }, xz,
        {3, 4}, false);
    check_vjp(
        "cummax " + w, [&](const Array& a) { return cummax(a, axis, rev, incl); }, xd, {3, 4},
        true);
    check_vjp(
        "cummin " + w, [&](const Array& a) { return cummin(a, axis, rev, incl); }, xd, {3, 4},
        true);
  }
  Array idx = Array::from_doubles({2, 0, 2, -1}, {2, 2}, Dtype::int32);
  // take = Gather + views: the Gather node's own vjp/jvp.
  check_vjp(
      "gather",
      [&](const Array& a) {
        return gather(a, {idx}, {1}, {3, 1});
      },
      x, {3, 4}, true);
  Array ia = Array::from_doubles({3, 0, 0, 1, 2, 2}, {3, 2}, Dtype::int32);
  check_vjp(
      "take_along_axis", [&](const Array& a) { return take_along_axis(a, ia, 1); }, x, {3, 4},
      false);
  Array up = Array::from_doubles({5, 6}, {1, 2}, Dtype::float64, Device::cpu());
  check_vjp(
      "slice_update src",
      [&](const Array& a) {
        return slice_update(a, up, {1, 0}, {2, 4}, {1, 2});
      },
      x, {3, 4}, false);
  Array base = Array::from_doubles(randoms(12, -1, 1, 12), {3, 4}, Dtype::float64, Device::cpu());
  Array y = slice_update(base, up, {1, 0}, {2, 4}, {1, 2});
  auto p = node_of(y)->pending;
  auto g = p->primitive->vjp(
      p->inputs,
      {Array::from_doubles(randoms(12, 0, 1, 13), {3, 4}, Dtype::float64, Device::cpu())}, {1},
      {y});
  auto cv = randoms(12, 0, 1, 13);
  EXPECT_EQ(g[0].to_doubles(), (std::vector<double>{cv[4], cv[6]}));
}

// Scatters' gradients, for the array and the written values, through alloy::vjp and jvp:
// central differences of sum(cot * f(a, u)). scatter_add with a repeated index (linear: every
// update counts); scatter and put_along_axis with distinct positions (an overwritten update
// would get MLX's gathered cotangent, not the zero derivative).
TEST(OpsMiscGradients, ScattersMatchFiniteDifferences) {
  using Fn2 = std::function<Array(const Array&, const Array&)>;
  auto check2 = [](const std::string& what, const Fn2& f, const Shape& sa, const Shape& su) {
    auto count = [](const Shape& sh) {
      size_t n = 1;
      for (auto d : sh) n *= static_cast<size_t>(d);
      return n;
    };
    auto av = randoms(count(sa), -1, 1, 21), uv = randoms(count(su), -1, 1, 22);
    auto mk = [](const std::vector<double>& v, const Shape& s) {
      return Array::from_doubles(v, s, Dtype::float64, Device::cpu());
    };
    Array y = f(mk(av, sa), mk(uv, su));
    auto cot = randoms(static_cast<size_t>(y.size()), 0.5, 1.5, 23);
    auto fn = [&](const std::vector<Array>& in) { return std::vector<Array>{f(in[0], in[1])}; };
    auto [outs, grads] = vjp(fn, {mk(av, sa), mk(uv, su)}, {mk(cot, y.shape())});
    auto value = [&](const std::vector<double>& a, const std::vector<double>& u) {
      auto r = f(mk(a, sa), mk(u, su)).to_doubles();
      double t = 0;
      for (size_t i = 0; i < r.size(); ++i) t += cot[i] * r[i];
      return t;
    };
    for (int arg = 0; arg < 2; ++arg) {
      auto a = av, u = uv;
      auto& v = arg == 0 ? a : u;
      std::vector<double> want(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        double keep = v[i];
        v[i] = keep + 1e-3;
        double up = value(a, u);
        v[i] = keep - 1e-3;
        double down = value(a, u);
        v[i] = keep;
        want[i] = (up - down) / 2e-3;
      }
      expect_close(grads.at(arg).to_doubles(), want, 1e-8,
                   what + (arg == 0 ? ": d array" : ": d values"));
    }
    // jvp against the vjp: <cot, J t> = <J^T cot, t>.
    auto ta = randoms(av.size(), -1, 1, 24), tu = randoms(uv.size(), -1, 1, 25);
    auto [jo, jt] = jvp(fn, {mk(av, sa), mk(uv, su)}, {mk(ta, sa), mk(tu, su)});
    auto jd = jt.at(0).to_doubles();
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < jd.size(); ++i) lhs += cot[i] * jd[i];
    auto ga = grads[0].to_doubles(), gu = grads[1].to_doubles();
    for (size_t i = 0; i < ga.size(); ++i) rhs += ga[i] * ta[i];
    for (size_t i = 0; i < gu.size(); ++i) rhs += gu[i] * tu[i];
    EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::fabs(rhs))) << "jvp " << what;
  };
  Array rep = Array::from_doubles({2, 0, 2}, {3}, Dtype::int32);
  Array distinct = Array::from_doubles({3, 0, 1}, {3}, Dtype::int32);
  check2("scatter_add",
         [&](const Array& a, const Array& u) { return scatter_add(a, {rep}, u, {0}); }, {4, 5},
         {3, 1, 5});
  check2("scatter", [&](const Array& a, const Array& u) { return scatter(a, {distinct}, u, {0}); },
         {4, 5}, {3, 1, 5});
  Array ia = Array::from_doubles({3, 0, 1, 2, 4, 0}, {3, 2}, Dtype::int32);
  check2("put_along_axis",
         [&](const Array& a, const Array& u) { return put_along_axis(a, ia, u, 1); }, {3, 5},
         {3, 2});
}

TEST(OpsMiscPrimitives, StateRoundTripsAndEquivalence) {
  std::vector<std::shared_ptr<Primitive>> prims = {
      std::make_shared<ops::Scan>("sum", 1, true, false),
      std::make_shared<ops::Gather>(std::vector<int>{0, 2}, Shape{1, 4, 1}),
      std::make_shared<ops::GatherAxis>(1),
      std::make_shared<ops::ScatterAxis>(0),
      std::make_shared<ops::Scatter>("add", std::vector<int>{1}),
      std::make_shared<ops::SliceUpdate>(Shape{0, 1}, Shape{2, 5}, Shape{1, 2}),
      std::make_shared<ops::RandomBits>(Shape{3, 2}, 4),
  };
  auto names = registered_primitives();
  for (auto& p : prims) {
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), p->name())) << p->name();
    auto bytes = p->state().to_bytes();
    auto back = make_primitive(p->name(), PrimitiveState::from_bytes(bytes.data(), bytes.size()));
    EXPECT_TRUE(back->is_equivalent(*p)) << p->label();
  }
  EXPECT_FALSE(ops::Scan("sum", 1, true, false).is_equivalent(ops::Scan("sum", 1, false, false)));
  EXPECT_FALSE(ops::Scan("sum", 1, true, false).is_equivalent(ops::Scan("prod", 1, true, false)));
  EXPECT_FALSE(ops::Scatter("add", {1}).is_equivalent(ops::Scatter("none", {1})));
  EXPECT_THROW(ops::Scan("mean", 0, false, true), std::invalid_argument);
}

TEST(OpsMiscKernels, CompileWithNvrtcForSm90) {
  // Each op runs once on the CPU (building its generated kernel), then the same kernel's CUDA
  // translation is compiled for sm_90 with inputs of the same kinds.
  Array a = Array::from_doubles(randoms(24, -1, 1, 14), {4, 6}, Dtype::float16);
  Array i = Array::from_doubles({1, 0, 3}, {3}, Dtype::int32);
  Array i64 = Array::from_doubles({1, 0, 3, 2, 2, 1}, {1, 6}, Dtype::int64);
  Array col = Array::from_doubles({1, 2, 0, 5}, {4, 1}, Dtype::int32);
  Array h1 = Array::from_doubles({2}, {}, Dtype::float16);
  struct Case {
    Array y;
    std::string key;
    std::vector<Array> inputs;
  };
  std::vector<Case> cases = {
      {cumsum(a, 1, true, false), "scan|sum|float16|float32|float16|2|1|true|false", {a}},
      {cummax(a.transpose(), 0), "scan|max|float16|float32|float16|2|0|false|true", {a}},
      {take(a, i, 0), "gather|float16|int32|2|0", {a, ops::param_array({1, 6}), i}},
      {take_along_axis(a, i64, 0), "gatheraxis|float16|int64|2|0", {a, i64}},
      {put_along_axis(a, col, h1, 1), "scatteraxis|float16|int32|2|1", {a, col, a}},
      {scatter_add(a, {i}, h1, {0}), "scatter|add|float16|int32|2|0|4096", {a, a, i}},
      {slice_update(a, h1, {0, 0}, {4, 6}, {2, 3}),
       "sliceupdate|float16|2",
       {a, a, ops::param_array({0, 0, 2, 3})}},
      {random::bits({5}, 4, random::key(3)),
       "randombits|1",
       {random::key(3), ops::param_array({5})}},
  };
  for (auto& c : cases) {
    c.y.eval();
    bool built = true;
    auto k = ops::op_kernel(c.key, [&] {
      built = false;
      return KernelSpec{};
    });
    ASSERT_TRUE(built) << c.key << " is not the key of the kernel the op built";
    std::string why =
        kernel::compile_call_cubin(MetalKernel(k.spec), c.inputs,
                                   ops::kernel_call(c.y.shape(), c.y.dtype(), 8, true, 2), "sm_90");
    if (!why.empty()) GTEST_SKIP() << why;  // NVRTC is not installed
  }
}

TEST(OpsMiscGpu, MatchTheCpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU";
  Array c = Array::from_doubles(randoms(600, -2, 2, 15), {20, 30}, Dtype::float32, Device::cpu());
  Array g = c.to(Device::gpu());
  Array ic = Array::from_doubles({3, -1, 0, 7}, {4}, Dtype::int32, Device::cpu());
  Array ig = ic.to(Device::gpu());
  std::vector<std::function<Array(const Array&, const Array&)>> fs = {
      [](auto& x, auto&) { return cumsum(x, 1); },
      [](auto& x, auto&) { return cumprod(x.transpose(), 0, true, false); },
      [](auto& x, auto&) { return cummax(x, 0); },
      [](auto& x, auto& i) { return take(x, i, 1); },
      [](auto& x, auto& i) {
        return take_along_axis(x, reshape(i, {1, 4}), 1);
      },
      [](auto& x, auto& i) {
        return scatter_add(x, {i}, ones({4, 1, 30}), {0});
      },
      [](auto& x, auto& i) {
        return put_along_axis(x, reshape(i, {1, 4}), zeros({1, 4}, Dtype::float32, x.device()), 1);
      },
      [](auto& x, auto&) {
        return slice_update(x, Array::from_doubles({5}, {}, Dtype::float32), {0, 1}, {20, 30},
                            {3, 4});
      },
  };
  for (size_t k = 0; k < fs.size(); ++k) {
    Array want = fs[k](c, ic), got = fs[k](g, ig);
    EXPECT_EQ(got.device(), Device::gpu()) << k;
    expect_close(got.to_doubles(), want.to_doubles(), 1e-5, fmt::format("case {}", k));
  }
  Array kc = random::key(42);
  EXPECT_EQ(random::bits({1001}, 4, kc, Device::gpu()).to_vector<uint32_t>(),
            random::bits({1001}, 4, kc, Device::cpu()).to_vector<uint32_t>());
}
