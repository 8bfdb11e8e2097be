// Shared by the benchmark files: input data, the kernels that are not in examples/, and small
// helpers. Every benchmark reports a ratio against a peer measured in the same run (PairTimes):
// vs_<peer> = peer time / Alloy time for throughput (> 1: Alloy is faster), cost_vs_<peer> =
// Alloy time / peer time for compile, load and launch costs (< 1: Alloy is cheaper).
#pragma once
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "backend/cpu/backend.h"
#include "backend/cpu/executor.h"
#include "core/array_node.h"
#include "kernel/custom_kernel.h"
#include "kernel/program.h"
#include "msl/signature.h"

namespace alloy::bench {

/// Deterministic pseudo-random floats in [lo, hi) (a fast generator: GPU inputs are large).
inline std::vector<float> random_floats(size_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  }
  return v;
}

inline Array random_array(const Shape& shape, float lo, float hi, uint64_t seed, Device dev) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  auto v = random_floats(n, lo, hi, seed);
  return Array::from_bytes(v.data(), shape, float32, dev);
}

/// Seconds since an arbitrary origin (steady clock).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Accumulates the times of Alloy and of its peer, measured alternately in the same loop (so
/// that clock changes and cache state affect both alike), and writes the counters:
///   alloy_ms, <peer>_ms: mean milliseconds per iteration;
///   vs_<peer>: peer time / Alloy time (throughput: > 1 means Alloy is faster), or, when
///   `cost` is set, cost_vs_<peer>: Alloy time / peer time (overheads: < 1 means Alloy is cheaper).
struct PairTimes {
  double alloy = 0, peer = 0;
  int64_t n = 0;
  void report(benchmark::State& state, const std::string& peer_name, bool cost = false) const {
    if (n == 0) return;
    state.counters["alloy_ms"] = 1e3 * alloy / n;
    state.counters[peer_name + "_ms"] = 1e3 * peer / n;
    if (cost)
      state.counters["cost_vs_" + peer_name] = alloy / peer;
    else
      state.counters["vs_" + peer_name] = peer / alloy;
  }
};

// ---- Kernels used by several benchmarks (Metal bodies, run through metal_kernel) ----

/// Row sum, one 256-thread threadgroup per row of a row-contiguous (rows, cols) input: a strided
/// loop over the row, simd_sum, the simdgroups' partials through threadgroup memory and a
/// threadgroup_barrier, then simdgroup 0 sums the partials. The CPU runs it as work-item loops
/// (split at the barrier and the simd_sums; ALLOY_CPU_SYNC=fibers: as fibers).
inline constexpr const char* kRowSumSource = R"(
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_position_in_threadgroup.x;
    uint tpg = threads_per_threadgroup.x;
    uint cols = inp_shape[1];
    const device float* p = inp + row * cols;
    float acc = 0.0f;
    for (uint i = lid; i < cols; i += tpg) acc += p[i];
    acc = simd_sum(acc);
    threadgroup float partial[32];
    uint sg = simdgroup_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    if (lane == 0) partial[sg] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
      float v = lane < simdgroups_per_threadgroup ? partial[lane] : 0.0f;
      v = simd_sum(v);
      if (lane == 0) out[row] = v;
    }
)";

/// The same reduction with barriers only (no simd function): every thread's partial goes to
/// threadgroup memory, then a tree of barriers halves the active threads (8 barriers for 256).
inline constexpr const char* kRowSumBarrierSource = R"(
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_position_in_threadgroup.x;
    uint tpg = threads_per_threadgroup.x;
    uint cols = inp_shape[1];
    const device float* p = inp + row * cols;
    float acc = 0.0f;
    for (uint i = lid; i < cols; i += tpg) acc += p[i];
    threadgroup float partial[1024];
    partial[lid] = acc;
    for (uint s = tpg / 2; s > 0; s /= 2) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (lid < s) partial[lid] += partial[lid + s];
    }
    if (lid == 0) out[row] = partial[0];
)";

/// One thread per row, no synchronization: what the CPU runs as a plain loop (loop mode).
inline constexpr const char* kRowSumLoopSource = R"(
    uint row = thread_position_in_grid.x;
    uint cols = inp_shape[1];
    const device float* p = inp + row * cols;
    float acc = 0.0f;
    for (uint i = 0; i < cols; ++i) acc += p[i];
    out[row] = acc;
)";

/// Only barriers: N_BARRIERS threadgroup_barriers per thread and next to no work, to measure what
/// one fiber switch costs.
inline constexpr const char* kBarriersOnlySource = R"(
    uint lid = thread_position_in_threadgroup.x;
    threadgroup float scratch[2048];  // double-buffered: no write can race a neighbour's read
    float v = inp[thread_position_in_grid.x];
    for (int k = 0; k < N_BARRIERS; ++k) {
      scratch[(k & 1) * 1024 + lid] = v;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      v += scratch[(k & 1) * 1024 + (lid ^ 1)];
    }
    out[thread_position_in_grid.x] = v;
)";

// ---- Running a compiled metal_kernel without the array graph ----

/// The generated MSL of a metal_kernel call and its compiled program for `target`, built through
/// the same path as metal_kernel (signature writer, translator, JIT, caches).
struct DirectKernel {
  msl::GeneratedSource gen;
  std::shared_ptr<kernel::Program> program;

  DirectKernel(const MetalKernel& k, const std::vector<Array>& inputs, const KernelCall& call,
               msl::Target target) {
    std::vector<msl::SignatureInput> sig;
    for (auto& a : inputs) sig.push_back({"", a.dtype(), a.ndim(), a.size()});
    gen = msl::write_kernel_source(k.spec(), sig, call.output_dtypes, call.template_args);
    program = kernel::Program::build(kernel::call_source_map(k.spec(), gen.source), target,
                                     k.spec().math_mode, kernel::call_bind_options(gen, false));
  }
};

/// What the executor needs for one CPU dispatch of a DirectKernel on row-contiguous CPU inputs
/// and caller-owned outputs (kept alive here so that repeated runs do no allocation).
struct CpuDispatch {
  std::vector<void*> buffers;
  std::vector<uint64_t> sizes;
  std::vector<std::vector<int32_t>> shapes;
  std::vector<std::vector<int64_t>> strides;
  std::vector<int32_t> ndims;
  alloy_cpu_launch L{};

  CpuDispatch(const DirectKernel& dk, const std::vector<Array>& inputs,
              const std::vector<std::pair<void*, size_t>>& outputs, Dims grid, Dims tg) {
    for (auto& a : inputs) {
      shapes.emplace_back(a.shape().begin(), a.shape().end());
      strides.emplace_back(a.strides().begin(), a.strides().end());
      ndims.push_back(a.ndim());
    }
    const auto& b = dk.gen.bindings;
    buffers.resize(b.size());
    sizes.resize(b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      int j = b[i].index;
      switch (b[i].kind) {
        case msl::BindingKind::input:
          buffers[i] = node_of(inputs[j])->data();
          sizes[i] = inputs[j].nbytes();
          break;
        case msl::BindingKind::input_shape:
          buffers[i] = shapes[j].data();
          sizes[i] = shapes[j].size() * 4;
          break;
        case msl::BindingKind::input_strides:
          buffers[i] = strides[j].data();
          sizes[i] = strides[j].size() * 8;
          break;
        case msl::BindingKind::input_ndim:
          buffers[i] = &ndims[j];
          sizes[i] = 4;
          break;
        case msl::BindingKind::output:
          buffers[i] = outputs[j].first;
          sizes[i] = outputs[j].second;
          break;
      }
    }
    L.buffers = buffers.data();
    L.buffer_bytes = sizes.data();
    L.num_buffers = static_cast<uint32_t>(buffers.size());
    for (int d = 0; d < 3; ++d) {
      L.grid[d] = static_cast<uint32_t>(grid[d]);
      // As metal_kernel dispatches it: min(threadgroup, grid).
      L.threadgroup[d] = static_cast<uint32_t>(std::max(1, std::min(tg[d], grid[d])));
    }
    cpu::set_groups(L);
  }

  void run(const DirectKernel& dk, bool parallel = true) const {
    const auto* f = static_cast<const cpu::Function*>(dk.program->kernels().front().function);
    cpu::ExecOptions opts;
    opts.parallel = parallel;
    opts.kernel = dk.gen.kernel_name;
    cpu::run(L, f->group, f->thread, f->fibers, opts, f->groups);
  }
};

// ---- Child processes (what a fresh process pays) ----

/// Child modes, run by main() when ALLOY_BENCH_CHILD names one; each prints
/// "alloy_seconds peer_seconds disk_hits" and exits 0.
int cpu_warm_child();         // bench_cpu_jit.cpp
int gpu_warm_child();         // bench_gpu.cpp
int gpu_first_burst_child();  // bench_library.cpp

struct ChildResult {
  bool ok = false;
  std::string error;
  double alloy_s = 0, peer_s = 0, disk_hits = 0;
};

/// Runs this executable again in child mode `mode` with the extra environment `env` (the compile
/// cache folder is inherited), and parses what it prints.
inline ChildResult run_child(const std::string& mode,
                             const std::vector<std::pair<std::string, std::string>>& env) {
  ChildResult r;
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) {
    r.error = "cannot find this executable";
    return r;
  }
  ::setenv("ALLOY_BENCH_CHILD", mode.c_str(), 1);
  for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::FILE* p = ::popen(("'" + exe + "' 2>&1").c_str(), "r");
  ::unsetenv("ALLOY_BENCH_CHILD");
  for (auto& [k, v] : env) ::unsetenv(k.c_str());
  if (!p) {
    r.error = "popen failed";
    return r;
  }
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = ::pclose(p);
  if (status != 0 ||
      std::sscanf(out.c_str(), "%lf %lf %lf", &r.alloy_s, &r.peer_s, &r.disk_hits) != 3) {
    r.error = "exit status " + std::to_string(status) + ": " + out.substr(0, 400);
    return r;
  }
  r.ok = true;
  return r;
}

/// The benchmark loop of the fresh-process warm starts: each iteration runs a child in `mode`
/// (Alloy's warm start against a peer), then `work` is removed and the ratio reported.
inline void time_warm_children(benchmark::State& state, const std::string& mode,
                               const std::vector<std::pair<std::string, std::string>>& env,
                               const std::filesystem::path& work, const std::string& peer_name) {
  PairTimes t;
  double disk_hits = 0;
  for (auto _ : state) {
    ChildResult r = run_child(mode, env);
    if (!r.ok) {
      state.SkipWithError(("child process failed: " + r.error).c_str());
      break;
    }
    t.alloy += r.alloy_s;
    t.peer += r.peer_s;
    disk_hits += r.disk_hits;
    ++t.n;
    state.SetIterationTime(r.alloy_s);
  }
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  t.report(state, peer_name, /*cost=*/true);
  state.counters["target_ms"] = 1.0;
  if (t.n) state.counters["disk_hits_per_iter"] = disk_hits / t.n;
}

}  // namespace alloy::bench
