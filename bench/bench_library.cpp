// First-call latency of libraries and parallel compilation (issue "First-call latency", items 3
// and 4):
//
//   BM_LibraryFirstCallCpu     compile_library of a generated library of 2112 kernels (MLX
//                              copy.metal's shape: kernel templates instantiated through macros)
//                              + the first call and evaluation of one of its kernels on the CPU,
//                              vs the same for a library holding only that kernel
//                              (cost_vs_single_kernel_library; target <= 2).
//   BM_LibraryFirstCallNvrtc   the same through NVRTC for sm_90 (no GPU needed): reading the
//                              library + compiling the one kernel, vs the one-kernel library.
//   BM_LibraryMlxCopyCpu/Nvrtc the same with MLX's copy.metal (~2,500 kernels) when
//                              $ALLOY_MLX_KERNELS names MLX's mlx/backend/metal/kernels folder
//                              ($ALLOY_MLX_INCLUDE: the folder holding mlx/, default 4 levels up).
//   BM_ParallelCompile20       20 distinct library kernels called, then evaluated together: their
//                              compiles start at the calls on the compile pool (peer: the same 20
//                              compiled one after another, each evaluated before the next call).
//                              vs_serial = serial time / parallel time (~ the cores, at most).
//   BM_ParallelCompileMetalKernel20/Cpu|Gpu  the same with 20 new metal_kernels (their compiles
//                              start at the calls too): CPU JIT, or NVRTC on a GPU. Each phase
//                              starts with the compile pool idle (no refines of the phase
//                              before); first_burst_ms: the process's first burst alone.
//   BM_ParallelCompileMetalKernel20AfterLoad/Gpu  a process's first burst as a model's load meets
//                              it, in fresh child processes: GPU context created, a pause for the
//                              weights' load (300 ms; ALLOY_BENCH_PAUSE_MS), then the 20 new
//                              kernels called and evaluated; NVRTC workers started ahead
//                              (ALLOY_NVRTC_PRESTART, the default) against started during the
//                              burst (=0), alternately: first_burst_prestart_ms, _lazy_ms;
//                              first_call_alone_ms: one new kernel alone after the same load
//                              (item 4's "slowest"), burst_vs_alone = prestart burst / that.
//   BM_ParallelCompileNvrtc20  20 metal_kernel cubins (sm_90, no GPU needed) compiled as jobs on
//                              the compile pool vs one after another: NVRTC's parallel scaling.
//                              These two also time one new kernel alone (single_ms) and give
//                              cost_vs_single = the 20 in parallel / that one (item 4's aim: ~1).
// Every iteration uses sources no cache has seen (a tag in a program-scope constant).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "alloy/library.h"
#include "backend/cuda/nvrtc.h"
#include "bench_common.h"
#include "kernel/compile_pool.h"
#include "kernel/custom_kernel.h"
#include "kernel/library.h"

namespace {

using namespace alloy;
using namespace alloy::bench;
namespace fs = std::filesystem;

int64_t unique_tag() {
  static int64_t base = static_cast<int64_t>(now_s() * 1e3) % 100000000;
  static int64_t i = 0;
  return base * 1000 + ++i;
}

const char* const kTypes[] = {"float", "half", "bfloat", "int", "uint", "short", "ushort", "uchar"};

// `only`: the one (input, output, n) instantiation to keep (the single-kernel peer), else all.
std::string generated_library(int64_t tag, bool only) {
  std::ostringstream s;
  s << "#include <metal_stdlib>\nusing namespace metal;\nconstant int bench_tag = " << tag % 1000000
    << ";\n"
    << R"(template <typename T, typename U, int N>
[[kernel]] void affine(device const T* x [[buffer(0)]], device U* y [[buffer(1)]],
                       constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = static_cast<U>(static_cast<float>(x[i]) * a + float(N) + float(bench_tag - bench_tag));
}
template <typename T, typename U>
[[kernel]] void gather(device const T* x [[buffer(0)]], device U* y [[buffer(1)]],
                       constant int& stride [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = static_cast<U>(x[i * stride]);
}
#define instantiate_kernel(name, func, ...) \
  template [[host_name(name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;
)";
  if (only) {
    s << "instantiate_kernel(\"affine_float_float_5\", affine, float, float, 5)\n";
    return s.str();
  }
  for (auto* in : kTypes)
    for (auto* out : kTypes) {
      for (int n = 0; n < 32; ++n)
        s << "instantiate_kernel(\"affine_" << in << "_" << out << "_" << n << "\", affine, " << in
          << ", " << out << ", " << n << ")\n";
      s << "instantiate_kernel(\"gather_" << in << "_" << out << "\", gather, " << in << ", " << out
        << ")\n";
    }
  return s.str();
}

double first_call_cpu(const std::string& source, const LibraryOptions& o, const std::string& name,
                      const std::vector<KernelArg>& args, int n) {
  double t0 = now_s();
  Library lib = compile_library(source, o);
  LibraryCall c;
  c.threads = Dims{n, 1, 1};
  c.group_size = Dims{256, 1, 1};
  c.device = Device::cpu();
  lib(name, args, c)[0].eval();
  return now_s() - t0;
}

double first_call_nvrtc(const std::string& source, const LibraryOptions& o,
                        const std::string& name) {
  double t0 = now_s();
  Library lib = compile_library(source, o);
  kernel::compile_library_cubin(lib, "sm_90", {}, {name});
  return now_s() - t0;
}

void BM_LibraryFirstCallCpu(benchmark::State& state) {
  const int n = 4096;
  Array x = random_array({n}, -1, 1, 3, Device::cpu());
  std::vector<KernelArg> args = {x, KernelArg::output({n}, float32), 1.5f};
  first_call_cpu(generated_library(unique_tag(), true), {}, "affine_float_float_5", args, n);
  PairTimes t;
  for (auto _ : state) {
    double a =
        first_call_cpu(generated_library(unique_tag(), false), {}, "affine_float_float_5", args, n);
    t.peer +=
        first_call_cpu(generated_library(unique_tag(), true), {}, "affine_float_float_5", args, n);
    t.alloy += a;
    ++t.n;
    state.SetIterationTime(a);
  }
  t.report(state, "single_kernel_library", /*cost=*/true);
  state.counters["target_cost"] = 2.0;
}
BENCHMARK(BM_LibraryFirstCallCpu)->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_LibraryFirstCallNvrtc(benchmark::State& state) {
  if (!cuda::nvrtc::available()) return state.SkipWithError("NVRTC not found");
  first_call_nvrtc(generated_library(unique_tag(), true), {}, "affine_float_float_5");
  PairTimes t;
  for (auto _ : state) {
    double a = first_call_nvrtc(generated_library(unique_tag(), false), {}, "affine_float_float_5");
    t.peer += first_call_nvrtc(generated_library(unique_tag(), true), {}, "affine_float_float_5");
    t.alloy += a;
    ++t.n;
    state.SetIterationTime(a);
  }
  t.report(state, "single_kernel_library", /*cost=*/true);
  state.counters["target_cost"] = 2.0;
}
BENCHMARK(BM_LibraryFirstCallNvrtc)->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);

// MLX's copy.metal, and the same includes with only the called kernel instantiated.
struct MlxCopy {
  std::string source, single;
  LibraryOptions options;
  std::string why;
  MlxCopy() {
    const char* dir = std::getenv("ALLOY_MLX_KERNELS");
    if (!dir || !*dir) {
      why = "set ALLOY_MLX_KERNELS to MLX's mlx/backend/metal/kernels folder";
      return;
    }
    std::ifstream in(fs::path(dir) / "copy.metal");
    if (!in) {
      why = std::string("no copy.metal in ") + dir;
      return;
    }
    source.assign(std::istreambuf_iterator<char>(in), {});
    const char* inc = std::getenv("ALLOY_MLX_INCLUDE");
    options.include_dirs = {
        inc && *inc
            ? std::string(inc)
            : fs::path(dir).parent_path().parent_path().parent_path().parent_path().string()};
    options.name = "mlx_copy";
    single =
        "#include \"mlx/backend/metal/kernels/utils.h\"\n"
        "#include \"mlx/backend/metal/kernels/copy.h\"\n"
        "instantiate_kernel(\"v_copyfloat32float16\", copy_v, float, half, 1)\n";
  }
  std::string tagged(const std::string& s) const {
    return s + "constant int bench_tag_" + std::to_string(unique_tag()) + " = 1;\n";
  }
};

void BM_LibraryMlxCopy(benchmark::State& state, bool nvrtc) {
  static const MlxCopy m;
  if (!m.why.empty()) return state.SkipWithError(m.why.c_str());
  if (nvrtc && !cuda::nvrtc::available()) return state.SkipWithError("NVRTC not found");
  const int n = 4096;
  Array x = random_array({n}, -1, 1, 3, Device::cpu());
  std::vector<KernelArg> args = {x, KernelArg::output({n}, float16), static_cast<uint32_t>(n)};
  auto once = [&](const std::string& src) {
    return nvrtc ? first_call_nvrtc(m.tagged(src), m.options, "v_copyfloat32float16")
                 : first_call_cpu(m.tagged(src), m.options, "v_copyfloat32float16", args, n);
  };
  once(m.single);
  PairTimes t;
  for (auto _ : state) {
    double a = once(m.source);
    t.peer += once(m.single);
    t.alloy += a;
    ++t.n;
    state.SetIterationTime(a);
  }
  t.report(state, "single_kernel_library", /*cost=*/true);
  state.counters["target_cost"] = 2.0;
}
BENCHMARK_CAPTURE(BM_LibraryMlxCopy, Cpu, false)
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LibraryMlxCopy, Nvrtc, true)
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

// 20 library kernels: called, then evaluated together (compiles start at the calls, in
// parallel), vs called and evaluated one at a time (each compile waits for the previous one).
void BM_ParallelCompile20(benchmark::State& state) {
  const int n = 4096, kernels = 20;
  Array x = random_array({n}, -1, 1, 3, Device::cpu());
  std::vector<KernelArg> args = {x, KernelArg::output({n}, float32), 1.5f};
  LibraryCall c;
  c.threads = Dims{n, 1, 1};
  c.device = Device::cpu();
  auto names = [&](int i) { return "affine_float_float_" + std::to_string(i); };
  PairTimes t;
  for (auto _ : state) {
    Library lib = compile_library(generated_library(unique_tag(), false));
    double t0 = now_s();
    std::vector<Array> outs;
    for (int i = 0; i < kernels; ++i) outs.push_back(lib(names(i), args, c)[0]);
    eval(outs);
    double a = now_s() - t0;
    Library serial = compile_library(generated_library(unique_tag(), false));
    t0 = now_s();
    for (int i = 0; i < kernels; ++i) serial(names(i), args, c)[0].eval();
    t.peer += now_s() - t0;
    t.alloy += a;
    ++t.n;
    state.SetIterationTime(a);
  }
  t.report(state, "serial");
  state.counters["compile_threads"] = kernel::compile_concurrency();
}
BENCHMARK(BM_ParallelCompile20)->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);

// metal_kernel `k` of 20 (y = x * (k + 1) + 0.25), its source unique to `tag`.
MetalKernel scaled_kernel(int k, int64_t tag) {
  return metal_kernel("scaled_" + std::to_string(k), {"inp"}, {"out"},
                      "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * " +
                          std::to_string(k + 1) + ".0f + 0.25f;  // bench " + std::to_string(tag) +
                          "\n");
}

KernelCall scaled_call(int n, Device dev) {
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {n, 1, 1};
  call.threadgroup = {256, 1, 1};
  call.device = dev;
  return call;
}

// 20 new metal_kernels called, then evaluated together (each call queues its compile on the
// compile pool: they compile in parallel), vs the same 20 called and evaluated one at a time.
// On the CPU the compiles are the CPU JIT's (host compiler), on the GPU NVRTC's.
// single_ms: one first call (one compile) alone, after the serial ones; cost_vs_single = the 20
// in parallel / that one (the item's aim: ~ the slowest single one).
void report_single(benchmark::State& state, const PairTimes& t, double single) {
  state.counters["compile_threads"] = kernel::compile_concurrency();
  if (t.n == 0) return;
  state.counters["single_ms"] = 1e3 * single / t.n;
  state.counters["cost_vs_single"] = t.alloy / single;
}

void BM_ParallelCompileMetalKernel20(benchmark::State& state, Device dev) {
  if (dev.type == Device::Type::gpu && !gpu_available())
    return state.SkipWithError("no CUDA GPU (BM_ParallelCompileNvrtc20 needs none)");
  const int n = 4096, kernels = 20;
  Array x = random_array({n}, -1, 1, 3, dev);
  KernelCall call = scaled_call(n, dev);
  // Each timed phase starts with the compile pool idle: the background full compiles that the
  // tiered compile queues for a phase's kernels (their refines) do not run during the next one.
  auto settle = [] { kernel::compile_pool_wait_idle(std::chrono::seconds(120)); };
  scaled_kernel(0, unique_tag())({x}, call)[0].eval();  // backend and compiler started
  settle();
  PairTimes t;
  double single = 0;
  // The process's first burst (its NVRTC workers start during it), over all repetitions.
  static double first_burst[2] = {-1, -1};
  double& first = first_burst[dev.type == Device::Type::gpu];
  for (auto _ : state) {
    int64_t tag = unique_tag();
    double t0 = now_s();
    std::vector<Array> outs;
    for (int k = 0; k < kernels; ++k) outs.push_back(scaled_kernel(k, tag)({x}, call)[0]);
    eval(outs);
    synchronize(dev);
    double a = now_s() - t0;
    if (first < 0) first = a;
    settle();
    tag = unique_tag();
    t0 = now_s();
    for (int k = 0; k < kernels; ++k) scaled_kernel(k, tag)({x}, call)[0].eval();
    synchronize(dev);
    t.peer += now_s() - t0;
    settle();
    // One new kernel's first call alone (the item's "slowest single first call").
    t0 = now_s();
    scaled_kernel(1, unique_tag())({x}, call)[0].eval();
    synchronize(dev);
    single += now_s() - t0;
    settle();
    t.alloy += a;
    ++t.n;
    state.SetIterationTime(a);
  }
  t.report(state, "serial");
  report_single(state, t, single);
  state.counters["first_burst_ms"] = 1e3 * first;
}
BENCHMARK_CAPTURE(BM_ParallelCompileMetalKernel20, Cpu, Device::cpu())
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParallelCompileMetalKernel20, Gpu, Device::gpu())
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

// How long the weights' load of a model takes before its first kernels are built, at least: the
// pause between the GPU context's creation and the first burst (ALLOY_BENCH_PAUSE_MS sets it).
int after_load_pause_ms() {
  const char* v = std::getenv("ALLOY_BENCH_PAUSE_MS");
  return v && *v ? std::atoi(v) : 300;
}

// A process's first burst as a model's load meets it, each in a fresh process (run_child): the
// GPU context is created (a GPU array made: NVRTC workers start warming, unless
// ALLOY_NVRTC_PRESTART=0), a pause stands for the weights' load (300 ms by default), then the 20
// new metal_kernels of BM_ParallelCompileMetalKernel20 are called and evaluated (timed). Each
// iteration runs one child with workers started ahead (ALLOY_NVRTC_PRESTART=1) and one without
// (=0, workers started during the burst, as before), in alternating order. Alloy against itself.
void BM_ParallelCompileMetalKernel20AfterLoad(benchmark::State& state) {
  if (!gpu_available()) return state.SkipWithError("no CUDA GPU");
  // Read once: run_child sets the children's variables in this process and removes them after.
  const std::string pause = std::to_string(after_load_pause_ms());
  PairTimes t;
  double alone = 0;
  int i = 0;
  for (auto _ : state) {
    double ms[2] = {0, 0};  // [prestart on, off]
    for (int j = 0; j < 2; ++j) {
      const bool on = (i + j) % 2 == 0;
      ChildResult r =
          run_child("gpu-first-burst", {{"ALLOY_NVRTC_PRESTART", on ? "1" : "0"},
                                        {"ALLOY_BENCH_TAG", std::to_string(unique_tag())},
                                        {"ALLOY_BENCH_PAUSE_MS", pause}});
      if (!r.ok) return state.SkipWithError(("child process failed: " + r.error).c_str());
      ms[on ? 0 : 1] = r.alloy_s;
    }
    // The item's "slowest": one new kernel's first call in a fresh process after the same load
    // (the defaults: workers started ahead; it compiles in the process, NVRTC's first use there).
    ChildResult one =
        run_child("gpu-first-burst", {{"ALLOY_BENCH_KERNELS", "1"},
                                      {"ALLOY_BENCH_TAG", std::to_string(unique_tag())},
                                      {"ALLOY_BENCH_PAUSE_MS", pause}});
    if (!one.ok) return state.SkipWithError(("child process failed: " + one.error).c_str());
    alone += one.alloy_s;
    ++i;
    t.alloy += ms[0];
    t.peer += ms[1];
    ++t.n;
    state.SetIterationTime(ms[0]);
  }
  if (t.n == 0) return;
  state.counters["first_burst_prestart_ms"] = 1e3 * t.alloy / t.n;
  state.counters["first_burst_lazy_ms"] = 1e3 * t.peer / t.n;
  state.counters["lazy_vs_prestart"] = t.peer / t.alloy;
  state.counters["first_call_alone_ms"] = 1e3 * alone / t.n;
  state.counters["burst_vs_alone"] = t.alloy / alone;
  state.counters["pause_ms"] = std::stoi(pause);
  state.counters["compile_threads"] = kernel::compile_concurrency();
}
BENCHMARK(BM_ParallelCompileMetalKernel20AfterLoad)
    ->Name("BM_ParallelCompileMetalKernel20AfterLoad/Gpu")
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

// NVRTC without a GPU: the 20 kernels' cubins for sm_90, each compile a job queued on the
// compile pool as a metal_kernel call queues it (CompileJob + compile_soon, then waited for as an
// evaluation does), vs compiled one after another. What bounds the GPU's parallel compiles.
void BM_ParallelCompileNvrtc20(benchmark::State& state) {
  if (!cuda::nvrtc::available()) return state.SkipWithError("NVRTC not found");
  const int n = 4096, kernels = 20;
  Array x = random_array({n}, -1, 1, 3, Device::cpu());
  KernelCall call = scaled_call(n, Device::cpu());
  // By value: a job still queued when another failed must not outlive what it reads.
  auto cubin = [x, call](int k, int64_t tag) {
    std::string why = kernel::compile_call_cubin(scaled_kernel(k, tag), {x}, call, "sm_90");
    if (!why.empty()) throw std::runtime_error(why);
    return 0;
  };
  PairTimes t;
  double single = 0;
  try {
    cubin(0, unique_tag());
    for (auto _ : state) {
      int64_t tag = unique_tag();
      double t0 = now_s();
      std::vector<std::shared_ptr<kernel::CompileJob<int>>> jobs;
      for (int k = 0; k < kernels; ++k) {
        auto job =
            std::make_shared<kernel::CompileJob<int>>([cubin, k, tag] { return cubin(k, tag); });
        kernel::compile_soon([job] { job->run(); });
        jobs.push_back(std::move(job));
      }
      for (auto& j : jobs) j->get();
      double a = now_s() - t0;
      tag = unique_tag();
      t0 = now_s();
      for (int k = 0; k < kernels; ++k) cubin(k, tag);
      t.peer += now_s() - t0;
      t0 = now_s();
      cubin(1, unique_tag());
      single += now_s() - t0;
      t.alloy += a;
      ++t.n;
      state.SetIterationTime(a);
    }
  } catch (const std::exception& e) {
    return state.SkipWithError(e.what());
  }
  t.report(state, "serial");
  report_single(state, t, single);
}
BENCHMARK(BM_ParallelCompileNvrtc20)->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);

}  // namespace

namespace alloy::bench {

// Child side of BM_ParallelCompileMetalKernel20AfterLoad: GPU context, pause, then the 20 new
// kernels (their sources unique to ALLOY_BENCH_TAG) called and evaluated; prints the burst's
// seconds ("burst_s 0 0").
int gpu_first_burst_child() {
  if (!gpu_available()) return 2;
  const char* tag_text = std::getenv("ALLOY_BENCH_TAG");
  const int64_t tag = tag_text ? std::atoll(tag_text) : unique_tag();
  // ALLOY_BENCH_KERNELS: how many (20; 1 for a new kernel's first call alone).
  const char* count = std::getenv("ALLOY_BENCH_KERNELS");
  const int n = 4096, kernels = count && *count ? std::atoi(count) : 20;
  Array x = random_array({n}, -1, 1, 3, Device::gpu());  // the context: workers start warming
  x.eval();
  synchronize(Device::gpu());
  std::this_thread::sleep_for(std::chrono::milliseconds(after_load_pause_ms()));
  KernelCall call = scaled_call(n, Device::gpu());
  double t0 = now_s();
  std::vector<Array> outs;
  for (int k = 0; k < kernels; ++k) outs.push_back(scaled_kernel(k, tag)({x}, call)[0]);
  eval(outs);
  synchronize(Device::gpu());
  std::printf("%.9f 0 0\n", now_s() - t0);
  return 0;
}

}  // namespace alloy::bench
