// Conformance: Metal math functions in metal::, metal::precise:: and metal::fast:: (and
// unqualified, through MLX's `using namespace metal`), against float64; special values
// (exp(-INFINITY) == 0 in safe mode and with fast::exp), the "fast" math_mode compile option, and
// half/bfloat overloads reached through a dtype template argument.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// ---- the function table ------------------------------------------------------------------------

// One column of a math kernel: `stmt` assigns OUT from a in (0.1, 0.9), b in (1.1, 4),
// c in (-3, 3) and c3 = c * 3.0f (float); NS:: is replaced by the namespace under test.
struct MathCase {
  std::string name;
  std::string stmt;
  std::function<double(double a, double b, double c, double c3)> ref;
};

// Functions of metal_math: available in metal::, metal::precise:: and metal::fast::.
std::vector<MathCase> math_functions() {
  using std::atan2;
  return {
      {"exp", "OUT = NS::exp(c);", [](double, double, double c, double) { return std::exp(c); }},
      {"exp2", "OUT = NS::exp2(c);", [](double, double, double c, double) { return std::exp2(c); }},
      {"exp10", "OUT = NS::exp10(c);",
       [](double, double, double c, double) { return std::pow(10.0, c); }},
      {"log", "OUT = NS::log(b);", [](double, double b, double, double) { return std::log(b); }},
      {"log2", "OUT = NS::log2(b);", [](double, double b, double, double) { return std::log2(b); }},
      {"log10", "OUT = NS::log10(b);",
       [](double, double b, double, double) { return std::log10(b); }},
      {"pow", "OUT = NS::pow(b, c);",
       [](double, double b, double c, double) { return std::pow(b, c); }},
      {"powr", "OUT = NS::powr(b, c);",
       [](double, double b, double c, double) { return std::pow(b, c); }},
      {"sqrt", "OUT = NS::sqrt(b);", [](double, double b, double, double) { return std::sqrt(b); }},
      {"rsqrt", "OUT = NS::rsqrt(b);",
       [](double, double b, double, double) { return 1 / std::sqrt(b); }},
      {"sin", "OUT = NS::sin(c);", [](double, double, double c, double) { return std::sin(c); }},
      {"cos", "OUT = NS::cos(c);", [](double, double, double c, double) { return std::cos(c); }},
      {"tan", "OUT = NS::tan(a);", [](double a, double, double, double) { return std::tan(a); }},
      {"asin", "OUT = NS::asin(a);", [](double a, double, double, double) { return std::asin(a); }},
      {"acos", "OUT = NS::acos(a);", [](double a, double, double, double) { return std::acos(a); }},
      {"atan", "OUT = NS::atan(c);", [](double, double, double c, double) { return std::atan(c); }},
      {"atan2", "OUT = NS::atan2(c, b - 2.0f);",
       [](double, double b, double c, double) { return atan2(c, b - 2); }},
      {"sinh", "OUT = NS::sinh(c);", [](double, double, double c, double) { return std::sinh(c); }},
      {"cosh", "OUT = NS::cosh(c);", [](double, double, double c, double) { return std::cosh(c); }},
      {"tanh", "OUT = NS::tanh(c);", [](double, double, double c, double) { return std::tanh(c); }},
      {"asinh", "OUT = NS::asinh(c);",
       [](double, double, double c, double) { return std::asinh(c); }},
      {"acosh", "OUT = NS::acosh(b);",
       [](double, double b, double, double) { return std::acosh(b); }},
      {"atanh", "OUT = NS::atanh(a);",
       [](double a, double, double, double) { return std::atanh(a); }},
      {"sincos.sin", "{ float cv; OUT = NS::sincos(c, cv); }",
       [](double, double, double c, double) { return std::sin(c); }},
      {"sincos.cos", "{ float cv; NS::sincos(c, cv); OUT = cv; }",
       [](double, double, double c, double) { return std::cos(c); }},
      {"floor", "OUT = NS::floor(c3);",
       [](double, double, double, double c3) { return std::floor(c3); }},
      {"ceil", "OUT = NS::ceil(c3);",
       [](double, double, double, double c3) { return std::ceil(c3); }},
      {"round", "OUT = NS::round(c3);",
       [](double, double, double, double c3) { return std::round(c3); }},
      {"rint", "OUT = NS::rint(c3);",
       [](double, double, double, double c3) { return std::nearbyint(c3); }},
      {"trunc", "OUT = NS::trunc(c3);",
       [](double, double, double, double c3) { return std::trunc(c3); }},
      {"round.tie", "OUT = NS::round(NS::floor(b) + 0.5f);",
       [](double, double b, double, double) { return std::round(std::floor(b) + 0.5); }},
      {"rint.tie", "OUT = NS::rint(NS::floor(b) + 0.5f);",
       [](double, double b, double, double) { return std::nearbyint(std::floor(b) + 0.5); }},
      {"round.negtie", "OUT = NS::round(-NS::floor(b) - 0.5f);",
       [](double, double b, double, double) { return std::round(-std::floor(b) - 0.5); }},
      {"rint.negtie", "OUT = NS::rint(-NS::floor(b) - 0.5f);",
       [](double, double b, double, double) { return std::nearbyint(-std::floor(b) - 0.5); }},
      {"fract", "OUT = NS::fract(c3);",
       [](double, double, double, double c3) { return c3 - std::floor(c3); }},
      {"fmod", "OUT = NS::fmod(c3, a);",
       [](double a, double, double, double c3) { return std::fmod(c3, a); }},
      {"fabs", "OUT = NS::fabs(c);", [](double, double, double c, double) { return std::fabs(c); }},
      {"fmin", "OUT = NS::fmin(c, a);",
       [](double a, double, double c, double) { return std::fmin(c, a); }},
      {"fmax", "OUT = NS::fmax(c, a);",
       [](double a, double, double c, double) { return std::fmax(c, a); }},
      {"copysign", "OUT = NS::copysign(a, c);",
       [](double a, double, double c, double) { return std::copysign(a, c); }},
      {"fma", "OUT = NS::fma(a, b, c);",
       [](double a, double b, double c, double) { return a * b + c; }},
  };
}

// Functions tested in metal:: and unqualified only (modf/frexp/ldexp, common, relational).
std::vector<MathCase> metal_only_functions() {
  return {
      {"modf.frac", "{ float ip; OUT = NS::modf(c3, ip); }",
       [](double, double, double, double c3) { return c3 - std::trunc(c3); }},
      {"modf.int", "{ float ip; NS::modf(c3, ip); OUT = ip; }",
       [](double, double, double, double c3) { return std::trunc(c3); }},
      {"frexp.mantissa", "{ int e; OUT = NS::frexp(b * 100.0f, e); }",
       [](double, double b, double, double) {
         int e;
         return std::frexp(f32(b * 100), &e);
       }},
      {"frexp.exponent", "{ int e; NS::frexp(b * 100.0f, e); OUT = float(e); }",
       [](double, double b, double, double) {
         int e;
         std::frexp(f32(b * 100), &e);
         return double(e);
       }},
      {"ldexp", "OUT = NS::ldexp(a, int(c3));",
       [](double a, double, double, double c3) { return std::ldexp(a, int(c3)); }},
      {"abs", "OUT = NS::abs(c);", [](double, double, double c, double) { return std::fabs(c); }},
      {"min", "OUT = NS::min(c, a);",
       [](double a, double, double c, double) { return std::min(c, a); }},
      {"max", "OUT = NS::max(c, a);",
       [](double a, double, double c, double) { return std::max(c, a); }},
      {"clamp", "OUT = NS::clamp(c, -1.0f, 1.0f);",
       [](double, double, double c, double) { return std::clamp(c, -1.0, 1.0); }},
      {"mix", "OUT = NS::mix(a, b, 0.3f);",
       [](double a, double b, double, double) { return a + (b - a) * f32(0.3); }},
      {"saturate", "OUT = NS::saturate(c);",
       [](double, double, double c, double) { return std::clamp(c, 0.0, 1.0); }},
      {"sign", "OUT = NS::sign(c);",
       [](double, double, double c, double) { return c > 0 ? 1.0 : -1.0; }},
      {"step", "OUT = NS::step(0.5f, a);",
       [](double a, double, double, double) { return a < 0.5 ? 0.0 : 1.0; }},
      {"smoothstep", "OUT = NS::smoothstep(0.2f, 0.8f, a);",
       [](double a, double, double, double) {
         double t = std::clamp((a - f32(0.2)) / (f32(0.8) - f32(0.2)), 0.0, 1.0);
         return t * t * (3 - 2 * t);
       }},
      {"select", "OUT = NS::select(a, b, c > 0.0f);",
       [](double a, double b, double c, double) { return c > 0 ? b : a; }},
      {"isnan", "OUT = float(NS::isnan((c - c) / (c - c))) + 2.0f * float(NS::isnan(c));",
       [](double, double, double, double) { return 1.0; }},
      {"isinf", "OUT = float(NS::isinf(c / (c - c))) + 2.0f * float(NS::isinf(c));",
       [](double, double, double, double) { return 1.0; }},
      {"isfinite", "OUT = float(NS::isfinite(c)) + 2.0f * float(NS::isfinite(c / (c - c)));",
       [](double, double, double, double) { return 1.0; }},
      {"signbit", "OUT = float(NS::signbit(c));",
       [](double, double, double c, double) { return c < 0 ? 1.0 : 0.0; }},
  };
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

// Runs one kernel computing every case with namespace `ns` ("" = unqualified).
void check_math(const std::string& kernel_name, const std::vector<MathCase>& cases,
                const std::string& ns, double rtol, double atol,
                const std::map<std::string, std::string>& options = {}) {
  constexpr int64_t n = 128;
  const int64_t K = static_cast<int64_t>(cases.size());
  std::string body = R"MSL(
    uint i = thread_position_in_grid.x;
    float a = xa[i];
    float b = xb[i];
    float c = xc[i];
    float c3 = c * 3.0f;
    device float* o = out + i * )MSL" +
                     std::to_string(K) + ";\n";
  std::vector<std::string> names;
  for (int64_t j = 0; j < K; ++j) {
    std::string stmt = replace_all(cases[j].stmt, "OUT", "o[" + std::to_string(j) + "]");
    stmt = replace_all(stmt, "NS::", ns.empty() ? "" : ns + "::");
    body += "    " + stmt + "\n";
    names.push_back((ns.empty() ? "" : ns + "::") + cases[j].name);
  }
  auto k = metal_kernel(kernel_name, {"xa", "xb", "xc"}, {"out"}, body, "", true, false, options);
  auto xa = random_array({n}, float32, 0.1, 0.9, 301, Device::cpu());
  auto xb = random_array({n}, float32, 1.1, 4, 302, Device::cpu());
  auto xc = random_array({n}, float32, -3, 3, 303, Device::cpu());
  auto av = xa.to_doubles(), bv = xb.to_doubles(), cv = xc.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i)
    for (auto& mc : cases) ref.push_back(mc.ref(av[i], bv[i], cv[i], f32(cv[i] * 3)));
  run_kernel(k, {xa, xb, xc}, make_call({{n, K}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_table(o[0], ref, names, rtol, atol); });
}

// Safe/precise math: a few ulp at most; fast math: Metal's fast-math bounds (sin/cos 2^-13
// absolute on [-pi, pi], exp 3 + 1.5|x| ulp, ...).
constexpr double kPreciseRtol = 1e-5, kPreciseAtol = 1e-6;
constexpr double kFastRtol = 2e-4, kFastAtol = 2e-4;

std::vector<MathCase> all_functions() {
  auto v = math_functions();
  auto w = metal_only_functions();
  v.insert(v.end(), w.begin(), w.end());
  return v;
}

TEST(ConformanceMath, Unqualified) {
  check_math("math_unqualified", all_functions(), "", kPreciseRtol, kPreciseAtol);
}

TEST(ConformanceMath, MetalNamespace) {
  check_math("math_metal_ns", all_functions(), "metal", kPreciseRtol, kPreciseAtol);
}

TEST(ConformanceMath, PreciseNamespace) {
  check_math("math_precise_ns", math_functions(), "metal::precise", kPreciseRtol, kPreciseAtol);
}

TEST(ConformanceMath, FastNamespace) {
  check_math("math_fast_ns", math_functions(), "metal::fast", kFastRtol, kFastAtol);
}

// `fast::` without `metal::`, as MLX kernels write it after `using namespace metal`.
TEST(ConformanceMath, FastAndPreciseShortNames) {
  std::vector<MathCase> cases;
  for (auto& mc : math_functions()) {
    if (mc.name != "exp" && mc.name != "tanh" && mc.name != "rsqrt" && mc.name != "log") continue;
    cases.push_back(mc);
    auto p = mc;
    p.stmt = replace_all(p.stmt, "NS::", "precise::");
    p.name = "precise::" + p.name;
    cases.push_back(p);
  }
  check_math("math_fast_short", cases, "fast", kFastRtol, kFastAtol);
}

// compile_options {"math_mode": "fast"}: the unqualified functions become fast ones.
TEST(ConformanceMath, MathModeFastOption) {
  check_math("math_mode_fast", math_functions(), "", kFastRtol, kFastAtol, {{"math_mode", "fast"}});
}

// ---- special values ------------------------------------------------------------------------

std::vector<double> values_with_infinities(int64_t n, uint64_t seed) {
  auto v = random_values(n, -5, 5, seed);
  double inf = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; i += 7) v[i] = -inf;
  for (int64_t i = 3; i < n; i += 11) v[i] = inf;
  return v;
}

// IEEE special values in the default ("safe") math mode: online softmax starts from -INFINITY
// and relies on exp(-INFINITY) == 0.
TEST(ConformanceMath, SpecialValuesSafeMode) {
  constexpr int64_t n = 128, K = 12;
  auto k = metal_kernel("math_special_safe", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float v = x[i];
    device float* o = out + i * 12;
    o[0] = exp(v);
    o[1] = exp2(v);
    o[2] = precise::exp(v);
    o[3] = max(v, -INFINITY);
    o[4] = v - v;
    o[5] = log(fabs(v) * 0.0f);
    o[6] = tanh(v);
    o[7] = sqrt(-fabs(v) - 1.0f);
    o[8] = float(isinf(v)) + 2.0f * float(isnan(v - v)) + 4.0f * float(isfinite(v));
    o[9] = 1.0f / v;
    o[10] = atan(v);
    o[11] = exp(-fabs(v) * INFINITY);
  )MSL");
  auto xv = values_with_infinities(n, 311);
  auto x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  xv = x.to_doubles();
  double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> ref;
  for (double v : xv) {
    double row[K] = {std::exp(v),
                     std::exp2(v),
                     std::exp(v),
                     v,
                     std::isinf(v) ? nan : 0.0,
                     std::isinf(v) ? nan : -std::numeric_limits<double>::infinity(),
                     std::tanh(v),
                     nan,
                     std::isinf(v) ? 3.0 : 4.0,
                     1 / v,
                     std::atan(v),
                     0.0};
    ref.insert(ref.end(), row, row + K);
  }
  run_kernel(k, {x}, make_call({{n, K}}, {float32}, {n, 1, 1}, {64, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"exp", "exp2", "precise::exp", "max(v,-INF)", "v-v", "log(0 or nan)", "tanh",
                  "sqrt(neg)", "isinf/isnan/isfinite", "1/v", "atan", "exp(-inf)"},
                 kPreciseRtol, kPreciseAtol);
  });
}

// fast::exp(-INFINITY) must be 0 too (MLX's fast softmax kernels rely on it).
TEST(ConformanceMath, FastExpOfNegativeInfinity) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("math_fast_exp_neg_inf", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[i] = metal::fast::exp(x[i]);
  )MSL");
  auto xv = random_values(n, -10, 2, 321);
  for (int64_t i = 0; i < n; i += 5) xv[i] = -std::numeric_limits<double>::infinity();
  auto x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = std::exp(xv[i]);
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, kFastRtol, 0); });
}

// math_mode "fast": unqualified exp(-INFINITY) is still 0.
TEST(ConformanceMath, MathModeFastExpOfNegativeInfinity) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("math_mode_fast_neg_inf", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float m = -INFINITY;
    out[i] = exp(x[i]) + exp(m - x[i]);
  )MSL",
                        "", true, false, {{"math_mode", "fast"}});
  auto xv = random_values(n, -10, 2, 331);
  for (int64_t i = 0; i < n; i += 5) xv[i] = -std::numeric_limits<double>::infinity();
  auto x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  xv = x.to_doubles();
  std::vector<double> ref(n);
  // exp(-inf - (-inf)) is exp(NaN): only finite inputs take the second term.
  for (int64_t i = 0; i < n; ++i)
    ref[i] = std::isinf(xv[i]) ? std::numeric_limits<double>::quiet_NaN() : std::exp(xv[i]);
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}), [&](auto& o) {
    auto got = o[0].to_doubles();
    for (int64_t i = 0; i < n; ++i) {
      if (std::isinf(xv[i])) continue;  // NaN handling is undefined under fast math
      EXPECT_NEAR(got[i], ref[i], kFastAtol + kFastRtol * std::fabs(ref[i])) << "element " << i;
    }
  });
}

// ---- half and bfloat overloads (through a dtype template argument, as MLX kernels use them) ----

constexpr const char* kTypedMathBody = R"MSL(
    uint i = thread_position_in_grid.x;
    T a = xa[i];
    T b = xb[i];
    T c = xc[i];
    device T* o = out + i * 16;
    o[0] = exp(c);
    o[1] = log(b);
    o[2] = sqrt(b);
    o[3] = rsqrt(b);
    o[4] = sin(c);
    o[5] = cos(c);
    o[6] = tanh(c);
    o[7] = pow(b, a);
    o[8] = floor(c * T(3));
    o[9] = fabs(c);
    o[10] = max(a, c);
    o[11] = fma(a, b, c);
    o[12] = exp2(c);
    o[13] = log2(b);
    o[14] = clamp(c, T(-1), T(1));
    o[15] = metal::abs(c) + metal::min(a, b);
)MSL";

void check_typed_math(Dtype T, const char* name, double rtol, double atol) {
  constexpr int64_t n = 128, K = 16;
  auto k = metal_kernel(name, {"xa", "xb", "xc"}, {"out"}, kTypedMathBody);
  auto xa = random_array({n}, T, 0.1, 0.9, 341, Device::cpu());
  auto xb = random_array({n}, T, 1.1, 4, 342, Device::cpu());
  auto xc = random_array({n}, T, -3, 3, 343, Device::cpu());
  auto av = xa.to_doubles(), bv = xb.to_doubles(), cv = xc.to_doubles();
  std::vector<double> c3(n);
  for (int64_t i = 0; i < n; ++i) c3[i] = cv[i] * 3;
  c3 = round_to(T, c3);
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    double a = av[i], b = bv[i], c = cv[i];
    double row[K] = {std::exp(c),
                     std::log(b),
                     std::sqrt(b),
                     1 / std::sqrt(b),
                     std::sin(c),
                     std::cos(c),
                     std::tanh(c),
                     std::pow(b, a),
                     std::floor(c3[i]),
                     std::fabs(c),
                     std::max(a, c),
                     a * b + c,
                     std::exp2(c),
                     std::log2(b),
                     std::clamp(c, -1.0, 1.0),
                     std::fabs(c) + std::min(a, b)};
    ref.insert(ref.end(), row, row + K);
  }
  run_kernel(k, {xa, xb, xc}, make_call({{n, K}}, {T}, {n, 1, 1}, {64, 1, 1}, {{"T", T}}),
             [&](auto& o) {
               expect_table(o[0], ref,
                            {"exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "pow", "floor",
                             "fabs", "max", "fma", "exp2", "log2", "clamp", "abs+min"},
                            rtol, atol);
             });
}

TEST(ConformanceMath, HalfFunctions) {
  check_typed_math(float16, "math_half", 3e-3, 2e-3);
}

TEST(ConformanceMath, BfloatFunctions) {
  check_typed_math(bfloat16, "math_bfloat", 1.2e-2, 1e-2);
}

}  // namespace
