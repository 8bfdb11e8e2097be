// Conformance: declarations in kernel headers and bodies. Program-scope `constant` values,
// device/constant/thread qualifiers and references in helper signatures, templates, constexpr,
// static_assert, the preprocessor (#define/#if/#ifdef/#undef), loop-unroll pragmas, METAL_FUNC /
// inline helpers, structs with constructors, member functions and operators, namespaces, and
// headers that include Metal's own headers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// ---- program scope ---------------------------------------------------------------------------

TEST(ConformanceDeclarations, ProgramScopeConstants) {
  constexpr int64_t n = 200;
  auto k = metal_kernel("decl_program_constants", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    int n = int(threads_per_grid.x);
    float acc = kBias;
    for (int t = 0; t < kTaps; ++t) {
      int j = clamp(int(i) + t - 1, 0, n - 1);
      acc += kWeights[t] * x[j];
    }
    out[i] = acc * kScale + float(kOffsets.y);
  )MSL",
                        R"MSL(
constant float kScale = 0.25f;
constant constexpr int kTaps = 3;
constant float kWeights[3] = {0.25f, 0.5f, 0.25f};
constexpr constant float kBias = 1.5f;
constant int2 kOffsets = int2(-1, 1);
)MSL");
  auto x = random_array({n}, float32, -1, 1, 901, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  double w[3] = {0.25, 0.5, 0.25};
  for (int64_t i = 0; i < n; ++i) {
    double acc = 1.5;
    for (int t = 0; t < 3; ++t) acc += w[t] * xv[std::clamp<int64_t>(i + t - 1, 0, n - 1)];
    ref[i] = acc * 0.25 + 1;
  }
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

// Helpers taking device/constant/thread pointers and references; the scalar input arrives as
// `const constant float&`, the 3-element one as `const constant float*`.
TEST(ConformanceDeclarations, AddressSpaceQualifiersInHelpers) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("decl_address_spaces", {"x", "s", "w"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float acc = 0.0f;
    accumulate(acc, load_scaled(x, i, s));
    float arr[3] = {x[i], 1.0f, 2.0f};
    accumulate(acc, sum3(arr));
    accumulate(acc, first_of(w));
    accumulate(acc, from_ref(x[i]));
    float p = 1.0f, q = 2.0f;
    swap_values(p, q);
    accumulate(acc, p * 10.0f);
    store_to(out[i], acc);
  )MSL",
                        R"MSL(
float load_scaled(const device float* p, uint i, const constant float& s) { return p[i] * s; }
void accumulate(thread float& acc, float v) { acc += v; }
void store_to(device float& dst, float v) { dst = v; }
float sum3(thread const float* a) { return a[0] + a[1] + a[2]; }
float first_of(const constant float* c) { return c[0] + c[2]; }
float from_ref(const device float& r) { return r * 2.0f; }
template <typename T>
void swap_values(thread T& a, thread T& b) {
  T t = a;
  a = b;
  b = t;
}
)MSL");
  auto x = random_array({n}, float32, -1, 1, 911, Device::cpu());
  Array s(7.3f);
  auto w = random_array({3}, float32, -2, 2, 912, Device::cpu());
  auto xv = x.to_doubles(), wv = w.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i)
    ref[i] = xv[i] * f32(7.3) + (xv[i] + 3) + (wv[0] + wv[2]) + 2 * xv[i] + 20;
  run_kernel(k, {x, s, w}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// ---- templates, constexpr, static_assert -------------------------------------------------------

TEST(ConformanceDeclarations, TemplatesConstexprStaticAssert) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("decl_templates", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    static_assert(sizeof(Accumulator<float, 2>) == sizeof(float), "no hidden members");
    Accumulator<float, 2> a{0.0f};
    float vals[kSize];
    load_n<float, kSize>(x + i * kSize, vals);
    for (int k = 0; k < kSize; ++k) a.add(vals[k]);
    constexpr float third = 1.0f / 3.0f;
    out[i] = twice(a.get()) * third + float(twice(int(i))) + dot_n<float, 2>(vals, vals + 2);
  )MSL",
                        R"MSL(
template <typename T, int N>
struct Accumulator {
  T total;
  METAL_FUNC void add(T v) { total += v * T(N); }
  METAL_FUNC T get() const { return total; }
};

template <int N>
constexpr int pow2() { return 1 << N; }
constexpr constant int kSize = pow2<3>();
static_assert(kSize == 8, "pow2<3>() is 8");

template <typename T>
T twice(T v) { return v + v; }
template <>
inline int twice<int>(int v) { return v * 2 + 1; }

template <typename T, int N>
METAL_FUNC void load_n(const device T* src, thread T* dst) {
  for (int k = 0; k < N; ++k) dst[k] = src[k];
}
template <typename T, int N>
METAL_FUNC T dot_n(thread const T* a, thread const T* b) {
  T s = T(0);
  for (int k = 0; k < N; ++k) s += a[k] * b[k];
  return s;
}
)MSL");
  auto x = random_array({n, 8}, float32, -1, 1, 921, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    const double* v = &xv[8 * i];
    double sum = 0;
    for (int k = 0; k < 8; ++k) sum += v[k];
    ref[i] = 4 * sum * f32(1.0 / 3.0) + double(2 * i + 1) + v[0] * v[2] + v[1] * v[3];
  }
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// ---- preprocessor and pragmas ----------------------------------------------------------------

TEST(ConformanceDeclarations, PreprocessorDefineIf) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("decl_preprocessor", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float acc = 0.0f;
    for (int k = 0; k < TILE; ++k) acc += SQUARE(x[i * TILE + k]);
#if TILE == 4
    acc *= FACTOR;
#else
    acc = -1.0f;
#endif
#undef SQUARE
#ifdef SQUARE
    acc = -2.0f;
#endif
    out[i] = acc + float(kTileCheck);
  )MSL",
                        R"MSL(
#define TILE 4
#define SQUARE(v) ((v) * (v))
#if TILE > 2
#define FACTOR 3.0f
#else
#define FACTOR -1.0f
#endif
#ifdef ALLOY_TEST_UNDEFINED_THING
#error "must not be defined"
#endif
#if defined(TILE) && (TILE == 4)
constant int kTileCheck = 1;
#elif TILE == 5
constant int kTileCheck = 2;
#else
constant int kTileCheck = 3;
#endif
)MSL");
  auto x = random_array({n, 4}, float32, -1, 1, 931, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    double acc = 0;
    for (int k = 0; k < 4; ++k) acc += xv[4 * i + k] * xv[4 * i + k];
    ref[i] = acc * 3 + 1;
  }
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

TEST(ConformanceDeclarations, UnrollPragmas) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("decl_unroll", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) acc += x[i * 10 + k];
#pragma unroll 2
    for (int k = 4; k < 6; ++k) acc += 2.0f * x[i * 10 + k];
#pragma clang loop unroll(full)
    for (int k = 6; k < 8; ++k) acc += 3.0f * x[i * 10 + k];
    UNROLL_FULL
    for (int k = 8; k < 10; ++k) acc += 4.0f * x[i * 10 + k];
    out[i] = acc;
  )MSL",
                        R"MSL(
#define UNROLL_FULL _Pragma("clang loop unroll(full)")
)MSL");
  auto x = random_array({n, 10}, float32, -1, 1, 941, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  double w[10] = {1, 1, 1, 1, 2, 2, 3, 3, 4, 4};
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 10; ++k) ref[i] += w[k] * xv[10 * i + k];
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// ---- functions, structs, namespaces, includes ---------------------------------------------------

TEST(ConformanceDeclarations, MetalFuncInlineAndNamespaces) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("decl_metal_func", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[i] = helpers::f3(f2(f1(x[i]))) + helpers::kOffset;
  )MSL",
                        R"MSL(
METAL_FUNC float f1(float v) { return v * 2.0f; }
inline float f2(float v) { return v + 1.0f; }
namespace helpers {
static inline float f3(float v) { return v - 0.5f; }
constant constexpr float kOffset = 0.125f;
}  // namespace helpers
)MSL");
  auto x = random_array({n}, float32, -1, 1, 951, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = xv[i] * 2 + 1 - 0.5 + 0.125;
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

TEST(ConformanceDeclarations, StructsWithMemberFunctions) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("decl_structs", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    Stats a = Stats::of(x + i * 8, 4);
    Stats b = Stats::of(x + i * 8 + 4, 4);
    Stats c = a + b;
    Scaled<float> sc{2.0f};
    out[2 * i] = sc.apply(c.mean());
    out[2 * i + 1] = c.var();
  )MSL",
                        R"MSL(
struct Stats {
  float sum;
  float sq;
  int count;
  Stats() : sum(0.0f), sq(0.0f), count(0) {}
  METAL_FUNC void push(float v) {
    sum += v;
    sq += v * v;
    count++;
  }
  METAL_FUNC float mean() const { return sum / float(count); }
  METAL_FUNC float var() const {
    float m = mean();
    return sq / float(count) - m * m;
  }
  static METAL_FUNC Stats of(const device float* p, int n) {
    Stats s;
    for (int k = 0; k < n; ++k) s.push(p[k]);
    return s;
  }
  Stats operator+(const thread Stats& o) const {
    Stats r;
    r.sum = sum + o.sum;
    r.sq = sq + o.sq;
    r.count = count + o.count;
    return r;
  }
};

template <typename T>
struct Scaled {
  T k;
  METAL_FUNC T apply(T v) const { return v * k; }
};
)MSL");
  auto x = random_array({n, 8}, float32, -1, 1, 961, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0, sq = 0;
    for (int k = 0; k < 8; ++k) {
      s += xv[8 * i + k];
      sq += xv[8 * i + k] * xv[8 * i + k];
    }
    ref.push_back(2 * s / 8);
    ref.push_back(sq / 8 - (s / 8) * (s / 8));
  }
  run_kernel(k, {x}, make_call({{n, 2}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// Headers commonly start with Metal's own includes and `using namespace metal;`.
TEST(ConformanceDeclarations, HeaderIncludesMetalHeaders) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("decl_includes", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[i] = scaled_exp(x[i]) + simd_sum(1.0f);
  )MSL",
                        R"MSL(
#include <metal_stdlib>
#include <metal_simdgroup>
#include <metal_atomic>
#include <metal_math>
using namespace metal;

inline float scaled_exp(float v) { return metal::exp(v) * 0.5f; }
)MSL");
  auto x = random_array({n}, float32, -1, 1, 971, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = std::exp(xv[i]) * 0.5 + 32;
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

}  // namespace
