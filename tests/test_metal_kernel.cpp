// metal_kernel end to end: MLX's documented examples and test-suite facts, caching, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "alloy/alloy.h"
#include "conformance/harness.h"
#include "core/backend.h"
#include "example_kernels.h"
#include "example_references.h"
#include "kernel/custom_kernel.h"

using namespace alloy;
using conformance::expect_close;
using conformance::expect_equal;
using conformance::for_each_device;
using conformance::random_values;

namespace {

TEST(MetalKernel, ExpContiguous) {
  for_each_device([](Device dev) {
    for (Dtype t : {float32, float16, bfloat16}) {
      SCOPED_TRACE(std::string(dtype_name(t)));
      const int n = 4099;  // not a multiple of the threadgroup: a partial last group
      auto xs = random_values(n, -4, 4, 1);
      Array x = Array::from_doubles(xs, {n}, t, dev);
      auto k = metal_kernel("myexp", {"inp"}, {"out"}, examples::kExpSource);
      KernelCall call;
      call.output_shapes = {{n}};
      call.output_dtypes = {t};
      call.grid = {n, 1, 1};
      call.threadgroup = {256, 1, 1};
      call.template_args = {{"T", float32}};
      conformance::poison(call);
      auto out = k({x}, call)[0];
      auto xin = x.to_doubles();
      std::vector<double> want(n);
      for (int i = 0; i < n; ++i) want[i] = std::exp(xin[i]);
      expect_close(out, want);
      EXPECT_EQ(conformance::nvrtc_compile(k, {x}, call).find("error"), std::string::npos);
    }
  });
}

TEST(MetalKernel, ExpStridedView) {
  for_each_device([](Device dev) {
    auto xs = random_values(64 * 48, -2, 2, 2);
    Array base = Array::from_doubles(xs, {64, 48}, float32, dev);
    Array view = base.slice({{std::nullopt, std::nullopt, 2}});  // [::2]
    ASSERT_FALSE(view.is_row_contiguous());
    auto k = metal_kernel("myexp_strided", {"inp"}, {"out"}, examples::kExpStridedSource, "",
                          /*ensure_row_contiguous=*/false);
    int n = static_cast<int>(view.size());
    KernelCall call;
    call.output_shapes = {view.shape()};
    call.output_dtypes = {float32};
    call.grid = {n, 1, 1};
    call.threadgroup = {256, 1, 1};
    call.template_args = {{"T", float32}};
    conformance::poison(call);
    auto out = k({view}, call)[0];
    auto vin = view.to_doubles();
    std::vector<double> want(vin.size());
    for (size_t i = 0; i < vin.size(); ++i) want[i] = std::exp(vin[i]);
    expect_close(out, want);
    // A transposed view too.
    Array tview = base.transpose();
    call.output_shapes = {tview.shape()};
    call.grid = {static_cast<int>(tview.size()), 1, 1};
    auto out2 = k({tview}, call)[0];
    auto tin = tview.to_doubles();
    for (size_t i = 0; i < tin.size(); ++i) tin[i] = std::exp(tin[i]);
    expect_close(out2, tin);
  });
}

TEST(MetalKernel, GridSampleForwardAndBackward) {
  examples::GridSampleDims d{2, 13, 17, 32, 9, 11};
  for_each_device([&](Device dev) {
    auto xs = random_values(d.B * d.H * d.W * d.C, -1, 1, 3);
    auto gs = random_values(d.B * d.gH * d.gW * 2, -1.2, 1.2, 4);  // some taps outside
    auto cs = random_values(d.B * d.gH * d.gW * d.C, -1, 1, 5);
    Array x = Array::from_doubles(xs, {d.B, d.H, d.W, d.C}, float32, dev);
    Array grid = Array::from_doubles(gs, {d.B, d.gH, d.gW, 2}, float32, dev);
    Array cot = Array::from_doubles(cs, {d.B, d.gH, d.gW, d.C}, float32, dev);
    xs = x.to_doubles();
    gs = grid.to_doubles();
    cs = cot.to_doubles();
    int n = static_cast<int>(d.B * d.gH * d.gW * d.C);

    auto fwd = metal_kernel("grid_sample", {"x", "grid"}, {"out"}, examples::kGridSampleSource);
    KernelCall call;
    call.output_shapes = {{d.B, d.gH, d.gW, d.C}};
    call.output_dtypes = {float32};
    call.grid = {n, 1, 1};
    call.threadgroup = {256, 1, 1};
    call.template_args = {{"T", float32}};
    conformance::poison(call);
    expect_close(fwd({x, grid}, call)[0], examples::grid_sample_ref(xs, gs, d), 1e-5, 1e-5);

    auto bwd = metal_kernel("grid_sample_grad", {"x", "grid", "cotangent"}, {"x_grad", "grid_grad"},
                            examples::kGridSampleGradSource, "", true,
                            /*atomic_outputs=*/true);
    KernelCall bc;
    bc.output_shapes = {x.shape(), grid.shape()};
    bc.output_dtypes = {float32, float32};
    bc.grid = {n, 1, 1};
    bc.threadgroup = {256, 1, 1};
    bc.init_value = 0.0;
    auto grads = bwd({x, grid, cot}, bc);
    std::vector<double> wx, wg;
    examples::grid_sample_grad_ref(xs, gs, cs, d, wx, wg);
    expect_close(grads[0], wx, 1e-4, 1e-5);
    expect_close(grads[1], wg, 1e-4, 1e-3);
    EXPECT_EQ(conformance::nvrtc_compile(bwd, {x, grid, cot}, bc).find("error"), std::string::npos);
  });
}

// MLX python/tests/test_fast.py: test_custom_kernel_args.
TEST(MetalKernel, MlxArgsCase) {
  for_each_device([](Device dev) {
    auto av = random_values(18, -1, 1, 6), cv = random_values(4, -1, 1, 7);
    Array a = Array::from_doubles(av, {3, 6}, float32, dev);
    Array b = Array::from_doubles({3, 4, 5}, {3}, int32, dev);
    Array c = Array::from_doubles(cv, {2, 2}, bfloat16, dev);
    Array d(7.3f);
    auto k = metal_kernel("arg_test", {"a", "b", "c", "d"}, {"out1", "out2"}, R"(
        uint elem = thread_position_in_grid.x;
        T tmp = a[0];
        if (e) {
            out1[elem] = a[1] + b[2] + c[3] + d + f;
        } else {
            out1[elem] = 1;
        }
        out2[elem] = a[1] + b[2] + c[1] - d;
    )");
    KernelCall call;
    call.output_shapes = {{3, 2}, {3, 2}};
    call.output_dtypes = {float32, int32};
    call.grid = {6, 1, 1};
    call.threadgroup = {2, 1, 1};
    call.template_args = {{"e", true}, {"f", 3}, {"T", float16}};
    call.device = dev;
    conformance::poison(call);
    auto outs = k({a, b, c, d}, call);
    auto aa = a.to_doubles(), cc = c.to_doubles();
    float s1 = static_cast<float>(aa[1]) + 5.0f + static_cast<float>(cc[3]) + 7.3f + 3.0f;
    float s2 = static_cast<float>(aa[1]) + 5.0f + static_cast<float>(cc[1]) - 7.3f;
    expect_close(outs[0], std::vector<double>(6, s1), 1e-6, 1e-6);
    expect_equal(outs[1], std::vector<double>(6, static_cast<int32_t>(s2)));
  });
}

TEST(MetalKernel, ThreadsPerThreadgroupAndSimdgroup) {
  for_each_device([](Device dev) {
    auto k = metal_kernel("attrs", {"inp"}, {"tpt", "tps"}, R"(
        uint elem = thread_position_in_grid.x;
        tpt[elem] = threads_per_threadgroup.x + inp[0] * 0;
        tps[elem] = threads_per_simdgroup;
    )");
    KernelCall call;
    call.output_shapes = {{8}, {8}};
    call.output_dtypes = {uint32, uint32};
    call.grid = {8, 1, 1};
    call.threadgroup = {2, 1, 1};
    call.device = dev;
    conformance::poison(call);
    auto outs = k({Array::from_doubles({1.0}, {1}, float32, dev)}, call);
    expect_equal(outs[0], std::vector<double>(8, 2));
    expect_equal(outs[1], std::vector<double>(8, 32));
  });
}

TEST(MetalKernel, VerbosePrintsMlxSource) {
  auto k = metal_kernel("myexp", {"inp"}, {"out"}, examples::kExpSource);
  Array x = Array::from_doubles(random_values(16, 0, 1, 8), {4, 4}, float16, Device::cpu());
  KernelCall call;
  call.output_shapes = {{4, 4}};
  call.output_dtypes = {float16};
  call.grid = {16, 1, 1};
  call.threadgroup = {16, 1, 1};
  call.template_args = {{"T", float32}};
  call.verbose = true;
  call.device = Device::cpu();
  testing::internal::CaptureStdout();
  k({x}, call)[0].eval();
  std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("custom_kernel_myexp__float_float16_t_float16_t"), std::string::npos);
  EXPECT_NE(printed.find(k.metal_source({x}, call)), std::string::npos);
}

// Two kernels with one name and different bodies never share a compiled entry (MLX #3832),
// also within one evaluation.
TEST(MetalKernel, SameNameDifferentSourceNeverMix) {
  auto k1 = metal_kernel("same", {"inp"}, {"out"},
                         "out[thread_position_in_grid.x] = inp[thread_position_in_grid.x] + 1;");
  auto k2 = metal_kernel("same", {"inp"}, {"out"},
                         "out[thread_position_in_grid.x] = inp[thread_position_in_grid.x] * 3;");
  Array x = Array::from_doubles({1, 2, 3, 4}, {4}, float32, Device::cpu());
  KernelCall call;
  call.output_shapes = {{4}};
  call.output_dtypes = {float32};
  call.grid = {4, 1, 1};
  call.threadgroup = {4, 1, 1};
  call.device = Device::cpu();
  auto a = k1({x}, call)[0];
  auto b = k2({x}, call)[0];
  eval({a, b});
  expect_equal(a, {2, 3, 4, 5});
  expect_equal(b, {3, 6, 9, 12});
}

TEST(MetalKernel, MathModes) {
  // Safe (default) keeps IEEE semantics: exp(-INFINITY) == 0, which online softmax relies on.
  for (std::string mode : {"safe", "relaxed", "fast"}) {
    SCOPED_TRACE(mode);
    auto k = metal_kernel("minf", {"inp"}, {"out"}, R"(
        uint i = thread_position_in_grid.x;
        out[i] = metal::exp(-INFINITY) + metal::fast::exp(-INFINITY) + exp(inp[i]);
    )",
                          "", true, false, {{"math_mode", mode}});
    KernelCall call;
    call.output_shapes = {{2}};
    call.output_dtypes = {float32};
    call.grid = {2, 1, 1};
    call.threadgroup = {2, 1, 1};
    call.device = Device::cpu();
    auto out = k({Array::from_doubles({0.5, -0.25}, {2}, float32, Device::cpu())}, call)[0];
    expect_close(out, {std::exp(0.5), std::exp(-0.25)}, 1e-5, 1e-6);
  }
  EXPECT_THROW(metal_kernel("m", {"a"}, {"b"}, "", "", true, false, {{"math_mode", "fastest"}}),
               std::invalid_argument);
  EXPECT_THROW(metal_kernel("m", {"a"}, {"b"}, "", "", true, false, {{"fast_math", "safe"}}),
               std::invalid_argument);
}

TEST(MetalKernel, FastDefinesFastMathOnlyInFastMode) {
  for (std::string mode : {"safe", "relaxed", "fast"}) {
    auto k = metal_kernel("fm", {"inp"}, {"out"}, R"(
#ifdef __FAST_MATH__
        out[0] = 1 + inp[0] * 0;
#else
        out[0] = 0 + inp[0] * 0;
#endif
    )",
                          "", true, false, {{"math_mode", mode}});
    KernelCall call;
    call.output_shapes = {{1}};
    call.output_dtypes = {float32};
    call.grid = {1, 1, 1};
    call.threadgroup = {1, 1, 1};
    call.device = Device::cpu();
    auto out = k({Array::from_doubles({2}, {1}, float32, Device::cpu())}, call)[0];
    expect_equal(out, {mode == "fast" ? 1.0 : 0.0});
  }
}

TEST(MetalKernel, CompileErrorPointsAtUserLine) {
  auto k = metal_kernel("broken", {"inp"}, {"out"}, R"(
    uint elem = thread_position_in_grid.x;
    float y = inp[elem] + undefined_thing;
    out[elem] = y;
)");
  KernelCall call;
  call.output_shapes = {{4}};
  call.output_dtypes = {float32};
  call.grid = {4, 1, 1};
  call.threadgroup = {4, 1, 1};
  call.device = Device::cpu();
  Array x = Array::from_doubles({1, 2, 3, 4}, {4}, float32, Device::cpu());
  auto out = k({x}, call)[0];
  try {
    out.eval();
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kernel(), "broken");
    EXPECT_NE(msg.find("body line 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("undefined_thing"), std::string::npos) << msg;
  }
  // The process stays usable: a good kernel still runs.
  auto good = metal_kernel("good", {"inp"}, {"out"},
                           "out[thread_position_in_grid.x] = 2 * inp[thread_position_in_grid.x];");
  expect_equal(good({x}, call)[0], {2, 4, 6, 8});
}

TEST(MetalKernel, UnsupportedFeaturesSayNotSupported) {
  auto k = metal_kernel("tex", {"inp"}, {"out"}, "out[0] = inp[0];",
                        "float sample_it(texture2d<float> t) { return 0; }");
  KernelCall call;
  call.output_shapes = {{1}};
  call.output_dtypes = {float32};
  call.device = Device::cpu();
  auto out = k({Array::from_doubles({1}, {1}, float32, Device::cpu())}, call)[0];
  try {
    out.eval();
    FAIL();
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("not supported: textures"), std::string::npos);
  }
}

TEST(MetalKernel, BadArguments) {
  auto k = metal_kernel("bad", {"a"}, {"out"}, "out[0] = a[0];");
  Array a = Array::from_doubles({1}, {1}, float32, Device::cpu());
  KernelCall ok;
  ok.output_shapes = {{1}};
  ok.output_dtypes = {float32};
  ok.device = Device::cpu();
  auto with = [&](auto f) {
    KernelCall c = ok;
    f(c);
    return c;
  };
  EXPECT_THROW(k({a, a}, ok), std::invalid_argument);  // wrong number of inputs
  EXPECT_THROW(k({}, ok), std::invalid_argument);
  EXPECT_THROW(k({a}, with([](KernelCall& c) { c.output_shapes = {}; })), std::invalid_argument);
  EXPECT_THROW(k({a}, with([](KernelCall& c) {
                   c.output_dtypes = {float32, int32};
                 })),
               std::invalid_argument);
  EXPECT_THROW(k({a}, with([](KernelCall& c) {
                   c.threadgroup = {1024, 2, 1};
                 })),
               std::invalid_argument);
  EXPECT_THROW(k({a}, with([](KernelCall& c) {
                   c.threadgroup = {0, 1, 1};
                 })),
               std::invalid_argument);
  EXPECT_THROW(k({a}, with([](KernelCall& c) { c.grid = {-1, 1, 1}; })), std::invalid_argument);
  EXPECT_THROW(dtype_from_name("float128"), std::invalid_argument);
  EXPECT_THROW(metal_kernel("clash", {"a"}, {"a"}, "a[0] = 1;")({a}, ok), std::invalid_argument);
  EXPECT_THROW(metal_kernel("none", {"a"}, {}, "a[0] = 1;"), std::invalid_argument);
  // Still usable afterwards.
  expect_equal(k({a}, ok)[0], {1});
}

TEST(MetalKernel, ZeroGridRunsNothing) {
  auto k = metal_kernel("zero", {"a"}, {"out"}, "out[0] = a[0] + 100;");
  Array a = Array::from_doubles({1}, {1}, float32, Device::cpu());
  KernelCall call;
  call.output_shapes = {{1}};
  call.output_dtypes = {float32};
  call.grid = {0, 1, 1};
  call.threadgroup = {32, 1, 1};
  call.init_value = 5.0;
  call.device = Device::cpu();
  expect_equal(k({a}, call)[0], {5});
}

TEST(MetalKernel, DiskCacheServesAFreshKernelObject) {
  // A second kernel object with identical source finds the compiled library (memory or disk).
  const char* body = "out[thread_position_in_grid.x] = inp[thread_position_in_grid.x] - 7;";
  Array x = Array::from_doubles({10, 20}, {2}, float32, Device::cpu());
  KernelCall call;
  call.output_shapes = {{2}};
  call.output_dtypes = {float32};
  call.grid = {2, 1, 1};
  call.threadgroup = {2, 1, 1};
  call.device = Device::cpu();
  expect_equal(metal_kernel("cached", {"inp"}, {"out"}, body)({x}, call)[0], {3, 13});
  expect_equal(metal_kernel("cached", {"inp"}, {"out"}, body)({x}, call)[0], {3, 13});
}

}  // namespace

namespace {
TEST(MetalKernel, NvrtcCompileErrorPointsAtUserLine) {
  auto k = metal_kernel("broken_cuda", {"inp"}, {"out"}, R"(
    uint elem = thread_position_in_grid.x;
    out[elem] = inp[elem] + not_declared_anywhere;
)");
  Array x = Array::from_doubles({1, 2}, {2}, float32, Device::cpu());
  KernelCall call;
  call.output_shapes = {{2}};
  call.output_dtypes = {float32};
  call.grid = {2, 1, 1};
  call.threadgroup = {2, 1, 1};
  try {
    std::string skipped = conformance::nvrtc_compile(k, {x}, call);
    if (!skipped.empty()) GTEST_SKIP() << skipped;
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("body line 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not_declared_anywhere"), std::string::npos) << e.what();
  }
}
}  // namespace

namespace {
// Every device global in a module costs the driver time when it loads the module (about 3 us each
// on an H200, scripts/experiments/module_load.py); NVRTC emits one for each static constexpr
// member or variable template instantiated, so the prelude keeps its own traits in functions and
// enumerators. A small kernel's PTX declares at most integral_constant's two.
TEST(MetalKernel, SmallKernelHasAlmostNoDeviceGlobals) {
  std::string why;
  if (!gpu_compiler_available(&why)) GTEST_SKIP() << why;
  auto k = metal_kernel("few_globals", {"inp"}, {"out"}, examples::kExpSource);
  Array x = Array::from_doubles({1, 2, 3, 4}, {4}, float32, Device::cpu());
  KernelCall call;
  call.output_shapes = {{4}};
  call.output_dtypes = {float32};
  call.grid = {4, 1, 1};
  call.threadgroup = {4, 1, 1};
  call.template_args = {{"T", float32}};
  kernel::SourceMap map;
  auto tr = kernel::call_gpu_translation(k, {x}, call, &map);
  std::string ptx = kernel::compile_ptx(tr, "safe", map, "sm_90");
  int globals = 0;
  std::string listed;
  for (size_t p = 0; (p = ptx.find("\n.global", p)) != std::string::npos; ++p) {
    ++globals;
    listed += ptx.substr(p, ptx.find('\n', p + 1) - p);
  }
  EXPECT_LE(globals, 2) << listed;
  EXPECT_NE(ptx.find(".entry alloy_entry_0"), std::string::npos);
}

TEST(MetalKernel, GpuRequestWithoutGpuIsInvalidArgument) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present: the no-GPU error cannot occur";
  auto k = metal_kernel("nogpu", {"a"}, {"out"}, "out[0] = a[0];");
  KernelCall call;
  call.output_shapes = {{1}};
  call.output_dtypes = {float32};
  call.device = Device::gpu();
  EXPECT_THROW(k({Array::from_doubles({1}, {1}, float32, Device::cpu())}, call),
               std::invalid_argument);
}

// Errors that only the GPU can raise; they run on the GPU machine (scripts/device-test.sh).
TEST(MetalKernel, GpuOnlyErrors) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU: these errors are raised on the GPU only";
  auto k = metal_kernel("f64", {"a"}, {"out"}, "out[0] = a[0];");
  KernelCall call;
  call.output_shapes = {{1}};
  call.output_dtypes = {float32};
  call.device = Device::gpu();
  // Metal has no double.
  EXPECT_THROW(k({Array::from_doubles({1}, {1}, float64, Device::cpu())}, call),
               std::invalid_argument);
}
}  // namespace
