// Conformance: whole libraries with `#include`d headers (headers= and include_dirs=), function
// constants given at compile time (MTLFunctionConstantValues), and the clear error for
// MetalPerformancePrimitives. CPU run in CI, NVRTC sm_90 compile in CI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/library.h"
#include "conformance/harness.h"
#include "kernel/library.h"

namespace {
using namespace conformance;
namespace fs = std::filesystem;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void expect_cubin(const Library& lib) {
  std::string why = kernel::compile_library_cubin(lib, "sm_90");
  if (!why.empty()) std::printf("NVRTC compile skipped: %s\n", why.c_str());
}

TEST(ConformanceLibrary, IncludesHeadersAndIncludeDirs) {
  fs::path dir = fs::temp_directory_path() / ("alloy_inc_" + std::to_string(::getpid()));
  fs::create_directories(dir / "detail");
  {
    std::ofstream(dir / "detail" / "scale.h") << "#pragma once\n#include \"twice.h\"\n"
                                                 "inline float scale(float v) { return twice(v) "
                                                 "* 1.5f; }\n";
    std::ofstream(dir / "detail" / "twice.h")
        << "#ifndef TWICE_H\n#define TWICE_H\ninline float twice(float v) { return v * 2.0f; "
           "}\n#endif\n";
  }
  LibraryOptions o;
  o.include_dirs = {dir.string()};
  o.headers = {{"ops.h",
                "#pragma once\n#include <metal_stdlib>\n#include \"detail/scale.h\"\n"
                "#define MTL_CONST static constant constexpr const\n"
                "MTL_CONST float kBias = 0.5f;\n"}};
  Library lib = compile_library(R"(#include "ops.h"
#include "ops.h"
#include <detail/scale.h>
using namespace metal;
[[kernel]] void f(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  y[i] = scale(x[i]) + kBias;
}
)",
                                o);
  constexpr int64_t n = 100;
  auto xv = random_values(n, -3, 3, 71);
  for_each_device([&](Device dev) {
    auto x = Array::from_doubles(xv, {n}, float32, dev);
    LibraryCall c;
    c.threads = Dims{n, 1, 1};
    c.device = dev;
    auto y = lib("f", {x, KernelArg::output({n}, float32)}, c)[0];
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = f32(f32(f32(xv[i]) * 2) * 1.5) + 0.5;
    expect_close(y, ref);  // the compiler may contract the last multiply-add into an fma
  });
  expect_cubin(lib);
  fs::remove_all(dir);
}

TEST(ConformanceLibrary, MissingIncludeIsACompileErrorNamingIt) {
  LibraryOptions o;
  o.headers = {{"a.h", "#include \"nowhere.h\"\n"}};
  try {
    compile_library(
        "#include \"a.h\"\nkernel void f(device float* y, uint i "
        "[[thread_position_in_grid]]) { y[i] = 1; }\n",
        o);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("nowhere.h"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a.h:1"), std::string::npos) << e.what();
  }
}

TEST(ConformanceLibrary, MetalPerformancePrimitivesNotSupported) {
  const char* src =
      "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
      "kernel void f(device float* y, uint i [[thread_position_in_grid]]) { y[i] = "
      "1; }\n";
  EXPECT_NE(
      message_of([&] { compile_library(src); }).find("not supported: MetalPerformancePrimitives"),
      std::string::npos);
  auto k = metal_kernel("mpp", {"a"}, {"o"}, "o[0] = a[0];",
                        "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n");
  auto a = random_array({4}, float32, -1, 1, 3, Device::cpu());
  EXPECT_NE(message_of([&] {
              k({a}, make_call({{4}}, {float32}, {1, 1, 1}, {1, 1, 1}))[0].eval();
            }).find("not supported: MetalPerformancePrimitives"),
            std::string::npos);
}

constexpr const char* kConstantsSource = R"(#include <metal_stdlib>
using namespace metal;
constant bool has_bias [[function_constant(0)]];
constant int scale [[function_constant(1)]];
constant float offset [[function_constant(2)]];
constant half hscale [[function_constant(3)]];
constant bool has_offset = is_function_constant_defined(offset);
[[kernel]] void f(device const float* x [[buffer(0)]], device const float* b [[buffer(1)]],
                  device float* y [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  float v = x[i] * scale * float(hscale);
  if (has_bias) v += b[i];
  if (has_offset) v += offset;
  y[i] = v;
}
)";

TEST(ConformanceLibrary, FunctionConstants) {
  constexpr int64_t n = 64;
  auto xv = random_values(n, -2, 2, 81), bv = random_values(n, -2, 2, 82);
  struct Case {
    std::map<int, FunctionConstant> by_index;
    std::map<std::string, FunctionConstant> by_name;
    bool bias;
    double scale, hscale, offset;
    bool has_offset;
  };
  std::vector<Case> cases = {
      {{{0, true}, {1, int64_t(3)}, {3, 0.5}}, {{"offset", 0.25}}, true, 3, 0.5, 0.25, true},
      {{{0, false}, {1, int64_t(-2)}, {2, 1.75}}, {{"hscale", 2.0}}, false, -2, 2, 1.75, true},
      {{{1, int64_t(5)}, {3, 1.0}}, {}, false, 5, 1, 0, false},
  };
  for (auto& c : cases) {
    LibraryOptions o;
    o.function_constants = c.by_index;
    o.named_function_constants = c.by_name;
    Library lib = compile_library(kConstantsSource, o);
    for_each_device([&](Device dev) {
      auto x = Array::from_doubles(xv, {n}, float32, dev);
      auto b = Array::from_doubles(bv, {n}, float32, dev);
      LibraryCall call;
      call.threads = Dims{n, 1, 1};
      call.device = dev;
      auto y = lib("f", {x, b, KernelArg::output({n}, float32)}, call)[0];
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) {
        double v = f32(f32(f32(xv[i]) * c.scale) * c.hscale);
        if (c.bias) v = f32(v + f32(bv[i]));
        if (c.has_offset) v = f32(v + c.offset);
        ref[i] = v;
      }
      expect_close(y, ref);  // multiply-adds may be contracted into fmas
    });
    expect_cubin(lib);
  }
  LibraryOptions bad;
  bad.function_constants = {{9, true}};
  EXPECT_NE(message_of([&] { compile_library(kConstantsSource, bad); }).find("index 9"),
            std::string::npos);
  LibraryOptions bad_name;
  bad_name.named_function_constants = {{"nope", true}};
  EXPECT_NE(message_of([&] { compile_library(kConstantsSource, bad_name); }).find("'nope'"),
            std::string::npos);
}

}  // namespace
