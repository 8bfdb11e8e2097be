// Out-of-range accesses of CPU kernels (issue 16, item 7): buffers of a page or more are placed
// between guard pages, so a kernel running past (or before) its buffer faults; the fault ends the
// launch with an alloy::Error naming the kernel and the nearest buffer, with a robust-mode hint,
// and the process goes on (the next call works).
#include <gtest/gtest.h>

#include <string>

#include "alloy/alloy.h"
#include "conformance/harness.h"

using namespace alloy;

namespace {

// 4080 float32 = 16320 bytes: with the allocator's 64 bytes of slack exactly 4 pages, so the
// page after the buffer is the guard page.
constexpr int kN = 4080;

Array input() {
  return Array::from_doubles(conformance::random_values(kN, -1, 1, 21), {kN}, float32,
                             Device::cpu());
}

std::vector<Array> call(const std::string& name, const std::string& body, const Array& x) {
  auto k = metal_kernel(name, {"x"}, {"y"}, body);
  KernelCall c;
  c.output_shapes = {{kN}};
  c.output_dtypes = {float32};
  c.grid = {kN, 1, 1};
  c.threadgroup = {64, 1, 1};
  c.device = Device::cpu();
  return k({x}, c);
}

void expect_fault(const std::string& name, const std::string& body, const std::string& where) {
  Array x = input();
  Array y = call(name, body, x)[0];
  try {
    y.eval();
    FAIL() << "expected an error for " << name;
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(e.kernel(), name) << m;
    EXPECT_NE(m.find("outside its buffers"), std::string::npos) << m;
    EXPECT_NE(m.find(where), std::string::npos) << m;
    EXPECT_NE(m.find("robust"), std::string::npos) << m;
  }
  // The process and the runtime go on.
  auto xs = x.to_doubles();
  auto ok = call("fault_then_twice", "uint i = thread_position_in_grid.x; y[i] = 2 * x[i];", x);
  auto v = ok[0].to_doubles();
  for (int i = 0; i < kN; ++i) ASSERT_EQ(v[i], 2 * xs[i]);
}

TEST(KernelFaults, WritePastTheOutputIsAnError) {
  expect_fault("write_past", "uint i = thread_position_in_grid.x; y[i + 4080] = x[i]; y[i] = x[i];",
               "past the end of [[buffer(1)]]");
}

TEST(KernelFaults, ReadBeforeTheInputIsAnError) {
  expect_fault("read_before", "int i = int(thread_position_in_grid.x); y[i] = x[i - 1024];",
               "before [[buffer(0)]]");
}

TEST(KernelFaults, FaultsOutsideKernelsAreNotCaught) {
  // A fault outside a kernel keeps its default action (the process dies), as without Alloy.
  EXPECT_DEATH(
      {
        Array x = input();
        call("warm", "uint i = thread_position_in_grid.x; y[i] = x[i];", x)[0].eval();
        volatile int* p = nullptr;
        *p = 1;
      },
      "");
}

}  // namespace
