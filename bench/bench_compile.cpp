// compile() (issue 12, item 4), on the CPU and, where one is found, the GPU:
//   BM_CompileFusedChain/<dev>   sigmoid(exp(x * y - 0.5) * 0.25) + x on 2^26 float32: compiled
//                                (one fused kernel) vs eager (five op kernels), alternately in
//                                one run, each to the end of its work (synchronized; on a GPU
//                                10 calls per synchronization, one_call_* with one):
//                                vs_eager = eager time / compiled time.
//   BM_CompileCacheHit           per call of a compiled one-op function, without evaluation:
//                                signature + cache lookup + replay, against replay alone (the
//                                trace replayed directly): hit_us = the difference.
//   BM_Compile50Kernels/<dev>    a compiled function of 50 small custom kernels (256 elements,
//                                each reading the previous one): host time per kernel of a
//                                replayed call (call + eval: on CUDA the enqueue, through one
//                                CUDA graph when the replay records one) vs the same 50 calls
//                                made eagerly (eager_us_per_kernel) and vs the compiled function
//                                replayed op by op with CUDA graphs off
//                                (compiled_nograph_us_per_kernel); cuda_graph = 1 when the
//                                graph was used, graph_updates = node rewrites per call.
#include <cmath>
#include <string>

#include "bench_common.h"
#include "transforms/compile_graph.h"
#include "transforms/compile_passes.h"
#include "transforms/trace.h"

namespace alloy::bench {
namespace {

Device bench_device(int64_t arg) {
  return arg == 0 ? Device::cpu() : Device::gpu();
}

std::vector<Array> chain(const std::vector<Array>& in) {
  Array x = in[0], y = in[1];
  Array t = subtract(multiply(x, y), Array(0.5f));
  return {add(sigmoid(multiply(exp(t), Array(0.25f))), x)};
}

void BM_CompileFusedChain(benchmark::State& state) {
  Device dev = bench_device(state.range(0));
  if (dev.type == Device::Type::gpu && !gpu_available()) return state.SkipWithError("no CUDA GPU");
  const int64_t n = int64_t(1) << 26;
  Array x = random_array({n}, -1, 1, 1, dev), y = random_array({n}, -1, 1, 2, dev);
  // Scalars on the device too (a CPU scalar would be moved each call).
  auto f = compile([&](const std::vector<Array>& in) { return chain(in); });
  Array warm_c = f({x, y})[0], warm_e = chain({x, y})[0];
  eval({warm_c, warm_e});
  double worst = 0;
  {
    auto a = warm_c.to_vector<float>(), b = warm_e.to_vector<float>();
    for (size_t i = 0; i < a.size(); i += 4097)
      worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  }
  PairTimes t, one;
  // eval() on a GPU only enqueues: each side waits for its work, so the times are the GPU's. On
  // a GPU each side runs `batch` calls per synchronization (the GPU's throughput, as a training
  // or inference loop runs), so the ~20 us from a launch to the host seeing its completion is
  // not counted into one call; one call per synchronization is reported too (one_call_*).
  const int batch = dev.type == Device::Type::gpu ? 10 : 1;
  synchronize(dev);
  for (auto _ : state) {
    double t0 = now_s();
    for (int b = 0; b < batch; ++b) f({x, y})[0].eval();
    synchronize(dev);
    double t1 = now_s();
    for (int b = 0; b < batch; ++b) chain({x, y})[0].eval();
    synchronize(dev);
    double t2 = now_s();
    t.alloy += (t1 - t0) / batch;
    t.peer += (t2 - t1) / batch;
    ++t.n;
    state.SetIterationTime((t1 - t0) / batch);
    if (batch > 1) {
      double t3 = now_s();
      f({x, y})[0].eval();
      synchronize(dev);
      double t4 = now_s();
      chain({x, y})[0].eval();
      synchronize(dev);
      one.alloy += t4 - t3;
      one.peer += now_s() - t4;
      ++one.n;
    }
  }
  t.report(state, "eager");
  if (one.n) {
    state.counters["one_call_alloy_ms"] = 1e3 * one.alloy / one.n;
    state.counters["one_call_eager_ms"] = 1e3 * one.peer / one.n;
    state.counters["one_call_vs_eager"] = one.peer / one.alloy;
  }
  state.counters["max_abs_diff"] = worst;
  state.counters["kernels_compiled"] = static_cast<double>(f.graph({x, y}).size());
}
BENCHMARK(BM_CompileFusedChain)
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);

void BM_CompileCacheHit(benchmark::State& state) {
  Array x = random_array({16}, -1, 1, 3, Device::cpu());
  auto fn = [](const std::vector<Array>& in) { return std::vector<Array>{exp(in[0])}; };
  auto f = compile(fn);
  f({x});
  transforms::Trace tr = transforms::trace(fn, {x});
  transforms::optimize(tr);
  std::vector<Array> constants = transforms::make_constants(tr, std::nullopt);
  const int batch = 2000;
  double t_call = 0, t_replay = 0;
  int64_t calls = 0;
  for (auto _ : state) {
    double t0 = now_s();
    for (int i = 0; i < batch; ++i) benchmark::DoNotOptimize(f({x}));
    double t1 = now_s();
    for (int i = 0; i < batch; ++i)
      benchmark::DoNotOptimize(transforms::replay(tr, {x}, std::nullopt, &constants));
    double t2 = now_s();
    t_call += t1 - t0;
    t_replay += t2 - t1;
    calls += batch;
    state.SetIterationTime((t1 - t0) / batch);
  }
  state.counters["call_us"] = 1e6 * t_call / calls;
  state.counters["replay_us"] = 1e6 * t_replay / calls;
  state.counters["hit_us"] = 1e6 * (t_call - t_replay) / calls;
}
BENCHMARK(BM_CompileCacheHit)->UseManualTime()->Iterations(20)->Unit(benchmark::kMicrosecond);

void BM_Compile50Kernels(benchmark::State& state) {
  Device dev = bench_device(state.range(0));
  if (dev.type == Device::Type::gpu && !gpu_available()) return state.SkipWithError("no CUDA GPU");
  const int n = 256, kernels = 50;
  auto k = metal_kernel("bench_step", {"inp"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = inp[i] * 0.999f + 0.001f;)");
  auto fn = [&](const std::vector<Array>& in) {
    Array v = in[0];
    for (int j = 0; j < kernels; ++j) {
      KernelCall call;
      call.output_dtypes = {float32};
      call.grid_expr = DimsExpr{ShapeExpr::size(0), 1, 1};
      call.threadgroup_expr = DimsExpr{ShapeExpr::min(ShapeExpr::size(0), 256), 1, 1};
      call.output_shape_exprs = {{ShapeExpr::dim(0, 0)}};
      v = k({v}, call)[0];
    }
    return std::vector<Array>{v};
  };
  Array x = random_array({n}, -1, 1, 4, dev);
  auto f = compile(fn);
  auto f_plain = compile(fn);  // replayed with CUDA graphs off
  f({x})[0].eval();
  f({x})[0].eval();
  transforms::set_cuda_graphs_enabled(false);
  f_plain({x})[0].eval();
  transforms::set_cuda_graphs_enabled(true);
  fn({x})[0].eval();
  synchronize(dev);
  auto before = transforms::cuda_graph_info(f, {x});
  PairTimes t;
  double t_plain = 0;
  for (auto _ : state) {
    double t0 = now_s();
    f({x})[0].eval();
    double t1 = now_s();
    fn({x})[0].eval();
    double t2 = now_s();
    transforms::set_cuda_graphs_enabled(false);
    double t3 = now_s();
    f_plain({x})[0].eval();
    double t4 = now_s();
    transforms::set_cuda_graphs_enabled(true);
    t.alloy += t1 - t0;
    t.peer += t2 - t1;
    t_plain += t4 - t3;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  synchronize(dev);
  auto info = transforms::cuda_graph_info(f, {x});
  state.counters["compiled_us_per_kernel"] = 1e6 * t.alloy / t.n / kernels;
  state.counters["eager_us_per_kernel"] = 1e6 * t.peer / t.n / kernels;
  state.counters["compiled_nograph_us_per_kernel"] = 1e6 * t_plain / t.n / kernels;
  state.counters["cuda_graph"] = info.replays > before.replays ? 1 : 0;
  state.counters["graph_updates"] =
      static_cast<double>(info.updates - before.updates) / static_cast<double>(t.n);
  if (dev.type == Device::Type::gpu && info.replays == before.replays)
    state.SetLabel("no CUDA graph: " + info.reason);
  t.report(state, "eager");
}
BENCHMARK(BM_Compile50Kernels)
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace alloy::bench
