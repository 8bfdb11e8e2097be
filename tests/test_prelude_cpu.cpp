// The Metal prelude compiled as host C++ through the CPU target layer: semantics of half/bfloat,
// vectors, math, integer functions, as_type, limits, MLX helpers, atomics, and the simd
// functions over a simulated 32-lane simdgroup (one host thread per lane).
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

// Last: the prelude redefines INFINITY, FLT_MAX, INT_MAX... as Metal spells them.
#include "prelude/metal_stdlib.h"

namespace {

using metal::bfloat;
using metal::half;

// ---- References computed in double ----

// Rounds a finite double to the nearest value with `mant` significand bits (RNE), exponent range
// [emin, emax] of the normal numbers; subnormals below 2^emin. Returns inf past the largest.
double round_to_format(double x, int mant, int emin, int emax) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  double ax = std::fabs(x);
  int e = std::ilogb(ax);
  if (e < emin) e = emin;
  double spacing = std::ldexp(1.0, e - (mant - 1));
  double q = std::nearbyint(ax / spacing);  // default rounding mode: to nearest even
  double r = q * spacing;
  double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -(mant - 1)), emax);
  if (r > max_finite) r = INFINITY;
  return std::copysign(r, x);
}
double ref_half(double x) {
  return round_to_format(x, 11, -14, 15);
}
double ref_bf16(double x) {
  return round_to_format(x, 8, -126, 127);
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Distance in units in the last place of float between a and b (same sign assumed).
int64_t ulp_diff(float a, float b) {
  if (a == b) return 0;
  auto key = [](float f) {
    int32_t i = static_cast<int32_t>(float_bits(f));
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::llabs(key(a) - key(b));
}

// Random floats over many binades (never zero).
std::vector<float> random_floats(size_t n, float lo_exp, float hi_exp, bool signs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> e(lo_exp, hi_exp), m(1.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = std::ldexp(m(rng), int(std::floor(e(rng))));
    if (signs && (rng() & 1)) x = -x;
  }
  return v;
}

// ---- half / bfloat ----

TEST(PreludeCpu, HalfDecodeExhaustive) {
  for (uint32_t b = 0; b < 65536; ++b) {
    half h = half::from_bits(uint16_t(b));
    float f = float(h);
    // Reference: sign, exponent, mantissa by definition.
    int s = b >> 15, e = (b >> 10) & 31, m = b & 1023;
    double ref = e == 0    ? std::ldexp(double(m), -24)
                 : e == 31 ? (m ? NAN : INFINITY)
                           : std::ldexp(1024.0 + m, e - 25);
    if (s) ref = -ref;
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << b;
    } else {
      ASSERT_EQ(double(f), ref) << b;
    }
    // Both conversion paths (target, portable constexpr) agree and round-trip.
    float portable = alloy_portable::f16_bits_to_f32(uint16_t(b));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(portable)) << b;
    } else {
      ASSERT_EQ(float_bits(f), float_bits(portable)) << b;
    }
    if (!std::isnan(ref)) {
      ASSERT_EQ(half(f).alloy_bits, b) << b;
      ASSERT_EQ(alloy_portable::f32_to_f16_bits(f), b) << b;
    }
  }
}

TEST(PreludeCpu, HalfRoundingMatchesDouble) {
  std::vector<float> xs = random_floats(400000, -30, 17, true, 1);
  // Halfway cases and the overflow/underflow edges.
  for (uint32_t b = 0; b < 0x7c00; b += 7) {
    double lo = float(half::from_bits(uint16_t(b))), hi = float(half::from_bits(uint16_t(b + 1)));
    xs.push_back(float((lo + hi) / 2));
    xs.push_back(-float((lo + hi) / 2));
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e9f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-10f,
                  INFINITY, -INFINITY})
    xs.push_back(f);
  for (float x : xs) {
    half h = x;
    double ref = ref_half(x);
    ASSERT_EQ(double(float(h)), ref) << x;
    ASSERT_EQ(alloy_portable::f32_to_f16_bits(x), h.alloy_bits) << x;
  }
  EXPECT_TRUE(std::isnan(float(half(NAN))));
  EXPECT_TRUE(metal::isnan(half(NAN)));
}

TEST(PreludeCpu, BfloatRoundingMatchesDouble) {
  std::vector<float> xs = random_floats(400000, -140, 128, true, 2);
  for (uint32_t b = 0; b < 0x7f80; b += 13) {
    double lo = float(bfloat::from_bits(uint16_t(b))),
           hi = float(bfloat::from_bits(uint16_t(b + 1)));
    xs.push_back(float((lo + hi) / 2));
  }
  xs.push_back(FLT_MAX);
  for (float x : xs) {
    bfloat h = x;
    double ref = ref_bf16(x);
    ASSERT_EQ(double(float(h)), ref) << x;
  }
  EXPECT_TRUE(std::isnan(float(bfloat(NAN))));
  for (uint32_t b = 0; b < 65536; ++b) {  // decode is exact and round-trips
    bfloat h = bfloat::from_bits(uint16_t(b));
    if (!std::isnan(float(h))) {
      ASSERT_EQ(bfloat(float(h)).alloy_bits, b);
    }
  }
}

TEST(PreludeCpu, HalfPromotionTypes) {
  half h = 1.5f;
  bfloat b = 2.0f;
  float f = 1.0f;
  int i = 2;
  static_assert(std::is_same_v<decltype(h + h), half>);
  static_assert(std::is_same_v<decltype(h * f), float>);
  static_assert(std::is_same_v<decltype(f - h), float>);
  static_assert(std::is_same_v<decltype(h / i), half>);
  static_assert(std::is_same_v<decltype(2 * h), half>);
  static_assert(std::is_same_v<decltype(b + b), bfloat>);
  static_assert(std::is_same_v<decltype(b * i), bfloat>);
  static_assert(std::is_same_v<decltype(b + f), float>);
  static_assert(std::is_same_v<decltype(h + b), float>);
  static_assert(std::is_same_v<decltype(h < f), bool>);
  static_assert(std::is_same_v<decltype(h == 1), bool>);
  static_assert(std::is_same_v<decltype(-h), half>);
  static_assert(std::is_trivially_copyable_v<half> &&
                std::is_trivially_default_constructible_v<half>);
  static_assert(std::is_trivially_copyable_v<bfloat> && sizeof(bfloat) == 2 && sizeof(half) == 2);
  static_assert(metal::is_floating_point_v<half> && metal::is_floating_point_v<bfloat>);
  // Implicit conversions both ways, static_cast, compound assignment, increments.
  float g = h;
  int k = static_cast<int>(h * 3);
  h += 1;
  h *= 2.0f;
  ++h;
  half hh = i;
  EXPECT_EQ(g, 1.5f);
  EXPECT_EQ(k, 4);
  EXPECT_EQ(float(h), 6.0f);
  EXPECT_EQ(float(hh), 2.0f);
  EXPECT_TRUE(h > 5 && h < 6.5f && h != hh && !(h == hh));
  EXPECT_EQ(float(-h), -6.0f);
  constexpr half ch = 0.25f;  // constant-evaluated conversion
  static_assert(ch.alloy_bits == 0x3400);
  bfloat bb = h;  // half -> bfloat
  EXPECT_EQ(float(bb), 6.0f);
}

// half op half equals the half nearest to the exact result (computed in double).
template <class T>
void check_lowp_arith(double (*ref)(double), uint32_t seed) {
  std::mt19937 rng(seed);
  for (int n = 0; n < 200000; ++n) {
    T a = T::from_bits(uint16_t(rng())), b = T::from_bits(uint16_t(rng()));
    double x = float(a), y = float(b);
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    struct {
      T got;
      double exact;
    } cases[] = {{T(a + b), x + y}, {T(a - b), x - y}, {T(a * b), x * y}, {T(a / b), x / y}};
    for (auto& c : cases) {
      double r = ref(c.exact);
      double g = float(c.got);
      if (std::isnan(r)) {
        ASSERT_TRUE(std::isnan(g)) << x << " " << y;
      } else {
        ASSERT_EQ(g, r) << x << " " << y << " exact " << c.exact;
      }
    }
  }
}
TEST(PreludeCpu, HalfArithmeticCorrectlyRounded) {
  check_lowp_arith<half>(ref_half, 3);
}
TEST(PreludeCpu, BfloatArithmeticCorrectlyRounded) {
  check_lowp_arith<bfloat>(ref_bf16, 4);
}

// ---- vectors ----

TEST(PreludeCpu, VectorLayout) {
  using namespace metal;
  static_assert(sizeof(float2) == 8 && alignof(float2) == 8);
  static_assert(sizeof(float3) == 16 && alignof(float3) == 16);
  static_assert(sizeof(float4) == 16 && alignof(float4) == 16);
  static_assert(sizeof(half3) == 8 && sizeof(half4) == 8 && sizeof(bfloat2) == 4);
  static_assert(sizeof(long4) == 32 && alignof(long4) == 32 && sizeof(uchar3) == 4);
  static_assert(sizeof(bool4) == 4);
  static_assert(std::is_trivially_default_constructible_v<float4>);
  static_assert(std::is_trivially_copy_constructible_v<float4>);
  static_assert(std::is_trivially_destructible_v<half4>);
  static_assert(std::is_same_v<vec<float, 4>, float4>);
  // Pointer casts over a float buffer, as kernels do with (device float4*)p.
  alignas(16) float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float4* v = reinterpret_cast<float4*>(buf);
  EXPECT_EQ(v[1].y, 6.0f);
  v[0] = v[1] * 2.0f;
  EXPECT_EQ(buf[3], 16.0f);
}

TEST(PreludeCpu, VectorConstructorsAndSwizzles) {
  using namespace metal;
  float4 a(1.0f, 2.0f, 3.0f, 4.0f);
  float4 b = float4(5.0f);
  float4 c(a.xy, b.zw);
  float3 d = float3(a.zw, 9.0f);
  float4 e = float4(1.0f, a.yz, 7.0f);
  float2 f = {3.0f, 4.0f};
  float4 z{};
  EXPECT_TRUE(all(c == float4(1, 2, 5, 5)));
  EXPECT_TRUE(all(d == float3(3, 4, 9)));
  EXPECT_TRUE(all(e == float4(1, 2, 3, 7)));
  EXPECT_EQ(f.y, 4.0f);
  EXPECT_TRUE(all(z == 0.0f));
  EXPECT_EQ(a.r + a.g + a.b + a.a, 10.0f);
  EXPECT_EQ(a[3], 4.0f);
  // Read swizzles, including repeats and rgba spellings.
  float4 w = a.wzyx;
  EXPECT_TRUE(all(w == float4(4, 3, 2, 1)));
  EXPECT_TRUE(all(float3(a.zyx) == float3(3, 2, 1)));
  EXPECT_TRUE(all(float4(a.xxyy) == float4(1, 1, 2, 2)));
  EXPECT_TRUE(all(float2(a.ba) == float2(3, 4)));
  EXPECT_TRUE(all(a.xy + a.zw == float2(4, 6)));
  EXPECT_EQ(dot(a.xy, a.zw), 11.0f);
  // Writable swizzles, also from an overlapping swizzle of the same vector.
  float4 g = a;
  g.xy = float2(10, 20);
  EXPECT_TRUE(all(g == float4(10, 20, 3, 4)));
  g.wx = g.xw;
  EXPECT_TRUE(all(g == float4(4, 20, 3, 10)));
  g.yzw = g.xyz;
  EXPECT_TRUE(all(g == float4(4, 4, 20, 3)));
  g.zy += 1.0f;
  EXPECT_TRUE(all(g == float4(4, 5, 21, 3)));
  g.x = 0;
  g[1] = 8;
  EXPECT_TRUE(all(g == float4(0, 8, 21, 3)));
  const float4 cg = g;
  g.xy = cg.zw;
  EXPECT_TRUE(all(g == float4(21, 3, 21, 3)));
  // Swizzles of swizzles, as the translator rewrites them: v.zw.yx, v.wzyx.xyz.zyx, v.xy.y.
  float2 ss = a.zw.template alloy_swizzle<1, 0>();
  float3 t = a.wzyx.template alloy_swizzle<0, 1, 2>().template alloy_swizzle<2, 1, 0>();
  float one = a.xy.template alloy_swizzle<1>();
  EXPECT_TRUE(all(ss == float2(4, 3)) && all(t == float3(2, 3, 4)) && one == 2.0f);
  // vec<T, N> spelling and element types.
  int4 i4 = int4(a);
  short2 s2 = short2(i4.zw);  // converting constructors from swizzles
  float3 f3 = float3(i4.wzy);
  half4 h4 = half4(a.wzyx);
  EXPECT_TRUE(all(s2 == short2(3, 4)) && all(f3 == float3(4, 3, 2)) && float(h4.x) == 4.0f);
  vec<int, 4> iv = int4(1, -2, 3, -4);
  EXPECT_EQ(iv.y, -2);
  half4 hv = half4(a);
  EXPECT_EQ(float(hv.w), 4.0f);
  bfloat2 bv = bfloat2(1.5f, 2.5f);
  EXPECT_EQ(float(bv.x + bv.y), 4.0f);
}

TEST(PreludeCpu, VectorArithmeticAndConversions) {
  using namespace metal;
  float4 a(1.5f, -2.5f, 3.25f, 8.0f);
  int4 i = int4(a);  // truncation toward zero
  EXPECT_TRUE(all(i == int4(1, -2, 3, 8)));
  float4 back = static_cast<float4>(i);
  EXPECT_TRUE(all(back == float4(1, -2, 3, 8)));
  uint2 u = uint2(7, 9);
  EXPECT_TRUE(all(u / 2u == uint2(3, 4)));
  EXPECT_TRUE(all(u % 4u == uint2(3, 1)));
  EXPECT_TRUE(all((u << 1u) == uint2(14, 18)));
  EXPECT_TRUE(all((u & 1u) == uint2(1, 1)));
  float4 s = a * 2 + 1;
  EXPECT_TRUE(all(s == float4(4, -4, 7.5f, 17)));
  float4 t = 1.0f - a;
  EXPECT_TRUE(all(t == float4(-0.5f, 3.5f, -2.25f, -7)));
  t *= float4(2);
  t -= 1;
  EXPECT_TRUE(all(t == float4(-2, 6, -5.5f, -15)));
  bool4 m = a > 0.0f;
  EXPECT_TRUE(all(m == bool4(true, false, true, true)));
  EXPECT_TRUE(any(m) && !all(m) && any(!m));
  float4 sel = select(float4(0), a, m);
  EXPECT_TRUE(all(sel == float4(1.5f, 0, 3.25f, 8)));
  EXPECT_EQ(select(1, 2, true), 2);
  float4 neg = -a;
  EXPECT_EQ(neg.y, 2.5f);
  half4 h = half4(a) * 2;  // half vector with an int scalar stays half
  static_assert(std::is_same_v<decltype(half4(a) * 2), half4>);
  EXPECT_EQ(float(h.z), 6.5f);
  char4 cv = char4(100, 100, -100, 1);
  char4 cs = cv + cv;  // element type kept (wraps like Metal's char arithmetic)
  static_assert(std::is_same_v<decltype(cv + cv), char4>);
  EXPECT_EQ(int(cs.w), 2);
  ushort2 us = ushort2(65535, 1);
  us += ushort2(1, 1);
  EXPECT_EQ(us.x, 0);
  float4 pp = a;
  pp++;
  EXPECT_EQ(pp.x, 2.5f);
  EXPECT_EQ(as_type<uint>(1.0f), 0x3f800000u);
  uint4 bits = as_type<uint4>(a);
  EXPECT_EQ(bits.w, float_bits(8.0f));
  float2 f2 = as_type<float2>(as_type<ulong>(float2(1.0f, 2.0f)));
  EXPECT_EQ(f2.y, 2.0f);
  EXPECT_EQ(as_type<half>(ushort(0x3c00)), half(1.0f));
  EXPECT_EQ(as_type<ushort>(bfloat(1.0f)), 0x3f80);
  uint2 halves = as_type<uint2>(half4(1.0f, 2.0f, 3.0f, 4.0f));
  EXPECT_EQ(halves.x, 0x40003c00u);
}

TEST(PreludeCpu, PackedVectors) {
  using namespace metal;
  static_assert(sizeof(packed_float3) == 12 && alignof(packed_float3) == 4);
  static_assert(sizeof(packed_half3) == 6 && sizeof(packed_float4) == 16);
  static_assert(std::is_trivially_copyable_v<packed_float3>);
  float buf[6] = {1, 2, 3, 4, 5, 6};
  packed_float3* p = reinterpret_cast<packed_float3*>(buf);
  EXPECT_EQ(p[1].y, 5.0f);
  float3 v = p[1];  // packed -> aligned
  EXPECT_TRUE(all(v == float3(4, 5, 6)));
  p[0] = v * 2.0f;  // aligned -> packed
  EXPECT_EQ(buf[2], 12.0f);
  float3 w = p[0] + p[1];
  EXPECT_TRUE(all(w == float3(12, 15, 18)));
  p[1] += 1.0f;
  EXPECT_EQ(buf[5], 7.0f);
  EXPECT_EQ(dot(p[1], float3(1, 0, 0)), 5.0f);
  packed_float2 q(1.0f, 2.0f);
  EXPECT_EQ(q[1], 2.0f);
}

TEST(PreludeCpu, Matrices) {
  using namespace metal;
  static_assert(sizeof(float3x3) == 48 && sizeof(float4x4) == 64 && sizeof(half2x2) == 8);
  static_assert(std::is_trivially_default_constructible_v<float4x4>);
  float2x3 m(float3(1, 2, 3), float3(4, 5, 6));  // 2 columns of 3 rows
  EXPECT_EQ(m[1][0], 4.0f);
  float3 mv = m * float2(1, 10);  // rows: 1+40, 2+50, 3+60
  EXPECT_TRUE(all(mv == float3(41, 52, 63)));
  float2 vm = float3(1, 1, 1) * m;
  EXPECT_TRUE(all(vm == float2(6, 15)));
  float3x2 t = transpose(m);
  EXPECT_EQ(t[2][1], 6.0f);
  float2x2 sq = t * m;  // (3x2 columns... ) 2x2 = transpose(m) * m
  EXPECT_EQ(sq[0][0], 14.0f);
  EXPECT_EQ(sq[1][0], 32.0f);
  EXPECT_EQ(sq[1][1], 77.0f);
  float2x2 s(1, 2, 3, 4);  // column-major scalars
  EXPECT_EQ(determinant(s), -2.0f);
  float4x4 id(1.0f);
  EXPECT_TRUE(all(id * float4(1, 2, 3, 4) == float4(1, 2, 3, 4)));
  EXPECT_EQ(determinant(float4x4(2.0f)), 16.0f);
  float3x3 r(float3(2, 0, 1), float3(1, 3, 2), float3(1, 1, 1));
  EXPECT_FLOAT_EQ(determinant(r), 2 * (3 * 1 - 1 * 2) - 1 * (0 * 1 - 1 * 1) + 1 * (0 * 2 - 3 * 1));
  float2x2 sum = s + s * 2.0f - s;
  EXPECT_TRUE(sum == s * 2.0f);
  half2x2 hm = half2x2(s);
  EXPECT_EQ(float(hm[1][1]), 4.0f);
}

// ---- math ----

struct MathCase {
  const char* name;
  float (*f)(float);
  double (*ref)(double);
  float lo_exp, hi_exp;
  bool neg;
  int ulps;
};

template <class Fn>
float call_f(Fn fn, float x) {
  return fn(x);
}

#define MF(ns, name) [](float x) -> float { return metal::ns::name(x); }
#define M0(name) [](float x) -> float { return metal::name(x); }

TEST(PreludeCpu, MathFloatAgainstDouble) {
  const MathCase cases[] = {
      {"exp", MF(precise, exp), [](double x) { return std::exp(x); }, -8, 6.4f, true, 2},
      {"exp2", MF(precise, exp2), [](double x) { return std::exp2(x); }, -8, 6.9f, true, 2},
      {"exp10", MF(precise, exp10), [](double x) { return std::pow(10.0, x); }, -8, 5.2f, true, 2},
      {"log", MF(precise, log), [](double x) { return std::log(x); }, -60, 60, false, 2},
      {"log2", MF(precise, log2), [](double x) { return std::log2(x); }, -60, 60, false, 2},
      {"log10", MF(precise, log10), [](double x) { return std::log10(x); }, -60, 60, false, 2},
      {"sqrt", MF(precise, sqrt), [](double x) { return std::sqrt(x); }, -60, 60, false, 1},
      {"rsqrt", MF(precise, rsqrt), [](double x) { return 1 / std::sqrt(x); }, -60, 60, false, 2},
      {"sin", MF(precise, sin), [](double x) { return std::sin(x); }, -10, 8, true, 2},
      {"cos", MF(precise, cos), [](double x) { return std::cos(x); }, -10, 8, true, 2},
      {"tan", MF(precise, tan), [](double x) { return std::tan(x); }, -10, 8, true, 2},
      {"asin", MF(precise, asin), [](double x) { return std::asin(x); }, -10, -0.01f, true, 2},
      {"acos", MF(precise, acos), [](double x) { return std::acos(x); }, -10, -0.01f, true, 2},
      {"atan", MF(precise, atan), [](double x) { return std::atan(x); }, -10, 10, true, 2},
      {"sinh", MF(precise, sinh), [](double x) { return std::sinh(x); }, -10, 6, true, 2},
      {"cosh", MF(precise, cosh), [](double x) { return std::cosh(x); }, -10, 6, true, 2},
      {"tanh", MF(precise, tanh), [](double x) { return std::tanh(x); }, -10, 4, true, 2},
      {"asinh", MF(precise, asinh), [](double x) { return std::asinh(x); }, -10, 20, true, 2},
      {"acosh", MF(precise, acosh), [](double x) { return std::acosh(x); }, 0.01f, 20, false, 2},
      {"atanh", MF(precise, atanh), [](double x) { return std::atanh(x); }, -10, -0.01f, true, 2},
      {"sinpi", MF(precise, sinpi), [](double x) { return std::sin(M_PI * x); }, -6, 4, true, 3},
      {"cospi", MF(precise, cospi), [](double x) { return std::cos(M_PI * x); }, -6, 4, true, 3},
      {"tanpi", MF(precise, tanpi), [](double x) { return std::tan(M_PI * x); }, -6, 4, true, 4},
      {"log1p", M0(log1p), [](double x) { return std::log1p(x); }, -20, -0.01f, true, 2},
      {"expm1", M0(expm1), [](double x) { return std::expm1(x); }, -20, 4, true, 2},
      {"cbrt", M0(cbrt), [](double x) { return std::cbrt(x); }, -20, 20, true, 1},
      {"fast_exp", MF(fast, exp), [](double x) { return std::exp(x); }, -8, 6.4f, true, 4},
      {"fast_log", MF(fast, log), [](double x) { return std::log(x); }, -60, 60, false, 4},
      {"fast_sin", MF(fast, sin), [](double x) { return std::sin(x); }, -10, 3, true, 4},
      {"unqualified_exp", M0(exp), [](double x) { return std::exp(x); }, -8, 6.4f, true, 2},
  };
  for (const auto& c : cases) {
    for (float x : random_floats(20000, c.lo_exp, c.hi_exp, c.neg, 5)) {
      double r = c.ref(double(x));
      float got = c.f(x);
      float rf = float(r);
      if (std::isinf(rf) || std::fabs(r) < FLT_MIN) continue;  // over/underflow edges
      // Functions with zeros (sin near pi...) are checked in absolute terms there.
      if (std::fabs(r) < 1e-3 && std::fabs(double(got) - r) < 1e-9) continue;
      ASSERT_LE(ulp_diff(got, rf), c.ulps) << c.name << "(" << x << ") = " << got << " ref " << r;
    }
  }
}

TEST(PreludeCpu, MathLowPrecisionWithinOneUlp) {
  // half/bfloat results: within one unit of the correctly rounded value of the double result.
  auto check = [](auto make, double (*round)(double), auto fn, double (*ref)(double), float lo,
                  float hi) {
    std::mt19937 rng(6);
    std::uniform_real_distribution<float> d(lo, hi);
    for (int n = 0; n < 20000; ++n) {
      auto x = make(d(rng));
      double r = round(ref(float(x)));
      double got = float(fn(x));
      if (std::isinf(r)) continue;
      double ulp = std::fabs(r - round(r * (1 + 1e-3)));  // about one unit
      ASSERT_LE(std::fabs(got - r), std::max(ulp, 1e-7)) << float(x);
    }
  };
  auto h = [](float v) { return half(v); };
  auto b = [](float v) { return bfloat(v); };
  check(
      h, ref_half, [](half x) { return metal::exp(x); }, [](double x) { return std::exp(x); }, -9,
      9);
  check(
      h, ref_half, [](half x) { return metal::fast::exp(x); }, [](double x) { return std::exp(x); },
      -9, 9);
  check(
      h, ref_half, [](half x) { return metal::log(x); }, [](double x) { return std::log(x); },
      0.01f, 100);
  check(
      h, ref_half, [](half x) { return metal::tanh(x); }, [](double x) { return std::tanh(x); }, -4,
      4);
  check(
      h, ref_half, [](half x) { return metal::rsqrt(x); },
      [](double x) { return 1 / std::sqrt(x); }, 0.01f, 100);
  check(
      b, ref_bf16, [](bfloat x) { return metal::exp(x); }, [](double x) { return std::exp(x); },
      -20, 20);
  check(
      b, ref_bf16, [](bfloat x) { return metal::sin(x); }, [](double x) { return std::sin(x); }, -3,
      3);
  static_assert(std::is_same_v<decltype(metal::exp(half(1))), half>);
  static_assert(std::is_same_v<decltype(metal::precise::sqrt(bfloat(1))), bfloat>);
  static_assert(std::is_same_v<decltype(metal::exp(1)), float>);
  static_assert(std::is_same_v<decltype(metal::exp(1.0)), double>);
  static_assert(std::is_same_v<decltype(metal::pow(half(1), 2)), half>);
  static_assert(std::is_same_v<decltype(metal::pow(half(1), 2.0f)), float>);
  static_assert(std::is_same_v<decltype(metal::max(half(1), 0)), half>);
  static_assert(std::is_same_v<decltype(metal::max(1u, 2)), unsigned>);
  static_assert(std::is_same_v<decltype(metal::min(short(1), short(2))), short>);
  static_assert(std::is_same_v<decltype(metal::exp(metal::half4(1))), metal::half4>);
}

TEST(PreludeCpu, MathSpecialValues) {
  using namespace metal;
  // Online softmax starts from -INFINITY: exp must give exactly 0 in every mode and type.
  EXPECT_EQ(exp(-INFINITY), 0.0f);
  EXPECT_EQ(precise::exp(-INFINITY), 0.0f);
  EXPECT_EQ(fast::exp(-INFINITY), 0.0f);
  EXPECT_EQ(fast::exp2(-INFINITY), 0.0f);
  EXPECT_EQ(float(exp(half(-INFINITY))), 0.0f);
  EXPECT_EQ(float(fast::exp(bfloat(-INFINITY))), 0.0f);
  EXPECT_EQ(exp(-FLT_MAX), 0.0f);
  EXPECT_EQ(fast::exp(-FLT_MAX), 0.0f);
  EXPECT_TRUE(isinf(exp(INFINITY)));
  EXPECT_EQ(log(0.0f), -INFINITY);
  EXPECT_TRUE(isnan(log(-1.0f)) && isnan(sqrt(-1.0f)) && isnan(powr(-2.0f, 2.0f)));
  EXPECT_EQ(pow(-2.0f, 2.0f), 4.0f);
  EXPECT_TRUE(isnan(NAN) && !isnan(1.0f) && isinf(-INFINITY) && isfinite(FLT_MAX));
  EXPECT_TRUE(signbit(-0.0f) && !signbit(0.0f) && signbit(half(-1)));
  EXPECT_TRUE(all(isnan(float4(NAN, 1, NAN, 2)) == bool4(true, false, true, false)));
  EXPECT_EQ(max(NAN, 1.0f), 1.0f);  // NaN operands ignored (fmax)
  EXPECT_EQ(min(2.0f, NAN), 2.0f);
  EXPECT_EQ(fmax(-INFINITY, 3.0f), 3.0f);
}

TEST(PreludeCpu, MathCommonFunctions) {
  using namespace metal;
  EXPECT_EQ(floor(-1.5f), -2.0f);
  EXPECT_EQ(ceil(-1.5f), -1.0f);
  EXPECT_EQ(round(2.5f), 3.0f);  // away from zero
  EXPECT_EQ(round(-2.5f), -3.0f);
  EXPECT_EQ(rint(2.5f), 2.0f);  // to even
  EXPECT_EQ(trunc(-2.7f), -2.0f);
  EXPECT_EQ(fract(-0.25f), 0.75f);
  EXPECT_LT(fract(-1e-9f), 1.0f);
  EXPECT_LT(float(fract(half(-1e-4f))), 1.0f);
  EXPECT_EQ(fmod(7.5f, 2.0f), 1.5f);
  float ip;
  EXPECT_EQ(modf(3.75f, ip), 0.75f);
  EXPECT_EQ(ip, 3.0f);
  EXPECT_EQ(modf(-3.75f, &ip), -0.75f);
  EXPECT_EQ(ip, -3.0f);
  int e;
  EXPECT_EQ(frexp(12.0f, e), 0.75f);
  EXPECT_EQ(e, 4);
  half hip;
  EXPECT_EQ(float(modf(half(2.5f), hip)), 0.5f);
  EXPECT_EQ(ldexp(0.75f, 4), 12.0f);
  int2 e2;
  float2 m2 = frexp(float2(12.0f, 0.5f), e2);
  EXPECT_TRUE(all(m2 == float2(0.75f, 0.5f)) && all(e2 == int2(4, 0)));
  float c;
  float s = sincos(0.5f, c);
  EXPECT_EQ(s, std::sin(0.5f));
  EXPECT_EQ(c, std::cos(0.5f));
  EXPECT_EQ(copysign(2.0f, -0.0f), -2.0f);
  EXPECT_EQ(fma(2.0f, 3.0f, 1.0f), 7.0f);
  EXPECT_EQ(abs(-3), 3);
  EXPECT_EQ(abs(INT_MIN), INT_MIN);
  EXPECT_EQ(abs(-2.5f), 2.5f);
  EXPECT_EQ(float(abs(half(-2.5f))), 2.5f);
  EXPECT_TRUE(all(abs(int3(-1, 2, -3)) == int3(1, 2, 3)));
  EXPECT_EQ(min(3, 7), 3);
  EXPECT_EQ(max(3u, 7u), 7u);
  EXPECT_EQ(clamp(12, 0, 10), 10);
  EXPECT_EQ(clamp(-0.5f, 0.0f, 1.0f), 0.0f);
  EXPECT_TRUE(all(clamp(float4(-1, 0.5f, 2, 1), 0.0f, 1.0f) == float4(0, 0.5f, 1, 1)));
  EXPECT_TRUE(all(max(int2(1, 5), int2(3, 2)) == int2(3, 5)));
  EXPECT_EQ(mix(1.0f, 3.0f, 0.25f), 1.5f);
  EXPECT_TRUE(all(mix(float2(0, 10), float2(10, 20), 0.5f) == float2(5, 15)));
  EXPECT_EQ(saturate(1.5f), 1.0f);
  EXPECT_EQ(sign(-3.0f), -1.0f);
  EXPECT_EQ(sign(0.0f), 0.0f);
  EXPECT_EQ(sign(NAN), 0.0f);
  EXPECT_EQ(step(1.0f, 0.5f), 0.0f);
  EXPECT_EQ(step(1.0f, 1.0f), 1.0f);
  EXPECT_EQ(smoothstep(0.0f, 2.0f, 1.0f), 0.5f);
  EXPECT_EQ(smoothstep(0.0f, 2.0f, 3.0f), 1.0f);
  EXPECT_EQ(fmin3(3.0f, 1.0f, 2.0f), 1.0f);
  EXPECT_EQ(median3(3, 1, 2), 2);
  EXPECT_EQ(max3(3, 1, 2), 3);
  EXPECT_EQ(nextafter(1.0f, 2.0f), 1.0f + FLT_EPSILON);
  EXPECT_EQ(float(nextafter(half(1), half(2))), 1.0f + 1.0f / 1024);
  EXPECT_EQ(float(nextafter(half(0), half(-1))), -std::ldexp(1.0f, -24));
  // Geometric.
  float3 a(1, 2, 3), b(4, 5, 6);
  EXPECT_EQ(dot(a, b), 32.0f);
  EXPECT_TRUE(all(cross(a, b) == float3(-3, 6, -3)));
  EXPECT_FLOAT_EQ(length(float2(3, 4)), 5.0f);
  EXPECT_FLOAT_EQ(distance(float2(1, 1), float2(4, 5)), 5.0f);
  float3 n = normalize(a);
  EXPECT_NEAR(length(n), 1.0f, 1e-6f);
  EXPECT_EQ(float(dot(half2(1, 2), half2(3, 4))), 11.0f);
  EXPECT_EQ(length_squared(float2(3, 4)), 25.0f);
  // Vector math maps per component, with swizzle arguments.
  float4 v(0.5f, 1.0f, 2.0f, 4.0f);
  float4 ev = exp(v);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ev[i], metal::exp(v[i]));
  float2 pv = pow(v.xy, 2.0f);
  EXPECT_TRUE(all(pv == float2(0.25f, 1.0f)));
  EXPECT_TRUE(all(floor(float2(1.5f, -1.5f)) == float2(1, -2)));
}

TEST(PreludeCpu, MathFastModeSelection) {
  // Unqualified names are the precise ones unless ALLOY_MATH_FAST (Metal fast-math) is set;
  // fast:: and precise:: are always available.
  float x = 0.75f;
  EXPECT_EQ(metal::exp(x), metal::precise::exp(x));
  EXPECT_EQ(metal::fast::divide(1.0f, 4.0f), 0.25f);
  EXPECT_EQ(metal::precise::divide(1.0f, 4.0f), 0.25f);
  EXPECT_EQ(metal::fast::clamp(2.0f, 0.0f, 1.0f), 1.0f);
  EXPECT_EQ(metal::precise::fabs(-1.0f), 1.0f);
}

// ---- integer functions vs exact references ----

template <class T>
void check_integer_functions(uint32_t seed) {
  using U = std::make_unsigned_t<T>;
  constexpr int W = sizeof(T) * 8;
  std::mt19937_64 rng(seed);
  auto rnd = [&]() -> T {
    uint64_t r = rng();
    if ((r & 7) == 0) return T(r >> 40 & 3);  // small values and zero-ish edges
    return T(r >> 3);
  };
  for (int n = 0; n < 20000; ++n) {
    T a = rnd(), b = rnd(), c = rnd();
    U ua = U(a);
    int lz = 0;
    while (lz < W && !((ua >> (W - 1 - lz)) & 1)) ++lz;
    int tz = 0;
    while (tz < W && !((ua >> tz) & 1)) ++tz;
    int pc = 0;
    for (int i = 0; i < W; ++i) pc += (ua >> i) & 1;
    U rev = 0;
    for (int i = 0; i < W; ++i)
      if ((ua >> i) & 1) rev |= U(U(1) << (W - 1 - i));
    ASSERT_EQ(metal::clz(a), T(lz));
    ASSERT_EQ(metal::ctz(a), T(tz));
    ASSERT_EQ(metal::popcount(a), T(pc));
    ASSERT_EQ(U(metal::reverse_bits(a)), rev);
    int s = int(uint64_t(b) % W);
    U rot = s ? U(U(ua << s) | U(ua >> (W - s))) : ua;
    ASSERT_EQ(U(metal::rotate(a, T(s))), rot);
    // Exact wide references (__int128 holds every 64-bit product and sum).
    __int128 A = a, B = b;
    __int128 prod = A * B;
    ASSERT_EQ(metal::mulhi(a, b), T(prod >> W)) << int64_t(a) << " " << int64_t(b);
    __int128 diff = A > B ? A - B : B - A;
    ASSERT_EQ(U(metal::absdiff(a, b)), U(diff));
    __int128 lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
    __int128 sum = A + B, sub = A - B;
    ASSERT_EQ(metal::addsat(a, b), T(sum < lo ? lo : sum > hi ? hi : sum));
    ASSERT_EQ(metal::subsat(a, b), T(sub < lo ? lo : sub > hi ? hi : sub));
    __int128 h = sum >> 1, rh = (sum + 1) >> 1;  // floor division by 2
    ASSERT_EQ(metal::hadd(a, b), T(h));
    ASSERT_EQ(metal::rhadd(a, b), T(rh));
    uint32_t off = uint32_t(c) % W, bits = uint32_t(uint64_t(c) >> 8) % (W - off + 1);
    U field = bits == 0 ? 0 : U((ua >> off) & (bits == W ? U(~U(0)) : U((U(1) << bits) - 1)));
    T ext = T(field);
    if (std::is_signed_v<T> && bits > 0 && bits < W && ((field >> (bits - 1)) & 1))
      ext = T(field | U(~U((U(1) << bits) - 1)));
    ASSERT_EQ(metal::extract_bits(a, off, bits), ext) << off << " " << bits;
    U mask = bits == 0 ? 0 : U((bits == W ? U(~U(0)) : U((U(1) << bits) - 1)) << off);
    ASSERT_EQ(U(metal::insert_bits(a, b, off, bits)), U((ua & ~mask) | (U(U(b) << off) & mask)));
  }
}
TEST(PreludeCpu, IntegerFunctions) {
  check_integer_functions<int>(7);
  check_integer_functions<unsigned>(8);
  check_integer_functions<short>(9);
  check_integer_functions<unsigned char>(10);
  check_integer_functions<signed char>(11);
  check_integer_functions<long>(12);
  check_integer_functions<unsigned long>(13);
  using namespace metal;
  EXPECT_EQ(clz(0u), 32u);
  EXPECT_EQ(ctz(ushort(0)), 16);
  EXPECT_EQ(mul24(-3, 5), -15);
  EXPECT_EQ(mad24(3u, 5u, 1u), 16u);
  EXPECT_EQ(madsat(INT_MAX, 2, 1), INT_MAX);
  EXPECT_EQ(madhi(0x80000000u, 4u, 1u), 3u);
  EXPECT_TRUE(all(popcount(uint2(7, 255)) == uint2(3, 8)));
  EXPECT_TRUE(all(addsat(uchar2(250, 3), uchar2(10, 4)) == uchar2(255, 7)));
  EXPECT_TRUE(all(extract_bits(uint2(0xf0, 0x0f), 4, 4) == uint2(15, 0)));
}

// ---- limits, traits, constants ----

TEST(PreludeCpu, LimitsAndConstants) {
  using namespace metal;
  EXPECT_EQ(float(numeric_limits<half>::max()), 65504.0f);
  EXPECT_EQ(float(numeric_limits<half>::lowest()), -65504.0f);
  EXPECT_EQ(float(numeric_limits<half>::min()), std::ldexp(1.0f, -14));
  EXPECT_EQ(float(numeric_limits<half>::epsilon()), std::ldexp(1.0f, -10));
  EXPECT_EQ(float(numeric_limits<half>::denorm_min()), std::ldexp(1.0f, -24));
  EXPECT_TRUE(isinf(numeric_limits<half>::infinity()));
  EXPECT_TRUE(isnan(numeric_limits<half>::quiet_NaN()));
  EXPECT_EQ(float(numeric_limits<bfloat>::max()), bits_float(0x7f7f0000u));
  EXPECT_EQ(float(numeric_limits<bfloat>::epsilon()), std::ldexp(1.0f, -7));
  EXPECT_EQ(float(numeric_limits<bfloat>::min()), FLT_MIN);
  EXPECT_EQ(numeric_limits<float>::max(), FLT_MAX);
  EXPECT_EQ(numeric_limits<float>::lowest(), -FLT_MAX);
  EXPECT_EQ(numeric_limits<float>::infinity(), INFINITY);
  EXPECT_EQ(numeric_limits<int>::max(), 2147483647);
  EXPECT_EQ(numeric_limits<int>::min(), -2147483647 - 1);
  EXPECT_EQ(numeric_limits<uint>::max(), 4294967295u);
  EXPECT_EQ(numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(numeric_limits<char>::max(), 127);
  EXPECT_EQ(numeric_limits<uchar>::max(), 255);
  static_assert(numeric_limits<float>::infinity() > FLT_MAX);
  static_assert(numeric_limits<ushort>::max() == 65535);
  static_assert(is_same_v<decltype(INFINITY), float> && is_same_v<decltype(FLT_MAX), float>);
  static_assert(is_same_v<decltype(M_PI_F), float>);
  EXPECT_EQ(M_PI_F, float(M_PI));
  EXPECT_EQ(float(M_PI_H), float(half(float(M_PI))));
  EXPECT_EQ(FLT_MIN, std::numeric_limits<float>::min());
  EXPECT_EQ(FLT_EPSILON, std::numeric_limits<float>::epsilon());
  EXPECT_EQ(float(HALF_MAX), 65504.0f);
  EXPECT_EQ(MAXFLOAT, FLT_MAX);
  EXPECT_EQ(HUGE_VALF, INFINITY);
  EXPECT_EQ(INT_MAX, std::numeric_limits<int>::max());
  static_assert(is_same_v<make_unsigned_t<int>, uint> && is_signed_v<half> && is_unsigned_v<uint>);
  static_assert(is_integral_v<ulong> && !is_integral_v<float> && is_arithmetic_v<bfloat>);
  static_assert(is_same_v<enable_if_t<true, int>, int> &&
                is_same_v<conditional_t<false, int, float>, float>);
  static_assert(is_convertible_v<int, float> && !is_convertible_v<float*, int>);
  static_assert(is_same_v<remove_cvref_t<const int&>, int> && is_same_v<decay_t<int[3]>, int*>);
  // MLX's Limits<T>.
  EXPECT_EQ(Limits<float>::max, INFINITY);
  EXPECT_EQ(Limits<float>::min, -INFINITY);
  EXPECT_EQ(Limits<float>::finite_max, FLT_MAX);
  EXPECT_EQ(Limits<float>::finite_min, -FLT_MAX);
  EXPECT_EQ(float(Limits<half>::finite_min), -65504.0f);
  EXPECT_TRUE(isinf(Limits<bfloat16_t>::max));
  EXPECT_EQ(Limits<int>::max, INT_MAX);
  EXPECT_EQ(Limits<uint8_t>::min, 0);
  EXPECT_EQ(Limits<int64_t>::min, std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(Limits<bool>::max);
  EXPECT_EQ(Limits<complex64_t>::min.real, -INFINITY);
}

// ---- MLX helpers ----

TEST(PreludeCpu, ElemToLoc) {
  std::mt19937 rng(14);
  for (int iter = 0; iter < 200; ++iter) {
    int ndim = 1 + rng() % 5;
    std::vector<int> shape(ndim);
    std::vector<int64_t> strides(ndim);
    std::vector<size_t> sstrides(ndim);
    size_t total = 1;
    for (int d = 0; d < ndim; ++d) {
      shape[d] = 1 + rng() % 6;
      strides[d] = int64_t(rng() % 50) - 10;
      sstrides[d] = size_t(rng() % 50);
      total *= shape[d];
    }
    for (uint32_t e = 0; e < total; ++e) {
      int64_t ref = 0, sref = 0;
      uint32_t rem = e;
      std::vector<int> idx(ndim);
      for (int d = ndim - 1; d >= 0; --d) {
        idx[d] = rem % shape[d];
        ref += idx[d] * strides[d];
        sref += idx[d] * int64_t(sstrides[d]);
        rem /= shape[d];
      }
      ASSERT_EQ(metal::elem_to_loc(e, shape.data(), strides.data(), ndim), ref);
      ASSERT_EQ(metal::elem_to_loc<int64_t>(int64_t(e), shape.data(), strides.data(), ndim), ref);
      ASSERT_EQ(metal::elem_to_loc<size_t>(e, shape.data(), sstrides.data(), ndim), size_t(sref));
      ASSERT_EQ(metal::elem_to_loc<int>(e, shape.data(), strides.data(), ndim), int(ref));
      if (ndim >= 2) {
        // Grid-position form: x, y over the last two dims, z over the rest.
        uint32_t x = idx[ndim - 1], y = idx[ndim - 2];
        uint32_t z = e / (shape[ndim - 1] * shape[ndim - 2]);
        metal::uint3 g(x, y, z);
        ASSERT_EQ(metal::elem_to_loc(g, shape.data(), strides.data(), ndim), ref);
        auto l2 = metal::elem_to_loc_2_nd(g, shape.data(), strides.data(), strides.data(), ndim);
        ASSERT_EQ(l2.x, ref);
        ASSERT_EQ(l2.y, ref);
        auto l3 = metal::elem_to_loc_3_nd<int64_t>(g, shape.data(), strides.data(), strides.data(),
                                                   strides.data(), ndim);
        ASSERT_EQ(l3.z, ref);
      }
      if (ndim == 3) {
        ASSERT_EQ(metal::elem_to_loc_nd<3>(e, shape.data(), strides.data()), ref);
        metal::uint3 g(idx[2], idx[1], idx[0]);
        ASSERT_EQ(metal::elem_to_loc_3(g, strides.data()), ref);
      }
    }
  }
  int64_t st2[2] = {10, 3};
  EXPECT_EQ(metal::elem_to_loc_2(metal::uint2(2, 5), st2), 56);
  EXPECT_EQ(metal::elem_to_loc_1(7u, st2[1]), 21);
  EXPECT_EQ(metal::ceildiv(10, 3), 4);
  EXPECT_EQ(metal::ceildiv(size_t(9), 3), 3u);
}

TEST(PreludeCpu, Complex64) {
  using metal::complex64_t;
  complex64_t a(1.0f, 2.0f), b(3.0f, -1.0f);
  complex64_t p = a * b;
  EXPECT_EQ(p.real, 5.0f);
  EXPECT_EQ(p.imag, 5.0f);
  complex64_t q = p / b;
  EXPECT_FLOAT_EQ(q.real, 1.0f);
  EXPECT_FLOAT_EQ(q.imag, 2.0f);
  complex64_t s = a + 2.0f;  // real scalars convert
  EXPECT_EQ(s.real, 3.0f);
  EXPECT_EQ(s.imag, 2.0f);
  EXPECT_TRUE(b > a && a < b && a == complex64_t(1, 2) && a != b);
  float re = a;  // conversion keeps the real part (MLX)
  EXPECT_EQ(re, 1.0f);
  complex64_t z = 0;
  z += a;
  z *= complex64_t(0, 1);
  EXPECT_EQ(z.real, -2.0f);
  EXPECT_EQ(z.imag, 1.0f);
  complex64_t m = complex64_t(-7.0f, 7.0f) % complex64_t(3.0f, 3.0f);
  EXPECT_EQ(m.real, 2.0f);
  EXPECT_EQ(m.imag, 1.0f);
  static_assert(std::is_trivially_default_constructible_v<complex64_t>);
}

// ---- atomics ----

TEST(PreludeCpu, AtomicsSingleThread) {
  using namespace metal;
  atomic_int ai;
  atomic_store_explicit(&ai, 5, memory_order_relaxed);
  EXPECT_EQ(atomic_fetch_add_explicit(&ai, 3, memory_order_relaxed), 5);
  EXPECT_EQ(atomic_fetch_sub_explicit(&ai, 1, memory_order_relaxed), 8);
  EXPECT_EQ(atomic_fetch_max_explicit(&ai, 10, memory_order_relaxed), 7);
  EXPECT_EQ(atomic_fetch_min_explicit(&ai, -4, memory_order_relaxed), 10);
  EXPECT_EQ(atomic_fetch_or_explicit(&ai, 1, memory_order_relaxed), -4);
  EXPECT_EQ(atomic_fetch_and_explicit(&ai, 6, memory_order_relaxed), -3);
  EXPECT_EQ(atomic_fetch_xor_explicit(&ai, 1, memory_order_relaxed), 4);
  EXPECT_EQ(atomic_exchange_explicit(&ai, 42, memory_order_relaxed), 5);
  int expected = 41;
  EXPECT_FALSE(atomic_compare_exchange_weak_explicit(&ai, &expected, 7, memory_order_relaxed,
                                                     memory_order_relaxed));
  EXPECT_EQ(expected, 42);
  EXPECT_TRUE(atomic_compare_exchange_weak_explicit(&ai, &expected, 7, memory_order_relaxed,
                                                    memory_order_relaxed));
  EXPECT_EQ(atomic_load_explicit(&ai, memory_order_relaxed), 7);
  atomic_uint au;
  atomic_store_explicit(&au, 0xffffffffu, memory_order_relaxed);
  EXPECT_EQ(atomic_fetch_add_explicit(&au, 2u, memory_order_relaxed), 0xffffffffu);
  EXPECT_EQ(atomic_fetch_max_explicit(&au, 0x80000000u, memory_order_relaxed), 1u);
  EXPECT_EQ(atomic_load_explicit(&au, memory_order_relaxed), 0x80000000u);
  atomic_float af;
  atomic_store_explicit(&af, 1.5f, memory_order_relaxed);
  EXPECT_EQ(atomic_fetch_add_explicit(&af, 2.25f, memory_order_relaxed), 1.5f);
  EXPECT_EQ(atomic_fetch_min_explicit(&af, -1.0f, memory_order_relaxed), 3.75f);
  EXPECT_EQ(atomic_fetch_max_explicit(&af, NAN, memory_order_relaxed), -1.0f);  // NaN ignored
  EXPECT_EQ(atomic_load_explicit(&af, memory_order_relaxed), -1.0f);
  // Device buffers reinterpreted as atomics (MLX atomic_outputs).
  float out[2] = {0, 0};
  atomic_fetch_add_explicit(reinterpret_cast<atomic<float>*>(out) + 1, 4.0f, memory_order_relaxed);
  EXPECT_EQ(out[1], 4.0f);
  static_assert(std::is_trivially_default_constructible_v<atomic_int> && sizeof(atomic_float) == 4);
  atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst);
}

TEST(PreludeCpu, AtomicsContended) {
  using namespace metal;
  atomic_float sum;
  atomic_int count;
  atomic_uint mx;
  atomic_store_explicit(&sum, 0.0f, memory_order_relaxed);
  atomic_store_explicit(&count, 0, memory_order_relaxed);
  atomic_store_explicit(&mx, 0u, memory_order_relaxed);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        atomic_fetch_add_explicit(&sum, 1.0f, memory_order_relaxed);  // exact below 2^24
        atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
        atomic_fetch_max_explicit(&mx, uint(t * 100000 + i), memory_order_relaxed);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(atomic_load_explicit(&sum, memory_order_relaxed), 80000.0f);
  EXPECT_EQ(atomic_load_explicit(&count, memory_order_relaxed), 80000);
  EXPECT_EQ(atomic_load_explicit(&mx, memory_order_relaxed), 319999u);
}

// ---- simd functions over a simulated simdgroup: one host thread per live lane ----

struct FakeSimdgroup {
  uint32_t live;
  int n;
  std::barrier<> bar;
  unsigned char slots[32 * ALLOY_CPU_SIMD_SLOT_BYTES];
  explicit FakeSimdgroup(uint32_t mask) : live(mask), n(__builtin_popcount(mask)), bar(n) {}
};
thread_local FakeSimdgroup* tl_sim = nullptr;

void fake_gather(alloy_cpu_group* g, const void* in, void* all, uint32_t bytes) {
  FakeSimdgroup* s = tl_sim;
  std::memcpy(s->slots + (g->current % 32) * bytes, in, bytes);
  s->bar.arrive_and_wait();
  std::memcpy(all, s->slots, 32 * bytes);
  g->simd_live = s->live;
  s->bar.arrive_and_wait();  // nobody overwrites a slot before every lane has read
}
void fake_barrier(alloy_cpu_group*) {
  tl_sim->bar.arrive_and_wait();
}
const alloy_cpu_sync kFakeSync = {fake_barrier, fake_gather, fake_barrier, nullptr};

// Runs body(lane) on every lane of `live`, each on its own thread with its own group view.
void run_lanes(uint32_t live, const std::function<void(uint32_t)>& body) {
  FakeSimdgroup sim(live);
  std::vector<std::thread> ts;
  for (uint32_t l = 0; l < 32; ++l) {
    if (!((live >> l) & 1)) continue;
    ts.emplace_back([&, l] {
      alloy_cpu_group g{};
      g.sync = &kFakeSync;
      g.current = l;
      g.nthreads = 32;
      tl_sim = &sim;
      alloy_target::set_group(&g);
      body(l);
      alloy_target::set_group(nullptr);
    });
  }
  for (auto& t : ts) t.join();
}

TEST(PreludeCpu, SimdFunctionsOnSimulatedLanes) {
  using namespace metal;
  for (uint32_t live : {0xffffffffu, 0x0000ffffu, 0x000fffffu, 0x7u, 0x80000001u, 0x5a5a00f0u}) {
    std::vector<float> x(32);
    for (int l = 0; l < 32; ++l) x[l] = 1.0f + 0.25f * ((l * 7) % 13);
    double sum = 0;
    float mn = INFINITY, mx = -INFINITY;
    uint32_t ones = 0, first = __builtin_ctz(live), top = 31 - __builtin_clz(live);
    for (int l = 0; l < 32; ++l)
      if ((live >> l) & 1) {
        sum += x[l];
        mn = std::min(mn, x[l]);
        mx = std::max(mx, x[l]);
        if (x[l] > 2.0f) ones |= 1u << l;
      }
    struct Out {
      float sum, mn, mx, bcast, first, down, up, xr, incl, excl, rot;
      half hsum;
      int isum, iand;
      float4 vsum;
      uint64_t ballot;
      bool all_, any_, is_first, vote_all;
      uint2 wide;
    };
    std::vector<Out> out(32);
    run_lanes(live, [&](uint32_t l) {
      Out& o = out[l];
      float v = x[l];
      o.sum = simd_sum(v);
      o.mn = simd_min(v);
      o.mx = simd_max(v);
      o.bcast = simd_broadcast(v, top);
      o.first = simd_broadcast_first(v);
      o.down = simd_shuffle_down(v, 1);
      o.up = simd_shuffle_up(v, 2);
      o.xr = simd_shuffle_xor(v, 1);
      o.incl = simd_prefix_inclusive_sum(v);
      o.excl = simd_prefix_exclusive_sum(v);
      o.rot = simd_shuffle_rotate_down(v, 1);
      o.hsum = simd_sum(half(v));
      o.isum = simd_sum(int(l));
      o.iand = simd_and(int(l) | 0x100);
      o.vsum = simd_sum(float4(v, 1.0f, float(l), 2.0f));
      o.ballot = uint64_t(simd_ballot(v > 2.0f));
      o.all_ = simd_all(v > 0.0f);
      o.any_ = simd_any(v > 3.5f);
      o.is_first = simd_is_first();
      o.vote_all = simd_ballot(true).all();
      o.wide = simd_shuffle(uint2(l, l * 2), first);  // 64-bit values shuffle too
      simdgroup_barrier(mem_flags::mem_none);
    });
    double running = 0;
    uint32_t prev = 32;
    for (uint32_t l = 0; l < 32; ++l) {
      if (!((live >> l) & 1)) continue;
      const Out& o = out[l];
      int nlive = __builtin_popcount(live);
      int isum = 0;
      for (uint32_t k = 0; k < 32; ++k)
        if ((live >> k) & 1) isum += k;
      EXPECT_FLOAT_EQ(o.sum, float(sum)) << live << " lane " << l;
      EXPECT_EQ(o.mn, mn);
      EXPECT_EQ(o.mx, mx);
      EXPECT_EQ(o.bcast, x[top]);
      EXPECT_EQ(o.first, x[first]);
      EXPECT_EQ(o.down, (l + 1 < 32 && ((live >> (l + 1)) & 1)) ? x[l + 1] : x[l]);
      EXPECT_EQ(o.up, (l >= 2 && ((live >> (l - 2)) & 1)) ? x[l - 2] : x[l]);
      EXPECT_EQ(o.xr, ((live >> (l ^ 1)) & 1) ? x[l ^ 1] : x[l]);
      EXPECT_FLOAT_EQ(o.excl, float(running));
      running += x[l];
      EXPECT_FLOAT_EQ(o.incl, float(running));
      uint32_t rsrc = (l + 1) % (top + 1);
      EXPECT_EQ(o.rot, ((live >> rsrc) & 1) ? x[rsrc] : x[l]);
      EXPECT_NEAR(float(o.hsum), sum, sum * 2e-3);
      EXPECT_EQ(o.isum, isum);
      int iand = 0x1ff;
      for (uint32_t k = 0; k < 32; ++k)
        if ((live >> k) & 1) iand &= int(k) | 0x100;
      EXPECT_EQ(o.iand, iand) << live;
      EXPECT_FLOAT_EQ(o.vsum.x, float(sum));
      EXPECT_EQ(o.vsum.y, float(nlive));
      EXPECT_EQ(o.vsum.z, float(isum));
      EXPECT_EQ(o.ballot, uint64_t(ones));
      EXPECT_TRUE(o.all_);
      EXPECT_EQ(o.any_, mx > 3.5f);
      EXPECT_EQ(o.is_first, l == first);
      EXPECT_TRUE(o.vote_all);
      EXPECT_EQ(o.wide.x, first);
      EXPECT_EQ(o.wide.y, first * 2);
      prev = l;
    }
    (void)prev;
  }
}

TEST(PreludeCpu, QuadFunctionsOnSimulatedLanes) {
  using namespace metal;
  for (uint32_t live : {0xffffffffu, 0x0000ffffu, 0x5a5a00f1u}) {
    std::vector<float> sum(32), incl(32), excl(32), mx(32), down(32), xr(32), bfirst(32);
    std::vector<int> first(32), ballot(32);
    run_lanes(live, [&](uint32_t l) {
      float v = float(l + 1);
      sum[l] = quad_sum(v);
      incl[l] = quad_prefix_inclusive_sum(v);
      excl[l] = quad_prefix_exclusive_sum(v);
      mx[l] = quad_max(v);
      down[l] = quad_shuffle_down(v, 1);
      xr[l] = quad_shuffle_xor(v, 2);
      bfirst[l] = quad_broadcast_first(v);
      first[l] = quad_is_first();
      ballot[l] = uint16_t(quad_ballot(l % 2 == 0));
    });
    for (uint32_t l = 0; l < 32; ++l) {
      if (!((live >> l) & 1)) continue;
      uint32_t base = l & ~3u;
      float s = 0, in = 0, ex = 0, m = -1;
      int f = -1, b = 0;
      for (uint32_t k = base; k < base + 4; ++k)
        if ((live >> k) & 1) {
          s += float(k + 1);
          m = std::max(m, float(k + 1));
          if (k <= l) in += float(k + 1);
          if (k < l) ex += float(k + 1);
          if (f < 0) f = int(k);
          if (k % 2 == 0) b |= 1 << (k - base);
        }
      auto own_or = [&](uint32_t src) {
        return ((live >> src) & 1) ? float(src + 1) : float(l + 1);
      };
      EXPECT_EQ(sum[l], s) << live << " " << l;
      EXPECT_EQ(incl[l], in);
      EXPECT_EQ(excl[l], ex);
      EXPECT_EQ(mx[l], m);
      EXPECT_EQ(down[l], (l & 3) < 3 ? own_or(l + 1) : float(l + 1));
      EXPECT_EQ(xr[l], own_or(base | ((l ^ 2) & 3)));
      EXPECT_EQ(bfirst[l], float(f + 1));
      EXPECT_EQ(first[l], int(l) == f);
      EXPECT_EQ(ballot[l], b);
    }
  }
}

TEST(PreludeCpu, SimdgroupMatrixOnSimulatedLanes) {
  using namespace metal;
  // The lane layout covers the 8x8 matrix exactly once.
  std::vector<int> seen(64, 0);
  for (uint32_t l = 0; l < 32; ++l) {
    uint32_t r = alloy_detail::sg_row(l), c = alloy_detail::sg_col(l);
    ++seen[r * 8 + c];
    ++seen[r * 8 + c + 1];
    EXPECT_EQ(alloy_detail::sg_lane(r, c), l);
    EXPECT_EQ(alloy_detail::sg_lane(r, c + 1), l);
  }
  for (int k : seen) EXPECT_EQ(k, 1);
  std::vector<float> a(8 * 10), b(8 * 8), c(8 * 8), d(8 * 8, NAN), e(8 * 8, NAN);
  std::mt19937 rng(31);
  for (auto& x : a) x = float(int(rng() % 17) - 8) / 4;
  for (auto& x : b) x = float(int(rng() % 17) - 8) / 4;
  for (auto& x : c) x = float(int(rng() % 17) - 8);
  run_lanes(0xffffffffu, [&](uint32_t) {
    simdgroup_float8x8 ma, mb, mc, md;
    simdgroup_load(ma, a.data(), 10, ulong2(1, 0));       // 8x8 block at column 1 of an 8x10 array
    simdgroup_load(mb, b.data(), 8, ulong2(0, 0), true);  // transposed
    simdgroup_load(mc, c.data());
    simdgroup_multiply_accumulate(md, ma, mb, mc);
    simdgroup_store(md, d.data());
    simdgroup_multiply(md, ma, make_filled_simdgroup_matrix<float, 8, 8>(1.0f));
    simdgroup_store(md, e.data(), 8, ulong2(0, 0), true);
  });
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      double ref = c[i * 8 + j], rowsum = 0;
      for (int k = 0; k < 8; ++k) {
        ref += double(a[i * 10 + 1 + k]) * b[j * 8 + k];
        rowsum += a[i * 10 + 1 + k];
      }
      EXPECT_EQ(d[i * 8 + j], float(ref)) << i << " " << j;
      EXPECT_EQ(e[j * 8 + i], float(rowsum)) << i << " " << j;
    }
}

TEST(PreludeCpu, LoopModeSimdThrows) {
  alloy_cpu_group g{};
  alloy_target::set_group(&g);  // sync == nullptr: loop mode
  EXPECT_THROW(metal::simd_sum(1.0f), std::logic_error);
  EXPECT_THROW(metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup), std::logic_error);
  alloy_target::set_group(nullptr);
}

TEST(PreludeCpu, ThreadgroupSlots) {
  alignas(64) unsigned char arena[256];
  alloy_cpu_group g{};
  g.tg_arena = arena;
  g.tg_capacity = sizeof arena;
  alloy_target::set_group(&g);
  {
    ALLOY_THREADGROUP(float, [16], a, 0);
    ALLOY_THREADGROUP(metal::float4, [2][3], b, 1);
    a[3] = 1.0f;
    b[1][2] = metal::float4(2.0f);
    EXPECT_EQ(static_cast<void*>(a), static_cast<void*>(arena));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(&b[0][0]) % 16, 0u);
    ALLOY_THREADGROUP(float, [16], again, 0);  // another thread reaching slot 0
    EXPECT_EQ(again[3], 1.0f);
    ALLOY_THREADGROUP(int, , scalar, 2);
    scalar = 5;
    EXPECT_EQ(*static_cast<int*>(g.tg_slots[2]), 5);
    EXPECT_THROW((void)alloy_target::tg_slot(3, 1024, 16), std::runtime_error);
  }
  alloy_target::set_group(nullptr);
}

}  // namespace
