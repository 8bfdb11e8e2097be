// Conformance: the Metal features the MLX kernel-library suite (python/tests/test_mlx_library.py)
// found missing, each in a small library of our own: kernel parameters that exist only when a
// function constant is true (`[[buffer(2), function_constant(has_bias)]]`, MLX's gemv, sdpa and
// steel GEMM/attention kernels), function constants declared through a qualifier macro (MLX's
// `STEEL_CONST bool inv_ [[function_constant(0)]];`), explicit instantiations written with the
// full parameter list and its attributes (MLX's scan.metal), a mixed half/float `?:` inside a
// macro argument (MLX's fft.h), metal::remove_addrspace_t, a source's own metal::void_t /
// make_void (MLX's steel/utils/type_traits.h), and constexpr __builtin_ctz (MLX's fft.h and
// hadamard.h). CPU run in CI; NVRTC sm_90 compile in CI.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/library.h"
#include "conformance/harness.h"
#include "conformance/library_helpers.h"
#include "kernel/library.h"

namespace {
using namespace conformance;

constexpr const char* kConditionalParams = R"(#include <metal_stdlib>
using namespace metal;
constant bool has_bias [[function_constant(0)]];
constant bool has_scale [[function_constant(1)]];
[[kernel]] void axpb(
    const device float* x [[buffer(0)]],
    device float* y [[buffer(1)]],
    const device float* bias [[buffer(2), function_constant(has_bias)]],
    const constant float& scale
    [[buffer(3), function_constant(has_scale)]],
    uint i [[thread_position_in_grid]]) {
  float v = x[i];
  if (has_scale) v *= scale;
  if (has_bias) v += bias[i];
  y[i] = v;
}
)";

// A parameter with function_constant(c) exists when c is true (and takes an argument); without
// c (false or not given) it is not a parameter: the kernel takes one argument less.
TEST(ConformanceMlxSuite, ParametersThatExistOnlyWithTheirFunctionConstant) {
  int n = 64;
  auto xv = random_values(n, -2, 2, 11), bv = random_values(n, -1, 1, 12);
  for (int variant = 0; variant < 3; ++variant) {
    LibraryOptions o;
    if (variant == 1) {
      o.function_constants[0] = true;
      o.function_constants[1] = true;
    }
    if (variant == 2) o.function_constants[0] = false;  // has_scale not given: undefined
    Library lib = compile_library(kConditionalParams, o);
    const auto& info = lib.kernel_info("axpb");
    int args = 0;
    for (auto& p : info.params) args += p.takes_argument();
    EXPECT_EQ(args, variant == 1 ? 4 : 2) << info.signature();
    for_each_device([&](Device dev) {
      auto x = Array::from_doubles(xv, {n}, float32, dev);
      auto b = Array::from_doubles(bv, {n}, float32, dev);
      LibraryCall c;
      c.threads = dims(n);
      c.group_size = dims(32);
      c.device = dev;
      std::vector<KernelArg> a = {x, KernelArg::output({n}, float32)};
      if (variant == 1) {
        a.push_back(b);
        a.push_back(1.5f);
      }
      auto y = lib("axpb", a, c)[0];
      std::vector<double> ref;
      for (int i = 0; i < n; ++i)
        ref.push_back(variant == 1 ? f32(f32(f32(xv[i]) * 1.5) + f32(bv[i])) : f32(xv[i]));
      expect_close(y, ref);
    });
    expect_cubin(lib);
  }
}

// `STEEL_CONST bool b [[function_constant(n)]];` with STEEL_CONST a macro of qualifiers; a
// source's own metal::make_void / void_t (Metal's library has none); remove_addrspace_t;
// __builtin_ctz in a constant expression.
TEST(ConformanceMlxSuite, QualifierMacrosTraitsAndBuiltins) {
  LibraryOptions o;
  o.function_constants[0] = true;
  o.function_constants[1] = 3;
  Library lib = compile_library(R"(#include <metal_stdlib>
#define MY_CONST static constant constexpr const
MY_CONST bool flip [[function_constant(0)]];
MY_CONST int shift [[function_constant(1)]];
namespace metal {
template <typename... Ts>
struct make_void { typedef void type; };
template <typename... Ts>
using void_t = typename make_void<Ts...>::type;
}
using namespace metal;
template <class T, class = void> struct has_value_type : bool_constant<false> {};
template <class T> struct has_value_type<T, void_t<typename T::value_type>> : bool_constant<true> {};
struct WithType { using value_type = float; };
template <int N> struct Log2 { static constexpr constant int value = __builtin_ctz(N); };
[[kernel]] void k(const device int* x [[buffer(0)]], device int* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  constexpr auto c = Log2<64>::value;  // 6
  using r_t = metal::remove_cv_t<metal::remove_addrspace_t<decltype(c)>>;
  r_t v = x[i] << shift;
  v += c + (has_value_type<WithType>::value ? 100 : 0) + (has_value_type<int>::value ? 1000 : 0);
  y[i] = flip ? -v : v;
}
)",
                                o);
  int n = 40;
  auto xv = random_values(n, -50, 50, 13);
  for (auto& v : xv) v = std::round(v);
  std::vector<double> ref;
  for (double v : xv) ref.push_back(-(v * 8 + 6 + 100));
  for_each_device([&](Device dev) {
    auto x = Array::from_doubles(xv, {n}, int32, dev);
    LibraryCall c;
    c.threads = dims(n);
    c.group_size = dims(8);
    c.device = dev;
    expect_equal(lib("k", {x, KernelArg::output({n}, int32)}, c)[0], ref);
  });
  expect_cubin(lib);
}

// Explicit instantiations with the full parameter list (each parameter with its attributes), as
// MLX's scan.metal writes them; a ?: mixing half and float inside a macro's argument.
TEST(ConformanceMlxSuite, FullParameterListInstantiationsAndConditionalsInMacroArguments) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
#define PICK(out, v) out = v;
template <typename T, int N, bool neg>
[[kernel]] void scale(const device T* in [[buffer(0)]], device float* out [[buffer(1)]],
                      const constant int& n [[buffer(2)]],
                      uint i [[thread_position_in_grid]]) {
  if (int(i) >= n) return;
  T h = in[i];
  PICK(out[i], (neg ? h : -1.5f) * N)
}
template [[host_name("scale_half_neg")]] [[kernel]] void
scale<half, 3, true>(
    const device half* in [[buffer(0)]],
    device float* out [[buffer(1)]],
    const constant int& n [[buffer(2)]],
    uint i [[thread_position_in_grid]]);
template [[host_name("scale_float_pos")]] [[kernel]] void scale<float, 2, false>(
    const device float* in [[buffer(0)]], device float* out [[buffer(1)]],
    const constant int& n [[buffer(2)]], uint i [[thread_position_in_grid]]);
template <int N> struct Params { int scale[N]; };
template <typename T, int N>
[[kernel]] void unfold(const device T* in [[buffer(0)]], device float* out [[buffer(1)]],
                       const constant Params<N>* p [[buffer(2)]],
                       uint i [[thread_position_in_grid]]) {
  out[i] = float(in[i]) * p->scale[N - 1];
}
// No template arguments written: they are deduced from the parameter types (MLX's conv.metal).
template [[host_name("unfold_half_2")]] [[kernel]] void unfold(
    const device half* in [[buffer(0)]], device float* out [[buffer(1)]],
    const constant Params<2>* p [[buffer(2)]], uint i [[thread_position_in_grid]]);
)");
  ASSERT_EQ(lib.kernel_names(),
            (std::vector<std::string>{"scale_half_neg", "scale_float_pos", "unfold_half_2"}));
  EXPECT_EQ(lib.kernel_info("unfold_half_2").function, "unfold<half, 2>");
  int n = 48;
  auto xv = random_values(n, -4, 4, 14);
  for_each_device([&](Device dev) {
    LibraryCall c;
    c.threads = dims(n);
    c.group_size = dims(16);
    c.device = dev;
    auto xh = Array::from_doubles(xv, {n}, float16, dev);
    auto y = lib("scale_half_neg", {xh, KernelArg::output({n}, float32), n}, c)[0];
    std::vector<double> ref;
    for (double v : xv) ref.push_back(round_to(float16, v) * 3);
    expect_close(y, ref);
    auto xf = Array::from_doubles(xv, {n}, float32, dev);
    y = lib("scale_float_pos", {xf, KernelArg::output({n}, float32), n}, c)[0];
    expect_close(y, std::vector<double>(n, -3.0));
    auto p = Array::from_doubles({5, 7}, {2}, int32, dev);
    y = lib("unfold_half_2", {xh, KernelArg::output({n}, float32), p}, c)[0];
    std::vector<double> ref7;
    for (double v : xv) ref7.push_back(round_to(float16, v) * 7);
    expect_close(y, ref7);
  });
  expect_cubin(lib);
}

// half(x) / bfloat(x) of a class that converts to bool only (MLX's _NoMask in gemv_masked.h,
// whose conversion operators are qualified by address space): through the conversion, as Metal.
TEST(ConformanceMlxSuite, HalfAndBfloatFromAClassConvertingToBool) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
struct NoMask {
  char x;
  constexpr operator bool() thread { return true; }
  constexpr operator bool() const device { return true; }
  constexpr operator bool() const constant { return true; }
};
template <typename T>
[[kernel]] void k(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  NoMask m;
  T s = T(m);
  y[i] = float(s) * x[i] + float(static_cast<T>(m));
}
template [[host_name("k_half")]] [[kernel]] decltype(k<half>) k<half>;
template [[host_name("k_bfloat")]] [[kernel]] decltype(k<bfloat>) k<bfloat>;
)");
  int n = 32;
  auto xv = random_values(n, -3, 3, 15);
  std::vector<double> ref;
  for (double v : xv) ref.push_back(f32(f32(v) + 1.0));
  for_each_device([&](Device dev) {
    auto x = Array::from_doubles(xv, {n}, float32, dev);
    LibraryCall c;
    c.threads = dims(n);
    c.group_size = dims(32);
    c.device = dev;
    for (const char* name : {"k_half", "k_bfloat"})
      expect_close(lib(name, {x, KernelArg::output({n}, float32)}, c)[0], ref);
  });
  expect_cubin(lib);
}

// PrecompileOptions::kernels compiles only the kernels named; an unknown name is an error.
TEST(ConformanceMlxSuite, PrecompileOnlyTheKernelsNamed) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
kernel void a(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 1; }
kernel void b(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 2; }
)");
  PrecompileOptions o;
  o.device = Device::cpu();
  o.kernels = {"b"};
  lib.precompile(o);
  EXPECT_EQ(kernel::library_stats(lib).kernels, 1u);
  o.kernels = {"nope"};
  EXPECT_THROW(lib.precompile(o), std::invalid_argument);
}

}  // namespace
