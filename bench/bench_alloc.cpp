// Heap allocations and host time of one cached metal_kernel call (issue 9, launch overhead):
//
//   BM_CachedCallAllocations/<dev>  a tiny kernel (256 float32) already compiled: per call, the
//                                   C++ heap allocations (operator new, counted by the
//                                   replacement below) of building the lazy output
//                                   (allocs_call), of evaluating it (allocs_eval: CPU runs the
//                                   kernel, GPU enqueues it) and of dropping it (allocs_release),
//                                   with the host time of each step (call_us, eval_us,
//                                   release_us).
//   BM_CompiledCallAllocations/<dev> the same for one call (call + eval + release) of a compiled
//                                   function of 50 such kernels (bench_compile's
//                                   BM_Compile50Kernels): allocs_per_call (on the GPU a call
//                                   replays through a CUDA graph).
//
// The replacement operator new of this binary counts only while a benchmark asks it to (one
// relaxed atomic load otherwise), so the other benchmarks keep their timings.
#include <atomic>
#include <cstdlib>
#include <new>

#include "bench_common.h"
#include "example_kernels.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocs{0};

void* counted_alloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  if (void* p = std::malloc(n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) {
  return counted_alloc(n);
}
void* operator new[](std::size_t n) {
  return counted_alloc(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}

namespace alloy::bench {
namespace {

// Counts the allocations of `fn` on every thread while it runs.
template <class F>
int64_t count_allocs(F&& fn) {
  int64_t before = g_allocs.load();
  g_counting.store(true);
  fn();
  g_counting.store(false);
  return g_allocs.load() - before;
}

Device bench_device(int64_t arg) {
  return arg == 0 ? Device::cpu() : Device::gpu();
}

void BM_CachedCallAllocations(benchmark::State& state) {
  Device dev = bench_device(state.range(0));
  if (dev.type == Device::Type::gpu && !gpu_available()) return state.SkipWithError("no CUDA GPU");
  const int n = 256, batch = 64;
  Array x = random_array({n}, -1, 1, 3, dev);
  auto k = metal_kernel("bench_alloc_exp", {"inp"}, {"out"}, examples::kExpSource);
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {n, 1, 1};
  call.threadgroup = {256, 1, 1};
  call.template_args = {{"T", float32}};
  call.device = dev;       // else the default device: the GPU when there is one
  k({x}, call)[0].eval();  // compiled once
  synchronize(dev);
  int64_t a_call = 0, a_eval = 0, a_release = 0, calls = 0;
  double t_call = 0, t_eval = 0, t_release = 0;
  std::vector<Array> outs;
  outs.reserve(batch);
  for (auto _ : state) {
    double t0 = now_s();
    a_call += count_allocs([&] {
      for (int j = 0; j < batch; ++j) outs.push_back(k({x}, call)[0]);
    });
    double t1 = now_s();
    a_eval += count_allocs([&] {
      for (auto& o : outs) o.eval();
    });
    double t2 = now_s();
    a_release += count_allocs([&] { outs.clear(); });
    double t3 = now_s();
    synchronize(dev);
    t_call += t1 - t0;
    t_eval += t2 - t1;
    t_release += t3 - t2;
    calls += batch;
    state.SetIterationTime((t3 - t0) / batch);
  }
  state.counters["allocs_call"] = static_cast<double>(a_call) / calls;
  state.counters["allocs_eval"] = static_cast<double>(a_eval) / calls;
  state.counters["allocs_release"] = static_cast<double>(a_release) / calls;
  state.counters["call_us"] = 1e6 * t_call / calls;
  state.counters["eval_us"] = 1e6 * t_eval / calls;
  state.counters["release_us"] = 1e6 * t_release / calls;
}
BENCHMARK(BM_CachedCallAllocations)
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond);

void BM_CompiledCallAllocations(benchmark::State& state) {
  Device dev = bench_device(state.range(0));
  if (dev.type == Device::Type::gpu && !gpu_available()) return state.SkipWithError("no CUDA GPU");
  const int n = 256, kernels = 50;
  auto k = metal_kernel("bench_alloc_step", {"inp"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = inp[i] * 0.999f + 0.001f;)");
  auto fn = [&](const std::vector<Array>& in) {
    Array v = in[0];
    for (int j = 0; j < kernels; ++j) {
      KernelCall call;
      call.output_dtypes = {float32};
      call.device = dev;
      call.grid_expr = DimsExpr{ShapeExpr::size(0), 1, 1};
      call.threadgroup_expr = DimsExpr{ShapeExpr::min(ShapeExpr::size(0), 256), 1, 1};
      call.output_shape_exprs = {{ShapeExpr::dim(0, 0)}};
      v = k({v}, call)[0];
    }
    return std::vector<Array>{v};
  };
  Array x = random_array({n}, -1, 1, 4, dev);
  auto f = compile(fn);
  f({x})[0].eval();
  f({x})[0].eval();
  synchronize(dev);
  int64_t allocs = 0, calls = 0;
  for (auto _ : state) {
    double t0 = now_s();
    allocs += count_allocs([&] { f({x})[0].eval(); });
    double t1 = now_s();
    ++calls;
    state.SetIterationTime(t1 - t0);
  }
  synchronize(dev);
  state.counters["allocs_per_call"] = static_cast<double>(allocs) / calls;
  state.counters["allocs_per_kernel"] = static_cast<double>(allocs) / calls / kernels;
}
BENCHMARK(BM_CompiledCallAllocations)
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(100)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace alloy::bench
