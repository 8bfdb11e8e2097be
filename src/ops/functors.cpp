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
// 2/sqrt(pi) and sqrt(pi) as float pairs (hi + lo): exact enough for double, which Metal text
// cannot spell (unsuffixed literals are float).
template <class T>
T alloy_2_sqrtpi() { return T(1.128379225730896f) + T(-5.8635382771399236e-08f); }
template <class T>
T alloy_sqrtpi() { return T(1.7724539041519165f) + T(-5.324639928971919e-08f); }
)METAL";

// The table: op, MLX primitive, arity, family, bool accepted, functor.
const std::vector<OpInfo> kOps = {
    // ---- unary, arithmetic ----------------------------------------------------------------
    {"abs", "Abs", 1, Family::arith, true, R"METAL(
struct abs_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T x) const { return metal::abs(x); }
  template <class T, enable_if_t<!alloy_is_float<T> && is_signed_v<T>, int> = 0>
  T operator()(T x) const { return x < T(0) ? T(alloy_wide_u<T>(0) - alloy_wide_u<T>(x)) : x; }
  template <class T, enable_if_t<!alloy_is_float<T> && !is_signed_v<T>, int> = 0>
  T operator()(T x) const { return x; }
};)METAL"},
    {"negative", "Negative", 1, Family::arith, false, R"METAL(
struct negative_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T x) const { return -x; }
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T x) const { return T(alloy_wide_u<T>(0) - alloy_wide_u<T>(x)); }
};)METAL"},
    {"sign", "Sign", 1, Family::arith, true, R"METAL(
struct sign_functor {
  template <class T>
  T operator()(T x) const { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x); }
};)METAL"},
    {"square", "Square", 1, Family::arith, false, R"METAL(
struct square_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T x) const { return x * x; }
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T x) const { return T(alloy_wide_u<T>(x) * alloy_wide_u<T>(x)); }
};)METAL"},
    // ---- unary, floating-point math (integers give float32; half/bfloat computed in float) --
    {"exp", "Exp", 1, Family::float_math, true,
     "struct exp_functor { template <class T> T operator()(T x) const { return metal::exp(x); } "
     "};"},
    {"expm1", "Expm1", 1, Family::float_math, true,
     "struct expm1_functor { template <class T> T operator()(T x) const { return "
     "metal::expm1(x); } };"},
    {"log", "Log", 1, Family::float_math, true,
     "struct log_functor { template <class T> T operator()(T x) const { return metal::log(x); } "
     "};"},
    {"log2", "Log", 1, Family::float_math, true,
     "struct log2_functor { template <class T> T operator()(T x) const { return metal::log2(x); } "
     "};"},
    {"log10", "Log", 1, Family::float_math, true,
     "struct log10_functor { template <class T> T operator()(T x) const { return "
     "metal::log10(x); } };"},
    {"log1p", "Log1p", 1, Family::float_math, true,
     "struct log1p_functor { template <class T> T operator()(T x) const { return "
     "metal::log1p(x); } };"},
    {"sqrt", "Sqrt", 1, Family::float_math, true,
     "struct sqrt_functor { template <class T> T operator()(T x) const { return metal::sqrt(x); } "
     "};"},
    {"rsqrt", "Sqrt", 1, Family::float_math, true,
     "struct rsqrt_functor { template <class T> T operator()(T x) const { return T(1) / "
     "metal::sqrt(x); } };"},
    {"sin", "Sin", 1, Family::float_math, true,
     "struct sin_functor { template <class T> T operator()(T x) const { return metal::sin(x); } "
     "};"},
    {"cos", "Cos", 1, Family::float_math, true,
     "struct cos_functor { template <class T> T operator()(T x) const { return metal::cos(x); } "
     "};"},
    {"tan", "Tan", 1, Family::float_math, true,
     "struct tan_functor { template <class T> T operator()(T x) const { return metal::tan(x); } "
     "};"},
    {"tanh", "Tanh", 1, Family::float_math, true,
     "struct tanh_functor { template <class T> T operator()(T x) const { return metal::tanh(x); } "
     "};"},
    {"arcsin", "ArcSin", 1, Family::float_math, true,
     "struct arcsin_functor { template <class T> T operator()(T x) const { return metal::asin(x); "
     "} };"},
    {"arccos", "ArcCos", 1, Family::float_math, true,
     "struct arccos_functor { template <class T> T operator()(T x) const { return metal::acos(x); "
     "} };"},
    {"arctan", "ArcTan", 1, Family::float_math, true,
     "struct arctan_functor { template <class T> T operator()(T x) const { return metal::atan(x); "
     "} };"},
    {"sinh", "Sinh", 1, Family::float_math, true,
     "struct sinh_functor { template <class T> T operator()(T x) const { return metal::sinh(x); } "
     "};"},
    {"cosh", "Cosh", 1, Family::float_math, true,
     "struct cosh_functor { template <class T> T operator()(T x) const { return metal::cosh(x); } "
     "};"},
    {"sigmoid", "Sigmoid", 1, Family::float_math, true, R"METAL(
struct sigmoid_functor {
  template <class T>
  T operator()(T x) const { return T(1) / (T(1) + metal::exp(-x)); }
};)METAL"},
    // erf by its everywhere-positive series  erf(x) = 2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) /
    // (1*3*...*(2n+1))  (no cancellation) below 2.5, and 1 - erfc above; erfc by Laplace's
    // continued fraction  erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
    // above 2.5 (evaluated backwards from a fixed depth), 1 - erf below.
    {"erf", "Erf", 1, Family::float_math, true, R"METAL(
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
    {"erfc", "Erfc", 1, Family::float_math, true, R"METAL(
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
    {"erfinv", "ErfInv", 1, Family::float_math, true, R"METAL(
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
    {"floor", "Floor", 1, Family::float_or_identity, true,
     "struct floor_functor { template <class T> T operator()(T x) const { return metal::floor(x); "
     "} };"},
    {"ceil", "Ceil", 1, Family::float_or_identity, true,
     "struct ceil_functor { template <class T> T operator()(T x) const { return metal::ceil(x); } "
     "};"},
    // Half-way cases to even, as numpy and MLX.
    {"round", "Round", 1, Family::float_or_identity, true,
     "struct round_functor { template <class T> T operator()(T x) const { return metal::rint(x); } "
     "};"},
    // ---- logical / bitwise --------------------------------------------------------------
    {"logical_not", "LogicalNot", 1, Family::logical, true,
     "struct logical_not_functor { bool operator()(bool x) const { return !x; } };"},
    {"bitwise_invert", "BitwiseInvert", 1, Family::integer_only, true, R"METAL(
struct bitwise_invert_functor {
  bool operator()(bool x) const { return !x; }
  template <class T>
  T operator()(T x) const { return T(~alloy_wide_u<T>(x)); }
};)METAL"},
    // ---- binary, arithmetic ------------------------------------------------------------------
    {"add", "Add", 2, Family::arith, true, R"METAL(
struct add_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return a + b; }
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return T(alloy_wide_u<T>(a) + alloy_wide_u<T>(b)); }
};)METAL"},
    {"subtract", "Subtract", 2, Family::arith, false, R"METAL(
struct subtract_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return a - b; }
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return T(alloy_wide_u<T>(a) - alloy_wide_u<T>(b)); }
};)METAL"},
    {"multiply", "Multiply", 2, Family::arith, true, R"METAL(
struct multiply_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return a * b; }
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return T(alloy_wide_u<T>(a) * alloy_wide_u<T>(b)); }
};)METAL"},
    {"divide", "Divide", 2, Family::float_math, true, R"METAL(
struct divide_functor {
  template <class T>
  T operator()(T a, T b) const { return a / b; }
};)METAL"},
    // Python's floor division (rounds toward -inf); integer division by zero gives 0.
    {"floor_divide", "FloorDivide", 2, Family::arith, false, R"METAL(
struct floor_divide_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return metal::floor(a / b); }
  template <class T, enable_if_t<!alloy_is_float<T> && is_signed_v<T>, int> = 0>
  T operator()(T a, T b) const {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return T(alloy_wide_u<T>(0) - alloy_wide_u<T>(a));
    T q = a / b;
    return (a % b != T(0) && ((a < T(0)) != (b < T(0)))) ? T(q - T(1)) : q;
  }
  template <class T, enable_if_t<!alloy_is_float<T> && !is_signed_v<T>, int> = 0>
  T operator()(T a, T b) const { return b == T(0) ? T(0) : T(a / b); }
};)METAL"},
    // Python's remainder (the sign of the divisor); integer remainder by zero gives 0.
    {"remainder", "Remainder", 2, Family::arith, false, R"METAL(
struct remainder_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const {
    T r = metal::fmod(a, b);
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
  }
  template <class T, enable_if_t<!alloy_is_float<T> && is_signed_v<T>, int> = 0>
  T operator()(T a, T b) const {
    if (b == T(0) || b == T(-1)) return T(0);
    T r = a % b;
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? T(r + b) : r;
  }
  template <class T, enable_if_t<!alloy_is_float<T> && !is_signed_v<T>, int> = 0>
  T operator()(T a, T b) const { return b == T(0) ? T(0) : T(a % b); }
};)METAL"},
    {"power", "Power", 2, Family::arith, false, R"METAL(
struct power_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return metal::pow(a, b); }
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const {
    if (b < T(0)) return a == T(1) ? T(1) : (a == T(-1) ? ((b & T(1)) ? T(-1) : T(1)) : T(0));
    alloy_wide_u<T> r = 1, base = alloy_wide_u<T>(a);
    for (T e = b; e != T(0); e = T(e >> 1)) {
      if (e & T(1)) r *= base;
      base *= base;
    }
    return T(r);
  }
};)METAL"},
    // maximum / minimum propagate NaN (numpy's and MLX's maximum, not fmax).
    {"maximum", "Maximum", 2, Family::arith, true, R"METAL(
struct maximum_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return (a > b || metal::isnan(a)) ? a : b; }
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return a > b ? a : b; }
};)METAL"},
    {"minimum", "Minimum", 2, Family::arith, true, R"METAL(
struct minimum_functor {
  template <class T, enable_if_t<alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return (a < b || metal::isnan(a)) ? a : b; }
  template <class T, enable_if_t<!alloy_is_float<T>, int> = 0>
  T operator()(T a, T b) const { return a < b ? a : b; }
};)METAL"},
    {"arctan2", "ArcTan2", 2, Family::float_math, true, R"METAL(
struct arctan2_functor {
  template <class T>
  T operator()(T a, T b) const { return metal::atan2(a, b); }
};)METAL"},
    {"logaddexp", "LogAddExp", 2, Family::float_math, true, R"METAL(
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
    {"equal", "Equal", 2, Family::compare, true,
     "struct equal_functor { template <class T> bool operator()(T a, T b) const { return a == b; "
     "} };"},
    {"not_equal", "NotEqual", 2, Family::compare, true,
     "struct not_equal_functor { template <class T> bool operator()(T a, T b) const { return a "
     "!= b; } };"},
    {"less", "Less", 2, Family::compare, true,
     "struct less_functor { template <class T> bool operator()(T a, T b) const { return a < b; } "
     "};"},
    {"less_equal", "LessEqual", 2, Family::compare, true,
     "struct less_equal_functor { template <class T> bool operator()(T a, T b) const { return a "
     "<= b; } };"},
    {"greater", "Greater", 2, Family::compare, true,
     "struct greater_functor { template <class T> bool operator()(T a, T b) const { return a > "
     "b; } };"},
    {"greater_equal", "GreaterEqual", 2, Family::compare, true,
     "struct greater_equal_functor { template <class T> bool operator()(T a, T b) const { return "
     "a >= b; } };"},
    // ---- logical / bitwise binary ---------------------------------------------------------
    {"logical_and", "LogicalAnd", 2, Family::logical, true,
     "struct logical_and_functor { bool operator()(bool a, bool b) const { return a && b; } };"},
    {"logical_or", "LogicalOr", 2, Family::logical, true,
     "struct logical_or_functor { bool operator()(bool a, bool b) const { return a || b; } };"},
    {"bitwise_and", "BitwiseBinary", 2, Family::integer_only, true,
     "struct bitwise_and_functor { template <class T> T operator()(T a, T b) const { return T(a "
     "& b); } };"},
    {"bitwise_or", "BitwiseBinary", 2, Family::integer_only, true,
     "struct bitwise_or_functor { template <class T> T operator()(T a, T b) const { return T(a | "
     "b); } };"},
    {"bitwise_xor", "BitwiseBinary", 2, Family::integer_only, true,
     "struct bitwise_xor_functor { template <class T> T operator()(T a, T b) const { return T(a "
     "^ b); } };"},
    // Shifts by a negative count or by the type's width or more give 0 (sign fill for >> of a
    // negative signed value), never the undefined result of C++.
    {"left_shift", "BitwiseBinary", 2, Family::integer_only, false, R"METAL(
struct left_shift_functor {
  template <class T>
  T operator()(T a, T b) const {
    return (b < T(0) || alloy_wide_u<T>(b) >= sizeof(T) * 8) ? T(0)
                                                            : T(alloy_wide_u<T>(a) << b);
  }
};)METAL"},
    {"right_shift", "BitwiseBinary", 2, Family::integer_only, false, R"METAL(
struct right_shift_functor {
  template <class T>
  T operator()(T a, T b) const {
    if (b < T(0) || alloy_wide_u<T>(b) >= sizeof(T) * 8) return a < T(0) ? T(-1) : T(0);
    return T(a >> b);
  }
};)METAL"},
    // ---- ternary -----------------------------------------------------------------------------
    {"select", "Select", 3, Family::arith, true, R"METAL(
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
