// The prepared launch of a repeated metal_kernel call (CustomKernel's LaunchRecord, Backend::
// prepare / launch_prepared; docs/architecture.md, "The prepared launch"): from the primitive's
// third evaluation on, a call on inputs laid out as before launches the block packed at its
// second, with its own arrays' addresses. Everything that is no constant of that block takes the
// general path. On a GPU only (the CPU backend prepares no launch).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "alloy/alloy.h"
#include "core/array_node.h"
#include "kernel/compile_pool.h"
#include "kernel/custom_kernel.h"
#include "random_values.h"

namespace alloy {
namespace {

#define REQUIRE_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "needs a CUDA GPU"

const kernel::CustomKernel& kernel_of(const Array& a) {
  auto p = node_of(a)->pending;
  if (!p) throw std::logic_error("array is not pending");
  return dynamic_cast<const kernel::CustomKernel&>(*p->primitive);
}

Array random_on(const Shape& shape, uint64_t seed, Device d = Device::gpu()) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return Array::from_doubles(testing::random_values(static_cast<size_t>(n), seed), shape, float32,
                             Device::cpu())
      .to(d);
}

// out[i] = a[elem_to_loc(i)] * 2 + b[i] + a_shape[1]: a strided input read through its shape
// parameters (constants of the prepared block) and a row-contiguous one.
MetalKernel strided_kernel() {
  return metal_kernel("prepared_strided", {"a", "b"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = a[elem_to_loc(i, a_shape, a_strides, a_ndim)] * 2.0f + b[i] + float(a_shape[1]);)",
                      "", /*ensure_row_contiguous=*/false);
}

KernelCall call_of(int64_t n, Device d = Device::gpu()) {
  KernelCall c;
  c.output_shapes = {{n}};
  c.output_dtypes = {float32};
  c.grid = {static_cast<int>(n), 1, 1};
  c.threadgroup = {64, 1, 1};
  c.device = d;
  return c;
}

// a is [rows, cols] (a view of any layout), b is [rows * cols].
void expect_strided(const Array& out, const Array& a, const Array& b) {
  auto got = out.to_doubles();
  auto av = a.to(Device::cpu()).contiguous().to_doubles();
  auto bv = b.to_doubles();
  ASSERT_EQ(got.size(), av.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], av[i] * 2 + bv[i] + static_cast<double>(a.shape()[1]), 1e-5) << i;
}

TEST(PreparedLaunch, RepeatedCallsLaunchWithTheirOwnArrays) {
  REQUIRE_GPU();
  auto k = strided_kernel();
  const int64_t rows = 24, cols = 40, n = rows * cols;
  std::vector<Array> as, bs, outs;
  for (int c = 0; c < 6; ++c) {
    // A transposed view: strides (1, 24), not row-contiguous.
    as.push_back(transpose(random_on({cols, rows}, 100 + c), {1, 0}));
    bs.push_back(random_on({n}, 200 + c));
    outs.push_back(k({as.back(), bs.back()}, call_of(n))[0]);
    EXPECT_EQ(kernel_of(outs.back()).launch_is_prepared(), c >= 2) << c;
    outs.back().eval();
  }
  for (int c = 0; c < 6; ++c) expect_strided(outs[c], as[c], bs[c]);
  // Evaluated together: every output its own.
  std::vector<Array> later;
  for (int c = 0; c < 4; ++c) later.push_back(k({as[c], bs[5 - c]}, call_of(n))[0]);
  eval(later);
  for (int c = 0; c < 4; ++c) expect_strided(later[c], as[c], bs[5 - c]);
}

// The same primitive (same dtypes and shapes: the call plan shares it) on inputs of another
// layout: its shape parameters differ, so the general path binds them.
TEST(PreparedLaunch, InputsOfAnotherLayoutTakeTheGeneralPath) {
  REQUIRE_GPU();
  auto k = strided_kernel();
  const int64_t rows = 16, cols = 48, n = rows * cols;
  Array b = random_on({n}, 7);
  for (int c = 0; c < 3; ++c) {
    Array t = transpose(random_on({cols, rows}, 10 + c), {1, 0});
    expect_strided(k({t, b}, call_of(n))[0], t, b);
  }
  Array row_major = random_on({rows, cols}, 20);
  Array out = k({row_major, b}, call_of(n))[0];
  ASSERT_TRUE(kernel_of(out).launch_is_prepared());  // the transposed inputs' launch
  expect_strided(out, row_major, b);
  Array t = transpose(random_on({cols, rows}, 21), {1, 0});
  expect_strided(k({t, b}, call_of(n))[0], t, b);
}

// A small host array given to a GPU kernel travels with the launch by value: no prepared launch
// (its bytes would be frozen), every call sees its own value.
TEST(PreparedLaunch, HostScalarsTravelWithEveryLaunch) {
  REQUIRE_GPU();
  auto k = metal_kernel("prepared_scalar", {"x", "s"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * s[0];)");
  const int64_t n = 256;
  Array x = random_on({n}, 30);
  auto xv = x.to_doubles();
  for (int c = 0; c < 5; ++c) {
    Array s = Array::from_doubles({1.5 + c}, {1}, float32, Device::cpu());
    Array out = k({x, s}, call_of(n))[0];
    EXPECT_FALSE(kernel_of(out).launch_is_prepared());
    auto got = out.to_doubles();
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], xv[i] * (1.5 + c), 1e-5) << c << " " << i;
  }
}

// init_value: the outputs are filled before every launch, the prepared one included.
TEST(PreparedLaunch, OutputsAreInitialisedBeforeEveryLaunch) {
  REQUIRE_GPU();
  auto k = metal_kernel("prepared_sum", {"x"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    atomic_fetch_add_explicit(&out[i % 4], x[i], memory_order_relaxed);)",
                        "", true, /*atomic_outputs=*/true);
  const int64_t n = 512;
  for (int c = 0; c < 5; ++c) {
    Array x = random_on({n}, 40 + c);
    KernelCall call = call_of(4);
    call.grid = {static_cast<int>(n), 1, 1};
    call.init_value = 0.25 * c;
    auto got = k({x}, call)[0].to_doubles();
    auto xv = x.to_doubles();
    for (int j = 0; j < 4; ++j) {
      double want = 0.25 * c;
      for (int64_t i = j; i < n; i += 4) want += xv[i];
      ASSERT_NEAR(got[j], want, 1e-3) << c << " " << j;
    }
  }
}

// Robust mode reads buffer sizes and reports accesses: never prepared.
TEST(PreparedLaunch, RobustKernelsAreNotPrepared) {
  REQUIRE_GPU();
  auto k = metal_kernel("prepared_robust", {"x"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = x[i] + 1.0f;)",
                        "", true, false, {}, /*robust=*/true);
  Array x = random_on({128}, 50);
  auto xv = x.to_doubles();
  for (int c = 0; c < 4; ++c) {
    Array out = k({x}, call_of(128))[0];
    EXPECT_FALSE(kernel_of(out).launch_is_prepared());
    auto got = out.to_doubles();
    for (int i = 0; i < 128; ++i) ASSERT_NEAR(got[i], xv[i] + 1, 1e-6);
  }
}

// A prepared launch follows the tiered compile's switch to the full code, and a compiled
// function records the kernel's launches into its CUDA graph (the general path) while the eager
// calls keep their prepared launch.
TEST(PreparedLaunch, FollowsTheFullCompileAndLeavesGraphRecordingToTheGeneralPath) {
  REQUIRE_GPU();
  auto k = strided_kernel();
  const int64_t rows = 8, cols = 64, n = rows * cols;
  auto run = [&](uint64_t seed) {
    Array t = transpose(random_on({cols, rows}, seed), {1, 0});
    Array b = random_on({n}, seed + 1000);
    Array out = k({t, b}, call_of(n))[0];
    expect_strided(out, t, b);
    return out;
  };
  for (int c = 0; c < 3; ++c) run(60 + c);
  ASSERT_TRUE(kernel::compile_pool_wait_idle(std::chrono::seconds(120)));  // the full compile
  for (int c = 0; c < 3; ++c) run(70 + c);
  auto f = compile([&](const std::vector<Array>& in) { return k(in, call_of(n)); });
  for (int c = 0; c < 3; ++c) {
    Array t = transpose(random_on({cols, rows}, 80 + c), {1, 0});
    Array b = random_on({n}, 90 + c);
    expect_strided(f({t, b})[0], t, b);
  }
  for (int c = 0; c < 2; ++c) run(95 + c);
}

}  // namespace
}  // namespace alloy
