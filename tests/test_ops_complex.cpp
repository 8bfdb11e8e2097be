// complex64 ops (src/ops/functors.cpp's complex64_t overloads) against std::complex<double>
// references: elementwise math, arithmetic with promotion, comparisons (lexicographic, as MLX),
// parts, reductions, conversions, and the ops MLX rejects. Random inputs, poisoned outputs,
// contiguous / strided / broadcast layouts; the generated kernels also compile with NVRTC.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <functional>
#include <random>

#include "alloy/alloy.h"
#include "core/backend.h"
#include "kernel/custom_kernel.h"
#include "ops/kernels.h"
#include "ops/primitives.h"

using namespace alloy;
using C = std::complex<double>;
using Cf = std::complex<float>;

namespace {

struct PoisonComplex : ::testing::Environment {
  void SetUp() override { ops::set_poison_outputs(true); }
};
const auto* const kPoison = ::testing::AddGlobalTestEnvironment(new PoisonComplex);

std::vector<C> random_complex(size_t n, double bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // float values, so that the reference sees exactly what the kernel reads
  std::uniform_real_distribution<float> u(static_cast<float>(-bound), static_cast<float>(bound));
  std::vector<C> v(n);
  for (auto& z : v) {
    float re = u(rng);
    float im = u(rng);
    z = C(re, im);
  }
  return v;
}

Array complex_array(const std::vector<C>& v, Shape shape) {
  std::vector<Cf> f(v.begin(), v.end());
  return Array::from_vector(f, std::move(shape), Dtype::complex64, Device::cpu());
}

std::vector<C> complex_values(const Array& a) {
  EXPECT_EQ(a.dtype(), Dtype::complex64);
  auto f = a.to_vector<Cf>();
  return std::vector<C>(f.begin(), f.end());
}

void expect_complex_close(const Array& got_a, const std::vector<C>& want, double rtol,
                          const std::string& what) {
  auto got = complex_values(got_a);
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok = std::abs(got[i] - want[i]) <= rtol * (std::abs(want[i]) + 1e-3);
    if (!ok && bad++ < 4)
      ADD_FAILURE() << what
                    << fmt::format(": element {}: got ({}, {}), expected ({}, {})", i,
                                   got[i].real(), got[i].imag(), want[i].real(), want[i].imag());
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ";
}

void expect_real_close(const Array& got_a, const std::vector<double>& want, double rtol,
                       const std::string& what) {
  auto got = got_a.to_doubles();
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= rtol * (std::fabs(want[i]) + 1e-3)) && bad++ < 4)
      ADD_FAILURE() << what << fmt::format(": element {}: got {}, expected {}", i, got[i], want[i]);
  EXPECT_EQ(bad, 0) << what;
}

// The reference's lexicographic order (MLX's for complex64).
bool lex_less(C a, C b) {
  return a.real() < b.real() || (a.real() == b.real() && a.imag() < b.imag());
}

}  // namespace

TEST(OpsComplex, UnaryMathMatchesComplexDoubleReference) {
  using F = Array (*)(const Array&, StreamOrDevice);
  struct Case {
    const char* name;
    F op;
    std::function<C(C)> ref;
    double rtol;
  };
  const double ln2 = std::log(2.0), ln10 = std::log(10.0);
  std::vector<Case> cases = {
      {"negative", negative, [](C z) { return -z; }, 1e-7},
      {"square", square, [](C z) { return z * z; }, 2e-6},
      {"sign", sign, [](C z) { return z / std::abs(z); }, 2e-6},
      {"exp", exp, [](C z) { return std::exp(z); }, 4e-6},
      {"log", log, [](C z) { return std::log(z); }, 4e-6},
      {"log2", log2, [&](C z) { return std::log(z) / ln2; }, 4e-6},
      {"log10", log10, [&](C z) { return std::log(z) / ln10; }, 4e-6},
      {"log1p", log1p, [](C z) { return std::log(1.0 + z); }, 4e-6},
      {"sqrt", sqrt, [](C z) { return std::sqrt(z); }, 4e-6},
      {"rsqrt", rsqrt, [](C z) { return 1.0 / std::sqrt(z); }, 4e-6},
      {"sin", sin, [](C z) { return std::sin(z); }, 4e-6},
      {"cos", cos, [](C z) { return std::cos(z); }, 4e-6},
      {"tan", tan, [](C z) { return std::tan(z); }, 1e-4},  // ill-conditioned near poles
      {"sinh", sinh, [](C z) { return std::sinh(z); }, 4e-6},
      {"cosh", cosh, [](C z) { return std::cosh(z); }, 4e-6},
      {"tanh", tanh, [](C z) { return std::tanh(z); }, 1e-4},
      {"arcsin", arcsin, [](C z) { return std::asin(z); }, 2e-5},
      {"arccos", arccos, [](C z) { return std::acos(z); }, 2e-5},
      {"arctan", arctan, [](C z) { return std::atan(z); }, 2e-5},
      {"round", round, [](C z) { return C(std::nearbyint(z.real()), std::nearbyint(z.imag())); },
       0},
      {"conjugate", conjugate, [](C z) { return std::conj(z); }, 0},
  };
  auto v = random_complex(24 * 17, 3.0, 7);
  Array a = complex_array(v, {24, 17});
  Array at = transpose(a);  // a strided view
  for (auto& c : cases) {
    expect_complex_close(
        c.op(a, {}),
        [&] {
          std::vector<C> r;
          for (auto z : v) r.push_back(c.ref(z));
          return r;
        }(),
        c.rtol, c.name);
    std::vector<C> rt;
    for (int j = 0; j < 17; ++j)
      for (int i = 0; i < 24; ++i) rt.push_back(c.ref(v[i * 17 + j]));
    expect_complex_close(c.op(at, {}), rt, c.rtol, std::string(c.name) + " (transposed)");
  }
  // Near the axes and at small magnitudes (log1p without cancellation, sqrt of negative reals).
  std::vector<C> edge = {C(1e-4, 2e-4), C(-3, 0), C(-2, -0.0),    C(0, 5),
                         C(0, -5),      C(4, 0),  C(-1e-3, 1e-3), C(0.5, 30)};
  Array e = complex_array(edge, {8});
  auto ref = [&](auto f) {
    std::vector<C> r;
    for (auto z : edge) r.push_back(f(z));
    return r;
  };
  expect_complex_close(log1p(e), ref([](C z) {
                         double a = z.real(), b = z.imag();
                         return C(0.5 * std::log1p(2 * a + a * a + b * b), std::atan2(b, 1 + a));
                       }),
                       1e-5, "log1p (edges)");
  expect_complex_close(sqrt(e), ref([](C z) { return std::sqrt(z); }), 4e-6, "sqrt (edges)");
  expect_complex_close(tan(e), ref([](C z) { return std::tan(z); }), 1e-5, "tan (edges)");
  expect_complex_close(arcsin(e), ref([](C z) { return std::asin(z); }), 2e-5, "arcsin (edges)");
}

TEST(OpsComplex, AbsPartsAndTestsGiveReals) {
  auto v = random_complex(64, 1e3, 3);
  v[5] = C(3e30f, 4e30f);  // |z| without overflow in the squares
  Array a = complex_array(v, {64});
  Array m = abs(a);
  EXPECT_EQ(m.dtype(), Dtype::float32);
  std::vector<double> want, re, im;
  for (auto z : v) {
    want.push_back(std::abs(z));
    re.push_back(z.real());
    im.push_back(z.imag());
  }
  expect_real_close(m, want, 2e-7, "abs");
  EXPECT_EQ(real(a).dtype(), Dtype::float32);
  EXPECT_EQ(imag(a).dtype(), Dtype::float32);
  expect_real_close(real(a), re, 0, "real");
  expect_real_close(imag(a), im, 0, "imag");
  // Real inputs: real/conjugate are the input, imag zeros of its dtype (MLX).
  Array r = Array::from_doubles({1.5, -2, 3}, {3}, Dtype::float32);
  EXPECT_EQ(real(r).to_doubles(), (std::vector<double>{1.5, -2, 3}));
  EXPECT_EQ(conjugate(r).to_doubles(), (std::vector<double>{1.5, -2, 3}));
  EXPECT_EQ(imag(r).dtype(), Dtype::float32);
  EXPECT_EQ(imag(r).to_doubles(), (std::vector<double>{0, 0, 0}));
  double nan = std::nan(""), inf = INFINITY;
  Array s = complex_array({C(nan, 0), C(0, nan), C(inf, 0), C(0, -inf), C(1, 2)}, {5});
  EXPECT_EQ(isnan(s).to_doubles(), (std::vector<double>{1, 1, 0, 0, 0}));
  EXPECT_EQ(isinf(s).to_doubles(), (std::vector<double>{0, 0, 1, 1, 0}));
  // Truth of a complex value: either part non-zero.
  Array t = complex_array({C(0, 0), C(0, -1), C(2, 0)}, {3});
  EXPECT_EQ(logical_not(t).to_doubles(), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(t.astype(Dtype::bool_).to_doubles(), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(all(t).item(), 0);
  EXPECT_EQ(any(t).item(), 1);
  EXPECT_EQ(all(slice(t, {1}, {3})).item(), 1);
  EXPECT_EQ(where(t, Array(1.0f), Array(0.0f)).to_doubles(), (std::vector<double>{0, 1, 1}));
}

TEST(OpsComplex, BinaryOpsPromoteAndMatchReference) {
  auto va = random_complex(12 * 9, 2.0, 11), vb = random_complex(12 * 9, 2.0, 12);
  Array a = complex_array(va, {12, 9}), b = complex_array(vb, {12, 9});
  using B = Array (*)(const Array&, const Array&, StreamOrDevice);
  struct Case {
    const char* name;
    B op;
    std::function<C(C, C)> ref;
    double rtol;
  };
  std::vector<Case> cases = {
      {"add", add, [](C x, C y) { return x + y; }, 1e-7},
      {"subtract", subtract, [](C x, C y) { return x - y; }, 1e-6},
      {"multiply", multiply, [](C x, C y) { return x * y; }, 2e-6},
      {"divide", divide, [](C x, C y) { return x / y; }, 4e-6},
      {"floor_divide", floor_divide, [](C x, C y) { return x / y; }, 4e-6},  // MLX: a division
      {"power", power, [](C x, C y) { return std::pow(x, y); }, 2e-5},
      {"maximum", maximum, [](C x, C y) { return lex_less(x, y) ? y : x; }, 0},
      {"minimum", minimum, [](C x, C y) { return lex_less(y, x) ? y : x; }, 0},
  };
  for (auto& c : cases) {
    std::vector<C> want;
    for (size_t i = 0; i < va.size(); ++i) want.push_back(c.ref(va[i], vb[i]));
    expect_complex_close(c.op(a, b, {}), want, c.rtol, c.name);
    // Broadcast: a row of b against every row of a.
    Array row = slice(b, {3, 0}, {4, 9});
    std::vector<C> wb;
    for (int i = 0; i < 12; ++i)
      for (int j = 0; j < 9; ++j) wb.push_back(c.ref(va[i * 9 + j], vb[3 * 9 + j]));
    expect_complex_close(c.op(a, row, {}), wb, c.rtol, std::string(c.name) + " (broadcast)");
  }
  // Comparisons: lexicographic on (real, imag), as MLX; ties in the real part included.
  Array x = complex_array({C(1, 2), C(1, 3), C(-1, 0), C(2, -5)}, {4});
  Array y = complex_array({C(1, 3), C(1, 2), C(-1, 0), C(1, 9)}, {4});
  EXPECT_EQ(less(x, y).to_doubles(), (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(greater_equal(x, y).to_doubles(), (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(equal(x, y).to_doubles(), (std::vector<double>{0, 0, 1, 0}));
  EXPECT_EQ(not_equal(x, y).to_doubles(), (std::vector<double>{1, 1, 0, 1}));
  // Promotion: complex64 with any dtype is complex64 (float64 and integers included), real
  // inputs converted to (x, 0) first.
  for (Dtype t : {Dtype::int32, Dtype::uint8, Dtype::float16, Dtype::bfloat16, Dtype::float32,
                  Dtype::float64, Dtype::bool_, Dtype::int64}) {
    // (float64 exists on the CPU only: skipped where the default device is a GPU.)
    if (t == Dtype::float64 && default_device().type == Device::Type::gpu) continue;
    Array r = Array::from_doubles({1, 0, -3, 1}, {4}, t);
    Array s = add(r, x);
    ASSERT_EQ(s.dtype(), Dtype::complex64) << dtype_name(t);
    std::vector<double> rv = r.to_doubles();
    std::vector<C> want;
    std::vector<C> xv = complex_values(x);
    for (int i = 0; i < 4; ++i) want.push_back(rv[i] + xv[i]);
    expect_complex_close(s, want, 1e-7, fmt::format("{} + complex64", dtype_name(t)));
    expect_complex_close(
        multiply(x, r),
        [&] {
          std::vector<C> w;
          for (int i = 0; i < 4; ++i) w.push_back(rv[i] * xv[i]);
          return w;
        }(),
        1e-7, fmt::format("complex64 * {}", dtype_name(t)));
  }
  // Weak scalars: a double next to complex64 stays complex64.
  Array h = x * 2.5;
  EXPECT_EQ(h.dtype(), Dtype::complex64);
  expect_complex_close(h, {C(2.5, 5), C(2.5, 7.5), C(-2.5, 0), C(5, -12.5)}, 0, "x * 2.5");
  // 0-d complex scalar against a float array.
  Array zs = complex_array({C(0.5, -1)}, {});
  Array fr = Array::from_doubles({1, 2, 3}, {3}, Dtype::float32);
  expect_complex_close(add(fr, zs), {C(1.5, -1), C(2.5, -1), C(3.5, -1)}, 0, "float32 + 0-d c64");
  expect_complex_close(where(Array::from_doubles({1, 0, 1}, {3}, Dtype::bool_), zs, fr),
                       {C(0.5, -1), C(2, 0), C(0.5, -1)}, 0, "where");
}

TEST(OpsComplex, ReductionsMatchReference) {
  auto v = random_complex(6 * 5 * 40, 1.0, 21);
  Array a = complex_array(v, {6, 5, 40});
  auto at = [&](int i, int j, int k) { return v[(i * 5 + j) * 40 + k]; };
  // sum / mean over each axis, leading axes (the column passes), all axes (chunked rows).
  for (std::vector<int> axes : std::vector<std::vector<int>>{{0}, {1}, {2}, {0, 1}, {0, 1, 2}}) {
    Array s = sum(a, axes);
    auto keep = [&](int d) { return std::find(axes.begin(), axes.end(), d) == axes.end(); };
    int n0 = keep(0) ? 6 : 1, n1 = keep(1) ? 5 : 1, n2 = keep(2) ? 40 : 1;
    std::vector<C> want(n0 * n1 * n2), prod_want(n0 * n1 * n2, 1.0);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 40; ++k) {
          int o = ((keep(0) ? i : 0) * n1 + (keep(1) ? j : 0)) * n2 + (keep(2) ? k : 0);
          want[o] += at(i, j, k);
        }
    std::string what = fmt::format("sum over ({})", fmt::join(axes, ","));
    expect_complex_close(s, want, 2e-6, what);
    double count = 6.0 * 5 * 40 / (n0 * n1 * n2);
    for (auto& w : want) w /= count;
    expect_complex_close(mean(a, axes), want, 2e-6, "mean: " + what);
  }
  // prod of 1 + z/8 (bounded) over the last axis; max / min / argmax (lexicographic).
  Array p = add(Array(1.0f), multiply(a, Array(0.125f)));
  Array mx = max(a, 2), mn = min(a, 0), am = argmax(a, 2), an = argmin(a, 1);
  std::vector<C> pw, mxw, mnw;
  std::vector<double> amw, anw;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) {
      C pr = 1, best = at(i, j, 0);
      int bi = 0;
      for (int k = 0; k < 40; ++k) {
        pr *= 1.0 + C(static_cast<float>(at(i, j, k).real() * 0.125),
                      static_cast<float>(at(i, j, k).imag() * 0.125));
        if (lex_less(best, at(i, j, k))) best = at(i, j, k), bi = k;
      }
      pw.push_back(pr);
      mxw.push_back(best);
      amw.push_back(bi);
    }
  for (int j = 0; j < 5; ++j)
    for (int k = 0; k < 40; ++k) {
      C best = at(0, j, k);
      for (int i = 1; i < 6; ++i)
        if (lex_less(at(i, j, k), best)) best = at(i, j, k);
      mnw.push_back(best);
    }
  for (int i = 0; i < 6; ++i)
    for (int k = 0; k < 40; ++k) {
      int bi = 0;
      for (int j = 1; j < 5; ++j)
        if (lex_less(at(i, j, k), at(i, bi, k))) bi = j;
      anw.push_back(bi);
    }
  expect_complex_close(prod(p, 2), pw, 2e-5, "prod");
  expect_complex_close(mx, mxw, 0, "max");
  expect_complex_close(mn, mnw, 0, "min");
  EXPECT_EQ(am.to_doubles(), amw);
  EXPECT_EQ(an.to_doubles(), anw);
  // var: the mean of |z - mean|^2, a float32 (MLX, numpy).
  Array vr = var(a, 2);
  EXPECT_EQ(vr.dtype(), Dtype::float32);
  std::vector<double> vw;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) {
      C m = 0;
      for (int k = 0; k < 40; ++k) m += at(i, j, k);
      m /= 40.0;
      double ss = 0;
      for (int k = 0; k < 40; ++k) ss += std::norm(at(i, j, k) - m);
      vw.push_back(ss / 40);
    }
  expect_real_close(vr, vw, 1e-5, "var");
}

TEST(OpsComplex, ConversionsAndRejectedOps) {
  auto v = random_complex(16, 4.0, 5);
  Array a = complex_array(v, {16});
  std::vector<double> re;
  for (auto z : v) re.push_back(z.real());
  EXPECT_EQ(a.astype(Dtype::float32).to_doubles(), re);  // the real part (MLX)
  Array f = Array::from_doubles(re, {16}, Dtype::float32).astype(Dtype::complex64);
  std::vector<C> want;
  for (double r : re) want.push_back(C(r, 0));
  expect_complex_close(f, want, 0, "float32 -> complex64");
  // MLX's ValueError set: std::invalid_argument here.
  using F = Array (*)(const Array&, StreamOrDevice);
  for (F op : std::vector<F>{alloy::erf, alloy::erfinv, alloy::sigmoid, alloy::expm1, alloy::floor,
                             alloy::ceil})
    EXPECT_THROW(op(a, {}).eval(), std::invalid_argument);
  EXPECT_THROW(remainder(a, a), std::invalid_argument);
  EXPECT_THROW(arctan2(a, a), std::invalid_argument);
  EXPECT_THROW(bitwise_and(a, a), std::invalid_argument);
  EXPECT_THROW(logaddexp(a, a), std::invalid_argument);
}

TEST(OpsComplex, KernelsCompileWithNvrtcForSm90) {
  auto v = random_complex(64, 1.0, 9);
  Array a = complex_array(v, {64});
  Array i = Array::from_doubles(std::vector<double>(64, 2.0), {64}, Dtype::int32);
  int compiled = 0;
  auto compile = [&](const std::string& op, std::vector<Array> in, Dtype out) {
    std::vector<Dtype> dt;
    for (auto& x : in) dt.push_back(x.dtype());
    auto plan = ops::plan_elementwise(ops::op_info(op), dt);
    auto k = ops::elementwise_kernel({op, plan.via, plan.compute, plan.out}, in, {64});
    KernelCall c = ops::kernel_call({64}, out, 64, true);
    std::string why = kernel::compile_call_cubin(MetalKernel(k.spec), in, c, "sm_90");
    if (!why.empty()) return why;  // NVRTC not found: nothing tried
    ++compiled;
    return std::string();
  };
  for (const char* op : {"exp", "log", "log1p", "sqrt", "rsqrt", "sin", "tan", "tanh", "arcsin",
                         "arccos", "arctan", "sign", "round", "conjugate"})
    if (auto why = compile(op, {a}, Dtype::complex64); !why.empty()) GTEST_SKIP() << why;
  compile("abs", {a}, Dtype::float32);
  compile("real", {a}, Dtype::float32);
  compile("logical_not", {a}, Dtype::bool_);
  for (const char* op : {"add", "multiply", "divide", "power", "maximum"})
    compile(op, {a, i}, Dtype::complex64);
  compile("less", {a, i}, Dtype::bool_);
  EXPECT_GT(compiled, 20);
}

// ---- matmul (OpenBLAS cblas_cgemm/cgemv on the CPU, cuBLAS CUDA_C_32F on CUDA) ----

namespace {

// Row-major [m, k] x [k, n] in complex<double>.
std::vector<C> ref_matmul(const std::vector<C>& a, const std::vector<C>& b, int64_t m, int64_t k,
                          int64_t n) {
  std::vector<C> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      C acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
      c[i * n + j] = acc;
    }
  return c;
}

std::vector<Device> matmul_devices() {
  std::vector<Device> d;
  if (cpu_backend().blas_available()) d.push_back(Device::cpu());
  if (gpu_available() && backend(Device::gpu()).blas_available()) d.push_back(Device::gpu());
  return d;
}

}  // namespace

TEST(OpsComplex, MatmulMatchesReference) {
  auto devices = matmul_devices();
  if (devices.empty()) GTEST_SKIP() << "no BLAS library";
  const int64_t M = 13, K = 37, N = 9;
  auto av = random_complex(M * K, 2.0, 31), bv = random_complex(K * N, 2.0, 32);
  auto want = ref_matmul(av, bv, M, K, N);
  // b stored transposed ([N, K] row-major, read through a transposed view).
  std::vector<C> bt(N * K);
  for (int64_t p = 0; p < K; ++p)
    for (int64_t j = 0; j < N; ++j) bt[j * K + p] = bv[p * N + j];
  for (Device d : devices) {
    SCOPED_TRACE(d.str());
    Array a = complex_array(av, {M, K}).to(d), b = complex_array(bv, {K, N}).to(d);
    expect_complex_close(matmul(a, b), want, 3e-4, "[13,37] x [37,9]");
    Array btv = transpose(complex_array(bt, {N, K}).to(d));
    expect_complex_close(matmul(a, btv), want, 3e-4, "transposed b");
    // A real operand is promoted to complex64.
    std::vector<double> re(K * N);
    std::vector<C> rc(K * N);
    for (int64_t i = 0; i < K * N; ++i) rc[i] = re[i] = std::real(bv[i]);
    Array r = Array::from_doubles(re, {K, N}, Dtype::float32, d);
    Array ar = matmul(a, r);
    EXPECT_EQ(ar.dtype(), Dtype::complex64);
    expect_complex_close(ar, ref_matmul(av, rc, M, K, N), 3e-4, "complex x float32");
    // Vector products (one row / one column: the gemv paths) and a batch.
    std::vector<C> row(av.begin(), av.begin() + K);
    expect_complex_close(matmul(complex_array(row, {K}).to(d), b), ref_matmul(row, bv, 1, K, N),
                         3e-4, "vector x matrix");
    std::vector<C> colv(K);
    for (int64_t p = 0; p < K; ++p) colv[p] = bv[p * N];
    expect_complex_close(matmul(a, complex_array(colv, {K}).to(d)), ref_matmul(av, colv, M, K, 1),
                         3e-4, "matrix x vector");
    auto a2 = random_complex(3 * M * K, 1.0, 33);
    std::vector<C> want2;
    for (int bi = 0; bi < 3; ++bi) {
      std::vector<C> ai(a2.begin() + bi * M * K, a2.begin() + (bi + 1) * M * K);
      auto ci = ref_matmul(ai, bv, M, K, N);
      want2.insert(want2.end(), ci.begin(), ci.end());
    }
    expect_complex_close(matmul(complex_array(a2, {3, M, K}).to(d), b), want2, 3e-4,
                         "batch of 3 against one matrix");
  }
}

// MLX's rule: the cotangent of each factor is the cotangent times the other's conjugate
// transpose. For L = Re(sum(conj(W) * (A @ B))), linear in A's and B's real and imaginary
// parts, the vjp with cotangent W is dL/dRe + i dL/dIm: checked by central differences (exact up
// to rounding for a linear function).
TEST(OpsComplex, MatmulVjpIsTheConjugateTransposeRule) {
  if (!cpu_backend().blas_available()) GTEST_SKIP() << "no BLAS library";
  const int64_t M = 4, K = 5, N = 3;
  auto av = random_complex(M * K, 1.0, 41), bv = random_complex(K * N, 1.0, 42),
       wv = random_complex(M * N, 1.0, 43);
  Array a = complex_array(av, {M, K}), b = complex_array(bv, {K, N}), w = complex_array(wv, {M, N});
  auto [outs, grads] =
      vjp([](const std::vector<Array>& in) { return std::vector<Array>{matmul(in[0], in[1])}; },
          {a, b}, {w});
  auto loss = [&](const std::vector<C>& x, const std::vector<C>& y) {
    auto c = ref_matmul(x, y, M, K, N);
    double l = 0;
    for (int64_t i = 0; i < M * N; ++i) l += std::real(std::conj(wv[i]) * c[i]);
    return l;
  };
  const double h = 0.5;  // any step: the loss is linear
  auto numeric = [&](int which) {
    std::vector<C> x = av, y = bv;
    std::vector<C>& v = which == 0 ? x : y;
    std::vector<C> g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      C keep = v[i];
      double parts[2];
      for (int part = 0; part < 2; ++part) {
        C step = part == 0 ? C(h, 0) : C(0, h);
        v[i] = keep + step;
        double up = loss(x, y);
        v[i] = keep - step;
        double down = loss(x, y);
        v[i] = keep;
        parts[part] = (up - down) / (2 * h);
      }
      g[i] = C(parts[0], parts[1]);
    }
    return g;
  };
  expect_complex_close(grads.at(0), numeric(0), 1e-4, "d/dA");
  expect_complex_close(grads.at(1), numeric(1), 1e-4, "d/dB");
}

// The elementwise ops' vjp for complex64 (MLX's rule: cotangent times the conjugate of the
// derivative): for L = Re(sum(conj(W) * g(z, u))), the vjp with cotangent W is dL/dRe + i dL/dIm,
// checked against central differences of the float64 reference g.
TEST(OpsComplex, ElementwiseVjpMatchesFiniteDifferences) {
  const int64_t n = 12;
  auto zv = random_complex(n, 1.5, 51), uv = random_complex(n, 1.5, 52),
       wv = random_complex(n, 1.0, 53);
  for (auto& u : uv) u += C(2.5, 0.5);  // away from 0 (divide, log, sqrt)
  struct Case {
    const char* name;
    std::function<Array(const Array&, const Array&)> op;
    std::function<C(C, C)> ref;
    bool binary;
  };
  std::vector<Case> cases = {
      {"exp", [](const Array& a, const Array&) { return exp(a); },
       [](C a, C) { return std::exp(a); }, false},
      {"sin", [](const Array& a, const Array&) { return sin(a); },
       [](C a, C) { return std::sin(a); }, false},
      {"tanh", [](const Array& a, const Array&) { return tanh(a); },
       [](C a, C) { return std::tanh(a); }, false},
      {"log", [](const Array&, const Array& b) { return log(b); },
       [](C, C b) { return std::log(b); }, true},
      {"sqrt", [](const Array&, const Array& b) { return sqrt(b); },
       [](C, C b) { return std::sqrt(b); }, true},
      {"multiply", [](const Array& a, const Array& b) { return multiply(a, b); },
       [](C a, C b) { return a * b; }, true},
      {"divide", [](const Array& a, const Array& b) { return divide(a, b); },
       [](C a, C b) { return a / b; }, true},
      {"add", [](const Array& a, const Array& b) { return add(a, b); },
       [](C a, C b) { return a + b; }, true},
  };
  Array z = complex_array(zv, {n}), u = complex_array(uv, {n}), w = complex_array(wv, {n});
  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto fn = [&](const std::vector<Array>& in) { return std::vector<Array>{c.op(in[0], in[1])}; };
    auto res = vjp(fn, {z, u}, {w});
    const double h = 1e-6;
    for (int arg = 0; arg < (c.binary ? 2 : 1); ++arg) {
      std::vector<C> want(n);
      for (int64_t i = 0; i < n; ++i) {
        // L's terms are per element: only element i depends on z[i] / u[i].
        auto l = [&](C d) {
          C a = zv[i], b = uv[i];
          (arg == 0 ? a : b) += d;
          return std::real(std::conj(wv[i]) * c.ref(a, b));
        };
        want[i] = C((l(C(h, 0)) - l(C(-h, 0))) / (2 * h), (l(C(0, h)) - l(C(0, -h))) / (2 * h));
      }
      // log and sqrt read only u: z's cotangent is then zero, as the differences say.
      expect_complex_close(res.second.at(arg), want, 2e-5,
                           std::string("argument ") + std::to_string(arg));
    }
  }
}

// sum and prod over an axis of complex64: the vjp is the cotangent (sum) and the cotangent times
// the conjugate of the product of the other elements (prod), as central differences of
// L = Re(sum(conj(W) * reduce(z, axis=1))) say.
TEST(OpsComplex, ReductionVjpMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 4;
  auto zv = random_complex(rows * cols, 1.2, 61), wv = random_complex(rows, 1.0, 62);
  Array z = complex_array(zv, {rows, cols}), w = complex_array(wv, {rows});
  for (const char* op : {"sum", "prod"}) {
    SCOPED_TRACE(op);
    bool is_sum = std::string(op) == "sum";
    auto fn = [&](const std::vector<Array>& in) {
      return std::vector<Array>{is_sum ? sum(in[0], std::vector<int>{1})
                                       : prod(in[0], std::vector<int>{1})};
    };
    auto res = vjp(fn, {z}, {w});
    const double h = 1e-6;
    std::vector<C> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        auto l = [&](C d) {
          C acc = is_sum ? C(0) : C(1);
          for (int64_t k = 0; k < cols; ++k) {
            C v = zv[r * cols + k] + (k == c ? d : C(0));
            acc = is_sum ? acc + v : acc * v;
          }
          return std::real(std::conj(wv[r]) * acc);
        };
        want[r * cols + c] =
            C((l(C(h, 0)) - l(C(-h, 0))) / (2 * h), (l(C(0, h)) - l(C(0, -h))) / (2 * h));
      }
    expect_complex_close(res.second.at(0), want, 2e-5, op);
  }
}

// Scans of complex64: cumsum / cumprod in both directions, inclusive and exclusive, and
// cummax / cummin by the lexicographic order of the reductions (MLX's).
TEST(OpsComplex, ScansMatchReference) {
  const int64_t rows = 3, cols = 7;
  auto v = random_complex(rows * cols, 1.3, 71);
  v[9] = v[8];  // a tie for the running extremes
  Array a = complex_array(v, {rows, cols});
  auto less = [](C x, C y) {
    return x.real() < y.real() || (x.real() == y.real() && x.imag() < y.imag());
  };
  for (const char* op : {"sum", "prod", "max", "min"})
    for (bool reverse : {false, true})
      for (bool inclusive : {true, false}) {
        std::string o = op;
        std::vector<C> want(rows * cols);
        for (int64_t r = 0; r < rows; ++r) {
          bool have = false;
          C acc = o == "sum" ? C(0) : o == "prod" ? C(1) : C(0);
          for (int64_t j = 0; j < cols; ++j) {
            int64_t k = reverse ? cols - 1 - j : j;
            C x = v[r * cols + k];
            auto step = [&] {
              if (o == "sum")
                acc += x;
              else if (o == "prod")
                acc *= x;
              else if (!have || (o == "max" ? less(acc, x) : less(x, acc)))
                acc = x;
              have = true;
            };
            if (inclusive) step();
            want[r * cols + k] = acc;
            if (!inclusive) step();
          }
        }
        Array got = o == "sum"    ? cumsum(a, 1, reverse, inclusive)
                    : o == "prod" ? cumprod(a, 1, reverse, inclusive)
                    : o == "max"  ? cummax(a, 1, reverse, inclusive)
                                  : cummin(a, 1, reverse, inclusive);
        std::string what = fmt::format("cum{} reverse {} inclusive {}", o, reverse, inclusive);
        if ((o == "max" || o == "min") && !inclusive) {
          // The exclusive extreme's first output is the identity: (-inf, -inf) for cummax and
          // (inf, inf) for cummin; the other outputs are compared below.
          auto g = complex_values(got);
          double inf = o == "max" ? -INFINITY : INFINITY;
          for (int64_t r = 0; r < rows; ++r) {
            int64_t first = r * cols + (reverse ? cols - 1 : 0);
            EXPECT_EQ(g[first], C(inf, inf)) << what;
            want[first] = g[first] = 0;
          }
          std::vector<float> f;
          for (auto z : g) f.insert(f.end(), {float(z.real()), float(z.imag())});
          got = Array::from_vector(f, {rows, cols}, Dtype::complex64, Device::cpu());
        }
        expect_complex_close(got, want, 2e-5, what);
      }
}
