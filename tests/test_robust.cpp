// Robust mode (DESIGN.md §2): bounds-checked buffer accesses; out-of-range reads give 0, writes
// are dropped, and each is reported with kernel, buffer, index and thread.
#include <gtest/gtest.h>

#include "alloy/alloy.h"
#include "conformance/harness.h"
#include "example_kernels.h"
#include "example_references.h"

using namespace alloy;
using conformance::expect_close;
using conformance::for_each_device;
using conformance::random_values;

namespace {

TEST(Robust, GridSampleReadThenMaskIsCorrectAndReported) {
  // MLX's documentation writes grid_sample reading the four neighbours before masking them, so
  // border taps read outside x. In robust mode it is correct everywhere and reports those reads.
  examples::GridSampleDims d{1, 8, 8, 32, 6, 6};
  for_each_device([&](Device dev) {
    auto xs = random_values(d.B * d.H * d.W * d.C, -1, 1, 11);
    std::vector<double> gs(d.B * d.gH * d.gW * 2);
    for (size_t i = 0; i < gs.size(); ++i) gs[i] = -1.3 + 2.6 * (i % 7) / 6.0;  // reaches outside
    Array x = Array::from_doubles(xs, {d.B, d.H, d.W, d.C}, float32, dev);
    Array grid = Array::from_doubles(gs, {d.B, d.gH, d.gW, 2}, float32, dev);
    xs = x.to_doubles();
    gs = grid.to_doubles();
    int n = static_cast<int>(d.B * d.gH * d.gW * d.C);
    auto k = metal_kernel("grid_sample_docs", {"x", "grid"}, {"out"},
                          examples::kGridSampleReadThenMaskSource, "", true, false, {},
                          /*robust=*/true);
    KernelCall call;
    call.output_shapes = {{d.B, d.gH, d.gW, d.C}};
    call.output_dtypes = {float32};
    call.grid = {n, 1, 1};
    call.threadgroup = {256, 1, 1};
    call.template_args = {{"T", float32}};
    call.device = dev;
    conformance::poison(call);
    take_out_of_range_reports();
    auto out = k({x, grid}, call)[0];
    expect_close(out, examples::grid_sample_ref(xs, gs, d), 1e-5, 1e-5);
    auto reports = take_out_of_range_reports();
    ASSERT_FALSE(reports.empty());
    for (auto& r : reports) {
      EXPECT_EQ(r.kernel, "grid_sample_docs");
      EXPECT_EQ(r.buffer, "x");
      EXPECT_TRUE(r.index < 0 || r.index >= d.B * d.H * d.W * d.C) << r.index;
      EXPECT_LT(r.thread[0], static_cast<uint32_t>(n));
    }
  });
}

TEST(Robust, OutOfRangeWritesAreDroppedAndReadsGiveZero) {
  for_each_device([&](Device dev) {
    auto k = metal_kernel("oob", {"inp"}, {"out"}, R"(
        uint i = thread_position_in_grid.x;
        out[i] = inp[i + 6];        // the last 2 threads read past the end: 0
        out[i + 100] = 42;          // always past the end: dropped
        device float* p = out + 200;
        p[0] = 13;                  // pointer arithmetic keeps the bounds
    )",
                          "", true, false, {}, /*robust=*/true);
    auto vals = random_values(8, 1, 2, 12);
    Array in = Array::from_doubles(vals, {8}, float32, dev);
    KernelCall call;
    call.output_shapes = {{4}};
    call.output_dtypes = {float32};
    call.grid = {4, 1, 1};
    call.threadgroup = {4, 1, 1};
    call.device = dev;
    take_out_of_range_reports();
    auto out = k({in}, call)[0];
    auto v = in.to_doubles();
    expect_close(out, {v[6], v[7], 0, 0});
    auto reports = take_out_of_range_reports();
    EXPECT_EQ(reports.size(), 2u + 4u + 4u);
  });
}

TEST(Robust, TranslationOnlyChangesInRobustMode) {
  // Robust kernels are separate cache entries; a fast-mode call of the same kernel is unaffected.
  auto k = metal_kernel("plain", {"inp"}, {"out"},
                        "out[thread_position_in_grid.x] = inp[thread_position_in_grid.x] * 2;");
  Array in = Array::from_doubles({1, 2, 3}, {3}, float32, Device::cpu());
  KernelCall call;
  call.output_shapes = {{3}};
  call.output_dtypes = {float32};
  call.grid = {3, 1, 1};
  call.threadgroup = {3, 1, 1};
  call.device = Device::cpu();
  conformance::expect_equal(k({in}, call)[0], {2, 4, 6});
  EXPECT_TRUE(take_out_of_range_reports().empty());
}

}  // namespace
