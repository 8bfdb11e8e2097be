// Runs one dispatch of a JIT-compiled kernel on the CPU, with Metal's execution model:
// threadgroups run in parallel across cores (oneTBB); inside a group either
//  - loop mode: group_fn runs every thread of the group as a plain loop (kernels without barriers
//    or simd functions), or
//  - fiber mode: one fiber per thread (Boost.Context), switching at threadgroup_barrier,
//    simdgroup_barrier and simd exchanges, through the alloy_cpu_sync table of cpu/abi.h.
//
// Non-uniform threadgroups: groups at the grid's edges are partial (group_size = the threads that
// exist there), as Metal's dispatchThreads does. Simdgroups are 32 consecutive linear indices of
// the group, x fastest; the last one may be partial. A thread that returns is no longer live:
// barriers and simd exchanges wait only for live threads/lanes (Metal: returned lanes are
// inactive).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "alloy/interrupt.h"
#include "prelude/cpu/abi.h"

namespace alloy::cpu {

/// One out-of-range access reported by a robust-mode kernel (the access itself was suppressed).
struct OobReport {
  uint32_t buffer = 0;
  int64_t index = 0;
  int is_write = 0;  // as the kernel reported it: 0 read, 1 write, 2 unknown (a reference)
  uint32_t thread_position_in_grid[3] = {0, 0, 0};
  uint32_t threadgroup_position_in_grid[3] = {0, 0, 0};
};

/// Collects OobReports from every worker (thread-safe). Keeps the first `max_kept` and counts all.
class OobLog {
 public:
  explicit OobLog(size_t max_kept = 64) : max_kept_(max_kept) {}
  void add(const OobReport& r);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  std::vector<OobReport> reports() const;
  void clear();

 private:
  size_t max_kept_;
  std::atomic<uint64_t> count_{0};
  mutable std::mutex mu_;
  std::vector<OobReport> kept_;
};

/// How a launch's groups are distributed over the pool's threads (oneTBB).
enum class Schedule {
  automatic,    ///< ALLOY_CPU_SCHEDULE (dynamic or partitioned), dynamic when unset
  dynamic,      ///< threads claim shrinking chunks of groups from a shared counter (guided)
  partitioned,  ///< tbb::parallel_for over the groups (recursive splitting, work stealing)
};

struct ExecOptions {
  /// Threadgroup memory available to `threadgroup` objects of one group (Metal guarantees 32 KiB).
  uint64_t tg_arena_bytes = 256 << 10;
  /// Stack of each fiber (fiber mode). Pooled per worker thread, reused across groups.
  uint64_t fiber_stack_bytes = 128 << 10;
  /// Receives robust-mode out-of-range reports; null: reports are dropped.
  OobLog* oob = nullptr;
  /// false: run every group on the calling thread (debugging, deterministic order).
  bool parallel = true;
  /// Group distribution over the pool (parallel launches only).
  Schedule schedule = Schedule::automatic;
  /// Dynamic schedule: at most this many threads take part (0: the arena's concurrency).
  int max_threads = 0;
  /// Kernel name, for error messages.
  std::string kernel;
  /// Names [[buffer(n)]] in fault messages (the kernel's parameter names); null: by index. Used
  /// only during run().
  const std::function<std::string(uint32_t)>* buffer_names = nullptr;
};

/// The schedule `options` selects (automatic: ALLOY_CPU_SCHEDULE, default dynamic).
Schedule schedule(const ExecOptions& options);

/// Kernels' streamable outputs (msl/translate.h KernelEntry::stream_params) are written with
/// non-temporal stores when their buffer holds at least this many bytes (~0: never). Default
/// from ALLOY_CPU_STREAM (off | on | auto | bytes; auto: 16 MiB on x86-64 with a pool of 8 or
/// more threads, else never);
/// set_stream_min_bytes changes it for later launches (tests force both paths with it).
uint64_t stream_min_bytes();
void set_stream_min_bytes(uint64_t bytes);

/// The scheduler time slice requested for the pool's worker threads, in µs (Linux >= 6.12:
/// sched_attr::sched_runtime; a woken worker with a shorter slice than the running thread's
/// preempts it). 0: the kernel's default. Default 300 µs, or ALLOY_CPU_SLICE_US; a change applies
/// to each worker when it next runs groups of a launch. For tests: set_thread_slice_us sets the
/// calling thread's slice (false where the kernel has no custom slices), thread_slice_us reads it
/// (0: the default or unknown).
uint64_t worker_slice_us();
void set_worker_slice_us(uint64_t us);
bool set_thread_slice_us(uint64_t us);
uint64_t thread_slice_us();

/// ALLOY_CPU_TRACE=1 (or set_trace_launches(true)): every parallel launch of the dynamic schedule
/// writes one line to stderr, "alloy cpu launch <kernel>: <G> groups, <T> threads, <N> tasks:"
/// then per task (by start time) "[c]+<start>..<end>(<groups>)" (µs after run() began; c: the
/// launch's caller ran it) and "; returns +<µs> us": how long the pool's threads take to join a
/// launch and how the groups were shared (docs/cpu-backend.md).
void set_trace_launches(bool on);

/// Fills L.groups = ceil(grid / threadgroup) per dimension (0 when grid is 0).
void set_groups(alloy_cpu_launch& L);

/// Runs every threadgroup of the dispatch described by L (L.groups must be set, see set_groups;
/// L.threadgroup is the group as dispatched: MLX's min(threadgroup, grid) is the caller's choice).
/// fiber_mode selects thread_fn with fibers, else group_fn. Returns when all groups are done.
/// Throws std::invalid_argument for a bad launch (threadgroup of 0 or > 1024 threads),
/// alloy::NotSupported when barriers/simd functions are reached by only some threads (the group
/// would deadlock), alloy::Error when a kernel thread faulted (fault_guard.h: the message names
/// the buffer and the thread or group), and rethrows the first exception a kernel thread raised
/// (or the interrupt check threw).
/// `groups_fn` (loop mode, optional: alloy_groups_<i> of abi.h) runs chunks of groups in one
/// call; without it each group is one group_fn call.
void run(const alloy_cpu_launch& L, alloy_cpu_group_fn group_fn, alloy_cpu_thread_fn thread_fn,
         bool fiber_mode, const ExecOptions& options = {}, alloy_cpu_groups_fn groups_fn = nullptr);

}  // namespace alloy::cpu
