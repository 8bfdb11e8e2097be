// Hostile input, faults and load (issue 16, docs/reliability.md): inputs that used to crash the
// process or give a silent wrong answer, and the bounds on work. Each test names the failure it
// holds off. The catalogue of bad calls is tests/test_bad_input.cpp; the disk cache's faults are
// tests/test_cache_faults.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "alloy/alloy.h"
#include "alloy/library.h"
#include "conformance/harness.h"

using namespace alloy;

namespace {

// Asserts that `f` throws E and that the message contains every one of `words`.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<std::string> words) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    std::string what = e.what();
    for (auto& w : words)
      EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' in: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// A small kernel that must still work after each bad call.
void expect_good_call_works() {
  const int n = 37;
  auto xs = conformance::random_values(n, -2, 2, 7);
  Array x = Array::from_doubles(xs, {n}, float32, Device::cpu());
  auto k =
      metal_kernel("twice", {"x"}, {"y"}, "uint i = thread_position_in_grid.x; y[i] = 2 * x[i];");
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {n, 1, 1};
  call.threadgroup = {32, 1, 1};
  call.device = Device::cpu();
  auto y = k({x}, call)[0].to_doubles();
  for (int i = 0; i < n; ++i) EXPECT_EQ(y[i], 2 * static_cast<double>(static_cast<float>(xs[i])));
}

Array run_body(const std::string& body, Shape out_shape, Dims grid = {1, 1, 1}) {
  auto k = metal_kernel("hostile", {"x"}, {"y"}, body);
  KernelCall call;
  call.output_shapes = {std::move(out_shape)};
  call.output_dtypes = {float32};
  call.grid = grid;
  call.threadgroup = {1, 1, 1};
  call.device = Device::cpu();
  Array x = Array::from_doubles({1.5, 2.5}, {2}, float32, Device::cpu());
  auto out = k({x}, call)[0];
  eval({out});
  return out;
}

}  // namespace

// ---- 1. crashes --------------------------------------------------------------------------------

TEST(Reliability, UnclosedAttributeInBodyIsAnError) {
  // The translator read past its token list (segfault).
  expect_error<std::invalid_argument>(
      [] { run_body("uint i [[thread_position_in_grid;\ny[0] = x[0];", {1}); },
      {"unterminated [[attribute]]"});
  expect_error<std::invalid_argument>([] { run_body("y[0] = x[0]; [[", {1}); },
                                      {"unterminated [[attribute]]"});
  expect_good_call_works();
}

TEST(Reliability, UnclosedAttributeInLibraryIsAnError) {
  for (const char* src : {
           "kernel void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid) {}",
           "[[kernel]] void k(device float* y [[buffer(0)]]) {} [[",
           "[[kernel]] [[max_total_threads_per_threadgroup(64) void k(device float* y) {}",
           "[[kernel]] void k [[ (device float* y) {}",
           "template [[host_name(\"a\") [[kernel]] decltype(k<float>) k<float>;",
       }) {
    SCOPED_TRACE(src);
    expect_error<std::invalid_argument>([&] { compile_library(src); }, {"unterminated"});
  }
  expect_good_call_works();
}

TEST(Reliability, ElementCountOverflowIsAnError) {
  // (2**62, 4) wrapped to 0 elements; the kernel then wrote into a 0-byte buffer.
  expect_error<std::invalid_argument>(
      [] {
        run_body("y[0] = x[0];", {int64_t{1} << 62, 4});
      },
      {"overflow", "shape"});
  expect_error<std::invalid_argument>(
      [] {
        zeros({int64_t{1} << 32, int64_t{1} << 32, 4}, float32, Device::cpu());
      },
      {"overflow", "shape"});
  // Elements fit in int64 but bytes do not.
  expect_error<std::invalid_argument>([] { zeros({int64_t{1} << 61}, float32, Device::cpu()); },
                                      {"overflow", "bytes"});
  expect_good_call_works();
}

// ---- 2. silent wrong answers -------------------------------------------------------------------

TEST(Reliability, DuplicateBufferIndexIsAnError) {
  // Two parameters on [[buffer(0)]] aliased each other: an axpy returned 3*y.
  const char* src = R"(
kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(0)]],
                 constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] += a * x[i];
})";
  expect_error<std::invalid_argument>([&] { compile_library(src); },
                                      {"axpy", "[[buffer(0)]]", "'y'"});
  const char* tg = R"(
kernel void k(device float* y [[buffer(0)]], threadgroup float* a [[threadgroup(1)]],
              threadgroup float* b [[threadgroup(1)]]) { y[0] = 1; })";
  expect_error<std::invalid_argument>([&] { compile_library(tg); }, {"[[threadgroup(1)]]"});
  expect_good_call_works();
}

// ---- 4. exception types and messages -----------------------------------------------------------

TEST(Reliability, HugeOutputSaysItsSize) {
  // A 4 TiB output said only "std::bad_alloc".
  const int64_t n = int64_t{1} << 40;  // float32: 4 TiB
  try {
    run_body("y[0] = x[0];", {n});
    ADD_FAILURE() << "a 4 TiB output was allocated";
  } catch (const std::bad_alloc& e) {  // alloy::OutOfMemory
    std::string what = e.what();
    EXPECT_NE(what.find("4398046511104 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("4096.0 GiB"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot allocate"), std::string::npos) << what;
  }
  expect_good_call_works();
}
