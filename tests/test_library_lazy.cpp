// First-call latency of libraries (issue "First-call latency", items 3 and 4): a library with
// thousands of instantiations compiles only the kernel that is called; reflection and argument
// errors compile nothing; precompile() compiles everything, in parallel units, in the foreground
// or the background; a kernel (library or metal_kernel) that several threads need at once is
// compiled once; metal_kernel calls start their compiles at the call (20 called then evaluated
// together compile once each), and compile errors still surface at the evaluation. The libraries
// are generated here (no network). MLX's own copy.metal is used when $ALLOY_MLX_KERNELS points at
// MLX's kernels folder (mlx/backend/metal/kernels of an MLX source tree, with its headers reachable
// from ALLOY_MLX_INCLUDE, default three folders up).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/library.h"
#include "backend/cpu/jit.h"
#include "conformance/harness.h"
#include "kernel/compile_pool.h"
#include "kernel/library.h"

using namespace alloy;
using conformance::expect_close;
using conformance::random_values;

namespace {

// Distinguishes this run's sources from earlier runs' (the disk cache would otherwise hold them,
// and a test that counts compiles would count none).
std::string nonce() {
  static const std::string n = [] {
    std::random_device rd;
    return std::to_string(rd()) + std::to_string(rd());
  }();
  return n;
}

const char* const kTypes[][2] = {{"float", "float"},   {"half", "half"},  {"bfloat", "bfloat"},
                                 {"int", "int"},       {"uint", "uint"},  {"short", "short"},
                                 {"ushort", "ushort"}, {"uchar", "uchar"}};

// A library shaped like MLX's copy.metal: a few kernel templates over (input type, output type,
// constant), instantiated through MLX-style macros: 8 x 8 x `per_pair` `affine` kernels and 64
// `gather` kernels. `tag` goes into a program-scope constant (a distinct source per tag).
std::string generated_library(int per_pair, const std::string& tag) {
  std::ostringstream s;
  s << R"(#include <metal_stdlib>
using namespace metal;
constant int generated_tag = )"
    << std::hash<std::string>()(tag) % 1000000 << R"(;

template <typename T>
METAL_FUNC float to_float(T x) { return static_cast<float>(x); }

template <typename T, typename U, int N>
[[kernel]] void affine(device const T* x [[buffer(0)]], device U* y [[buffer(1)]],
                       constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = static_cast<U>(to_float(x[i]) * a + float(N) + float(generated_tag - generated_tag));
}

template <typename T, typename U>
[[kernel]] void gather(device const T* x [[buffer(0)]], device U* y [[buffer(1)]],
                       constant int& stride [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = static_cast<U>(x[i * stride]);
}

#define instantiate_kernel(name, func, ...) \
  template [[host_name(name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;
)";
  for (auto& in : kTypes)
    for (auto& out : kTypes) {
      for (int n = 0; n < per_pair; ++n)
        s << "instantiate_kernel(\"affine_" << in[0] << "_" << out[0] << "_" << n << "\", affine, "
          << in[1] << ", " << out[1] << ", " << n << ")\n";
      s << "instantiate_kernel(\"gather_" << in[0] << "_" << out[0] << "\", gather, " << in[1]
        << ", " << out[1] << ")\n";
    }
  return s.str();
}

PrecompileOptions on_cpu(bool background = false) {
  PrecompileOptions o;
  o.device = Device::cpu();
  o.background = background;
  return o;
}

// Compiler runs of calls (a tiered compile's background full tier, of these or of earlier
// tests' kernels, is not one).
uint64_t compiler_runs() {
  auto c = cpu::Jit::global().counters();
  return c.with_pch + c.without_pch - c.background;
}

LibraryCall cpu_call(int n) {
  LibraryCall c;
  c.threads = Dims{n, 1, 1};
  c.group_size = Dims{32, 1, 1};
  c.device = Device::cpu();
  return c;
}

// Runs affine_float_float_<k> (y = x * a + k) on the CPU and checks it.
void check_affine_float(const Library& lib, int k) {
  const int n = 100;
  auto xs = random_values(n, -3, 3, 7 + k);
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  Array y = lib("affine_float_float_" + std::to_string(k),
                {x, KernelArg::output({n}, float32), 1.5f}, cpu_call(n))[0];
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = xs[i] * 1.5 + k;
  expect_close(y, want);
}

TEST(LibraryLazy, ReflectionAndArgumentErrorsCompileNothing) {
  Library lib = compile_library(generated_library(32, "reflect-" + nonce()));
  EXPECT_EQ(lib.kernel_names().size(), 8u * 8u * 33u);  // 2112 kernels
  const KernelInfo& info = lib.kernel_info("affine_half_uchar_31");
  ASSERT_EQ(info.params.size(), 4u);
  EXPECT_EQ(info.params[0].dtype, float16);
  EXPECT_EQ(info.params[1].dtype, uint8);
  EXPECT_TRUE(info.params[1].writable);
  EXPECT_EQ(info.function, "affine<half, uchar, 31>");
  uint64_t runs = compiler_runs();
  Array x = Array::from_doubles({1, 2, 3}, {3}, float32, Device::cpu());
  // Wrong dtype, wrong count, a number out of range: all found without compiling.
  EXPECT_THROW(lib("affine_half_uchar_31", {x, KernelArg::output({3}, uint8), 1.0f}),
               std::invalid_argument);
  EXPECT_THROW(lib("affine_float_float_0", {x}), std::invalid_argument);
  EXPECT_THROW(lib("gather_float_float", {x, KernelArg::output({3}, float32), 1.5}),
               std::invalid_argument);
  EXPECT_EQ(kernel::library_stats(lib).units, 0u);
  EXPECT_EQ(compiler_runs(), runs);
}

TEST(LibraryLazy, FirstCallCompilesOnlyThatKernel) {
  Library lib = compile_library(generated_library(32, "first-" + nonce()));
  uint64_t runs = compiler_runs();
  check_affine_float(lib, 5);
  auto st = kernel::library_stats(lib);
  EXPECT_EQ(st.units, 1u);
  EXPECT_EQ(st.kernels, 1u);
  EXPECT_EQ(compiler_runs(), runs + 1);
  // Another kernel: one more unit of one kernel; the first is not compiled again.
  check_affine_float(lib, 6);
  check_affine_float(lib, 5);
  st = kernel::library_stats(lib);
  EXPECT_EQ(st.units, 2u);
  EXPECT_EQ(st.kernels, 2u);
  // A kernel with other types and its own output dtype.
  const int n = 64;
  auto xs = random_values(n, 0, 100, 3);
  Array x = Array::from_doubles(xs, {n}, float16, Device::cpu());
  Array y = lib("affine_half_int_3", {x, KernelArg::output({n}, int32), 2.0f}, cpu_call(n))[0];
  auto xh = x.to_doubles();  // the float16 values
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = std::trunc(xh[i] * 2.0 + 3);
  conformance::expect_equal(y, want);
}

TEST(LibraryLazy, SingleKernelCompilesWithNvrtc) {
  Library lib = compile_library(generated_library(32, "nvrtc-" + nonce()));
  std::string why = kernel::compile_library_cubin(lib, "sm_90", {}, {"affine_bfloat_half_17"});
  if (!why.empty()) GTEST_SKIP() << why;
  EXPECT_THROW(kernel::compile_library_cubin(lib, "sm_90", {}, {"no_such_kernel"}),
               std::invalid_argument);
}

constexpr const char* kSmallLibrary = R"(
constant int tag = TAG;
kernel void add_one(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) { y[i] = x[i] + 1.0f + float(tag - tag); }
kernel void twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) { y[i] = 2.0f * x[i]; }
kernel void square(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) { y[i] = x[i] * x[i]; }
kernel void negate(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) { y[i] = -x[i]; }
kernel void broken(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) { y[i] = no_such_function(x[i]); }
)";

std::string small_library(const std::string& tag) {
  std::string s = kSmallLibrary;
  s.replace(s.find("TAG"), 3, std::to_string(std::hash<std::string>()(tag) % 1000000));
  return s;
}

void check_small(const Library& lib) {
  const int n = 40;
  auto xs = random_values(n, -2, 2, 11);
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  auto run = [&](const char* name) {
    return lib(name, {x, KernelArg::output({n}, float32)}, cpu_call(n))[0];
  };
  std::vector<double> a(n), t(n), q(n), m(n);
  for (int i = 0; i < n; ++i) {
    a[i] = xs[i] + 1;
    t[i] = 2 * xs[i];
    q[i] = xs[i] * xs[i];
    m[i] = -xs[i];
  }
  expect_close(run("add_one"), a);
  expect_close(run("twice"), t);
  expect_close(run("square"), q);
  expect_close(run("negate"), m);
}

TEST(LibraryLazy, PrecompileCompilesEverythingInParallelUnits) {
  LibraryOptions o;
  o.references["broken"] = [](const std::vector<Array>& a) { return std::vector<Array>{a[0]}; };
  Library lib = compile_library(small_library("pre-" + nonce()), o);
  check_small(lib);  // four units of one kernel
  EXPECT_EQ(kernel::library_stats(lib).units, 4u);
  lib.precompile(on_cpu());  // only `broken` is left: one unit
  auto st = kernel::library_stats(lib);
  EXPECT_EQ(st.units, 5u);
  EXPECT_EQ(st.kernels, 5u);

  // A fresh library: precompile first, then the calls compile nothing.
  Library fresh = compile_library(small_library("pre2-" + nonce()), o);
  fresh.precompile(on_cpu());
  st = kernel::library_stats(fresh);
  EXPECT_EQ(st.kernels, 5u);
  EXPECT_GE(st.units, 1u);
  EXPECT_LE(st.units, 5u);
  uint64_t runs = compiler_runs();
  check_small(fresh);
  EXPECT_EQ(compiler_runs(), runs);
  EXPECT_EQ(kernel::library_stats(fresh).units, st.units);

  // Without a reference, precompile raises the compile error with the user's line.
  Library plain = compile_library(small_library("pre3-" + nonce()));
  try {
    plain.precompile(on_cpu());
    FAIL() << "expected a compile error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("line 12"), std::string::npos) << e.what();
  }
  check_small(plain);  // the other kernels were compiled and run
}

TEST(LibraryLazy, BackgroundPrecompileThenCalls) {
  LibraryOptions o;
  o.references["broken"] = [](const std::vector<Array>& a) { return std::vector<Array>{a[0]}; };
  Library lib = compile_library(small_library("bg-" + nonce()), o);
  lib.precompile(on_cpu(/*background=*/true));
  check_small(lib);  // waits for (or takes over) the units in flight
  auto st = kernel::library_stats(lib);
  EXPECT_EQ(st.kernels, 5u);
  // The calls compiled nothing of their own.
  EXPECT_LE(st.units, static_cast<uint64_t>(
                          std::max(1, std::min(5, int(std::thread::hardware_concurrency())))));
}

TEST(LibraryLazy, ConcurrentCallersCompileOnce) {
  Library lib = compile_library(generated_library(4, "dedupe-" + nonce()));
  uint64_t runs = compiler_runs();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      const int n = 32;
      auto xs = random_values(n, -1, 1, 5);
      Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
      Array y =
          lib("affine_float_float_2", {x, KernelArg::output({n}, float32), 3.0f}, cpu_call(n))[0];
      auto got = y.to_doubles();
      bool good = true;
      for (int i = 0; i < n; ++i) good &= std::fabs(got[i] - (xs[i] * 3 + 2)) < 1e-4;
      ok += good;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(kernel::library_stats(lib).units, 1u);
  EXPECT_EQ(compiler_runs(), runs + 1);
}

TEST(LibraryLazy, ConcurrentMetalKernelCallersCompileOnce) {
  // The compile cache builds a key once while others wait (CompileCache::get_or_build).
  std::string body =
      "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * 2.0f + 0.25f;  // " + nonce() + "\n";
  auto k = metal_kernel("dedupe_twice", {"inp"}, {"out"}, body);
  uint64_t runs = compiler_runs();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      const int n = 64;
      auto xs = random_values(n, -1, 1, 9);
      Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
      KernelCall call;
      call.output_shapes = {{n}};
      call.output_dtypes = {float32};
      call.grid = {n, 1, 1};
      call.threadgroup = {32, 1, 1};
      call.device = Device::cpu();
      auto got = k({x}, call)[0].to_doubles();
      bool good = true;
      for (int i = 0; i < n; ++i) good &= std::fabs(got[i] - (xs[i] * 2 + 0.25)) < 1e-5;
      ok += good;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(compiler_runs(), runs + 1);
}

// ---- metal_kernel: compiles start at the call (issue "First-call latency", item 4) ----------

KernelCall metal_call(int n) {
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {n, 1, 1};
  call.threadgroup = {32, 1, 1};
  call.device = Device::cpu();
  return call;
}

// y = x * (k + 1) + 0.5, a source no cache has seen (the nonce and `tag` in a comment).
MetalKernel scaled_kernel(int k, const std::string& tag) {
  return metal_kernel("scaled_" + std::to_string(k), {"inp"}, {"out"},
                      "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * " +
                          std::to_string(k + 1) + ".0f + 0.5f;  // " + tag + " " + nonce() + "\n");
}

// Runs the compiles that earlier tests queued and never evaluated (a pool thread could otherwise
// run one while a test counts compiler runs).
void drain_compile_queue() {
  while (kernel::compile_help()) {
  }
}

// Waits up to two minutes (a loaded machine) for `done`.
template <class Done>
bool eventually(Done done) {
  auto until = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

TEST(LibraryLazy, TwentyMetalKernelsCalledThenEvaluatedCompileOnceEach) {
  const int n = 64, kernels = 20;
  auto xs = random_values(n, -1, 1, 11);
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  drain_compile_queue();
  uint64_t runs = compiler_runs();
  std::vector<MetalKernel> ks;
  std::vector<Array> outs;
  for (int k = 0; k < kernels; ++k) {
    ks.push_back(scaled_kernel(k, "twenty"));
    outs.push_back(ks.back()({x}, metal_call(n))[0]);
  }
  eval(outs);
  auto want = [&](int k) {
    std::vector<double> w(n);
    for (int i = 0; i < n; ++i) w[i] = xs[i] * (k + 1) + 0.5;
    return w;
  };
  for (int k = 0; k < kernels; ++k) expect_close(outs[k], want(k));
  EXPECT_EQ(compiler_runs(), runs + kernels);
  // Called again, and by new kernel objects of the same content: memory hits, nothing compiles.
  for (int k = 0; k < kernels; ++k) {
    expect_close(ks[k]({x}, metal_call(n))[0], want(k));
    expect_close(scaled_kernel(k, "twenty")({x}, metal_call(n))[0], want(k));
  }
  EXPECT_EQ(compiler_runs(), runs + kernels);
}

TEST(LibraryLazy, MetalKernelCompilesStartAtTheCall) {
  // Three calls, no evaluation: the compiles queued together run on the pool's threads (the last
  // one queued may be left to the evaluation, as a compile queued alone is).
  const int n = 32;
  Array x = Array::from_doubles(random_values(n, -1, 1, 12), {n}, float32, Device::cpu());
  drain_compile_queue();
  uint64_t runs = compiler_runs();
  std::vector<Array> outs;
  for (int k = 0; k < 3; ++k) outs.push_back(scaled_kernel(k, "at-call")({x}, metal_call(n))[0]);
  EXPECT_TRUE(eventually([&] { return compiler_runs() >= runs + 2; }))
      << "no compile started before the evaluation";
  eval(outs);
  EXPECT_EQ(compiler_runs(), runs + 3);
}

TEST(LibraryLazy, MetalKernelCompileErrorsSurfaceAtEvaluation) {
  const int n = 32;
  auto xs = random_values(n, -1, 1, 13);
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  auto bad = metal_kernel("broken_on_pool", {"inp"}, {"out"},
                          "uint i = thread_position_in_grid.x;\nout[i] = inp[i] + "
                          "undefined_thing_" +
                              nonce() + ";\n");
  drain_compile_queue();
  uint64_t runs = compiler_runs();
  // The calls succeed; the bad kernel's compile runs on the pool (queued with the good one's).
  Array b, g;
  ASSERT_NO_THROW(b = bad({x}, metal_call(n))[0]);
  ASSERT_NO_THROW(g = scaled_kernel(0, "beside-broken")({x}, metal_call(n))[0]);
  EXPECT_TRUE(eventually([&] { return compiler_runs() >= runs + 1; }));
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = xs[i] + 0.5;
  expect_close(g, want);
  auto expect_compile_error = [&](Array& a) {
    try {
      a.eval();
      ADD_FAILURE() << "expected a CompileError";
    } catch (const CompileError& e) {
      std::string msg = e.what();
      EXPECT_EQ(e.kernel(), "broken_on_pool");
      EXPECT_NE(msg.find("broken_on_pool"), std::string::npos) << msg;
      EXPECT_NE(msg.find("body line 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("out[i] = inp[i] + undefined_thing_"), std::string::npos) << msg;
    }
  };
  expect_compile_error(b);
  // A failed compile is not kept: a new call compiles again and fails the same way.
  uint64_t before = compiler_runs();
  Array again = bad({x}, metal_call(n))[0];
  expect_compile_error(again);
  EXPECT_EQ(compiler_runs(), before + 1);
}

// MLX's copy.metal (about 2,500 kernels), when an MLX source tree is given.
TEST(LibraryLazy, MlxCopyMetalFirstCall) {
  const char* dir = std::getenv("ALLOY_MLX_KERNELS");
  if (!dir || !*dir)
    GTEST_SKIP() << "set ALLOY_MLX_KERNELS to MLX's mlx/backend/metal/kernels folder";
  namespace fs = std::filesystem;
  fs::path copy = fs::path(dir) / "copy.metal";
  std::ifstream in(copy);
  if (!in) GTEST_SKIP() << "no " << copy;
  std::string src((std::istreambuf_iterator<char>(in)), {});
  const char* inc = std::getenv("ALLOY_MLX_INCLUDE");
  LibraryOptions o;
  o.name = "mlx_copy";
  o.include_dirs = {
      inc && *inc ? std::string(inc)
                  : fs::path(dir).parent_path().parent_path().parent_path().parent_path().string()};
  Library lib = compile_library(src, o);
  EXPECT_GT(lib.kernel_names().size(), 2000u);
  ASSERT_TRUE(lib.has_kernel("v_copyfloat32float32"));
  const int n = 1000;
  auto xs = random_values(n, -5, 5, 1);
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  LibraryCall c = cpu_call(n);
  c.group_size = Dims{256, 1, 1};
  Array y = lib("v_copyfloat32float32",
                {x, KernelArg::output({n}, float32), static_cast<uint32_t>(n)}, c)[0];
  expect_close(y, xs);
  EXPECT_EQ(kernel::library_stats(lib).kernels, 1u);
  std::string why = kernel::compile_library_cubin(lib, "sm_90", {}, {"v_copyfloat32float16"});
  if (!why.empty()) std::printf("NVRTC compile skipped: %s\n", why.c_str());
}

}  // namespace
