// Conformance: Metal vector types. Constructors (splat, from scalars and smaller vectors, brace
// lists), components .xyzw/.rgba, swizzles (read and writable), [i], element-wise arithmetic and
// comparisons, conversions (float4(int4), static_cast), all element types, vec<T, N>, and pointer
// casts to float4*. Inputs are multiples of 1/64 where the reference must be exact.
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// Random odd multiples of 1/128 in [lo, hi): never zero, exact in float and half, so sums and
// small products are exact.
Array grid_array(const Shape& shape, double lo, double hi, uint64_t seed) {
  size_t n = 1;
  for (auto s : shape) n *= static_cast<size_t>(s);
  auto v = random_values(n, lo, hi, seed);
  for (auto& x : v) x = (std::floor(x * 64) + 0.5) / 64;
  return Array::from_doubles(v, shape, float32, Device::cpu());
}

using V4 = std::array<double, 4>;

// ---- constructors, components, swizzles
// ------------------------------------------------------------

TEST(ConformanceVectors, Constructors) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("vec_constructors", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    const device float* p = x + 4 * i;
    float4 a = float4(p[0], p[1], p[2], p[3]);
    float4 b = float4(p[1]);
    float2 c = float2(a.x, a.w);
    float4 d = float4(a.xy, b.zw);
    float4 e = float4(c, 1.5f, -2.0f);
    float3 f = float3(a.z, c);
    float4 g = float4(f, 3.0f);
    float4 h = float4(c.y, f.yz, a.x);
    float4 z = {p[3], p[2], 0.5f, -1.0f};
    float4 r = d + 2.0f * e + 4.0f * g + 8.0f * h + 16.0f * z;
    out[4 * i + 0] = r.x;
    out[4 * i + 1] = r.y;
    out[4 * i + 2] = r.z;
    out[4 * i + 3] = r.w;
  )MSL");
  auto x = grid_array({n, 4}, -1, 1, 201);
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    const double* p = &xv[4 * i];
    V4 d = {p[0], p[1], p[1], p[1]}, e = {p[0], p[3], 1.5, -2}, g = {p[2], p[0], p[3], 3},
       h = {p[3], p[0], p[3], p[0]}, z = {p[3], p[2], 0.5, -1};
    for (int c = 0; c < 4; ++c) ref.push_back(d[c] + 2 * e[c] + 4 * g[c] + 8 * h[c] + 16 * z[c]);
  }
  run_kernel(k, {x}, make_call({{n, 4}}, {float32}, {n, 1, 1}, {32, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref, {"x", "y", "z", "w"}, 0, 0);
  });
}

TEST(ConformanceVectors, ComponentsAndSwizzles) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("vec_swizzles", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    const device float* p = x + 4 * i;
    float4 v = float4(p[0], p[1], p[2], p[3]);
    float4 w = v.wzyx;
    float3 u = v.zyx;
    float2 s = v.xw + v.ra + v.gb;
    float4 rep = v.xxyy;
    float2 ss = float2(v.w, v.z);
    float4 q = v;
    q.xy = v.zw;
    q.w = v.r;
    q.zx = float2(-1.0f, 2.0f) * v.y;
    q[1] += 0.5f;
    q.b *= 2.0f;
    float dyn = v[i % 4];
    float4 r = w + float4(u, s.x) + q * s.y + rep + float4(ss, ss) + dyn;
    out[4 * i + 0] = r.x;
    out[4 * i + 1] = r.y;
    out[4 * i + 2] = r.z;
    out[4 * i + 3] = r.w;
  )MSL");
  auto x = grid_array({n, 4}, -1, 1, 202);
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    V4 v = {xv[4 * i], xv[4 * i + 1], xv[4 * i + 2], xv[4 * i + 3]};
    V4 w = {v[3], v[2], v[1], v[0]};
    double s0 = v[0] + v[0] + v[1], s1 = v[3] + v[3] + v[2];
    V4 u4 = {v[2], v[1], v[0], s0};
    V4 rep = {v[0], v[0], v[1], v[1]};
    V4 ss = {v[3], v[2], v[3], v[2]};
    V4 q = v;
    q[0] = v[2];
    q[1] = v[3];
    q[3] = v[0];
    q[2] = -1 * v[1];
    q[0] = 2 * v[1];
    q[1] += 0.5;
    q[2] *= 2;
    double dyn = v[i % 4];
    for (int c = 0; c < 4; ++c) ref.push_back(w[c] + u4[c] + q[c] * s1 + rep[c] + ss[c] + dyn);
  }
  run_kernel(k, {x}, make_call({{n, 4}}, {float32}, {n, 1, 1}, {32, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref, {"x", "y", "z", "w"}, 0, 0);
  });
}

// ---- arithmetic and comparisons ---------------------------------------------------------------

TEST(ConformanceVectors, ArithmeticAndComparison) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("vec_arith_compare", {"x", "y"}, {"fo", "io", "flags"}, R"MSL(
    uint i = thread_position_in_grid.x;
    const device float* p = x + 4 * i;
    const device float* q = y + 4 * i;
    float4 a = float4(p[0], p[1], p[2], p[3]);
    float4 b = float4(q[0], q[1], q[2], q[3]);
    float4 r = a + b * 2.0f - a / b;
    r = -r;
    r += 1.0f;
    r *= a;
    r = 3.0f - r;
    bool4 lt = a < b;
    bool4 ge = a >= b;
    bool4 eq = (a == a);
    float4 sel = select(a, b, lt);
    int4 ia = int4(a * 64.0f);
    int4 ib = int4(b * 64.0f);
    int4 ir = ((ia + ib) % 7) ^ (ia & ib) | (ib >> 2);
    ir += ia * 3 - ib / 5;
    uint4 ur = uint4(ia) << 3u;
    for (int c = 0; c < 4; ++c) {
      fo[8 * i + c] = r[c];
      fo[8 * i + 4 + c] = sel[c];
      io[8 * i + c] = ir[c];
      io[8 * i + 4 + c] = int(ur[c]);
    }
    flags[i] = int(all(eq)) + 2 * int(any(lt)) + 4 * int(all(lt)) + 8 * int(lt.x) +
               16 * int(any(ge == lt)) + 32 * int(all(ge != lt));
  )MSL");
  auto x = grid_array({n, 4}, 0.5, 3, 203), y = grid_array({n, 4}, 0.5, 3, 204);
  auto xv = x.to_doubles(), yv = y.to_doubles();
  std::vector<double> rf, ri, rflags;
  for (int64_t i = 0; i < n; ++i) {
    bool all_lt = true, any_lt = false;
    for (int c = 0; c < 4; ++c) {
      double a = xv[4 * i + c], b = yv[4 * i + c];
      double r = 3.0 - (1.0 - (a + b * 2 - a / b)) * a;
      rf.push_back(r);
      any_lt |= a < b;
      all_lt &= a < b;
    }
    for (int c = 0; c < 4; ++c)
      rf.push_back(xv[4 * i + c] < yv[4 * i + c] ? yv[4 * i + c] : xv[4 * i + c]);
    for (int c = 0; c < 4; ++c) {
      int ia = int(f32(xv[4 * i + c] * 64)), ib = int(f32(yv[4 * i + c] * 64));
      int ir = (((ia + ib) % 7) ^ (ia & ib)) | (ib >> 2);
      ir += ia * 3 - ib / 5;
      ri.push_back(ir);
    }
    for (int c = 0; c < 4; ++c) ri.push_back(int(f32(xv[4 * i + c] * 64)) << 3);
    rflags.push_back(1 + 2 * any_lt + 4 * all_lt + 8 * (xv[4 * i] < yv[4 * i]) + 0 + 32);
  }
  run_kernel(
      k, {x, y}, make_call({{n, 8}, {n, 8}, {n}}, {float32, int32, int32}, {n, 1, 1}, {32, 1, 1}),
      [&](auto& o) {
        expect_table(o[0], rf, {"r.x", "r.y", "r.z", "r.w", "sel.x", "sel.y", "sel.z", "sel.w"},
                     1e-6, 1e-5);
        expect_table(o[1], ri, {"ir.x", "ir.y", "ir.z", "ir.w", "ur.x", "ur.y", "ur.z", "ur.w"}, 0,
                     0);
        expect_equal(o[2], rflags);
      });
}

// ---- every element type, in 2, 3 and 4 lanes ------------------------------------------------

// The same vector program for each element type: constructors from scalars and smaller vectors,
// a reversed swizzle, vector +, * scalar, -, a writable swizzle, [i] +=, comparisons.
constexpr const char* kVecProgram = R"MSL(
#define VEC_PROGRAM(T)                                  \
  T##2 v2 = T##2(T(a), T(b));                           \
  T##3 v3 = T##3(v2, T(c));                             \
  T##4 v4 = T##4(v3.zyx, T(a));                         \
  T##4 s = v4 + T##4(v2, v2.yx);                        \
  T##4 m = s * T(2) - v4;                               \
  m.yw = m.wy;                                          \
  m[2] += T(1);
)MSL";

// m = (c + 2a, 3a, a + 2b + 1, 3b); the last column checks v3 sums and comparisons.
std::vector<double> vec_program_row(double a, double b, double c) {
  return {c + 2 * a, 3 * a, a + 2 * b + 1, 3 * b, a + b + c + 1000 + (b == c || a == c ? 2000 : 0)};
}

TEST(ConformanceVectors, IntegerElementTypes) {
  constexpr int64_t n = 64;
  const char* types[] = {"char", "uchar", "short", "ushort", "int", "uint", "long", "ulong"};
  std::string body = R"MSL(
    uint i = thread_position_in_grid.x;
    int a = xa[i], b = xb[i], c = xc[i];
    device int64_t* o = out + i * 40;
)MSL";
  std::vector<std::string> names;
  for (int t = 0; t < 8; ++t) {
    std::string T = types[t], base = std::to_string(5 * t);
    body += "    {\n      VEC_PROGRAM(" + T + ")\n";
    for (int comp = 0; comp < 4; ++comp)
      body += "      o[" + base + " + " + std::to_string(comp) + "] = int64_t(m[" +
              std::to_string(comp) + "]);\n";
    body += "      o[" + base + " + 4] = int64_t(v3.x + v3.y + v3.z) + 1000 * int64_t(all(v4 > " +
            T + "(0))) + 2000 * int64_t(any(v2 == " + T + "(c)));\n    }\n";
    for (const char* c : {".x", ".y", ".z", ".w", ".sum"}) names.push_back(T + "4 m" + c);
  }
  auto k = metal_kernel("vec_integer_types", {"xa", "xb", "xc"}, {"out"}, body, kVecProgram);
  auto xa = random_array({n}, int32, 1, 10, 211, Device::cpu());
  auto xb = random_array({n}, int32, 1, 10, 212, Device::cpu());
  auto xc = random_array({n}, int32, 1, 10, 213, Device::cpu());
  auto av = xa.to_doubles(), bv = xb.to_doubles(), cv = xc.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i)
    for (int t = 0; t < 8; ++t) {
      auto row = vec_program_row(av[i], bv[i], cv[i]);
      ref.insert(ref.end(), row.begin(), row.end());
    }
  run_kernel(k, {xa, xb, xc}, make_call({{n, 40}}, {int64}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_table(o[0], ref, names, 0, 0); });
}

TEST(ConformanceVectors, FloatElementTypes) {
  constexpr int64_t n = 64;
  const char* types[] = {"half", "bfloat", "float"};
  std::string body = R"MSL(
    uint i = thread_position_in_grid.x;
    float a = xa[i], b = xb[i], c = xc[i];
    device float* o = out + i * 15;
)MSL";
  std::vector<std::string> names;
  for (int t = 0; t < 3; ++t) {
    std::string T = types[t], base = std::to_string(5 * t);
    body += "    {\n      VEC_PROGRAM(" + T + ")\n";
    for (int comp = 0; comp < 4; ++comp)
      body += "      o[" + base + " + " + std::to_string(comp) + "] = float(m[" +
              std::to_string(comp) + "]);\n";
    body += "      o[" + base + " + 4] = float(v3.x + v3.y + v3.z) + 1000.0f * float(all(v4 > " +
            T + "(0))) + 2000.0f * float(any(v2 == " + T + "(c)));\n    }\n";
    for (const char* c : {".x", ".y", ".z", ".w", ".sum"}) names.push_back(T + "4 m" + c);
  }
  auto k = metal_kernel("vec_float_types", {"xa", "xb", "xc"}, {"out"}, body, kVecProgram);
  // Small integers: exact in every float type.
  auto xa = Array::from_doubles(random_array({n}, int32, 1, 10, 221, Device::cpu()).to_doubles(),
                                {n}, float32, Device::cpu());
  auto xb = Array::from_doubles(random_array({n}, int32, 1, 10, 222, Device::cpu()).to_doubles(),
                                {n}, float32, Device::cpu());
  auto xc = Array::from_doubles(random_array({n}, int32, 1, 10, 223, Device::cpu()).to_doubles(),
                                {n}, float32, Device::cpu());
  auto av = xa.to_doubles(), bv = xb.to_doubles(), cv = xc.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i)
    for (int t = 0; t < 3; ++t) {
      auto row = vec_program_row(av[i], bv[i], cv[i]);
      ref.insert(ref.end(), row.begin(), row.end());
    }
  run_kernel(k, {xa, xb, xc}, make_call({{n, 15}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_table(o[0], ref, names, 0, 0); });
}

TEST(ConformanceVectors, BoolVectors) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("vec_bool", {"xa", "xb", "xc"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    int a = xa[i], b = xb[i], c = xc[i];
    bool2 b2 = bool2(a > 3, b > 3);
    bool3 b3 = bool3(b2, c > 3);
    bool4 b4 = bool4(b3.zyx, true);
    bool4 n4 = !b4;
    out[i] = int(b4.x) + 2 * int(b4.y) + 4 * int(b4.z) + 8 * int(b4.w) + 16 * int(all(b3)) +
             32 * int(any(b2)) + 64 * int(n4.w) + 128 * int(any(n4));
  )MSL");
  auto xa = random_array({n}, int32, 1, 7, 231, Device::cpu());
  auto xb = random_array({n}, int32, 1, 7, 232, Device::cpu());
  auto xc = random_array({n}, int32, 1, 7, 233, Device::cpu());
  auto av = xa.to_doubles(), bv = xb.to_doubles(), cv = xc.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    bool A = av[i] > 3, B = bv[i] > 3, C = cv[i] > 3;
    bool b4[4] = {C, B, A, true};
    ref[i] = b4[0] + 2 * b4[1] + 4 * b4[2] + 8 * b4[3] + 16 * (A && B && C) + 32 * (A || B) + 0 +
             128 * !(A && B && C);
  }
  run_kernel(k, {xa, xb, xc}, make_call({{n}}, {int32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

// vec<T, N> with a dtype template argument (how MLX kernels spell vectors of T).
TEST(ConformanceVectors, VecTemplateAlias) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("vec_template_alias", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    vec<float, 4> v = vec<float, 4>(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
    vec<T, 4> t = vec<T, 4>(v);
    typedef vec<T, 2> T2;
    T2 lo = t.xy;
    T2 hi = t.zw;
    T2 s = lo * hi + T2(T(1));
    out[2 * i] = s.x;
    out[2 * i + 1] = s.y;
  )MSL");
  auto x = random_array({n, 4}, float32, -2, 2, 241, Device::cpu());
  auto xv = x.to_doubles();
  for (Dtype T : {float16, float32}) {
    SCOPED_TRACE(std::string(dtype_name(T)));
    auto t = round_to(T, xv);
    std::vector<double> prod(2 * n), ref;
    for (int64_t i = 0; i < n; ++i) {
      prod[2 * i] = t[4 * i] * t[4 * i + 2];
      prod[2 * i + 1] = t[4 * i + 1] * t[4 * i + 3];
    }
    prod = round_to(T, prod);
    for (auto& p : prod) p += 1;
    ref = round_to(T, prod);
    run_kernel(k, {x}, make_call({{n, 2}}, {T}, {n, 1, 1}, {32, 1, 1}, {{"T", T}}),
               [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
  }
}

// Reinterpreting buffers as vectors: `(const device float4*)x`, reinterpret_cast, vec<T, 4>*.
TEST(ConformanceVectors, PointerCastToFloat4) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("vec_pointer_cast", {"x", "xh"}, {"out", "outh"}, R"MSL(
    uint i = thread_position_in_grid.x;
    const device float4* x4 = (const device float4*)x;
    device float4* o4 = reinterpret_cast<device float4*>(out);
    float4 v = x4[i];
    o4[i] = v.wzyx * 2.0f + float4(1.0f);
    const device vec<T, 4>* h4 = reinterpret_cast<const device vec<T, 4>*>(xh);
    device vec<T, 4>* oh = (device vec<T, 4>*)outh;
    oh[i] = h4[i].yxwz;
  )MSL");
  auto x = grid_array({n, 4}, -1, 1, 251);
  auto xh = Array::from_doubles(grid_array({n, 4}, -1, 1, 252).to_doubles(), {n, 4}, float16,
                                Device::cpu());
  auto xv = x.to_doubles(), hv = xh.to_doubles();
  std::vector<double> ref, refh;
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < 4; ++c) ref.push_back(xv[4 * i + 3 - c] * 2 + 1);
    int sw[4] = {1, 0, 3, 2};
    for (int c = 0; c < 4; ++c) refh.push_back(hv[4 * i + sw[c]]);
  }
  run_kernel(
      k, {x, xh},
      make_call({{n, 4}, {n, 4}}, {float32, float16}, {n, 1, 1}, {32, 1, 1}, {{"T", float16}}),
      [&](auto& o) {
        expect_equal(o[0], ref);
        expect_equal(o[1], refh);
      });
}

TEST(ConformanceVectors, Conversions) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("vec_conversions", {"x"}, {"iout", "fout", "lout"}, R"MSL(
    uint i = thread_position_in_grid.x;
    const device float* p = x + 4 * i;
    float4 f = float4(p[0], p[1], p[2], p[3]);
    int4 i4 = int4(f);
    uint4 u4 = uint4(fabs(f));
    float4 back = float4(i4);
    half4 h4 = half4(f);
    float4 fh = float4(h4);
    short2 s2 = short2(int2(i4.x, i4.y));
    int2 from_short = int2(s2) * 2;
    float4 sc = static_cast<float4>(i4 * 2);
    long4 l4 = long4(i4) * 100000;
    for (int c = 0; c < 4; ++c) {
      iout[10 * i + c] = i4[c];
      iout[10 * i + 4 + c] = int(u4[c]);
      fout[12 * i + c] = back[c];
      fout[12 * i + 4 + c] = fh[c];
      fout[12 * i + 8 + c] = sc[c];
      lout[4 * i + c] = l4[c];
    }
    iout[10 * i + 8] = from_short.x;
    iout[10 * i + 9] = from_short.y;
  )MSL");
  auto x = random_array({n, 4}, float32, -100, 100, 261, Device::cpu());
  auto xv = x.to_doubles();
  auto hv = round_to(float16, xv);
  std::vector<double> ri, rf, rl;
  for (int64_t i = 0; i < n; ++i) {
    const double* p = &xv[4 * i];
    for (int c = 0; c < 4; ++c) ri.push_back(std::trunc(p[c]));
    for (int c = 0; c < 4; ++c) ri.push_back(std::trunc(std::fabs(p[c])));
    ri.push_back(2 * std::trunc(p[0]));
    ri.push_back(2 * std::trunc(p[1]));
    for (int c = 0; c < 4; ++c) rf.push_back(std::trunc(p[c]));
    for (int c = 0; c < 4; ++c) rf.push_back(hv[4 * i + c]);
    for (int c = 0; c < 4; ++c) rf.push_back(2 * std::trunc(p[c]));
    for (int c = 0; c < 4; ++c) rl.push_back(std::trunc(p[c]) * 100000);
  }
  run_kernel(k, {x},
             make_call({{n, 10}, {n, 12}, {n, 4}}, {int32, float32, int64}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) {
               expect_table(o[0], ri,
                            {"int4.x", "int4.y", "int4.z", "int4.w", "uint4.x", "uint4.y",
                             "uint4.z", "uint4.w", "short2.x", "short2.y"},
                            0, 0);
               expect_table(o[1], rf,
                            {"float4(int4).x", ".y", ".z", ".w", "half4.x", ".y", ".z", ".w",
                             "static_cast.x", ".y", ".z", ".w"},
                            0, 0);
               expect_equal(o[2], rl);
             });
}

// A swizzle of a swizzle (`v.zw.yx`): the inner swizzle is an rvalue vector.
TEST(ConformanceVectors, SwizzleOfSwizzle) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("vec_swizzle_of_swizzle", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    const device float* p = x + 4 * i;
    float4 v = float4(p[0], p[1], p[2], p[3]);
    float2 ss = v.zw.yx;
    float3 t = v.wzyx.xyz.zyx;
    out[5 * i + 0] = ss.x;
    out[5 * i + 1] = ss.y;
    out[5 * i + 2] = t.x;
    out[5 * i + 3] = t.y;
    out[5 * i + 4] = t.z;
  )MSL");
  auto x = grid_array({n, 4}, -1, 1, 205);
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    const double* v = &xv[4 * i];
    ref.insert(ref.end(), {v[3], v[2], v[1], v[2], v[3]});
  }
  run_kernel(k, {x}, make_call({{n, 5}}, {float32}, {n, 1, 1}, {32, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref, {"zw.yx.x", "zw.yx.y", "wzyx.xyz.zyx.x", ".y", ".z"}, 0, 0);
  });
}

// Converting constructors take swizzles too: short2(i4.xy), float3(i4.xyz), half4(f.wzyx).
TEST(ConformanceVectors, ConvertingConstructorFromSwizzle) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("vec_convert_swizzle", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    const device float* p = x + 4 * i;
    float4 f = float4(p[0], p[1], p[2], p[3]);
    int4 i4 = int4(f);
    short2 s2 = short2(i4.xy);
    float3 f3 = float3(i4.wzy);
    half4 h4 = half4(f.wzyx);
    out[6 * i + 0] = float(s2.x);
    out[6 * i + 1] = float(s2.y);
    out[6 * i + 2] = f3.x;
    out[6 * i + 3] = f3.z;
    out[6 * i + 4] = float(h4.x);
    out[6 * i + 5] = float(h4.w);
  )MSL");
  auto x = grid_array({n, 4}, -100, 100, 262);
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    const double* p = &xv[4 * i];
    auto h = round_to(float16, {p[3], p[0]});
    ref.insert(ref.end(), {std::trunc(p[0]), std::trunc(p[1]), std::trunc(p[3]), std::trunc(p[1]),
                           h[0], h[1]});
  }
  run_kernel(k, {x}, make_call({{n, 6}}, {float32}, {n, 1, 1}, {32, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"short2(i4.xy).x", ".y", "float3(i4.wzy).x", ".z", "half4(f.wzyx).x", ".w"}, 0,
                 0);
  });
}

// Element-wise math on vectors and the geometric functions.
TEST(ConformanceVectors, VectorMathAndGeometric) {
  constexpr int64_t n = 64, K = 26;
  auto k = metal_kernel("vec_math_geometric", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    const device float* p = x + 8 * i;
    float3 a = float3(p[0], p[1], p[2]);
    float3 b = float3(p[3], p[4], p[5]);
    float4 c = float4(p[0], p[2], p[4], p[6]);
    device float* o = out + i * 26;
    o[0] = dot(a, b);
    o[1] = length(a);
    float3 nrm = normalize(a);
    o[2] = nrm.x; o[3] = nrm.y; o[4] = nrm.z;
    o[5] = distance(a, b);
    float3 cr = cross(a, b);
    o[6] = cr.x; o[7] = cr.y; o[8] = cr.z;
    float4 e = exp(c);
    o[9] = e.x; o[10] = e.y; o[11] = e.z; o[12] = e.w;
    float4 cl = clamp(c, float4(-0.5f), float4(0.5f));
    o[13] = cl.x; o[14] = cl.w;
    float4 mx = mix(c, c.wzyx, float4(0.25f));
    o[15] = mx.x; o[16] = mx.y;
    float4 m = max(c, c.yxwz) + min(c, c.yxwz);
    o[17] = m.x; o[18] = m.z;
    int4 ai = abs(int4(c * 100.0f));
    o[19] = float(ai.x); o[20] = float(ai.w);
    o[21] = dot(c, c.yzwx);
    o[22] = length(c);
    float4 fl = floor(c * 4.0f) + sqrt(fabs(c));
    o[23] = fl.x; o[24] = fl.y;
    o[25] = distance(c.xy, c.zw);
  )MSL");
  auto x = random_array({n, 8}, float32, -1, 1, 271, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    const double* p = &xv[8 * i];
    double a[3] = {p[0], p[1], p[2]}, b[3] = {p[3], p[4], p[5]}, c[4] = {p[0], p[2], p[4], p[6]};
    double la = std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
    double d[3] = {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
    auto mixv = [&](int j, int k2) { return c[j] + (c[k2] - c[j]) * 0.25; };
    double lc = std::sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2] + c[3] * c[3]);
    double row[K] = {a[0] * b[0] + a[1] * b[1] + a[2] * b[2],
                     la,
                     a[0] / la,
                     a[1] / la,
                     a[2] / la,
                     std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]),
                     a[1] * b[2] - a[2] * b[1],
                     a[2] * b[0] - a[0] * b[2],
                     a[0] * b[1] - a[1] * b[0],
                     std::exp(c[0]),
                     std::exp(c[1]),
                     std::exp(c[2]),
                     std::exp(c[3]),
                     std::clamp(c[0], -0.5, 0.5),
                     std::clamp(c[3], -0.5, 0.5),
                     mixv(0, 3),
                     mixv(1, 2),
                     c[0] + c[1],
                     c[2] + c[3],
                     std::fabs(std::trunc(f32(c[0] * 100))),
                     std::fabs(std::trunc(f32(c[3] * 100))),
                     c[0] * c[1] + c[1] * c[2] + c[2] * c[3] + c[3] * c[0],
                     lc,
                     std::floor(f32(c[0] * 4)) + std::sqrt(std::fabs(c[0])),
                     std::floor(f32(c[1] * 4)) + std::sqrt(std::fabs(c[1])),
                     std::hypot(c[0] - c[2], c[1] - c[3])};
    ref.insert(ref.end(), row, row + K);
  }
  run_kernel(k, {x}, make_call({{n, K}}, {float32}, {n, 1, 1}, {32, 1, 1}), [&](auto& o) {
    expect_table(
        o[0], ref,
        {"dot3",         "length3",     "normalize.x", "normalize.y", "normalize.z", "distance3",
         "cross.x",      "cross.y",     "cross.z",     "exp4.x",      "exp4.y",      "exp4.z",
         "exp4.w",       "clamp4.x",    "clamp4.w",    "mix4.x",      "mix4.y",      "max+min.x",
         "max+min.z",    "abs(int4).x", "abs(int4).w", "dot4",        "length4",     "floor+sqrt.x",
         "floor+sqrt.y", "distance2"},
        1e-5, 1e-5);
  });
}

}  // namespace
