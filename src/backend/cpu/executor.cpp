#include "backend/cpu/executor.h"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "alloy/errors.h"
#include "backend/cpu/fault_guard.h"
#include "backend/cpu/fiber_scheduler.h"
#include "core/env.h"
#include "core/interrupt_state.h"
#include "msl/translate.h"

namespace alloy::cpu {

void apply_worker_slice();  // below, with the slice setting

void OobLog::add(const OobReport& r) {
  if (count_.fetch_add(1, std::memory_order_relaxed) >= max_kept_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_.size() < max_kept_) kept_.push_back(r);
}

std::vector<OobReport> OobLog::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_;
}

void OobLog::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  kept_.clear();
  count_ = 0;
}

void report_oob(alloy_cpu_group* g, uint32_t buffer, int64_t index, int is_write) {
  const auto* rt = static_cast<const GroupRuntime*>(g->runtime);
  if (!rt->options->oob) return;
  OobReport r;
  r.buffer = buffer;
  r.index = index;
  r.is_write = is_write;
  // g->current is the linear index of the reporting thread within its (possibly partial) group.
  uint32_t lid = g->current;
  uint32_t local[3] = {lid % g->group_size[0], (lid / g->group_size[0]) % g->group_size[1],
                       lid / (g->group_size[0] * g->group_size[1])};
  for (int d = 0; d < 3; ++d) {
    r.threadgroup_position_in_grid[d] = g->group_pos[d];
    r.thread_position_in_grid[d] = g->group_pos[d] * rt->launch->threadgroup[d] + local[d];
  }
  rt->options->oob->add(r);
}

namespace {

// Dynamic scheduling's chunks are 1/(kGuidedParts * threads) of the groups left.
constexpr size_t kGuidedParts = 4;

// Loop-mode kernels never synchronize (the translator picks fiber mode for any kernel that uses a
// barrier or simd function); reaching one means the two disagree.
[[noreturn]] void loop_mode_sync_misuse() {
  throw std::logic_error("internal: a kernel run in loop mode called a barrier/simd function");
}
void loop_barrier(alloy_cpu_group*) {
  loop_mode_sync_misuse();
}
void loop_gather(alloy_cpu_group*, const void*, void*, uint32_t) {
  loop_mode_sync_misuse();
}
const alloy_cpu_sync kLoopSync = {&loop_barrier, &loop_gather, &loop_barrier, &report_oob};

constexpr uint64_t kAlign = 64;
uint64_t align_up(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

// Per worker thread, reused across runs: the group record, threadgroup memory, fiber pools.
struct Worker {
  alloy_cpu_group g{};
  unsigned char* memory = nullptr;  // [[threadgroup(n)]] parameters, then the arena
  uint64_t memory_bytes = 0;
  unsigned char* split_arena = nullptr;
  static constexpr uint64_t kSplitBytes = 8 << 20;
  GroupRuntime loop_runtime;
  FiberScheduler fibers;
  // The chunk of groups an alloy_groups_<i> call is running (count 0: none), for fault reports.
  size_t chunk_first = 0, chunk_count = 0;
  // Groups per alloy_groups_<i> call, kept across the claims of one launch (`size_serial` names
  // the launch it belongs to; a new launch starts again at one group per call).
  uint64_t size_serial = 0;
  size_t size = 1;

  ~Worker() {
    std::free(memory);
    std::free(split_arena);
  }

  void prepare(const alloy_cpu_launch& L, const ExecOptions& opts, bool fiber_mode) {
    uint64_t params = 0;
    for (uint64_t b : L.tg_param_bytes) params += align_up(b);
    uint64_t arena = align_up(opts.tg_arena_bytes);
    if (params + arena > memory_bytes) {
      std::free(memory);
      memory = static_cast<unsigned char*>(std::aligned_alloc(kAlign, params + arena));
      memory_bytes = memory ? params + arena : 0;
      if (!memory) throw std::bad_alloc();
    }
    uint64_t off = 0;
    for (int n = 0; n < 8; ++n) {
      g.tg_params[n] = L.tg_param_bytes[n] ? memory + off : nullptr;
      off += align_up(L.tg_param_bytes[n]);
    }
    g.tg_arena = memory + off;
    g.tg_capacity = arena;
    if (!fiber_mode && !split_arena) {
      // Split-mode scratch (prelude/cpu/split.h): alive flags, simd exchanges, values live
      // across barriers. Pages are touched only as a kernel uses them.
      split_arena = static_cast<unsigned char*>(std::aligned_alloc(kAlign, kSplitBytes));
      if (!split_arena) throw std::bad_alloc();
    }
    g.split_arena = split_arena;
    g.split_capacity = split_arena ? kSplitBytes : 0;
    g.split = nullptr;
    g.stream_min_bytes = stream_min_bytes();
    loop_runtime.launch = &L;
    loop_runtime.options = &opts;
    g.sync = fiber_mode ? &FiberScheduler::kSync : &kLoopSync;
    g.runtime = fiber_mode ? static_cast<GroupRuntime*>(&fibers) : &loop_runtime;
  }
};

Worker& this_worker() {
  thread_local std::unique_ptr<Worker> worker;
  if (!worker) worker = std::make_unique<Worker>();
  return *worker;
}

struct Run {
  Run(const alloy_cpu_launch& launch, alloy_cpu_group_fn gfn, alloy_cpu_thread_fn tfn, bool fibers,
      const ExecOptions& options, alloy_cpu_groups_fn gsfn)
      : L(launch),
        group_fn(gfn),
        thread_fn(tfn),
        fiber_mode(fibers),
        opts(options),
        groups_fn(fibers ? nullptr : gsfn) {}

  const alloy_cpu_launch& L;
  alloy_cpu_group_fn group_fn;
  alloy_cpu_thread_fn thread_fn;
  bool fiber_mode;
  const ExecOptions& opts;
  // Loop mode: chunks of groups per call of the library's alloy_groups_<i> (prelude/entry.h
  // cpu_for_each_run), up to `chunk` groups (about kChunkThreads threads). The failure and
  // interrupt checks run between chunks, so a chunk must stay short whatever the kernel costs:
  // each task starts with one group per call and doubles the chunk while a call takes under
  // kChunkGrow, and halves it when one takes over kChunkShrink (a kernel that spins for
  // milliseconds per group keeps one group per call and is stopped as promptly as before).
  alloy_cpu_groups_fn groups_fn;
  static constexpr uint64_t kChunkThreads = 16384;
  static constexpr std::chrono::microseconds kChunkGrow{200}, kChunkShrink{2000};
  size_t chunk = 1;
  // Distinguishes launches for Worker::size (never 0).
  uint64_t serial = next_serial.fetch_add(1, std::memory_order_relaxed) + 1;
  static inline std::atomic<uint64_t> next_serial{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr error;
  // Interrupts: only the thread that started the launch runs the check (a Python check needs
  // the thread that released the GIL, and only the main thread sees Ctrl-C), at most every
  // kPollInterval. A launch on a stream's worker thread is stopped instead by a request of the
  // thread waiting for it (core/interrupt_state.h): every group boundary compares the epoch.
  std::shared_ptr<const InterruptCheck> interrupt = interrupt::check_for_this_thread();
  uint64_t epoch = interrupt::epoch();
  std::thread::id caller = std::this_thread::get_id();
  // Set at the first clock read, at the second poll (a launch of one group reads no clock: its
  // only poll comes before its group, when no time has passed; ~25 ns of a tiny call on EPYC-2).
  std::chrono::steady_clock::time_point last_clock{}, next_poll{};
  bool polled = false;
  // The clock is read every `clock_stride` groups, not every group (a launch of small groups
  // spent ~6% of its time in clock_gettime: 2^24 elements in 256-thread groups is 65536 reads
  // per call). The stride doubles (up to 256) while a stride's groups take under a quarter of
  // the poll interval and drops back to 1 when they take longer, so checks stay at most about
  // one interval apart.
  uint32_t clock_stride = 1, until_clock = 1;

  void poll_interrupt() {
    if (interrupt::epoch() != epoch) throw Interrupted(interrupt::cause());
    // Only the caller's thread changes the counters.
    if (!interrupt || std::this_thread::get_id() != caller || --until_clock != 0) return;
    if (!polled) {  // the launch's first poll: nothing ran yet
      polled = true;
      until_clock = 1;
      return;
    }
    auto now = std::chrono::steady_clock::now();
    if (next_poll == std::chrono::steady_clock::time_point{}) {  // the first read: the start
      last_clock = now;
      next_poll = now + interrupt::kPollInterval;
      until_clock = clock_stride;
      return;
    }
    clock_stride =
        now - last_clock < interrupt::kPollInterval / 4 ? std::min(clock_stride * 2, 256u) : 1u;
    until_clock = clock_stride;
    last_clock = now;
    if (now < next_poll) return;
    next_poll = now + interrupt::kPollInterval;
    try {
      (*interrupt)();
    } catch (...) {
      throw Interrupted(std::current_exception());  // stops the launch
    }
  }

  // Runs groups [begin, end) (linear index, x fastest) on the current thread. A memory fault
  // inside the kernel stops the launch with an alloy::Error (fault_guard.h); in fiber mode the
  // fiber scheduler catches faults of its fibers itself and fails the group with that error.
  void groups(size_t begin, size_t end) {
    if (std::this_thread::get_id() != caller) apply_worker_slice();
    if (!fault_guard_enabled()) return unguarded_groups(begin, end);
    struct Task {
      Run* run;
      size_t begin, end;
    } task{this, begin, end};
    FaultInfo info;
    bool ok = run_fault_guarded(
        [](void* p) {
          auto* t = static_cast<Task*>(p);
          t->run->unguarded_groups(t->begin, t->end);  // catches everything it throws
        },
        &task, &info);
    if (!ok) {
      std::string where = locate_fault(info);
      std::lock_guard<std::mutex> lock(mu);
      if (!error)
        error = std::make_exception_ptr(
            Error(opts.kernel, fault_message(opts.kernel, info, L, opts.buffer_names, where)));
      failed = true;
    }
  }

  // Sets group `i`'s position, size and fresh threadgroup-memory state in g (what an
  // alloy_group_<i> call expects); `next` is its position, advanced to the following group's.
  void set_group(alloy_cpu_group& g, uint32_t next[3]) const {
    const uint32_t pos[3] = {next[0], next[1], next[2]};
    if (++next[0] == L.groups[0]) {
      next[0] = 0;
      if (++next[1] == L.groups[1]) {
        next[1] = 0;
        ++next[2];
      }
    }
    uint32_t n = 1;
    for (int d = 0; d < 3; ++d) {
      // Non-uniform threadgroups: the group at the grid's edge holds only the threads that
      // exist (threads_per_threadgroup is the partial size).
      uint32_t start = pos[d] * L.threadgroup[d];
      uint32_t size = L.grid[d] - start < L.threadgroup[d] ? L.grid[d] - start : L.threadgroup[d];
      g.group_pos[d] = pos[d];
      g.group_size[d] = size;
      n *= size;
    }
    g.nthreads = n;
    g.current = 0;
    g.simd_live = 0;
    g.tg_used = 0;
    std::memset(g.tg_slots, 0, sizeof g.tg_slots);
  }
  void first_position(size_t i, uint32_t next[3]) const {
    const uint64_t gx = L.groups[0], gxy = gx * L.groups[1];
    next[0] = static_cast<uint32_t>(i % gx);
    next[1] = static_cast<uint32_t>(i % gxy / gx);
    next[2] = static_cast<uint32_t>(i / gxy);
  }

  // "threadgroup (x, y, z)" of a fault. A fault inside an alloy_groups_<i> call may come from
  // any group of its chunk (a merged run of groups sets only the run's first position): the
  // chunk's groups run again one by one through alloy_group_<i>, up to the first that faults.
  // The launch has failed already, and what it wrote is unspecified (as after a fault on a GPU);
  // a kernel that does not fault again gets the chunk's range.
  std::string locate_fault(FaultInfo& info) {
    Worker& w = this_worker();
    const uint32_t* p = w.g.group_pos;
    std::string where = fmt::format("threadgroup ({}, {}, {})", p[0], p[1], p[2]);
    if (w.chunk_count == 0) return where;
    const size_t first = w.chunk_first, count = w.chunk_count;
    w.chunk_count = 0;
    uint32_t next[3], last[3];
    first_position(first + count - 1, last);
    first_position(first, next);
    std::string range = fmt::format("threadgroups ({}, {}, {}) to ({}, {}, {})", next[0], next[1],
                                    next[2], last[0], last[1], last[2]);
    struct Task {
      Run* run;
      alloy_cpu_group* g;
    } task{this, &w.g};
    for (size_t i = 0; i < count; ++i) {
      set_group(w.g, next);
      FaultInfo again;
      bool ok = run_fault_guarded(
          [](void* v) {
            auto* t = static_cast<Task*>(v);
            try {
              t->run->group_fn(&t->run->L, t->g);
            } catch (...) {
            }
          },
          &task, &again);
      if (!ok) {
        info = again;
        return fmt::format("threadgroup ({}, {}, {})", w.g.group_pos[0], w.g.group_pos[1],
                           w.g.group_pos[2]);
      }
    }
    return range;
  }

  void unguarded_groups(size_t begin, size_t end) {
    if (failed.load(std::memory_order_relaxed)) return;
    try {
      Worker& w = this_worker();
      w.prepare(L, opts, fiber_mode);
      w.chunk_count = 0;  // (a chunk an exception left behind is no longer running)
      alloy_cpu_group& g = w.g;
      if (groups_fn) {
        // The entry sets each group's position, size and threadgroup-memory state itself.
        g.tg_used = 0;
        std::memset(g.tg_slots, 0, sizeof g.tg_slots);
        if (w.size_serial != serial) {
          w.size_serial = serial;
          w.size = 1;
        }
        size_t& size = w.size;
        // (One group: no chunk to size, no clock read.)
        const bool timed = end - begin > 1;
        auto t0 =
            timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        for (size_t i = begin; i < end;) {
          if (failed.load(std::memory_order_relaxed)) return;
          poll_interrupt();
          const size_t c = std::min(size, end - i);
          w.chunk_first = i;
          w.chunk_count = c;
          groups_fn(&L, &g, i, c);
          w.chunk_count = 0;
          i += c;
          if (!timed) continue;
          const auto t1 = std::chrono::steady_clock::now();
          if (t1 - t0 < kChunkGrow)
            size = std::min(size * 2, chunk);
          else if (t1 - t0 > kChunkShrink)
            size = std::max<size_t>(size / 2, 1);
          t0 = t1;
        }
        return;
      }
      // The group position advances x fastest; divided out once per range, not per group (three
      // 64-bit divisions per group were ~2% of a launch of 65536 small groups).
      uint32_t next[3];
      first_position(begin, next);
      for (size_t i = begin; i < end; ++i) {
        if (failed.load(std::memory_order_relaxed)) return;
        poll_interrupt();
        set_group(g, next);
        if (fiber_mode) {
          w.fibers.run_group(&L, &g, thread_fn, opts);
        } else {
          group_fn(&L, &g);
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  }
};

}  // namespace

namespace {
// Streaming stores (abi.h alloy_cpu_group::stream_min_bytes). Staging a block and copying it
// with non-temporal stores costs an extra pass through L1 (one core of EPYC-2: exp over 2^24
// floats 3.4 -> 4.8 ms with a plain copy of the staging block, 5.0 ms streamed), and saves the
// read-for-ownership of plain stores, a third of an elementwise kernel's memory traffic, which
// counts only when the cores together saturate memory. Default (auto): outputs of 16 MiB and more
// (below that an output may still be in the cache when the next kernel reads it) when the pool
// may use at least 8 cores, on x86-64 (msl::cpu_stream_loops). ALLOY_CPU_STREAM=off | on | auto |
// <bytes> (on: every streamable output; <bytes>: that threshold whatever the thread count).

std::atomic<uint64_t>& stream_threshold() {
  static std::atomic<uint64_t> v{[] {
    // The translator's rule (x86-64, at least 8 cores allowed) decides whether kernels have a
    // streamed loop at all: the same one decides whether auto streams.
    if (const std::optional<uint64_t> s = msl::cpu_stream_setting()) return *s;
    return msl::cpu_stream_loops() ? uint64_t{16} << 20 : msl::kCpuStreamNever;
  }()};
  return v;
}
}  // namespace

uint64_t stream_min_bytes() {
  return stream_threshold().load(std::memory_order_relaxed);
}
void set_stream_min_bytes(uint64_t bytes) {
  stream_threshold().store(bytes, std::memory_order_relaxed);
}

namespace {
// The pool threads' scheduler time slice (Linux >= 6.12, EEVDF: sched_attr::sched_runtime of a
// SCHED_OTHER thread). A thread woken with a shorter slice than the running one's preempts it
// at once; with the kernel's default slice (3 ms on 16 cores) a pool thread woken for a launch
// while every core runs another process's thread (OpenBLAS's threads spin for a while after each
// numpy `@`) waits for that thread's slice to end. Default 300 µs: on the 16-core GPU host
// (Linux 6.18) the tiled matmul alternating with numpy's `@` took 3.4-3.6 ms with it, 5.9-7.2 ms
// with the kernel's slice, 3.0-3.4 ms with 100 µs (which slowed numpy's next `@` from 0.4 to
// 0.6-0.8 ms) and 1.5-4.5 ms with 1 ms; exp, copy and row sum on 16 cores were unchanged
// (docs/performance.md). 0: the kernel's default (nothing is set). ALLOY_CPU_SLICE_US overrides.
constexpr uint64_t kDefaultSliceUs = 300;
std::atomic<uint64_t>& slice_ns() {
  static std::atomic<uint64_t> v{[] {
    return env::count("ALLOY_CPU_SLICE_US", "a time in microseconds", uint64_t{1} << 40)
               .value_or(kDefaultSliceUs) *
           1000;
  }()};
  return v;
}

#if defined(__linux__)
// The kernel's struct sched_attr (sched_setattr(2); <linux/sched/types.h> clashes with glibc's
// <sched.h>): SCHED_ATTR_SIZE_VER1, 56 bytes.
struct sched_attr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime, sched_deadline, sched_period;
  uint32_t sched_util_min, sched_util_max;
};
static_assert(sizeof(sched_attr) == 56);
#endif

// Sets the calling thread's slice to `ns` (0: back to the kernel's default). False where the kernel
// has no custom slices or the thread is not SCHED_OTHER.
bool set_thread_slice(uint64_t ns) {
#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
  sched_attr a{};
  if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0 || a.sched_policy != SCHED_OTHER)
    return false;
  a.size = sizeof a;
  a.sched_flags = 0;
  a.sched_runtime = ns;
  return syscall(SYS_sched_setattr, 0, &a, 0) == 0;
#else
  (void)ns;
  return false;
#endif
}

}  // namespace

// Applies slice_ns() to the calling pool thread, once per value (Run::groups calls it on every
// thread but the launch's caller, whose scheduling is the application's).
void apply_worker_slice() {
  thread_local uint64_t applied = 0;
  const uint64_t want = slice_ns().load(std::memory_order_relaxed);
  if (want == applied) return;
  applied = want;
  set_thread_slice(want);
}

uint64_t worker_slice_us() {
  return slice_ns().load(std::memory_order_relaxed) / 1000;
}
void set_worker_slice_us(uint64_t us) {
  slice_ns().store(us * 1000, std::memory_order_relaxed);
}
bool set_thread_slice_us(uint64_t us) {
  return set_thread_slice(us * 1000);
}
uint64_t thread_slice_us() {
#if defined(__linux__) && defined(SYS_sched_getattr)
  sched_attr a{};
  if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0) return 0;
  return a.sched_runtime / 1000;
#else
  return 0;
#endif
}

namespace {
// ALLOY_CPU_TRACE=1: after each parallel launch of the dynamic schedule, one line on stderr with
// when each task of the launch started claiming groups (µs after run() began), how many groups it
// ran, whether the launch's caller ran it, and when the last one finished: the serial part of a
// launch (waking the pool's threads) and the balance, for measurements (docs/cpu-backend.md).
std::atomic<bool>& trace_flag() {
  static std::atomic<bool> on{[] { return env::flag("ALLOY_CPU_TRACE", false); }()};
  return on;
}
bool trace_launches() {
  return trace_flag().load(std::memory_order_relaxed);
}

struct LaunchTrace {
  static constexpr int kMax = 256;
  struct Task {
    double start_us = 0, end_us = 0;
    size_t groups = 0;
    bool caller = false;
  };
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::atomic<int> count{0};
  Task tasks[kMax];

  double since(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - t0).count();
  }
  void print(const std::string& kernel, size_t ngroups, size_t threads) {
    const double end = since(std::chrono::steady_clock::now());
    const int n = std::min(count.load(), kMax);
    std::sort(tasks, tasks + n,
              [](const Task& a, const Task& b) { return a.start_us < b.start_us; });
    std::string line = fmt::format("alloy cpu launch {}: {} groups, {} threads, {} tasks:", kernel,
                                   ngroups, threads, n);
    for (int i = 0; i < n; ++i)
      line += fmt::format(" {}+{:.0f}..{:.0f}({})", tasks[i].caller ? "c" : "", tasks[i].start_us,
                          tasks[i].end_us, tasks[i].groups);
    fmt::print(stderr, "{}; returns +{:.0f} us\n", line, end);
  }
};
}  // namespace

void set_trace_launches(bool on) {
  trace_flag().store(on, std::memory_order_relaxed);
}

Schedule schedule(const ExecOptions& options) {
  if (options.schedule != Schedule::automatic) return options.schedule;
  // ALLOY_CPU_SCHEDULE=partitioned: oneTBB's parallel_for over the groups (the scheduling before
  // session 9), for comparisons; otherwise dynamic.
  static const Schedule env = [] {
    return env::choice("ALLOY_CPU_SCHEDULE", {"dynamic", "partitioned"}).value_or(0) == 1
               ? Schedule::partitioned
               : Schedule::dynamic;
  }();
  return env;
}

void set_groups(alloy_cpu_launch& L) {
  for (int d = 0; d < 3; ++d) {
    L.groups[d] = L.threadgroup[d] == 0
                      ? 0
                      : static_cast<uint32_t>((uint64_t{L.grid[d]} + L.threadgroup[d] - 1) /
                                              L.threadgroup[d]);
  }
}

void run(const alloy_cpu_launch& L, alloy_cpu_group_fn group_fn, alloy_cpu_thread_fn thread_fn,
         bool fiber_mode, const ExecOptions& options, alloy_cpu_groups_fn groups_fn) {
  if (L.grid[0] == 0 || L.grid[1] == 0 || L.grid[2] == 0) return;  // empty dispatch: no threads
  uint64_t tg_threads = uint64_t{L.threadgroup[0]} * L.threadgroup[1] * L.threadgroup[2];
  if (tg_threads == 0 || tg_threads > 1024) {
    throw std::invalid_argument("threadgroup (" + std::to_string(L.threadgroup[0]) + ", " +
                                std::to_string(L.threadgroup[1]) + ", " +
                                std::to_string(L.threadgroup[2]) +
                                ") must hold between 1 and 1024 threads");
  }
  for (int d = 0; d < 3; ++d) {
    if (L.groups[d] != (uint64_t{L.grid[d]} + L.threadgroup[d] - 1) / L.threadgroup[d]) {
      throw std::invalid_argument("internal: launch groups != ceil(grid / threadgroup)");
    }
  }
  if (fiber_mode ? thread_fn == nullptr : group_fn == nullptr) {
    throw std::invalid_argument("internal: no kernel entry for the execution mode");
  }

  Run r(L, group_fn, thread_fn, fiber_mode, options, groups_fn);
  r.chunk = std::max<size_t>(1, Run::kChunkThreads / tg_threads);
  const size_t ngroups = size_t{L.groups[0]} * L.groups[1] * L.groups[2];
  // Batch small groups so that each task does a few thousand threads' work; a fiber switch costs
  // about as much as a few loop iterations of a simple kernel.
  const uint64_t cost = tg_threads * (fiber_mode ? 16 : 1);
  const size_t grain = cost >= 8192 ? 1 : static_cast<size_t>(8192 / cost);
  if (!options.parallel || ngroups <= grain) {
    r.groups(0, ngroups);
  } else if (schedule(options) == Schedule::partitioned) {
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, ngroups, grain),
        [&](const tbb::blocked_range<size_t>& range) { r.groups(range.begin(), range.end()); });
  } else {
    // Dynamic (guided) self-scheduling: every pool thread that joins claims chunks of groups from
    // one shared counter until none are left, each chunk 1/(kGuidedParts * threads) of what
    // remains but at least `min_chunk` groups (a few thousand threads' work). Nothing is assigned
    // to a thread in advance: a thread that wakes late or is preempted by another process (e.g.
    // OpenBLAS's threads spinning after a numpy `@`) holds up at most the one chunk it is running,
    // and the chunks shrink towards the end so that the threads finish together.
    const size_t threads = static_cast<size_t>(
        std::max(1, options.max_threads > 0
                        ? std::min(options.max_threads, tbb::this_task_arena::max_concurrency())
                        : tbb::this_task_arena::max_concurrency()));
    const size_t min_chunk = std::max<size_t>(1, grain / 4);
    const size_t parts = threads * kGuidedParts;
    std::atomic<size_t> next{0};
    auto claim = [&](size_t& begin) -> size_t {
      size_t cur = next.load(std::memory_order_relaxed);
      while (cur < ngroups) {
        const size_t left = ngroups - cur;
        const size_t c = std::min(left, std::max(min_chunk, left / parts));
        if (next.compare_exchange_weak(cur, cur + c, std::memory_order_relaxed)) {
          begin = cur;
          return c;
        }
      }
      return 0;
    };
    std::unique_ptr<LaunchTrace> trace;
    if (trace_launches()) trace = std::make_unique<LaunchTrace>();
    auto drain = [&] {
      size_t begin = 0;
      if (!trace) {
        while (size_t c = claim(begin)) r.groups(begin, begin + c);
        return;
      }
      LaunchTrace::Task t;
      t.start_us = trace->since(std::chrono::steady_clock::now());
      t.caller = std::this_thread::get_id() == r.caller;
      while (size_t c = claim(begin)) {
        r.groups(begin, begin + c);
        t.groups += c;
      }
      t.end_us = trace->since(std::chrono::steady_clock::now());
      if (int i = trace->count.fetch_add(1); i < LaunchTrace::kMax) trace->tasks[i] = t;
    };
    const size_t tasks = std::min(threads, (ngroups + min_chunk - 1) / min_chunk);
    if (tasks <= 1) {
      drain();
    } else {
      tbb::parallel_for(
          tbb::blocked_range<size_t>(0, tasks, 1),
          [&](const tbb::blocked_range<size_t>&) { drain(); }, tbb::simple_partitioner());
    }
    if (trace) trace->print(options.kernel, ngroups, threads);
  }
  if (r.error) std::rethrow_exception(r.error);
}

}  // namespace alloy::cpu
