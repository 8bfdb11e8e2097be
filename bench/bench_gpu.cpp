// GPU benchmarks (issue "CUDA backend", item 7). Each skips with "no CUDA GPU" where
// alloy::gpu_available() is false, except the NVRTC compile benchmarks, which need NVRTC only
// (they compile for sm_90 without a GPU).
//
//   BM_GpuLaunchOverhead        host time per cached launch from C++ (target <= 2 us): a tiny
//                               metal_kernel enqueued + eval'd in batches (no synchronization
//                               inside a batch), the lower-level alloy::cuda::launch of the same
//                               translated function, and a raw cuLaunchKernel of a hand-written
//                               kernel (the peer; cost_vs_raw_launch = metal_kernel / raw),
//                               and of Alloy's own compiled function over its parameter block
//                               packed once (cost_vs_raw_same_kernel: item 9.7's "raw
//                               cuLaunchKernel of the same kernel").
//                               With scripts/experiments/fake_cuda_driver.c as the driver (and
//                               preloaded), also driver_calls_per_call and locks_per_call.
//                               param_block_bytes: the kernel's parameter block (what each
//                               of its launches copies).
//   BM_GpuExpVsCopy             exp over 2^28 float32 as a fraction of a device-to-device copy
//                               of the same bytes (vs_copy = copy time / exp time; bytes read +
//                               written counted for both). CUDA events on Alloy's stream.
//   BM_GpuTranslatedVsHand/...  metal_kernel (translated Metal) vs identical hand-written CUDA
//                               compiled by NVRTC and launched with cuLaunchKernel, for exp,
//                               a simd_sum + threadgroup-memory row sum and grid_sample forward
//                               (target vs_hand >= 0.97). vs_hand counts the whole metal_kernel
//                               call on the GPU timeline (with its small parameter upload);
//                               vs_hand_kernel_only launches the translated function directly.
//   BM_NvrtcCold                first compile of a new small kernel (target <= 50 ms): Metal
//                               signature + translation + NVRTC with the prelude, vs NVRTC on the
//                               hand-written kernel with no prelude (cost_vs_plain_nvrtc).
//   BM_NvrtcColdVsCupy          the same for exp(sin(x)) on 1M elements as its first call compiles
//                               it (quick first compile of the coarsened entry), vs NVRTC on the
//                               CUDA of a CuPy RawKernel with CuPy's options (target <= 1.0).
//   BM_NvrtcFirstCallDuringRefine  the same first-call compile while another kernel's background
//                               full compile runs, marked background (it goes to a worker) or
//                               not (it takes the in-process NVRTC slot), vs CuPy's alone.
//   BM_NvrtcWarmDisk            the same kernel's cubin from the disk cache (target <= 1 ms).
//   BM_GpuWarmDisk              a fresh process's first call of a kernel in the disk cache, on the
//                               GPU, to the end of its execution (target <= 1 ms); peer: the
//                               hand-written exp's first launch from a cubin file (module load,
//                               function lookup, launch, synchronize).
#include <dlfcn.h>
#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "backend/cuda/device.h"
#include "backend/cuda/jit.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/tiered.h"
#include "bench_common.h"
#include "cache/compile_cache.h"
#include "core/backend.h"
#include "example_kernels.h"
#include "kernel/custom_kernel.h"
#include "kernel/launch.h"
#include "kernel/program.h"

namespace {

using namespace alloy;
using namespace alloy::bench;
namespace fs = std::filesystem;
using cuda::CUdeviceptr;
using cuda::CUevent;

// Hand-written CUDA: the same computations as the Metal bodies, as a CUDA programmer writes them.
constexpr const char* kHandSource = R"(
extern "C" __global__ void exp_hand(const float* in, float* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = expf(in[i]);
}

// The same with what Alloy's generated entry does for it (four 256-thread groups per block,
// restrict pointers, no checks in whole blocks): the hand-written ceiling for this kernel.
extern "C" __global__ void exp_hand_coarse(const float* __restrict__ in, float* __restrict__ out,
                                           unsigned n) {
  const unsigned nb = gridDim.x, full = n / blockDim.x;
  if (blockIdx.x + 3 * nb < full) {
#pragma unroll
    for (unsigned k = 0; k < 4; ++k) {
      unsigned i = (blockIdx.x + k * nb) * blockDim.x + threadIdx.x;
      out[i] = expf(in[i]);
    }
    return;
  }
  for (unsigned k = 0; k < 4; ++k) {
    unsigned i = (blockIdx.x + k * nb) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = expf(in[i]);
  }
}

extern "C" __global__ void rowsum_hand(const float* in, float* out, unsigned cols) {
  unsigned row = blockIdx.x, lid = threadIdx.x, tpg = blockDim.x;
  const float* p = in + row * cols;
  float acc = 0.0f;
  for (unsigned i = lid; i < cols; i += tpg) acc += p[i];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ float partial[32];
  unsigned sg = lid / 32, lane = lid % 32;
  if (lane == 0) partial[sg] = acc;
  __syncthreads();
  if (sg == 0) {
    float v = lane < (tpg + 31) / 32 ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) out[row] = v;
  }
}

extern "C" __global__ void grid_sample_hand(const float* x, const float* grid, float* out,
                                            int H, int W, int C, int gH, int gW, unsigned n) {
  unsigned elem = blockIdx.x * blockDim.x + threadIdx.x;
  if (elem >= n) return;
  int row = W * C;
  int image = H * row;
  unsigned g = elem / C;
  float ix = ((grid[2 * g] + 1) * W - 1) / 2;
  float iy = ((grid[2 * g + 1] + 1) * H - 1) / 2;
  int x0 = floorf(ix), y0 = floorf(iy);
  int x1 = x0 + 1, y1 = y0 + 1;
  float fx = ix - x0, fy = iy - y0;
  int b = elem / C / (gH * gW);
  int base = b * image + elem % C;
  bool in_x0 = x0 >= 0 && x0 < W, in_x1 = x1 >= 0 && x1 < W;
  bool in_y0 = y0 >= 0 && y0 < H, in_y1 = y1 >= 0 && y1 < H;
  float v00 = (in_y0 && in_x0) ? x[base + y0 * row + x0 * C] : 0.0f;
  float v01 = (in_y0 && in_x1) ? x[base + y0 * row + x1 * C] : 0.0f;
  float v10 = (in_y1 && in_x0) ? x[base + y1 * row + x0 * C] : 0.0f;
  float v11 = (in_y1 && in_x1) ? x[base + y1 * row + x1 * C] : 0.0f;
  out[elem] = (1 - fy) * ((1 - fx) * v00 + fx * v01) + fy * ((1 - fx) * v10 + fx * v11);
}

// exp_hand with its arguments in one parameter struct the size of the parameter block every
// entry declared before h-launch7 (1504 bytes; now each entry's is sized to it,
// prelude/cuda/abi.h): what the parameter block's size alone costs a launch.
#ifndef BIG_PARAM_PAD  // compiled without it elsewhere (BM_GpuWarmDisk's own compile)
#define BIG_PARAM_PAD 1
#endif
struct big_param { const float* in; float* out; unsigned n; unsigned char pad[BIG_PARAM_PAD]; };
extern "C" __global__ void exp_hand_big_param(const big_param p) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  p.out[i] = expf(p.in[i]);
}

// Inputs too large to generate on the host: a hash of the index in [lo, hi).
extern "C" __global__ void fill_hash(float* out, unsigned long long n, float lo, float hi) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned h = (unsigned)i * 2654435761u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  out[i] = lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f);
}
)";

enum HandFn { kExpHand, kRowSumHand, kGridSampleHand, kFillHash, kExpHandCoarse, kExpHandBigParam };

// Pad of exp_hand_big_param's struct: its size is then that of the former fixed block (kept for
// comparisons with earlier runs' raw_big_param_us).
constexpr size_t kBigParamBytes = 1504;
constexpr size_t kBigParamPad = kBigParamBytes - 24;
struct BigParam {
  const void* in;
  void* out;
  unsigned n;
  unsigned char pad[kBigParamPad];
};
static_assert(sizeof(BigParam) == kBigParamBytes);

cuda::Context* gpu() {
  return gpu_available() ? cuda::Context::get() : nullptr;
}

const cuda::Module& hand_module() {
  static std::shared_ptr<const cuda::Module> m =
      cuda::load(*gpu(), cuda::KernelSource{"bench_hand",
                                            kHandSource,
                                            {"exp_hand", "rowsum_hand", "grid_sample_hand",
                                             "fill_hash", "exp_hand_coarse", "exp_hand_big_param"},
                                            {"-DBIG_PARAM_PAD=" + std::to_string(kBigParamPad)}});
  return *m;
}

void launch_raw(HandFn f, unsigned groups, unsigned threads, void** params) {
  cuda::Context& ctx = *gpu();
  ctx.check(ctx.driver().cuLaunchKernel(hand_module().function(f).handle, groups, 1, 1, threads, 1,
                                        1, 0, ctx.stream(), params, nullptr),
            "cuLaunchKernel");
}

unsigned ceil_div(uint64_t a, uint64_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

// A float32 GPU array of `shape` filled with hashed values in [lo, hi).
Array gpu_array(const Shape& shape, float lo, float hi) {
  Array a = make_empty(shape, float32, Device::gpu());
  void* p = node_of(a)->data();
  unsigned long long n = static_cast<unsigned long long>(a.size());
  void* params[] = {&p, &n, &lo, &hi};
  launch_raw(kFillHash, ceil_div(n, 256), 256, params);
  return a;
}

void* dptr(const Array& a) {
  return node_of(a)->data();
}

// Two CUDA events on Alloy's stream: time between start() and stop(), on the GPU's clock.
class Events {
 public:
  Events() : ctx_(*gpu()), d_(ctx_.driver()) {
    ctx_.make_current();
    ctx_.check(d_.cuEventCreate(&a_, cuda::CU_EVENT_DEFAULT), "cuEventCreate");
    ctx_.check(d_.cuEventCreate(&b_, cuda::CU_EVENT_DEFAULT), "cuEventCreate");
  }
  ~Events() {
    d_.cuEventDestroy(a_);
    d_.cuEventDestroy(b_);
  }
  void start() { ctx_.check(d_.cuEventRecord(a_, ctx_.stream()), "cuEventRecord"); }
  double stop() {
    ctx_.check(d_.cuEventRecord(b_, ctx_.stream()), "cuEventRecord");
    ctx_.check(d_.cuEventSynchronize(b_), "cuEventSynchronize");
    float ms = 0;
    ctx_.check(d_.cuEventElapsedTime(&ms, a_, b_), "cuEventElapsedTime");
    return ms * 1e-3;
  }

 private:
  cuda::Context& ctx_;
  const cuda::Driver& d_;
  CUevent a_ = nullptr, b_ = nullptr;
};

// A translated metal_kernel function launched directly (no array graph): one call's launch,
// bound once the way metal_kernel binds it (kernel::bind_call), launched through the backend.
struct GpuDispatch {
  DirectKernel dk;
  std::string label = "bench_direct";
  kernel::LaunchBuilder b{"bench", label};

  GpuDispatch(const MetalKernel& k, const std::vector<Array>& inputs, const KernelCall& call,
              const std::vector<Array>& outputs)
      : dk(k, inputs, call, msl::Target::cuda) {
    kernel::bind_call(b, k.spec(), dk.gen.bindings, inputs, outputs, Device::gpu(), true);
    b.dims(call.grid, kernel::effective_threadgroup(call.grid, call.threadgroup));
  }

  void launch() { b.launch(dk.program->kernels().front(), Device::gpu(), false, {}); }
};

KernelCall gpu_call(const Shape& out_shape, int grid, int tg) {
  KernelCall call;
  call.output_shapes = {out_shape};
  call.output_dtypes = {float32};
  call.grid = {grid, 1, 1};
  call.threadgroup = {tg, 1, 1};
  call.template_args = {{"T", float32}};
  call.device = Device::gpu();
  return call;
}

// Largest |a - b| / (atol + |b|) over two GPU arrays of floats.
double max_rel_diff(const Array& a, const Array& b, double atol) {
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::fabs(double(x[i]) - y[i]) / (atol + std::fabs(double(y[i])));
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

// ---- launch overhead ----

// Driver calls so far when the driver is scripts/experiments/fake_cuda_driver.c (it counts them);
// -1 with a real driver.
long fake_driver_calls() {
  using Fn = long (*)(const char*);
  static Fn fn = [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? reinterpret_cast<Fn>(dlsym(h, "fake_cuda_calls")) : nullptr;
  }();
  return fn ? fn(nullptr) : -1;
}
// Mutex locks so far when the fake driver is also preloaded (LD_PRELOAD): it counts
// pthread_mutex_lock, so spin locks (the call plan's, the CUDA allocator's) are not in it. -1
// otherwise.
long fake_driver_locks() {
  using Fn = long (*)();
  static Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "fake_cuda_locks"));
  return fn ? fn() : -1;
}

// What Alloy's path does per cached call besides the launch, alone: the context check (one
// cuCtxGetCurrent), the heap allocations and frees (7 of the sizes a call makes), the mutex
// locks (5), atomic read-modify-writes on distinct cache lines (28, as reference counts of
// several objects). `after_launch`: each after a raw launch, as in a call + eval loop (the
// driver's launch runs between them and may evict their data). Returns the seconds of `batch`
// rounds.
double host_work_batch(int batch, bool after_launch, void** raw_params, bool ctx_check, bool allocs,
                       bool locks, bool rmws = false) {
  static std::mutex mu[5];
  struct alignas(64) Count {
    std::atomic<long> n{0};
  };
  static Count counts[28];
  static constexpr size_t kSizes[7] = {24, 224, 160, 8, 8, 16, 72};
  cuda::Context& ctx = *gpu();
  double t0 = now_s();
  for (int j = 0; j < batch; ++j) {
    if (after_launch) launch_raw(kExpHand, 1, 256, raw_params);
    if (ctx_check) {
      cuda::CUcontext c = nullptr;
      ctx.driver().cuCtxGetCurrent(&c);
      benchmark::DoNotOptimize(c);
    }
    if (allocs) {
      void* p[7];
      for (int i = 0; i < 7; ++i) {
        p[i] = ::operator new(kSizes[i]);
        benchmark::DoNotOptimize(p[i]);
      }
      for (int i = 0; i < 7; ++i) ::operator delete(p[i]);
    }
    if (locks)
      for (auto& m : mu) {
        m.lock();
        benchmark::ClobberMemory();
        m.unlock();
      }
    if (rmws)
      for (auto& c : counts) c.n.fetch_add(1, std::memory_order_acq_rel);
  }
  return now_s() - t0;
}

void BM_GpuLaunchOverhead(benchmark::State& state) {
  if (!gpu()) return state.SkipWithError("no CUDA GPU");
  const int n = 256, batch = 256;
  cuda::Context& ctx = *gpu();
  Array x = gpu_array({n}, -1.0f, 1.0f);
  auto k = metal_kernel("bench_tiny_exp", {"inp"}, {"out"}, examples::kExpSource);
  KernelCall call = gpu_call({n}, n, 256);
  Array direct_out = make_empty({n}, float32, Device::gpu());
  GpuDispatch direct(k, {x}, call, {direct_out});
  k({x}, call)[0].eval();  // compiled once, outside the timings
  const double param_block_bytes = direct.dk.program->kernels().front().entry.cuda_block.size;
  void* in_p = dptr(x);
  void* out_p = dptr(direct_out);
  unsigned nn = n;
  void* raw_params[] = {&in_p, &out_p, &nn};
  BigParam big{};
  big.in = in_p;
  big.out = out_p;
  big.n = nn;
  void* big_params[] = {&big};
  // The same kernel, Alloy's compiled function, launched with a raw cuLaunchKernel over its
  // parameter block packed once (item 9.7 names "a raw cuLaunchKernel of the same kernel"; the
  // hand-written exp above has a 20-byte parameter list where this one has its block).
  const cuda::LaunchTarget same =
      cuda::launch_target(direct.dk.program->kernels().front().function);
  cuda::ParamBlock same_block(same.block);
  cuda::pack(direct.b.desc(), same_block);
  void* same_params[1 + ALLOY_CUDA_MAX_BUFFERS];
  same_params[0] = const_cast<void*>(same_block.bytes());
  for (uint32_t i = 0; i < same.layout.num_param_buffers; ++i)
    same_params[1 + i] = const_cast<void*>(
        same_block.buffer_slot(static_cast<uint32_t>(same.layout.param_buffers[i])));
  const alloy_cuda_head& sh = same_block.head;
  auto launch_same = [&] {
    ctx.check(ctx.driver().cuLaunchKernel(same.function->handle, sh.groups[0], sh.groups[1],
                                          sh.groups[2], sh.threadgroup[0], sh.threadgroup[1],
                                          sh.threadgroup[2], 0, ctx.stream(), same_params, nullptr),
              "cuLaunchKernel");
  };
  ctx.synchronize();

  double t_same = 0, best_same = INFINITY;
  double t_mk = 0, t_launch = 0, t_raw = 0, t_build = 0, t_eval = 0, t_free = 0, t_big = 0;
  double t_ctx = 0, t_alloc = 0, t_lock = 0, t_rmw = 0, t_raw_work = 0, t_raw_again = 0;
  // Fastest batch of each loop: what a preempted batch on a loaded host does not change.
  double best_mk = INFINITY, best_raw = INFINITY, best_build = INFINITY, best_eval = INFINITY;
  int64_t launches = 0;
  long driver_calls = 0, locks = 0;
  for (auto _ : state) {
    long d0 = fake_driver_calls(), l0 = fake_driver_locks();
    double t0 = now_s();
    for (int j = 0; j < batch; ++j) {
      Array out = k({x}, call)[0];
      out.eval();
    }
    double t1 = now_s();
    driver_calls += fake_driver_calls() - d0;
    locks += fake_driver_locks() - l0;
    ctx.synchronize();
    double t2 = now_s();
    for (int j = 0; j < batch; ++j) direct.launch();
    double t3 = now_s();
    ctx.synchronize();
    double t4 = now_s();
    for (int j = 0; j < batch; ++j) launch_raw(kExpHand, 1, 256, raw_params);
    double t5 = now_s();
    ctx.synchronize();
    // Where the metal_kernel call's time goes: building the pending outputs, then evaluating.
    std::vector<Array> pending;
    pending.reserve(batch);
    double t6 = now_s();
    for (int j = 0; j < batch; ++j) pending.push_back(k({x}, call)[0]);
    double t7 = now_s();
    for (auto& p : pending) p.eval();
    double t8 = now_s();
    pending.clear();
    double t9 = now_s();
    ctx.synchronize();
    double t10 = now_s();
    for (int j = 0; j < batch; ++j) launch_raw(kExpHandBigParam, 1, 256, big_params);
    t_big += now_s() - t10;
    ctx.synchronize();
    double t11 = now_s();
    for (int j = 0; j < batch; ++j) launch_same();
    double t12 = now_s();
    t_same += t12 - t11;
    best_same = std::min(best_same, t12 - t11);
    ctx.synchronize();
    // The parts of Alloy's per-call work measured alone, and interleaved with raw launches
    // (minus the raw launches of the same run): what they cost on this host with a real driver.
    t_ctx += host_work_batch(batch, false, raw_params, true, false, false);
    t_alloc += host_work_batch(batch, false, raw_params, false, true, false);
    t_lock += host_work_batch(batch, false, raw_params, false, false, true);
    t_rmw += host_work_batch(batch, false, raw_params, false, false, false, true);
    ctx.synchronize();
    t_raw_work += host_work_batch(batch, true, raw_params, true, true, true, true);
    ctx.synchronize();
    t_raw_again += host_work_batch(batch, true, raw_params, false, false, false);
    ctx.synchronize();
    t_build += t7 - t6;
    t_eval += t8 - t7;
    best_mk = std::min(best_mk, t1 - t0);
    best_raw = std::min(best_raw, t5 - t4);
    best_build = std::min(best_build, t7 - t6);
    best_eval = std::min(best_eval, t8 - t7);
    t_free += t9 - t8;
    t_mk += t1 - t0;
    t_launch += t3 - t2;
    t_raw += t5 - t4;
    launches += batch;
    state.SetIterationTime((t1 - t0) / batch);
  }
  state.counters["metal_kernel_us"] = 1e6 * t_mk / launches;
  state.counters["cuda_launch_us"] = 1e6 * t_launch / launches;
  state.counters["raw_launch_us"] = 1e6 * t_raw / launches;
  state.counters["cost_vs_raw_launch"] = t_mk / t_raw;
  state.counters["raw_same_kernel_us"] = 1e6 * t_same / launches;
  state.counters["cost_vs_raw_same_kernel"] = t_mk / t_same;
  state.counters["best_vs_raw_same_kernel"] = best_mk / best_same;
  state.counters["build_us"] = 1e6 * t_build / launches;
  state.counters["eval_us"] = 1e6 * t_eval / launches;
  state.counters["release_us"] = 1e6 * t_free / launches;
  // The raw launch with a parameter block the size of the former fixed one (what that size
  // costs), and the size of the benchmark kernel's own block (what its launches copy).
  state.counters["raw_big_param_us"] = 1e6 * t_big / launches;
  state.counters["param_block_bytes"] = param_block_bytes;
  state.counters["target_us"] = 2.0;
  // One cuCtxGetCurrent, 7 heap allocations + frees, 5 mutex lock + unlock, 28 atomic
  // read-modify-writes: alone, and all four after each raw launch (`interleaved_work_us` = that
  // loop minus a raw launch loop).
  state.counters["ctx_check_us"] = 1e6 * t_ctx / launches;
  state.counters["alloc7_us"] = 1e6 * t_alloc / launches;
  state.counters["lock5_us"] = 1e6 * t_lock / launches;
  state.counters["rmw28_us"] = 1e6 * t_rmw / launches;
  state.counters["interleaved_work_us"] = 1e6 * (t_raw_work - t_raw_again) / launches;
  // The same from the fastest batch of each loop (a loaded host's preempted batches left out).
  state.counters["metal_kernel_best_us"] = 1e6 * best_mk / batch;
  state.counters["raw_launch_best_us"] = 1e6 * best_raw / batch;
  state.counters["build_best_us"] = 1e6 * best_build / batch;
  state.counters["eval_best_us"] = 1e6 * best_eval / batch;
  state.counters["best_vs_raw_launch"] = best_mk / best_raw;
  // Driver calls per call + eval (fake driver only: it counts them; the raw launch makes 1).
  if (fake_driver_calls() >= 0)
    state.counters["driver_calls_per_call"] = static_cast<double>(driver_calls) / launches;
  if (fake_driver_locks() >= 0)
    state.counters["locks_per_call"] = static_cast<double>(locks) / launches;
}
BENCHMARK(BM_GpuLaunchOverhead)->UseManualTime()->Iterations(40)->Unit(benchmark::kMicrosecond);

// ---- exp vs copy bandwidth ----

void BM_GpuExpVsCopy(benchmark::State& state) {
  if (!gpu()) return state.SkipWithError("no CUDA GPU");
  const int64_t n = int64_t{1} << 28;
  Array x = gpu_array({n}, -4.0f, 4.0f);
  Array copy_dst = make_empty({n}, float32, Device::gpu());
  auto k = metal_kernel("bench_exp", {"inp"}, {"out"}, examples::kExpSource);
  KernelCall call = gpu_call({n}, static_cast<int>(n), 256);
  k({x}, call)[0].eval();  // compile and allocate once
  gpu_backend()->copy_device(dptr(copy_dst), dptr(x), n * 4);
  gpu()->synchronize();
  Events ev;
  PairTimes t;
  void* in_p = dptr(x);
  void* out_p = dptr(copy_dst);
  unsigned nn = static_cast<unsigned>(n);
  void* coarse_params[] = {&in_p, &out_p, &nn};
  double t_coarse = 0;
  for (auto _ : state) {
    ev.start();
    {
      Array out = k({x}, call)[0];
      out.eval();
    }
    double te = ev.stop();
    ev.start();
    gpu_backend()->copy_device(dptr(copy_dst), dptr(x), n * 4);
    double tc = ev.stop();
    ev.start();
    launch_raw(kExpHandCoarse, ceil_div(ceil_div(n, 256), 4), 256, coarse_params);
    t_coarse += ev.stop();
    t.alloy += te;
    t.peer += tc;
    ++t.n;
    state.SetIterationTime(te);
  }
  t.report(state, "copy");
  state.counters["hand_coarse_vs_copy"] = t.peer / t_coarse;
  const double bytes = 2.0 * 4.0 * n;  // read + written
  state.counters["exp_GBps"] = bytes * t.n / t.alloy / 1e9;
  state.counters["copy_GBps"] = bytes * t.n / t.peer / 1e9;
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_GpuExpVsCopy)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);

// ---- translated vs hand-written ----

enum class Case { exp, rowsum, grid_sample };

struct CaseSetup {
  std::vector<Array> inputs;
  MetalKernel k;
  KernelCall call;
  Shape out_shape;
  std::function<void(void* out)> hand;  // enqueues the hand-written kernel writing `out`
};

CaseSetup make_case(Case c) {
  switch (c) {
    case Case::exp: {
      const int64_t n = int64_t{1} << 28;
      Array x = gpu_array({n}, -4.0f, 4.0f);
      CaseSetup s{{x},
                  metal_kernel("bench_exp", {"inp"}, {"out"}, examples::kExpSource),
                  gpu_call({n}, static_cast<int>(n), 256),
                  {n},
                  {}};
      s.hand = [x, n](void* out) {
        void* in = dptr(x);
        unsigned nn = static_cast<unsigned>(n);
        void* p[] = {&in, &out, &nn};
        launch_raw(kExpHand, ceil_div(n, 256), 256, p);
      };
      return s;
    }
    case Case::rowsum: {
      const int rows = 32768, cols = 4096;
      Array x = gpu_array({rows, cols}, -1.0f, 1.0f);
      CaseSetup s{{x},
                  metal_kernel("bench_rowsum", {"inp"}, {"out"}, kRowSumSource),
                  gpu_call({rows}, rows * 256, 256),
                  {rows},
                  {}};
      s.call.template_args.clear();
      s.hand = [x, rows, cols](void* out) {
        void* in = dptr(x);
        unsigned c = cols;
        void* p[] = {&in, &out, &c};
        launch_raw(kRowSumHand, rows, 256, p);
      };
      return s;
    }
    case Case::grid_sample: {
      const int B = 8, H = 1024, W = 1024, C = 64, gH = 256, gW = 256;
      Array x = gpu_array({B, H, W, C}, -1.0f, 1.0f);
      // Sampling positions in [-1, 1): random gathers, some taps on the border (masked).
      Array grid = random_array({B, gH, gW, 2}, -1.0f, 1.0f, 31, Device::gpu());
      const int n = B * gH * gW * C;
      CaseSetup s{
          {x, grid},
          metal_kernel("bench_grid_sample", {"x", "grid"}, {"out"}, examples::kGridSampleSource),
          gpu_call({B, gH, gW, C}, n, 256),
          {B, gH, gW, C},
          {}};
      s.hand = [x, grid, n](void* out) {
        void* xp = dptr(x);
        void* gp = dptr(grid);
        int h = H, w = W, ch = C, gh = gH, gw = gW;
        unsigned nn = n;
        void* p[] = {&xp, &gp, &out, &h, &w, &ch, &gh, &gw, &nn};
        launch_raw(kGridSampleHand, ceil_div(nn, 256), 256, p);
      };
      return s;
    }
  }
  throw std::logic_error("unknown case");
}

// vs_hand = hand-written time / metal_kernel time (target >= 0.97).
void BM_GpuTranslatedVsHand(benchmark::State& state, Case c) {
  if (!gpu()) return state.SkipWithError("no CUDA GPU");
  CaseSetup s = make_case(c);
  Array hand_out = make_empty(s.out_shape, float32, Device::gpu());
  Array direct_out = make_empty(s.out_shape, float32, Device::gpu());
  std::string error;
  std::unique_ptr<GpuDispatch> direct;
  try {
    Array ref = s.k(s.inputs, s.call)[0];
    ref.eval();
    direct = std::make_unique<GpuDispatch>(s.k, s.inputs, s.call, std::vector<Array>{direct_out});
    s.hand(dptr(hand_out));
    direct->launch();
    // Same computation: the results agree (sums in a different order for the row sum).
    double tol = c == Case::rowsum ? 1e-4 : 1e-5;
    if (max_rel_diff(ref, hand_out, 1e-3) > tol || max_rel_diff(direct_out, hand_out, 1e-3) > tol)
      error = "translated and hand-written results differ";
  } catch (const std::exception& e) {
    error = std::string("setup failed: ") + e.what();
  }
  if (!error.empty()) return state.SkipWithError(error.c_str());

  Events ev;
  PairTimes t;
  double t_direct = 0;
  for (auto _ : state) {
    ev.start();
    {
      Array out = s.k(s.inputs, s.call)[0];
      out.eval();
    }
    double ta = ev.stop();
    ev.start();
    direct->launch();
    double td = ev.stop();
    ev.start();
    s.hand(dptr(hand_out));
    double th = ev.stop();
    t.alloy += ta;
    t.peer += th;
    t_direct += td;
    ++t.n;
    state.SetIterationTime(ta);
  }
  t.report(state, "hand");
  state.counters["kernel_only_ms"] = 1e3 * t_direct / t.n;
  state.counters["vs_hand_kernel_only"] = t.peer / t_direct;
  state.counters["target"] = 0.97;
}
BENCHMARK_CAPTURE(BM_GpuTranslatedVsHand, exp, Case::exp)
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GpuTranslatedVsHand, rowsum, Case::rowsum)
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GpuTranslatedVsHand, grid_sample, Case::grid_sample)
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);

// ---- NVRTC compile times ----

// The architecture compiled for: the GPU's, else sm_90 (the H100 the targets are set for).
std::string nvrtc_arch() {
  return gpu() ? gpu()->info().arch : "sm_90";
}

const std::string& nonce() {
  static const std::string n =
      std::to_string(::getpid()) + "-" + std::to_string(static_cast<int64_t>(now_s() * 1e6));
  return n;
}

std::string tagged(const char* source, const std::string& tag, int64_t i) {
  return std::string(source) + "    // bench " + tag + " " + nonce() + " " + std::to_string(i) +
         "\n";
}

// Plain NVRTC on the hand-written exp (no prelude, no cache): the peer of a cold compile.
double plain_nvrtc_seconds(int64_t i) {
  std::string src = std::string(
                        "extern \"C\" __global__ void exp_hand(const float* in, float* "
                        "out, unsigned n) {\n  unsigned i = blockIdx.x * blockDim.x + "
                        "threadIdx.x;\n  if (i >= n) return;\n  out[i] = expf(in[i]);\n}\n") +
                    "// plain " + nonce() + " " + std::to_string(i) + "\n";
  double t0 = now_s();
  cuda::nvrtc::compile(src, "hand.cu", {},
                       {"--gpu-architecture=" + nvrtc_arch(), "--std=c++17", "-default-device"},
                       true);
  return now_s() - t0;
}

KernelCall nvrtc_call(int n) {
  return gpu_call({n}, n, 256);
}

void BM_NvrtcCold(benchmark::State& state) {
  if (!cuda::nvrtc::available()) return state.SkipWithError("NVRTC not found");
  const int n = 1024;
  Array x = random_array({n}, -1.0f, 1.0f, 41, Device::cpu());  // only its dtype/shape matter
  KernelCall call = nvrtc_call(n);
  const std::string arch = nvrtc_arch();
  try {  // load NVRTC and the prelude once, outside the timings
    auto k = metal_kernel("bench_nvrtc", {"inp"}, {"out"}, tagged(examples::kExpSource, "w", 0));
    std::string why = kernel::compile_call_cubin(k, {x}, call, arch);
    if (!why.empty()) return state.SkipWithError(why.c_str());
    plain_nvrtc_seconds(0);
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("NVRTC compile failed: ") + e.what()).c_str());
  }
  PairTimes t;
  int64_t i = 0;
  for (auto _ : state) {
    ++i;
    auto k = metal_kernel("bench_nvrtc", {"inp"}, {"out"}, tagged(examples::kExpSource, "c", i));
    double t0 = now_s();
    kernel::compile_call_cubin(k, {x}, call, arch);
    double t1 = now_s();
    t.alloy += t1 - t0;
    t.peer += plain_nvrtc_seconds(i);
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  t.report(state, "plain_nvrtc", /*cost=*/true);
  state.counters["target_ms"] = 50;
}
BENCHMARK(BM_NvrtcCold)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

// Issue "First-call latency" item 1, the compile part (no GPU needed): a new exp(sin(x)) kernel
// (1M float32 elements, so its entry is coarsened) through what its first call compiles on the
// GPU -- signature, translation, NVRTC of the quick first compile (src/backend/cuda/tiered.h) to
// a cubin -- against NVRTC on the CUDA a CuPy RawKernel user writes, with the options CuPy's
// RawKernel passes (cupy/_core/core.pyx assemble_cupy_compiler_options and cupy/cuda/compiler.py:
// --std=c++17, -ftz=true, -arch=sm_XX (a cubin), --device-as-default-execution-space; its -I
// folders change nothing here), alternately in this process; neither has a cache (Alloy's
// compile() below never reads the disk: cuda::compile is given a new source each time).
constexpr const char* kExpSinSource = R"(
    uint i = thread_position_in_grid.x;
    out[i] = exp(sin(inp[i]));
)";

// BM_NvrtcColdVsCupyDistinctSelections: iteration i (from 1) adds 0 * f(|x| + 1) for the i-th of
// these (Metal, CUDA) to both sources, so that every Alloy kernel has a math selection of its own
// (as python/bench/bench_first_call.py --distinct-selections).
constexpr std::pair<const char*, const char*> kExtraFunctions[] = {
    {"cos", "cosf"},     {"tan", "tanf"},     {"log", "logf"},     {"sqrt", "sqrtf"},
    {"exp2", "exp2f"},   {"log2", "log2f"},   {"floor", "floorf"}, {"ceil", "ceilf"},
    {"round", "roundf"}, {"trunc", "truncf"}, {"sinh", "sinhf"},   {"cosh", "coshf"},
    {"tanh", "tanhf"},   {"atan", "atanf"},   {"log10", "log10f"}, {"asinh", "asinhf"}};

std::string extra_function(int64_t i, bool cuda) {
  if (i <= 0) return "";
  const auto& f = kExtraFunctions[(i - 1) % std::size(kExtraFunctions)];
  return cuda ? fmt::format(" + 0.0f * {}(fabsf(inp[i]) + 1.0f)", f.second)
              : fmt::format(" + 0.0f * {}(fabs(inp[i]) + 1.0f)", f.first);
}

double cupy_nvrtc_seconds(int64_t i, bool distinct = false) {
  std::string src =
      std::string(
          "extern \"C\" __global__ void expsin(const float* inp, float* out, unsigned n) {\n"
          "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
          "  if (i < n) out[i] = expf(sinf(inp[i]))") +
      (distinct ? extra_function(i, true) : "") + ";\n}\n" + "// cupy " + nonce() + " " +
      std::to_string(i) + "\n";
  double t0 = now_s();
  cuda::nvrtc::compile(
      src, "kern.cu", {},
      {"--std=c++17", "-ftz=true", "-arch=" + nvrtc_arch(), "--device-as-default-execution-space"},
      true);
  return now_s() - t0;
}

// Process CPU seconds: NVRTC runs on the calling thread, and on a loaded machine CPU time is the
// steadier measure (wall times there swing with the other processes).
double process_cpu_s() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void nvrtc_cold_vs_cupy(benchmark::State& state, bool distinct) {
  if (!cuda::nvrtc::available()) return state.SkipWithError("NVRTC not found");
  const int n = 1 << 20;
  Array x = random_array({n}, -1.0f, 1.0f, 43, Device::cpu());  // only its dtype/shape matter
  KernelCall call = nvrtc_call(n);
  const std::string arch = nvrtc_arch();
  int cc = std::stoi(arch.substr(arch.find('_') + 1));
  auto first_compile = [&](int64_t i) {
    std::string body = kExpSinSource;
    if (distinct) body.replace(body.rfind(';'), 1, extra_function(i, false) + ";");
    auto k = metal_kernel("expsin", {"inp"}, {"out"}, tagged(body.c_str(), "cupy", i));
    double t0 = now_s();
    kernel::SourceMap map;
    msl::Translation tr = kernel::call_gpu_translation(k, {x}, call, &map);
    CompileRequest r = kernel::compile_request(tr, map, "safe");
    auto quick = cuda::quick_kernel_source(r);
    cuda::compile(quick ? *quick : cuda::kernel_source(r),
                  cuda::nvrtc::target_for(cc / 10, cc % 10));
    return now_s() - t0;
  };
  try {  // load NVRTC and the prelude once, outside the timings; the selection's second
         // compile makes its PCH (nvrtc::auto_pch_options): a kernel of a known selection
    first_compile(0);
    first_compile(-1);
    cupy_nvrtc_seconds(0);
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("NVRTC compile failed: ") + e.what()).c_str());
  }
  PairTimes t, cpu;
  int64_t i = 0;
  for (auto _ : state) {
    ++i;
    double c0 = process_cpu_s();
    double a = first_compile(i);
    double c1 = process_cpu_s();
    t.alloy += a;
    t.peer += cupy_nvrtc_seconds(i, distinct);
    cpu.alloy += c1 - c0;
    cpu.peer += process_cpu_s() - c1;
    ++t.n;
    ++cpu.n;
    state.SetIterationTime(a);
  }
  t.report(state, "cupy_nvrtc", /*cost=*/true);
  // The same in process CPU time (alloy_cpu_ms, cupy_nvrtc_cpu_ms, cpu_cost_vs_cupy_nvrtc).
  state.counters["alloy_cpu_ms"] = 1e3 * cpu.alloy / cpu.n;
  state.counters["cupy_nvrtc_cpu_ms"] = 1e3 * cpu.peer / cpu.n;
  state.counters["cpu_cost_vs_cupy_nvrtc"] = cpu.alloy / cpu.peer;
  state.counters["target"] = 1.0;
  const auto v = cuda::nvrtc::version();
  state.SetLabel(fmt::format("NVRTC {}.{} {}", v.major, v.minor, cuda::nvrtc::library_path()));
}
void BM_NvrtcColdVsCupy(benchmark::State& state) {
  nvrtc_cold_vs_cupy(state, false);
}
BENCHMARK(BM_NvrtcColdVsCupy)->UseManualTime()->Iterations(7)->Unit(benchmark::kMillisecond);
// The same, every iteration's kernel a math selection of its own (nvrtc::auto_pch: the core's
// PCH, made by the second warm-up compile, and none of the selection's own).
void BM_NvrtcColdVsCupyDistinctSelections(benchmark::State& state) {
  nvrtc_cold_vs_cupy(state, true);
}
BENCHMARK(BM_NvrtcColdVsCupyDistinctSelections)
    ->UseManualTime()
    ->Iterations(7)
    ->Unit(benchmark::kMillisecond);

// A first call that comes while another kernel's background full compile (the tiered refine)
// runs: the first call's compile (as in BM_NvrtcColdVsCupy) timed while a full compile of another
// new kernel runs on a second thread, started 3 ms before. Alternately: the background compile
// marked as such (nvrtc::BackgroundScope, what CompiledModule::refine does: it goes to a worker
// and the caller compiles in this process) and not marked (before: it took the in-process slot
// and the caller went to a worker). Wall times (the caller waits); the CuPy-style compile of the
// same kernel alone is the peer. caller_in_process_*: the share of the caller's compiles that ran
// in this process. Needs NVRTC workers (alloy-nvrtc-worker beside the binary).
void BM_NvrtcFirstCallDuringRefine(benchmark::State& state) {
  namespace nv = cuda::nvrtc;
  if (!nv::available()) return state.SkipWithError("NVRTC not found");
  const int n = 1 << 20;
  Array x = random_array({n}, -1.0f, 1.0f, 44, Device::cpu());
  KernelCall call = nvrtc_call(n);
  const std::string arch = nvrtc_arch();
  int cc = std::stoi(arch.substr(arch.find('_') + 1));
  const nv::Target target = nv::target_for(cc / 10, cc % 10);
  auto request = [&](const char* tag, int64_t i) {
    auto k = metal_kernel("expsin", {"inp"}, {"out"}, tagged(kExpSinSource, tag, i));
    kernel::SourceMap map;
    msl::Translation tr = kernel::call_gpu_translation(k, {x}, call, &map);
    return kernel::compile_request(tr, map, "safe");
  };
  auto first_compile = [&](const char* tag, int64_t i) {
    double t0 = now_s();
    CompileRequest r = request(tag, i);
    auto quick = cuda::quick_kernel_source(r);
    cuda::compile(quick ? *quick : cuda::kernel_source(r), target);
    return now_s() - t0;
  };
  // One caller's compile during a background one; whether the caller's ran here.
  auto during = [&](bool marked, int64_t i, bool* here) {
    cuda::KernelSource full = cuda::kernel_source(request(marked ? "bgm" : "bgu", i));
    std::thread refine([&] {
      std::optional<nv::BackgroundScope> scope;
      if (marked) scope.emplace();
      cuda::compile(full, target);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    nv::WorkerStats s0 = nv::worker_stats();
    double t = first_compile(marked ? "fm" : "fu", i);
    nv::WorkerStats s1 = nv::worker_stats();
    refine.join();
    // In-process compiles count when they start: the unmarked refine's before s0 (3 ms).
    *here =
        (s1.in_process - s0.in_process) - (s1.background_in_process - s0.background_in_process) > 0;
    return t;
  };
  try {  // NVRTC, the prelude and one worker up, outside the timings
    first_compile("warm", 0);
    cupy_nvrtc_seconds(0);
    bool here = false;
    during(true, 0, &here);
    if (nv::worker_stats().max_workers == 0)
      return state.SkipWithError(("no NVRTC workers: " + nv::worker_stats().disabled_why).c_str());
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("NVRTC compile failed: ") + e.what()).c_str());
  }
  double marked = 0, unmarked = 0, peer = 0;
  int marked_here = 0, unmarked_here = 0;
  int64_t i = 0;
  for (auto _ : state) {
    ++i;
    bool here = false;
    double m = during(true, i, &here);
    marked += m;
    marked_here += here;
    unmarked += during(false, i, &here);
    unmarked_here += here;
    peer += cupy_nvrtc_seconds(i);
    state.SetIterationTime(m);
  }
  state.counters["caller_ms_refine_marked"] = 1e3 * marked / i;
  state.counters["caller_ms_refine_unmarked"] = 1e3 * unmarked / i;
  state.counters["cupy_nvrtc_ms"] = 1e3 * peer / i;
  state.counters["cost_vs_cupy_marked"] = marked / peer;
  state.counters["cost_vs_cupy_unmarked"] = unmarked / peer;
  state.counters["caller_in_process_marked"] = static_cast<double>(marked_here) / i;
  state.counters["caller_in_process_unmarked"] = static_cast<double>(unmarked_here) / i;
}
BENCHMARK(BM_NvrtcFirstCallDuringRefine)
    ->UseManualTime()
    ->Iterations(7)
    ->Unit(benchmark::kMillisecond);

// The cubin of a kernel compiled before, read back from the disk cache (compile() has no memory
// level: every call goes to disk). Peer: a cold NVRTC compile of the same kernel in this run.
void BM_NvrtcWarmDisk(benchmark::State& state) {
  if (!cuda::nvrtc::available()) return state.SkipWithError("NVRTC not found");
  if (!cache::CompileCache::global().has_disk())
    return state.SkipWithError("the compile cache has no disk level");
  const int n = 1024;
  Array x = random_array({n}, -1.0f, 1.0f, 42, Device::cpu());
  KernelCall call = nvrtc_call(n);
  const std::string arch = nvrtc_arch();
  auto k = metal_kernel("bench_nvrtc", {"inp"}, {"out"}, tagged(examples::kExpSource, "warm", 0));
  double cold = 0;
  try {
    double t0 = now_s();
    std::string why = kernel::compile_call_cubin(k, {x}, call, arch);
    cold = now_s() - t0;
    if (!why.empty()) return state.SkipWithError(why.c_str());
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("NVRTC compile failed: ") + e.what()).c_str());
  }
  PairTimes t;
  for (auto _ : state) {
    double t0 = now_s();
    kernel::compile_call_cubin(k, {x}, call, arch);
    double t1 = now_s();
    t.alloy += t1 - t0;
    t.peer += cold;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  t.report(state, "cold_compile", /*cost=*/true);
  state.counters["target_ms"] = 1;
}
BENCHMARK(BM_NvrtcWarmDisk)->UseManualTime()->Iterations(50)->Unit(benchmark::kMillisecond);

// A fresh process (child, see gpu_warm_child) calls a kernel whose cubin is in the disk cache:
// translation, cache lookup, cubin read, cuModuleLoadData, launch, synchronize.
void BM_GpuWarmDisk(benchmark::State& state) {
  if (!gpu()) return state.SkipWithError("no CUDA GPU");
  if (!cache::CompileCache::global().has_disk())
    return state.SkipWithError("the compile cache has no disk level");
  const int n = 1024;
  const std::string body = tagged(examples::kExpSource, "gpu-warm", 0);
  fs::path work = fs::temp_directory_path() / ("alloy-bench-gpu-warm-" + nonce());
  try {
    Array x = gpu_array({n}, -1.0f, 1.0f);
    auto k = metal_kernel("bench_gpu_warm", {"inp"}, {"out"}, body);
    k({x}, nvrtc_call(n))[0].eval();
    gpu()->synchronize();
    // The full cubin on disk before the children start: the first call compiled the quick entry
    // and its full compile may still run in the background (src/backend/cuda/tiered.h).
    kernel::compile_call_cubin(k, {x}, nvrtc_call(n), nvrtc_arch());
    // The peer's cubin: the hand-written kernels compiled for this GPU.
    auto image =
        cuda::compile(cuda::KernelSource{"bench_hand", kHandSource, {}, {}},
                      cuda::nvrtc::target_for(gpu()->info().cc_major, gpu()->info().cc_minor));
    fs::create_directories(work);
    std::ofstream(work / "peer.cubin", std::ios::binary)
        .write(image.bytes.data(), static_cast<std::streamsize>(image.bytes.size()));
    std::ofstream(work / "body.metal") << body;
  } catch (const std::exception& e) {
    return state.SkipWithError((std::string("setup failed: ") + e.what()).c_str());
  }
  time_warm_children(state, "gpu-warm",
                     {{"ALLOY_BENCH_BODY_FILE", (work / "body.metal").string()},
                      {"ALLOY_BENCH_PEER_CUBIN", (work / "peer.cubin").string()}},
                     work, "hand_first_launch");
}
BENCHMARK(BM_GpuWarmDisk)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace

namespace alloy::bench {

// Child side of BM_GpuWarmDisk. Before the timing, what a process pays once whatever it runs:
// the GPU context, and a first allocation of the output's size (so the caching allocator has a
// block, as in any process that has done some GPU work). Timed: the first metal_kernel call, to
// the end of its execution. Peer: the same for the hand-written exp from a cubin file: module
// load, function lookup, launch, synchronize (module loading is lazy: the first launch pays part
// of it). Prints "alloy_s peer_s disk_hits".
int gpu_warm_child() {
  const char* body_file = std::getenv("ALLOY_BENCH_BODY_FILE");
  const char* peer_cubin = std::getenv("ALLOY_BENCH_PEER_CUBIN");
  if (!body_file || !peer_cubin || !gpu()) return 2;
  std::ifstream in(body_file);
  std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ifstream cf(peer_cubin, std::ios::binary);
  std::vector<char> cubin((std::istreambuf_iterator<char>(cf)), std::istreambuf_iterator<char>());
  const int n = 1024;
  cuda::Context& ctx = *gpu();
  Array x = random_array({n}, -1.0f, 1.0f, 43, Device::gpu());
  make_empty({n}, float32, Device::gpu());  // allocated and given back to the cache
  Array peer_out = make_empty({n}, float32, Device::gpu());
  const cuda::Driver& d = ctx.driver();
  ctx.make_current();
  // The process's first module load and kernel launch pay one-time driver costs that are neither
  // Alloy's nor the peer's: take them here, with the peer's module, before either is timed.
  {
    cuda::CUmodule warm = nullptr;
    cuda::CUfunction fill = nullptr;
    if (d.cuModuleLoadData(&warm, cubin.data()) != cuda::CUDA_SUCCESS) return 3;
    if (d.cuModuleGetFunction(&fill, warm, "fill_hash") != cuda::CUDA_SUCCESS) return 4;
    void* p = dptr(peer_out);
    unsigned long long count = n;
    float lo = 0, hi = 1;
    void* fp[] = {&p, &count, &lo, &hi};
    if (d.cuLaunchKernel(fill, ceil_div(n, 256), 1, 1, 256, 1, 1, 0, ctx.stream(), fp, nullptr) !=
        cuda::CUDA_SUCCESS)
      return 5;
  }
  ctx.synchronize();
  double t0 = now_s();
  {
    auto k = metal_kernel("bench_gpu_warm", {"inp"}, {"out"}, body);
    Array out = k({x}, nvrtc_call(n))[0];
    out.eval();
    ctx.synchronize();
  }
  double t1 = now_s();
  cuda::CUmodule m = nullptr;
  cuda::CUfunction f = nullptr;
  if (d.cuModuleLoadData(&m, cubin.data()) != cuda::CUDA_SUCCESS) return 3;
  if (d.cuModuleGetFunction(&f, m, "exp_hand") != cuda::CUDA_SUCCESS) return 4;
  void* ip = dptr(x);
  void* op = dptr(peer_out);
  unsigned nn = n;
  void* params[] = {&ip, &op, &nn};
  if (d.cuLaunchKernel(f, ceil_div(n, 256), 1, 1, 256, 1, 1, 0, ctx.stream(), params, nullptr) !=
      cuda::CUDA_SUCCESS)
    return 5;
  ctx.synchronize();
  double t2 = now_s();
  std::printf("%.9f %.9f %llu\n", t1 - t0, t2 - t1,
              static_cast<unsigned long long>(cache::CompileCache::global().stats().disk_hits));
  return 0;
}

}  // namespace alloy::bench
