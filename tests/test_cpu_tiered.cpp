// The CPU backend's tiered compile (docs/cpu-backend.md, "Tiered compile"): a kernel's first call
// runs a quick tier (-Og) while the full tier (-O2) compiles on the compile pool, then switches to
// it. Both tiers must give the reference's results, in loop and fiber mode, with faults reported
// either way; ALLOY_CPU_TIERED=0 compiles once; a full library already cached is used at once;
// the cache key covers the tier.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "alloy/alloy.h"
#include "backend/cpu/backend.h"
#include "backend/cpu/jit.h"
#include "conformance/harness.h"
#include "kernel/compile_pool.h"
#include "scoped_env.h"

namespace {

using namespace alloy;

// ALLOY_CPU_TIERED for a scope (null: unset, which means on).
struct TieredEnv : alloy::testing::ScopedEnv {
  explicit TieredEnv(const char* value) : ScopedEnv("ALLOY_CPU_TIERED", value) {}
};

// A source no cache has seen (the tiers are only used for a kernel compiled for the first time).
std::string fresh(const std::string& body) {
  static const std::string nonce = [] {
    std::random_device rd;
    return std::to_string(rd()) + std::to_string(rd());
  }();
  static int counter = 0;
  return body + "\n// tiered test " + nonce + " " + std::to_string(++counter) + "\n";
}

// The counters are the process's: one process may run many tests (a sharded run), whose kernels'
// background full compiles must be done before a test counts its own.
class CpuTiered : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(kernel::compile_pool_wait_idle(std::chrono::seconds(60))); }
};

cpu::Jit::Counters counters() {
  return cpu::Jit::global().counters();
}

// Waits (at most 120 s) until `count` tiered compiles have switched to their full tier.
bool wait_full_tier(uint64_t count) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (cpu::full_tier_switches() < count) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

KernelCall call_1d(int n, int tg = 64) {
  KernelCall c = conformance::make_call({{n}}, {float32}, {n, 1, 1}, {tg, 1, 1});
  c.device = Device::cpu();
  return c;
}

// y = exp(sin(x)) * 0.5 + x * x, and its float64 reference.
const char* kBody =
    "uint i = thread_position_in_grid.x;\n"
    "float v = x[i];\n"
    "y[i] = exp(sin(v)) * 0.5f + v * v;\n";
std::vector<double> reference(const std::vector<double>& xs) {
  std::vector<double> r;
  for (double v : xs) r.push_back(std::exp(std::sin(v)) * 0.5 + v * v);
  return r;
}

// The same with a barrier in a helper: one fiber per thread (fiber mode).
const char* kFiberHeader = "inline void sync_all() { threadgroup_barrier(mem_flags::mem_none); }\n";
const char* kFiberBody =
    "uint i = thread_position_in_grid.x;\n"
    "float v = x[i];\n"
    "sync_all();\n"
    "y[i] = exp(sin(v)) * 0.5f + v * v;\n";

void expect_results(MetalKernel& k, int n, uint64_t seed, const char* what) {
  auto xs = conformance::random_values(n, -2, 2, seed);
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  Array y = k({x}, call_1d(n))[0];
  SCOPED_TRACE(what);
  conformance::expect_close(y, reference(xs));
}

void quick_then_full(const char* header, const char* body) {
  TieredEnv on(nullptr);  // the default: on
  auto k = metal_kernel("tiered", {"x"}, {"y"}, fresh(body), header);
  auto c0 = counters();
  uint64_t s0 = cpu::full_tier_switches();
  expect_results(k, 5000, 1, "quick tier");
  auto c1 = counters();
  EXPECT_EQ(c1.quick, c0.quick + 1);
  // The full tier compiles in the background, then the same kernel object runs it.
  ASSERT_TRUE(wait_full_tier(s0 + 1));
  EXPECT_EQ(counters().background, c0.background + 1);
  EXPECT_EQ(counters().quick, c1.quick);
  expect_results(k, 5000, 2, "full tier");
  expect_results(k, 777, 3, "full tier, partial group");
  // A new kernel object of the same source: the full library is loaded, no quick compile.
  auto again = metal_kernel("tiered", {"x"}, {"y"}, k.spec().source, header);
  auto c2 = counters();
  expect_results(again, 300, 4, "second kernel object");
  EXPECT_EQ(counters().quick, c2.quick);
  EXPECT_EQ(counters().full, c2.full);
}

TEST_F(CpuTiered, LoopKernelQuickThenFullMatchTheReference) {
  quick_then_full("", kBody);
}

TEST_F(CpuTiered, FiberKernelQuickThenFullMatchTheReference) {
  quick_then_full(kFiberHeader, kFiberBody);
}

TEST_F(CpuTiered, OffCompilesOnceAtTheCall) {
  TieredEnv off("0");
  auto k = metal_kernel("untiered", {"x"}, {"y"}, fresh(kBody));
  auto c0 = counters();
  expect_results(k, 2000, 5, "untiered");
  auto c1 = counters();
  EXPECT_EQ(c1.quick, c0.quick);
  EXPECT_EQ(c1.full, c0.full + 1);
  EXPECT_EQ(c1.background, c0.background);
  // Nothing follows in the background.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(counters().full, c1.full);
  EXPECT_EQ(counters().background, c0.background);
}

TEST_F(CpuTiered, FullLibraryOnDiskIsUsedAtOnce) {
  auto& jit = cpu::Jit::global();
  if (!jit.cache().has_disk()) GTEST_SKIP() << "no disk cache";
  std::string body = fresh(kBody);
  {
    TieredEnv off("0");
    auto k = metal_kernel("on_disk", {"x"}, {"y"}, body);
    expect_results(k, 1000, 6, "compiled untiered");
  }
  jit.cache().clear_memory();  // as a fresh process: the library is on disk only
  TieredEnv on("1");
  auto c0 = counters();
  auto k = metal_kernel("on_disk", {"x"}, {"y"}, body);
  expect_results(k, 1000, 7, "from disk");
  auto c1 = counters();
  EXPECT_EQ(c1.quick + c1.full, c0.quick + c0.full);  // no compiler run at all
}

// The quick and full tiers give the same bits for arithmetic: a multiply feeding an add is fused
// (or not) alike (g++ forms fused multiply-adds only in a pass that -O1 leaves out; the quick
// tier turns it on). A GPU compares such results with the CPU's exactly (OpsMatmulGpu).
TEST_F(CpuTiered, QuickAndFullTiersAgreeBitForBitOnMultiplyAdds) {
  TieredEnv on("1");
  auto k = metal_kernel("tiered_fma", {"x", "w"}, {"y"},
                        fresh("uint i = thread_position_in_grid.x;\n"
                              "y[i] = x[i] * w[i] + w[i] * 0.37f - x[i] * 1.3f;\n"));
  const int n = 4099;
  auto xs = conformance::random_values(n, -2, 2, 11);
  auto ws = conformance::random_values(n, -2, 2, 12);
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  Array w = Array::from_doubles(ws, {n}, float32, Device::cpu());
  uint64_t s0 = cpu::full_tier_switches();
  auto c0 = counters();
  Array quick = k({x, w}, call_1d(n))[0];
  quick.eval();
  ASSERT_EQ(counters().quick, c0.quick + 1);
  ASSERT_TRUE(wait_full_tier(s0 + 1));
  Array full = k({x, w}, call_1d(n))[0];
  full.eval();
  const float* a = quick.data<float>();
  const float* b = full.data<float>();
  int differ = 0;
  for (int i = 0; i < n; ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0) << "of " << n << " elements";
}

// A launch of 2^20 threads or more does not run quick code: it waits for the full tier.
TEST_F(CpuTiered, LargeFirstLaunchWaitsForTheFullTier) {
  TieredEnv on("1");
  auto k = metal_kernel("tiered_large", {"x"}, {"y"}, fresh(kBody));
  auto c0 = counters();
  uint64_t s0 = cpu::full_tier_switches();
  expect_results(k, (1 << 20) + 3, 8, "large first call");
  auto c1 = counters();
  EXPECT_EQ(c1.quick, c0.quick + 1);
  EXPECT_EQ(c1.background, c0.background + 1);
  EXPECT_EQ(cpu::full_tier_switches(), s0 + 1);  // switched before the launch ran
}

// The fault guard locates a fault in quick code as in full code.
TEST_F(CpuTiered, FaultInQuickCodeIsReported) {
  TieredEnv on("1");
  const int n = 4080;
  for (int round = 0; round < 2; ++round) {
    auto k = metal_kernel("tiered_fault", {"x"}, {"y"},
                          fresh("uint i = thread_position_in_grid.x; y[i + 4080] = x[i]; "
                                "y[i] = x[i];"),
                          round ? kFiberHeader : "");
    auto c0 = counters();
    Array x =
        Array::from_doubles(conformance::random_values(n, -1, 1, 9), {n}, float32, Device::cpu());
    try {
      k({x}, call_1d(n))[0].eval();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("past the end of 'y'"), std::string::npos) << m;
    }
    EXPECT_EQ(counters().quick, c0.quick + 1);
  }
}

TEST_F(CpuTiered, CacheKeyCoversTheTier) {
  auto& jit = cpu::Jit::global();
  std::string src = "extern \"C\" int f() { return 1; }\n";
  cpu::JitOptions full{{"-DALLOY_MATH_SAFE"}};
  cpu::JitOptions quick = full;
  quick.quick = true;
  cpu::JitOptions background = full;
  background.background = true;
  EXPECT_NE(jit.key(src, full), jit.key(src, quick));
  EXPECT_EQ(jit.key(src, full), jit.key(src, background));  // the same library
  auto a = jit.compile(src, full);
  auto b = jit.compile(src, quick);
  EXPECT_NE(a->key(), b->key());
  EXPECT_TRUE(jit.cached(src, full));
  EXPECT_TRUE(jit.cached(src, quick));
  EXPECT_FALSE(jit.cached(src + "// other\n", full));
}

}  // namespace
