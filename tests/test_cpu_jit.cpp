// The host-compiler JIT and its cache: compile + run, compiler errors, memory and disk hits, keys,
// corrupt entries, ALLOY_CXX / ALLOY_CACHE_DIR. Kernel libraries are written by hand against
// prelude/cpu/abi.h only (the translator and the prelude are tested elsewhere).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/executor.h"
#include "backend/cpu/jit.h"
#include "scoped_env.h"

using alloy::testing::ScopedEnv;

namespace alloy::cpu {
namespace {
namespace fs = std::filesystem;

// out[i] = exp(in[i]) * SCALE, as the loop-mode entry of a kernel library. SCALE is a macro so the
// same text compiled with different -D flags gives different libraries.
const char* kExpSource = R"(
#include "cpu/abi.h"
#include <math.h>
#ifndef SCALE
#define SCALE 1.0f
#endif
extern "C" ALLOY_CPU_EXPORT void alloy_group_0(const alloy_cpu_launch* L, alloy_cpu_group* g) {
  const float* in = (const float*)L->buffers[0];
  float* out = (float*)L->buffers[1];
  uint32_t base = g->group_pos[0] * L->threadgroup[0];
  for (uint32_t i = 0; i < g->group_size[0]; ++i) out[base + i] = expf(in[base + i]) * SCALE;
}
)";

// Fiber-mode entry: reverses each group through a [[threadgroup(0)]] parameter with barriers.
const char* kReverseSource = R"(
#include "cpu/abi.h"
extern "C" ALLOY_CPU_EXPORT void alloy_thread_0(const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
  const float* in = (const float*)L->buffers[0];
  float* out = (float*)L->buffers[1];
  float* shared = (float*)g->tg_params[0];
  uint32_t gid = g->group_pos[0] * L->threadgroup[0] + lid;
  shared[lid] = in[gid];
  g->sync->threadgroup_barrier(g);
  float v = shared[g->nthreads - 1 - lid];
  g->sync->threadgroup_barrier(g);
  out[gid] = v;
}
)";

// The same as a library written against the prelude, as translated kernels are: what the
// precompiled prelude serves.
const char* kPreludeExpSource = R"(
#include "metal_stdlib.h"
#include "entry.h"
#ifndef SCALE
#define SCALE 1.0f
#endif
extern "C" ALLOY_CPU_EXPORT void alloy_group_0(const alloy_cpu_launch* L, alloy_cpu_group* g) {
  const float* in = (const float*)L->buffers[0];
  float* out = (float*)L->buffers[1];
  uint32_t base = g->group_pos[0] * L->threadgroup[0];
  for (uint32_t i = 0; i < g->group_size[0]; ++i) out[base + i] = metal::exp(in[base + i]) * SCALE;
}
)";

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Runs a library's alloy_group_0 as out = f(in) over n elements; returns out.
std::vector<float> run_exp(const Library& lib, const std::vector<float>& in) {
  auto fn = reinterpret_cast<alloy_cpu_group_fn>(lib.symbol("alloy_group_0"));
  EXPECT_NE(fn, nullptr);
  std::vector<float> out(in.size(), std::nanf(""));
  void* bufs[] = {const_cast<float*>(in.data()), out.data()};
  uint64_t sizes[] = {in.size() * 4, out.size() * 4};
  alloy_cpu_launch L{};
  L.buffers = bufs;
  L.buffer_bytes = sizes;
  L.num_buffers = 2;
  L.grid[0] = static_cast<uint32_t>(in.size());
  L.grid[1] = L.grid[2] = 1;
  L.threadgroup[0] = 256;
  L.threadgroup[1] = L.threadgroup[2] = 1;
  set_groups(L);
  run(L, fn, nullptr, false);
  return out;
}

void expect_exp(const std::vector<float>& in, const std::vector<float>& out, double scale) {
  ASSERT_EQ(in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) {
    double ref = std::exp(double(in[i])) * scale;
    ASSERT_NEAR(out[i], ref, 2e-7 * std::abs(ref)) << i;
  }
}

class CpuJitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("alloy-jit-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  JitConfig config() const {
    JitConfig c;
    c.cache_dir = dir_;
    return c;
  }

  fs::path dir_;
};

TEST_F(CpuJitTest, CompilesAndRunsElementwiseKernel) {
  Jit jit(config());
  auto lib = jit.compile(kExpSource);
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(lib->symbol("alloy_group_1"), nullptr);
  auto in = random_floats(100003, 1);
  expect_exp(in, run_exp(*lib, in), 1.0);
  EXPECT_EQ(jit.cache().stats().stores, 1u);
  // The entry and its source are on disk under <dir>/cpu/.
  EXPECT_TRUE(fs::exists(jit.cache().entry_path("cpu", lib->key(), ".bin")));
  EXPECT_TRUE(fs::exists(jit.cache().entry_path("cpu", lib->key(), ".cpp")));
}

TEST_F(CpuJitTest, FiberKernelWithBarriersAndThreadgroupParameter) {
  Jit jit(config());
  auto lib = jit.compile(kReverseSource);
  auto fn = reinterpret_cast<alloy_cpu_thread_fn>(lib->symbol("alloy_thread_0"));
  ASSERT_NE(fn, nullptr);
  const uint32_t tg = 80, n = 80 * 50 + 33;
  auto in = random_floats(n, 2);
  std::vector<float> out(n, std::nanf(""));
  void* bufs[] = {in.data(), out.data()};
  uint64_t sizes[] = {n * 4, n * 4};
  alloy_cpu_launch L{};
  L.buffers = bufs;
  L.buffer_bytes = sizes;
  L.num_buffers = 2;
  L.grid[0] = n;
  L.grid[1] = L.grid[2] = 1;
  L.threadgroup[0] = tg;
  L.threadgroup[1] = L.threadgroup[2] = 1;
  L.tg_param_bytes[0] = tg * sizeof(float);
  set_groups(L);
  run(L, nullptr, fn, true);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t base = i / tg * tg, size = std::min(tg, n - base);
    ASSERT_EQ(out[i], in[base + size - 1 - (i - base)]) << i;
  }
}

TEST_F(CpuJitTest, CompileErrorCarriesTheCompilerLog) {
  Jit jit(config());
  std::string bad = std::string(kExpSource) + "\nint broken() { return undeclared_thing_xyz; }\n";
  try {
    jit.compile(bad);
    FAIL() << "no exception";
  } catch (const CompileFailure& e) {
    EXPECT_NE(e.log().find("undeclared_thing_xyz"), std::string::npos) << e.log();
    EXPECT_NE(e.log().find("error"), std::string::npos) << e.log();
    // The log names the source file, which is kept for the caller to map lines back.
    EXPECT_NE(e.log().find(e.source_path().filename().string()), std::string::npos) << e.log();
    std::ifstream src(e.source_path());
    std::string text((std::istreambuf_iterator<char>(src)), {});
    EXPECT_EQ(text, bad);
    EXPECT_NE(std::string(e.what()).find("undeclared_thing_xyz"), std::string::npos);
  }
  // Nothing was cached: the same source fails again (and a good one still compiles).
  EXPECT_THROW(jit.compile(bad), CompileFailure);
  EXPECT_NE(jit.compile(kExpSource), nullptr);
}

TEST_F(CpuJitTest, MemoryHitReturnsTheLoadedLibrary) {
  Jit jit(config());
  auto a = jit.compile(kExpSource);
  auto t0 = std::chrono::steady_clock::now();
  const int reps = 1000;
  for (int i = 0; i < reps; ++i) EXPECT_EQ(jit.compile(kExpSource), a);
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      reps;
  auto s = jit.cache().stats();
  EXPECT_EQ(s.memory_hits, uint64_t(reps));
  EXPECT_EQ(s.stores, 1u);
  // Printed only: its speed is BM_CpuJitWarmInProcess's (a bound here failed under ASan).
  std::printf("[ info ] memory hit: %.2f us\n", us);
}

TEST_F(CpuJitTest, DiskHitInAFreshJit) {
  auto in = random_floats(5000, 3);
  std::string key;
  {
    Jit jit(config());
    auto lib = jit.compile(kExpSource);
    key = lib->key();
  }
  // A new Jit on the same folder behaves like a new process: nothing in memory.
  Jit fresh(config());
  auto t0 = std::chrono::steady_clock::now();
  auto lib = fresh.compile(kExpSource);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ info ] warm start (disk hit, fresh Jit): %.3f ms\n", ms);
  EXPECT_EQ(lib->key(), key);
  auto s = fresh.cache().stats();
  EXPECT_EQ(s.disk_hits, 1u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.stores, 0u);                 // not recompiled
  expect_exp(in, run_exp(*lib, in), 1.0);  // its speed: BM_CpuJitWarmDisk
}

TEST_F(CpuJitTest, DifferentSourcesWithTheSameEntryNamesNeverShare) {
  // MLX bug #3832: a cache keyed by kernel name returns the first body for the second.
  Jit jit(config());
  std::string two = std::string("#define SCALE 2.0f\n") + kExpSource;
  auto a = jit.compile(kExpSource);
  auto b = jit.compile(two);
  EXPECT_NE(a->key(), b->key());
  auto in = random_floats(1000, 4);
  expect_exp(in, run_exp(*a, in), 1.0);
  expect_exp(in, run_exp(*b, in), 2.0);
  // Also after a trip through the disk cache.
  Jit fresh(config());
  expect_exp(in, run_exp(*fresh.compile(two), in), 2.0);
  expect_exp(in, run_exp(*fresh.compile(kExpSource), in), 1.0);
  EXPECT_EQ(fresh.cache().stats().disk_hits, 2u);
}

TEST_F(CpuJitTest, FlagsArePartOfTheKey) {
  Jit jit(config());
  JitOptions three, four;
  three.flags = {"-DSCALE=3.0f"};
  four.flags = {"-DSCALE=4.0f"};
  auto a = jit.compile(kExpSource, three);
  auto b = jit.compile(kExpSource, four);
  EXPECT_NE(a->key(), b->key());
  EXPECT_NE(jit.key(kExpSource), a->key());
  auto in = random_floats(1000, 5);
  expect_exp(in, run_exp(*a, in), 3.0);
  expect_exp(in, run_exp(*b, in), 4.0);
}

TEST_F(CpuJitTest, CorruptDiskEntryIsRebuilt) {
  std::string key;
  {
    Jit jit(config());
    key = jit.compile(kExpSource)->key();
  }
  // Damage the stored shared object (a new file renamed over it, so that a copy still mapped by
  // this process is left alone): the size stays, some bytes change.
  Jit probe(config());
  fs::path bin = probe.cache().entry_path("cpu", key, ".bin");
  std::vector<char> bytes;
  {
    std::ifstream f(bin, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t i = bytes.size() / 2; i < bytes.size() / 2 + 64; ++i) bytes[i] ^= 0x5A;
  cache::write_file_atomic(bin, bytes);

  Jit fresh(config());
  auto lib = fresh.compile(kExpSource);
  auto s = fresh.cache().stats();
  EXPECT_EQ(s.corrupt, 1u);
  EXPECT_EQ(s.disk_hits, 0u);
  EXPECT_EQ(s.stores, 1u);  // rebuilt and stored again
  auto in = random_floats(1000, 6);
  expect_exp(in, run_exp(*lib, in), 1.0);

  // And the rebuilt entry verifies in the next "process".
  Jit again(config());
  again.compile(kExpSource);
  EXPECT_EQ(again.cache().stats().disk_hits, 1u);
}

TEST_F(CpuJitTest, TruncatedDiskEntryIsRebuilt) {
  std::string key;
  {
    Jit jit(config());
    key = jit.compile(kExpSource)->key();
  }
  Jit probe(config());
  fs::path bin = probe.cache().entry_path("cpu", key, ".bin");
  std::vector<char> bytes;
  {
    std::ifstream f(bin, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  bytes.resize(bytes.size() / 3);
  cache::write_file_atomic(bin, bytes);
  Jit fresh(config());
  auto in = random_floats(1000, 7);
  expect_exp(in, run_exp(*fresh.compile(kExpSource), in), 1.0);
  EXPECT_EQ(fresh.cache().stats().corrupt, 1u);
}

TEST_F(CpuJitTest, AlloyCxxSelectsTheCompiler) {
  for (const char* cxx : {"clang++", "g++"}) {
    std::string path;
    for (const char* dir : {"/usr/bin", "/usr/local/bin"}) {
      if (::access((std::string(dir) + "/" + cxx).c_str(), X_OK) == 0) {
        path = std::string(dir) + "/" + cxx;
        break;
      }
    }
    if (path.empty()) continue;
    ScopedEnv env("ALLOY_CXX", cxx);
    Jit jit(config());
    EXPECT_EQ(fs::path(jit.compiler()).filename(), cxx);
    EXPECT_NE(jit.compiler_identity().find(std::string(cxx) == "g++" ? "g++" : "clang"),
              std::string::npos)
        << jit.compiler_identity();
    auto in = random_floats(1000, 8);
    expect_exp(in, run_exp(*jit.compile(kExpSource), in), 1.0);
  }
  // Two compilers never share an entry.
  std::string k1, k2;
  {
    ScopedEnv env("ALLOY_CXX", "g++");
    k1 = Jit(config()).key(kExpSource);
  }
  if (::access("/usr/bin/clang++", X_OK) == 0) {
    ScopedEnv env("ALLOY_CXX", "clang++");
    k2 = Jit(config()).key(kExpSource);
    EXPECT_NE(k1, k2);
  }
}

TEST_F(CpuJitTest, MissingCompilerIsAClearError) {
  ScopedEnv env("ALLOY_CXX", "/nonexistent/bin/c++");
  Jit jit(config());
  try {
    jit.compile(kExpSource);
    FAIL() << "no exception";
  } catch (const CompileFailure&) {
    FAIL() << "not a compile failure";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ALLOY_CXX=/nonexistent/bin/c++"), std::string::npos)
        << e.what();
  }
}

TEST_F(CpuJitTest, AlloyCacheDirIsHonoured) {
  fs::path env_dir = dir_ / "from-env";
  ScopedEnv env("ALLOY_CACHE_DIR", env_dir.c_str());
  Jit jit;  // default configuration: reads the environment
  ASSERT_TRUE(jit.cache().has_disk());
  EXPECT_EQ(jit.cache().dir(), env_dir);
  auto lib = jit.compile(kExpSource);
  EXPECT_TRUE(fs::exists(env_dir / "cpu" / (lib->key() + ".bin")));
  EXPECT_TRUE(fs::exists(env_dir / "cpu" / (lib->key() + ".meta")));
  // The prelude headers were written once, under a folder named by their hash.
  EXPECT_EQ(jit.prelude_dir(), env_dir / ("prelude-" + jit.prelude_hash()));
  EXPECT_TRUE(fs::exists(jit.prelude_dir() / "cpu" / "abi.h"));
}

TEST_F(CpuJitTest, ConcurrentRequestsForOneSourceCompileOnce) {
  Jit jit(config());
  std::vector<std::shared_ptr<Library>> libs(6);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < libs.size(); ++t) {
    threads.emplace_back([&, t] { libs[t] = jit.compile(kExpSource); });
  }
  for (auto& th : threads) th.join();
  for (auto& l : libs) EXPECT_EQ(l, libs[0]);
  auto s = jit.cache().stats();
  EXPECT_EQ(s.stores, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.memory_hits, libs.size() - 1);
}

TEST_F(CpuJitTest, WorksWithoutADiskCache) {
  JitConfig c;
  c.use_default_cache_dir = false;
  fs::path work;
  {
    Jit jit(c);
    EXPECT_FALSE(jit.cache().has_disk());
    auto lib = jit.compile(kExpSource);
    work = jit.prelude_dir().parent_path();
    auto in = random_floats(1000, 9);
    expect_exp(in, run_exp(*lib, in), 1.0);
    EXPECT_EQ(jit.compile(kExpSource), lib);
  }
  EXPECT_FALSE(fs::exists(work));  // the per-process work folder is removed
}

TEST_F(CpuJitTest, UnwritableCacheFolderFallsBackToTemp) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  JitConfig c;
  c.cache_dir = dir_ / "file" / "cache";  // cannot be created
  Jit jit(c);
  EXPECT_FALSE(jit.cache().has_disk());
  auto in = random_floats(1000, 10);
  expect_exp(in, run_exp(*jit.compile(kExpSource), in), 1.0);
}

}  // namespace
}  // namespace alloy::cpu

namespace alloy::cpu {
namespace {

std::string scaled(const char* scale) {
  return std::string("#define SCALE ") + scale + "\n" + kPreludeExpSource;
}

// The payload files of the precompiled preludes under <dir>/cpu-pch/.
std::vector<fs::path> pch_payloads(const fs::path& dir) {
  std::vector<fs::path> v;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir / "cpu-pch", ec))
    if (e.path().extension() == ".bin") v.push_back(e.path());
  return v;
}

TEST_F(CpuJitTest, PrecompiledPreludeIsBuiltOnceInTheBackgroundThenUsed) {
  Jit jit(config());
  if (!jit.pch_enabled()) GTEST_SKIP() << "no precompiled prelude with " << jit.compiler();
  auto in = random_floats(3000, 11);
  // The first compile starts the build and does not wait for it.
  expect_exp(in, run_exp(*jit.compile(scaled("1.0f")), in), 1.0);
  EXPECT_EQ(jit.counters().without_pch, 1u);
  jit.wait_pch();
  EXPECT_EQ(jit.counters().pch_builds, 1u);
  ASSERT_EQ(pch_payloads(dir_).size(), 1u);
  // Later compiles use it.
  expect_exp(in, run_exp(*jit.compile(scaled("2.0f")), in), 2.0);
  EXPECT_EQ(jit.counters().with_pch, 1u);
  // A new process finds it on disk (verified), builds nothing and uses it at once.
  Jit fresh(config());
  expect_exp(in, run_exp(*fresh.compile(scaled("3.0f")), in), 3.0);
  EXPECT_EQ(fresh.counters().with_pch, 1u);
  EXPECT_EQ(fresh.counters().without_pch, 0u);
  EXPECT_EQ(fresh.counters().pch_builds, 0u);
  EXPECT_EQ(fresh.cache().stats().stores, 1u);  // kernel entries only: the header has its own
}

TEST_F(CpuJitTest, CorruptPrecompiledPreludeIsRebuilt) {
  {
    Jit jit(config());
    if (!jit.pch_enabled()) GTEST_SKIP() << "no precompiled prelude with " << jit.compiler();
    jit.compile(scaled("1.0f"));
    jit.wait_pch();
  }
  auto payloads = pch_payloads(dir_);
  ASSERT_EQ(payloads.size(), 1u);
  std::vector<char> bytes;
  {
    std::ifstream f(payloads[0], std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GT(bytes.size(), 100000u);
  for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 256; ++i) bytes[i] ^= 0x33;
  cache::write_file_atomic(payloads[0], bytes);

  Jit fresh(config());
  auto in = random_floats(2000, 12);
  // Verification fails: compiled without it, and it is built again.
  expect_exp(in, run_exp(*fresh.compile(scaled("4.0f")), in), 4.0);
  EXPECT_EQ(fresh.counters().without_pch, 1u);
  fresh.wait_pch();
  EXPECT_EQ(fresh.counters().pch_builds, 1u);
  expect_exp(in, run_exp(*fresh.compile(scaled("5.0f")), in), 5.0);
  EXPECT_EQ(fresh.counters().with_pch, 1u);
}

TEST_F(CpuJitTest, PrecompiledPreludeCanBeTurnedOffAndTheKeySaysWhich) {
  std::string with_key;
  {
    Jit jit(config());
    with_key = jit.key(kPreludeExpSource);
  }
  ScopedEnv off("ALLOY_CPU_PCH", "0");
  Jit jit(config());
  EXPECT_FALSE(jit.pch_enabled());
  auto in = random_floats(1000, 13);
  expect_exp(in, run_exp(*jit.compile(kPreludeExpSource), in), 1.0);
  jit.wait_pch();
  EXPECT_EQ(jit.counters().with_pch, 0u);
  EXPECT_EQ(jit.counters().pch_builds, 0u);
  EXPECT_TRUE(pch_payloads(dir_).empty());
  // The key without the precompiled prelude differs from the one with it (g++; clang never
  // uses one, so its keys are the same).
  if (jit.compiler_identity().find("clang") == std::string::npos) {
    EXPECT_NE(jit.key(kPreludeExpSource), with_key);
  }
}

}  // namespace
}  // namespace alloy::cpu

namespace alloy::cpu {
namespace {

// Processes sharing a disk cache that miss the same kernel at the same time compile it once: the
// first takes <key>.lock, the others wait for its entry (issue "First-call latency", item 4).
TEST_F(CpuJitTest, ProcessesSharingACacheCompileAKernelOnce) {
  ScopedEnv no_pch("ALLOY_CPU_PCH", "0");
  const int kProcesses = 3;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      ssize_t r = ::read(go[0], &c, 1);  // all start together
      (void)r;
      int code = 99;
      try {
        Jit jit(config());
        auto lib = jit.compile(kExpSource);
        auto in = random_floats(1000, 3);
        auto out = run_exp(*lib, in);
        bool good = true;
        for (size_t i = 0; i < in.size(); ++i)
          good &= std::fabs(out[i] - std::exp(double(in[i]))) <= 1e-6 * std::exp(double(in[i]));
        auto n = jit.counters();
        code = good ? 10 + static_cast<int>(n.with_pch + n.without_pch) : 98;
      } catch (...) {
      }
      ::_exit(code);
    }
    kids.push_back(pid);
  }
  ::close(go[0]);
  ASSERT_EQ(::write(go[1], "xxxxxxxx", kProcesses), kProcesses);
  ::close(go[1]);
  int compiles = 0;
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    int code = WEXITSTATUS(status);
    ASSERT_TRUE(code == 10 || code == 11) << "child exit status " << code;
    compiles += code - 10;
  }
  EXPECT_EQ(compiles, 1);
  // No lock is left behind.
  for (auto& e : fs::directory_iterator(dir_ / "cpu"))
    EXPECT_NE(e.path().extension(), ".lock") << e.path();
}

}  // namespace
}  // namespace alloy::cpu
