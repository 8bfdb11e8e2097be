// Conformance: the Metal that MLX's own kernel library (the mlx-metal headers) is written in, each
// feature in a small library of our own: member functions and overloads qualified by address
// space, array-typed kernel parameters, kernel template parameter lists ending in `>>`, in-class
// explicit specialisations, metal::array, metal::uniform, _disjunction, short vector
// initialisers, a source's own MLX helpers (elem_to_loc, ceildiv, Limits, complex64_t, log1p)
// winning over the prelude's, the __metal_* builtins of bf16_math.h, simd shuffles with ushort
// lanes next to a source's 64-bit overloads, threadgroup arrays with a zero initialiser, and
// `coherent(system)` pointers. CPU run in CI; NVRTC sm_90 compile in CI.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/library.h"
#include "conformance/harness.h"
#include "kernel/library.h"

namespace {
using namespace conformance;

void expect_cubin(const Library& lib) {
  std::string why = kernel::compile_library_cubin(lib, "sm_90");
  if (!why.empty()) std::printf("NVRTC compile skipped: %s\n", why.c_str());
}

// Runs kernel `name` of `lib` on every device over n threads (groups of 32) with float32 input x
// and a float32 output of n * per elements; checks it against ref.
void run_unary(const Library& lib, const std::string& name, const std::vector<double>& xv,
               int64_t per, const std::vector<double>& ref, bool exact = false) {
  int64_t n = static_cast<int64_t>(xv.size());
  for_each_device([&](Device dev) {
    auto x = Array::from_doubles(xv, {n}, float32, dev);
    LibraryCall c;
    c.threads = Dims{static_cast<int>(n), 1, 1};
    c.group_size = Dims{32, 1, 1};
    c.device = dev;
    auto y = lib(name, {x, KernelArg::output({n * per}, float32)}, c)[0];
    if (exact)
      expect_equal(y, ref);
    else
      expect_close(y, ref);
  });
}

TEST(ConformanceMlxLibrary, AddressSpaceQualifiedMembersAndOverloads) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
struct Acc {
  float v;
  Acc() thread : v(1.0f) {}
  Acc() threadgroup : v(1.0f) {}
  Acc(float x) thread : v(x) {}
  Acc(float x) device : v(x) {}
  float twice() const thread { return 2.0f * v; }
  float twice() const device { return 2.0f * v; }
  float twice() const constant { return 2.0f * v; }
};
inline float load(const thread float& x) { return x + 0.5f; }
inline float load(const device float& x) { return x + 0.5f; }
inline float load(const threadgroup float& x) { return x + 0.5f; }
[[kernel]] void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  Acc a(x[i]);
  Acc one;
  float t = x[i];
  y[2 * i] = a.twice() + one.v;
  y[2 * i + 1] = load(x[i]) + load(t);
}
)");
  auto xv = random_values(64, -3, 3, 101);
  std::vector<double> ref;
  for (double v : xv) {
    double f = f32(v);
    ref.push_back(f32(2 * f) + 1);
    ref.push_back(f32(f + 0.5) * 2);
  }
  run_unary(lib, "k", xv, 2, ref);
  expect_cubin(lib);
}

TEST(ConformanceMlxLibrary, ArrayParametersAndTemplateListsEndingInShift) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
template <typename T>
struct Plus {
  T operator()(T a, T b) const { return a + b; }
};
template <typename T, typename Op = Plus<T>>
[[kernel]] void combine(device const T* x [[buffer(0)]], device T* y [[buffer(1)]],
                        constant const int64_t strides[2] [[buffer(2)]],
                        constant const float scale[1] [[buffer(3)]],
                        uint2 pos [[thread_position_in_grid]]) {
  int64_t at = pos.y * strides[0] + pos.x * strides[1];
  y[pos.y * 8 + pos.x] = Op()(x[at], T(scale[0]));
}
template [[host_name("combine_float")]] [[kernel]] decltype(combine<float, Plus<float>>)
    combine<float, Plus<float>>;
)");
  auto xv = random_values(64, -3, 3, 111);
  for_each_device([&](Device dev) {
    auto x = Array::from_doubles(xv, {64}, float32, dev);
    auto strides = Array::from_doubles({1, 8}, {2}, int64, dev);  // a transpose of 8x8
    auto scale = Array::from_doubles({0.25}, {1}, float32, dev);
    LibraryCall c;
    c.threads = Dims{8, 8, 1};
    c.group_size = Dims{8, 8, 1};
    c.device = dev;
    auto y = lib("combine_float", {x, KernelArg::output({64}, float32), strides, scale}, c)[0];
    std::vector<double> ref(64);
    for (int r = 0; r < 8; ++r)
      for (int col = 0; col < 8; ++col) ref[r * 8 + col] = f32(f32(xv[col * 8 + r]) + 0.25);
    expect_equal(y, ref);
  });
  expect_cubin(lib);
}

TEST(ConformanceMlxLibrary, InClassSpecialisationArrayUniformDisjunctionShortVectors) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
struct Halve {
  template <typename T>
  T operator()(T x) thread { return x / T(2); }
  template <>
  float operator()(float x) thread { return x * 0.5f + 100.0f; }
};
template <typename T>
constexpr constant bool is_small = _disjunction<is_same<T, half>, is_same<T, short>>::value;
metal::array<float, 2> pair(float a) { return {a, a * 3.0f}; }
[[kernel]] void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  metal::array<float, 2> p = pair(x[i]);
  const metal::uniform<float> s = make_uniform(2.0f) * make_uniform(x[i]);
  uint4 v = {1u, 2u, 3u};
  y[5 * i] = Halve{}(x[i]);
  y[5 * i + 1] = float(Halve{}(int(8)));
  y[5 * i + 2] = p[0] + p[1] + float(p.size());
  y[5 * i + 3] = float(s) + float(is_small<half>) + 10.0f * float(is_small<float>);
  y[5 * i + 4] = float(v.x + 10 * v.y + 100 * v.z + 1000 * v.w);
}
)");
  auto xv = random_values(64, -3, 3, 121);
  std::vector<double> ref;
  for (double v : xv) {
    double f = f32(v);
    ref.insert(ref.end(), {f32(f * 0.5) + 100, 4, f32(f + f32(f * 3)) + 2, f32(2 * f) + 1, 321});
  }
  run_unary(lib, "k", xv, 5, ref);
  expect_cubin(lib);
}

// MLX's utils.h defines elem_to_loc, ceildiv, Limits, complex64_t, log1p, bfloat16_to_uint16
// itself: a source's own definitions are used, not the prelude's (which would collide).
TEST(ConformanceMlxLibrary, SourceDefinitionsOfMlxHelpersWin) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
template <typename T>
struct complex_t {
  T real, imag;
};
typedef complex_t<float> complex64_t;
template <typename U>
struct Limits {
  static constexpr constant U max = U(7);
};
template <typename T, typename U>
inline T ceildiv(T n, U m) { return (n + m - 1) / m + 1000; }
template <typename IdxT = int64_t>
METAL_FUNC IdxT elem_to_loc(uint elem, constant const int* shape, constant const int64_t* strides,
                            int ndim) {
  return IdxT(elem) * 2;
}
inline float log1p(float x) { return metal::precise::log(1.0f + x) + 50.0f; }
inline bfloat16_t log1p(bfloat16_t x) { return bfloat16_t(log1p(float(x))); }
inline uint16_t bfloat16_to_uint16(const bfloat16_t x) { return as_type<uint16_t>(x) ^ 1; }
[[kernel]] void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  complex64_t z{x[i], 1.0f};
  y[5 * i] = z.real + z.imag + Limits<float>::max;
  y[5 * i + 1] = float(ceildiv(int(i) + 4, 4));
  y[5 * i + 2] = float(elem_to_loc(i, nullptr, nullptr, 1));
  y[5 * i + 3] = log1p(half(0.5f));
  y[5 * i + 4] = float(bfloat16_to_uint16(bfloat16_t(1.0f)));
}
)");
  auto xv = random_values(64, -3, 3, 131);
  std::vector<double> ref;
  for (size_t i = 0; i < xv.size(); ++i) {
    double f = f32(xv[i]);
    ref.insert(ref.end(), {f32(f + 1) + 7, double((int(i) + 4 + 3) / 4 + 1000), double(2 * i),
                           f32(std::log(1.5) + 50), double(0x3F80 ^ 1)});
  }
  run_unary(lib, "k", xv, 5, ref);
  expect_cubin(lib);
}

// bf16_math.h's way of defining bfloat math and simd functions, and utils.h's 64-bit shuffles.
TEST(ConformanceMlxLibrary, MetalBuiltinsAndUshortLanes) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
METAL_FUNC float my_exp(float x) {
  return __metal_exp(static_cast<float>(x), __METAL_MAYBE_FAST_MATH__);
}
METAL_FUNC float my_fma(float x) {
  return __metal_fma(x, 2.0f, 1.0f) + __metal_fmax3(x, 0.0f, -1.0f, __METAL_PRECISE_MATH__);
}
inline uint64_t simd_shuffle_down(uint64_t data, uint16_t delta) {
  return as_type<uint64_t>(metal::simd_shuffle_down(as_type<uint2>(data), delta));
}
[[kernel]] void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  uint64_t big = (uint64_t(i) << 33) | 5u;
  uint delta = 1;
  uint64_t got = simd_shuffle_down(big, delta);
  float s = __metal_simd_sum(x[i]);
  y[4 * i] = my_exp(x[i]);
  y[4 * i + 1] = my_fma(x[i]);
  y[4 * i + 2] = float(got >> 33) + float(__metal_get_simdgroup_size(ushort()));
  y[4 * i + 3] = s;
}
)");
  constexpr int64_t n = 64;
  auto xv = random_values(n, -2, 2, 141);
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    double f = f32(xv[i]);
    double sum = 0;
    for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) sum += f32(xv[j]);
    int64_t src = (i % 32) + 1 < 32 ? i + 1 : i;  // shuffle_down past the last lane: own value
    ref.insert(ref.end(), {std::exp(f), f * 2 + 1 + std::max(f, 0.0), double(src) + 32, sum});
  }
  run_unary(lib, "k", xv, 4, ref);
  expect_cubin(lib);
}

TEST(ConformanceMlxLibrary, ZeroInitialisedThreadgroupArrayAndCoherentPointers) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
[[kernel]] void k(volatile coherent(system) device const float* x [[buffer(0)]],
                  device float* y [[buffer(1)]], uint i [[thread_position_in_grid]],
                  uint lid [[thread_index_in_threadgroup]]) {
  threadgroup float buf[32] = {0};
  buf[lid] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = buf[31 - lid];
}
)");
  auto xv = random_values(64, -2, 2, 151);
  std::vector<double> ref(64);
  for (int i = 0; i < 64; ++i) ref[i] = f32(xv[i / 32 * 32 + 31 - i % 32]);
  run_unary(lib, "k", xv, 1, ref, true);
  expect_cubin(lib);
}

}  // namespace
