// Built-in ops (src/ops, include/alloy/ops.h) against float64 references computed here, over
// dtypes and layouts (contiguous, strided views, broadcasts, 0-d scalars, empty arrays).
// Outputs are poisoned before every op kernel runs (ops::set_poison_outputs).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>

#include "alloy/alloy.h"
#include "core/array_node.h"
#include "kernel/custom_kernel.h"
#include "ops/functors.h"
#include "ops/kernels.h"
#include "ops/primitives.h"

using namespace alloy;

namespace {

struct PoisonOutputs : ::testing::Environment {
  void SetUp() override { ops::set_poison_outputs(true); }
};
const auto* const kPoison = ::testing::AddGlobalTestEnvironment(new PoisonOutputs);

double tol(Dtype t) {
  switch (t) {
    case Dtype::float16:
      return 2e-3;
    case Dtype::bfloat16:
      return 1.6e-2;
    case Dtype::float32:
      return 2e-6;
    case Dtype::float64:
      return 1e-12;
    default:
      return 0;
  }
}

// Values rounded to `t` (what the kernel sees as its input).
std::vector<double> rounded(const std::vector<double>& v, Dtype t) {
  return Array::from_doubles(v, {static_cast<int64_t>(v.size())}, t, Device::cpu()).to_doubles();
}

std::vector<double> random_values(size_t n, double lo, double hi, uint64_t seed, bool integer) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = integer ? std::floor(u(rng)) : u(rng);
  return v;
}

void expect_close(const Array& got_a, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  auto got = got_a.to_doubles();
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = want[i], g = got[i];
    bool ok = std::isnan(e)
                  ? std::isnan(g)
                  : (std::isinf(e) ? g == e : std::fabs(g - e) <= atol + rtol * std::fabs(e));
    if (!ok && bad++ < 4)
      ADD_FAILURE() << what << fmt::format(": element {}: got {}, expected {}", i, g, e);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ";
}

// Wraps a double to the integer dtype's range (two's complement, as Metal's integer arithmetic).
double wrap(double v, Dtype t) {
  if (!is_integral(t) || t == Dtype::bool_) return v;
  int bits = static_cast<int>(size_of(t)) * 8;
  if (bits == 64) return v;
  double m = std::ldexp(1.0, bits);
  double r = std::fmod(v, m);
  if (r < 0) r += m;
  if (is_signed(t) && r >= m / 2) r -= m;
  return r;
}

struct UnaryCase {
  const char* op;
  std::function<Array(const Array&)> fn;
  std::function<double(double)> ref;
  double lo, hi;
  double extra_tol = 0;  // relative, added to the dtype's
};

double erfinv_ref(double y) {
  if (y <= -1) return y == -1 ? -INFINITY : NAN;
  if (y >= 1) return y == 1 ? INFINITY : NAN;
  double x = 0;
  for (int i = 0; i < 100; ++i) {
    double d = 2 / std::sqrt(M_PI) * std::exp(-x * x);
    double step = (std::erf(x) - y) / d;
    x -= step;
    if (std::fabs(step) < 1e-17) break;
  }
  return x;
}

std::vector<UnaryCase> unary_cases() {
  return {
      {"abs", [](auto& a) { return abs(a); }, [](double x) { return std::fabs(x); }, -4, 4},
      {"negative", [](auto& a) { return negative(a); }, [](double x) { return -x; }, -4, 4},
      {"sign", [](auto& a) { return sign(a); }, [](double x) { return (x > 0) - (x < 0); }, -4, 4},
      {"square", [](auto& a) { return square(a); }, [](double x) { return x * x; }, -4, 4},
      {"exp", [](auto& a) { return exp(a); }, [](double x) { return std::exp(x); }, -4, 4},
      {"expm1", [](auto& a) { return expm1(a); }, [](double x) { return std::expm1(x); }, -2, 2},
      {"log", [](auto& a) { return log(a); }, [](double x) { return std::log(x); }, 0.1, 8},
      {"log2", [](auto& a) { return log2(a); }, [](double x) { return std::log2(x); }, 0.1, 8},
      {"log10", [](auto& a) { return log10(a); }, [](double x) { return std::log10(x); }, 0.1, 8},
      {"log1p", [](auto& a) { return log1p(a); }, [](double x) { return std::log1p(x); }, -0.5, 4},
      {"sqrt", [](auto& a) { return sqrt(a); }, [](double x) { return std::sqrt(x); }, 0, 9},
      {"rsqrt", [](auto& a) { return rsqrt(a); }, [](double x) { return 1 / std::sqrt(x); }, 0.1,
       9},
      {"sin", [](auto& a) { return sin(a); }, [](double x) { return std::sin(x); }, -3, 3},
      {"cos", [](auto& a) { return cos(a); }, [](double x) { return std::cos(x); }, -3, 3},
      {"tan", [](auto& a) { return tan(a); }, [](double x) { return std::tan(x); }, -1.2, 1.2},
      {"tanh", [](auto& a) { return tanh(a); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"arcsin", [](auto& a) { return arcsin(a); }, [](double x) { return std::asin(x); }, -1, 1},
      {"arccos", [](auto& a) { return arccos(a); }, [](double x) { return std::acos(x); }, -1, 1},
      {"arctan", [](auto& a) { return arctan(a); }, [](double x) { return std::atan(x); }, -4, 4},
      {"sinh", [](auto& a) { return sinh(a); }, [](double x) { return std::sinh(x); }, -3, 3},
      {"cosh", [](auto& a) { return cosh(a); }, [](double x) { return std::cosh(x); }, -3, 3},
      {"sigmoid", [](auto& a) { return sigmoid(a); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"erf", [](auto& a) { return erf(a); }, [](double x) { return std::erf(x); }, -4.5, 4.5},
      {"erfc", [](auto& a) { return erfc(a); }, [](double x) { return std::erfc(x); }, -2, 6, 5e-5},
      {"erfinv", [](auto& a) { return erfinv(a); }, erfinv_ref, -0.999, 0.999, 1e-5},
      {"floor", [](auto& a) { return floor(a); }, [](double x) { return std::floor(x); }, -4, 4},
      {"ceil", [](auto& a) { return ceil(a); }, [](double x) { return std::ceil(x); }, -4, 4},
      {"round", [](auto& a) { return round(a); }, [](double x) { return std::nearbyint(x); }, -4,
       4},
  };
}

bool float_result(const std::string& op) {
  return op != "abs" && op != "negative" && op != "sign" && op != "square" && op != "floor" &&
         op != "ceil" && op != "round";
}

}  // namespace

TEST(OpsUnary, FloatDtypesMatchFloat64Reference) {
  // Every op in float32; a sample in the other float dtypes (half/bfloat share the opmath path;
  // float64 runs every op in the gradient tests). Each (op, dtype, layout) is one JIT compile.
  const std::set<std::string> sample{"exp", "erf", "erfinv", "sigmoid", "round", "abs"};
  for (auto& c : unary_cases()) {
    for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::bfloat16, Dtype::float64}) {
      if (t != Dtype::float32 && !sample.count(c.op)) continue;
      auto v = rounded(random_values(1000, c.lo, c.hi, 7, false), t);
      if (std::string(c.op) == "round") v[0] = 2.5, v[1] = -0.5, v[2] = 1.5;  // ties to even
      Array a = Array::from_doubles(v, {10, 100}, t, Device::cpu());
      Array r = c.fn(a);
      EXPECT_EQ(r.dtype(), t) << c.op;
      std::vector<double> want;
      for (double x : v) want.push_back(c.ref(x));
      double rt = tol(t) * 4 + c.extra_tol;
      expect_close(r, want, rt, rt, fmt::format("{} {}", c.op, dtype_name(t)));
    }
  }
}

TEST(OpsUnary, IntegerInputsGiveFloat32ForMathAndKeepDtypeOtherwise) {
  for (auto& c : unary_cases()) {
    for (Dtype t : {Dtype::int32, Dtype::uint8, Dtype::int8}) {
      if (t != Dtype::int32 && std::string(c.op) != "abs" && std::string(c.op) != "square" &&
          std::string(c.op) != "exp")
        continue;
      double lo = std::max(c.lo, is_signed(t) ? -4.0 : 0.0), hi = std::max(c.hi, lo + 1);
      if (std::string(c.op) == "arcsin" || std::string(c.op) == "arccos" ||
          std::string(c.op) == "erfinv")
        lo = 0, hi = 1;  // {0}
      auto v = random_values(300, lo, hi, 11, true);
      if (std::string(c.op) == "negative" && !is_signed(t)) continue;
      Array a = Array::from_doubles(v, {300}, t, Device::cpu());
      Array r = c.fn(a);
      Dtype want_t = float_result(c.op) ? Dtype::float32 : t;
      EXPECT_EQ(r.dtype(), want_t) << c.op << " " << dtype_name(t);
      std::vector<double> want;
      for (double x : v) want.push_back(wrap(c.ref(x), want_t));
      double rt = tol(want_t) * 4 + c.extra_tol;
      expect_close(r, want, rt, rt, fmt::format("{} {}", c.op, dtype_name(t)));
    }
  }
}

// round(a, decimals): MLX's arithmetic (float scale and its float inverse, half-way cases to
// even), so the reference repeats it in float; integers round in float32 and come back.
TEST(OpsUnary, RoundToDecimals) {
  auto v = random_values(200, -50, 50, 31, false);
  for (int decimals : {2, 1, -1}) {
    float scale = static_cast<float>(std::pow(10.0, decimals));
    Array a = Array::from_doubles(v, {200}, Dtype::float32, Device::cpu());
    Array r = round(a, decimals);
    EXPECT_EQ(r.dtype(), Dtype::float32);
    std::vector<double> want;
    for (double x : v) {
      float t = static_cast<float>(x) * scale;
      want.push_back(static_cast<float>(std::nearbyint(t) * (1.0f / scale)));
    }
    expect_close(r, want, 0, 0, fmt::format("float32, decimals {}", decimals));
  }
  std::vector<double> iv = {1234, -1255, 1250, 7, -5, 15};
  Array ai = Array::from_doubles(iv, {6}, Dtype::int32, Device::cpu());
  Array ri = round(ai, -1);
  EXPECT_EQ(ri.dtype(), Dtype::int32);
  EXPECT_EQ(ri.to_doubles(), (std::vector<double>{1230, -1260, 1250, 10, 0, 20}));
  EXPECT_EQ(round(ai, 0).to_doubles(), iv);
}

TEST(OpsUnary, SpecialValues) {
  Array a = Array::from_doubles({NAN, INFINITY, -INFINITY, -0.0, 1, -1}, {6}, Dtype::float32);
  expect_close(erf(a), {NAN, 1, -1, 0, std::erf(1.0), std::erf(-1.0)}, 1e-6, 1e-7, "erf");
  expect_close(erfinv(Array::from_doubles({1, -1, 1.5, 0}, {4}, Dtype::float32)),
               {INFINITY, -INFINITY, NAN, 0}, 0, 0, "erfinv");
  expect_close(isnan(a), {1, 0, 0, 0, 0, 0}, 0, 0, "isnan");
  expect_close(isinf(a), {0, 1, 1, 0, 0, 0}, 0, 0, "isinf");
  expect_close(sigmoid(a), {NAN, 1, 0, 0.5, 1 / (1 + std::exp(-1.0)), 1 / (1 + std::exp(1.0))},
               1e-6, 1e-7, "sigmoid");
  Array i = Array::from_doubles({-3, 0, 5}, {3}, Dtype::int32);
  EXPECT_EQ(isnan(i).dtype(), Dtype::bool_);
  expect_close(isnan(i), {0, 0, 0}, 0, 0, "isnan int");
  expect_close(logical_not(Array::from_doubles({0, 2.5, -1}, {3}, Dtype::float32)), {1, 0, 0}, 0, 0,
               "logical_not");
  expect_close(bitwise_invert(Array::from_doubles({0, 5, 255}, {3}, Dtype::uint8)), {255, 250, 0},
               0, 0, "bitwise_invert");
  EXPECT_THROW(negative(Array::from_doubles({1}, {1}, Dtype::bool_)), std::invalid_argument);
  EXPECT_THROW(bitwise_invert(Array::from_doubles({1}, {1}, Dtype::float32)),
               std::invalid_argument);
  // Integer negation wraps as on Metal.
  expect_close(negative(Array::from_doubles({-128, 5}, {2}, Dtype::int8)), {-128, -5}, 0, 0,
               "negative int8");
}

namespace {

struct BinaryCase {
  const char* op;
  std::function<Array(const Array&, const Array&)> fn;
  std::function<double(double, double)> ref;
  bool ints;    // defined for integers
  bool floats;  // defined for floats
  double lo = -6, hi = 6;
  bool nonzero_b = false;
};

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](auto& a, auto& b) { return a + b; }, [](double a, double b) { return a + b; },
       true, true},
      {"subtract", [](auto& a, auto& b) { return a - b; }, [](double a, double b) { return a - b; },
       true, true},
      {"multiply", [](auto& a, auto& b) { return a * b; }, [](double a, double b) { return a * b; },
       true, true},
      {"divide", [](auto& a, auto& b) { return a / b; }, [](double a, double b) { return a / b; },
       false, true, -6, 6, true},
      {"floor_divide", [](auto& a, auto& b) { return floor_divide(a, b); },
       [](double a, double b) { return std::floor(a / b); }, true, true, -20, 20, true},
      {"remainder", [](auto& a, auto& b) { return a % b; }, py_mod, true, true, -20, 20, true},
      {"power", [](auto& a, auto& b) { return power(a, b); },
       [](double a, double b) { return std::pow(a, b); }, true, true, 0.5, 4},
      {"maximum", [](auto& a, auto& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, true, true},
      {"minimum", [](auto& a, auto& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, true, true},
      {"arctan2", [](auto& a, auto& b) { return arctan2(a, b); },
       [](double a, double b) { return std::atan2(a, b); }, false, true},
      {"logaddexp", [](auto& a, auto& b) { return logaddexp(a, b); },
       [](double a, double b) {
         double m = std::max(a, b);
         return m + std::log1p(std::exp(-std::fabs(a - b)));
       },
       false, true},
      {"equal", [](auto& a, auto& b) { return a == b; }, [](double a, double b) { return a == b; },
       true, true, -2, 2},
      {"not_equal", [](auto& a, auto& b) { return a != b; },
       [](double a, double b) { return a != b; }, true, true, -2, 2},
      {"less", [](auto& a, auto& b) { return a < b; }, [](double a, double b) { return a < b; },
       true, true},
      {"less_equal", [](auto& a, auto& b) { return a <= b; },
       [](double a, double b) { return a <= b; }, true, true, -2, 2},
      {"greater", [](auto& a, auto& b) { return a > b; }, [](double a, double b) { return a > b; },
       true, true},
      {"greater_equal", [](auto& a, auto& b) { return a >= b; },
       [](double a, double b) { return a >= b; }, true, true, -2, 2},
      {"logical_and", [](auto& a, auto& b) { return a && b; },
       [](double a, double b) { return a != 0 && b != 0; }, true, true, -1, 2},
      {"logical_or", [](auto& a, auto& b) { return a || b; },
       [](double a, double b) { return a != 0 || b != 0; }, true, true, -1, 2},
      {"bitwise_and", [](auto& a, auto& b) { return a & b; },
       [](double a, double b) {
         return static_cast<double>(static_cast<int64_t>(a) & static_cast<int64_t>(b));
       },
       true, false, 0, 100},
      {"bitwise_or", [](auto& a, auto& b) { return a | b; },
       [](double a, double b) {
         return static_cast<double>(static_cast<int64_t>(a) | static_cast<int64_t>(b));
       },
       true, false, 0, 100},
      {"bitwise_xor", [](auto& a, auto& b) { return a ^ b; },
       [](double a, double b) {
         return static_cast<double>(static_cast<int64_t>(a) ^ static_cast<int64_t>(b));
       },
       true, false, 0, 100},
      {"left_shift", [](auto& a, auto& b) { return a << b; },
       [](double a, double b) { return a * std::ldexp(1.0, static_cast<int>(b)); }, true, false, 0,
       7},
      {"right_shift", [](auto& a, auto& b) { return a >> b; },
       [](double a, double b) { return std::floor(a / std::ldexp(1.0, static_cast<int>(b))); },
       true, false, 0, 7},
  };
}

bool bool_result(const std::string& op) {
  return op == "equal" || op == "not_equal" || op == "less" || op == "less_equal" ||
         op == "greater" || op == "greater_equal" || op == "logical_and" || op == "logical_or";
}

void check_binary(const BinaryCase& c, Dtype t, const Array& a, const Array& b,
                  const std::string& what) {
  Array r = c.fn(a, b);
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  ASSERT_EQ(r.shape(), shape) << what;
  Dtype want_t = bool_result(c.op) ? Dtype::bool_
                 : (std::string(c.op) == "divide" || std::string(c.op) == "arctan2" ||
                    std::string(c.op) == "logaddexp") &&
                         !is_floating(t)
                     ? Dtype::float32
                     : t;
  EXPECT_EQ(r.dtype(), want_t) << what;
  // Reference over the broadcast elements, read through the (possibly strided) inputs.
  auto av = a.broadcast_to(shape).contiguous().to_doubles();
  auto bv = b.broadcast_to(shape).contiguous().to_doubles();
  std::vector<double> want;
  for (size_t i = 0; i < av.size(); ++i) want.push_back(wrap(c.ref(av[i], bv[i]), want_t));
  // Float results of half/bfloat computed in float: one rounding of the exact value.
  want = rounded(want, want_t);
  double rt = tol(want_t) * 2;
  expect_close(r, want, rt, rt, what);
}

}  // namespace

TEST(OpsBinary, DtypesMatchFloat64Reference) {
  for (auto& c : binary_cases()) {
    for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::bfloat16, Dtype::float64, Dtype::int32,
                    Dtype::uint8, Dtype::int8, Dtype::int64}) {
      bool integer = !is_floating(t);
      if (integer ? !c.ints : !c.floats) continue;
      // Every op in float32 and int32 (and bfloat16 for the float ones); a sample elsewhere.
      bool sampled = std::string(c.op) == "add" || std::string(c.op) == "multiply" ||
                     std::string(c.op) == "maximum" || std::string(c.op) == "remainder" ||
                     std::string(c.op) == "floor_divide" || std::string(c.op) == "less" ||
                     std::string(c.op) == "bitwise_xor";
      if (t != Dtype::float32 && t != Dtype::int32 && !sampled) continue;
      double lo = c.lo, hi = c.hi;
      if (integer && !is_signed(t)) lo = std::max(lo, 0.0), hi = std::max(hi, 2.0);
      auto av = rounded(random_values(600, lo, hi, 3, integer), t);
      auto bv = rounded(random_values(600, lo, hi, 5, integer), t);
      if (c.nonzero_b)
        for (auto& x : bv)
          if (x == 0) x = 3;
      Array a = Array::from_doubles(av, {20, 30}, t, Device::cpu());
      Array b = Array::from_doubles(bv, {20, 30}, t, Device::cpu());
      check_binary(c, t, a, b, fmt::format("{} {}", c.op, dtype_name(t)));
    }
  }
}

TEST(OpsBinary, IntegerEdgeCasesDoNotTrap) {
  Array a = Array::from_doubles({7, -7, -2147483648.0, 5}, {4}, Dtype::int32);
  Array b = Array::from_doubles({0, 2, -1, -1}, {4}, Dtype::int32);
  expect_close(floor_divide(a, b), {0, -4, -2147483648.0, -5}, 0, 0, "floor_divide");
  expect_close(remainder(a, b), {0, 1, 0, 0}, 0, 0, "remainder");
  expect_close(
      a + Array::from_doubles({2147483647.0}, {}, Dtype::int32),
      {wrap(7 + 2147483647.0, Dtype::int32), 2147483640, -1, wrap(2147483652.0, Dtype::int32)}, 0,
      0, "wrapping add");
  expect_close(power(Array::from_doubles({2, -1, 3, 1}, {4}, Dtype::int32),
                     Array::from_doubles({10, 3, -1, -5}, {4}, Dtype::int32)),
               {1024, -1, 0, 1}, 0, 0, "int power");
}

TEST(OpsBinary, MaximumMinimumPropagateNaN) {
  Array a = Array::from_doubles({NAN, 1, 2, -0.0}, {4}, Dtype::float32);
  Array b = Array::from_doubles({1, NAN, 1, 0}, {4}, Dtype::float32);
  auto mx = maximum(a, b).to_doubles(), mn = minimum(a, b).to_doubles();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mx[2], 2);
  EXPECT_EQ(mn[2], 1);
}

TEST(OpsLayouts, StridedBroadcastScalarAndEmptyInputs) {
  auto c = binary_cases()[2];  // multiply
  auto base = Array::from_doubles(random_values(24 * 10, -3, 3, 9, false), {24, 10}, Dtype::float32,
                                  Device::cpu());
  Array t = base.transpose();  // (10, 24), strided
  Array stepped = base.slice({{1, std::nullopt, 2}, {std::nullopt, std::nullopt, -3}});  // (12, 4)
  Array row = Array::from_doubles(random_values(24, -3, 3, 1, false), {24}, Dtype::float32);
  Array col = Array::from_doubles(random_values(10, -3, 3, 2, false), {10, 1}, Dtype::float32);
  Array scalar = Array::from_doubles({1.5}, {}, Dtype::float32);
  Array one = Array::from_doubles({2.5}, {1, 1}, Dtype::float32);
  check_binary(c, Dtype::float32, t, row, "transposed * row");
  check_binary(c, Dtype::float32, t, col, "transposed * column");
  check_binary(c, Dtype::float32, col, row, "column * row");
  check_binary(c, Dtype::float32, t, scalar, "transposed * scalar");
  check_binary(c, Dtype::float32, scalar, scalar, "scalar * scalar");
  check_binary(c, Dtype::float32, one, t, "(1,1) * transposed");
  check_binary(c, Dtype::float32, stepped, stepped.transpose().transpose(), "stepped");
  check_binary(c, Dtype::float32, t, t, "transposed * transposed");
  Array empty = Array::from_doubles({}, {0, 3}, Dtype::float32);
  Array e = empty * Array::from_doubles({1, 2, 3}, {3}, Dtype::float32);
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  EXPECT_EQ(e.to_doubles().size(), 0u);
  EXPECT_EQ(exp(empty).shape(), (Shape{0, 3}));
  EXPECT_EQ(sum(empty, 0).to_doubles(), (std::vector<double>{0, 0, 0}));
  EXPECT_THROW(add(row, Array::from_doubles({1, 2}, {2}, Dtype::float32)), std::invalid_argument);
  // A unary op on a strided view.
  expect_close(
      exp(stepped),
      [&] {
        std::vector<double> w;
        for (double x : stepped.to_doubles()) w.push_back(std::exp(x));
        return w;
      }(),
      1e-6, 1e-7, "exp of a stepped slice");
}

TEST(OpsPromotion, MatchesMlxTable) {
  using D = Dtype;
  struct P {
    D a, b, r;
  };
  for (auto p : std::vector<P>{{D::int8, D::uint8, D::int16},
                               {D::uint16, D::int8, D::int32},
                               {D::uint32, D::int32, D::int64},
                               {D::uint64, D::int64, D::float32},
                               {D::uint64, D::uint8, D::uint64},
                               {D::float16, D::bfloat16, D::float32},
                               {D::int64, D::float16, D::float16},
                               {D::bool_, D::int8, D::int8},
                               {D::bfloat16, D::float32, D::float32},
                               {D::float64, D::float16, D::float64},
                               {D::int32, D::complex64, D::complex64}}) {
    EXPECT_EQ(promote_types(p.a, p.b), p.r) << dtype_name(p.a) << "+" << dtype_name(p.b);
    EXPECT_EQ(promote_types(p.b, p.a), p.r);
  }
  // Weak scalars: the array's dtype wins unless the scalar's kind is wider.
  Array h = Array::from_doubles({1, 2}, {2}, D::float16);
  Array i8 = Array::from_doubles({1, 2}, {2}, D::int8);
  EXPECT_EQ((h * 2.0).dtype(), D::float16);
  EXPECT_EQ((i8 * 2).dtype(), D::int8);
  EXPECT_EQ((i8 * 2.5).dtype(), D::float32);
  EXPECT_EQ((1 + i8).dtype(), D::int8);
  expect_close(i8 * 2.5, {2.5, 5}, 0, 0, "int8 * 2.5");
  // int64 + float16: rounded to float16 before the add (promotion first).
  Array big = Array::from_doubles({2049}, {1}, D::int64);
  expect_close(big + Array::from_doubles({0}, {1}, D::float16), {2048}, 0, 0, "int64 + half");
}

TEST(OpsWhereClipAstype, MatchReference) {
  auto cv = random_values(50, 0, 2, 4, true);
  auto xv = random_values(50, -5, 5, 5, false);
  Array cond = Array::from_doubles(cv, {5, 10}, Dtype::bool_);
  Array x = Array::from_doubles(xv, {5, 10}, Dtype::float32);
  Array y = Array::from_doubles({-1}, {}, Dtype::int32);
  Array w = where(cond, x, y);
  EXPECT_EQ(w.dtype(), Dtype::float32);
  std::vector<double> want;
  auto xr = rounded(xv, Dtype::float32);
  for (size_t i = 0; i < cv.size(); ++i) want.push_back(cv[i] != 0 ? xr[i] : -1);
  expect_close(w, want, 0, 0, "where");
  Array c = clip(x, Array(-1.0f), Array(2.0f));
  want.clear();
  for (double v : xr) want.push_back(std::clamp(v, -1.0, 2.0));
  expect_close(c, want, 0, 0, "clip");
  Array ci = clip(Array::from_doubles({1, 5}, {2}, Dtype::int32), std::nullopt, Array(3));
  EXPECT_EQ(ci.dtype(), Dtype::int32);
  expect_close(ci, {1, 3}, 0, 0, "clip int");
  EXPECT_THROW(clip(x, std::nullopt, std::nullopt), std::invalid_argument);
  expect_close(
      astype(x, Dtype::int32),
      [&] {
        std::vector<double> t;
        for (double v : xr) t.push_back(std::trunc(v));
        return t;
      }(),
      0, 0, "astype");
}

// ---- reductions -----------------------------------------------------------------------------

namespace {
// Reference reduction of a row-major array over `axes` (kept as size 1).
std::vector<double> ref_reduce(const std::vector<double>& v, const Shape& shape,
                               const std::vector<int>& axes, double init,
                               const std::function<double(double, double)>& f) {
  Shape out = shape;
  for (int a : axes) out[a] = 1;
  int64_t n = 1;
  for (auto d : out) n *= d;
  std::vector<double> r(n, init);
  Strides st = row_major_strides(out);
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t rem = static_cast<int64_t>(i), o = 0;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      int64_t k = rem % shape[d];
      rem /= shape[d];
      if (out[d] != 1 || shape[d] == 1) o += (out[d] == 1 ? 0 : k) * st[d];
    }
    r[o] = f(r[o], v[i]);
  }
  return r;
}
}  // namespace

TEST(OpsReduce, AxesKeepdimsDtypesAndLayouts) {
  Shape shape{4, 5, 6};
  auto v = random_values(120, -2, 2, 21, false);
  for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::int32, Dtype::uint8, Dtype::bool_}) {
    auto vals = v;
    if (!is_floating(t))
      for (auto& x : vals) x = std::floor((x + 2) * (t == Dtype::bool_ ? 0.4 : 3));
    vals = rounded(vals, t);
    Array a = Array::from_doubles(vals, shape, t);
    // Every axes set in float32; trailing (contiguous rows), middle and all axes elsewhere.
    auto axes_sets = t == Dtype::float32
                         ? std::vector<std::vector<int>>{{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}}
                         : std::vector<std::vector<int>>{{2}, {1}, {0, 1, 2}};
    for (auto axes : axes_sets) {
      for (bool transposed : {false, true}) {
        if (transposed && t != Dtype::float32 && t != Dtype::int32) continue;
        Array x = a;
        std::vector<double> xv = vals;
        Shape xs = shape;
        if (transposed) {  // a strided view: reduce over the transposed axes
          x = a.transpose({2, 0, 1});
          xv = x.contiguous().to_doubles();
          xs = x.shape();
        }
        std::string what = fmt::format("{} axes {} {}", dtype_name(t), fmt::join(axes, ","),
                                       transposed ? "transposed" : "");
        auto s = sum(x, axes, true);
        EXPECT_EQ(s.dtype(), ops::reduce_dtypes("sum", t).second);
        auto want = ref_reduce(xv, xs, axes, 0, [](double p, double q) { return p + q; });
        double rt = is_floating(t) ? tol(t) * 8 : 0;
        expect_close(s, want, rt, rt * 4, "sum " + what);
        auto mx =
            ref_reduce(xv, xs, axes, -INFINITY, [](double p, double q) { return std::max(p, q); });
        expect_close(max(x, axes, true), mx, 0, 0, "max " + what);
        auto mn =
            ref_reduce(xv, xs, axes, INFINITY, [](double p, double q) { return std::min(p, q); });
        expect_close(min(x, axes, true), mn, 0, 0, "min " + what);
        auto an = ref_reduce(xv, xs, axes, 0, [](double p, double q) { return p || q != 0; });
        expect_close(any(x, axes, true), an, 0, 0, "any " + what);
        auto al = ref_reduce(xv, xs, axes, 1, [](double p, double q) { return p && q != 0; });
        expect_close(all(x, axes, true), al, 0, 0, "all " + what);
        Array nokeep = sum(x, axes, false);
        EXPECT_EQ(nokeep.ndim(), x.ndim() - static_cast<int>(axes.size()));
      }
    }
  }
}

TEST(OpsReduce, DtypesFollowMlx) {
  EXPECT_EQ(sum(Array::from_doubles({1}, {1}, Dtype::int8)).dtype(), Dtype::int32);
  EXPECT_EQ(sum(Array::from_doubles({1}, {1}, Dtype::bool_)).dtype(), Dtype::int32);
  EXPECT_EQ(prod(Array::from_doubles({1}, {1}, Dtype::uint8)).dtype(), Dtype::uint32);
  EXPECT_EQ(sum(Array::from_doubles({1}, {1}, Dtype::float16)).dtype(), Dtype::float16);
  EXPECT_EQ(sum(Array::from_doubles({1}, {1}, Dtype::int64)).dtype(), Dtype::int64);
  EXPECT_EQ(mean(Array::from_doubles({1, 2}, {2}, Dtype::int32)).dtype(), Dtype::float32);
  EXPECT_EQ(argmax(Array::from_doubles({1, 3, 3}, {3}, Dtype::int32)).dtype(), Dtype::uint32);
  EXPECT_THROW(max(Array::from_doubles({}, {0}, Dtype::float32)), std::invalid_argument);
  EXPECT_THROW(sum(Array::from_doubles({1}, {1}, Dtype::float32), 1), std::invalid_argument);
  EXPECT_THROW(sum(Array::from_doubles({1, 2}, {2}, Dtype::float32), std::vector<int>{0, -1}),
               std::invalid_argument);
}

TEST(OpsReduce, LeadingAxesInPassesOverRowBlocks) {
  // Leading axes of row-contiguous inputs reduce in passes of 16 rows (37 -> 3 -> 1 rows, and
  // 37 * 9 = 333 -> 21 -> 2 -> 1), in the accumulator's dtype between passes.
  for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::int32}) {
    auto v = random_values(37 * 9 * 5, -3, 3, 77, !is_floating(t));
    v = rounded(v, t);
    Shape shape{37, 9, 5};
    Array a = Array::from_doubles(v, shape, t);
    for (auto axes : std::vector<std::vector<int>>{{0}, {0, 1}}) {
      std::string what = fmt::format("{} axes {}", dtype_name(t), fmt::join(axes, ","));
      auto want = ref_reduce(v, shape, axes, 0, [](double p, double q) { return p + q; });
      double rt = is_floating(t) ? tol(t) * 16 : 0;
      expect_close(sum(a, axes, true), want, rt, rt * 8, "sum " + what);
      auto mx =
          ref_reduce(v, shape, axes, -INFINITY, [](double p, double q) { return std::max(p, q); });
      expect_close(max(a, axes), mx, 0, 0, "max " + what);
    }
  }
}

TEST(OpsReduce, IntegerRowsLongerThanEightElements) {
  // Regression: g++ 12 miscompiled an eight-accumulator integer sum (halved results).
  for (Dtype t : {Dtype::int32, Dtype::uint8, Dtype::int64}) {
    auto v = rounded(random_values(3 * 100, 0, 5, 91, true), t);
    Array a = Array::from_doubles(v, {3, 100}, t);
    auto want = ref_reduce(v, {3, 100}, {1}, 0, [](double p, double q) { return p + q; });
    expect_close(sum(a, 1), want, 0, 0, fmt::format("sum {}", dtype_name(t)));
    auto mx =
        ref_reduce(v, {3, 100}, {1}, -INFINITY, [](double p, double q) { return std::max(p, q); });
    expect_close(max(a, 1), mx, 0, 0, fmt::format("max {}", dtype_name(t)));
  }
}

TEST(OpsReduce, LongRowsInChunks) {
  // 2 rows of 40000 (> 4 chunks of 4096): chunk partials, then a per-row pass; and all axes.
  for (Dtype t : {Dtype::float32, Dtype::int32}) {
    auto v = rounded(random_values(80000, -3, 3, 90, t == Dtype::int32), t);
    Array a = Array::from_doubles(v, {2, 40000}, t);
    auto want = ref_reduce(v, {2, 40000}, {1}, 0, [](double p, double q) { return p + q; });
    expect_close(sum(a, 1), want, 1e-5, 1e-3, fmt::format("sum {}", dtype_name(t)));
    auto mx = ref_reduce(v, {2, 40000}, {0, 1}, -INFINITY,
                         [](double p, double q) { return std::max(p, q); });
    expect_close(max(a), mx, 0, 0, fmt::format("max {}", dtype_name(t)));
  }
}
