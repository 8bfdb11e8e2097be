// Load (issue 16, docs/reliability.md): 8 threads launching loop-mode and fiber-mode kernels at
// once while new kernels are compiled, every result checked. The ThreadSanitizer run of
// scripts/ci-sanitizers.sh runs it with ALLOY_STRESS_LAUNCHES=1000 (launches per thread); the
// regular suite with fewer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "alloy/alloy.h"

using namespace alloy;

namespace {

int launches_per_thread() {
  const char* env = std::getenv("ALLOY_STRESS_LAUNCHES");
  int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : 100;
}

KernelCall call_for(int n) {
  KernelCall c;
  c.output_shapes = {{n}};
  c.output_dtypes = {float32};
  c.grid = {n, 1, 1};
  c.threadgroup = {64, 1, 1};
  c.device = Device::cpu();
  return c;
}

}  // namespace

TEST(Stress, ThreadsLaunchLoopAndFiberKernelsWhileCompiling) {
  const int n = 200;
  const int per_thread = launches_per_thread();
  // Loop mode: no barrier. Fiber mode: a threadgroup reduction through threadgroup memory.
  auto loop = metal_kernel("stress_loop", {"x"}, {"y"},
                           "uint i = thread_position_in_grid.x; y[i] = x[i] * 3.0f + 1.0f;");
  auto fiber = metal_kernel("stress_fiber", {"x"}, {"y"}, R"(
    threadgroup float partial[64];
    uint i = thread_position_in_grid.x;
    uint lid = thread_position_in_threadgroup.x;
    partial[lid] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = 0.0f;
    for (uint k = 0; k < threads_per_threadgroup.x; ++k) s += partial[k];
    y[i] = s;)");
  std::vector<double> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = static_cast<double>((i * 7) % 13) - 6.0;  // exact in f32
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  std::vector<double> want_loop(n), want_fiber(n);
  for (int i = 0; i < n; ++i) {
    want_loop[i] = xs[i] * 3 + 1;
    int g = i / 64, size = std::min(64, n - g * 64);
    double s = 0;
    for (int k = 0; k < size; ++k) s += xs[g * 64 + k];
    want_fiber[i] = s;
  }
  std::atomic<int> failures{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < per_thread && failures == 0; ++k) {
        bool use_fiber = (k + t) % 2 == 1;
        auto y = (use_fiber ? fiber : loop)({x}, call_for(n))[0].to_doubles();
        if (y != (use_fiber ? want_fiber : want_loop)) ++failures;
      }
    });
  }
  // New kernels compiled meanwhile (each body differs, so each is a new compile).
  std::thread compiler([&] {
    for (int k = 0; k < 6 && !stop; ++k) {
      auto fresh = metal_kernel(
          "stress_new_" + std::to_string(k), {"x"}, {"y"},
          "uint i = thread_position_in_grid.x; y[i] = x[i] + " + std::to_string(k) + ".0f;");
      auto y = fresh({x}, call_for(n))[0].to_doubles();
      for (int i = 0; i < n; ++i)
        if (y[i] != xs[i] + k) {
          ++failures;
          break;
        }
    }
  });
  for (auto& th : threads) th.join();
  stop = true;
  compiler.join();
  EXPECT_EQ(failures.load(), 0);
}
