// The elementwise functors in Metal, one table line per op (see functors.h). Each functor is a
// plain Metal struct with a templated call operator; integer/floating variants are chosen with
// enable_if on the prelude's (Metal's) type traits. Integer arithmetic goes through unsigned types
// so that overflow wraps as on Metal (signed overflow is undefined in the C++ the CPU JIT
// compiles), and integer division by zero gives 0 instead of a CPU trap.
#include "ops/functors.h"

#include <stdexcept>
#include <string>

namespace alloy::ops {

namespace {

constexpr const char* kHelpers = R"METAL(
// Unsigned type wide enough for wrapping integer arithmetic on T.
template <class T>
using alloy_wide_u = conditional_t<sizeof(T) <= 4, uint, ulong>;
template <class T>
constexpr bool alloy_is_float = is_floating_point_v<T>;
template <class T>
constexpr bool alloy_is_complex = is_same_v<T, complex64_t>;
template <class T>
constexpr bool alloy_is_int = !is_floating_point_v<T> && !is_same_v<T, complex64_t>;
// Floating or complex: the ops whose float expression (a + b, -x, x * x) also serves complex64_t.
template <class T>
constexpr bool alloy_is_inexact = is_floating_point_v<T> || is_same_v<T, complex64_t>;
// complex64 math on (real, imag) float pairs, templates so that kernels without complex values
// instantiate none of it. |z| scaled by the larger part (no overflow/underflow in the squares).
template <class Z>
float alloy_cabs(Z z) {
  float a = metal::abs(z.real), b = metal::abs(z.imag);
  if (metal::isinf(a) || metal::isinf(b)) return INFINITY;
  float m = a > b ? a : b;
  if (!(m > 0.0f)) return a + b;  // zero, or NaN
  float x = a / m, y = b / m;
  return m * metal::sqrt(x * x + y * y);
}
template <class Z>
Z alloy_cexp(Z z) {
  float e = metal::exp(z.real);
  return Z(e * metal::cos(z.imag), e * metal::sin(z.imag));
}
template <class Z>
Z alloy_clog(Z z) {
  return Z(metal::log(alloy_cabs(z)), metal::atan2(z.imag, z.real));
}
// The principal square root: the real part non-negative, the imaginary part of z's sign.
template <class Z>
Z alloy_csqrt(Z z) {
  float r = alloy_cabs(z);
  if (r == 0.0f) return Z(0.0f, z.imag);
  float t = metal::sqrt((r + metal::abs(z.real)) * 0.5f);
  if (z.real >= 0.0f) return Z(t, z.imag / (2.0f * t));
  return Z(metal::abs(z.imag) / (2.0f * t), metal::copysign(t, z.imag));
}
// z * i and z * -i.
template <class Z>
Z alloy_ctimes_i(Z z) { return Z(-z.imag, z.real); }
template <class Z>
Z alloy_ctimes_minus_i(Z z) { return Z(z.imag, -z.real); }
// 2/sqrt(pi) and sqrt(pi) as float pairs (hi + lo): exact enough for double, which Metal text
// cannot spell (unsuffixed literals are float).
template <class T>
T alloy_2_sqrtpi() { return T(1.128379225730896f) + T(-5.8635382771399236e-08f); }
template <class T>
T alloy_sqrtpi() { return T(1.7724539041519165f) + T(-5.324639928971919e-08f); }
)METAL";

// The table: op, MLX primitive, arity, family, bool accepted, complex64 accepted, functor.
const std::vector<OpInfo> kOps = {
    // ---- unary, arithmetic ----------------------------------------------------------------
    {"abs", "Abs", 1, Family::arith, true, true, R"METAL(
struct abs_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T x) const { return metal::abs(x); }
  template <class T, enable_if_t<alloy_is_int<T> && is_signed_v<T>, int> = 0>
  T operator()(T x) const { return x < T(0) ? T(alloy_wide_u<T>(0) - alloy_wide_u<T>(x)) : x; }
  template <class T, enable_if_t<alloy_is_int<T> && !is_signed_v<T>, int> = 0>
  T operator()(T x) const { return x; }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  float operator()(T x) const { return alloy_cabs(x); }
};)METAL"},
    {"negative", "Negative", 1, Family::arith, false, true, R"METAL(
struct negative_functor {
  template <class T, enable_if_t<alloy_is_inexact<T>, int> = 0>
  T operator()(T x) const { return -x; }
  template <class T, enable_if_t<alloy_is_int<T>, int> = 0>
  T operator()(T x) const { return T(alloy_wide_u<T>(0) - alloy_wide_u<T>(x)); }
};)METAL"},
    {"sign", "Sign", 1, Family::arith, true, true, R"METAL(
struct sign_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x); }
  // z / |z| (0 for 0), as MLX.
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    float m = alloy_cabs(x);
    return m == 0.0f ? T(0.0f, 0.0f) : T(x.real / m, x.imag / m);
  }
};)METAL"},
    {"square", "Square", 1, Family::arith, false, true, R"METAL(
struct square_functor {
  template <class T, enable_if_t<alloy_is_inexact<T>, int> = 0>
  T operator()(T x) const { return x * x; }
  template <class T, enable_if_t<alloy_is_int<T>, int> = 0>
  T operator()(T x) const { return T(alloy_wide_u<T>(x) * alloy_wide_u<T>(x)); }
};)METAL"},
    // ---- unary, floating-point math (integers give float32; half/bfloat computed in float) --
    {"exp", "Exp", 1, Family::float_math, true, true,
     R"METAL(
struct exp_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::exp(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    return alloy_cexp(x);
  }
};)METAL"},
    {"expm1", "Expm1", 1, Family::float_math, true, false,
     "struct expm1_functor { template <class T> T operator()(T x) const { return metal::expm1(x); "
     "} };"},
    {"log", "Log", 1, Family::float_math, true, true,
     R"METAL(
struct log_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::log(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    return alloy_clog(x);
  }
};)METAL"},
    {"log2", "Log", 1, Family::float_math, true, true,
     R"METAL(
struct log2_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::log2(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    T l = alloy_clog(x);
    return T(l.real * 1.44269504088896341f, l.imag * 1.44269504088896341f);
  }
};)METAL"},
    {"log10", "Log", 1, Family::float_math, true, true,
     R"METAL(
struct log10_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::log10(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    T l = alloy_clog(x);
    return T(l.real * 0.434294481903251828f, l.imag * 0.434294481903251828f);
  }
};)METAL"},
    {"log1p", "Log1p", 1, Family::float_math, true, true,
     R"METAL(
struct log1p_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::log1p(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    // log|1 + z| = log1p(2a + a^2 + b^2) / 2: no cancellation for small z.
    return T(0.5f * metal::log1p(x.real * (2.0f + x.real) + x.imag * x.imag),
             metal::atan2(x.imag, 1.0f + x.real));
  }
};)METAL"},
    {"sqrt", "Sqrt", 1, Family::float_math, true, true,
     R"METAL(
struct sqrt_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::sqrt(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    return alloy_csqrt(x);
  }
};)METAL"},
    {"rsqrt", "Sqrt", 1, Family::float_math, true, true,
     R"METAL(
struct rsqrt_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return T(1) / metal::sqrt(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    return T(1.0f, 0.0f) / alloy_csqrt(x);
  }
};)METAL"},
    {"sin", "Sin", 1, Family::float_math, true, true,
     R"METAL(
struct sin_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::sin(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    return T(metal::sin(x.real) * metal::cosh(x.imag), metal::cos(x.real) * metal::sinh(x.imag));
  }
};)METAL"},
    {"cos", "Cos", 1, Family::float_math, true, true,
     R"METAL(
struct cos_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::cos(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    return T(metal::cos(x.real) * metal::cosh(x.imag), -metal::sin(x.real) * metal::sinh(x.imag));
  }
};)METAL"},
    {"tan", "Tan", 1, Family::float_math, true, true,
     R"METAL(
struct tan_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::tan(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    // (sin 2a + i sinh 2b) / (cos 2a + cosh 2b); for large |b| the limit +-i (cosh overflows).
    if (metal::abs(x.imag) > 20.0f) return T(0.0f, metal::copysign(1.0f, x.imag));
    float d = metal::cos(2.0f * x.real) + metal::cosh(2.0f * x.imag);
    return T(metal::sin(2.0f * x.real) / d, metal::sinh(2.0f * x.imag) / d);
  }
};)METAL"},
    {"tanh", "Tanh", 1, Family::float_math, true, true,
     R"METAL(
struct tanh_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::tanh(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    // (sinh 2a + i sin 2b) / (cosh 2a + cos 2b); for large |a| the limit +-1.
    if (metal::abs(x.real) > 20.0f) return T(metal::copysign(1.0f, x.real), 0.0f);
    float d = metal::cosh(2.0f * x.real) + metal::cos(2.0f * x.imag);
    return T(metal::sinh(2.0f * x.real) / d, metal::sin(2.0f * x.imag) / d);
  }
};)METAL"},
    {"arcsin", "ArcSin", 1, Family::float_math, true, true,
     R"METAL(
struct arcsin_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::asin(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    // asin z = -i log(iz + sqrt(1 - z^2)), evaluated for Im z <= 0 (the real parts of the two
    // terms then add without cancellation) and by oddness otherwise.
    // The parts of asin z have the signs of z's (on the cuts, of the signed zero: C99, numpy).
    T z = x.imag > 0.0f ? -x : x;
    T w = alloy_ctimes_minus_i(
        alloy_clog(alloy_ctimes_i(z) + alloy_csqrt(T(1.0f, 0.0f) - z * z)));
    return T(metal::copysign(metal::abs(w.real), x.real),
             metal::copysign(metal::abs(w.imag), x.imag));
  }
};)METAL"},
    {"arccos", "ArcCos", 1, Family::float_math, true, true,
     R"METAL(
struct arccos_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::acos(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    T s = arcsin_functor()(x);
    return T(1.57079632679489662f - s.real, -s.imag);
  }
};)METAL",
     "arcsin"},
    {"arctan", "ArcTan", 1, Family::float_math, true, true,
     R"METAL(
struct arctan_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::atan(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    // atan z = (i / 2) (log(1 - iz) - log(1 + iz))
    T iz = alloy_ctimes_i(x);
    T d = alloy_clog(T(1.0f, 0.0f) - iz) - alloy_clog(T(1.0f, 0.0f) + iz);
    return T(-0.5f * d.imag, 0.5f * d.real);
  }
};)METAL"},
    {"sinh", "Sinh", 1, Family::float_math, true, true,
     R"METAL(
struct sinh_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::sinh(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    return T(metal::sinh(x.real) * metal::cos(x.imag), metal::cosh(x.real) * metal::sin(x.imag));
  }
};)METAL"},
    {"cosh", "Cosh", 1, Family::float_math, true, true,
     R"METAL(
struct cosh_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::cosh(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const {
    return T(metal::cosh(x.real) * metal::cos(x.imag), metal::sinh(x.real) * metal::sin(x.imag));
  }
};)METAL"},
    {"sigmoid", "Sigmoid", 1, Family::float_math, true, false, R"METAL(
struct sigmoid_functor {
  template <class T>
  T operator()(T x) const { return T(1) / (T(1) + metal::exp(-x)); }
};)METAL"},
    // erf by its everywhere-positive series  erf(x) = 2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) /
    // (1*3*...*(2n+1))  (no cancellation) below 2.5, and 1 - erfc above; erfc by Laplace's
    // continued fraction  erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
    // above 2.5 (evaluated backwards from a fixed depth), 1 - erf below.
    {"erf", "Erf", 1, Family::float_math, true, false, R"METAL(
struct erfc_tail_functor {
  template <class T>
  T operator()(T ax) const {
    T f = ax;
    for (int k = (sizeof(T) > 4 ? 120 : 60); k >= 1; --k) f = ax + T(k) * T(0.5) / f;
    return metal::exp(-ax * ax) / (alloy_sqrtpi<T>() * f);
  }
};
struct erf_functor {
  template <class T>
  T operator()(T x) const {
    T ax = metal::abs(x);
    if (!(ax < T(INFINITY))) return x != x ? x : (x < T(0) ? T(-1) : T(1));
    T r;
    if (ax < T(2.5)) {
      T x2 = ax * ax, term = ax, sum = ax;
      for (int n = 1; n < (sizeof(T) > 4 ? 70 : 45); ++n) {
        term *= T(2) * x2 / T(2 * n + 1);
        sum += term;
      }
      r = alloy_2_sqrtpi<T>() * metal::exp(-x2) * sum;
    } else {
      r = T(1) - erfc_tail_functor()(ax);
    }
    return x < T(0) ? -r : r;
  }
};)METAL"},
    {"erfc", "Erfc", 1, Family::float_math, true, false, R"METAL(
struct erfc_functor {
  template <class T>
  T operator()(T x) const {
    if (x != x) return x;
    if (x < T(2.5)) return T(1) - erf_functor()(x);
    return erfc_tail_functor()(x);
  }
};)METAL",
     "erf"},
    // erfinv: Winitzki's closed-form estimate, then Newton steps on erf (on erfc near +-1, where
    // 1 - |y| is exact and erf has no digits left).
    {"erfinv", "ErfInv", 1, Family::float_math, true, false, R"METAL(
struct erfinv_functor {
  template <class T>
  T operator()(T y) const {
    if (!(y > T(-1) && y < T(1)))
      return y == T(1) ? T(INFINITY) : (y == T(-1) ? T(-INFINITY) : T(NAN));
    T ay = metal::abs(y), c = T(1) - ay;
    T ln = metal::log(c * (T(1) + ay));
    T t = T(4.3307467508352) + ln / T(2);  // 2 / (pi * 0.147)
    T x = metal::sqrt(metal::sqrt(t * t - ln / T(0.147)) - t);
    for (int i = 0; i < 4; ++i) {
      T d = alloy_2_sqrtpi<T>() * metal::exp(-x * x);
      if (!(d > T(0))) break;
      x = ay < T(0.5) ? x - (erf_functor()(x) - ay) / d : x + (erfc_functor()(x) - c) / d;
    }
    return y < T(0) ? -x : x;
  }
};)METAL",
     "erf erfc"},
    // ---- floating only, integers unchanged -----------------------------------------------
    {"floor", "Floor", 1, Family::float_or_identity, true, false,
     "struct floor_functor { template <class T> T operator()(T x) const { return metal::floor(x); "
     "} };"},
    {"ceil", "Ceil", 1, Family::float_or_identity, true, false,
     "struct ceil_functor { template <class T> T operator()(T x) const { return metal::ceil(x); } "
     "};"},
    // Half-way cases to even, as numpy and MLX.
    {"round", "Round", 1, Family::float_or_identity, true, true,
     R"METAL(
struct round_functor {
  template <class T, enable_if_t<!alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return metal::rint(x); }
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T x) const { return T(metal::rint(x.real), metal::rint(x.imag)); }
};)METAL"},
    // ---- complex parts (complex64 inputs; the ops handle real inputs without a kernel) ----
    {"real", "Real", 1, Family::complex_part, false, true,
     "struct real_functor { template <class T> float operator()(T x) const { return x.real; } };"},
    {"imag", "Imag", 1, Family::complex_part, false, true,
     "struct imag_functor { template <class T> float operator()(T x) const { return x.imag; } };"},
    {"conjugate", "Conjugate", 1, Family::complex_part, false, true,
     "struct conjugate_functor { template <class T> T operator()(T x) const { return T(x.real, "
     "-x.imag); } };"},
    // ---- logical / bitwise --------------------------------------------------------------
    {"logical_not", "LogicalNot", 1, Family::logical, true, true,
     "struct logical_not_functor { bool operator()(bool x) const { return !x; } };"},
    {"bitwise_invert", "BitwiseInvert", 1, Family::integer_only, true, false, R"METAL(
struct bitwise_invert_functor {
  bool operator()(bool x) const { return !x; }
  template <class T>
  T operator()(T x) const { return T(~alloy_wide_u<T>(x)); }
};)METAL"},
    // ---- binary, arithmetic ------------------------------------------------------------------
    {"add", "Add", 2, Family::arith, true, true, R"METAL(
struct add_functor {
  template <class T, enable_if_t<alloy_is_inexact<T>, int> = 0>
  T operator()(T a, T b) const { return a + b; }
  template <class T, enable_if_t<alloy_is_int<T>, int> = 0>
  T operator()(T a, T b) const { return T(alloy_wide_u<T>(a) + alloy_wide_u<T>(b)); }
};)METAL"},
    {"subtract", "Subtract", 2, Family::arith, false, true, R"METAL(
struct subtract_functor {
  template <class T, enable_if_t<alloy_is_inexact<T>, int> = 0>
  T operator()(T a, T b) const { return a - b; }
  template <class T, enable_if_t<alloy_is_int<T>, int> = 0>
  T operator()(T a, T b) const { return T(alloy_wide_u<T>(a) - alloy_wide_u<T>(b)); }
};)METAL"},
    {"multiply", "Multiply", 2, Family::arith, true, true, R"METAL(
struct multiply_functor {
  template <class T, enable_if_t<alloy_is_inexact<T>, int> = 0>
  T operator()(T a, T b) const { return a * b; }
  template <class T, enable_if_t<alloy_is_int<T>, int> = 0>
  T operator()(T a, T b) const { return T(alloy_wide_u<T>(a) * alloy_wide_u<T>(b)); }
};)METAL"},
    {"divide", "Divide", 2, Family::float_math, true, true, R"METAL(
struct divide_functor {
  template <class T>
  T operator()(T a, T b) const { return a / b; }
};)METAL"},
    // Python's floor division (rounds toward -inf); integer division by zero gives 0.
    {"floor_divide", "FloorDivide", 2, Family::arith, false, true, R"METAL(
struct floor_divide_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return metal::floor(a / b); }
  template <class T, enable_if_t<alloy_is_int<T> && is_signed_v<T>, int> = 0>
  T operator()(T a, T b) const {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return T(alloy_wide_u<T>(0) - alloy_wide_u<T>(a));
    T q = a / b;
    return (a % b != T(0) && ((a < T(0)) != (b < T(0)))) ? T(q - T(1)) : q;
  }
  template <class T, enable_if_t<alloy_is_int<T> && !is_signed_v<T>, int> = 0>
  T operator()(T a, T b) const { return b == T(0) ? T(0) : T(a / b); }
  // complex64: a plain division (MLX's).
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T a, T b) const { return a / b; }
};)METAL"},
    // Python's remainder (the sign of the divisor); integer remainder by zero gives 0.
    {"remainder", "Remainder", 2, Family::arith, false, false, R"METAL(
struct remainder_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const {
    T r = metal::fmod(a, b);
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
  }
  template <class T, enable_if_t<alloy_is_int<T> && is_signed_v<T>, int> = 0>
  T operator()(T a, T b) const {
    if (b == T(0) || b == T(-1)) return T(0);
    T r = a % b;
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? T(r + b) : r;
  }
  template <class T, enable_if_t<alloy_is_int<T> && !is_signed_v<T>, int> = 0>
  T operator()(T a, T b) const { return b == T(0) ? T(0) : T(a % b); }
};)METAL"},
    {"power", "Power", 2, Family::arith, false, true, R"METAL(
struct power_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return metal::pow(a, b); }
  template <class T, enable_if_t<alloy_is_int<T>, int> = 0>
  T operator()(T a, T b) const {
    if (b < T(0)) return a == T(1) ? T(1) : (a == T(-1) ? ((b & T(1)) ? T(-1) : T(1)) : T(0));
    alloy_wide_u<T> r = 1, base = alloy_wide_u<T>(a);
    for (T e = b; e != T(0); e = T(e >> 1)) {
      if (e & T(1)) r *= base;
      base *= base;
    }
    return T(r);
  }
  // complex64: exp(b log a); 0^b is 1 for b = 0, else 0.
  template <class T, enable_if_t<alloy_is_complex<T>, int> = 0>
  T operator()(T a, T b) const {
    if (a.real == 0.0f && a.imag == 0.0f)
      return (b.real == 0.0f && b.imag == 0.0f) ? T(1.0f, 0.0f) : T(0.0f, 0.0f);
    return alloy_cexp(b * alloy_clog(a));
  }
};)METAL"},
    // maximum / minimum propagate NaN (numpy's and MLX's maximum, not fmax).
    {"maximum", "Maximum", 2, Family::arith, true, true, R"METAL(
struct maximum_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return (a > b || metal::isnan(a)) ? a : b; }
  // Integers, and complex64 ordered lexicographically on (real, imag) as MLX (no NaN rule).
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return a > b ? a : b; }
};)METAL"},
    {"minimum", "Minimum", 2, Family::arith, true, true, R"METAL(
struct minimum_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return (a < b || metal::isnan(a)) ? a : b; }
  // Integers, and complex64 ordered lexicographically on (real, imag) as MLX (no NaN rule).
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return a < b ? a : b; }
};)METAL"},
    {"arctan2", "ArcTan2", 2, Family::float_math, true, false, R"METAL(
struct arctan2_functor {
  template <class T>
  T operator()(T a, T b) const { return metal::atan2(a, b); }
};)METAL"},
    {"logaddexp", "LogAddExp", 2, Family::float_math, true, false, R"METAL(
struct logaddexp_functor {
  template <class T>
  T operator()(T a, T b) const {
    if (metal::isnan(a) || metal::isnan(b)) return a + b;
    T m = a > b ? a : b;
    if (metal::isinf(m) && (m > T(0) || a == b)) return m;
    return m + metal::log1p(metal::exp(-metal::abs(a - b)));
  }
};)METAL"},
    // ---- comparisons --------------------------------------------------------------------
    {"equal", "Equal", 2, Family::compare, true, true,
     "struct equal_functor { template <class T> bool operator()(T a, T b) const { return a == b; } "
     "};"},
    {"not_equal", "NotEqual", 2, Family::compare, true, true,
     "struct not_equal_functor { template <class T> bool operator()(T a, T b) const { return a != "
     "b; } };"},
    {"less", "Less", 2, Family::compare, true, true,
     "struct less_functor { template <class T> bool operator()(T a, T b) const { return a < b; } "
     "};"},
    {"less_equal", "LessEqual", 2, Family::compare, true, true,
     "struct less_equal_functor { template <class T> bool operator()(T a, T b) const { return a <= "
     "b; } };"},
    {"greater", "Greater", 2, Family::compare, true, true,
     "struct greater_functor { template <class T> bool operator()(T a, T b) const { return a > b; "
     "} };"},
    {"greater_equal", "GreaterEqual", 2, Family::compare, true, true,
     "struct greater_equal_functor { template <class T> bool operator()(T a, T b) const { return a "
     ">= b; } };"},
    // ---- logical / bitwise binary ---------------------------------------------------------
    {"logical_and", "LogicalAnd", 2, Family::logical, true, true,
     "struct logical_and_functor { bool operator()(bool a, bool b) const { return a && b; } };"},
    {"logical_or", "LogicalOr", 2, Family::logical, true, true,
     "struct logical_or_functor { bool operator()(bool a, bool b) const { return a || b; } };"},
    {"bitwise_and", "BitwiseBinary", 2, Family::integer_only, true, false,
     "struct bitwise_and_functor { template <class T> T operator()(T a, T b) const { return T(a & "
     "b); } };"},
    {"bitwise_or", "BitwiseBinary", 2, Family::integer_only, true, false,
     "struct bitwise_or_functor { template <class T> T operator()(T a, T b) const { return T(a | "
     "b); } };"},
    {"bitwise_xor", "BitwiseBinary", 2, Family::integer_only, true, false,
     "struct bitwise_xor_functor { template <class T> T operator()(T a, T b) const { return T(a ^ "
     "b); } };"},
    // Shifts by a negative count or by the type's width or more give 0 (sign fill for >> of a
    // negative signed value), never the undefined result of C++.
    {"left_shift", "BitwiseBinary", 2, Family::integer_only, false, false, R"METAL(
struct left_shift_functor {
  template <class T>
  T operator()(T a, T b) const {
    return (b < T(0) || alloy_wide_u<T>(b) >= sizeof(T) * 8) ? T(0)
                                                            : T(alloy_wide_u<T>(a) << b);
  }
};)METAL"},
    {"right_shift", "BitwiseBinary", 2, Family::integer_only, false, false, R"METAL(
struct right_shift_functor {
  template <class T>
  T operator()(T a, T b) const {
    if (b < T(0) || alloy_wide_u<T>(b) >= sizeof(T) * 8) return a < T(0) ? T(-1) : T(0);
    return T(a >> b);
  }
};)METAL"},
    // ---- ternary -----------------------------------------------------------------------------
    {"select", "Select", 3, Family::arith, true, true, R"METAL(
struct select_functor {
  template <class T>
  T operator()(bool c, T a, T b) const { return c ? a : b; }
};)METAL"},
};

}  // namespace

const std::vector<OpInfo>& all_ops() {
  return kOps;
}

const OpInfo& op_info(std::string_view op) {
  for (const auto& o : kOps)
    if (op == o.op) return o;
  throw std::invalid_argument("unknown elementwise op '" + std::string(op) + "'");
}

std::string_view functor_helpers() {
  return kHelpers;
}

}  // namespace alloy::ops
