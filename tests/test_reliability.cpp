// Hostile input, faults and load (issue 16, docs/reliability.md): inputs that used to crash the
// process or give a silent wrong answer, and the bounds on work. Each test names the failure it
// holds off. The catalogue of bad calls is tests/test_bad_input.cpp; the disk cache's faults are
// tests/test_cache_faults.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "alloy/alloy.h"
#include "alloy/interrupt.h"
#include "alloy/library.h"
#include "backend/cpu/jit.h"
#include "conformance/harness.h"
#include "core/interrupt_state.h"
#include "scoped_env.h"

using alloy::testing::ScopedEnv;

using namespace alloy;
namespace fs = std::filesystem;

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

// A fresh folder under the temp directory, removed at the end of the scope.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() /
           ("alloy-rel-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

// ---- 1. crashes --------------------------------------------------------------------------------

// A launch reads the interrupt check through a per-thread copy: replacing or removing the check
// must reach every thread's next read (on this thread and on another one).
TEST(Reliability, ReplacedInterruptCheckReachesEveryThread) {
  int first = 0, second = 0;
  set_interrupt_check([&] { ++first; });
  auto check = interrupt::current_check();
  ASSERT_TRUE(check);
  (*check)();
  EXPECT_EQ(first, 1);
  std::thread([&] { (*interrupt::current_check())(); }).join();
  EXPECT_EQ(first, 2);
  set_interrupt_check([&] { ++second; });
  (*interrupt::current_check())();
  std::thread([&] { (*interrupt::current_check())(); }).join();
  EXPECT_EQ(first, 2);
  EXPECT_EQ(second, 2);
  set_interrupt_check({});
  EXPECT_FALSE(interrupt::current_check());
  std::thread([] { EXPECT_FALSE(interrupt::current_check()); }).join();
}

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
  // A 4 TiB output said only "std::bad_alloc". 4 EiB here: a host with overcommit may map 4 TiB.
  const int64_t n = int64_t{1} << 60;  // float32: 4 EiB
  try {
    run_body("y[0] = x[0];", {n});
    ADD_FAILURE() << "a 4 EiB output was allocated";
  } catch (const std::bad_alloc& e) {  // alloy::OutOfMemory
    std::string what = e.what();
    EXPECT_NE(what.find("4611686018427387904 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("4294967296.0 GiB"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot allocate"), std::string::npos) << what;
  }
  expect_good_call_works();
}

// ---- 3. bounds on work --------------------------------------------------------------------------

TEST(Reliability, GridThreadLimit) {
  // grid=(2**31-1,)*3 was accepted and ran for hours.
  expect_error<std::invalid_argument>(
      [] {
        run_body("y[0] = x[0];", {1}, {2147483647, 2147483647, 2147483647});
      },
      {"ALLOY_MAX_GRID_THREADS", "1099511627776", "(2147483647, 2147483647, 2147483647)"});
  {
    ScopedEnv env("ALLOY_MAX_GRID_THREADS", "1000");
    expect_error<std::invalid_argument>(
        [] {
          run_body("y[0] = x[0];", {1}, {10, 10, 11});
        },
        {"limit of 1000", "ALLOY_MAX_GRID_THREADS"});
    auto lib = compile_library(
        "kernel void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {}");
    LibraryCall call;
    call.threads = Dims{1001, 1, 1};
    expect_error<std::invalid_argument>([&] { lib("k", {KernelArg::output({1}, float32)}, call); },
                                        {"limit of 1000", "ALLOY_MAX_GRID_THREADS"});
    EXPECT_NO_THROW(run_body("y[0] = x[0];", {1}, {10, 10, 10}));
    ScopedEnv bad("ALLOY_MAX_GRID_THREADS", "lots");
    expect_error<std::invalid_argument>(
        [] {
          run_body("y[0] = x[0];", {1}, {1, 1, 1});
        },
        {"ALLOY_MAX_GRID_THREADS", "lots"});
  }
  expect_good_call_works();
}

namespace {
struct StopNow : std::runtime_error {
  StopNow() : std::runtime_error("stop now") {}
};
}  // namespace

TEST(Reliability, LongCpuRunsStopAtTheInterruptCheck) {
  // Ctrl-C did not stop a long run: the executor now polls a check between groups.
  // Each thread spins ~1e5 iterations: 2^16 threads take tens of seconds on two cores.
  const char* loop_body = R"(
    uint i = thread_position_in_grid.x;
    float a = x[0];
    for (int k = 0; k < 100000; ++k) a = a * 0.999f + 1.0f;
    y[i] = a;)";
  const char* fiber_body = R"(
    uint i = thread_position_in_grid.x;
    float a = x[0];
    for (int k = 0; k < 100000; ++k) a = a * 0.999f + 1.0f;
    threadgroup_barrier(mem_flags::mem_none);
    y[i] = a;)";
  for (const char* body : {loop_body, fiber_body}) {
    // Compiled first (one thread, same variant): only the launch is timed (a compile under
    // ASan on a loaded machine took most of the 5 s bound).
    run_body(body, {1 << 16}, {1, 1, 1});
    std::atomic<int> calls{0};
    set_interrupt_check([&] {
      if (++calls >= 2) throw StopNow();
    });
    auto t0 = std::chrono::steady_clock::now();
    try {
      run_body(body, {1 << 16}, {1 << 16, 1, 1});
      ADD_FAILURE() << "not interrupted";
    } catch (const alloy::Interrupted& e) {
      EXPECT_THROW(std::rethrow_exception(e.cause()), StopNow);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    set_interrupt_check({});
    EXPECT_GE(calls.load(), 2);
    EXPECT_LT(s, 5.0) << "the launch went on after the check threw";
  }
  expect_good_call_works();
}

TEST(Reliability, InterruptReachesWorkOnAStreamWorker) {
  // A launch queued on a CPU stream runs on that stream's worker thread, where the interrupt
  // check (Python's needs the caller's thread) is never run: the caller runs it while it waits
  // in eval/synchronize and asks the running launch to stop.
  auto k = metal_kernel("spin_on_worker", {"x"}, {"y"}, R"(
    uint i = thread_position_in_grid.x;
    float a = x[0];
    for (int j = 0; j < 100000; ++j) a = a * 0.999f + 1.0f;
    y[i] = a;)");
  Array x = Array::from_doubles({0.5}, {1}, float32, Device::cpu());
  {  // compiled first: the time measured below is the launch's, not the compiler's
    KernelCall warm;
    warm.output_shapes = {{64}};
    warm.output_dtypes = {float32};
    warm.grid = {64, 1, 1};
    warm.threadgroup = {64, 1, 1};
    warm.device = Device::cpu();
    k({x}, warm)[0].eval();
  }
  for (bool use_synchronize : {false, true}) {
    Stream s = new_stream(Device::cpu());
    KernelCall call;
    call.output_shapes = {{1 << 16}};
    call.output_dtypes = {float32};
    call.grid = {1 << 16, 1, 1};
    call.threadgroup = {64, 1, 1};
    call.stream = s;
    Array y = k({x}, call)[0];
    async_eval({y});  // handed to the worker: the caller is free
    std::atomic<int> calls{0};
    auto caller = std::this_thread::get_id();
    std::atomic<bool> other_thread{false};
    set_interrupt_check([&] {
      if (std::this_thread::get_id() != caller) other_thread = true;
      if (++calls >= 2) throw StopNow();
    });
    auto t0 = std::chrono::steady_clock::now();
    try {
      if (use_synchronize)
        synchronize(s);
      else
        y.eval();
      ADD_FAILURE() << "not interrupted";
    } catch (const alloy::Interrupted& e) {
      EXPECT_THROW(std::rethrow_exception(e.cause()), StopNow);
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    set_interrupt_check({});
    EXPECT_GE(calls.load(), 2);
    EXPECT_FALSE(other_thread.load()) << "the check ran on a thread other than the caller's";
    EXPECT_LT(secs, 5.0) << "the worker's launch went on after the check threw";
    // The stream stays usable.
    KernelCall small = call;
    small.output_shapes = {{64}};
    small.grid = {64, 1, 1};
    Array z = k({x}, small)[0];
    auto v = z.to_vector<float>();
    ASSERT_EQ(v.size(), 64u);
    EXPECT_GT(v[0], 0.0f);
  }
}

TEST(Reliability, CompileMemoryLimit) {
  // A header of nested doubling macros drove the host compiler to 24 GB.
  std::string header = "#define X0 1\n";
  for (int i = 1; i <= 34; ++i)
    header += "#define X" + std::to_string(i) + " X" + std::to_string(i - 1) + "+X" +
              std::to_string(i - 1) + "\n";
  ScopedEnv env("ALLOY_COMPILE_MEMORY_MB", "1000");
  auto k = metal_kernel("macro_bomb", {"x"}, {"y"}, "y[0] = x[0] + X34;", header);
  KernelCall call;
  call.output_shapes = {{1}};
  call.output_dtypes = {float32};
  call.device = Device::cpu();
  Array x = Array::from_doubles({1.0}, {1}, float32, Device::cpu());
  auto t0 = std::chrono::steady_clock::now();
  expect_error<CompileError>(
      [&] { eval({k({x}, call)[0]}); },
      {"macro_bomb", "compile memory limit of 1000 MB", "ALLOY_COMPILE_MEMORY_MB"});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 60.0);
  expect_good_call_works();
}

TEST(Reliability, CompileTimeLimit) {
  // A compiler that never finishes is stopped, with everything it started.
  TempDir dir;
  fs::path cxx = dir.path / "slow-cxx";
  fs::path marker = dir.path / "child-survived";
  {
    std::ofstream f(cxx);
    f << "#!/bin/sh\n"
         "if [ \"$1\" = --version ]; then echo slow-cxx 1.0; exit 0; fi\n"
         "(sleep 3; touch "
      << marker.string()
      << ") &\n"
         "sleep 30\n";
  }
  fs::permissions(cxx, fs::perms::owner_all);
  cpu::JitConfig config;
  config.cache_dir = dir.path / "cache";
  config.compiler = cxx.string();
  cpu::Jit jit(config);
  ScopedEnv env("ALLOY_COMPILE_TIMEOUT", "1");
  auto t0 = std::chrono::steady_clock::now();
  expect_error<cpu::CompileFailure>([&] { jit.compile("int f() { return 1; }"); },
                                    {"stopped after 1 s", "ALLOY_COMPILE_TIMEOUT"});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0);
  ::sleep(4);
  EXPECT_FALSE(fs::exists(marker)) << "the compiler's own child outlived the time limit";
}

TEST(Reliability, CompilerThatCannotStartIsNamedWithTheReason) {
  // execve fails (the script's interpreter does not exist): posix_spawn returns its errno, and
  // the error says why instead of showing a compiler log.
  TempDir dir;
  fs::path cxx = dir.path / "broken-cxx";
  {
    std::ofstream f(cxx);
    f << "#!/no/such/interpreter\n";
  }
  fs::permissions(cxx, fs::perms::owner_all);
  cpu::JitConfig config;
  config.cache_dir = dir.path / "cache";
  config.compiler = cxx.string();
  cpu::Jit jit(config);
  expect_error<std::runtime_error>([&] { jit.compile("int f() { return 1; }"); },
                                   {"cannot run", cxx.string(), std::strerror(ENOENT)});
}

// ---- 6. robust mode --------------------------------------------------------------------------

TEST(Reliability, RobustReportsNameTheThreadInLoopMode) {
  // Kernels without barriers run a group as a plain loop; every report said the group's first
  // thread (or (0, 0, 0)).
  for (bool fibers : {false, true}) {
    SCOPED_TRACE(fibers ? "fiber mode" : "loop mode");
    std::string body = "uint i = thread_position_in_grid.x; uint j = thread_position_in_grid.y;\n";
    if (fibers) body += "threadgroup_barrier(mem_flags::mem_none);\n";
    body += "if (i == 37 && j == 2) y[1000 + i] = 1; else y[j * 64 + i] = x[0];\n";
    auto k = metal_kernel("robust_thread", {"x"}, {"y"}, body, "", true, false, {}, true);
    KernelCall call;
    call.output_shapes = {{3 * 64}};
    call.output_dtypes = {float32};
    call.grid = {64, 3, 1};
    call.threadgroup = {16, 2, 1};
    call.device = Device::cpu();
    Array x = Array::from_doubles({0.5}, {1}, float32, Device::cpu());
    take_out_of_range_reports();
    eval({k({x}, call)[0]});
    auto reports = take_out_of_range_reports();
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0].buffer, "y");
    EXPECT_EQ(reports[0].index, 1037);
    EXPECT_EQ(reports[0].thread, (std::array<uint32_t, 3>{37, 2, 0}));
  }
}

TEST(Reliability, RobustReportsKeepTheFirst64OfALaunch) {
  // The cap is documented (take_out_of_range_reports); stderr counts every access.
  auto k = metal_kernel("robust_many", {"x"}, {"y"},
                        "uint i = thread_position_in_grid.x; y[i + 1] = x[0];", "", true, false, {},
                        true);
  KernelCall call;
  call.output_shapes = {{1}};
  call.output_dtypes = {float32};
  call.grid = {500, 1, 1};
  call.threadgroup = {100, 1, 1};
  call.device = Device::cpu();
  Array x = Array::from_doubles({0.5}, {1}, float32, Device::cpu());
  take_out_of_range_reports();
  ::testing::internal::CaptureStderr();
  eval({k({x}, call)[0]});
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(take_out_of_range_reports().size(), 64u);
  EXPECT_NE(err.find("made 500 out-of-range accesses"), std::string::npos) << err;
  EXPECT_NE(err.find("the first 64 are kept"), std::string::npos) << err;
}

// ---- 5. a failed evaluation fails once ---------------------------------------------------------

TEST(Reliability, AFailedEvaluationFailsOnce) {
  // Reading an array retried its failed evaluation: a failing kernel was compiled twice (and an
  // interrupted launch ran again when NumPy retried another protocol).
  auto k = metal_kernel("fails_to_compile", {"x"}, {"y"}, "y[0] = x[0] + not_declared;");
  KernelCall call;
  call.output_shapes = {{1}};
  call.output_dtypes = {float32};
  call.device = Device::cpu();
  Array x = Array::from_doubles({1.0}, {1}, float32, Device::cpu());
  Array y = k({x}, call)[0];
  const void* first = nullptr;
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      y.eval();
      FAIL() << "no error";
    } catch (const CompileError& e) {
      EXPECT_NE(std::string(e.what()).find("not_declared"), std::string::npos);
      if (!first) first = &e;
      EXPECT_EQ(&e, first) << "the evaluation ran again (attempt " << attempt << ")";
    }
  }
  EXPECT_THROW(y.to_doubles(), CompileError);
  expect_good_call_works();
}
