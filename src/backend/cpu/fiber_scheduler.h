// Fiber mode of the CPU executor (internal to backend/cpu): runs the threads of one threadgroup as
// cooperative fibers on the calling worker thread and implements the alloy_cpu_sync services
// (threadgroup_barrier, simdgroup_barrier, simd exchanges) that the kernel calls through g->sync.
#pragma once
#include <boost/context/detail/fcontext.hpp>
#include <csetjmp>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "backend/cpu/executor.h"

namespace alloy::cpu {

// What g->runtime points to in both modes: the sync services find the launch and options here.
struct GroupRuntime {
  const alloy_cpu_launch* launch = nullptr;
  const ExecOptions* options = nullptr;
};

// alloy_cpu_sync::report_oob (executor.cpp); works in both modes.
void report_oob(alloy_cpu_group* g, uint32_t buffer, int64_t index, int is_write);

// One per worker thread; reused for every group that worker runs (stacks and state are pooled:
// nothing is allocated per group once the pool is large enough).
class FiberScheduler : public GroupRuntime {
 public:
  FiberScheduler() = default;
  ~FiberScheduler();
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;

  // Runs fn(L, g, lid) for lid in [0, g->nthreads) until every thread has returned. g's group
  // fields (position, size, nthreads, arena) are set by the caller; sync/runtime/current by this.
  // Rethrows an exception raised by a thread; throws alloy::NotSupported on a divergence deadlock.
  void run_group(const alloy_cpu_launch* L, alloy_cpu_group* g, alloy_cpu_thread_fn fn,
                 const ExecOptions& options);

  static const alloy_cpu_sync kSync;

 private:
  using fcontext_t = boost::context::detail::fcontext_t;
  using transfer_t = boost::context::detail::transfer_t;

  enum State : uint8_t { kRunnable, kAtBarrier, kAtSimd, kDone };
  enum Kind : uint32_t { kNone, kGather, kSimdBarrier };

  // One simdgroup's exchange. A round completes when every live lane has published; slots are
  // double-buffered by round parity so a lane already in round k+1 does not overwrite round k's
  // values before a slower lane has copied them out (round k+1 cannot complete before then).
  struct SimdGroup {
    uint32_t live = 0;     // lanes present in this (maybe partial) simdgroup, not returned
    uint32_t arrived = 0;  // lanes waiting in the open round
    uint32_t seq = 0;      // rounds completed
    uint32_t kind = kNone;
    uint32_t bytes = 0;
    uint32_t done_live[2] = {0, 0};  // live mask when the round of that parity completed
    alignas(64) unsigned char slots[2][32 * ALLOY_CPU_SIMD_SLOT_BYTES];
  };

  static void entry(transfer_t t);
  static FiberScheduler& of(alloy_cpu_group* g);
  static void sync_barrier(alloy_cpu_group* g);
  static void sync_gather(alloy_cpu_group* g, const void* in, void* all, uint32_t bytes);
  static void sync_simd_barrier(alloy_cpu_group* g);

  void barrier();
  void simd_exchange(const void* in, void* all, uint32_t bytes, Kind kind);
  void complete_round(uint32_t sg);
  void release_barrier();
  int32_t next_runnable(uint32_t self) const;
  void jump(int32_t self, int32_t target);
  void block(uint32_t self);
  [[noreturn]] void finish(uint32_t self);
  [[noreturn]] void fail(uint32_t self, std::exception_ptr&& error);
  void reserve(uint32_t nthreads, uint64_t stack_bytes);
  void release_stacks();
  std::string where() const;
  std::string thread_where(uint32_t self) const;
  std::exception_ptr fault_error(uint32_t self) const;
  void run_thread(uint32_t self);
  std::exception_ptr not_supported(const std::string& what) const;

  // Pools (grown on demand, never shrunk).
  uint32_t capacity_ = 0;
  unsigned char* stacks_ = nullptr;  // capacity_ stacks, each with a guard page below it
  size_t stack_stride_ = 0, stack_bytes_ = 0, map_bytes_ = 0;
  int64_t guards_ = 0;  // guard pages set (0 when the process-wide budget was exhausted)
  std::unique_ptr<fcontext_t[]> ctx_;
  std::unique_ptr<State[]> state_;
  std::unique_ptr<SimdGroup[]> sg_;
  // Faults (fault_guard.h): each fiber's jump target, on its own stack, made this thread's fault
  // target while the fiber runs; outer_jump_ is the worker's own while the main context runs.
  std::unique_ptr<sigjmp_buf*[]> jumps_;
  sigjmp_buf* outer_jump_ = nullptr;
  bool guard_ = false;

  // The group being run.
  alloy_cpu_group* g_ = nullptr;
  alloy_cpu_thread_fn fn_ = nullptr;
  uint32_t n_ = 0, live_ = 0, at_barrier_ = 0;
  fcontext_t main_ = nullptr;  // the worker's own context, resumed when no fiber can run
  int32_t from_ = -1;          // who jumped last (-1: main), so the target can save its context
  bool failed_ = false;
  std::exception_ptr error_;
  // ThreadSanitizer's view of the fibers (tsan builds only): one TSan fiber per slot, and the
  // worker's own, so that TSan follows each context switch (docs/reliability.md).
  std::unique_ptr<void*[]> tsan_fibers_;
  void* tsan_main_ = nullptr;
  // AddressSanitizer's (asan builds only): the worker's own stack, learnt at the first switch.
  const void* asan_main_bottom_ = nullptr;
  size_t asan_main_size_ = 0;
  void asan_arrived();
};

}  // namespace alloy::cpu
