// Out-of-range accesses of CPU kernels (issue 16, item 7): every host buffer sits just before a
// guard page (sub-page buffers too) with a guard page in front of its pages, so a kernel running
// past (or before) its buffer faults; the fault ends the launch with an alloy::Error naming the
// kernel, the buffer's parameter name and the byte offset, the thread (fiber mode) or threadgroup
// (loop mode), with a robust-mode hint, and the process goes on (the next call works). Loop-mode,
// split-mode and fiber-mode kernels alike.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "conformance/harness.h"
#include "core/host_allocator.h"

using namespace alloy;

namespace {

// 4080 float32 = 16320 bytes: with the allocator's 64 bytes of slack exactly 4 pages.
constexpr int kN = 4080;
// A barrier in a helper function: the kernel cannot be split into work-item loops, so it runs
// as one fiber per thread (the path these tests must reach).
const char* kFiberHeader = "inline void sync_all() { threadgroup_barrier(mem_flags::mem_none); }\n";

Array input(int n = kN) {
  return Array::from_doubles(conformance::random_values(n, -1, 1, 21), {n}, float32, Device::cpu());
}

std::vector<Array> call(const std::string& name, const std::string& body, const Array& x,
                        int n = kN, const std::string& header = "", int tg = 64) {
  auto k = metal_kernel(name, {"x"}, {"y"}, body, header);
  KernelCall c = conformance::make_call({{n}}, {float32}, {n, 1, 1}, {tg, 1, 1});
  c.device = Device::cpu();
  return k({x}, c);
}

// The next good call works, in loop and fiber mode.
void expect_good_calls_work() {
  Array x = input();
  auto xs = x.to_doubles();
  for (const char* header : {"", kFiberHeader}) {
    std::string body = "uint i = thread_position_in_grid.x; ";
    if (*header) body += "sync_all(); ";
    body += "y[i] = 2 * x[i];";
    auto v = call(*header ? "good_fibers" : "good_loop", body, x, kN, header)[0].to_doubles();
    for (int i = 0; i < kN; ++i) ASSERT_EQ(v[i], 2 * xs[i]) << header;
  }
}

// Runs the kernel; expects an alloy::Error whose message holds each of `words`.
std::string expect_fault(const std::string& name, const std::string& body,
                         const std::vector<std::string>& words, int n = kN,
                         const std::string& header = "", int tg = 64) {
  Array x = input(n);
  Array y = call(name, body, x, n, header, tg)[0];
  std::string m;
  try {
    y.eval();
    ADD_FAILURE() << "expected an error for " << name;
  } catch (const Error& e) {
    m = e.what();
    EXPECT_EQ(e.kernel(), name) << m;
    for (const auto& w : words) EXPECT_NE(m.find(w), std::string::npos) << "'" << w << "' in " << m;
  }
  expect_good_calls_work();
  return m;
}

#if defined(__x86_64__)
const std::string kWrote = "wrote outside its buffers", kRead = "read outside its buffers";
#else
const std::string kWrote = "outside its buffers", kRead = "outside its buffers";
#endif

TEST(KernelFaults, WritePastTheOutputIsAnError) {
  expect_fault(
      "write_past", "uint i = thread_position_in_grid.x; y[i + 4080] = x[i]; y[i] = x[i];",
      {kWrote, "past the end of 'y' ([[buffer(1)]]), 16320 bytes", "in threadgroup (", "robust"});
}

TEST(KernelFaults, ReadBeforeTheInputIsAnError) {
  expect_fault("read_before", "int i = int(thread_position_in_grid.x); y[i] = x[i - 1024];",
               {kRead, "before the start of 'x' ([[buffer(0)]]), 16320 bytes", "robust"});
}

// Buffers under a page: each sits at the end of its own page, just before a guard page. One
// threadgroup, so the first faulting access is known: 16 floats (64 bytes) + 64 bytes of slack.
TEST(KernelFaults, WritePastASmallBufferIsAnError) {
  expect_fault("small_write_past", "uint i = thread_position_in_grid.x; y[i + 32] = x[i];",
               {kWrote, "64 bytes past the end of 'y' ([[buffer(1)]]), 64 bytes: byte offset 128",
                "in threadgroup (0, 0, 0)"},
               16, "", 16);
}

TEST(KernelFaults, ReadPastASmallBufferIsAnError) {
  // A read just past the slack: before, a small array sat on the C heap and this read its
  // neighbours silently.
  expect_fault("small_read_past", "uint i = thread_position_in_grid.x; y[i] = x[i + 40];",
               {kRead, "past the end of 'x' ([[buffer(0)]]), 12 bytes"}, 3, "", 3);
}

TEST(KernelFaults, ReadFarBeforeASmallBufferIsAnError) {
  expect_fault("small_read_before", "int i = int(thread_position_in_grid.x); y[i] = x[i - 1100];",
               {kRead, "before the start of 'x' ([[buffer(0)]]), 64 bytes"}, 16, "", 16);
}

TEST(KernelFaults, SmallBuffersEndAtAGuardPage) {
  // Each block's bytes + slack, rounded to 64, end on a page boundary: 64-byte aligned, never
  // sharing a page with another block.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t n : {1, 4, 12, 64, 65, 100, 1000, 4031, 4032, 5000}) {
    void* p = host_alloc(n);
    std::memset(p, 0x5a, n + 64);  // the slack is writable
    auto a = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(a % 64, 0u) << n;
    EXPECT_EQ((a + ((n + 64 + 63) & ~size_t{63})) % page, 0u) << n;
    for (auto& [q, m] : blocks) {
      auto b = reinterpret_cast<uintptr_t>(q);
      EXPECT_NE(a / page, b / page) << n << " shares a page with " << m;
    }
    blocks.emplace_back(p, n);
  }
  for (auto& [p, n] : blocks) host_free(p, n);
}

TEST(KernelFaults, GuardRegionsSpanOneArrayLength) {
  // The guard regions before and after a block are at least as long as the block (and 64 KiB):
  // the threads of a parallel launch start mid-grid, so a y[i + n] overrun's first access can be
  // anywhere in [n, 2n), not just on the page after the array.
  for (size_t n : {size_t{4}, size_t{4000}, size_t{16320}, size_t{100000}, size_t{3} << 20}) {
    void* p = host_alloc(n);
    uintptr_t lo = 0, hi = 0;
    auto a = reinterpret_cast<uintptr_t>(p);
    ASSERT_TRUE(host_guarded_mapping(a, &lo, &hi)) << n;
    const uintptr_t need = n > (64u << 10) ? n : (64u << 10);
    EXPECT_GE(a - lo, need) << n;
    EXPECT_GE(hi - (a + n + 64), need) << n;
    host_free(p, n);
  }
}

TEST(KernelFaults, ManyLiveSmallBuffersFallBackToTheHeap) {
  // Guarded blocks are capped (a share of vm.max_map_count); past the cap blocks still come,
  // from the C heap, and are freed and reused correctly.
  std::vector<void*> blocks;
  for (int i = 0; i < 20000; ++i) {
    auto* p = static_cast<int*>(host_alloc(8));
    p[0] = i;
    p[1] = -i;
    blocks.push_back(p);
  }
  for (int i = 0; i < 20000; ++i) {
    auto* p = static_cast<int*>(blocks[i]);
    ASSERT_EQ(p[0], i);
    ASSERT_EQ(p[1], -i);
  }
  for (void* p : blocks) host_free(p, 8);
  for (int r = 0; r < 2; ++r) {
    blocks.clear();
    for (int i = 0; i < 20000; ++i) blocks.push_back(host_alloc(8));
    for (void* p : blocks) host_free(p, 8);
  }
  host_empty_cache();
  EXPECT_EQ(host_allocator_stats().cached_bytes, 0u);
  expect_good_calls_work();
}

// An overrun a whole array length past the end (the access of the last thread of y[i + n]) is
// caught in y's own guard region; with a single guard page it wrote into the mapping above it,
// or faulted "not next to any of its buffers".
TEST(KernelFaults, WriteOneLengthPastTheOutputIsAnError) {
  expect_fault(
      "write_length_past",
      "uint i = thread_position_in_grid.x; if (i == 4079) y[i + 4080] = 1; y[i] = x[i];",
      {kWrote, "16316 bytes past the end of 'y' ([[buffer(1)]]), 16320 bytes: byte offset 32636",
       "in threadgroup (63, 0, 0)"});
}

// ---- fiber mode (kernels with barriers that cannot be split) and split mode

TEST(KernelFaults, FiberKernelWritePastIsAnError) {
  expect_fault(
      "fiber_write_past",
      "uint i = thread_position_in_grid.x; sync_all(); y[i + 4080] = x[i]; y[i] = x[i];",
      {kWrote, "past the end of 'y' ([[buffer(1)]]), 16320 bytes", "in thread (", "robust"}, kN,
      kFiberHeader);
}

TEST(KernelFaults, FiberKernelReadBeforeIsAnErrorNamingTheThread) {
  // One group of 16 threads; only thread 5 reads far before its input.
  expect_fault("fiber_read_before",
               "int i = int(thread_position_in_grid.x); sync_all(); y[i] = x[i == 5 ? -1100 : i];",
               {kRead, "before the start of 'x' ([[buffer(0)]]), 64 bytes", "in thread (5, 0, 0)"},
               16, kFiberHeader, 16);
}

TEST(KernelFaults, FiberKernelWriteOneLengthPastIsAnError) {
  // Fiber groups run in parallel: whichever faults first, the address lies in y's guard region.
  expect_fault("fiber_write_length_past",
               "uint i = thread_position_in_grid.x; sync_all(); if (i >= 4000) y[i + 4080] = 1; "
               "y[i] = x[i];",
               {kWrote, "past the end of 'y' ([[buffer(1)]]), 16320 bytes", "in thread (40"}, kN,
               kFiberHeader);
}

TEST(KernelFaults, FiberKernelFaultsRepeatedly) {
  // Faults in many groups of one launch, launch after launch: every one ends in the error and
  // the fibers' stacks and jump targets are reused correctly.
  for (int r = 0; r < 5; ++r)
    expect_fault("fiber_every_group",
                 "uint i = thread_position_in_grid.x; sync_all(); y[i + 4080] = x[i];",
                 {"past the end of 'y' ([[buffer(1)]])"}, kN, kFiberHeader);
}

TEST(KernelFaults, FiberStackOverflowIsAnError) {
  // 64 K floats (256 KiB) of thread-local array: more than a fiber's 128 KiB stack.
  expect_fault("fiber_stack_overflow", R"(
    uint i = thread_position_in_grid.x;
    float a[65536];
    a[0] = x[i];
    for (int k = 1; k < 65536; ++k) a[k] = a[k - 1] * 0.5f + x[(i + k) % 4080];
    sync_all();
    y[i] = a[(i * 7919u) % 65536u];)",
               {"overflowed the stack of thread (", "128 KiB"}, kN, kFiberHeader);
}

TEST(KernelFaults, SplitKernelWritePastIsAnError) {
  // A barrier in the kernel body: the kernel is split into work-item loops (loop mode).
  expect_fault("split_write_past",
               "uint i = thread_position_in_grid.x; threadgroup_barrier(mem_flags::mem_none); "
               "y[i + 4080] = x[i]; y[i] = x[i];",
               {kWrote, "past the end of 'y' ([[buffer(1)]])"});
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
