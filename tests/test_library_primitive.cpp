// Library kernel calls as pure primitives (issue 9, item 2): a call records the library's content
// key, the kernel and the call's parameters and compiles/runs nothing; the program is bound at
// evaluation on the device the op runs on; fallback and check mode happen at evaluation; the
// state round-trips and the registry rebuilds the primitive; library calls export and import
// (issue 13, item 1).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "alloy/alloy.h"
#include "alloy/export.h"
#include "alloy/library.h"
#include "conformance/harness.h"
#include "core/array_node.h"
#include "kernel/library.h"
#include "transforms/kernel_spec.h"

using namespace alloy;
using conformance::expect_close;
using conformance::random_values;

namespace {

// A fresh source per process (the disk cache would otherwise hold the compiled units and a test
// counting compiles would count none).
std::string nonce() {
  static const std::string n = [] {
    std::random_device rd;
    return std::to_string(rd()) + std::to_string(rd());
  }();
  return n;
}

std::string saxpy_source(const std::string& tag) {
  return R"(#include <metal_stdlib>
using namespace metal;
// )" + tag +
         " " + nonce() + R"(
kernel void saxpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = a * x[i] + y[i];
}
kernel void wrong_twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
  y[i] = 2.0f * x[i] + (i == 5 ? 1.0f : 0.0f);
}
kernel void broken(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
  y[i] = no_such_function(x[i]);
}
[[kernel]] void sampled(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
  constexpr sampler s(coord::normalized, filter::linear);
  y[i] = 2.0f * x[i];
}
)";
}

struct WarningCapture {
  std::vector<std::string> messages;
  std::function<void(const std::string&)> previous;
  WarningCapture() {
    previous = set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~WarningCapture() { set_warning_handler(previous); }
};

// y = 2 x, counting its calls.
ReferenceFn counting_double(std::shared_ptr<std::atomic<int>> calls) {
  return [calls](const std::vector<Array>& args) {
    ++*calls;
    auto x = args[0].to_doubles();
    for (auto& v : x) v *= 2;
    return std::vector<Array>{Array::from_doubles(x, args[0].shape(), float32, args[0].device())};
  };
}

Library make_library(const std::string& tag, std::shared_ptr<std::atomic<int>> calls) {
  LibraryOptions o;
  o.name = "prim_" + tag;
  for (auto* k : {"wrong_twice", "broken", "sampled"}) o.references[k] = counting_double(calls);
  return compile_library(saxpy_source(tag), o);
}

LibraryCall on_cpu(int n) {
  LibraryCall c;
  c.threads = Dims{n, 1, 1};
  c.group_size = Dims{32, 1, 1};
  c.device = Device::cpu();
  return c;
}

std::shared_ptr<Primitive> primitive_of(const Array& a) {
  auto p = node_of(a)->pending;
  EXPECT_TRUE(p) << "array is not pending";
  return p ? p->primitive : nullptr;
}

std::vector<double> nan_values(int n) {
  return std::vector<double>(static_cast<size_t>(n), std::nan(""));
}

TEST(LibraryPrimitive, CallCompilesAndRunsNothingUntilEvaluation) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Library lib = make_library("lazy", calls);
  const int n = 70;
  auto xv = random_values(n, -1, 1, 1), yv = random_values(n, -1, 1, 2);
  Array x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  Array y = Array::from_doubles(yv, {n}, float32, Device::cpu());
  Array r = lib("saxpy", {x, y, 1.5f}, on_cpu(n))[0];
  LibraryCall checked = on_cpu(n);
  checked.check = true;  // check mode: the reference runs at evaluation, not at the call
  Array w = lib("wrong_twice", {x, Array::from_doubles(nan_values(n), {n}, float32, Device::cpu())},
                checked)[0];
  EXPECT_EQ(kernel::library_stats(lib).units, 0u) << "a call compiled something";
  EXPECT_EQ(calls->load(), 0) << "a call ran the reference";
  EXPECT_TRUE(node_of(r)->pending && node_of(w)->pending);
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = 1.5 * xv[i] + yv[i];
  expect_close(r, want);
  EXPECT_GE(kernel::library_stats(lib).units, 1u);
  EXPECT_THROW(w.eval(), CheckError);  // the kernel is wrong at index 5
  EXPECT_EQ(calls->load(), 1);
}

TEST(LibraryPrimitive, StateRoundTripsAndTheRegistryRebuildsIt) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Library lib = make_library("state", calls);
  const int n = 40;
  auto xv = random_values(n, -1, 1, 3), yv = random_values(n, -1, 1, 4);
  Array x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  Array y = Array::from_doubles(yv, {n}, float32, Device::cpu());
  LibraryCall c = on_cpu(n);
  c.rtol = 1e-3;
  Array r = lib("saxpy", {x, y, 2.0f}, c)[0];
  auto p = primitive_of(r);
  ASSERT_TRUE(p);
  EXPECT_EQ(std::string(p->name()), "LibraryKernel");
  PrimitiveState s = p->state();
  EXPECT_EQ(s.get_string("library"), kernel::library_key(kernel::library_spec(lib)));
  EXPECT_EQ(s.get_string("kernel"), "saxpy");
  auto bytes = s.to_bytes();
  PrimitiveState back = PrimitiveState::from_bytes(bytes.data(), bytes.size());
  EXPECT_EQ(back, s);
  auto rebuilt = make_primitive("LibraryKernel", back);
  EXPECT_TRUE(rebuilt->is_equivalent(*p));
  EXPECT_TRUE(p->is_equivalent(*rebuilt));
  EXPECT_EQ(rebuilt->state(), s);
  // Another call is another function: other threads, another kernel, another scalar input.
  LibraryCall c2 = on_cpu(n / 2);
  EXPECT_FALSE(primitive_of(lib("saxpy", {x, y, 2.0f}, c2)[0])->is_equivalent(*p));
  EXPECT_TRUE(primitive_of(lib("saxpy", {x, y, 3.0f}, c)[0])->is_equivalent(*p))
      << "the scalar is an input, not state";
  // The rebuilt primitive runs on the call's inputs (the scalar is a 0-d input).
  auto op = node_of(r)->pending;
  auto out = make_pending(rebuilt, op->inputs, {{n}}, {float32}, default_stream(Device::cpu()));
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = 2 * xv[i] + yv[i];
  expect_close(out[0], want);
  expect_close(r, want);
  // A library of the same content read again answers the same key.
  Library again = make_library("state", calls);
  EXPECT_EQ(kernel::library_key(kernel::library_spec(again)), s.get_string("library"));
  // Nothing holds a library of an unknown key: a clear error, no crash.
  PrimitiveState unknown(2);
  for (auto& [k, v] : s.fields())
    unknown.set(k, k == "library" ? PrimitiveState::Value(std::string(32, '0')) : v);
  try {
    make_primitive("LibraryKernel", unknown);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not loaded"), std::string::npos) << e.what();
  }
  // Hostile indices are rejected, not used.
  PrimitiveState hostile(2);
  for (auto& [k, v] : s.fields())
    hostile.set(k, k == "bindings" ? PrimitiveState::Value(
                                         std::vector<std::vector<int64_t>>{{0, 4096, 0, -1, 0}})
                                   : v);
  EXPECT_THROW(make_primitive("LibraryKernel", hostile), std::invalid_argument);
}

TEST(LibraryPrimitive, FallbackHappensAtEvaluation) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Library lib = make_library("fallback", calls);
  WarningCapture warnings;
  const int n = 33;
  auto xv = random_values(n, -1, 1, 5);
  Array x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = 2 * xv[i];
  for (const char* k : {"sampled", "broken"}) {  // set aside at reading / fails to compile
    int before = calls->load();
    Array y =
        lib(k, {x, Array::from_doubles(nan_values(n), {n}, float32, Device::cpu())}, on_cpu(n))[0];
    EXPECT_EQ(calls->load(), before) << k << ": the reference ran at the call";
    EXPECT_TRUE(node_of(y)->pending) << k;
    expect_close(y, want);
    EXPECT_EQ(calls->load(), before + 1) << k;
  }
  ASSERT_EQ(warnings.messages.size(), 2u);
  EXPECT_NE(warnings.messages[0].find("not supported: samplers"), std::string::npos)
      << warnings.messages[0];
  EXPECT_NE(warnings.messages[1].find("no_such_function"), std::string::npos)
      << warnings.messages[1];
  // A reference attached after the call is the one that runs: the policy is read at evaluation.
  auto later = std::make_shared<std::atomic<int>>(0);
  Array y = lib("broken", {x, Array::from_doubles(nan_values(n), {n}, float32, Device::cpu())},
                on_cpu(n))[0];
  lib.set_reference("broken", counting_double(later));
  expect_close(y, want);
  EXPECT_EQ(later->load(), 1);
}

TEST(LibraryPrimitive, InputProducedOnAnotherStream) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Library lib = make_library("streams", calls);
  Stream s1 = new_stream(Device::cpu()), s2 = new_stream(Device::cpu());
  const int n = 300;
  auto xv = random_values(n, -1, 1, 6), yv = random_values(n, -1, 1, 7);
  Array x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  Array y = Array::from_doubles(yv, {n}, float32, Device::cpu());
  LibraryCall c1 = on_cpu(n);
  c1.device.reset();
  c1.stream = s1;
  Array first = lib("saxpy", {x, y, 2.0f}, c1)[0];  // 2x + y on s1
  LibraryCall c2 = c1;
  c2.stream = s2;
  Array second = lib("saxpy", {x, first, -1.0f}, c2)[0];  // x + y on s2, fed from s1
  async_eval({second});
  synchronize(s2);
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = xv[i] + yv[i];
  expect_close(second, want, 1e-5, 1e-5);
}

// ---- export ----------------------------------------------------------------------------------

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("alloy-libexport-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

TEST(LibraryExport, LibraryCallsRoundTripThroughAFile) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  LibraryOptions o;
  o.name = "exported";
  o.headers["scale.h"] = "#define SCALE 3.0f\n";  // part of the resolved source
  o.template_dtypes = {{"x", "TYPE"}};
  Library lib = compile_library(R"(#include <metal_stdlib>
#include "scale.h"
using namespace metal;
// )" + nonce() + R"(
kernel void scaled_add(device const TYPE* x [[buffer(0)]], device TYPE* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
  y[i] = TYPE(SCALE * float(x[i]) + float(y[i]));
}
)",
                                o);
  const int rows = 4, cols = 6, n = rows * cols;
  auto fn = [&](const Args& a) {
    Array t = a[0].transpose();  // a view feeding the call: a copy is made for it
    LibraryCall c;
    c.threads = Dims{n, 1, 1};
    c.device = Device::cpu();
    return std::vector<Array>{lib("scaled_add", {t, a[1]}, c)[0]};
  };
  auto xv = random_values(n, -1, 1, 8), yv = random_values(n, -1, 1, 9);
  Array x = Array::from_doubles(xv, {rows, cols}, float32, Device::cpu());
  Array y = Array::from_doubles(yv, {cols, rows}, float32, Device::cpu());
  std::string path = temp_path("library.alloy");
  export_function(path, fn, {x, y});
  std::string hash = transforms::library_sha256(kernel::library_spec(lib));

  // Consent: the library is listed with its hash.
  try {
    import_function(path);
    FAIL() << "expected UntrustedKernels";
  } catch (const UntrustedKernels& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("library exported"), std::string::npos) << m;
    EXPECT_NE(m.find(hash), std::string::npos) << m;
  }
  ImportOptions opts;
  opts.allowed_kernels = {hash};
  opts.device = Device::cpu();
  auto f = import_function(path, opts);
  // New values, in a fresh library read from the file (the original could be gone).
  auto xv2 = random_values(n, -1, 1, 10), yv2 = random_values(n, -1, 1, 11);
  auto out = f(Args{Array::from_doubles(xv2, {rows, cols}, float32, Device::cpu()),
                    Array::from_doubles(yv2, {cols, rows}, float32, Device::cpu())});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> want(n);
  for (int r = 0; r < cols; ++r)
    for (int c = 0; c < rows; ++c) want[r * rows + c] = 3.0 * xv2[c * cols + r] + yv2[r * rows + c];
  expect_close(out[0], want);
  std::string text = describe_exported_function(path);
  EXPECT_NE(text.find("LibraryKernel(exported:scaled_add) x1"), std::string::npos) << text;

  // A file whose library source was changed (its hashes no longer match) is refused.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto at = bytes.find("SCALE * float");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 8] = '-';
  std::string tampered = temp_path("tampered.alloy");
  std::ofstream(tampered, std::ios::binary) << bytes;
  try {
    import_function(tampered, opts);
    FAIL() << "expected a bad-file error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not match its source"), std::string::npos)
        << e.what();
  }
}

// A library kernel's dispatch is fixed for its call's shapes: a shapeless file could not follow
// new ones, so the export is refused, naming the kernel (it used to be written and refused at
// the imported function's call).
TEST(LibraryExport, ShapelessExportIsRefused) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Library lib = make_library("shapeless", calls);
  auto fn = [&](const Args& a) {
    LibraryCall c;
    c.device = Device::cpu();
    return std::vector<Array>{lib("saxpy", {a[0], a[1], 2.0f}, c)[0]};
  };
  const int n = 16;
  Array x = Array::from_doubles(random_values(n, -1, 1, 12), {n}, float32, Device::cpu());
  std::string path = temp_path("shapeless_library.alloy");
  try {
    export_function(path, fn, {x, x}, /*shapeless=*/true);
    FAIL() << "exported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("LibraryKernel("), std::string::npos) << e.what();
  }
  export_function(path, fn, {x, x}, /*shapeless=*/false);
  ImportOptions opts;
  opts.trust_kernels = true;
  opts.device = Device::cpu();
  auto f = import_function(path, opts);
  Array z = Array::from_doubles(random_values(2 * n, -1, 1, 13), {2 * n}, float32, Device::cpu());
  EXPECT_THROW(f(Args{z, z}), std::invalid_argument);  // no trace of that shape in the file
}

}  // namespace
