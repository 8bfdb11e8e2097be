// CPU JIT compile times (issue "Foundation", item 11), for a small kernel (examples' exp):
//
//   BM_CpuJitCold      first call of a new metal_kernel whose source the cache has never seen
//                      (a counter in a comment makes each iteration's source unique): signature,
//                      translation, host compiler, store, dlopen, run. Peer: the host compiler
//                      alone, spawned on the same translated source with the JIT's flags.
//                      cost_vs_raw_compiler = Alloy / compiler (1.0 = no overhead over g++).
//                      The peer uses the JIT's flags of before the precompiled prelude (no
//                      -include): the ratio is the cold compile against that of before.
//   BM_CpuJitColdTiered  the same with the tiered compile on (the default outside alloy_bench):
//                      the call compiles the quick tier; the full one follows on the pool.
//   BM_CpuJitWarmDisk  the same first call in a "fresh process" whose disk cache has the kernel:
//                      the in-memory cache is cleared and every previous kernel object (so every
//                      dlopen handle) is gone. Target <= 1 ms. Peer: dlopen of the cached shared
//                      object alone (the floor of any load from disk).
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "backend/cpu/backend.h"
#include "backend/cpu/jit.h"
#include "bench_common.h"
#include "example_kernels.h"

extern char** environ;

namespace {

using namespace alloy;
using namespace alloy::bench;
namespace fs = std::filesystem;

// Distinguishes this process's sources from those of earlier runs sharing a cache folder.
const std::string& nonce() {
  static const std::string n =
      std::to_string(::getpid()) + "-" + std::to_string(static_cast<int64_t>(now_s() * 1e6));
  return n;
}

std::string unique_exp_body(const std::string& tag, int64_t i) {
  return std::string(examples::kExpSource) + "    // bench " + tag + " " + nonce() + " " +
         std::to_string(i) + "\n";
}

KernelCall exp_call(int n, Device dev) {
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {n, 1, 1};
  call.threadgroup = {256, 1, 1};
  call.template_args = {{"T", float32}};
  call.device = dev;
  return call;
}

// Runs `args` (argv[0] a path), output discarded; returns the exit status.
// User + system CPU seconds of this process's waited-for children so far.
double children_cpu_s() {
  struct rusage ru {};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

int spawn_wait(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Sets ALLOY_CPU_TIERED for the benchmark's duration (alloy_bench turns it off for the others).
class TieredSetting {
 public:
  explicit TieredSetting(bool on) {
    if (const char* v = std::getenv("ALLOY_CPU_TIERED")) old_ = v;
    ::setenv("ALLOY_CPU_TIERED", on ? "1" : "0", 1);
  }
  ~TieredSetting() {
    if (old_.empty())
      ::unsetenv("ALLOY_CPU_TIERED");
    else
      ::setenv("ALLOY_CPU_TIERED", old_.c_str(), 1);
  }
  TieredSetting(const TieredSetting&) = delete;
  TieredSetting& operator=(const TieredSetting&) = delete;

 private:
  std::string old_;
};

// Waits until `count` tiered compiles have switched to their full tier (at most 20 s); returns
// the seconds waited.
double wait_full_tier(uint64_t count) {
  double t0 = now_s();
  while (cpu::full_tier_switches() < count && now_s() - t0 < 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return now_s() - t0;
}

void cold_compile(benchmark::State& state, bool tiered) {
  TieredSetting setting(tiered);
  const std::string tag = tiered ? "cold-tiered" : "cold";
  const int n = 1024;
  Array x = random_array({n}, -1.0f, 1.0f, 21, Device::cpu());
  KernelCall call = exp_call(n, Device::cpu());
  auto& jit = cpu::Jit::global();
  fs::path work;
  uint64_t switches = cpu::full_tier_switches();
  try {
    // Warm what every compile shares once per process (compiler probe, prelude files on disk).
    metal_kernel("bench_cold", {"inp"}, {"out"}, unique_exp_body(tag + "-warmup", 0))({x}, call)[0]
        .eval();
    // That first compile started building the precompiled prelude (once per compiler, flags and
    // prelude, kept in the disk cache): wait for it, as any later compile finds it on disk.
    double w0 = now_s();
    jit.wait_pch();
    state.counters["pch_wait_ms"] = 1e3 * (now_s() - w0);
    if (tiered) wait_full_tier(++switches);  // the warm-up's full tier
    work = fs::temp_directory_path() / ("alloy-bench-raw-" + nonce());
    fs::create_directories(work);
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("CPU JIT failed: ") + e.what()).c_str());
  }
  PairTimes t;
  double translate = 0, cpu_alloy = 0, cpu_peer = 0, full_wait = 0;
  uint64_t quick0 = jit.counters().quick;
  int64_t i = 0;
  for (auto _ : state) {
    ++i;
    // Alloy: the first call of a kernel never seen before.
    double c0 = children_cpu_s();
    double t0 = now_s();
    {
      auto k = metal_kernel("bench_cold", {"inp"}, {"out"}, unique_exp_body(tag, i));
      Array out = k({x}, call)[0];
      out.eval();
      benchmark::DoNotOptimize(node_of(out)->data());
    }
    double t1 = now_s();
    cpu_alloy += children_cpu_s() - c0;
    // Tiered: the full tier compiles on the pool meanwhile; let it finish (outside the CPU time
    // above: its compiler is reaped after the call returned) before the next iteration.
    if (tiered) full_wait += wait_full_tier(++switches);

    // Peer: the same translated source given to the host compiler directly.
    auto k = metal_kernel("bench_cold", {"inp"}, {"out"}, unique_exp_body(tag + "-raw", i));
    auto gen = msl::write_kernel_source(k.spec(), {{"", float32, 1, n}}, call.output_dtypes,
                                        call.template_args);
    double tt0 = now_s();
    std::string code =
        kernel::translate_only(kernel::call_source_map(k.spec(), gen.source), msl::Target::cpu);
    translate += now_s() - tt0;
    fs::path src = work / ("k" + std::to_string(i) + ".cpp");
    fs::path so = work / ("k" + std::to_string(i) + ".so");
    std::ofstream(src) << code;
    std::vector<std::string> args = {jit.compiler(),
                                     "-std=c++20",
                                     "-O2",
                                     "-fPIC",
                                     "-shared",
                                     "-march=native",
                                     "-fno-math-errno",
                                     "-w",
                                     "-DALLOY_MATH_SAFE",
                                     "-I",
                                     jit.prelude_dir().string(),
                                     "-o",
                                     so.string(),
                                     src.string()};
    double c2 = children_cpu_s();
    double t2 = now_s();
    int rc = spawn_wait(args);
    double t3 = now_s();
    cpu_peer += children_cpu_s() - c2;
    if (rc != 0) {
      state.SkipWithError("the host compiler failed on the translated source");
      break;
    }
    t.alloy += t1 - t0;
    t.peer += t3 - t2;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  std::error_code ec;
  fs::remove_all(work, ec);
  t.report(state, "raw_compiler", /*cost=*/true);
  if (t.n) state.counters["translate_ms"] = 1e3 * translate / t.n;
  state.counters["compiles_with_pch"] = static_cast<double>(jit.counters().with_pch);
  state.counters["quick_compiles"] = static_cast<double>(jit.counters().quick - quick0);
  if (tiered && t.n) state.counters["full_tier_after_call_ms"] = 1e3 * full_wait / t.n;
  // CPU time of the compiler processes (user + sys): on a shared machine, far steadier than the
  // wall times above.
  if (t.n && cpu_peer > 0) {
    state.counters["alloy_compiler_cpu_ms"] = 1e3 * cpu_alloy / t.n;
    state.counters["raw_compiler_cpu_ms"] = 1e3 * cpu_peer / t.n;
    state.counters["cpu_cost_vs_raw_compiler"] = cpu_alloy / cpu_peer;
  }
}
void BM_CpuJitCold(benchmark::State& state) {
  cold_compile(state, /*tiered=*/false);
}
BENCHMARK(BM_CpuJitCold)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

// The same first call with the tiered compile (as a user gets it, ALLOY_CPU_TIERED unset): the
// call compiles the quick tier (-Og) and returns; full_tier_after_call_ms is how long after the
// call the full tier, compiled on the pool, was loaded. alloy_compiler_cpu_ms is the first
// call's compiler CPU time (issue 17 item 2's measure).
void BM_CpuJitColdTiered(benchmark::State& state) {
  cold_compile(state, /*tiered=*/true);
}
BENCHMARK(BM_CpuJitColdTiered)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

// What running the quick tier costs against the full one (the launches before the switch):
// the examples' exp over n floats, the executor alone (2 threads here), both tiers of the same
// translation alternately. Decides docs/cpu-backend.md's size rule (a launch of 2^20 threads or
// more waits for the full tier).
void BM_CpuTierRunTime(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Array x = random_array({n}, -1.0f, 1.0f, 23, Device::cpu());
  KernelCall call = exp_call(n, Device::cpu());
  auto& jit = cpu::Jit::global();
  try {
    TieredSetting off(false);
    auto k = metal_kernel("bench_tier_run", {"inp"}, {"out"}, unique_exp_body("tier-run", n));
    DirectKernel dk(k, {x}, call, msl::Target::cpu);
    std::vector<float> full_out(n, 0.0f), quick_out(n, 1.0f);
    CpuDispatch full_d(dk, {x}, {{full_out.data(), full_out.size() * 4}}, call.grid,
                       call.threadgroup);
    CpuDispatch quick_d(dk, {x}, {{quick_out.data(), quick_out.size() * 4}}, call.grid,
                        call.threadgroup);
    auto gen = msl::write_kernel_source(k.spec(), {{"", float32, 1, n}}, call.output_dtypes,
                                        call.template_args);
    std::string code =
        kernel::translate_only(kernel::call_source_map(k.spec(), gen.source), msl::Target::cpu);
    cpu::JitOptions q{{"-DALLOY_MATH_SAFE"}};
    q.quick = true;
    auto lib = jit.compile(code, q);
    auto group = reinterpret_cast<alloy_cpu_group_fn>(lib->symbol("alloy_group_0"));
    auto thread = reinterpret_cast<alloy_cpu_thread_fn>(lib->symbol("alloy_thread_0"));
    auto groups = reinterpret_cast<alloy_cpu_groups_fn>(lib->symbol("alloy_groups_0"));
    if (!group || !thread) return state.SkipWithError("the quick library lacks its entries");
    cpu::ExecOptions opts;
    opts.kernel = "bench_tier_run";
    PairTimes t;
    for (auto _ : state) {
      double t0 = now_s();
      cpu::run(quick_d.L, group, thread, false, opts, groups);
      benchmark::DoNotOptimize(quick_out.data());
      double t1 = now_s();
      full_d.run(dk);
      benchmark::DoNotOptimize(full_out.data());
      double t2 = now_s();
      t.alloy += t1 - t0;
      t.peer += t2 - t1;
      ++t.n;
      state.SetIterationTime(t1 - t0);
    }
    double diff = 0;
    for (int i = 0; i < n; ++i)
      diff = std::max(diff, static_cast<double>(std::fabs(quick_out[i] - full_out[i])));
    state.counters["max_abs_diff_quick_full"] = diff;
    t.report(state, "full_tier", /*cost=*/true);
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("CPU JIT failed: ") + e.what()).c_str());
  }
}
BENCHMARK(BM_CpuTierRunTime)
    ->Arg(1 << 16)
    ->Arg(1 << 20)
    ->Arg(1 << 22)
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);

// What a new process pays for its first call of a kernel whose entry is in the disk cache
// (run in a child process: see cpu_warm_child). The peer is dlopen of a copy of the same shared
// object in that child (a copy: kernel libraries stay mapped once loaded, so the original would
// be a reference-count bump after Alloy loaded it).
void BM_CpuJitWarmDisk(benchmark::State& state) {
  const int n = 1024;
  Array x = random_array({n}, -1.0f, 1.0f, 22, Device::cpu());
  KernelCall call = exp_call(n, Device::cpu());
  const std::string body = unique_exp_body("warm", 0);
  auto& jit = cpu::Jit::global();
  if (!jit.cache().has_disk()) return state.SkipWithError("the compile cache has no disk level");
  fs::path work = fs::temp_directory_path() / ("alloy-bench-warm-" + nonce());
  try {
    auto k = metal_kernel("bench_warm", {"inp"}, {"out"}, body);
    k({x}, call)[0].eval();  // compiles and stores the entry
    // The entry's file (same translation and flags as metal_kernel's CPU program: a memory hit).
    auto gen = msl::write_kernel_source(k.spec(), {{"", float32, 1, n}}, call.output_dtypes,
                                        call.template_args);
    std::string code =
        kernel::translate_only(kernel::call_source_map(k.spec(), gen.source), msl::Target::cpu);
    std::string so = jit.compile(code, {{"-DALLOY_MATH_SAFE"}})->path().string();
    fs::create_directories(work);
    fs::copy_file(so, work / "peer.so");
    std::ofstream(work / "body.metal") << body;
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("CPU JIT failed: ") + e.what()).c_str());
  }
  time_warm_children(state, "cpu-warm",
                     {{"ALLOY_BENCH_BODY_FILE", (work / "body.metal").string()},
                      {"ALLOY_BENCH_PEER_SO", (work / "peer.so").string()}},
                     work, "dlopen");
}
BENCHMARK(BM_CpuJitWarmDisk)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);

// The same in this process, as the issue describes it: the in-memory cache is cleared and every
// kernel object is gone before each call. Kernel libraries are not unmapped by dlclose (they
// define a GNU-unique thread-local symbol), so the dlopen here is a reference-count bump: this
// is the floor of a disk hit, not a fresh process. Peer: the same call with the cache warm.
void BM_CpuJitWarmInProcess(benchmark::State& state) {
  const int n = 1024;
  Array x = random_array({n}, -1.0f, 1.0f, 22, Device::cpu());
  KernelCall call = exp_call(n, Device::cpu());
  const std::string body = unique_exp_body("warm-in-process", 0);
  auto& jit = cpu::Jit::global();
  if (!jit.cache().has_disk()) return state.SkipWithError("the compile cache has no disk level");
  try {
    metal_kernel("bench_warm", {"inp"}, {"out"}, body)({x}, call)[0].eval();
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("CPU JIT failed: ") + e.what()).c_str());
  }
  PairTimes t;
  uint64_t disk_hits0 = jit.cache().stats().disk_hits;
  for (auto _ : state) {
    jit.cache().clear_memory();
    double t0 = now_s();
    {
      auto k = metal_kernel("bench_warm", {"inp"}, {"out"}, body);
      Array out = k({x}, call)[0];
      out.eval();
      benchmark::DoNotOptimize(node_of(out)->data());
    }
    double t1 = now_s();
    {  // peer: a new kernel object whose program is in the memory cache
      auto k = metal_kernel("bench_warm", {"inp"}, {"out"}, body);
      Array out = k({x}, call)[0];
      out.eval();
      benchmark::DoNotOptimize(node_of(out)->data());
    }
    double t2 = now_s();
    t.alloy += t1 - t0;
    t.peer += t2 - t1;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  t.report(state, "memory_hit", /*cost=*/true);
  state.counters["target_ms"] = 1.0;
  state.counters["disk_hits_per_iter"] =
      static_cast<double>(jit.cache().stats().disk_hits - disk_hits0) / std::max<int64_t>(1, t.n);
}
BENCHMARK(BM_CpuJitWarmInProcess)->UseManualTime()->Iterations(50)->Unit(benchmark::kMillisecond);

}  // namespace

namespace alloy::bench {

// Child side of BM_CpuJitWarmDisk: the first metal_kernel call of this process (the kernel is in
// the disk cache), then dlopen of a copy of its shared object. Prints "alloy_s peer_s disk_hits".
int cpu_warm_child() {
  const char* body_file = std::getenv("ALLOY_BENCH_BODY_FILE");
  const char* peer_so = std::getenv("ALLOY_BENCH_PEER_SO");
  if (!body_file || !peer_so) return 2;
  std::ifstream in(body_file);
  std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int n = 1024;
  Array x = random_array({n}, -1.0f, 1.0f, 22, Device::cpu());
  KernelCall call = exp_call(n, Device::cpu());
  double t0 = now_s();
  {
    auto k = metal_kernel("bench_warm", {"inp"}, {"out"}, body);
    Array out = k({x}, call)[0];
    out.eval();
    benchmark::DoNotOptimize(node_of(out)->data());
  }
  double t1 = now_s();
  void* h = ::dlopen(peer_so, RTLD_NOW | RTLD_LOCAL);
  double t2 = now_s();
  if (!h) return 3;
  std::printf("%.9f %.9f %llu\n", t1 - t0, t2 - t1,
              static_cast<unsigned long long>(cpu::Jit::global().cache().stats().disk_hits));
  return 0;
}

}  // namespace alloy::bench
