// Conformance: constructs of MLX's own `.metal` units (scripts/mlx_units.py) that failed to
// compile unmodified, each in a small library of our own (no MLX code): a conditional nested in
// another one whose condition divides by a template parameter (MLX's steel conv loaders: g++ 12
// stopped with an internal compiler error on the translation), overloaded kernel templates of one
// name whose explicit instantiations each fit one overload (MLX's block_masked_gemm), a
// half/bfloat assigned from a class converting to bool (MLX's masked GEMM), and
// threadgroup arrays past
// CUDA's 48 KiB of static shared memory (MLX's float32 attention with head dimension 256 declares
// 53,760 bytes). CPU run in CI; NVRTC sm_90 compile in CI; the GPU run where there is one.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/library.h"
#include "alloy/translate.h"
#include "backend/cuda/nvrtc.h"
#include "conformance/harness.h"
#include "conformance/library_helpers.h"
#include "kernel/library.h"

namespace {
using namespace conformance;

// A static constant initialised by nested conditionals whose inner condition divides by template
// parameters (as MLX's Conv2DWeightBlockLoader::vec_size), and in a kernel body a conditional
// nested in another whose condition divides by one, mixing half and float.
constexpr const char* kNestedConditionals = R"(#include <metal_stdlib>
using namespace metal;
#define MY_CONST static constant constexpr const
template <typename T, short BN, short BK, short tgp_size>
struct Loader {
  MY_CONST short ROWS = BN;
  MY_CONST short COLS = BK;
  MY_CONST short vec_size =
      (BN == 8) ? 1 : (tgp_size / (ROWS * COLS) >= 8 ? 8 : 4);
  MY_CONST short n_reads = COLS / vec_size;
};
template <typename T, short BN, short BK, short tgp_size>
[[kernel]] void nested(const device T* x [[buffer(0)]], device float* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
  using L = Loader<T, BN, BK, tgp_size>;
  T s = (i % BN == 0) ? x[i] : T(L::vec_size);
  float c = (i < 4) ? x[i] : ((i / BK) % 2 ? x[i] : 0.5f);
  y[i] = float(s) * L::vec_size + c + L::n_reads;
}
#define inst(n, T, bn, bk, tg) \
  template [[host_name(n)]] [[kernel]] decltype(nested<T, bn, bk, tg>) nested<T, bn, bk, tg>;
inst("nested_f_8", float, 8, 16, 128)
inst("nested_h_32", half, 32, 4, 256)
inst("nested_b_4", bfloat, 4, 2, 256)
)";

TEST(ConformanceMlxSuite, NestedConditionalDividingByATemplateParameter) {
  Library lib = compile_library(kNestedConditionals);
  struct Case {
    const char* name;
    Dtype dtype;
    int bn, bk, tg;
  };
  const Case cases[] = {{"nested_f_8", float32, 8, 16, 128},
                        {"nested_h_32", float16, 32, 4, 256},
                        {"nested_b_4", bfloat16, 4, 2, 256}};
  int n = 64;
  auto xv = random_values(n, -3, 3, 21);
  for_each_device([&](Device dev) {
    for (const Case& k : cases) {
      SCOPED_TRACE(k.name);
      int vec = k.bn == 8 ? 1 : (k.tg / (k.bn * k.bk) >= 8 ? 8 : 4);
      int reads = k.bk / vec;
      auto xr = round_to(k.dtype, xv);
      std::vector<double> ref;
      for (int i = 0; i < n; ++i) {
        double s = i % k.bn == 0 ? xr[i] : vec;
        double c = i < 4 ? xr[i] : ((i / k.bk) % 2 ? xr[i] : 0.5);
        ref.push_back(s * vec + c + reads);
      }
      auto x = Array::from_doubles(xv, {n}, k.dtype, dev);
      LibraryCall call;
      call.threads = dims(n);
      call.group_size = dims(32);
      call.device = dev;
      expect_close(lib(k.name, {x, KernelArg::output({n}, float32)}, call)[0], ref);
    }
  });
  expect_cubin(lib);
}

// Two kernel templates named `masked`, with 3 and 2 template parameters (the second has a
// default), each explicitly instantiated: each instantiation is one kernel, of the overload whose
// parameters take its arguments (MLX's steel_gemm_masked.metal; "two kernels are named" before).
constexpr const char* kOverloadedTemplates = R"(#include <metal_stdlib>
using namespace metal;
template <typename T, typename M, int S>
[[kernel]] void masked(const device T* x [[buffer(0)]], const device M* m [[buffer(1)]],
                       device float* y [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = bool(m[i]) ? float(x[i]) * S : -1.0f;
}
template <typename T, int S, bool neg = false>
[[kernel]] void masked(const device T* x [[buffer(0)]], device float* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
  y[i] = float(x[i]) * (neg ? -S : S);
}
template [[host_name("masked_3")]] [[kernel]] decltype(masked<float, bool, 3>) masked<float, bool, 3>;
template [[host_name("plain_2")]] [[kernel]] decltype(masked<float, 2>) masked<float, 2>;
template [[host_name("plain_neg_5")]] [[kernel]] decltype(masked<half, 5, true>) masked<half, 5, true>;
)";

TEST(ConformanceMlxSuite, OverloadedKernelTemplatesOfOneName) {
  Library lib = compile_library(kOverloadedTemplates);
  auto arguments = [&](const char* name) {
    int n = 0;
    for (auto& p : lib.kernel_info(name).params) n += p.takes_argument();
    return n;
  };
  EXPECT_EQ(arguments("masked_3"), 3);
  EXPECT_EQ(arguments("plain_2"), 2);
  int n = 64;
  auto xv = random_values(n, -2, 2, 41);
  std::vector<double> mv;
  for (int i = 0; i < n; ++i) mv.push_back((i * 7) % 3 == 0);
  for_each_device([&](Device dev) {
    auto x = Array::from_doubles(xv, {n}, float32, dev);
    auto xh = Array::from_doubles(xv, {n}, float16, dev);
    auto m = Array::from_doubles(mv, {n}, bool_, dev);
    LibraryCall call;
    call.threads = dims(n);
    call.group_size = dims(32);
    call.device = dev;
    std::vector<double> r3, r2, r5;
    for (int i = 0; i < n; ++i) {
      r3.push_back(mv[i] ? f32(xv[i]) * 3 : -1.0);
      r2.push_back(f32(xv[i]) * 2);
      r5.push_back(round_to(float16, xv[i]) * -5);
    }
    expect_close(lib("masked_3", {x, m, KernelArg::output({n}, float32)}, call)[0], r3);
    expect_close(lib("plain_2", {x, KernelArg::output({n}, float32)}, call)[0], r2);
    expect_close(lib("plain_neg_5", {xh, KernelArg::output({n}, float32)}, call)[0], r5);
  });
  expect_cubin(lib);
}

// A half / bfloat assigned from a class that converts to bool only (MLX's steel_gemm_masked.h:
// `lhs_mask_op.scale = lhs_mask[i]` with the mask type _NoMask, whose conversion operators are
// qualified by address space), as Metal: through the conversion.
TEST(ConformanceMlxSuite, HalfAndBfloatAssignedFromAClassConvertingToBool) {
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
struct NoMask {
  char x;
  constexpr operator bool() thread { return true; }
  constexpr operator bool() const device { return true; }
  constexpr operator bool() const constant { return true; }
};
template <typename T>
struct Scale { T scale; };
template <typename T>
[[kernel]] void k(const device float* x [[buffer(0)]], const device NoMask* m [[buffer(1)]],
                  device float* y [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  Scale<T> s;
  s.scale = T(4);
  if (i % 2 == 0) s.scale = m[0];
  y[i] = float(s.scale) * x[i];
}
template [[host_name("k_half")]] [[kernel]] decltype(k<half>) k<half>;
template [[host_name("k_bfloat")]] [[kernel]] decltype(k<bfloat>) k<bfloat>;
)");
  int n = 32;
  auto xv = random_values(n, -3, 3, 51);
  std::vector<double> ref;
  for (int i = 0; i < n; ++i) ref.push_back(f32(xv[i]) * (i % 2 == 0 ? 1 : 4));
  for_each_device([&](Device dev) {
    auto x = Array::from_doubles(xv, {n}, float32, dev);
    auto m = Array::from_doubles(std::vector<double>(n, 7), {n}, uint8, dev);
    LibraryCall c;
    c.threads = dims(n);
    c.group_size = dims(32);
    c.device = dev;
    for (const char* name : {"k_half", "k_bfloat"})
      expect_close(lib(name, {x, m, KernelArg::output({n}, float32)}, c)[0], ref);
  });
  expect_cubin(lib);
}

// 53,760 bytes of threadgroup arrays in one kernel (33,280 + 20,480, as MLX's float32 steel
// attention with BQ 32, BK 16, BD 256), plus a threadgroup parameter: past CUDA's 48 KiB of static
// shared memory, so the second array lives in dynamic shared memory (prelude/cuda/target.h). Each
// thread reads elements other threads wrote, after a barrier.
constexpr const char* kLargeThreadgroup = R"(#include <metal_stdlib>
using namespace metal;
template <typename T, int N1, int N2>
[[kernel]] void big(const device T* x [[buffer(0)]], device float* y [[buffer(1)]],
                    threadgroup float* p [[threadgroup(0)]],
                    uint lid [[thread_index_in_threadgroup]],
                    uint gid [[threadgroup_position_in_grid]],
                    uint tpg [[threads_per_threadgroup]]) {
  constexpr int pad = 16 / sizeof(T);
  threadgroup T a[N1 + pad];
  threadgroup float b[N2];
  for (uint j = lid; j < N1; j += tpg) a[j] = x[gid * N1 + j];
  for (uint j = lid; j < N2; j += tpg) b[j] = float((j + gid) % 7);
  p[lid] = float(lid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float s = p[tpg - 1 - lid];
  for (uint j = lid; j < N1; j += tpg) s += 2.0f * float(a[N1 - 1 - j]);
  for (uint j = lid; j < N2; j += tpg) s += b[N2 - 1 - j];
  y[gid * tpg + lid] = s;
}
template [[host_name("big_float")]] [[kernel]] decltype(big<float, 8316, 5120>) big<float, 8316, 5120>;
template [[host_name("small_float")]] [[kernel]] decltype(big<float, 60, 64>) big<float, 60, 64>;
)";

TEST(ConformanceMlxSuite, ThreadgroupArraysPastCudaStaticSharedLimit) {
  Library lib = compile_library(kLargeThreadgroup);
  int tpg = 128, groups = 3;
  // Not a structured binding: clang 14 (the sanitizer build) cannot capture one in a lambda.
  for (auto row : {std::tuple{"big_float", 8316, 5120}, {"small_float", 60, 64}}) {
    const char* name = std::get<0>(row);
    int n1 = std::get<1>(row), n2 = std::get<2>(row);
    SCOPED_TRACE(name);
    auto xv = random_values(size_t(n1) * groups, -2, 2, 31);
    std::vector<double> ref;
    for (int g = 0; g < groups; ++g)
      for (int l = 0; l < tpg; ++l) {
        double s = tpg - 1 - l;
        for (int j = l; j < n1; j += tpg) s += 2.0 * f32(xv[size_t(g) * n1 + n1 - 1 - j]);
        for (int j = l; j < n2; j += tpg) s += (n2 - 1 - j + g) % 7;
        ref.push_back(s);
      }
    for_each_device([&](Device dev) {
      auto x = Array::from_doubles(xv, {n1 * groups}, float32, dev);
      LibraryCall call;
      call.threads = dims(tpg * groups);
      call.group_size = dims(tpg);
      call.threadgroup_memory[0] = tpg * sizeof(float);
      call.device = dev;
      expect_close(lib(name, {x, KernelArg::output({tpg * groups}, float32)}, call)[0], ref);
    });
  }
  expect_cubin(lib);
}

// Only a module holding a threadgroup object past 32 KiB defines the marker that makes the
// backend launch it with all the dynamic shared memory the device allows: every module defined it
// once (a non-dependent name in the prelude's template), and a row sum with 128 bytes of
// threadgroup memory ran at one block per multiprocessor (0.15x hand-written CUDA on an H100).
TEST(ConformanceMlxSuite, OnlyLargeThreadgroupModulesAskForAllSharedMemory) {
  if (!cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  auto ptx_of = [](const char* kernel) {
    TranslateOptions o;
    o.target = TranslateTarget::ptx;
    o.kernels = {kernel};
    return translate_library(kLargeThreadgroup, LibraryOptions{}, o);
  };
  EXPECT_EQ(ptx_of("small_float").find("tg_large"), std::string::npos);
  EXPECT_NE(ptx_of("big_float").find("tg_large"), std::string::npos);
}

}  // namespace
