// Conformance: what a metal_kernel call passes to the body. dtype/int/bool template arguments,
// scalars (0-d arrays, `const constant T&`), small arrays (< 8 elements, `const constant T*`),
// input shape/strides/ndim parameters, ensure_row_contiguous, init_value, zero-size grids.
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// ---- template arguments ----------------------------------------------------------------------

TEST(ConformanceKernelArgs, DtypeIntBoolTemplateArgs) {
  auto k = metal_kernel("args_templates", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    T acc = T(0);
    for (int j = 0; j < N; ++j) acc += x[i * N + j];
    if (SCALE) acc *= T(2);
    out[i] = acc;
  )MSL");
  struct Case {
    Dtype T;
    int N;
    bool scale;
  };
  for (auto c : {Case{float16, 3, true}, Case{float32, 5, false}, Case{int32, 4, true}}) {
    SCOPED_TRACE(std::string(dtype_name(c.T)));
    constexpr int64_t n = 64;
    auto x = random_array({n, c.N}, c.T, -8, 8, 1101 + c.N, Device::cpu());
    auto xv = x.to_doubles();
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0;  // each += rounds to T
      for (int j = 0; j < c.N; ++j) acc = round_to(c.T, acc + xv[i * c.N + j]);
      ref[i] = c.scale ? 2 * acc : acc;
    }
    run_kernel(k, {x},
               make_call({{n}}, {c.T}, {int(n), 1, 1}, {32, 1, 1},
                         {{"T", c.T}, {"N", c.N}, {"SCALE", c.scale}}),
               [&](auto& o) { expect_equal(o[0], ref); });
  }
}

// ---- scalars and small arrays ------------------------------------------------------------------

// 0-d arrays arrive as `const constant T&`: a float (7.3f), an int (5) and a bool (true).
TEST(ConformanceKernelArgs, ScalarInputs) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("args_scalars", {"x", "s", "m", "flag"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * s + float(m) + (flag ? 1.0f : 0.0f);
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 1111, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = f32(xv[i] * f32(7.3)) + 5 + 1;
  run_kernel(k, {x, Array(7.3f), Array(5), Array(true)},
             make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

// Arrays of fewer than 8 elements are passed in `constant` memory; 8 elements is a device buffer.
TEST(ConformanceKernelArgs, SmallConstantArrays) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("args_small_arrays", {"x", "w", "idx", "big"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float v = x[i];
    out[i] = w[0] * v * v + w[1] * v + w[2] + float(idx[i % 5]) + big[i % 8];
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 1121, Device::cpu());
  auto w = random_array({3}, float32, -2, 2, 1122, Device::cpu());
  auto idx = random_array({5}, int32, 1, 100, 1123, Device::cpu());
  auto big = random_array({8}, float32, -2, 2, 1124, Device::cpu());
  auto xv = x.to_doubles(), wv = w.to_doubles(), iv = idx.to_doubles(), bv = big.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i)
    ref[i] = wv[0] * xv[i] * xv[i] + wv[1] * xv[i] + wv[2] + iv[i % 5] + bv[i % 8];
  KernelCall call = make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1});
  std::string msl = k.metal_source({x, w, idx, big}, call);
  EXPECT_NE(msl.find("const constant float* w"), std::string::npos) << msl;
  EXPECT_NE(msl.find("const device float* big"), std::string::npos) << msl;
  run_kernel(k, {x, w, idx, big}, call, [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// `name_shape`, `name_strides`, `name_ndim` parameters (row-contiguous input).
TEST(ConformanceKernelArgs, ShapeStridesNdimParams) {
  auto k = metal_kernel("args_shape_params", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    uint row = i / uint(x_shape[1]);
    uint col = i % uint(x_shape[1]);
    out[i] = x[row * x_strides[0] + col * x_strides[1]] + float(x_ndim) * 10.0f +
             float(x_shape[0]) * 100.0f;
  )MSL");
  constexpr int64_t R = 6, C = 7;
  auto x = random_array({R, C}, float32, -1, 1, 1131, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(R * C);
  for (int64_t i = 0; i < R * C; ++i) ref[i] = xv[i] + 20 + 600;
  run_kernel(k, {x}, make_call({{R, C}}, {float32}, {int(R * C), 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

// With ensure_row_contiguous (the default) a strided view reaches the kernel as a row-major copy.
TEST(ConformanceKernelArgs, EnsureRowContiguousCopiesViews) {
  auto base = random_array({9, 7}, float32, -1, 1, 1141, Device::cpu());
  auto view = base.transpose();
  ASSERT_FALSE(view.is_row_contiguous());
  auto k = metal_kernel("args_row_contiguous", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * 3.0f;
  )MSL");
  auto v = view.to_doubles();
  std::vector<double> ref(v.size());
  for (size_t i = 0; i < v.size(); ++i) ref[i] = 3 * v[i];
  run_kernel(k, {view}, make_call({{7, 9}}, {float32}, {63, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

// A threadgroup of more than 1024 threads is refused up front (MLX: ValueError).
TEST(ConformanceKernelArgs, ThreadgroupOver1024Raises) {
  auto k = metal_kernel("args_big_threadgroup", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[i] = x[i];
  )MSL");
  auto x = random_array({2048}, float32, -1, 1, 1171, Device::cpu());
  for_each_device([&](Device d) {
    auto call = make_call({{2048}}, {float32}, {2048, 1, 1}, {64, 32, 1});
    call.device = d;
    EXPECT_THROW(eval(k({x}, call)), std::invalid_argument);
  });
}

// ---- init_value and empty dispatches ---------------------------------------------------------

// Outputs are filled with init_value before the kernel runs: elements it skips keep it.
TEST(ConformanceKernelArgs, InitValueFillsUnwrittenElements) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("args_init_value", {"x"}, {"out", "iout"}, R"MSL(
    uint i = thread_position_in_grid.x;
    if (i % 2 == 0) {
      out[i] = x[i];
      iout[i] = int(i);
    }
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 1151, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n), iref(n);
  for (int64_t i = 0; i < n; ++i) {
    ref[i] = i % 2 == 0 ? xv[i] : -2.0;
    iref[i] = i % 2 == 0 ? double(i) : -2.0;
  }
  auto call = make_call({{n}, {n}}, {float32, int32}, {n, 1, 1}, {64, 1, 1});
  call.init_value = -2.0;
  run_kernel(k, {x}, call, [&](auto& o) {
    expect_equal(o[0], ref);
    expect_equal(o[1], iref);
  });
}

// A zero-size grid runs nothing and raises nothing; outputs keep init_value.
TEST(ConformanceKernelArgs, ZeroSizeGridRunsNothing) {
  constexpr int64_t n = 16;
  auto k = metal_kernel("args_zero_grid", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[i] = x[i];
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 1161, Device::cpu());
  auto call = make_call({{n}}, {float32}, {0, 1, 1}, {32, 1, 1});
  call.init_value = 2.0;
  run_kernel(k, {x}, call, [&](auto& o) { expect_equal(o[0], std::vector<double>(n, 2.0)); });
}

}  // namespace
