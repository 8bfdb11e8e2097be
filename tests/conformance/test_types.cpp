// Conformance: Metal scalar types (bool, char ... ulong, size_t, ptrdiff_t, int8_t ... uint64_t),
// half/bfloat arithmetic and Metal's promotion rules, MLX's type names (float16_t, bfloat16_t,
// complex64_t), as_type, static_cast, numeric_limits, the float/integer constants and type
// traits. Each kernel is a metal_kernel body as users write them; references are exact or float64.
#include <cfloat>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// ---- scalar types ------------------------------------------------------------------------------

TEST(ConformanceTypes, IntegerScalarTypes) {
  constexpr int64_t n = 256, K = 18;
  auto k = metal_kernel("types_int_scalars", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    int v = x[i];
    device int64_t* o = out + i * 18;
    char c = char(v);
    uchar uc = uchar(v);
    short s = short(v);
    ushort us = ushort(v);
    uint u = uint(v);
    long l = long(v) * long(v);
    ulong ul = ulong(u) << 12;
    o[0] = c; o[1] = uc; o[2] = s; o[3] = us; o[4] = u; o[5] = l; o[6] = int64_t(ul);
    int8_t i8 = int8_t(v >> 3);
    uint8_t u8 = uint8_t(v >> 5);
    int16_t i16 = int16_t(v * 3);
    uint16_t u16 = uint16_t(v);
    int32_t i32 = v / 7;
    uint32_t u32 = uint32_t(v) % 1000u;
    int64_t i64 = int64_t(v) * 1000003;
    uint64_t u64 = uint64_t(u) * 3u;
    o[7] = i8; o[8] = u8; o[9] = i16; o[10] = u16; o[11] = i32; o[12] = u32; o[13] = i64;
    o[14] = int64_t(u64);
    size_t sz = size_t(i) * sizeof(float4);
    ptrdiff_t pd = ptrdiff_t(i) - ptrdiff_t(300);
    o[15] = int64_t(sz);
    o[16] = pd;
    o[17] = sizeof(char) + 10 * sizeof(short) + 100 * sizeof(int) + 1000 * sizeof(long) +
            10000 * sizeof(size_t) + 100000 * sizeof(ptrdiff_t) + 1000000 * sizeof(bool);
  )MSL");
  auto x = random_array({n}, int32, -2e6, 2e6, 11, Device::cpu());
  auto xv = x.to_vector<int32_t>();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    int32_t v = xv[i];
    uint32_t u = static_cast<uint32_t>(v);
    double row[K] = {double(static_cast<int8_t>(v)),
                     double(static_cast<uint8_t>(v)),
                     double(static_cast<int16_t>(v)),
                     double(static_cast<uint16_t>(v)),
                     double(u),
                     double(int64_t(v) * int64_t(v)),
                     double(uint64_t(u) << 12),
                     double(static_cast<int8_t>(v >> 3)),
                     double(static_cast<uint8_t>(v >> 5)),
                     double(static_cast<int16_t>(v * 3)),
                     double(static_cast<uint16_t>(v)),
                     double(v / 7),
                     double(u % 1000u),
                     double(int64_t(v) * 1000003),
                     double(uint64_t(u) * 3u),
                     double(i * 16),
                     double(i - 300),
                     1.0 + 20 + 400 + 8000 + 80000 + 800000 + 1000000};
    ref.insert(ref.end(), row, row + K);
  }
  run_kernel(k, {x}, make_call({{n, K}}, {int64}, {n, 1, 1}, {64, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"char", "uchar", "short", "ushort", "uint", "long", "ulong", "int8_t", "uint8_t",
                  "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "size_t",
                  "ptrdiff_t", "sizeof"},
                 0, 0);
  });
}

// Metal's int64_t is long (and uint64_t ulong): pointers convert without a cast.
TEST(ConformanceTypes, LongIsInt64) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("types_long_int64", {"x"}, {"out", "uout"}, R"MSL(
    uint i = thread_position_in_grid.x;
    device long* o = out;
    device ulong* p = uout;
    o[i] = long(x[i]) * 1048576;
    p[i] = ulong(uint(x[i])) << 20;
  )MSL");
  auto x = random_array({n}, int32, -1e6, 1e6, 12, Device::cpu());
  auto xv = x.to_vector<int32_t>();
  run_kernel(k, {x}, make_call({{n}, {n}}, {int64, uint64}, {n, 1, 1}, {32, 1, 1}), [&](auto& o) {
    auto a = o[0].template to_vector<int64_t>();
    auto b = o[1].template to_vector<uint64_t>();
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(a[i], int64_t(xv[i]) * 1048576) << i;
      EXPECT_EQ(b[i], uint64_t(uint32_t(xv[i])) << 20) << i;
    }
  });
}

TEST(ConformanceTypes, BoolType) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("types_bool", {"x"}, {"flags", "code"}, R"MSL(
    uint i = thread_position_in_grid.x;
    bool b = x[i] > 0.0f;
    bool c = bool(int(x[i] * 4.0f));
    bool d = !b && c;
    flags[i] = d;
    code[i] = int(b) + 2 * int(c) + (b ? 4 : 0) + 8 * int(b == c) + 16 * (b + c);
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 13, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> rf(n), rc(n);
  for (int64_t i = 0; i < n; ++i) {
    float v = static_cast<float>(xv[i]);
    bool b = v > 0.0f, c = static_cast<int>(v * 4.0f) != 0;
    rf[i] = (!b && c) ? 1 : 0;
    rc[i] = int(b) + 2 * int(c) + (b ? 4 : 0) + 8 * int(b == c) + 16 * (int(b) + int(c));
  }
  run_kernel(k, {x}, make_call({{n}, {n}}, {bool_, int32}, {n, 1, 1}, {64, 1, 1}), [&](auto& o) {
    expect_equal(o[0], rf);
    expect_equal(o[1], rc);
  });
}

// ---- half and bfloat ---------------------------------------------------------------------------

// half op half is computed in half: every operation rounds to half (IEEE binary16, nearest even).
TEST(ConformanceTypes, HalfArithmetic) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("types_half_arith", {"a", "b"}, {"out", "lost"}, R"MSL(
    uint i = thread_position_in_grid.x;
    half x = a[i];
    half y = b[i];
    half p = x * y;
    half q = p + x;
    half r = q / y;
    half s = -r;
    s += half(1);
    s *= x;
    out[i] = s;
    // 1 is below half's resolution at 4096..8192 (spacing 4): the sum rounds back.
    half big = x * half(4096);
    lost[i] = (big + half(1)) - big;
  )MSL");
  auto a = random_array({n}, float16, 1, 2, 21, Device::cpu());
  auto b = random_array({n}, float16, 0.5, 2, 22, Device::cpu());
  auto av = a.to_doubles(), bv = b.to_doubles();
  std::vector<double> ref(n), zero(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double p = round_to(float16, av[i] * bv[i]);
    double q = round_to(float16, p + av[i]);
    double r = round_to(float16, q / bv[i]);
    double s = round_to(float16, -r + 1);
    ref[i] = round_to(float16, s * av[i]);
  }
  run_kernel(k, {a, b}, make_call({{n}, {n}}, {float16, float16}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) {
               expect_close(o[0], ref, 1e-3, 2e-3);  // one half ulp for the division
               expect_equal(o[1], zero);
             });
}

// Metal's usual arithmetic conversions: half op float -> float, bfloat op float -> float,
// half op half -> half, half op int -> half; unsuffixed literals are float (MSL has no double).
TEST(ConformanceTypes, PromotionTypes) {
  constexpr int64_t n = 32;
  auto k = metal_kernel("types_promotion_static", {"a", "b", "c"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    half h = a[i];
    float f = b[i];
    bfloat16_t g = c[i];
    auto m = h * f;
    auto n = f - h;
    auto k = h * h;
    auto j = h + 1;
    auto lit = h * 0.5;
    auto d = 0.25;
    auto bm = g * f;
    auto bb = g + g;
    static_assert(metal::is_same_v<decltype(m), float>, "half * float is float");
    static_assert(metal::is_same_v<decltype(n), float>, "float - half is float");
    static_assert(metal::is_same_v<decltype(k), half>, "half * half is half");
    static_assert(metal::is_same_v<decltype(j), half>, "half + int is half");
    static_assert(metal::is_same_v<decltype(lit), float>, "half * 0.5 is float");
    static_assert(metal::is_same_v<decltype(d), float>, "an unsuffixed literal is a float");
    static_assert(metal::is_same_v<decltype(bm), float>, "bfloat * float is float");
    static_assert(metal::is_same_v<decltype(bb), bfloat16_t>, "bfloat + bfloat is bfloat");
    static_assert(metal::is_same_v<float16_t, half>, "MLX's float16_t is half");
    out[i] = m + n + float(k) + float(j) + lit + d + bm + float(bb);
  )MSL");
  auto a = random_array({n}, float16, 0.5, 1, 31, Device::cpu());
  auto b = random_array({n}, float32, 1.5, 3, 32, Device::cpu());
  auto c = random_array({n}, bfloat16, 0.5, 1, 33, Device::cpu());
  auto av = a.to_doubles(), bv = b.to_doubles(), cv = c.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    double h = av[i], f = bv[i], g = cv[i];
    ref[i] = h * f + (f - h) + round_to(float16, h * h) + round_to(float16, h + 1) + h * 0.5 +
             0.25 + g * f + round_to(bfloat16, g + g);
  }
  run_kernel(k, {a, b, c}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-4, 1e-4); });
}

// The value side of the promotion: half * float keeps float precision (not rounded to half).
TEST(ConformanceTypes, HalfFloatPromotionValues) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("types_half_float_promo", {"a", "b"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    half h = a[i];
    float f = b[i];
    out[i] = (h * f) + (f - h) * (h * 0.5);
  )MSL");
  auto a = random_array({n}, float16, 0.5, 1, 41, Device::cpu());
  auto b = random_array({n}, float32, 1.5, 3, 42, Device::cpu());
  auto av = a.to_doubles(), bv = b.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    double h = av[i], f = bv[i];
    ref[i] = f32(f32(h * f) + f32(f32(f - h) * f32(h * 0.5)));
  }
  run_kernel(k, {a, b}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 2e-6, 0); });
}

TEST(ConformanceTypes, BfloatArithmetic) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("types_bfloat_arith", {"a", "b"}, {"out", "lost"}, R"MSL(
    uint i = thread_position_in_grid.x;
    bfloat16_t x = a[i];
    bfloat y = b[i];
    bfloat16_t p = x * y;
    bfloat16_t q = p + x;
    bfloat16_t r = q - y * x;
    out[i] = r;
    // 0.5 is below bfloat's resolution at 256..512 (spacing 2): the sum rounds back.
    bfloat16_t big = x * bfloat16_t(256.0f);
    lost[i] = (big + bfloat16_t(0.5f)) - big;
  )MSL");
  auto a = random_array({n}, bfloat16, 1, 2, 51, Device::cpu());
  auto b = random_array({n}, bfloat16, 0.5, 2, 52, Device::cpu());
  auto av = a.to_doubles(), bv = b.to_doubles();
  std::vector<double> ref(n), zero(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double p = round_to(bfloat16, av[i] * bv[i]);
    double q = round_to(bfloat16, p + av[i]);
    ref[i] = round_to(bfloat16, q - round_to(bfloat16, bv[i] * av[i]));
  }
  run_kernel(k, {a, b}, make_call({{n}, {n}}, {bfloat16, bfloat16}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) {
               expect_equal(o[0], ref);
               expect_equal(o[1], zero);
             });
}

// MLX's complex64_t: real/imag members, construction, + - * /.
TEST(ConformanceTypes, Complex64) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("types_complex64", {"x", "y"}, {"out", "parts"}, R"MSL(
    uint i = thread_position_in_grid.x;
    complex64_t a = x[i];
    complex64_t b = y[i];
    complex64_t c = a * b + complex64_t(0.5f, -1.0f);
    complex64_t d = c - a;
    complex64_t q = a / b;
    out[i] = d;
    parts[2 * i] = q.real;
    parts[2 * i + 1] = q.imag;
  )MSL");
  auto xr = random_values(2 * n, 0.5, 2, 61), yr = random_values(2 * n, -2, 2, 62);
  std::vector<float> xf(xr.begin(), xr.end()), yf(yr.begin(), yr.end());
  for (auto& v : yf) v = v < 0 ? v - 0.5f : v + 0.5f;  // |b| well away from 0
  auto x = Array::from_vector(xf, {n}, complex64, Device::cpu());
  auto y = Array::from_vector(yf, {n}, complex64, Device::cpu());
  std::vector<double> rd(2 * n), rq(2 * n);
  for (int64_t i = 0; i < n; ++i) {
    std::complex<double> a(xf[2 * i], xf[2 * i + 1]), b(yf[2 * i], yf[2 * i + 1]);
    auto d = a * b + std::complex<double>(0.5, -1.0) - a;
    auto q = a / b;
    rd[2 * i] = d.real();
    rd[2 * i + 1] = d.imag();
    rq[2 * i] = q.real();
    rq[2 * i + 1] = q.imag();
  }
  run_kernel(k, {x, y}, make_call({{n}, {2 * n}}, {complex64, float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) {
               auto got = o[0].template to_vector<float>();
               ASSERT_EQ(got.size(), rd.size());
               int bad = 0;
               for (size_t j = 0; j < rd.size(); ++j)
                 if (std::fabs(got[j] - rd[j]) > 1e-5 + 1e-5 * std::fabs(rd[j]) && bad++ < 5)
                   ADD_FAILURE() << "complex out float " << j << ": got " << got[j] << ", expected "
                                 << rd[j];
               expect_close(o[1], rq, 1e-5, 1e-5);
             });
}

// ---- bit casts, conversions, limits, constants, traits
// -------------------------------------------

TEST(ConformanceTypes, AsType) {
  constexpr int64_t n = 128, K = 7;
  auto k = metal_kernel("types_as_type", {"x"}, {"bits", "neg"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float f = x[i];
    uint b = as_type<uint>(f);
    float flipped = as_type<float>(b ^ 0x80000000u);
    half2 h2 = half2(half(f), half(-2.0f * f));
    uint hb = as_type<uint>(h2);
    ushort2 us = as_type<ushort2>(hb);
    float4 v = float4(f, 1.0f, -2.0f, f * 0.5f);
    uint4 vb = as_type<uint4>(v);
    ulong l = as_type<ulong>(float2(f, 3.0f));
    uint2 lb = as_type<uint2>(l);
    device uint* o = bits + i * 7;
    o[0] = b; o[1] = hb; o[2] = us.x; o[3] = us.y; o[4] = vb.w; o[5] = lb.x; o[6] = uint(l >> 32);
    neg[i] = flipped;
  )MSL");
  auto x = random_array({n}, float32, -1000, 1000, 71, Device::cpu());
  auto xv = x.to_vector<float>();
  std::vector<double> hv1(n), hv2(n);
  for (int64_t i = 0; i < n; ++i) {
    hv1[i] = xv[i];
    hv2[i] = -2.0f * xv[i];
  }
  auto h1 = Array::from_doubles(hv1, {n}, float16, Device::cpu()).to_vector<uint16_t>();
  auto h2 = Array::from_doubles(hv2, {n}, float16, Device::cpu()).to_vector<uint16_t>();
  auto bits_of = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  std::vector<double> ref, rneg(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b = bits_of(xv[i]);
    uint32_t hb = uint32_t(h1[i]) | (uint32_t(h2[i]) << 16);
    double row[K] = {double(b),
                     double(hb),
                     double(h1[i]),
                     double(h2[i]),
                     double(bits_of(xv[i] * 0.5f)),
                     double(b),
                     double(bits_of(3.0f))};
    ref.insert(ref.end(), row, row + K);
    rneg[i] = -double(xv[i]);
  }
  run_kernel(
      k, {x}, make_call({{n, K}, {n}}, {uint32, float32}, {n, 1, 1}, {32, 1, 1}), [&](auto& o) {
        expect_table(
            o[0], ref,
            {"float", "half2", "ushort2.x", "ushort2.y", "uint4.w", "uint2.x", "ulong>>32"}, 0, 0);
        expect_equal(o[1], rneg);
      });
}

TEST(ConformanceTypes, StaticCast) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("types_static_cast", {"x"}, {"iout", "fout"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float f = x[i];
    device int* o = iout + i * 5;
    o[0] = static_cast<int>(f);
    o[1] = int(static_cast<uint>(fabs(f)));
    o[2] = static_cast<uchar>(static_cast<int>(f));
    o[3] = static_cast<int>(static_cast<bool>(static_cast<int>(f)));
    o[4] = static_cast<int>(static_cast<short>(f * 100.0f));
    fout[2 * i] = static_cast<float>(static_cast<half>(f * 1.001f));
    fout[2 * i + 1] = static_cast<float>(static_cast<bfloat16_t>(f));
  )MSL");
  auto x = random_array({n}, float32, -300, 300, 81, Device::cpu());
  auto xv = x.to_vector<float>();
  std::vector<double> ri, rf;
  std::vector<double> to_half, to_bf;
  for (int64_t i = 0; i < n; ++i) {
    float f = xv[i];
    double row[5] = {double(int(f)), double(uint32_t(std::fabs(f))),
                     double(static_cast<uint8_t>(int(f))), double(int(f) != 0 ? 1 : 0),
                     double(static_cast<int16_t>(f * 100.0f))};
    ri.insert(ri.end(), row, row + 5);
    to_half.push_back(f * 1.001f);
    to_bf.push_back(f);
  }
  auto h = round_to(float16, to_half), bf = round_to(bfloat16, to_bf);
  for (int64_t i = 0; i < n; ++i) {
    rf.push_back(h[i]);
    rf.push_back(bf[i]);
  }
  run_kernel(k, {x}, make_call({{n, 5}, {n, 2}}, {int32, float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) {
               expect_table(o[0], ri, {"int(f)", "uint(|f|)", "uchar", "bool", "short"}, 0, 0);
               expect_table(o[1], rf, {"half", "bfloat"}, 0, 0);
             });
}

TEST(ConformanceTypes, NumericLimits) {
  constexpr int64_t n = 4, KF = 11, KI = 12;
  auto k = metal_kernel("types_numeric_limits", {"x"}, {"f", "l"}, R"MSL(
    uint i = thread_position_in_grid.x;
    bool on = x[i] > -1e30f;   // always true; keeps the input used
    device float* o = f + i * 11;
    o[0] = on ? metal::numeric_limits<float>::max() : 0.0f;
    o[1] = metal::numeric_limits<float>::min();
    o[2] = metal::numeric_limits<float>::lowest();
    o[3] = metal::numeric_limits<float>::epsilon();
    o[4] = metal::numeric_limits<float>::infinity();
    o[5] = isnan(metal::numeric_limits<float>::quiet_NaN()) ? 1.0f : 0.0f;
    o[6] = numeric_limits<half>::max();
    o[7] = numeric_limits<half>::min();
    o[8] = numeric_limits<half>::epsilon();
    o[9] = numeric_limits<half>::lowest();
    o[10] = numeric_limits<half>::infinity();
    device long* p = l + i * 12;
    p[0] = numeric_limits<int>::max();
    p[1] = numeric_limits<int>::min();
    p[2] = numeric_limits<uint>::max();
    p[3] = numeric_limits<short>::min();
    p[4] = numeric_limits<ushort>::max();
    p[5] = numeric_limits<char>::min();
    p[6] = numeric_limits<uchar>::max();
    p[7] = numeric_limits<long>::max();
    p[8] = numeric_limits<long>::min();
    p[9] = numeric_limits<int8_t>::lowest();
    p[10] = numeric_limits<uint16_t>::max();
    p[11] = numeric_limits<int64_t>::lowest();
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 91, Device::cpu());
  double inf = std::numeric_limits<double>::infinity();
  std::vector<double> rf;
  std::vector<int64_t> rl;
  for (int64_t i = 0; i < n; ++i) {
    double row[KF] = {FLT_MAX,
                      FLT_MIN,
                      -FLT_MAX,
                      FLT_EPSILON,
                      inf,
                      1,
                      65504,
                      std::ldexp(1.0, -14),
                      std::ldexp(1.0, -10),
                      -65504,
                      inf};
    rf.insert(rf.end(), row, row + KF);
    int64_t irow[KI] = {INT32_MAX, INT32_MIN, UINT32_MAX, INT16_MIN, UINT16_MAX, -128,
                        255,       INT64_MAX, INT64_MIN,  -128,      65535,      INT64_MIN};
    rl.insert(rl.end(), irow, irow + KI);
  }
  run_kernel(
      k, {x}, make_call({{n, KF}, {n, KI}}, {float32, int64}, {n, 1, 1}, {4, 1, 1}), [&](auto& o) {
        expect_table(o[0], rf,
                     {"float max", "float min", "float lowest", "float epsilon", "float infinity",
                      "isnan(quiet_NaN)", "half max", "half min", "half epsilon", "half lowest",
                      "half infinity"},
                     0, 0);
        auto got = o[1].template to_vector<int64_t>();
        const char* names[KI] = {"int max",    "int min",       "uint max",     "short min",
                                 "ushort max", "char min",      "uchar max",    "long max",
                                 "long min",   "int8_t lowest", "uint16_t max", "int64_t lowest"};
        ASSERT_EQ(got.size(), rl.size());
        for (size_t j = 0; j < KI; ++j) EXPECT_EQ(got[j], rl[j]) << names[j];
      });
}

// The float constants every Metal header has (metal_math / metal_types).
TEST(ConformanceTypes, FloatConstants) {
  constexpr int64_t n = 4, K = 8;
  auto k = metal_kernel("types_float_constants", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    device float* o = out + i * 8;
    float s = x[i] > -1e30f ? 1.0f : 0.0f;   // always 1
    o[0] = s * INFINITY;
    o[1] = -INFINITY;
    o[2] = isnan(NAN) ? 1.0f : 0.0f;
    o[3] = MAXFLOAT;
    o[4] = FLT_MAX;
    o[5] = HUGE_VALF;
    o[6] = FLT_MIN;
    o[7] = FLT_EPSILON;
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 101, Device::cpu());
  double inf = std::numeric_limits<double>::infinity();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    double row[K] = {inf, -inf, 1, FLT_MAX, FLT_MAX, inf, FLT_MIN, FLT_EPSILON};
    ref.insert(ref.end(), row, row + K);
  }
  run_kernel(k, {x}, make_call({{n, K}}, {float32}, {n, 1, 1}, {4, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"INFINITY", "-INFINITY", "isnan(NAN)", "MAXFLOAT", "FLT_MAX", "HUGE_VALF",
                  "FLT_MIN", "FLT_EPSILON"},
                 0, 0);
  });
}

// The "friends": math constants (M_*_F, M_PI_H), half limits, integer limits.
TEST(ConformanceTypes, MathHalfAndIntegerConstants) {
  constexpr int64_t n = 2, K = 17;
  auto k = metal_kernel("types_more_constants", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    device float* o = out + i * 17;
    float s = x[i] > -1e30f ? 1.0f : 0.0f;   // always 1
    o[0] = s * M_PI_F;
    o[1] = M_E_F;
    o[2] = M_LN2_F;
    o[3] = M_SQRT2_F;
    o[4] = M_PI_2_F;
    o[5] = M_1_PI_F;
    o[6] = M_LOG2E_F;
    o[7] = float(M_PI_H);
    o[8] = float(HALF_MAX);
    o[9] = float(HALF_MIN);
    o[10] = float(HALF_EPSILON);
    o[11] = float(INT_MAX);
    o[12] = float(INT_MIN);
    o[13] = float(UINT_MAX);
    o[14] = float(SHRT_MAX);
    o[15] = float(UCHAR_MAX);
    o[16] = float(CHAR_BIT);
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 102, Device::cpu());
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    double row[K] = {f32(M_PI),
                     f32(M_E),
                     f32(M_LN2),
                     f32(M_SQRT2),
                     f32(M_PI_2),
                     f32(M_1_PI),
                     f32(M_LOG2E),
                     round_to(float16, M_PI),
                     65504,
                     std::ldexp(1.0, -14),
                     std::ldexp(1.0, -10),
                     f32(INT32_MAX),
                     f32(INT32_MIN),
                     f32(UINT32_MAX),
                     32767,
                     255,
                     8};
    ref.insert(ref.end(), row, row + K);
  }
  run_kernel(k, {x}, make_call({{n, K}}, {float32}, {n, 1, 1}, {2, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"M_PI_F", "M_E_F", "M_LN2_F", "M_SQRT2_F", "M_PI_2_F", "M_1_PI_F", "M_LOG2E_F",
                  "M_PI_H", "HALF_MAX", "HALF_MIN", "HALF_EPSILON", "INT_MAX", "INT_MIN",
                  "UINT_MAX", "SHRT_MAX", "UCHAR_MAX", "CHAR_BIT"},
                 0, 0);
  });
}

// metal::is_same_v chooses a path per dtype template argument (how MLX kernels specialize).
TEST(ConformanceTypes, IsSameV) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("types_is_same", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    static_assert(!metal::is_same_v<T, int>, "T is a float type here");
    float v = float(x[i]);
    if (metal::is_same_v<T, float>) {
      out[i] = v * 2.0f;
    } else if (metal::is_same_v<T, half>) {
      out[i] = v * 3.0f;
    } else if (is_same_v<T, bfloat16_t>) {
      out[i] = v * 5.0f;
    } else {
      out[i] = -1.0f;
    }
  )MSL");
  const std::vector<std::pair<Dtype, double>> cases = {
      {float32, 2.0}, {float16, 3.0}, {bfloat16, 5.0}};
  for (auto [dt, factor] : cases) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    auto x = random_array({n}, dt, -4, 4, 111, Device::cpu());
    auto xv = x.to_doubles();
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = xv[i] * factor;
    run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}, {{"T", dt}}),
               [&](auto& o) { expect_equal(o[0], ref); });
  }
}

// Other metal_type_traits: is_floating_point_v, is_integral_v, is_signed_v, is_unsigned_v,
// conditional_t, enable_if_t (SFINAE in a header template).
TEST(ConformanceTypes, TypeTraits) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("types_traits", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    using Acc = metal::conditional_t<metal::is_same_v<T, half>, float, T>;
    static_assert(metal::is_same_v<Acc, float>, "half accumulates in float");
    static_assert(metal::is_signed_v<int> && metal::is_unsigned_v<uint>, "signedness");
    static_assert(metal::is_floating_point_v<half> && metal::is_floating_point_v<float>, "fp");
    static_assert(!metal::is_integral_v<float> && metal::is_integral_v<short>, "integral");
    Acc v = Acc(x[i]);
    out[i] = v * scale_of(x[i]) + scale_of(int(i));
  )MSL",
                        R"MSL(
template <typename T>
metal::enable_if_t<metal::is_floating_point_v<T>, float> scale_of(T) { return 2.0f; }
template <typename T>
metal::enable_if_t<metal::is_integral_v<T>, float> scale_of(T) { return 3.0f; }
)MSL");
  auto x = random_array({n}, float16, -4, 4, 121, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = xv[i] * 2 + 3;
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}, {{"T", float16}}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

// MSL has no double: `1e-9` is a float, so x + 1e-9 == x for x in [1, 2).
TEST(ConformanceTypes, UnsuffixedLiteralsAreFloat) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("types_float_literals", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float v = x[i];
    out[i] = (v + 1e-9) - v;
  )MSL");
  auto x = random_array({n}, float32, 1, 2, 131, Device::cpu());
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_equal(o[0], std::vector<double>(n, 0.0)); });
}

}  // namespace
