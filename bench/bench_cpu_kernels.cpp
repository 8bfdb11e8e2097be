// CPU kernel throughput: metal_kernel on the CPU against what numpy does for the same thing,
// measured alternately in the same loop (see PairTimes). python/bench/bench_cpu_vs_numpy.py
// compares with numpy itself; these peers are its C++ equivalents (issue "The CPU backend at
// numpy speed": the plain scalar loop used before hid the gap).
//
//   BM_CpuExp/peer_threads:N        exp over 2^24 float32, end to end (metal_kernel call + eval,
//                                   output allocated per call) vs numpy_like: a SIMD exp loop
//                                   (glibc libmvec's 8-lane AVX2 expf; numpy's np.exp(x, out=) is
//                                   an AVX2/AVX512 SIMD loop too) on N threads (1: numpy's single
//                                   thread; target >= 1.0x) into a resident buffer, and
//                                   (vs_numpy_like_fresh_output) into a buffer allocated per
//                                   iteration as metal_kernel's output is.
//   BM_CpuExpKernelOnly/peer_threads:N   the same kernel run by the executor into a preallocated
//                                   output: what the allocation costs.
//   BM_CpuCopy                      out[i] = inp[i] over 2^24 float32, end to end, vs memcpy into
//                                   a resident buffer (what np.copyto does; target >= 1.0x).
//   BM_CpuRowSum/<variant>          2048x4096 float32 row sums, 256-thread groups, vs a plain
//                                   single-thread row-sum loop (target: >= 0.08x, what a
//                                   fiber-per-thread executor reached before).
//   BM_CpuFiberAnatomy              fiber switches per threadgroup and the cost of one switch
//                                   (docs/performance.md, "where the time goes").
#include <dlfcn.h>
#include <sched.h>

#include <boost/context/detail/fcontext.hpp>
#include <cmath>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <cstdlib>
#include <thread>

#include "bench_common.h"
#include "example_kernels.h"

// ---- Counting fiber switches ----
// The executor switches fibers with Boost.Context's jump_fcontext. This definition interposes it
// (the executable's symbol wins over libboost_context.so's) and counts calls per thread before
// forwarding to the real one; the count is exact for dispatches run on the calling thread
// (ExecOptions::parallel = false). Overhead: one thread-local increment and an indirect call.
namespace {
thread_local uint64_t t_switches = 0;
}  // namespace

namespace boost::context::detail {
extern "C" transfer_t jump_fcontext(fcontext_t const to, void* vp) {
  using Fn = transfer_t (*)(fcontext_t, void*);
  static const Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "jump_fcontext"));
  ++t_switches;
  return real(to, vp);
}
}  // namespace boost::context::detail

namespace {

using namespace alloy;
using namespace alloy::bench;

// Cores this process may run on (its affinity mask, which oneTBB's default pool also follows).
int hw_threads() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Runs body(begin, end) over [0, n) split in `threads` contiguous chunks (the calling thread
// takes the first one).
template <class F>
void parallel_chunks(int64_t n, int threads, F body) {
  if (threads <= 1) {
    body(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  int64_t chunk = (n + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    int64_t b = std::min(n, t * chunk), e = std::min(n, (t + 1) * chunk);
    pool.emplace_back([=] { body(b, e); });
  }
  body(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

// numpy's float32 exp is a SIMD loop (a polynomial over 8/16 lanes, AVX2/AVX512F). The peer here
// is the same kind of loop, with glibc's libmvec for the lanes (8-lane AVX2 expf) when the CPU
// has AVX2, else the scalar loop.
#if defined(__x86_64__) && defined(__GLIBC__)
extern "C" __m256 _ZGVdN8v_expf(__m256);
__attribute__((target("avx2,fma"))) void simd_exp_avx2(const float* in, float* out, int64_t b,
                                                       int64_t e) {
  int64_t i = b;
  for (; i + 8 <= e; i += 8) _mm256_storeu_ps(out + i, _ZGVdN8v_expf(_mm256_loadu_ps(in + i)));
  for (; i < e; ++i) out[i] = std::exp(in[i]);
}
#endif

void numpy_like_exp(const float* in, float* out, int64_t n, int threads) {
  parallel_chunks(n, threads, [=](int64_t b, int64_t e) {
#if defined(__x86_64__) && defined(__GLIBC__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      simd_exp_avx2(in, out, b, e);
      return;
    }
#endif
    for (int64_t i = b; i < e; ++i) out[i] = std::exp(in[i]);
  });
}

void plain_rowsum(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    const float* p = in + r * cols;
    for (int64_t c = 0; c < cols; ++c) acc += p[c];
    out[r] = acc;
  }
}

// ---- exp ----

constexpr int kExpN = 1 << 24;

struct ExpSetup {
  Array x;
  const float* xs = nullptr;
  MetalKernel k = metal_kernel("bench_exp", {"inp"}, {"out"}, examples::kExpSource);
  KernelCall call;
  std::vector<float> peer_out;
  std::string error;

  ExpSetup() {
    x = random_array({kExpN}, -4.0f, 4.0f, 11, Device::cpu());
    xs = static_cast<const float*>(node_of(x)->data());
    call.output_shapes = {{kExpN}};
    call.output_dtypes = {float32};
    call.grid = {kExpN, 1, 1};
    call.threadgroup = {256, 1, 1};
    call.template_args = {{"T", float32}};
    call.device = Device::cpu();
    peer_out.assign(kExpN, 0.0f);  // touched once: the peer writes into resident pages
    // Compile (outside the timings) and check the result against the peer.
    try {
      auto out = k({x}, call)[0].to_vector<float>();
      numpy_like_exp(xs, peer_out.data(), kExpN, 1);
      for (int i = 0; i < kExpN; ++i) {
        if (!(std::fabs(out[i] - peer_out[i]) <= 1e-6f * std::fabs(peer_out[i]))) {
          error = "exp result differs from std::exp at " + std::to_string(i);
          break;
        }
      }
    } catch (const std::exception& e) {
      error = std::string("exp kernel failed: ") + e.what();
    }
  }
};

ExpSetup& exp_setup() {
  static ExpSetup s;
  return s;
}

// vs_numpy_like = numpy-like SIMD loop time / metal_kernel time (target >= 1.0 for 1 thread).
void BM_CpuExp(benchmark::State& state) {
  ExpSetup& s = exp_setup();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const int threads = state.range(0) == 0 ? hw_threads() : static_cast<int>(state.range(0));
  PairTimes t;
  double fresh_alloc = 0;
  for (auto _ : state) {
    double t0 = now_s();
    {
      Array out = s.k({s.x}, s.call)[0];
      out.eval();
      benchmark::DoNotOptimize(node_of(out)->data());
    }  // the output is freed inside the timing, as in a user's loop
    double t1 = now_s();
    numpy_like_exp(s.xs, s.peer_out.data(), kExpN, threads);
    benchmark::DoNotOptimize(s.peer_out.data());
    benchmark::ClobberMemory();
    double t2 = now_s();
    {  // the plain loop into a freshly allocated output, as metal_kernel's: what allocation costs
      float* fresh = static_cast<float*>(std::aligned_alloc(64, size_t{kExpN} * 4));
      numpy_like_exp(s.xs, fresh, kExpN, threads);
      benchmark::DoNotOptimize(fresh);
      benchmark::ClobberMemory();
      std::free(fresh);
    }
    double t3 = now_s();
    t.alloy += t1 - t0;
    t.peer += t2 - t1;
    fresh_alloc += t3 - t2;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  t.report(state, "numpy_like");
  state.counters["numpy_like_fresh_output_ms"] = 1e3 * fresh_alloc / t.n;
  state.counters["vs_numpy_like_fresh_output"] = fresh_alloc / t.alloy;
  state.counters["peer_threads"] = threads;
  state.counters["alloy_threads"] = hw_threads();
  state.SetItemsProcessed(state.iterations() * kExpN);
}
BENCHMARK(BM_CpuExp)
    ->ArgName("peer_threads")
    ->Arg(1)
    ->Arg(0)
    ->UseManualTime()
    ->Iterations(12)
    ->Unit(benchmark::kMillisecond);

// The executor alone, output preallocated: vs_numpy_like without allocation and graph costs.
void BM_CpuExpKernelOnly(benchmark::State& state) {
  ExpSetup& s = exp_setup();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const int threads = state.range(0) == 0 ? hw_threads() : static_cast<int>(state.range(0));
  DirectKernel dk(s.k, {s.x}, s.call, msl::Target::cpu);
  std::vector<float> out(kExpN, 0.0f);
  CpuDispatch d(dk, {s.x}, {{out.data(), out.size() * 4}}, s.call.grid, s.call.threadgroup);
  PairTimes t;
  for (auto _ : state) {
    double t0 = now_s();
    d.run(dk);
    benchmark::DoNotOptimize(out.data());
    double t1 = now_s();
    numpy_like_exp(s.xs, s.peer_out.data(), kExpN, threads);
    benchmark::DoNotOptimize(s.peer_out.data());
    benchmark::ClobberMemory();
    double t2 = now_s();
    t.alloy += t1 - t0;
    t.peer += t2 - t1;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  t.report(state, "numpy_like");
  state.counters["peer_threads"] = threads;
  state.counters["alloy_threads"] = hw_threads();
  state.SetItemsProcessed(state.iterations() * kExpN);
}
BENCHMARK(BM_CpuExpKernelOnly)
    ->ArgName("peer_threads")
    ->Arg(1)
    ->Arg(0)
    ->UseManualTime()
    ->Iterations(12)
    ->Unit(benchmark::kMillisecond);

// ---- copy ----

// out[i] = inp[i], end to end (call + eval, output allocated per call), vs memcpy into a resident
// buffer: np.copyto(o, x) on contiguous float32 is a memcpy.
void BM_CpuCopy(benchmark::State& state) {
  static const char* kCopy = R"(
    uint elem = thread_position_in_grid.x;
    out[elem] = inp[elem];
)";
  MetalKernel k = metal_kernel("bench_copy", {"inp"}, {"out"}, kCopy);
  ExpSetup& s = exp_setup();  // its 2^24 float32 input
  KernelCall call = s.call;
  call.template_args = {};
  std::vector<float> peer(kExpN, 0.0f);
  try {
    auto out = k({s.x}, call)[0].to_vector<float>();
    if (std::memcmp(out.data(), s.xs, size_t{kExpN} * 4) != 0)
      return state.SkipWithError("copy kernel result differs from its input");
  } catch (const std::exception& e) {
    return state.SkipWithError(e.what());
  }
  PairTimes t;
  for (auto _ : state) {
    double t0 = now_s();
    {
      Array out = k({s.x}, call)[0];
      out.eval();
      benchmark::DoNotOptimize(node_of(out)->data());
    }
    double t1 = now_s();
    std::memcpy(peer.data(), s.xs, size_t{kExpN} * 4);
    benchmark::DoNotOptimize(peer.data());
    benchmark::ClobberMemory();
    double t2 = now_s();
    t.alloy += t1 - t0;
    t.peer += t2 - t1;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  t.report(state, "memcpy");
  state.counters["alloy_threads"] = hw_threads();
  state.SetBytesProcessed(state.iterations() * int64_t{kExpN} * 8);
}
BENCHMARK(BM_CpuCopy)->UseManualTime()->Iterations(12)->Unit(benchmark::kMillisecond);

// ---- row sum ----

constexpr int kRows = 2048, kCols = 4096;

enum class RowSum { simd_barrier, barrier_tree, loop };

struct RowSumSetup {
  Array x;
  const float* xs = nullptr;
  std::vector<float> peer_out;

  RowSumSetup() {
    x = random_array({kRows, kCols}, -1.0f, 1.0f, 12, Device::cpu());
    xs = static_cast<const float*>(node_of(x)->data());
    peer_out.assign(kRows, 0.0f);
    plain_rowsum(xs, peer_out.data(), kRows, kCols);
  }
};

RowSumSetup& rowsum_setup() {
  static RowSumSetup s;
  return s;
}

struct RowSumKernel {
  MetalKernel k;
  KernelCall call;
};

RowSumKernel rowsum_kernel(RowSum v) {
  const char* src = v == RowSum::simd_barrier   ? kRowSumSource
                    : v == RowSum::barrier_tree ? kRowSumBarrierSource
                                                : kRowSumLoopSource;
  RowSumKernel r{
      metal_kernel(v == RowSum::loop ? "bench_rowsum_loop" : "bench_rowsum", {"inp"}, {"out"}, src),
      {}};
  r.call.output_shapes = {{kRows}};
  r.call.output_dtypes = {float32};
  // One 256-thread group per row; the loop variant has one thread per row.
  r.call.grid = {v == RowSum::loop ? kRows : kRows * 256, 1, 1};
  r.call.threadgroup = {256, 1, 1};
  r.call.device = Device::cpu();
  return r;
}

// The sums of 4096 values in [-1, 1) are added in different orders: compare loosely.
std::string check_rowsum(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t r = 0; r < want.size(); ++r)
    if (!(std::fabs(got[r] - want[r]) <= 1e-3f * (1.0f + std::fabs(want[r]))))
      return "row sum differs from the plain loop at row " + std::to_string(r);
  return "";
}

// vs_plain_loop = plain single-thread loop time / metal_kernel time (target >= 0.08).
void BM_CpuRowSum(benchmark::State& state, RowSum variant) {
  RowSumSetup& s = rowsum_setup();
  RowSumKernel rk = rowsum_kernel(variant);
  try {
    std::string err = check_rowsum(rk.k({s.x}, rk.call)[0].to_vector<float>(), s.peer_out);
    if (!err.empty()) return state.SkipWithError(err.c_str());
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("row sum kernel failed: ") + e.what()).c_str());
  }
  std::vector<float> peer(kRows);
  PairTimes t;
  for (auto _ : state) {
    double t0 = now_s();
    {
      Array out = rk.k({s.x}, rk.call)[0];
      out.eval();
      benchmark::DoNotOptimize(node_of(out)->data());
    }
    double t1 = now_s();
    plain_rowsum(s.xs, peer.data(), kRows, kCols);
    benchmark::DoNotOptimize(peer.data());
    benchmark::ClobberMemory();
    double t2 = now_s();
    t.alloy += t1 - t0;
    t.peer += t2 - t1;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  t.report(state, "plain_loop");
  state.counters["peer_threads"] = 1;
  state.counters["alloy_threads"] = hw_threads();
  state.SetBytesProcessed(state.iterations() * int64_t{kRows} * kCols * 4);
}
BENCHMARK_CAPTURE(BM_CpuRowSum, simd_barrier, RowSum::simd_barrier)
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuRowSum, barrier_tree, RowSum::barrier_tree)
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuRowSum, loop_thread_per_row, RowSum::loop)
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);

// ---- where the time goes in fiber mode ----

// Runs one dispatch on the calling thread only; returns (seconds, fiber switches).
std::pair<double, uint64_t> run_counted(const DirectKernel& dk, const CpuDispatch& d) {
  uint64_t s0 = t_switches;
  double t0 = now_s();
  d.run(dk, /*parallel=*/false);
  double t1 = now_s();
  return {t1 - t0, t_switches - s0};
}

// Single-thread measurements (executor on the calling thread): switches per 256-thread group for
// each row-sum variant, the cost of one switch from a kernel that only does barriers (32 barriers
// vs none), and the share of the simd+barrier row sum that is switching. Peer: the plain loop.
void BM_CpuFiberAnatomy(benchmark::State& state) {
  RowSumSetup& s = rowsum_setup();
  std::vector<float> out(kRows);
  auto dispatch_for = [&](RowSum v) {
    RowSumKernel rk = rowsum_kernel(v);
    auto dk =
        std::make_unique<DirectKernel>(rk.k, std::vector<Array>{s.x}, rk.call, msl::Target::cpu);
    auto d = std::make_unique<CpuDispatch>(
        *dk, std::vector<Array>{s.x},
        std::vector<std::pair<void*, size_t>>{{out.data(), out.size() * 4}}, rk.call.grid,
        rk.call.threadgroup);
    return std::make_pair(std::move(dk), std::move(d));
  };
  auto [simd_dk, simd_d] = dispatch_for(RowSum::simd_barrier);
  auto [tree_dk, tree_d] = dispatch_for(RowSum::barrier_tree);

  // Barriers only, same group count and size as the row sum.
  Array small = random_array({kRows * 256}, -1.0f, 1.0f, 13, Device::cpu());
  std::vector<float> small_out(kRows * 256);
  auto barriers = metal_kernel("bench_barriers", {"inp"}, {"out"}, kBarriersOnlySource);
  KernelCall bc;
  bc.output_shapes = {{kRows * 256}};
  bc.output_dtypes = {float32};
  bc.grid = {kRows * 256, 1, 1};
  bc.threadgroup = {256, 1, 1};
  bc.device = Device::cpu();
  bc.template_args = {{"N_BARRIERS", 0}};
  DirectKernel b0(barriers, {small}, bc, msl::Target::cpu);
  bc.template_args = {{"N_BARRIERS", 32}};
  DirectKernel b32(barriers, {small}, bc, msl::Target::cpu);
  CpuDispatch d0(b0, {small}, {{small_out.data(), small_out.size() * 4}}, bc.grid, bc.threadgroup);
  CpuDispatch d32(b32, {small}, {{small_out.data(), small_out.size() * 4}}, bc.grid,
                  bc.threadgroup);

  double t_simd = 0, t_tree = 0, t_b0 = 0, t_b32 = 0, t_peer = 0;
  uint64_t n_simd = 0, n_tree = 0, n_b0 = 0, n_b32 = 0;
  std::vector<float> peer(kRows);
  for (auto _ : state) {
    auto a = run_counted(*simd_dk, *simd_d);
    auto b = run_counted(*tree_dk, *tree_d);
    auto c = run_counted(b0, d0);
    auto e = run_counted(b32, d32);
    double p0 = now_s();
    plain_rowsum(s.xs, peer.data(), kRows, kCols);
    benchmark::DoNotOptimize(peer.data());
    benchmark::ClobberMemory();
    t_peer += now_s() - p0;
    t_simd += a.first, n_simd += a.second;
    t_tree += b.first, n_tree += b.second;
    t_b0 += c.first, n_b0 += c.second;
    t_b32 += e.first, n_b32 += e.second;
    state.SetIterationTime(a.first);
  }
  const double it = static_cast<double>(state.iterations()), groups = kRows;
  if (n_simd == 0) {
    return state.SkipWithError("fiber switches were not counted (jump_fcontext not interposed)");
  }
  double ns_per_switch = 1e9 * (t_b32 - t_b0) / static_cast<double>(n_b32 - n_b0);
  state.counters["switches_per_group_simd_barrier"] = n_simd / it / groups;
  state.counters["switches_per_group_barrier_tree"] = n_tree / it / groups;
  state.counters["switches_per_group_barriers0"] = n_b0 / it / groups;
  state.counters["switches_per_group_barriers32"] = n_b32 / it / groups;
  state.counters["ns_per_switch"] = ns_per_switch;
  state.counters["us_per_group_simd_barrier"] = 1e6 * t_simd / it / groups;
  state.counters["us_per_group_barrier_tree"] = 1e6 * t_tree / it / groups;
  state.counters["us_per_group_barriers0"] = 1e6 * t_b0 / it / groups;
  state.counters["us_per_group_barriers32"] = 1e6 * t_b32 / it / groups;
  state.counters["us_per_row_plain_loop"] = 1e6 * t_peer / it / groups;
  // Share of the simd+barrier row sum spent switching fibers (switches x cost / time).
  state.counters["switch_share_simd_barrier"] = n_simd * ns_per_switch * 1e-9 / t_simd;
  state.counters["vs_plain_loop_1thread"] = t_peer / t_simd;
}
BENCHMARK(BM_CpuFiberAnatomy)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace
