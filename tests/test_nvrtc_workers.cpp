// NVRTC compile workers (docs/nvrtc-workers.md): compiles that run while another runs in this
// process go to alloy-nvrtc-worker processes, which give the same images, logs and errors; a worker
// that dies or misbehaves makes its compile run here; no worker is left unreaped. No GPU needed:
// cubins for sm_90 are compiled and compared.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/errors.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/nvrtc_wire.h"
#include "backend/cuda/tiered.h"
#include "core/files.h"
#include "kernel/compile_pool.h"
#include "kernel/custom_kernel.h"
#include "nvrtc_pch_folders.h"
#include "scoped_env.h"

namespace alloy::cuda {
namespace {

namespace wire = nvrtc::wire;

#define REQUIRE_NVRTC()                                                                  \
  do {                                                                                   \
    if (!nvrtc::available()) GTEST_SKIP() << "NVRTC not found: " << nvrtc::load_error(); \
  } while (0)

// A program no earlier compile in this process has seen (NVRTC keeps nothing between programs,
// but distinct sources keep the comparisons honest). `unused` draws NVRTC's warning #177.
std::string program(int k) {
  static std::mt19937_64 rng(std::random_device{}());
  return "// " + std::to_string(rng()) + "\nextern \"C\" __global__ void scale_" +
         std::to_string(k) + "(float* y, const float* x, int n) {\n  int unused;\n" +
         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] * " +
         std::to_string(k + 1) + ".0f + 0.25f;\n}\n";
}

const std::vector<std::string> kOptions{"--gpu-architecture=sm_90", "-minimal"};

// Every reaped worker is gone for good: not our child any more.
bool reaped(int pid) {
  return ::waitpid(pid, nullptr, WNOHANG) < 0 && errno == ECHILD;
}

using alloy::testing::set_env;

// Each test starts with fresh workers and the environment it asks for, and ends with every worker
// reaped.
class NvrtcWorkers : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"ALLOY_NVRTC_WORKERS", "ALLOY_NVRTC_WORKER", "ALLOY_NVRTC_PRESTART"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      set_env(name, nullptr);
    }
    nvrtc::testing::reset_workers();
  }
  void TearDown() override {
    EXPECT_TRUE(nvrtc::testing::wait_for_prestart(std::chrono::minutes(2)));
    nvrtc::testing::hold_in_process_slot(false);
    nvrtc::testing::fault_next_worker_compile(0);
    std::vector<int> pids = nvrtc::worker_stats().live_pids;
    for (auto& [name, v] : saved_) set_env(name.c_str(), v ? v->c_str() : nullptr);
    nvrtc::testing::reset_workers();
    for (int pid : pids) EXPECT_TRUE(reaped(pid)) << "worker " << pid << " not reaped";
  }
  // Workers are used when the binary beside alloy_tests was found.
  void require_workers() {
    nvrtc::testing::reset_workers();
    nvrtc::compile(program(0), "probe.cu", {}, kOptions, true);  // resolves the configuration
    auto s = nvrtc::worker_stats();
    if (s.max_workers == 0) GTEST_SKIP() << "no NVRTC worker: " << s.disabled_why;
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// A test's start: NVRTC and its workers, with ALLOY_NVRTC_WORKERS set to `count` first (nullptr:
// left as it is), or the test skips. A macro, so that the skip returns from the test itself
// (GTEST_SKIP in require_workers only leaves that function).
#define REQUIRE_WORKERS(count)                                      \
  do {                                                              \
    REQUIRE_NVRTC();                                                \
    if (const char* c = (count)) set_env("ALLOY_NVRTC_WORKERS", c); \
    require_workers();                                              \
    if (IsSkipped()) return;                                        \
  } while (0)

TEST_F(NvrtcWorkers, WorkerCubinPtxAndLogAreByteIdentical) {
  REQUIRE_WORKERS(nullptr);
  nvrtc::testing::hold_in_process_slot(true);  // every compile now goes to a worker
  for (bool cubin : {true, false}) {
    std::string src = program(1);
    std::string here_log, worker_log;
    std::string here = nvrtc::compile_in_process(src, "same.cu", {}, kOptions, cubin, &here_log);
    long before = nvrtc::worker_stats().worker_compiles;
    std::string there = nvrtc::compile(src, "same.cu", {}, kOptions, cubin, &worker_log);
    EXPECT_EQ(nvrtc::worker_stats().worker_compiles, before + 1);
    EXPECT_EQ(here, there) << (cubin ? "cubin" : "PTX") << " differs";
    EXPECT_EQ(here_log, worker_log);
    EXPECT_NE(worker_log.find("unused"), std::string::npos) << worker_log;
  }
  // In-memory headers travel with the request.
  std::string src = "#include \"scale.h\"\n" + program(2);
  const char* header = "#define SCALE 3.0f\n";
  std::vector<nvrtc::Header> headers{{"scale.h", header}};
  EXPECT_EQ(nvrtc::compile_in_process(src, "h.cu", headers, kOptions, true),
            nvrtc::compile(src, "h.cu", headers, kOptions, true));
  EXPECT_EQ(nvrtc::worker_stats().fallbacks, 0);
}

TEST_F(NvrtcWorkers, CompileErrorFromWorkerIsTheSame) {
  REQUIRE_WORKERS(nullptr);
  auto failure = [](bool worker) {
    nvrtc::testing::hold_in_process_slot(worker);
    try {
      nvrtc::compile("int x = ;\n", "bad.cu", {}, kOptions, true);
    } catch (const nvrtc::CompileFailure& e) {
      return std::make_pair(std::string(e.what()), e.log());
    }
    return std::make_pair(std::string("no CompileFailure"), std::string());
  };
  long before = nvrtc::worker_stats().worker_compiles;
  auto there = failure(true);
  EXPECT_EQ(nvrtc::worker_stats().worker_compiles, before + 1);
  auto here = failure(false);
  EXPECT_EQ(here, there);
  EXPECT_NE(there.second.find("bad.cu(1): error"), std::string::npos) << there.second;
}

TEST_F(NvrtcWorkers, MetalKernelErrorNamesTheUsersLineFromAWorker) {
  // The kernel layer maps NVRTC's lines to the body's: the same message either way.
  REQUIRE_WORKERS(nullptr);
  Array x = Array::from_doubles({1, 2, 3, 4}, {4}, float32);
  KernelCall call;
  call.output_shapes = {{4}};
  call.output_dtypes = {float32};
  call.grid = {4, 1, 1};
  call.threadgroup = {4, 1, 1};
  call.device = Device::cpu();
  auto message = [&](bool worker) {
    nvrtc::testing::hold_in_process_slot(worker);
    MetalKernel k = metal_kernel("broken_in_worker", {"inp"}, {"out"},
                                 "uint i = thread_position_in_grid.x;\n"
                                 "out[i] = inp[i] * not_declared_here;\n");
    try {
      std::string why = kernel::compile_call_cubin(k, {x}, call, "sm_90");
      return "compiled: " + why;
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
  };
  long before = nvrtc::worker_stats().worker_compiles;
  std::string there = message(true);
  EXPECT_EQ(nvrtc::worker_stats().worker_compiles, before + 1);
  long in_process = nvrtc::worker_stats().in_process;
  std::string here = message(false);
  EXPECT_EQ(nvrtc::worker_stats().in_process, in_process + 1);  // compiled again, here
  EXPECT_EQ(here, there);
  EXPECT_NE(there.find("not_declared_here"), std::string::npos) << there;
}

TEST_F(NvrtcWorkers, ConcurrentCompilesUseWorkers) {
  REQUIRE_WORKERS("2");
  EXPECT_EQ(nvrtc::worker_stats().max_workers, 2);
  // Four threads start compiles together; one runs here, the others wait for or go to workers.
  // (Whether they overlap depends on the scheduler: a few rounds make it all but certain.)
  const int threads = 4;
  for (int round = 0; round < 5 && nvrtc::worker_stats().worker_compiles == 0; ++round) {
    std::vector<std::string> sources, images(threads);
    for (int t = 0; t < threads; ++t) sources.push_back(program(t));
    std::barrier start(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        start.arrive_and_wait();
        images[t] = nvrtc::compile(sources[t], "c.cu", {}, kOptions, true);
      });
    }
    for (auto& th : pool) th.join();
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(images[t], nvrtc::compile_in_process(sources[t], "c.cu", {}, kOptions, true));
    }
  }
  auto s = nvrtc::worker_stats();
  EXPECT_GT(s.worker_compiles, 0);
  EXPECT_GE(s.spawned, 1);
  EXPECT_LE(s.spawned, 2);
  EXPECT_LE(s.peak_busy_workers, 2);
  EXPECT_EQ(s.fallbacks, 0);
}

// A kernel's first call as the CUDA backend makes it: the quick compile queued with compile_soon
// and run by the caller, the full compile queued with compile_async (CompiledModule::refine).
// The full compile runs on a pool thread by itself, so that a later kernel's first call, alone,
// compiles in this process (a worker's compile costs more: docs/nvrtc-workers.md). It used to
// wait in the queue until that next compile, then take the in-process slot from it.
TEST_F(NvrtcWorkers, LoneCompileAfterABackgroundOneRunsInProcess) {
  REQUIRE_WORKERS(nullptr);
  while (kernel::compile_help()) {  // what earlier tests left queued
  }
  auto before = nvrtc::worker_stats();
  using Job = kernel::CompileJob<std::string>;
  auto quick = std::make_shared<Job>(
      [] { return nvrtc::compile(program(3), "quick.cu", {}, kOptions, true); });
  kernel::compile_soon([weak = std::weak_ptr<Job>(quick)] {
    if (auto j = weak.lock()) j->run();
  });
  EXPECT_FALSE(quick->get().empty());
  auto full = std::make_shared<std::promise<std::string>>();  // may outlive a failed test
  auto full_image = full->get_future();
  kernel::compile_async(
      [full] { full->set_value(nvrtc::compile(program(4), "full.cu", {}, kOptions, true)); });
  ASSERT_EQ(full_image.wait_for(std::chrono::minutes(2)), std::future_status::ready)
      << "the background compile did not run by itself";
  EXPECT_FALSE(full_image.get().empty());
  std::string src = program(5);
  EXPECT_EQ(nvrtc::compile(src, "next.cu", {}, kOptions, true),
            nvrtc::compile_in_process(src, "next.cu", {}, kOptions, true));
  auto after = nvrtc::worker_stats();
  EXPECT_EQ(after.in_process, before.in_process + 3);
  EXPECT_EQ(after.worker_compiles, before.worker_compiles);
  EXPECT_EQ(after.fallbacks, 0);
}

// A program that takes NVRTC a second or more (nested template instantiations): long enough for
// a compile to be seen busy while another one starts.
std::string slow_program(int k) {
  std::string unique = program(k);  // its first line: a random comment
  return unique.substr(0, unique.find('\n')) +
         "\ntemplate <int N, int I> struct F { static constexpr long v = (F<N - 1, I>::v * 3 + I) "
         "% 1000003; };\n"
         "template <int I> struct F<0, I> { static constexpr long v = I; };\n"
         "template <int... I> struct S { static constexpr long v = (F<150, I>::v + ...); };\n"
         "template <int K, int... I> struct M { static constexpr long v = M<K - 1, K, I...>::v; "
         "};\n"
         "template <int... I> struct M<0, I...> { static constexpr long v = S<I...>::v; };\n"
         "extern \"C\" __global__ void slow(long* o) { o[0] = M<" +
         std::to_string(k) + ">::v; }\n";
}

// Waits (up to two minutes) until some compile has taken a worker.
bool a_worker_got_busy() {
  auto end = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (nvrtc::worker_stats().peak_busy_workers == 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool has_auto_pch() {
  auto v = nvrtc::version();
  return v.major > 12 || (v.major == 12 && v.minor >= 8);
}

// The PCH tests' start: NVRTC 12.8+, one worker (it sees every compile: this process's NVRTC
// slot is held), or the test skips.
#define START_ONE_PCH_WORKER()                                \
  do {                                                        \
    REQUIRE_NVRTC();                                          \
    if (!has_auto_pch()) GTEST_SKIP() << "NVRTC before 12.8"; \
    set_env("ALLOY_NVRTC_WORKERS", "1");                      \
    require_workers();                                        \
    if (IsSkipped()) return;                                  \
    nvrtc::testing::hold_in_process_slot(true);               \
  } while (0)

std::vector<std::string> with_pch(std::vector<std::string> options) {
  options.insert(options.end(),
                 {std::string(nvrtc::kAutoPch), "--pch-messages=false", "-diag-suppress=20283"});
  return options;
}

size_t files_in(const std::string& dir) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

const char* kPchHeader = "#define SCALE 3.0f\ntemplate <class T> struct box { T v; };\n";
// Programs that share their directive prefix (what NVRTC's automatic PCH covers).
std::string pch_program(int k) {
  return "#define PCH_TEST_WORKER 1\n#include \"scale.h\"\n" + program(k);
}

// Compiles with the automatic PCH's options (nvrtc::auto_pch_options) that go to a worker use
// NVRTC's PCH there, in the folder this process made for its workers (<pch_dir>/<worker pid>):
// the worker's first compile of a prefix makes the PCH, the later ones load it, and each image is
// byte-identical to the one compiled here without a PCH. The worker's folder goes when the worker
// ends, and NVRTC's own folder (/tmp/__nvrtc_auto_pch_<pid>_0, which its _exit would leave
// behind) is never made.
TEST_F(NvrtcWorkers, WorkerUsesThePchInTheRuntimesFolderAndLeavesNothing) {
  START_ONE_PCH_WORKER();
  std::vector<nvrtc::Header> headers{{"scale.h", kPchHeader}};
  EXPECT_EQ(nvrtc::without_pch_options(with_pch(kOptions)), kOptions);
  std::string dir;
  for (int i = 0; i < 3; ++i) {
    std::string src = pch_program(20 + i);
    std::string want = nvrtc::compile_in_process(src, "pch.cu", headers, kOptions, true);
    long before = nvrtc::worker_stats().worker_compiles;
    EXPECT_EQ(nvrtc::compile(src, "pch.cu", headers, with_pch(kOptions), true), want)
        << "compile " << i;
    auto s = nvrtc::worker_stats();
    EXPECT_EQ(s.worker_compiles, before + 1);
    ASSERT_EQ(s.live_pids.size(), 1u);
    ASSERT_FALSE(s.pch_dir.empty());
    dir = s.pch_dir + "/" + std::to_string(s.live_pids[0]);
    // The runtime asked for the PCH: the worker makes it at its first compile of the prefix.
    EXPECT_GE(files_in(dir), 1u) << dir << " after compile " << i;
  }
  EXPECT_EQ(nvrtc::worker_stats().fallbacks, 0);
  int pid = nvrtc::worker_stats().live_pids[0];
  nvrtc::testing::hold_in_process_slot(false);
  nvrtc::testing::reset_workers();  // the worker ends (_exit)
  EXPECT_TRUE(reaped(pid));
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " outlived its worker";
  EXPECT_EQ(nvrtc_pch_folders(pid).size(), 0u) << "worker " << pid << " left a PCH folder";
}

// A compile without the PCH's options (ALLOY_NVRTC_PCH=0 in the runtime, a prefix's first compile
// there) makes no PCH in a worker either.
TEST_F(NvrtcWorkers, WorkerMakesNoPchUnlessTheRuntimeAsks) {
  START_ONE_PCH_WORKER();
  std::vector<nvrtc::Header> headers{{"scale.h", kPchHeader}};
  for (int i = 0; i < 3; ++i) {
    std::string src = pch_program(30 + i);
    EXPECT_EQ(nvrtc::compile(src, "p.cu", headers, kOptions, true),
              nvrtc::compile_in_process(src, "p.cu", headers, kOptions, true));
  }
  auto s = nvrtc::worker_stats();
  ASSERT_EQ(s.live_pids.size(), 1u);
  EXPECT_EQ(files_in(s.pch_dir + "/" + std::to_string(s.live_pids[0])), 0u);
}

// A worker keeps PCHs of at most 4 prefixes by default (each worker has its own files, 8-14 MB
// each): the fifth prefix compiles without one, to the same image.
TEST_F(NvrtcWorkers, AWorkerMakesPchsOfAtMostFourPrefixes) {
  if (std::getenv("ALLOY_NVRTC_PCH")) GTEST_SKIP() << "ALLOY_NVRTC_PCH is set";
  START_ONE_PCH_WORKER();
  std::vector<nvrtc::Header> headers{{"scale.h", kPchHeader}};
  std::string dir;
  for (int i = 0; i < 6; ++i) {
    std::string src =
        "#define PCH_LIMIT_PREFIX_" + std::to_string(i) + " 1\n" + pch_program(60 + i);
    EXPECT_EQ(nvrtc::compile(src, "l.cu", headers, with_pch(kOptions), true),
              nvrtc::compile_in_process(src, "l.cu", headers, kOptions, true));
    auto s = nvrtc::worker_stats();
    ASSERT_EQ(s.live_pids.size(), 1u);
    dir = s.pch_dir + "/" + std::to_string(s.live_pids[0]);
    EXPECT_EQ(files_in(dir), static_cast<size_t>(std::min(i + 1, 4))) << "after prefix " << i;
  }
  EXPECT_EQ(nvrtc::worker_stats().fallbacks, 0);
}

// The worker's PCH folder removed under it (as NvrtcPch.AFolderRemovedUnderNvrtcFallsBack...
// does to this process's): its compile with the PCH's options still answers the same image (the
// worker compiles again without them, no fallback to this process), and so do later ones.
TEST_F(NvrtcWorkers, AWorkersPchFolderRemovedUnderItGivesTheSameImage) {
  START_ONE_PCH_WORKER();
  std::vector<nvrtc::Header> headers{{"scale.h", kPchHeader}};
  nvrtc::compile(pch_program(40), "r.cu", headers, with_pch(kOptions), true);  // makes the PCH
  auto s = nvrtc::worker_stats();
  ASSERT_EQ(s.live_pids.size(), 1u);
  std::string dir = s.pch_dir + "/" + std::to_string(s.live_pids[0]);
  ASSERT_GE(files_in(dir), 1u) << dir;
  std::filesystem::remove_all(dir);
  for (int i = 0; i < 2; ++i) {
    std::string src = pch_program(42 + i);
    EXPECT_EQ(nvrtc::compile(src, "r.cu", headers, with_pch(kOptions), true),
              nvrtc::compile_in_process(src, "r.cu", headers, kOptions, true));
  }
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.worker_compiles, 3);
  EXPECT_EQ(s.fallbacks, 0);
  EXPECT_EQ(s.live_pids.size(), 1u);
}

// A process that used the workers' PCH removes their folder at exit, and the folder of a process
// that died without removing its own (killed) is removed by the next process that starts workers.
TEST(NvrtcPchFolders, ThoseOfGoneProcessesAreRemovedOthersKept) {
  // NVRTC's own folders (__nvrtc_auto_pch_<pid>_<n>) and the workers' roots
  // (alloy-nvrtc-pch-<pid>) of a process that is gone go; this process's, a live one's (pid 1)
  // and names that only look alike stay. No NVRTC needed: the sweep reads names only.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string d = std::to_string(dead), me = std::to_string(::getpid());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("alloy-pch-sweep-" + me);
  std::filesystem::remove_all(dir);
  const std::vector<std::string> gone = {"__nvrtc_auto_pch_" + d + "_0",
                                         "__nvrtc_auto_pch_" + d + "_12", "alloy-nvrtc-pch-" + d};
  const std::vector<std::string> kept = {
      "__nvrtc_auto_pch_" + me + "_0", "__nvrtc_auto_pch_1_0",
      "alloy-nvrtc-pch-" + me,         "alloy-nvrtc-pch-1",
      "__nvrtc_auto_pch_" + d,         "__nvrtc_auto_pch_" + d + "_",
      "__nvrtc_auto_pch_" + d + "_0x", "alloy-nvrtc-pch-" + d + "_0",
      "alloy-nvrtc-pch-" + d + "-old", "other-" + d};
  for (const auto& n : gone) {
    std::filesystem::create_directories(dir / n / "sub");
    std::ofstream(dir / n / "sub" / "kernel.pch") << "x";
  }
  for (const auto& n : kept) std::filesystem::create_directories(dir / n);
  nvrtc::remove_dead_processes_pch_folders(dir.string());
  for (const auto& n : gone) EXPECT_FALSE(std::filesystem::exists(dir / n)) << n;
  for (const auto& n : kept) EXPECT_TRUE(std::filesystem::exists(dir / n)) << n;
  std::filesystem::remove_all(dir);
}

TEST_F(NvrtcWorkers, WorkersPchFolderIsRemovedAtExitAndStaleOnesAtStart) {
  REQUIRE_NVRTC();
  if (!has_auto_pch()) GTEST_SKIP() << "NVRTC before 12.8";
  require_workers();
  if (IsSkipped()) return;
  // A folder named after a process that is gone.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  std::filesystem::path stale =
      std::filesystem::path(temp_dir()) / ("alloy-nvrtc-pch-" + std::to_string(dead));
  std::filesystem::create_directories(stale / "123");
  { std::ofstream(stale / "123" / "kernel.pch") << "x"; }
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::fflush(nullptr);  // the child must not print what is buffered again
  pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    ::setenv("ALLOY_NVRTC_WORKERS", "1", 1);  // a forked child: no pool threads
    nvrtc::testing::reset_workers();
    nvrtc::testing::hold_in_process_slot(true);
    std::vector<nvrtc::Header> headers{{"scale.h", kPchHeader}};
    for (int i = 0; i < 2; ++i)
      nvrtc::compile(pch_program(50 + i), "e.cu", headers, with_pch(kOptions), true);
    auto s = nvrtc::worker_stats();
    char path[4096] = {};
    std::snprintf(path, sizeof path, "%s", s.pch_dir.c_str());
    int code =
        s.live_pids.size() == 1 && files_in(s.pch_dir + "/" + std::to_string(s.live_pids[0])) >= 1
            ? 0
            : 5;
    if (::write(fds[1], path, sizeof path) != static_cast<ssize_t>(sizeof path)) ::_exit(2);
    std::exit(code);  // atexit handlers: the workers end, then their folder goes
  }
  ASSERT_GT(child, 0);
  ::close(fds[1]);
  char path[4096] = {};
  EXPECT_EQ(::read(fds[0], path, sizeof path), static_cast<ssize_t>(sizeof path));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_NE(path[0], '\0');
  EXPECT_NE(std::string(path).find("alloy-nvrtc-pch-" + std::to_string(child)), std::string::npos)
      << path;
  EXPECT_FALSE(std::filesystem::exists(path)) << path << " outlived its process";
  EXPECT_FALSE(std::filesystem::exists(stale)) << stale << " (of a dead process) was not removed";
  std::filesystem::remove_all(stale);
}

// A background compile (the tiered compile's full one: no caller waits for it) goes to a worker
// even though the in-process slot is free, and the next one reuses that worker.
TEST_F(NvrtcWorkers, BackgroundCompileGoesToAWorkerWhileTheSlotIsFree) {
  REQUIRE_WORKERS(nullptr);
  auto before = nvrtc::worker_stats();
  std::string a = program(6), b = program(7);
  std::string image_a, image_b;
  {
    nvrtc::BackgroundScope background;
    EXPECT_TRUE(nvrtc::in_background());
    image_a = nvrtc::compile(a, "bg.cu", {}, kOptions, true);
    image_b = nvrtc::compile(b, "bg.cu", {}, kOptions, true);
  }
  EXPECT_FALSE(nvrtc::in_background());
  EXPECT_EQ(image_a, nvrtc::compile_in_process(a, "bg.cu", {}, kOptions, true));
  EXPECT_EQ(image_b, nvrtc::compile_in_process(b, "bg.cu", {}, kOptions, true));
  auto s = nvrtc::worker_stats();
  EXPECT_EQ(s.worker_compiles, before.worker_compiles + 2);
  EXPECT_EQ(s.in_process, before.in_process);
  EXPECT_EQ(s.background, before.background + 2);
  EXPECT_EQ(s.background_in_process, before.background_in_process);
  EXPECT_EQ(s.spawned, before.spawned + 1);  // the idle worker was used again
  EXPECT_EQ(s.fallbacks, 0);
  // Outside the scope a lone compile runs here again.
  std::string c = program(8);
  EXPECT_FALSE(nvrtc::compile(c, "caller.cu", {}, kOptions, true).empty());
  EXPECT_EQ(nvrtc::worker_stats().in_process, before.in_process + 1);
}

// A caller's compile while a background one runs: the background one is on a worker, so the
// caller compiles in this process (before, the background compile held the in-process slot and
// the caller went to a worker).
TEST_F(NvrtcWorkers, CallersCompileDuringABackgroundOneRunsInProcess) {
  REQUIRE_WORKERS(nullptr);
  auto before = nvrtc::worker_stats();
  std::string slow = slow_program(30);
  auto background = std::async(std::launch::async, [&] {
    nvrtc::BackgroundScope scope;
    return nvrtc::compile(slow, "refine.cu", {}, kOptions, true);
  });
  ASSERT_TRUE(a_worker_got_busy()) << "the background compile took no worker";
  std::string src = program(9);
  std::string image = nvrtc::compile(src, "first_call.cu", {}, kOptions, true);
  auto during = nvrtc::worker_stats();
  EXPECT_EQ(during.in_process, before.in_process + 1);  // the caller's
  EXPECT_EQ(image, nvrtc::compile_in_process(src, "first_call.cu", {}, kOptions, true));
  EXPECT_FALSE(background.get().empty());
  auto s = nvrtc::worker_stats();
  EXPECT_EQ(s.worker_compiles, before.worker_compiles + 1);  // the background one's
  EXPECT_EQ(s.background, before.background + 1);
  EXPECT_EQ(s.background_in_process, before.background_in_process);
  EXPECT_EQ(s.fallbacks, 0);
}

// With every worker busy, a background compile takes the free in-process slot rather than wait.
TEST_F(NvrtcWorkers, BackgroundCompileRunsHereWhenEveryWorkerIsBusy) {
  REQUIRE_WORKERS("1");
  auto before = nvrtc::worker_stats();
  nvrtc::testing::hold_in_process_slot(true);  // the slow caller's compile goes to the worker
  std::atomic<bool> slow_done{false};
  std::string slow = slow_program(60);
  auto busy = std::async(std::launch::async, [&] {
    std::string image = nvrtc::compile(slow, "busy.cu", {}, kOptions, true);
    slow_done = true;
    return image;
  });
  ASSERT_TRUE(a_worker_got_busy());
  nvrtc::testing::hold_in_process_slot(false);
  std::string src = program(10);
  std::string image;
  {
    nvrtc::BackgroundScope scope;
    image = nvrtc::compile(src, "bg.cu", {}, kOptions, true);
  }
  EXPECT_FALSE(slow_done.load()) << "the slow compile ended first: the test proves nothing";
  EXPECT_EQ(image, nvrtc::compile_in_process(src, "bg.cu", {}, kOptions, true));
  EXPECT_FALSE(busy.get().empty());
  auto s = nvrtc::worker_stats();
  EXPECT_EQ(s.background_in_process, before.background_in_process + 1);
  EXPECT_EQ(s.spawned, before.spawned + 1);
  EXPECT_EQ(s.fallbacks, 0);
}

// A background compile takes nothing while a caller waits. One worker, the slot held: a slow
// caller's compile takes the worker; a background compile, then a second caller, wait. When the
// slot is freed, the caller takes it and finishes first (the background compile waited longer,
// and takes the slot when every worker is busy: before, it could take it from the caller).
TEST_F(NvrtcWorkers, BackgroundCompileWaitsWhileACallerWaits) {
  REQUIRE_WORKERS("1");
  nvrtc::testing::hold_in_process_slot(true);
  std::string slow = slow_program(60);
  auto busy = std::async(std::launch::async,
                         [&] { return nvrtc::compile(slow, "busy.cu", {}, kOptions, true); });
  ASSERT_TRUE(a_worker_got_busy());
  auto wait_until = [](auto done) {
    auto end = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (!done(nvrtc::worker_stats())) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  };
  std::atomic<int> finished{0};
  int bg_done = 0, caller_done = 0;
  std::string bg_src = program(12), caller_src = program(13);
  auto bg = std::async(std::launch::async, [&] {
    nvrtc::BackgroundScope scope;
    std::string image = nvrtc::compile(bg_src, "bg.cu", {}, kOptions, true);
    bg_done = ++finished;
    return image;
  });
  ASSERT_TRUE(wait_until([](const auto& s) { return s.waiting_background == 1; }));
  auto caller = std::async(std::launch::async, [&] {
    std::string image = nvrtc::compile(caller_src, "caller.cu", {}, kOptions, true);
    caller_done = ++finished;
    return image;
  });
  ASSERT_TRUE(wait_until([](const auto& s) { return s.waiting_callers == 1; }));
  nvrtc::testing::hold_in_process_slot(false);
  EXPECT_EQ(caller.get(), nvrtc::compile_in_process(caller_src, "caller.cu", {}, kOptions, true));
  EXPECT_EQ(bg.get(), nvrtc::compile_in_process(bg_src, "bg.cu", {}, kOptions, true));
  EXPECT_FALSE(busy.get().empty());
  EXPECT_EQ(caller_done, 1) << "the background compile took the slot freed for the caller";
  EXPECT_EQ(bg_done, 2);
  EXPECT_EQ(nvrtc::worker_stats().fallbacks, 0);
}

// Without workers a background compile runs here; a worker that fails makes it run here too.
TEST_F(NvrtcWorkers, BackgroundCompileFallsBackToThisProcess) {
  REQUIRE_NVRTC();
  std::string src = program(11);
  std::string image = nvrtc::compile_in_process(src, "bg.cu", {}, kOptions, true);
  set_env("ALLOY_NVRTC_WORKERS", "0");
  nvrtc::testing::reset_workers();
  {
    nvrtc::BackgroundScope scope;
    EXPECT_EQ(nvrtc::compile(src, "bg.cu", {}, kOptions, true), image);
    EXPECT_EQ(nvrtc::compile(src, "bg.cu", {}, kOptions, true), image);
  }
  auto s = nvrtc::worker_stats();
  EXPECT_EQ(s.spawned, 0);
  EXPECT_EQ(s.background, 2);
  EXPECT_EQ(s.background_in_process, 2);
  EXPECT_EQ(s.in_process, 2);
  set_env("ALLOY_NVRTC_WORKERS", nullptr);
  require_workers();
  if (IsSkipped()) return;
  auto before = nvrtc::worker_stats();
  nvrtc::testing::fault_next_worker_compile(wire::kExitBeforeReply);
  {
    nvrtc::BackgroundScope scope;
    EXPECT_EQ(nvrtc::compile(src, "bg.cu", {}, kOptions, true), image);
  }
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.fallbacks, before.fallbacks + 1);
  EXPECT_EQ(s.background_in_process, before.background_in_process + 1);
  EXPECT_EQ(s.worker_compiles, before.worker_compiles);
}

TEST_F(NvrtcWorkers, WorkerExitingMidCompileFallsBackAndIsReplaced) {
  REQUIRE_WORKERS(nullptr);
  nvrtc::testing::hold_in_process_slot(true);
  std::string src = program(3);
  nvrtc::compile(src, "warm.cu", {}, kOptions, true);  // a worker is up
  auto s = nvrtc::worker_stats();
  ASSERT_EQ(s.live_pids.size(), 1u);
  int pid = s.live_pids[0];
  nvrtc::testing::fault_next_worker_compile(wire::kExitBeforeReply);
  std::string log;
  std::string image = nvrtc::compile(src, "crash.cu", {}, kOptions, true, &log);
  EXPECT_EQ(image, nvrtc::compile_in_process(src, "crash.cu", {}, kOptions, true));
  EXPECT_NE(log.find("unused"), std::string::npos) << log;
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.fallbacks, 1);
  EXPECT_TRUE(s.live_pids.empty());
  EXPECT_TRUE(reaped(pid));
  // The next compile starts a new worker.
  EXPECT_EQ(nvrtc::compile(src, "again.cu", {}, kOptions, true), image);
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.spawned, 2);
  EXPECT_EQ(s.worker_compiles, 2);
  ASSERT_EQ(s.live_pids.size(), 1u);
  EXPECT_NE(s.live_pids[0], pid);
}

TEST_F(NvrtcWorkers, CompileErrorStillRaisedWhenTheWorkerDies) {
  REQUIRE_WORKERS(nullptr);
  nvrtc::testing::hold_in_process_slot(true);
  nvrtc::testing::fault_next_worker_compile(wire::kExitBeforeReply);
  try {
    nvrtc::compile("int x = ;\n", "bad.cu", {}, kOptions, true);
    FAIL() << "expected a CompileFailure";
  } catch (const nvrtc::CompileFailure& e) {
    EXPECT_NE(e.log().find("bad.cu(1): error"), std::string::npos) << e.log();
  }
  EXPECT_EQ(nvrtc::worker_stats().fallbacks, 1);
}

TEST_F(NvrtcWorkers, KilledOrGarbledWorkerFallsBack) {
  REQUIRE_WORKERS(nullptr);
  nvrtc::testing::hold_in_process_slot(true);
  std::string src = program(4);
  std::string image = nvrtc::compile_in_process(src, "k.cu", {}, kOptions, true);
  EXPECT_EQ(nvrtc::compile(src, "k.cu", {}, kOptions, true), image);
  // Killed while idle: the next request finds it gone.
  auto s = nvrtc::worker_stats();
  ASSERT_EQ(s.live_pids.size(), 1u);
  int killed = s.live_pids[0];
  ASSERT_EQ(::kill(killed, SIGKILL), 0);
  EXPECT_EQ(nvrtc::compile(src, "k.cu", {}, kOptions, true), image);
  EXPECT_EQ(nvrtc::worker_stats().fallbacks, 1);
  EXPECT_TRUE(reaped(killed));
  // A reply that is not one: that worker is killed and reaped, the compile runs here.
  nvrtc::testing::fault_next_worker_compile(wire::kGarbageReply);
  EXPECT_EQ(nvrtc::compile(src, "k.cu", {}, kOptions, true), image);
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.fallbacks, 2);
  EXPECT_EQ(s.spawned, 2);  // the first, then its replacement (which answered garbage)
  EXPECT_TRUE(s.live_pids.empty());
}

TEST_F(NvrtcWorkers, WorkersOffKeepsCompilesInProcess) {
  REQUIRE_NVRTC();
  set_env("ALLOY_NVRTC_WORKERS", "0");
  nvrtc::testing::reset_workers();
  nvrtc::testing::hold_in_process_slot(true);  // no effect without workers
  std::vector<std::string> sources{program(0), program(1), program(2)}, images(3);
  std::vector<std::thread> pool;
  for (int t = 0; t < 3; ++t) {
    pool.emplace_back(
        [&, t] { images[t] = nvrtc::compile(sources[t], "off.cu", {}, kOptions, true); });
  }
  for (auto& th : pool) th.join();
  for (const auto& image : images) EXPECT_FALSE(image.empty());
  auto s = nvrtc::worker_stats();
  EXPECT_EQ(s.max_workers, 0);
  EXPECT_EQ(s.spawned, 0);
  EXPECT_EQ(s.in_process, 3);
  EXPECT_NE(s.disabled_why.find("ALLOY_NVRTC_WORKERS=0"), std::string::npos) << s.disabled_why;
}

TEST_F(NvrtcWorkers, MissingOrBogusWorkerBinaryKeepsCompilesInProcess) {
  REQUIRE_NVRTC();
  std::string src = program(5);
  std::string image = nvrtc::compile_in_process(src, "m.cu", {}, kOptions, true);
  set_env("ALLOY_NVRTC_WORKER", "/nonexistent/alloy-nvrtc-worker");
  nvrtc::testing::reset_workers();
  nvrtc::testing::hold_in_process_slot(true);
  EXPECT_EQ(nvrtc::compile(src, "m.cu", {}, kOptions, true), image);
  auto s = nvrtc::worker_stats();
  EXPECT_EQ(s.spawned, 0);
  EXPECT_NE(s.disabled_why.find("/nonexistent/alloy-nvrtc-worker"), std::string::npos)
      << s.disabled_why;
  // A program that is not a worker (it never greets): tried a few times, then workers are off.
  set_env("ALLOY_NVRTC_WORKER", "/bin/true");
  nvrtc::testing::reset_workers();
  EXPECT_EQ(nvrtc::compile(src, "m.cu", {}, kOptions, true), image);
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.spawned, 0);
  EXPECT_EQ(s.max_workers, 0);
  EXPECT_NE(s.disabled_why.find("not an NVRTC worker"), std::string::npos) << s.disabled_why;
}

TEST_F(NvrtcWorkers, ForkedChildUsesNoneOfItsParentsWorkers) {
  // A child forked after workers exist (Python's multiprocessing) closes its copies of their
  // sockets and starts its own; the parent's workers keep answering the parent alone.
  REQUIRE_WORKERS(nullptr);
  nvrtc::testing::hold_in_process_slot(true);
  std::string src = program(6);
  std::string image = nvrtc::compile(src, "f.cu", {}, kOptions, true);
  ASSERT_EQ(nvrtc::worker_stats().live_pids.size(), 1u);
  std::fflush(nullptr);  // the child must not print what is buffered again
  pid_t child = ::fork();
  if (child == 0) {
    int code = 0;
    if (!nvrtc::worker_stats().live_pids.empty()) code = 1;
    try {
      if (nvrtc::compile(src, "f.cu", {}, kOptions, true) != image) code = 2;
    } catch (...) {
      code = 3;
    }
    auto s = nvrtc::worker_stats();
    if (s.fallbacks != 0 || s.worker_compiles != 2) code = 4;  // its own new worker answered
    nvrtc::testing::reset_workers();                           // reaps it
    ::_exit(code);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(nvrtc::compile(src, "f.cu", {}, kOptions, true), image);
  auto s = nvrtc::worker_stats();
  EXPECT_EQ(s.worker_compiles, 2);
  EXPECT_EQ(s.fallbacks, 0);
}

TEST_F(NvrtcWorkers, WorkersAreReapedAtExit) {
  // A process that exits with workers ends and reaps them itself: an orphaned worker's new
  // parent (a container's first process) may never reap it. This test process becomes the
  // subreaper of a child's orphans, so a worker the child left unreaped would stay a zombie here.
  REQUIRE_WORKERS(nullptr);
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::fflush(nullptr);  // the child must not print what is buffered again
  pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    nvrtc::testing::hold_in_process_slot(true);
    nvrtc::compile(program(7), "x.cu", {}, kOptions, true);
    auto pids = nvrtc::worker_stats().live_pids;
    int pid = pids.size() == 1 ? pids[0] : 0;
    if (::write(fds[1], &pid, sizeof pid) != sizeof pid) ::_exit(2);
    std::exit(0);  // atexit handlers: the workers are ended here
  }
  ASSERT_GT(child, 0);
  ::close(fds[1]);
  int worker = 0;
  EXPECT_EQ(::read(fds[0], &worker, sizeof worker), static_cast<ssize_t>(sizeof worker));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_GT(worker, 0);
  // Reaped by the child before it exited: no such process (not even a zombie) now.
  errno = 0;
  EXPECT_EQ(::kill(worker, 0), -1);
  EXPECT_EQ(errno, ESRCH) << "worker " << worker << " outlived its parent or was left a zombie";
  if (errno != ESRCH) ::waitpid(worker, nullptr, 0);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

// ---- Workers started ahead (nvrtc::prestart_workers, docs/nvrtc-workers.md) ----

// A warm-up with the PCH tests' prefix (pch_program), as the tests' compiles send it.
nvrtc::WarmUp pch_warm_up(int k) {
  nvrtc::WarmUp w;
  w.source = pch_program(k);
  w.headers = {{"scale.h", kPchHeader}};
  w.options = kOptions;
  return w;
}

// Starts workers ahead and waits (up to two minutes) until they are warm or ended.
nvrtc::WorkerStats prestart_and_wait(nvrtc::WarmUp w) {
  nvrtc::prestart_workers(std::move(w));
  EXPECT_TRUE(nvrtc::testing::wait_for_prestart(std::chrono::minutes(2)));
  return nvrtc::worker_stats();
}

// prestart_workers starts the limit's workers, each warmed by the warm-up compile (its PCH folder
// holds the PCH of the warm-up's prefix); a later compile of that prefix is served by a warm
// worker, none is started for it, and it makes no PCH (the warm-up's is loaded).
TEST_F(NvrtcWorkers, PrestartedWorkersAreWarmAndServeTheNextCompiles) {
  REQUIRE_WORKERS("2");
  // The warm-up asks for a PCH while this process makes them: one that ran other tests first (one
  // process for the whole suite) may have turned them off after a PCH failure.
  const bool pch = has_auto_pch() && !nvrtc::pch_request_options().empty();
  auto s = prestart_and_wait(pch_warm_up(60));
  EXPECT_EQ(s.prestarted, 2);
  EXPECT_EQ(s.spawned, 2);
  EXPECT_EQ(s.warm_ups, 2);
  EXPECT_EQ(s.warm_up_failures, 0);
  EXPECT_EQ(s.warming, 0);
  EXPECT_FALSE(s.prestarting);
  EXPECT_EQ(s.worker_compiles, 0);  // a warm-up is no compile of the runtime's
  ASSERT_EQ(s.live_pids.size(), 2u);
  auto pch_files = [&] {
    size_t n = 0;
    for (int pid : nvrtc::worker_stats().live_pids)
      n += files_in(s.pch_dir + "/" + std::to_string(pid));
    return n;
  };
  if (pch) {
    ASSERT_FALSE(s.pch_dir.empty());
    for (int pid : s.live_pids)
      EXPECT_GE(files_in(s.pch_dir + "/" + std::to_string(pid)), 1u) << "worker " << pid;
  }
  const size_t files = pch_files();
  nvrtc::testing::hold_in_process_slot(true);
  std::vector<nvrtc::Header> headers{{"scale.h", kPchHeader}};
  for (int i = 0; i < 2; ++i) {
    std::string src = pch_program(61 + i);
    std::string want = nvrtc::compile_in_process(src, "pre.cu", headers, kOptions, true);
    EXPECT_EQ(nvrtc::compile(src, "pre.cu", headers, with_pch(kOptions), true), want);
  }
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.worker_compiles, 2);
  EXPECT_EQ(s.spawned, 2);  // none started for them
  EXPECT_EQ(s.fallbacks, 0);
  if (pch) {
    EXPECT_EQ(pch_files(), files) << "a compile of the warm-up's prefix made a PCH of its own";
  }
  // Started ahead again with every worker alive: none more.
  s = prestart_and_wait(pch_warm_up(63));
  EXPECT_EQ(s.prestarted, 2);
  EXPECT_EQ(s.live_pids.size(), 2u);
}

// At most 8 are started ahead whatever the limit (every GPU process pays for them); the others
// start at compiles, as before.
TEST_F(NvrtcWorkers, AtMostEightAreStartedAhead) {
  REQUIRE_WORKERS("10");
  nvrtc::WarmUp w;
  w.source = program(68);
  w.options = kOptions;
  w.pch = false;
  auto s = prestart_and_wait(std::move(w));
  EXPECT_EQ(s.max_workers, 10);
  EXPECT_EQ(s.prestarted, 8);
  EXPECT_EQ(s.warm_ups, 8);
  EXPECT_EQ(s.live_pids.size(), 8u);
}

// A compile that comes while the workers warm up takes the in-process slot when it is free, and
// otherwise waits for a worker started ahead rather than starting one more than the limit.
TEST_F(NvrtcWorkers, CompilesDuringTheWarmUpStartNoMoreWorkers) {
  REQUIRE_WORKERS("1");
  nvrtc::prestart_workers(pch_warm_up(64));
  std::string lone = program(64);
  EXPECT_EQ(nvrtc::compile(lone, "d.cu", {}, kOptions, true),
            nvrtc::compile_in_process(lone, "d.cu", {}, kOptions, true));
  nvrtc::testing::hold_in_process_slot(true);
  std::vector<std::string> sources{program(65), program(66)}, images(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back(
        [&, t] { images[t] = nvrtc::compile(sources[t], "d.cu", {}, kOptions, true); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 2; ++t)
    EXPECT_EQ(images[t], nvrtc::compile_in_process(sources[t], "d.cu", {}, kOptions, true));
  ASSERT_TRUE(nvrtc::testing::wait_for_prestart(std::chrono::minutes(2)));
  auto s = nvrtc::worker_stats();
  EXPECT_EQ(s.spawned, 1);  // the one started ahead, nothing else
  EXPECT_EQ(s.prestarted, 1);
  EXPECT_EQ(s.worker_compiles, 2);
  EXPECT_LE(s.live_pids.size(), 1u);
}

// A worker inherits no descriptor of the runtime's process but its socket and 0-2: a pipe another
// thread opened without O_CLOEXEC (gtest's death-test pipe, whose reader waits for its end of
// file; a user's) is closed in it. Before, a worker started meanwhile kept the pipe's write end
// open for the process's lifetime and its reader never saw the end (the likely cause of a GPU
// test shard that hung once in a death test; not reproduced).
TEST_F(NvrtcWorkers, WorkersInheritNoOtherDescriptor) {
  REQUIRE_WORKERS("1");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);  // no O_CLOEXEC
  nvrtc::testing::hold_in_process_slot(true);
  std::string src = program(67);
  EXPECT_EQ(nvrtc::compile(src, "fd.cu", {}, kOptions, true),
            nvrtc::compile_in_process(src, "fd.cu", {}, kOptions, true));
  nvrtc::testing::hold_in_process_slot(false);
  auto s = nvrtc::worker_stats();
  ASSERT_EQ(s.live_pids.size(), 1u);  // started with the pipe open, alive now
  ::close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1) << "the pipe's write end is still open somewhere";
  char c;
  EXPECT_EQ(::read(fds[0], &c, 1), 0);  // end of file: nobody else holds the write end
  ::close(fds[0]);
}

// ALLOY_NVRTC_PRESTART=0 (or workers off) starts nothing ahead: compiles start workers as before.
TEST_F(NvrtcWorkers, PrestartOffStartsNone) {
  REQUIRE_WORKERS(nullptr);
  EXPECT_TRUE(nvrtc::prestart_wanted());
  set_env("ALLOY_NVRTC_PRESTART", "0");
  nvrtc::testing::reset_workers();
  EXPECT_FALSE(nvrtc::prestart_wanted());
  auto s = prestart_and_wait(pch_warm_up(70));
  EXPECT_EQ(s.prestarted, 0);
  EXPECT_EQ(s.spawned, 0);
  EXPECT_TRUE(s.live_pids.empty());
  nvrtc::testing::hold_in_process_slot(true);
  EXPECT_FALSE(nvrtc::compile(program(71), "off.cu", {}, kOptions, true).empty());
  EXPECT_EQ(nvrtc::worker_stats().spawned, 1);  // lazily, at the compile
  nvrtc::testing::hold_in_process_slot(false);
  set_env("ALLOY_NVRTC_PRESTART", nullptr);
  set_env("ALLOY_NVRTC_WORKERS", "0");
  nvrtc::testing::reset_workers();
  EXPECT_FALSE(nvrtc::prestart_wanted());
  s = prestart_and_wait(pch_warm_up(72));
  EXPECT_EQ(s.prestarted, 0);
  EXPECT_EQ(s.spawned, 0);
  // A malformed setting starts nothing ahead (the next compile that reads it raises the error).
  set_env("ALLOY_NVRTC_WORKERS", nullptr);
  set_env("ALLOY_NVRTC_PRESTART", "maybe");
  EXPECT_FALSE(nvrtc::prestart_wanted());
  set_env("ALLOY_NVRTC_PRESTART", nullptr);
}

// A warm-up that fails (the worker dies in it), a worker binary that is missing or never greets:
// nothing is left running, and compiles work (through workers started as before, or here).
TEST_F(NvrtcWorkers, AWarmUpFailureLeavesCompilesWorking) {
  REQUIRE_WORKERS("1");
  nvrtc::testing::fault_next_worker_compile(wire::kExitBeforeReply);
  auto s = prestart_and_wait(pch_warm_up(80));
  EXPECT_EQ(s.prestarted, 1);
  EXPECT_EQ(s.warm_ups, 0);
  EXPECT_EQ(s.warm_up_failures, 1);
  EXPECT_TRUE(s.live_pids.empty());
  nvrtc::testing::hold_in_process_slot(true);
  std::string src = program(81);
  std::string image = nvrtc::compile_in_process(src, "w.cu", {}, kOptions, true);
  EXPECT_EQ(nvrtc::compile(src, "w.cu", {}, kOptions, true), image);
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.spawned, 2);  // a new one, started by the compile
  EXPECT_EQ(s.worker_compiles, 1);
  EXPECT_EQ(s.fallbacks, 0);
  nvrtc::testing::hold_in_process_slot(false);

  set_env("ALLOY_NVRTC_WORKER", "/nonexistent/alloy-nvrtc-worker");
  nvrtc::testing::reset_workers();
  s = prestart_and_wait(pch_warm_up(82));
  EXPECT_EQ(s.spawned, 0);
  nvrtc::testing::hold_in_process_slot(true);
  EXPECT_EQ(nvrtc::compile(src, "w.cu", {}, kOptions, true), image);
  EXPECT_EQ(nvrtc::worker_stats().in_process, 1);
  nvrtc::testing::hold_in_process_slot(false);

  // A program that never greets: its starts ahead count as failed starts (3 turn workers off).
  set_env("ALLOY_NVRTC_WORKER", "/bin/true");
  set_env("ALLOY_NVRTC_WORKERS", "3");
  nvrtc::testing::reset_workers();
  s = prestart_and_wait(pch_warm_up(83));
  EXPECT_EQ(s.spawned, 0);
  EXPECT_EQ(s.max_workers, 0);
  EXPECT_NE(s.disabled_why.find("not an NVRTC worker"), std::string::npos) << s.disabled_why;
  EXPECT_TRUE(s.live_pids.empty());
  EXPECT_EQ(nvrtc::compile(src, "w.cu", {}, kOptions, true), image);
}

// A process that exits while its workers started ahead are still warming, or once they are warm,
// ends and reaps them itself, and leaves no PCH folder (this test process is the subreaper of the
// child's orphans: an unreaped worker would stay a zombie here).
TEST_F(NvrtcWorkers, PrestartedWorkersAreReapedAtExitAndLeaveNothing) {
  REQUIRE_WORKERS(nullptr);
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  for (bool wait_until_warm : {false, true}) {
    SCOPED_TRACE(wait_until_warm ? "exit once warm" : "exit while warming");
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    std::fflush(nullptr);  // the child must not print what is buffered again
    pid_t child = ::fork();
    if (child == 0) {
      ::close(fds[0]);
      ::setenv("ALLOY_NVRTC_WORKERS", "1", 1);  // a forked child: no pool threads
      nvrtc::testing::reset_workers();
      // A warm-up long enough (100 kernels in one program) that the exit comes during it.
      nvrtc::WarmUp w = pch_warm_up(90);
      for (int k = 0; k < 100; ++k) w.source += program(1000 + k);
      nvrtc::prestart_workers(std::move(w));
      auto end = std::chrono::steady_clock::now() + std::chrono::minutes(1);
      while (nvrtc::worker_stats().live_pids.empty() && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (wait_until_warm) nvrtc::testing::wait_for_prestart(std::chrono::minutes(2));
      auto s = nvrtc::worker_stats();
      char msg[4096] = {};
      std::snprintf(msg, sizeof msg, "%d %d %s", s.live_pids.empty() ? 0 : s.live_pids[0],
                    s.warming, s.pch_dir.c_str());
      if (::write(fds[1], msg, sizeof msg) != static_cast<ssize_t>(sizeof msg)) ::_exit(2);
      std::exit(0);  // atexit handlers: the workers are ended here
    }
    ASSERT_GT(child, 0);
    ::close(fds[1]);
    char msg[4096] = {};
    EXPECT_EQ(::read(fds[0], msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    int worker = 0, warming = 0;
    char dir[4096] = {};
    ASSERT_GE(std::sscanf(msg, "%d %d %4095s", &worker, &warming, dir), 2) << msg;
    ASSERT_GT(worker, 0) << msg;
    EXPECT_EQ(warming, wait_until_warm ? 0 : 1) << msg;
    errno = 0;
    EXPECT_EQ(::kill(worker, 0), -1);
    EXPECT_EQ(errno, ESRCH) << "worker " << worker << " outlived its parent or was left a zombie";
    if (errno != ESRCH) ::waitpid(worker, nullptr, 0);
    if (dir[0]) {
      EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " outlived its process";
    }
    EXPECT_EQ(nvrtc_pch_folders(worker).size(), 0u) << "worker " << worker;
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

// The warm-up compile is a valid program, compiled as a first call compiles, and its directive
// prefix (what its PCH covers) is that of a float metal_kernel's CUDA translation.
TEST_F(NvrtcWorkers, WarmUpHasAMetalKernelsPrefix) {
  REQUIRE_NVRTC();
  nvrtc::WarmUp w = first_compile_warm_up(nvrtc::target_for(9, 0));
  auto kernel = metal_kernel("scaled", {"inp"}, {"out"},
                             "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * 3.0f;\n");
  KernelCall call;
  call.output_shapes = {{4096}};
  call.output_dtypes = {float32};
  call.grid = {4096, 1, 1};
  call.threadgroup = {256, 1, 1};
  TranslateOptions o;
  o.target = TranslateTarget::cuda;
  std::string translation = translate(
      kernel, {Array::from_bytes(std::vector<float>(4096).data(), {4096}, float32)}, call, o);
  auto prefix = [](const std::string& src) {  // up to the prelude core's end line
    size_t at = src.find("namespace metal {}");
    return at == std::string::npos ? std::string() : src.substr(0, at);
  };
  EXPECT_FALSE(prefix(w.source).empty()) << w.source;
  EXPECT_EQ(prefix(w.source), prefix(translation));
  EXPECT_EQ(w.options.front(), "--gpu-architecture=sm_90");
  std::vector<nvrtc::Header> headers;
  for (const auto& [name, text] : w.headers) headers.push_back({name.c_str(), text.c_str()});
  EXPECT_FALSE(
      nvrtc::compile_in_process(w.source, w.program_name, headers, w.options, w.cubin).empty());
}

// Child side of CreatingAGpuContextStartsWarmingWorkers, in a process of its own (a GPU context
// is made once per process, and a forked child cannot use CUDA once its parent has).
TEST(NvrtcWorkersPrestartChild, GpuArrayStartsWarmingWorkers) {
  if (!std::getenv("ALLOY_TEST_PRESTART_CHILD"))
    GTEST_SKIP() << "run by NvrtcWorkers.CreatingAGpuContextStartsWarmingWorkers";
  auto s = nvrtc::worker_stats();
  ASSERT_EQ(s.prestarted, 0);
  ASSERT_FALSE(s.prestarting);
  std::vector<float> v(4096, 1.0f);
  Array x;
  try {
    x = Array::from_bytes(v.data(), {4096}, float32, Device::gpu());  // the context
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  ASSERT_TRUE(nvrtc::testing::wait_for_prestart(std::chrono::minutes(2)));
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.prestarted, 1);  // ALLOY_NVRTC_WORKERS=1
  EXPECT_EQ(s.warm_ups, 1);
  ASSERT_EQ(s.live_pids.size(), 1u);
  if (has_auto_pch()) {
    EXPECT_GE(files_in(s.pch_dir + "/" + std::to_string(s.live_pids[0])), 1u) << s.pch_dir;
  }
  // A first call meets the warm worker (this process's NVRTC slot held): none is started.
  nvrtc::testing::hold_in_process_slot(true);
  // A source no cache holds (a fresh number in a comment).
  auto kernel = metal_kernel("after_prestart", {"inp"}, {"out"},
                             "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * 5.0f;  // " +
                                 std::to_string(std::random_device{}()) + "\n");
  KernelCall call;
  call.output_shapes = {{4096}};
  call.output_dtypes = {float32};
  call.grid = {4096, 1, 1};
  call.threadgroup = {256, 1, 1};
  call.device = Device::gpu();
  kernel({x}, call)[0].eval();
  nvrtc::testing::hold_in_process_slot(false);
  s = nvrtc::worker_stats();
  EXPECT_EQ(s.spawned, 1);
  EXPECT_GE(s.worker_compiles, 1);
}

// Creating a GPU context starts the workers ahead, warmed (the hook in cuda::Context::get), in a
// fresh process (the test binary run again for the test above). Skipped without a GPU; runs with
// the fake driver (scripts/experiments/fake_cuda_driver.c, LD_LIBRARY_PATH).
TEST_F(NvrtcWorkers, CreatingAGpuContextStartsWarmingWorkers) {
  REQUIRE_WORKERS(nullptr);
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  ASSERT_FALSE(ec);
  // Without gtest's sharding: a sharded run would give the child another shard, where its one
  // test may not be.
  std::string cmd =
      "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX -u GTEST_SHARD_STATUS_FILE "
      "ALLOY_TEST_PRESTART_CHILD=1 ALLOY_NVRTC_WORKERS=1 ALLOY_NVRTC_PRESTART=1 '" +
      exe + "' --gtest_filter=NvrtcWorkersPrestartChild.* 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = ::pclose(p);
  if (out.find("no GPU:") != std::string::npos) GTEST_SKIP() << "no GPU";
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}

TEST(NvrtcWire, MessagesRoundTripAndBadBytesAreRejected) {
  wire::Request q;
  q.flags = 0;
  q.cubin = false;
  q.source = std::string("a\0b", 3);
  q.program_name = "p.cu";
  q.headers = {{"h.h", "#define X 1\n"}, {"g.h", ""}};
  q.options = {"--gpu-architecture=sm_90", "-minimal"};
  std::string bytes = wire::encode(q);
  auto back = wire::decode_request(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->source, q.source);
  EXPECT_EQ(back->headers, q.headers);
  EXPECT_EQ(back->options, q.options);
  EXPECT_FALSE(back->cubin);
  // Every truncation, a wrong type byte and trailing bytes are refused, never read past.
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(wire::decode_request(bytes.substr(0, n)));
  EXPECT_FALSE(wire::decode_request(bytes + "x"));
  EXPECT_FALSE(wire::decode_reply(bytes));
  std::string huge = bytes;
  huge[huge.size() - 1] = '\xff';  // garbage in the last option's bytes: still well-formed
  EXPECT_TRUE(wire::decode_request(huge));
  std::string counts(1, 'Q');
  counts += std::string(4, '\0') + '\1' + std::string(8, '\0') + std::string(4, '\xff');
  EXPECT_FALSE(wire::decode_request(counts));  // 4 billion headers in 0 bytes
  wire::Reply r{wire::ReplyStatus::kCompileFailure, "", "log", "what"};
  auto rb = wire::decode_reply(wire::encode(r));
  ASSERT_TRUE(rb);
  EXPECT_EQ(rb->status, wire::ReplyStatus::kCompileFailure);
  EXPECT_EQ(rb->log, "log");
  EXPECT_EQ(rb->message, "what");
  std::string bad_status = wire::encode(r);
  bad_status[1] = 9;
  EXPECT_FALSE(wire::decode_reply(bad_status));
}

}  // namespace
}  // namespace alloy::cuda
