// The typed front end (include/alloy/analyze.h, src/typed): Clang's AST of the CPU translation.
#include <gtest/gtest.h>

#include "alloy/alloy.h"
#include "alloy/analyze.h"

namespace {
using namespace alloy;

TEST(TypedFrontEnd, Smoke) {
  if (!typed_analysis_available()) GTEST_SKIP() << "Clang not found at build time";
  auto k = metal_kernel("t", {"a"}, {"o"}, R"MSL(
  uint i = thread_position_in_grid.x; T v = a[i];
  float r = (i % 2 == 0) ? v : -1e30f; o[i] = r;
  T m = i % 3 == 0 ? a[i] : -1e30;
  m += 2.5f; m = m * 2; float z = m * 0.5;
  o[i] += z + simd_sum(r);
  threadgroup_barrier(mem_flags::mem_none);)MSL");
  KernelCall call;
  call.template_args = {{"T", bfloat16}};
  call.output_shapes = {{4}};
  call.output_dtypes = {float32};
  call.grid = {4, 1, 1};
  call.threadgroup = {4, 1, 1};
  auto a = analyze(k, {zeros({4}, bfloat16)}, call);
  std::printf("%s", a.report().c_str());
}

}  // namespace
