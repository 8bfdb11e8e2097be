// Export and import (src/transforms): tracing into a tape and replaying it, Alloy's FlatBuffers
// format (views + kernels, several traces, keyword arguments, shapeless), trust, and bad files.
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "alloy/alloy.h"
#include "alloy/export.h"
#include "core/array_node.h"
#include "core/primitive.h"
#include "example_kernels.h"
#include "example_references.h"
#include "random_values.h"
#include "transforms/export_impl.h"
#include "transforms/kernel_spec.h"
#include "transforms/trace.h"

namespace alloy {
namespace {

namespace fs = std::filesystem;

std::vector<double> random_values(size_t n, uint64_t seed) {
  return testing::random_values(n, seed, 2, 64);
}

std::string temp_path(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("alloy-export-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

using E = ShapeExpr;

// out = exp(inp) * scale, one thread per element; geometry and output shape are expressions of
// the input's shape, so the kernel follows new sizes.
MetalKernel exp_scale_kernel() {
  return metal_kernel("exp_scale", {"inp", "scale"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = T(metal::exp(float(inp[i])) * float(scale[0]));)");
}

std::vector<Array> call_exp_scale(const Array& x, const Array& scale) {
  KernelCall call;
  call.output_dtypes = {float32};
  call.grid_expr = DimsExpr{E::size(0), 1, 1};
  call.threadgroup_expr = DimsExpr{E::min(E::size(0), 64), 1, 1};
  call.output_shape_exprs = {{E::dim(0, 0), E::dim(0, 1)}};
  call.template_args = {{"T", float32}};
  call.device = Device::cpu();
  return exp_scale_kernel()({x, scale}, call);
}

// f(x) = (kernel(x[:, ::2]^T ... )): views feeding a kernel, a captured constant, views after.
Args views_and_kernel(const Args& a, const Array& scale) {
  Array v = a[0].slice({{}, {std::nullopt, std::nullopt, 2}}).transpose();  // (m/2, n)
  Array k = call_exp_scale(v, scale)[0];                                    // contiguous copy in
  return {k.transpose(), k.astype(float64)};
}

// The float64 reference of views_and_kernel for x of shape (n, m).
std::vector<std::vector<double>> reference(const std::vector<double>& x, int64_t n, int64_t m,
                                           double scale) {
  int64_t h = (m + 1) / 2;
  std::vector<double> k(h * n);  // (h, n)
  for (int64_t r = 0; r < h; ++r)
    for (int64_t c = 0; c < n; ++c)
      k[r * n + c] = static_cast<float>(std::exp(static_cast<float>(x[c * m + 2 * r])) * scale);
  std::vector<double> kt(n * h);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < h; ++c) kt[r * h + c] = k[c * n + r];
  return {kt, k};
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
}

TEST(Trace, CollectsTheGraphWithConstantsAndInputs) {
  Array scale = Array::from_doubles({1.5}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(32, 1), {4, 8}, float32, Device::cpu());
  auto t = transforms::trace([&](const Args& a) { return views_and_kernel(a, scale); }, {x});
  ASSERT_EQ(t.input_shapes, (std::vector<Shape>{{4, 8}}));
  ASSERT_EQ(t.constants.size(), 1u);  // the captured scale
  EXPECT_EQ(t.constants[0].bytes.size(), 4u);
  std::vector<std::string> names;
  for (auto& op : t.ops) names.push_back(op.primitive->name());
  // slice, transpose, copy (row-contiguous for the kernel), kernel, transpose, reshape, astype
  EXPECT_EQ(names, (std::vector<std::string>{"Slice", "Transpose", "Copy", "CustomKernel",
                                             "Transpose", "AsType"}));
  EXPECT_EQ(t.ops[0].inputs[0].kind, transforms::ValueRef::Kind::input);
  EXPECT_EQ(t.ops[3].inputs[1].kind, transforms::ValueRef::Kind::constant);
  EXPECT_FALSE(x.data() == nullptr);  // the example input itself is not consumed
  transforms::validate(t);
}

TEST(Trace, ReadingValuesWhileTracingIsAClearError) {
  Array x = Array::from_doubles(random_values(8, 2), {8}, float32, Device::cpu());
  try {
    transforms::trace(
        [](const Args& a) {
          double first = a[0].slice({{0, 1, 1}}).item();  // reads an input's value
          return Args{a[0].astype(first > 0 ? float16 : float32)};
        },
        {x});
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("read the values of input 0"), std::string::npos)
        << e.what();
  }
}

TEST(Trace, ReplayOnNewInputsMatchesTheReference) {
  Array scale = Array::from_doubles({0.5}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(24, 3), {4, 6}, float32, Device::cpu());
  auto t = transforms::trace([&](const Args& a) { return views_and_kernel(a, scale); }, {x});
  for (auto [n, m] : {std::pair<int64_t, int64_t>{4, 6}, {3, 10}, {7, 3}}) {
    auto xv = random_values(n * m, 10 + n);
    auto out = transforms::replay(t, {Array::from_doubles(xv, {n, m}, float32, Device::cpu())});
    auto ref = reference(xv, n, m, 0.5);
    EXPECT_EQ(out[0].shape(), (Shape{n, (m + 1) / 2}));
    expect_close(out[0].to_doubles(), ref[0], 1e-6, "transposed kernel output");
    expect_close(out[1].to_doubles(), ref[1], 1e-6, "flattened float64 output");
    EXPECT_EQ(out[1].dtype(), float64);
  }
  // A Reshape keeps its traced target shape: other element counts are a clear error.
  auto r = transforms::trace([](const Args& a) { return Args{a[0].reshape({-1})}; }, {x});
  try {
    transforms::replay(r,
                       {Array::from_doubles(random_values(9, 3), {3, 3}, float32, Device::cpu())});
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reshape an array of 9 elements"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(transforms::replay(t, {Array::from_doubles({1, 2}, {2}, float32, Device::cpu())}),
               std::invalid_argument);  // wrong rank
}

TEST(Export, ViewsAndKernelRoundTripThroughAFile) {
  Array scale = Array::from_doubles({1.25}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(40, 4), {5, 8}, float32, Device::cpu());
  std::string path = temp_path("views_kernel.alloy");
  export_function(path, [&](const Args& a) { return views_and_kernel(a, scale); }, {x});
  ImportOptions opts;
  opts.trust_kernels = true;
  opts.device = Device::cpu();
  auto f = import_function(path, opts);
  EXPECT_EQ(f.format(), "alloy");
  ASSERT_EQ(f.kernels().size(), 1u);
  EXPECT_EQ(f.kernels()[0].name, "exp_scale");
  EXPECT_EQ(f.kernels()[0].sha256.size(), 64u);
  EXPECT_NE(f.kernels()[0].metal_source.find("[[kernel]] void custom_kernel_exp_scale_"),
            std::string::npos);
  auto xv = random_values(40, 5);
  auto out = f({Array::from_doubles(xv, {5, 8}, float32, Device::cpu())});
  auto ref = reference(xv, 5, 8, 1.25);
  expect_close(out[0].to_doubles(), ref[0], 1e-6, "output 0");
  expect_close(out[1].to_doubles(), ref[1], 1e-6, "output 1");
  // Not shapeless: another shape is refused with the file's signatures listed.
  try {
    f({Array::from_doubles(random_values(12, 6), {3, 4}, float32, Device::cpu())});
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(5, 8) float32"), std::string::npos) << e.what();
  }
}

TEST(Export, EveryPrimitiveStateSurvivesTheFile) {
  Array scale = Array::from_doubles({2.0}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(24, 7), {2, 3, 4}, float32, Device::cpu());
  Library lib = compile_library(R"(
kernel void twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  y[i] = 2.0f * x[i];
})");
  auto fn = [&](const Args& a) {
    Array s = a[0].slice({{1, std::nullopt, 1}, {std::nullopt, std::nullopt, -2}});
    Array b = a[0].broadcast_to({2, 2, 3, 4});
    Array st = a[0].as_strided({3, 2}, {1, 4}, 2);
    Array k = call_exp_scale(a[0].reshape({6, 4}), scale)[0];
    Args out{s.contiguous(), b.transpose({3, 2, 1, 0}).astype(float16), st, k};
    // The built-in ops' primitives (src/ops).
    const Array& v = a[0];
    for (auto f : {abs,     negative, sign, square, exp,    expm1,  log,        log1p, sqrt,
                   sin,     cos,      tan,  tanh,   arcsin, arccos, arctan,     sinh,  cosh,
                   sigmoid, erf,      erfc, erfinv, floor,  ceil,   logical_not})
      out.push_back(f(v, {}));
    out.push_back(round(v));
    out.push_back(bitwise_invert(v.astype(int32)));
    for (auto f : {add, subtract, multiply, divide, floor_divide, remainder, power, maximum,
                   minimum, arctan2, logaddexp, equal, not_equal, less, less_equal, greater,
                   greater_equal, logical_and, logical_or})
      out.push_back(f(v, k.reshape({2, 3, 4}), {}));
    out.push_back(bitwise_and(v.astype(int32), v.astype(int32)));
    out.push_back(where(greater(v, k.reshape({2, 3, 4})), v, k.reshape({2, 3, 4})));
    out.push_back(sum(v, 1));
    out.push_back(argmax(v, 2));
    out.push_back(concatenate({v, v}, 1));
    // compile's fused elementwise chains (a compiled function called while tracing replays one).
    out.push_back(
        compile([](const Args& in) { return Args{exp(multiply(in[0], in[0]))}; })({v})[0]);
    // A library kernel call (its library goes into the file).
    LibraryCall lc;
    lc.device = Device::cpu();
    out.push_back(lib("twice", {v, KernelArg::output({2, 3, 4}, float32)}, lc)[0]);
    // Matrix products, quantized ops and the fused row softmax / logsumexp (src/ops).
    out.push_back(matmul(v, swapaxes(v, 1, 2)));
    out.push_back(softmax(v, 2));
    out.push_back(logsumexp(v, 2));
    Array w = broadcast_to(reshape(v, {24, 1}), {24, 64}) + 0.0f;
    auto q = quantize(w, 32, 4);
    out.insert(out.end(), q.begin(), q.end());
    out.push_back(dequantize(q[0], q[1], q[2], 32, 4));
    Array xq = w.slice({{0, 2}});
    out.push_back(quantized_matmul(xq, q[0], q[1], q[2], true, 32, 4));
    out.push_back(gather_qmm(reshape(xq, {2, 1, 64}), reshape(q[0], {1, 24, 8}),
                             reshape(q[1], {1, 24, 2}), reshape(q[2], {1, 24, 2}), std::nullopt,
                             std::nullopt, true, 32, 4));
    out.push_back(stop_gradient(v));  // src/transforms/grad.h
    // Scans, indexing and random bits (src/ops/scan.cpp, indexing.cpp, random.cpp).
    Array idx = Array::from_doubles({2, 0}, {2}, int32, Device::cpu());
    out.push_back(cumsum(v, 1, true, false));
    out.push_back(take(v, idx, 2));
    out.push_back(take_along_axis(v, reshape(idx, {1, 1, 2}), 2));
    out.push_back(put_along_axis(v, reshape(idx, {1, 1, 2}),
                                 Array::from_doubles({5, 6}, {1, 1, 2}, float32), 2));
    out.push_back(scatter_add(v, {idx}, Array::from_doubles({1}, {}, float32), {1}));
    out.push_back(
        slice_update(v, Array::from_doubles({3}, {}, float32), {0, 0, 1}, {2, 3, 4}, {1, 2, 2}));
    out.push_back(random::bits({3}, 4, random::key(1)));
    // The transformer fast ops (src/ops/fast.cpp).
    Array v4 = reshape(v, {1, 2, 3, 4});
    out.push_back(fast::rms_norm(v, std::nullopt, 1e-5f));
    out.push_back(
        fast::layer_norm(v, idx.astype(float32).reshape({2}).broadcast_to({2, 2}).reshape({4}),
                         std::nullopt, 1e-4f));
    out.push_back(fast::rope(v, 4, true, 100.0f, 0.5f, 1));
    out.push_back(fast::scaled_dot_product_attention(v4, v4, v4, 0.5f, "causal"));
    // complex64's parts (src/ops).
    Array z = v.astype(complex64);
    out.push_back(real(z));
    out.push_back(imag(z));
    out.push_back(conjugate(z));
    return out;
  };
  auto t = transforms::trace(fn, {x});
  std::string path = temp_path("all_primitives.alloy");
  export_function(path, fn, {x});
  auto bytes = read_bytes(path);
  auto impl = transforms::load_exported(bytes.data(), bytes.size());
  ASSERT_EQ(impl->entries.size(), 1u);
  const auto& back = impl->entries[0].trace;
  ASSERT_EQ(back.ops.size(), t.ops.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < t.ops.size(); ++i) {
    EXPECT_TRUE(back.ops[i].primitive->is_equivalent(*t.ops[i].primitive)) << i;
    EXPECT_EQ(back.ops[i].primitive->state(), t.ops[i].primitive->state()) << i;
    EXPECT_EQ(back.ops[i].inputs, t.ops[i].inputs) << i;
    seen.insert(t.ops[i].primitive->name());
  }
  // Every registered primitive but the device move (it needs a GPU to appear in a trace).
  for (auto& name : registered_primitives()) {
    if (name != "ToDevice") {
      EXPECT_TRUE(seen.count(name)) << name << " is not covered";
    }
  }
}

TEST(Export, ShapelessKernelFollowsThreeSizes) {
  Array scale = Array::from_doubles({0.75}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(16, 8), {2, 8}, float32, Device::cpu());
  std::string path = temp_path("shapeless.alloy");
  export_function(
      path, [&](const Args& a) { return views_and_kernel(a, scale); }, {x},
      /*shapeless=*/true);
  ImportOptions opts;
  opts.trust_kernels = true;
  opts.device = Device::cpu();
  auto f = import_function(path, opts);
  EXPECT_TRUE(f.shapeless());
  for (auto [n, m] : {std::pair<int64_t, int64_t>{3, 5}, {17, 40}, {64, 129}}) {
    auto xv = random_values(n * m, 20 + m);
    auto out = f({Array::from_doubles(xv, {n, m}, float32, Device::cpu())});
    auto ref = reference(xv, n, m, 0.75);
    expect_close(out[0].to_doubles(), ref[0], 1e-6, "shapeless output 0");
    expect_close(out[1].to_doubles(), ref[1], 1e-6, "shapeless output 1");
  }
}

// A shapeless file is replayed without the function: a trace holding shapes of its call (here
// a reshape to the traced size) cannot be written shapeless (before, the import replayed it on
// other shapes with the traced target).
TEST(Export, ShapelessRefusesATraceHoldingTheCallsShapes) {
  Array x = Array::from_doubles(random_values(6, 3), {2, 3}, float32, Device::cpu());
  auto flatten = [](const Args& a) { return Args{a[0].reshape({a[0].size()})}; };
  std::string path = temp_path("shapeless_reshape.alloy");
  try {
    export_function(path, flatten, {x}, /*shapeless=*/true);
    FAIL() << "exported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("Reshape holds shapes of the call"), std::string::npos)
        << e.what();
  }
  export_function(path, flatten, {x}, /*shapeless=*/false);  // per shape: fine
  EXPECT_EQ(import_function(path, ImportOptions{}).shapeless(), false);
}

TEST(Export, ShapelessConstantGridKernelRefusesOtherShapes) {
  Array scale = Array::from_doubles({1.0}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(16, 16), {16}, float32, Device::cpu());
  auto fn = [&](const Args& a) {
    return Args{exp_scale_kernel()({a[0], scale}, {a[0].shape()}, {float32}, {16, 1, 1}, {16, 1, 1},
                                   {{"T", float32}}, std::nullopt, false, Device::cpu())[0]};
  };
  std::string path = temp_path("constant_grid.alloy");
  export_function(path, fn, {x}, /*shapeless=*/true);
  ImportOptions opts;
  opts.trust_kernels = true;
  opts.device = Device::cpu();
  auto f = import_function(path, opts);
  auto xv = random_values(16, 17);
  auto same = f({Array::from_doubles(xv, {16}, float32, Device::cpu())})[0].to_doubles();
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(same[i], std::exp(xv[i]), 1e-5 * std::exp(xv[i]));
  try {
    f({Array::from_doubles(random_values(32, 18), {32}, float32, Device::cpu())});
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_EQ(e.kernel(), "exp_scale");
    EXPECT_NE(std::string(e.what()).find("constant grid"), std::string::npos) << e.what();
  }
}

TEST(Export, SeveralTracesAndKeywordArguments) {
  std::string path = temp_path("kwargs.alloy");
  auto ex = exporter(path, [](const Args& a, const Kwargs& kw) {
    Array y = kw.at("y");
    return Args{a[0].transpose().astype(y.dtype()), y.slice({{1, std::nullopt, 1}})};
  });
  ex({Array::from_doubles(random_values(6, 9), {2, 3}, float32, Device::cpu())},
     {{"y", Array::from_doubles(random_values(4, 10), {4}, float16, Device::cpu())}});
  ex({Array::from_doubles(random_values(6, 9), {3, 2}, int32, Device::cpu())},
     {{"y", Array::from_doubles(random_values(5, 10), {5}, float32, Device::cpu())}});
  EXPECT_THROW(ex({Array::from_doubles(random_values(6, 9), {3, 2}, int32, Device::cpu())},
                  {{"y", Array::from_doubles(random_values(5, 10), {5}, float32, Device::cpu())}}),
               std::invalid_argument);                         // the same signature twice
  auto f = import_function(path, {false, {}, Device::cpu()});  // no kernels: no consent needed
  for (auto [xd, yd, xs, ys] :
       {std::tuple{float32, float16, Shape{2, 3}, int64_t{4}}, {int32, float32, Shape{3, 2}, 5}}) {
    auto xv = random_values(6, 30), yv = random_values(ys, 31);
    auto out = f({Array::from_doubles(xv, xs, xd, Device::cpu())},
                 {{"y", Array::from_doubles(yv, {ys}, yd, Device::cpu())}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].dtype(), yd);
    EXPECT_EQ(out[0].shape(), (Shape{xs[1], xs[0]}));
    auto got = out[0].to_doubles();
    for (int64_t r = 0; r < xs[1]; ++r)
      for (int64_t c = 0; c < xs[0]; ++c) {
        double want = xv[c * xs[1] + r];
        if (xd == int32) want = std::trunc(want);  // from_doubles converts with a C cast
        EXPECT_NEAR(got[r * xs[0] + c], want, 1e-3);
      }
    expect_close(out[1].to_doubles(), std::vector<double>(yv.begin() + 1, yv.end()), 1e-3, "y");
  }
  EXPECT_THROW(f({Array::from_doubles(random_values(6, 9), {2, 3}, float32, Device::cpu())}),
               std::invalid_argument);  // the keyword argument is missing
}

TEST(Export, KernelsNeedConsent) {
  Array scale = Array::from_doubles({1.0}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(16, 11), {4, 4}, float32, Device::cpu());
  std::string path = temp_path("trust.alloy");
  export_function(path, [&](const Args& a) { return views_and_kernel(a, scale); }, {x});
  std::string hash = transforms::kernel_sha256(exp_scale_kernel().spec());
  try {
    import_function(path);
    FAIL() << "expected UntrustedKernels";
  } catch (const UntrustedKernels& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("exp_scale"), std::string::npos) << msg;
    EXPECT_NE(msg.find(hash), std::string::npos) << msg;
    EXPECT_NE(msg.find("trust_kernels"), std::string::npos) << msg;
  }
  ImportOptions wrong;
  wrong.allowed_kernels = {std::string(64, '0')};
  EXPECT_THROW(import_function(path, wrong), UntrustedKernels);
  ImportOptions allowed;
  allowed.allowed_kernels = {hash};
  allowed.device = Device::cpu();
  auto f = import_function(path, allowed);
  auto xv = random_values(16, 12);
  expect_close(f({Array::from_doubles(xv, {4, 4}, float32, Device::cpu())})[1].to_doubles(),
               reference(xv, 4, 4, 1.0)[1], 1e-6, "allowed by hash");
  // The listing needs no consent.
  std::string text = describe_exported_function(path);
  EXPECT_NE(text.find(hash), std::string::npos) << text;
  EXPECT_NE(text.find("CustomKernel(exp_scale) x1"), std::string::npos) << text;
}

TEST(Export, RunsOnTheGpuWhenImportedThere) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU: device remapping to the GPU needs one";
  Array scale = Array::from_doubles({1.5}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(40, 13), {5, 8}, float32, Device::cpu());
  std::string path = temp_path("gpu.alloy");
  export_function(path, [&](const Args& a) { return views_and_kernel(a, scale); }, {x});
  ImportOptions opts;
  opts.trust_kernels = true;
  opts.device = Device::gpu();
  auto f = import_function(path, opts);
  auto xv = random_values(40, 14);
  auto out = f({Array::from_doubles(xv, {5, 8}, float32, Device::cpu())});
  EXPECT_EQ(out[0].device().type, Device::Type::gpu);
  expect_close(out[0].to_doubles(), reference(xv, 5, 8, 1.5)[0], 1e-5, "GPU output");
}

// grid_sample forward and backward (atomic outputs, init_value) inside one exported function,
// geometry as expressions of the input shapes; run where it is imported: the CPU here, and the
// GPU too when there is one (scripts/device-test.sh runs this on CUDA).
Args grid_sample_fwd_bwd(const Args& a) {
  const Array &x = a[0], &grid = a[1], &cot = a[2];
  auto fwd = metal_kernel("grid_sample", {"x", "grid"}, {"out"}, examples::kGridSampleSource);
  auto bwd = metal_kernel("grid_sample_grad", {"x", "grid", "cotangent"}, {"x_grad", "grid_grad"},
                          examples::kGridSampleGradSource, "", true, /*atomic_outputs=*/true);
  KernelCall f;
  f.output_dtypes = {float32};
  f.template_args = {{"T", float32}};
  f.grid_expr = DimsExpr{E::size(1) / 2 * E::dim(0, 3), 1, 1};
  f.threadgroup_expr = DimsExpr{256, 1, 1};
  f.output_shape_exprs = {{E::dim(1, 0), E::dim(1, 1), E::dim(1, 2), E::dim(0, 3)}};
  f.device = x.device();
  KernelCall b;
  b.output_dtypes = {float32, float32};
  b.grid_expr = DimsExpr{E::size(2), 1, 1};
  b.threadgroup_expr = DimsExpr{256, 1, 1};
  b.output_shape_exprs = {{E::dim(0, 0), E::dim(0, 1), E::dim(0, 2), E::dim(0, 3)},
                          {E::dim(1, 0), E::dim(1, 1), E::dim(1, 2), E::dim(1, 3)}};
  b.init_value = 0.0;
  b.device = x.device();
  Array out = fwd({x, grid}, f)[0];
  auto grads = bwd({x, grid, cot}, b);
  return {out, grads[0], grads[1]};
}

TEST(Export, GridSampleForwardAndBackwardShapeless) {
  using examples::GridSampleDims;
  auto make = [](GridSampleDims d, uint64_t seed) {
    auto xs = random_values(d.B * d.H * d.W * d.C, seed);
    auto gs = random_values(d.B * d.gH * d.gW * 2, seed + 1);
    for (auto& g : gs) g *= 0.55;  // in [-1.1, 1.1]: some taps fall outside the image
    auto cs = random_values(d.B * d.gH * d.gW * d.C, seed + 2);
    return std::tuple{xs, gs, cs};
  };
  auto arrays = [](GridSampleDims d, const std::vector<double>& xs, const std::vector<double>& gs,
                   const std::vector<double>& cs, Device dev) {
    return Args{Array::from_doubles(xs, {d.B, d.H, d.W, d.C}, float32, dev),
                Array::from_doubles(gs, {d.B, d.gH, d.gW, 2}, float32, dev),
                Array::from_doubles(cs, {d.B, d.gH, d.gW, d.C}, float32, dev)};
  };
  GridSampleDims traced{2, 5, 6, 32, 3, 4};
  auto [xs, gs, cs] = make(traced, 40);
  std::string path = temp_path("grid_sample.alloy");
  export_function(path, grid_sample_fwd_bwd, arrays(traced, xs, gs, cs, Device::cpu()),
                  /*shapeless=*/true);
  std::vector<Device> devices{Device::cpu()};
  if (gpu_available()) devices.push_back(Device::gpu());
  for (Device dev : devices) {
    ImportOptions opts;
    opts.trust_kernels = true;
    opts.device = dev;
    auto f = import_function(path, opts);
    ASSERT_EQ(f.kernels().size(), 2u);
    for (GridSampleDims d : {traced, GridSampleDims{1, 7, 4, 64, 5, 2}}) {
      auto [x, g, c] = make(d, 50 + d.H);
      auto out = f(arrays(d, x, g, c, Device::cpu()));
      ASSERT_EQ(out.size(), 3u);
      EXPECT_EQ(out[0].device().type, dev.type);
      std::vector<double> wx, wg;
      examples::grid_sample_grad_ref(x, g, c, d, wx, wg);
      expect_close(out[0].to_doubles(), examples::grid_sample_ref(x, g, d), 1e-5, "forward");
      expect_close(out[1].to_doubles(), wx, 1e-4, "x_grad");
      expect_close(out[2].to_doubles(), wg, 1e-3, "grid_grad");
    }
  }
}

// ---- bad files ---------------------------------------------------------------------------------

std::vector<uint8_t> small_valid_file() {
  Array scale = Array::from_doubles({1.0}, {1}, float32, Device::cpu());
  Array x = Array::from_doubles(random_values(8, 15), {2, 4}, float32, Device::cpu());
  std::string path = temp_path("small.alloy");
  export_function(path, [&](const Args& a) { return views_and_kernel(a, scale); }, {x});
  return read_bytes(path);
}

// Loading must either succeed or raise one of the documented errors.
void expect_clean_load(const std::vector<uint8_t>& b, const std::string& what) {
  try {
    transforms::load_exported(b.data(), b.size());
  } catch (const std::invalid_argument&) {
  } catch (const NotSupported&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": unexpected exception " << e.what();
  }
}

TEST(ExportBadFiles, TruncatedEmptyAndWrongMagic) {
  auto good = small_valid_file();
  ASSERT_NO_THROW(transforms::load_exported(good.data(), good.size()));
  for (size_t n = 0; n < good.size(); n += (n < 64 ? 1 : 7)) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    EXPECT_THROW(transforms::load_exported(cut.data(), cut.size()), std::invalid_argument) << n;
  }
  auto wrong = good;
  std::memcpy(wrong.data() + 4, "XXXX", 4);  // the file identifier
  try {
    transforms::load_exported(wrong.data(), wrong.size());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("neither an Alloy export"), std::string::npos) << e.what();
  }
  std::string path = temp_path("missing.alloy");
  fs::remove(path);
  EXPECT_THROW(import_function(path), std::invalid_argument);
}

TEST(ExportBadFiles, EveryByteFlippedLoadsOrFailsCleanly) {
  auto good = small_valid_file();
  for (size_t i = 0; i < good.size(); ++i)
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      auto b = good;
      b[i] ^= mask;
      expect_clean_load(b, "byte " + std::to_string(i));
    }
}

TEST(ExportBadFiles, WrongFormatVersionIsNamed) {
  auto good = small_valid_file();
  auto impl_bytes = good;
  // format_version is the Function table's first field: find it through the generated accessors.
  const uint8_t* root = impl_bytes.data() + flatbuffers::ReadScalar<uint32_t>(impl_bytes.data());
  int32_t vt = flatbuffers::ReadScalar<int32_t>(root);
  const uint8_t* vtable = root - vt;
  uint16_t field = flatbuffers::ReadScalar<uint16_t>(vtable + 4);  // field 0's offset
  ASSERT_NE(field, 0);
  uint32_t* version = reinterpret_cast<uint32_t*>(const_cast<uint8_t*>(root) + field);
  ASSERT_EQ(*version, 1u);
  *version = 7;
  try {
    transforms::load_exported(impl_bytes.data(), impl_bytes.size());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("format version 7"), std::string::npos) << e.what();
  }
}

// An MLX-style stream written by the test (little-endian, MLX 0.32's layout).
struct MlxWriter {
  std::vector<uint8_t> b;
  template <class T>
  MlxWriter& num(T v) {
    auto* p = reinterpret_cast<uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  MlxWriter& str(const std::string& s) {
    num<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  MlxWriter& shape(const std::vector<int32_t>& s) {
    num<uint64_t>(s.size());
    for (auto d : s) num(d);
    return *this;
  }
  MlxWriter& dtype_f32() { return num<int32_t>(10).num<uint8_t>(4); }
  // header + one function with one float32 input of `shape`, one output id, `tape` entries
  MlxWriter& start(uint64_t tape, std::vector<int32_t> shape = {4}) {
    str("0.32.4").num<int32_t>(1).num<uint8_t>(0).str("");
    num<uint64_t>(0);                   // keyword names
    num<uint64_t>(1).num<uint64_t>(1);  // input ids
    num<uint64_t>(1).shape(shape).dtype_f32();
    num<uint64_t>(1).num<uint64_t>(2);  // output ids
    return num<uint64_t>(tape);
  }
};

TEST(ExportBadFiles, HostileMlxCountsAndUnknownPrimitives) {
  {
    MlxWriter w;
    w.start(uint64_t{1} << 60);  // a tape longer than the file
    EXPECT_THROW(transforms::load_exported(w.b.data(), w.b.size()), std::invalid_argument);
  }
  {
    MlxWriter w;
    w.str("0.32.4").num<int32_t>(1).num<uint8_t>(0).num<uint64_t>(uint64_t{1} << 62);  // metadata
    EXPECT_THROW(transforms::load_exported(w.b.data(), w.b.size()), std::invalid_argument);
  }
  {
    MlxWriter w;
    w.start(2).num<uint64_t>(1).num<uint8_t>(0).num<uint8_t>(0);           // the input
    w.num<uint64_t>(2).num<uint8_t>(1).num<uint64_t>(1).num<uint64_t>(1);  // a primitive on it
    w.num<int32_t>(0).num<int32_t>(0).num<int32_t>(0).str("Erfinv2");
    try {
      transforms::load_exported(w.b.data(), w.b.size());
      FAIL();
    } catch (const NotSupported& e) {
      EXPECT_NE(std::string(e.what()).find("MLX primitive 'Erfinv2'"), std::string::npos)
          << e.what();
    }
  }
  {
    // A constant whose shape asks for 2^40 elements from a few bytes.
    MlxWriter w;
    w.start(1)
        .num<uint64_t>(7)
        .num<uint8_t>(0)
        .num<uint8_t>(1)
        .shape({1 << 20, 1 << 20})
        .dtype_f32();
    EXPECT_THROW(transforms::load_exported(w.b.data(), w.b.size()), std::invalid_argument);
  }
  {
    // A valid MLX stream: a transpose of the input.
    MlxWriter w;
    w.start(2, {2, 3}).num<uint64_t>(1).num<uint8_t>(0).num<uint8_t>(0);
    w.num<uint64_t>(2).num<uint8_t>(1).num<uint64_t>(1).num<uint64_t>(1);
    w.num<int32_t>(0).num<int32_t>(0).num<int32_t>(0).str("Transpose");
    w.num<uint64_t>(2).num<int32_t>(1).num<int32_t>(0);  // axes
    w.num<uint64_t>(0).shape({3, 2}).dtype_f32();        // one output
    auto impl = transforms::load_exported(w.b.data(), w.b.size());
    EXPECT_EQ(impl->format, "mlxfn");
    ASSERT_EQ(impl->entries[0].trace.ops.size(), 1u);
    EXPECT_STREQ(impl->entries[0].trace.ops[0].primitive->name(), "Transpose");
    // Every truncation of it fails cleanly.
    for (size_t n = 0; n < w.b.size(); ++n) {
      std::vector<uint8_t> cut(w.b.begin(), w.b.begin() + n);
      EXPECT_THROW(transforms::load_exported(cut.data(), cut.size()), std::invalid_argument) << n;
    }
  }
}

}  // namespace
}  // namespace alloy
