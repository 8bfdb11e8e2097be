// A catalogue of bad calls through the C++ API (issue 16, docs/reliability.md). Each entry names
// what is wrong; the test asserts the exception type the API documents, the key words of its
// message, and that the next good call still works. The Python side is
// python/tests/test_bad_input.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "conformance/harness.h"

using namespace alloy;

namespace {

enum class Kind { invalid_argument, compile_error, not_supported, out_of_memory };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::invalid_argument:
      return "std::invalid_argument";
    case Kind::compile_error:
      return "alloy::CompileError";
    case Kind::not_supported:
      return "alloy::NotSupported";
    case Kind::out_of_memory:
      return "alloy::OutOfMemory";
  }
  return "?";
}

struct BadCall {
  const char* what;  // what is wrong with the call
  std::function<void()> call;
  Kind kind;
  std::vector<std::string> words;  // each must appear in the message
};

KernelCall cpu_call(Shape out, Dims grid = {4, 1, 1}, Dims tg = {4, 1, 1}) {
  KernelCall c;
  c.output_shapes = {std::move(out)};
  c.output_dtypes = {float32};
  c.grid = grid;
  c.threadgroup = tg;
  c.device = Device::cpu();
  return c;
}

Array four() {
  return Array::from_doubles({1.5, -2.25, 3.0, 0.125}, {4}, float32, Device::cpu());
}

const char* kCopy = "uint i = thread_position_in_grid.x; y[i] = x[i];";

void metal(const std::string& body, KernelCall call, const std::string& header = "") {
  auto k = metal_kernel("bad_input", {"x"}, {"y"}, body, header);
  eval({k({four()}, call)[0]});
}

void library(const std::string& source, const char* kernel = nullptr,
             std::vector<KernelArg> args = {}, LibraryCall call = {}) {
  LibraryOptions o;
  o.name = "bad_lib";
  auto lib = compile_library(source, o);
  if (kernel) {
    call.device = Device::cpu();
    eval(lib(kernel, args, call));
  }
}

const char* kAxpy = R"(
kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] += a * x[i];
})";

std::vector<BadCall> catalogue() {
  using K = Kind;
  std::vector<BadCall> c;
  // ---- metal_kernel: call options
  c.push_back({"output_shapes of the wrong length",
               [] {
                 auto call = cpu_call({4});
                 call.output_shapes.push_back({4});
                 metal(kCopy, call);
               },
               K::invalid_argument,
               {"output_shapes", "size 1", "size 2"}});
  c.push_back({"output_dtypes of the wrong length",
               [] {
                 auto call = cpu_call({4});
                 call.output_dtypes.clear();
                 metal(kCopy, call);
               },
               K::invalid_argument,
               {"output_dtypes"}});
  c.push_back({"negative grid",
               [] {
                 metal(kCopy, cpu_call({4}, {-4, 1, 1}));
               },
               K::invalid_argument,
               {"grid", ">= 0", "-4"}});
  c.push_back({"threadgroup of 0",
               [] {
                 metal(kCopy, cpu_call({4}, {4, 1, 1}, {0, 1, 1}));
               },
               K::invalid_argument,
               {"threadgroup", "> 0"}});
  c.push_back({"threadgroup over 1024",
               [] {
                 metal(kCopy, cpu_call({4}, {4, 1, 1}, {64, 32, 1}));
               },
               K::invalid_argument,
               {"2048 threads", "1024"}});
  c.push_back({"grid past the thread limit",
               [] {
                 metal(kCopy, cpu_call({4}, {2147483647, 2147483647, 2147483647}));
               },
               K::invalid_argument,
               {"ALLOY_MAX_GRID_THREADS", "threads per launch"}});
  c.push_back({"output shape whose element count overflows",
               [] {
                 metal(kCopy, cpu_call({int64_t{1} << 62, 4}));
               },
               K::invalid_argument,
               {"overflows", "(4611686018427387904, 4)"}});
  c.push_back({"negative output dimension",
               [] { metal(kCopy, cpu_call({-3})); },
               K::invalid_argument,
               {"negative dimension", "(-3,)"}});
  c.push_back({"4 EiB output",
               [] { metal(kCopy, cpu_call({int64_t{1} << 60})); },
               K::out_of_memory,
               {"cannot allocate", "4611686018427387904 bytes", "GiB"}});
  c.push_back({"unknown compile option",
               [] {
                 metal_kernel("k", {"x"}, {"y"}, kCopy, "", true, false, {{"fast", "1"}});
               },
               K::invalid_argument,
               {"compile option", "fast"}});
  c.push_back(
      {"bad math_mode",
       [] {
         metal_kernel("k", {"x"}, {"y"}, kCopy, "", true, false, {{"math_mode", "reckless"}});
       },
       K::invalid_argument,
       {"math_mode", "reckless"}});
  c.push_back({"no outputs",
               [] { metal_kernel("k", {"x"}, {}, kCopy); },
               K::invalid_argument,
               {"at least one output"}});
  c.push_back({"invalid input array",
               [] {
                 auto k = metal_kernel("bad_input", {"x"}, {"y"}, kCopy);
                 eval({k({Array()}, cpu_call({4}))[0]});
               },
               K::invalid_argument,
               {"input", "invalid"}});
  // ---- metal_kernel: bodies and headers
  c.push_back({"unclosed [[ in a body",
               [] { metal("uint i [[thread_position_in_grid;\ny[0] = x[0];", cpu_call({4})); },
               K::invalid_argument,
               {"unterminated [[attribute]]", "bad_input"}});
  c.push_back({"unterminated /* in a body",
               [] { metal("y[0] = x[0]; /* never closed", cpu_call({4})); },
               K::invalid_argument,
               {"unterminated /* comment"}});
  c.push_back({"undeclared identifier",
               [] { metal("y[0] = x[0] + nope;", cpu_call({4})); },
               K::compile_error,
               {"bad_input", "nope", "line 1"}});
  c.push_back({"syntax error on the body's third line",
               [] { metal("float a = x[0];\nfloat b = a;\ny[0] = a +* b;", cpu_call({4})); },
               K::compile_error,
               {"bad_input", "line 3"}});
  c.push_back({"texture in a body",
               [] { metal("texture2d<float> t; y[0] = x[0];", cpu_call({4})); },
               K::not_supported,
               {"not supported", "textures"}});
  c.push_back({"#include of a user header",
               [] { metal(kCopy, cpu_call({4}), "#include \"mine.h\"\n"); },
               K::not_supported,
               {"#include", "mine.h"}});
  c.push_back({"unclosed [[ in a header",
               [] { metal(kCopy, cpu_call({4}), "constant int k [[ = 3;\n"); },
               K::invalid_argument,
               {"unterminated [[attribute]]"}});
  // ---- compile_library: sources
  c.push_back({"no kernel in a library",
               [] { library("float f(float x) { return x; }"); },
               K::invalid_argument,
               {"no kernel function found", "bad_lib"}});
  c.push_back({"two parameters on [[buffer(0)]]",
               [] {
                 library(
                     "kernel void k(device float* a [[buffer(0)]], device float* b "
                     "[[buffer(0)]]) {}");
               },
               K::invalid_argument,
               {"[[buffer(0)]]", "'b'", "once"}});
  c.push_back({"[[buffer(99)]]",
               [] { library("kernel void k(device float* a [[buffer(99)]]) {}"); },
               K::invalid_argument,
               {"buffer(99)", "between 0 and 47"}});
  c.push_back({"[[buffer(-1)]]",
               [] { library("kernel void k(device float* a [[buffer(-1)]]) {}"); },
               K::invalid_argument,
               {"buffer(-1)", "between 0 and 47"}});
  c.push_back({"[[threadgroup(9)]]",
               [] { library("kernel void k(threadgroup float* a [[threadgroup(9)]]) {}"); },
               K::invalid_argument,
               {"threadgroup(9)", "between 0 and 7"}});
  c.push_back({"huge max_total_threads_per_threadgroup",
               [] {
                 library(
                     "[[kernel]] [[max_total_threads_per_threadgroup(99999999999)]] void "
                     "k(device float* a [[buffer(0)]]) {}");
               },
               K::invalid_argument,
               {"max_total_threads_per_threadgroup", "between 1 and 1024"}});
  c.push_back({"max_total_threads_per_threadgroup(abc)",
               [] {
                 library(
                     "[[kernel]] [[max_total_threads_per_threadgroup(abc)]] void "
                     "k(device float* a [[buffer(0)]]) {}");
               },
               K::invalid_argument,
               {"max_total_threads_per_threadgroup(abc)", "integer"}});
  c.push_back({"host_name without a quoted name",
               [] {
                 library(
                     "[[kernel]] [[host_name(plain)]] void k(device float* a [[buffer(0)]]) "
                     "{}");
               },
               K::invalid_argument,
               {"host_name", "quoted"}});
  c.push_back({"unclosed [[ in a parameter list",
               [] { library("kernel void k(device float* y [[buffer(0), uint i) {}"); },
               K::invalid_argument,
               {"unterminated"}});
  c.push_back({"unterminated /* in a library",
               [] { library("/* a comment\nkernel void k(device float* y [[buffer(0)]]) {}"); },
               K::invalid_argument,
               {"unterminated /* comment", "line 1"}});
  c.push_back({"a kernel that returns int",
               [] { library("kernel int k(device float* y [[buffer(0)]]) { return 0; }"); },
               K::invalid_argument,
               {"must return void"}});
  c.push_back({"a buffer parameter by value",
               [] { library("kernel void k(device float y [[buffer(0)]]) {}"); },
               K::invalid_argument,
               {"'y'", "pointer or a reference"}});
  c.push_back({"two kernels with one name",
               [] {
                 library(
                     "kernel void k(device float* y [[buffer(0)]]) {}\n"
                     "kernel void k(device int* y [[buffer(0)]]) {}");
               },
               K::invalid_argument,
               {"two kernels", "'k'"}});
  c.push_back({"compile error in a library",
               [] {  // compiles at the kernel's first evaluation (lazy)
                 library("kernel void k(device float* y [[buffer(0)]]) { y[0] = zzz; }", "k",
                         {KernelArg::output({4}, float32)});
               },
               K::compile_error,
               {"zzz", "line 1"}});
  c.push_back({"bad library math_mode",
               [] {
                 LibraryOptions o;
                 o.math_mode = "sloppy";
                 compile_library(kAxpy, o);
               },
               K::invalid_argument,
               {"math_mode", "sloppy"}});
  c.push_back({"template_dtypes naming no argument",
               [] {
                 LibraryOptions o;
                 o.template_dtypes = {{"nope", "T"}};
                 compile_library(kAxpy, o);
               },
               K::invalid_argument,
               {"template_dtypes", "nope"}});
  // ---- library calls
  c.push_back({"calling a kernel the library lacks",
               [] {
                 library(kAxpy, "axpby", {four(), four(), 2.0f});
               },
               K::invalid_argument,
               {"no kernel named 'axpby'", "axpy"}});
  c.push_back({"too many arguments",
               [] {
                 library(kAxpy, "axpy", {four(), four(), 2.0f, 3.0f});
               },
               K::invalid_argument,
               {"axpy"}});
  c.push_back({"negative threads",
               [] {
                 LibraryCall call;
                 call.threads = Dims{-1, 1, 1};
                 library(kAxpy, "axpy", {four(), four(), 2.0f}, call);
               },
               K::invalid_argument,
               {"threads must be >= 0"}});
  c.push_back({"group_size of 0",
               [] {
                 LibraryCall call;
                 call.group_size = Dims{0, 1, 1};
                 library(kAxpy, "axpy", {four(), four(), 2.0f}, call);
               },
               K::invalid_argument,
               {"group_size must be > 0"}});
  c.push_back({"threads past the thread limit",
               [] {
                 LibraryCall call;
                 call.threads = Dims{2147483647, 2147483647, 1};
                 library(kAxpy, "axpy", {four(), four(), 2.0f}, call);
               },
               K::invalid_argument,
               {"ALLOY_MAX_GRID_THREADS"}});
  // ---- arrays
  c.push_back({"zeros with a negative dimension",
               [] {
                 zeros({2, -1}, float32, Device::cpu());
               },
               K::invalid_argument,
               {"negative dimension", "(2, -1)"}});
  c.push_back({"zeros((2**32, 2**32, 4))",
               [] {
                 zeros({int64_t{1} << 32, int64_t{1} << 32, 4}, float32, Device::cpu());
               },
               K::invalid_argument,
               {"overflows", "(4294967296, 4294967296, 4)"}});
  c.push_back({"zeros whose bytes overflow",
               [] { zeros({int64_t{1} << 62}, float64, Device::cpu()); },
               K::invalid_argument,
               {"size in bytes", "float64", "overflows"}});
  c.push_back({"from_doubles with the wrong count",
               [] {
                 Array::from_doubles({1, 2, 3}, {2, 2}, float32, Device::cpu());
               },
               K::invalid_argument,
               {"3", "4"}});
  c.push_back(
      {"eval of an invalid array", [] { eval({Array()}); }, K::invalid_argument, {"invalid"}});
  return c;
}

void good_call() {
  auto k = metal_kernel("good_after_bad", {"x"}, {"y"}, kCopy);
  auto y = k({four()}, cpu_call({4}))[0].to_doubles();
  ASSERT_EQ(y, (std::vector<double>{1.5, -2.25, 3.0, 0.125}));
}

}  // namespace

TEST(BadInput, Catalogue) {
  auto cases = catalogue();
  EXPECT_GE(cases.size(), 45u);
  for (auto& bc : cases) {
    SCOPED_TRACE(bc.what);
    std::string what;
    Kind got = Kind::invalid_argument;
    bool thrown = false;
    try {
      bc.call();
    } catch (const CompileError& e) {
      thrown = true, got = Kind::compile_error, what = e.what();
    } catch (const NotSupported& e) {
      thrown = true, got = Kind::not_supported, what = e.what();
    } catch (const OutOfMemory& e) {
      thrown = true, got = Kind::out_of_memory, what = e.what();
    } catch (const std::invalid_argument& e) {
      thrown = true, got = Kind::invalid_argument, what = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "unexpected exception type: " << e.what();
      continue;
    }
    if (!thrown) {
      ADD_FAILURE() << "no exception";
      continue;
    }
    EXPECT_STREQ(kind_name(got), kind_name(bc.kind)) << what;
    for (auto& w : bc.words)
      EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
    good_call();
  }
}
