// Whole Metal libraries (alloy::compile_library): one source with several kernels (a scalar
// elementwise kernel, a templated reduction with two host_name instantiations, dynamic
// [[threadgroup(n)]] memory, shared helpers and structs, a 2-D kernel, an in-place kernel),
// dispatch semantics, dtype placeholders, references: output inference, fallback, check mode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "alloy/alloy.h"
#include "alloy/library.h"
#include "conformance/harness.h"
#include "kernel/library.h"
#include "msl/macros.h"
#include "scoped_env.h"

using namespace alloy;
using conformance::expect_close;
using conformance::expect_equal;
using conformance::for_each_device;
using conformance::random_values;

namespace {

constexpr const char* kLibrarySource = R"(#include <metal_stdlib>
using namespace metal;

// ---- shared helpers and structs ----
struct Affine {
  float scale;
  float shift;
  float apply(float x) const { return x * scale + shift; }
};

inline float softplus(float x) { return x > 20.0f ? x : log(1.0f + exp(x)); }
METAL_FUNC float squash(float x) { return softplus(x) - softplus(-x); }

#define instantiate_kernel(name, func, ...) \
  template [[host_name(name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;

// elementwise with a scalar
[[kernel]] void scale_add(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                          device float* out [[buffer(2)]], constant float& alpha [[buffer(3)]],
                          uint i [[thread_position_in_grid]]) {
  out[i] = alpha * a[i] + b[i];
}

// templated reduction: one threadgroup per row
template <typename T>
[[kernel]] void row_sum(device const T* x [[buffer(0)]], device float* out [[buffer(1)]],
                        constant uint& cols [[buffer(2)]],
                        uint2 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]],
                        uint n [[threads_per_threadgroup]]) {
  threadgroup float partial[1024];
  float acc = 0.0f;
  for (uint c = lid; c < cols; c += n) acc += float(x[group.y * cols + c]);
  partial[lid] = acc;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = 1; s < n; s <<= 1) {
    if (lid % (2 * s) == 0 && lid + s < n) partial[lid] += partial[lid + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (lid == 0) out[group.y] = partial[0];
}
template [[host_name("row_sum_float")]] [[kernel]] decltype(row_sum<float>) row_sum<float>;
instantiate_kernel("row_sum_half", row_sum, half)

// dynamic threadgroup memory: each threadgroup reverses its block
[[kernel]] void reverse_blocks(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                               threadgroup float* tile [[threadgroup(0)]],
                               uint gid [[thread_position_in_grid]],
                               uint lid [[thread_position_in_threadgroup]],
                               uint n [[threads_per_threadgroup]]) {
  tile[lid] = x[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[gid] = tile[n - 1 - lid];
}

// shared helpers and a struct parameter
[[kernel]] void affine_softplus(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                                constant Affine& p [[buffer(2)]],
                                uint i [[thread_position_in_grid]]) {
  y[i] = softplus(p.apply(x[i]));
}
kernel void squash_all(device const float* x, device float* y, uint i [[thread_position_in_grid]]) {
  y[i] = squash(x[i]);
}

// every thread of the grid counts itself
kernel void count_threads(device atomic_uint* counter [[buffer(0)]],
                          device uint* hits [[buffer(1)]], uint gid [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
  hits[gid] += 1u;
}

// 2-D grid, uint scalars
kernel void transpose2d(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        constant uint& rows [[buffer(2)]], constant uint& cols [[buffer(3)]],
                        uint2 pos [[thread_position_in_grid]]) {
  y[pos.x * rows + pos.y] = x[pos.y * cols + pos.x];
}

// in place
kernel void clamp_inplace(device int* x [[buffer(0)]], constant int& lo [[buffer(1)]],
                          constant int& hi [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  x[i] = clamp(x[i], lo, hi);
}

// Samplers are not supported by Alloy: this kernel falls back to its reference.
[[kernel]] void sampled_double(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                               uint i [[thread_position_in_grid]]) {
  constexpr sampler s(coord::normalized, filter::linear);
  y[i] = 2.0f * x[i];
}
)";

Array from(const std::vector<double>& v, Shape shape, Dtype t, Device dev) {
  return Array::from_doubles(v, std::move(shape), t, dev);
}
Array nan_like(const Shape& shape, Device dev) {
  return full(shape, std::nan(""), float32, dev);
}

// y = 2 x, for sampled_double (the kernel that cannot run).
std::vector<Array> double_reference(const std::vector<Array>& args) {
  auto x = args[0].to_doubles();
  for (auto& v : x) v *= 2;
  return {Array::from_doubles(x, args[0].shape(), float32, args[0].device())};
}

LibraryOptions options_named(const std::string& name) {
  LibraryOptions o;
  o.name = name;
  o.references["sampled_double"] = double_reference;
  return o;
}

Library make_library(const std::string& name = "test_library") {
  return compile_library(kLibrarySource, options_named(name));
}

LibraryCall dispatch(Dims threads, Dims group, Device dev) {
  LibraryCall c;
  c.threads = threads;
  c.group_size = group;
  c.device = dev;
  return c;
}

// Captures warnings for the test's duration.
struct WarningCapture {
  std::vector<std::string> messages;
  std::function<void(const std::string&)> previous;
  WarningCapture() {
    previous = set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~WarningCapture() { set_warning_handler(previous); }
};

// ---- reflection ------------------------------------------------------------------------------

TEST(Library, KernelNamesAndReflection) {
  Library lib = make_library();
  std::vector<std::string> want = {
      "scale_add",  "row_sum_float", "row_sum_half", "reverse_blocks", "affine_softplus",
      "squash_all", "count_threads", "transpose2d",  "clamp_inplace",  "sampled_double"};
  EXPECT_EQ(lib.kernel_names(), want);

  const KernelInfo& sa = lib.kernel_info("scale_add");
  ASSERT_EQ(sa.params.size(), 5u);
  EXPECT_EQ(sa.params[0].kind, KernelParamInfo::Kind::buffer);
  EXPECT_EQ(sa.params[0].dtype, float32);
  EXPECT_FALSE(sa.params[0].writable);
  EXPECT_EQ(sa.params[0].type, "device const float*");  // as declared
  EXPECT_TRUE(sa.params[2].writable);
  EXPECT_EQ(sa.params[3].kind, KernelParamInfo::Kind::scalar);
  EXPECT_EQ(sa.params[3].name, "alpha");
  EXPECT_EQ(sa.params[3].index, 3);
  EXPECT_EQ(sa.params[4].kind, KernelParamInfo::Kind::attribute);
  EXPECT_EQ(sa.params[4].attribute, "thread_position_in_grid");

  // Template arguments are substituted: row_sum_half reads half.
  const KernelInfo& rh = lib.kernel_info("row_sum_half");
  EXPECT_EQ(rh.function, "row_sum<half>");
  EXPECT_EQ(rh.params[0].dtype, float16);
  EXPECT_EQ(rh.params[0].type, "device const half*");
  EXPECT_EQ(lib.kernel_info("row_sum_float").params[0].dtype, float32);

  const KernelInfo& rb = lib.kernel_info("reverse_blocks");
  EXPECT_EQ(rb.params[2].kind, KernelParamInfo::Kind::threadgroup);
  EXPECT_EQ(rb.params[2].index, 0);

  // A struct parameter takes any array (its bytes); atomics take their element type.
  const KernelInfo& af = lib.kernel_info("affine_softplus");
  EXPECT_EQ(af.params[2].kind, KernelParamInfo::Kind::scalar);
  EXPECT_EQ(af.params[2].element_type, "Affine");
  EXPECT_FALSE(af.params[2].dtype.has_value());
  EXPECT_EQ(lib.kernel_info("count_threads").params[0].dtype, uint32);
  EXPECT_TRUE(lib.kernel_info("count_threads").params[0].writable);
  // Implicit buffer indices (no [[buffer(n)]]) follow declaration order.
  EXPECT_EQ(lib.kernel_info("squash_all").params[1].index, 1);

  EXPECT_NE(sa.signature().find("constant float& alpha [[buffer(3)]]"), std::string::npos)
      << sa.signature();
}

TEST(Library, UnknownKernelListsTheKernels) {
  Library lib = make_library();
  try {
    lib("scale_ad", {});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("no kernel named 'scale_ad'"), std::string::npos) << m;
    EXPECT_NE(m.find("scale_add, row_sum_float"), std::string::npos) << m;
  }
  EXPECT_FALSE(lib.has_kernel("nope"));
  EXPECT_THROW(lib.kernel("nope"), std::invalid_argument);
}

// ---- the kernels -----------------------------------------------------------------------------

TEST(Library, ElementwiseWithScalar) {
  Library lib = make_library();
  for_each_device([&](Device dev) {
    const int n = 1000;  // not a multiple of the group: a partial last threadgroup
    auto av = random_values(n, -2, 2, 1), bv = random_values(n, -2, 2, 2);
    Array a = from(av, {n}, float32, dev), b = from(bv, {n}, float32, dev);
    Array out = nan_like({n}, dev);
    auto r = lib("scale_add", {a, b, out, 1.5}, dispatch({n, 1, 1}, {256, 1, 1}, dev));
    ASSERT_EQ(r.size(), 1u);
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = 1.5 * av[i] + bv[i];
    expect_close(r[0], want);
    // Copy-on-write: the array given for `out` is not modified.
    EXPECT_TRUE(std::isnan(out.to_doubles()[0]));
    // Default dispatch: threads = size of the first array argument.
    LibraryCall c;
    c.device = dev;
    expect_close(lib("scale_add", {a, b, out, 1.5f}, c)[0], want);
    // A scalar may be a 0-d array of its dtype; an int converts to the float parameter.
    expect_close(lib("scale_add", {a, b, out, Array(1.5f)}, c)[0], want);
    for (int i = 0; i < n; ++i) want[i] = 2 * av[i] + bv[i];
    expect_close(lib("scale_add", {a, b, out, 2}, c)[0], want);
  });
}

TEST(Library, TemplatedReductionTwoInstantiations) {
  Library lib = make_library();
  for_each_device([&](Device dev) {
    const int rows = 5, cols = 300;  // more columns than threads: each thread loops
    auto xv = random_values(rows * cols, -1, 1, 3);
    for (Dtype t : {float32, float16}) {
      SCOPED_TRACE(std::string(dtype_name(t)));
      Array x = from(xv, {rows, cols}, t, dev);
      auto xr = x.to_doubles();  // as rounded to t
      std::vector<double> want(rows, 0.0);
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) want[r] += xr[r * cols + c];
      std::string name = t == float32 ? "row_sum_float" : "row_sum_half";
      for (int group : {256, 96}) {  // a power of two and not
        auto out = lib(name, {x, nan_like({rows}, dev), static_cast<uint32_t>(cols)},
                       dispatch({group, rows, 1}, {group, 1, 1}, dev))[0];
        expect_close(out, want, 1e-5, 1e-5);
      }
    }
  });
}

TEST(Library, DynamicThreadgroupMemory) {
  Library lib = make_library();
  for_each_device([&](Device dev) {
    const int n = 1000, g = 128;  // last group partial (104 threads)
    Array x = from(random_values(n, -1, 1, 4), {n}, float32, dev);
    auto xv = x.to_doubles();  // as rounded to float32
    LibraryCall c = dispatch({n, 1, 1}, {g, 1, 1}, dev);
    c.threadgroup_memory[0] = g * sizeof(float);
    auto y = lib("reverse_blocks", {x, nan_like({n}, dev)}, c)[0];
    std::vector<double> want(n);
    for (int b = 0; b < n; b += g) {
      int m = std::min(g, n - b);
      for (int l = 0; l < m; ++l) want[b + l] = xv[b + m - 1 - l];
    }
    expect_close(y, want, 0, 0);
    // The size is required, and only for [[threadgroup(n)]] parameters the kernel has.
    LibraryCall missing = dispatch({n, 1, 1}, {g, 1, 1}, dev);
    try {
      lib("reverse_blocks", {x, nan_like({n}, dev)}, missing);
      FAIL() << "expected an error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("threadgroup_memory[0]"), std::string::npos) << e.what();
    }
    c.threadgroup_memory[1] = 64;
    EXPECT_THROW(lib("reverse_blocks", {x, nan_like({n}, dev)}, c), std::invalid_argument);
  });
}

TEST(Library, SharedHelpersAndStructParameter) {
  Library lib = make_library();
  for_each_device([&](Device dev) {
    const int n = 777;
    auto xv = random_values(n, -3, 3, 5);
    Array x = from(xv, {n}, float32, dev);
    // `constant Affine& p`: the struct's bytes, here two floats {scale, shift}.
    Array p = from({0.5, -0.25}, {2}, float32, dev);
    auto y =
        lib("affine_softplus", {x, nan_like({n}, dev), p}, dispatch({n, 1, 1}, {64, 1, 1}, dev))[0];
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = std::log1p(std::exp(0.5 * xv[i] - 0.25));
    expect_close(y, want, 1e-5, 1e-6);
    auto z = lib("squash_all", {x, nan_like({n}, dev)}, dispatch({n, 1, 1}, {64, 1, 1}, dev))[0];
    expect_close(z, xv, 1e-4, 1e-5);  // softplus(x) - softplus(-x) = x
  });
}

TEST(Library, TwoDimensionalGridAndUintScalars) {
  Library lib = make_library();
  for_each_device([&](Device dev) {
    const int rows = 37, cols = 53;
    Array x = from(random_values(rows * cols, -1, 1, 6), {rows, cols}, float32, dev);
    auto xv = x.to_doubles();
    auto y = lib("transpose2d", {x, nan_like({cols, rows}, dev), rows, cols},
                 dispatch({cols, rows, 1}, {16, 8, 1}, dev))[0];
    EXPECT_EQ(y.shape(), (Shape{cols, rows}));
    std::vector<double> want(rows * cols);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) want[c * rows + r] = xv[r * cols + c];
    expect_equal(y, want);
  });
}

TEST(Library, InPlaceKernelReturnsTheNewBuffer) {
  Library lib = make_library();
  for_each_device([&](Device dev) {
    std::vector<double> xv = {-7, -3, 0, 2, 5, 9, 100, -100};
    Array x = from(xv, {8}, int32, dev);
    auto r = lib("clamp_inplace", {x, -3, 5}, dispatch({8, 1, 1}, {8, 1, 1}, dev));
    ASSERT_EQ(r.size(), 1u);
    expect_equal(r[0], {-3, -3, 0, 2, 5, 5, 5, -3});
    expect_equal(x, xv);  // the input keeps its values
    // Chaining calls: the result feeds the next call (lazy graph).
    auto r2 = lib("clamp_inplace", {r[0], 0, 3}, dispatch({8, 1, 1}, {8, 1, 1}, dev));
    expect_equal(r2[0], {0, 0, 0, 2, 3, 3, 3, 0});
  });
}

// ---- dispatch semantics ----------------------------------------------------------------------

// torch.mps.compile_shader's documented pitfall: `threads` is the total number of threads
// (dispatchThreads), not the number of threadgroups.
TEST(Library, ThreadsAreTotalThreadsNotGroups) {
  Library lib = make_library();
  for_each_device([&](Device dev) {
    const int n = 1000;
    Array counter = zeros({1}, uint32, dev);
    Array hits = zeros({n}, uint32, dev);
    auto r = lib("count_threads", {counter, hits}, dispatch({n, 1, 1}, {256, 1, 1}, dev));
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].item(), n);  // exactly n threads ran, not n * 256
    expect_equal(r[1], std::vector<double>(n, 1.0));
    // Passing the number of groups (4) runs 4 threads: elements 4.. stay untouched.
    const int groups = (n + 255) / 256;
    auto p = lib("count_threads", {counter, hits}, dispatch({groups, 1, 1}, {256, 1, 1}, dev));
    EXPECT_EQ(p[0].item(), groups);
    auto h = p[1].to_doubles();
    EXPECT_EQ(h[groups - 1], 1.0);
    EXPECT_EQ(h[groups], 0.0);
    // Zero threads: nothing runs, the buffers come back unchanged.
    auto z = lib("count_threads", {counter, hits}, dispatch({0, 1, 1}, {256, 1, 1}, dev));
    EXPECT_EQ(z[0].item(), 0.0);
  });
}

TEST(Library, DispatchErrors) {
  Library lib = make_library();
  Array a = Array::from_doubles(random_values(16, -1, 1, 7), {16}, float32, Device::cpu());
  auto call = [&](Dims threads, Dims group) {
    return lib("scale_add", {a, a, a, 1.0f}, dispatch(threads, group, Device::cpu()));
  };
  EXPECT_THROW(call({16, 1, 1}, {2048, 1, 1}), std::invalid_argument);
  EXPECT_THROW(call({16, 1, 1}, {64, 32, 1}), std::invalid_argument);
  EXPECT_THROW(call({16, 1, 1}, {0, 1, 1}), std::invalid_argument);
  EXPECT_THROW(call({-1, 1, 1}, {16, 1, 1}), std::invalid_argument);
  // A kernel without array arguments needs `threads`.
  Library lib2 = compile_library(R"(
    kernel void fill(device float* out [[buffer(0)]], constant float& v [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) { out[i] = v; })");
  LibraryCall c;
  c.device = Device::cpu();
  EXPECT_THROW(lib2("fill", {KernelArg(), 1.0f}, c), std::invalid_argument);
  c.threads = {16, 1, 1};
  auto out = lib2("fill", {KernelArg::output({16}, float32), 2.5f}, c)[0];
  expect_equal(out, std::vector<double>(16, 2.5));
}

// ---- argument errors -------------------------------------------------------------------------

TEST(Library, ArgumentErrorsListWhatTheKernelExpects) {
  Library lib = make_library();
  Device cpu = Device::cpu();
  Array f32 = zeros({8}, float32, cpu), f16 = zeros({8}, float16, cpu);
  LibraryCall c;
  c.device = cpu;
  auto message = [&](const std::vector<KernelArg>& args) -> std::string {
    try {
      lib("scale_add", args, c);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  std::string m = message({f32, f32});
  EXPECT_NE(m.find("takes 4 argument(s), 2 given"), std::string::npos) << m;
  EXPECT_NE(m.find("alpha (constant float&): a number or 0-d array of float32"), std::string::npos)
      << m;
  m = message({f32, f16, f32, 1.0f});
  EXPECT_NE(m.find("argument 2 ('b', device const float*)"), std::string::npos) << m;
  EXPECT_NE(m.find("expected an array of float32, got an array of float16"), std::string::npos)
      << m;
  EXPECT_NE(m.find("signature: scale_add("), std::string::npos) << m;
  m = message({f32, 2.0f, f32, 1.0f});
  EXPECT_NE(m.find("got a number"), std::string::npos) << m;
  m = message({f32, f32, f32, f32});  // 8 elements for a scalar
  EXPECT_NE(m.find("got an array of 8 elements"), std::string::npos) << m;
  // Integer scalars: range and integrality are checked.
  auto clamp_message = [&](KernelArg lo) -> std::string {
    try {
      lib("clamp_inplace", {zeros({4}, int32, cpu), lo, 1}, c);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(clamp_message(1.5).find("not an integer"), std::string::npos);
  EXPECT_NE(clamp_message(int64_t{1} << 40).find("does not fit in int"), std::string::npos);
  EXPECT_EQ(clamp_message(-2.0), "");
  auto row_message = [&](KernelArg cols) -> std::string {
    try {
      lib("row_sum_float", {zeros({4}, float32, cpu), zeros({1}, float32, cpu), cols}, c);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(row_message(-1).find("-1 does not fit in uint"), std::string::npos);
  // Missing outputs need a reference.
  m = message({f32, f32, KernelArg(), 1.0f});
  EXPECT_NE(m.find("only a kernel with a reference can infer it"), std::string::npos) << m;
}

// ---- references: output inference, fallback, check mode --------------------------------------

std::vector<Array> scale_add_reference(const std::vector<Array>& args) {
  auto a = args[0].to_doubles(), b = args[1].to_doubles();
  double alpha = args[3].item();
  for (size_t i = 0; i < a.size(); ++i) a[i] = alpha * a[i] + b[i];
  return {Array::from_doubles(a, args[0].shape(), float32, args[0].device())};
}

TEST(Library, ReferenceInfersOmittedOutputs) {
  Library lib = make_library("infer_library");
  lib.set_reference("scale_add", scale_add_reference);
  EXPECT_TRUE(lib.kernel("scale_add").has_reference());
  for_each_device([&](Device dev) {
    const int n = 300;
    auto av = random_values(n, -1, 1, 8), bv = random_values(n, -1, 1, 9);
    Array a = from(av, {n}, float32, dev), b = from(bv, {n}, float32, dev);
    auto r = lib("scale_add", {a, b, KernelArg(), 3.0f}, dispatch({n, 1, 1}, {32, 1, 1}, dev));
    EXPECT_EQ(r[0].shape(), Shape{n});
    EXPECT_EQ(r[0].dtype(), float32);
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = 3 * av[i] + bv[i];
    expect_close(r[0], want);
  });
}

TEST(Library, FallbackRunsTheReferenceOfAnUnsupportedKernel) {
  WarningCapture warnings;
  Library lib = make_library("fallback_library");
  for_each_device([&](Device dev) {
    const int n = 100;
    auto xv = random_values(n, -1, 1, 10);
    Array x = from(xv, {n}, float32, dev);
    for (int rep = 0; rep < 2; ++rep) {
      auto y =
          lib("sampled_double", {x, nan_like({n}, dev)}, dispatch({n, 1, 1}, {32, 1, 1}, dev))[0];
      std::vector<double> want(n);
      for (int i = 0; i < n; ++i) want[i] = 2 * xv[i];
      expect_close(y, want);
      EXPECT_EQ(y.device(), dev);
    }
    // The other kernels of the library still run.
    Array out = nan_like({n}, dev);
    auto r = lib("scale_add", {x, x, out, 1.0f}, dispatch({n, 1, 1}, {32, 1, 1}, dev))[0];
    expect_close(r, [&] {
      std::vector<double> w(n);
      for (int i = 0; i < n; ++i) w[i] = 2 * xv[i];
      return w;
    }());
  });
  // One warning per device, naming the kernel and the reason.
  ASSERT_GE(warnings.messages.size(), 1u);
  EXPECT_LE(warnings.messages.size(), conformance::devices().size());
  EXPECT_NE(warnings.messages[0].find("sampled_double"), std::string::npos);
  EXPECT_NE(warnings.messages[0].find("not supported: samplers"), std::string::npos)
      << warnings.messages[0];
  EXPECT_NE(warnings.messages[0].find("reference"), std::string::npos);

  // Fallback disabled: the kernel's error.
  LibraryCall c = dispatch({4, 1, 1}, {4, 1, 1}, Device::cpu());
  c.fallback = false;
  Array x = zeros({4}, float32, Device::cpu());
  EXPECT_THROW(lib("sampled_double", {x, x}, c), NotSupported);
  // Without a reference, the library fails to build (nothing could run that kernel).
  EXPECT_THROW(compile_library(kLibrarySource), NotSupported);
}

PrecompileOptions on_cpu() {
  PrecompileOptions o;
  o.device = Device::cpu();
  return o;
}

constexpr const char* kBrokenSource = R"(
kernel void good(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
  y[i] = x[i] + 1.0f;
}
kernel void broken(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
  y[i] = no_such_function(x[i]);
}
)";

TEST(Library, FallbackForAKernelThatDoesNotCompile) {
  // Without a reference the compile error is raised, pointing at the user's line: by
  // precompile(), or by the kernel's first evaluation (compilation is lazy); the library's other
  // kernel still runs.
  Library plain = compile_library(kBrokenSource);
  try {
    plain.precompile(on_cpu());
    FAIL() << "expected a compile error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("line 8"), std::string::npos) << e.what();
  }
  for_each_device([&](Device dev) {
    Array x = from({1, 2, 3, 4}, {4}, float32, dev);
    LibraryCall c = dispatch({4, 1, 1}, {4, 1, 1}, dev);
    Array y = plain("broken", {x, nan_like({4}, dev)}, c)[0];
    try {
      y.eval();
      FAIL() << "expected a compile error";
    } catch (const CompileError& e) {
      EXPECT_NE(std::string(e.what()).find("line 8"), std::string::npos) << e.what();
    }
    expect_equal(plain("good", {x, nan_like({4}, dev)}, c)[0], {2, 3, 4, 5});
  });
  WarningCapture warnings;
  LibraryOptions o;
  o.name = "broken_library";
  o.references["broken"] = double_reference;
  Library lib = compile_library(kBrokenSource, o);
  for_each_device([&](Device dev) {
    Array x = from({1, 2, 3, 4}, {4}, float32, dev);
    LibraryCall c = dispatch({4, 1, 1}, {4, 1, 1}, dev);
    expect_equal(lib("good", {x, nan_like({4}, dev)}, c)[0], {2, 3, 4, 5});
    expect_equal(lib("broken", {x, nan_like({4}, dev)}, c)[0], {2, 4, 6, 8});
  });
  ASSERT_GE(warnings.messages.size(), 1u);
  EXPECT_NE(warnings.messages[0].find("broken"), std::string::npos);
  EXPECT_NE(warnings.messages[0].find("no_such_function"), std::string::npos)
      << warnings.messages[0];
}

constexpr const char* kWrongSource = R"(
kernel void twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  y[i] = 2.0f * x[i] + (i == 37 ? 0.5f : 0.0f);  // deliberately wrong at index 37
}
kernel void twice_right(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
  y[i] = 2.0f * x[i];
}
)";

TEST(Library, CheckModeCatchesAWrongKernel) {
  LibraryOptions o;
  o.references["twice"] = double_reference;
  o.references["twice_right"] = double_reference;
  Library lib = compile_library(kWrongSource, o);
  for_each_device([&](Device dev) {
    const int n = 64;
    Array x = from(random_values(n, 1, 2, 11), {n}, float32, dev);
    LibraryCall c = dispatch({n, 1, 1}, {32, 1, 1}, dev);
    // Without check mode the wrong result goes through.
    EXPECT_NO_THROW(lib("twice", {x, nan_like({n}, dev)}, c)[0].eval());
    c.check = true;
    // Check mode is evaluation-time policy: the call only records it.
    Array checked = lib("twice", {x, nan_like({n}, dev)}, c)[0];
    try {
      checked.eval();
      FAIL() << "expected a check error";
    } catch (const CheckError& e) {
      EXPECT_EQ(e.output(), "y");
      EXPECT_EQ(e.first_index(), std::vector<int64_t>{37});
      EXPECT_NEAR(e.max_abs_error(), 0.5, 1e-6);
      EXPECT_GT(e.max_rel_error(), 0.1);
      EXPECT_EQ(e.kernel(), "twice");
      std::string m = e.what();
      EXPECT_NE(m.find("output 'y'"), std::string::npos) << m;
      EXPECT_NE(m.find("index (37,)"), std::string::npos) << m;
      EXPECT_NE(m.find("1 of 64 elements"), std::string::npos) << m;
    }
    EXPECT_NO_THROW(lib("twice_right", {x, nan_like({n}, dev)}, c)[0].eval());
    // Looser tolerances accept the error.
    c.atol = 1.0;
    EXPECT_NO_THROW(lib("twice", {x, nan_like({n}, dev)}, c)[0].eval());
  });
  // ALLOY_CHECK=1 turns check mode on for every call.
  Array x = from(random_values(64, 1, 2, 12), {64}, float32, Device::cpu());
  {
    alloy::testing::ScopedEnv check("ALLOY_CHECK", "1");
    EXPECT_THROW(lib("twice", {x, nan_like({64}, Device::cpu())},
                     dispatch({64, 1, 1}, {32, 1, 1}, Device::cpu()))[0]
                     .eval(),
                 CheckError);
  }
  // Check mode needs a reference.
  Library plain = compile_library(kWrongSource);
  LibraryCall c = dispatch({64, 1, 1}, {32, 1, 1}, Device::cpu());
  c.check = true;
  EXPECT_THROW(plain("twice", {x, nan_like({64}, Device::cpu())}, c), std::invalid_argument);
}

// ---- dtype placeholders ----------------------------------------------------------------------

constexpr const char* kPlaceholderSource = R"(
kernel void axpby(device const TYPE* x [[buffer(0)]], device const TYPE* y [[buffer(1)]],
                  device TYPE* out [[buffer(2)]], constant float& a [[buffer(3)]],
                  constant float& b [[buffer(4)]], uint i [[thread_position_in_grid]]) {
  out[i] = TYPE(a * float(x[i]) + b * float(y[i]));
}
)";

TEST(Library, DtypePlaceholders) {
  LibraryOptions o;
  o.template_dtypes = {{"x", "TYPE"}};
  Library lib = compile_library(kPlaceholderSource, o);
  const KernelInfo& info = lib.kernel_info("axpby");
  EXPECT_EQ(info.params[0].placeholder, "TYPE");
  EXPECT_FALSE(info.params[0].dtype.has_value());
  EXPECT_EQ(info.params[2].placeholder, "TYPE");
  for_each_device([&](Device dev) {
    const int n = 500;
    auto xv = random_values(n, -1, 1, 13), yv = random_values(n, -1, 1, 14);
    for (Dtype t : {float32, float16, bfloat16}) {
      SCOPED_TRACE(std::string(dtype_name(t)));
      Array x = from(xv, {n}, t, dev), y = from(yv, {n}, t, dev);
      auto out = lib("axpby", {x, y, KernelArg::output({n}, t), 2.0f, -0.5f},
                     dispatch({n, 1, 1}, {128, 1, 1}, dev))[0];
      EXPECT_EQ(out.dtype(), t);
      auto xr = x.to_doubles(), yr = y.to_doubles();
      std::vector<double> want(n);
      for (int i = 0; i < n; ++i) want[i] = 2 * xr[i] - 0.5 * yr[i];
      expect_close(out, want);
    }
    // The placeholder decides the other parameters' dtype.
    Array x = from(xv, {n}, float16, dev), y32 = from(yv, {n}, float32, dev);
    try {
      lib("axpby", {x, y32, KernelArg::output({n}, float16), 2.0f, 1.0f},
          dispatch({n, 1, 1}, {128, 1, 1}, dev));
      FAIL() << "expected an error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("expected an array of float16, got an array of float32"),
                std::string::npos)
          << e.what();
    }
  });
  // A placeholder must name an argument.
  LibraryOptions bad;
  bad.template_dtypes = {{"z", "TYPE"}};
  EXPECT_THROW(compile_library(kPlaceholderSource, bad), std::invalid_argument);
}

// ---- MLX-style macros ------------------------------------------------------------------------

TEST(Library, KernelMacrosExpandKeepingLines) {
  std::string src =
      "#define instantiate_kernel(name, func, ...) \\\n"
      "  template [[host_name(name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;\n"
      "#define instantiate_all(op, tname, type) \\\n"
      "  instantiate_kernel(\"ss_\" #op \"_\" #tname, binary, type, op)\n"
      "#define SQUARE(x) ((x) * (x))\n"
      "instantiate_all(Add, float32,\n"
      "                float)\n"
      "int after;\n";
  std::string out = msl::expand_kernel_macros(src);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), std::count(src.begin(), src.end(), '\n'));
  EXPECT_NE(out.find("template [[host_name(\"ss_Add_float32\")]] [[kernel]] "
                     "decltype(binary<float, Add>) binary<float, Add>;"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("#define SQUARE(x)"), std::string::npos);  // other macros are left alone
  EXPECT_EQ(out.find("instantiate_kernel"), std::string::npos);
  // "int after;" is still on line 8.
  size_t pos = out.find("int after;");
  EXPECT_EQ(std::count(out.begin(), out.begin() + pos, '\n'), 7);
  EXPECT_EQ(msl::expand_kernel_macros("int x;\n#define F(a) a\n"), "int x;\n#define F(a) a\n");
}

// ---- NVRTC (CI, no GPU needed) ---------------------------------------------------------------

TEST(Library, CompilesWithNvrtc) {
  Library lib = make_library();
  std::string why = kernel::compile_library_cubin(lib, "sm_90");
  if (!why.empty()) GTEST_SKIP() << why;
  LibraryOptions o;
  o.template_dtypes = {{"x", "TYPE"}};
  Library ph = compile_library(kPlaceholderSource, o);
  for (Dtype t : {float32, float16, bfloat16})
    EXPECT_EQ(kernel::compile_library_cubin(ph, "sm_90", {{"TYPE", t}}), "");
}

}  // namespace

namespace {
// Robust mode on library kernels (DESIGN.md §2): out-of-range reads give 0, writes are dropped,
// reports name the kernel parameter.
TEST(Library, RobustModeReportsParameterNames) {
  const char* src = R"(
#include <metal_stdlib>
using namespace metal;
[[kernel]] void shift(const device float* src [[buffer(0)]], device float* dst [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
  dst[i] = src[i + 2];
}
)";
  conformance::for_each_device([&](Device dev) {
    LibraryOptions opt;
    opt.robust = true;
    opt.name = "robust_lib";
    Library lib = compile_library(src, opt);
    Array in = Array::from_doubles({1, 2, 3, 4}, {4}, float32, dev);
    Array out = Array::from_doubles({9, 9, 9, 9}, {4}, float32, dev);
    take_out_of_range_reports();
    auto r = lib("shift", {in, out}, dispatch({4, 1, 1}, {4, 1, 1}, dev));
    conformance::expect_equal(r[0], {3, 4, 0, 0});
    auto reports = take_out_of_range_reports();
    ASSERT_EQ(reports.size(), 2u);
    for (auto& rep : reports) {
      EXPECT_EQ(rep.buffer, "src");
      EXPECT_TRUE(rep.index == 4 || rep.index == 5) << rep.index;
    }
  });
}
}  // namespace
