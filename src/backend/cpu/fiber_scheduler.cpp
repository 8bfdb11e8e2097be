#include "backend/cpu/fiber_scheduler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "alloy/errors.h"
#include "backend/cpu/fault_guard.h"

// Scheduling: the fibers of a group switch directly to one another (one context switch per wait,
// no trip through a central loop). A thread that must wait marks itself and jumps to the next
// runnable thread in index order; the thread whose arrival completes a barrier or simd round marks
// the waiters runnable and carries on. When nothing is runnable the worker's own context is
// resumed: either every thread has returned, a thread failed, or the live threads wait on things
// that cannot complete (divergent barriers), which is reported instead of hanging.

// ThreadSanitizer cannot follow Boost.Context switches by itself (its shadow stack grows until
// memory runs out); its fiber API tells it about each switch, and a switch synchronizes.
#if defined(__SANITIZE_THREAD__)
#define ALLOY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ALLOY_TSAN 1
#endif
#endif
#ifdef ALLOY_TSAN
#include <sanitizer/tsan_interface.h>
#endif
// AddressSanitizer likewise: told about each switch, and fiber stacks are unpoisoned before reuse
// (a fiber that finished never unwound its frames, whose redzones would poison the next group).
#if defined(__SANITIZE_ADDRESS__)
#define ALLOY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ALLOY_ASAN 1
#endif
#endif
#ifdef ALLOY_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace alloy::cpu {
namespace bc = boost::context::detail;

const alloy_cpu_sync FiberScheduler::kSync = {&FiberScheduler::sync_barrier,
                                              &FiberScheduler::sync_gather,
                                              &FiberScheduler::sync_simd_barrier, &report_oob};

// Each guard page splits the stack mapping: 2 mappings per fiber. Linux caps a process's mappings
// (vm.max_map_count, 65530 by default) and malloc needs some too, so guards are added only while
// the process-wide count stays under this budget (e.g. 16 workers x 512 fibers).
static std::atomic<int64_t> g_guard_budget{16384};

FiberScheduler::~FiberScheduler() {
  release_stacks();
}

void FiberScheduler::release_stacks() {
#ifdef ALLOY_TSAN
  for (uint32_t i = 0; tsan_fibers_ && i < capacity_; ++i) __tsan_destroy_fiber(tsan_fibers_[i]);
  tsan_fibers_.reset();
#endif
  if (stacks_) ::munmap(stacks_, map_bytes_);
  stacks_ = nullptr;
  if (guards_) g_guard_budget += guards_;
  guards_ = 0;
}

FiberScheduler& FiberScheduler::of(alloy_cpu_group* g) {
  return *static_cast<FiberScheduler*>(static_cast<GroupRuntime*>(g->runtime));
}

void FiberScheduler::sync_barrier(alloy_cpu_group* g) {
  of(g).barrier();
}

void FiberScheduler::sync_gather(alloy_cpu_group* g, const void* in, void* all, uint32_t bytes) {
  of(g).simd_exchange(in, all, bytes, kGather);
}

void FiberScheduler::sync_simd_barrier(alloy_cpu_group* g) {
  of(g).simd_exchange(nullptr, nullptr, 0, kSimdBarrier);
}

void FiberScheduler::reserve(uint32_t nthreads, uint64_t stack_bytes) {
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t bytes = (static_cast<size_t>(stack_bytes) + page - 1) / page * page;
  if (bytes < 4 * page) bytes = 4 * page;
  if (nthreads <= capacity_ && bytes == stack_bytes_) return;

  uint32_t cap = 32;
  while (cap < nthreads) cap *= 2;
  release_stacks();
  capacity_ = 0;
  size_t stride = bytes + page;  // guard page below each stack: an overflow faults, not corrupts
  size_t total = stride * cap;
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  stacks_ = static_cast<unsigned char*>(p);
  map_bytes_ = total;
  if (g_guard_budget.fetch_sub(cap) >= cap) {
    guards_ = cap;
    for (uint32_t i = 0; i < cap; ++i) ::mprotect(stacks_ + i * stride, page, PROT_NONE);
  } else {
    g_guard_budget += cap;
  }
  stack_stride_ = stride;
  stack_bytes_ = bytes;

  ctx_ = std::make_unique<fcontext_t[]>(cap);
  state_ = std::make_unique<State[]>(cap);
  sg_ = std::make_unique<SimdGroup[]>((cap + 31) / 32);
  jumps_ = std::make_unique<sigjmp_buf*[]>(cap);
#ifdef ALLOY_TSAN
  tsan_fibers_ = std::make_unique<void*[]>(cap);
  for (uint32_t i = 0; i < cap; ++i) tsan_fibers_[i] = __tsan_create_fiber(0);
#endif
  capacity_ = cap;
}

std::exception_ptr FiberScheduler::not_supported(const std::string& what) const {
  return std::make_exception_ptr(NotSupported(options->kernel, "not supported: " + what));
}

std::string FiberScheduler::where() const {
  std::string s = "threadgroup (" + std::to_string(g_->group_pos[0]) + ", " +
                  std::to_string(g_->group_pos[1]) + ", " + std::to_string(g_->group_pos[2]) + ")";
  if (options && !options->kernel.empty()) s += " of kernel '" + options->kernel + "'";
  return s;
}

void FiberScheduler::run_group(const alloy_cpu_launch* L, alloy_cpu_group* g,
                               alloy_cpu_thread_fn fn, const ExecOptions& opts) {
  reserve(g->nthreads, opts.fiber_stack_bytes);
  launch = L;
  options = &opts;
  g_ = g;
  fn_ = fn;
  n_ = live_ = g->nthreads;
  at_barrier_ = 0;
  failed_ = false;
  if (n_ == 0) return;

  for (uint32_t t = 0; t < n_; ++t) {
    state_[t] = kRunnable;
    // Stacks grow down: the top of stack t is the start of stack t+1's guard page.
    ctx_[t] = bc::make_fcontext(stacks_ + (t + 1) * stack_stride_, stack_bytes_, &entry);
#ifdef ALLOY_ASAN
    ASAN_UNPOISON_MEMORY_REGION(stacks_ + (t + 1) * stack_stride_ - stack_bytes_, stack_bytes_);
#endif
  }
  for (uint32_t s = 0; s * 32 < n_; ++s) {
    SimdGroup& q = sg_[s];
    uint32_t lanes = n_ - s * 32 < 32 ? n_ - s * 32 : 32;
    q.live = lanes == 32 ? ~0u : (1u << lanes) - 1;  // partial last simdgroup
    q.arrived = 0;
    q.seq = 0;
    q.kind = kNone;
  }
  g->sync = &kSync;
  g->runtime = static_cast<GroupRuntime*>(this);
  guard_ = fault_guard_enabled();
  if (guard_) {
    prepare_fault_guard();
    outer_jump_ = fault_target();
  }
#ifdef ALLOY_TSAN
  tsan_main_ = __tsan_get_current_fiber();
#endif

  jump(-1, 0);  // returns when no fiber can run

  if (failed_) {
    std::exception_ptr e = std::move(error_);
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  if (live_ != 0) {
    uint32_t at_barrier = 0, at_simd = 0;
    for (uint32_t t = 0; t < n_; ++t) {
      at_barrier += state_[t] == kAtBarrier;
      at_simd += state_[t] == kAtSimd;
    }
    throw NotSupported(
        options->kernel,
        "not supported: barrier/simd function reached by only some threads of a threadgroup "
        "(divergent control flow would deadlock): in " +
            where() + ", " + std::to_string(at_barrier) + " thread(s) wait at threadgroup_barrier" +
            " and " + std::to_string(at_simd) +
            " at a simd function or simdgroup_barrier that the rest of their simdgroup never "
            "reaches");
  }
}

// First code of every fiber. Never returns: a finished fiber jumps to another one (or to main).
void FiberScheduler::entry(transfer_t t) {
  FiberScheduler& s = *static_cast<FiberScheduler*>(t.data);
  s.asan_arrived();
  if (s.from_ < 0) {
    s.main_ = t.fctx;
  } else {
    s.ctx_[s.from_] = t.fctx;
  }
  const uint32_t self = s.g_->current;
  // Until set_fault_target below, this thread's target is still the one of the context that
  // switched here; only the scheduler code above runs in that window, none of the kernel's.
  if (s.guard_) {
    // A fault inside the kernel lands here, on this fiber's stack (fault_guard.h), and fails the
    // group as an exception would. (Nothing set after sigsetjmp is read after the jump.)
    sigjmp_buf jump;
    if (sigsetjmp(jump, 0) != 0) {
      std::exception_ptr e = s.fault_error(self);
      s.fail(self, std::move(e));
    }
    s.jumps_[self] = &jump;
    set_fault_target(&jump);
    s.run_thread(self);
  } else {
    s.run_thread(self);
  }
  s.finish(self);
}

void FiberScheduler::run_thread(uint32_t self) {
  std::exception_ptr error;
  try {
    fn_(launch, g_, self);
  } catch (...) {
    // Caught on the fiber's own stack: exceptions must not unwind across a context switch.
    error = std::current_exception();
  }
  if (error) fail(self, std::move(error));
}

// "thread (x, y, z)" (thread_position_in_grid) of the group's thread `self`.
std::string FiberScheduler::thread_where(uint32_t self) const {
  uint32_t local[3] = {self % g_->group_size[0], (self / g_->group_size[0]) % g_->group_size[1],
                       self / (g_->group_size[0] * g_->group_size[1])};
  uint32_t pos[3];
  for (int d = 0; d < 3; ++d) pos[d] = g_->group_pos[d] * launch->threadgroup[d] + local[d];
  return "thread (" + std::to_string(pos[0]) + ", " + std::to_string(pos[1]) + ", " +
         std::to_string(pos[2]) + ")";
}

std::exception_ptr FiberScheduler::fault_error(uint32_t self) const {
  FaultInfo info = last_fault();
  const std::string& kernel = options->kernel;
  // A fault on the guard page below a fiber's stack: the thread's stack overflowed.
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto base = reinterpret_cast<uintptr_t>(stacks_);
  if (guards_ && info.address >= base && info.address < base + map_bytes_ &&
      (info.address - base) % stack_stride_ < page) {
    return std::make_exception_ptr(
        Error(kernel, "kernel '" + kernel + "' overflowed the stack of " + thread_where(self) +
                          " (" + std::to_string(stack_bytes_ >> 10) +
                          " KiB per thread of a kernel with barriers or simd functions): large "
                          "thread-local arrays or deep recursion; the launch was stopped"));
  }
  return std::make_exception_ptr(Error(
      kernel, fault_message(kernel, info, *launch, options->buffer_names, thread_where(self))));
}

void FiberScheduler::jump(int32_t self, int32_t target) {
  from_ = self;
  fcontext_t to = main_;
  if (target >= 0) {
    g_->current = static_cast<uint32_t>(target);
    to = ctx_[target];
  }
#ifdef ALLOY_TSAN
  __tsan_switch_to_fiber(target >= 0 ? tsan_fibers_[target] : tsan_main_, 0);
#endif
#ifdef ALLOY_ASAN
  if (target >= 0)
    __sanitizer_start_switch_fiber(nullptr, stacks_ + (target + 1) * stack_stride_ - stack_bytes_,
                                   stack_bytes_);
  else
    __sanitizer_start_switch_fiber(nullptr, asan_main_bottom_, asan_main_size_);
#endif
  transfer_t t = bc::jump_fcontext(to, this);
  asan_arrived();
  if (guard_) set_fault_target(self >= 0 ? jumps_[self] : outer_jump_);
  // Resumed: save the context of whoever jumped here, so it can be resumed later.
  if (from_ < 0) {
    main_ = t.fctx;
  } else {
    ctx_[from_] = t.fctx;
  }
}

// After a switch: tells ASan it is done; the first switch away from the worker's own stack
// reports that stack's extent, needed to switch back to it.
void FiberScheduler::asan_arrived() {
#ifdef ALLOY_ASAN
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (from_ < 0) {
    asan_main_bottom_ = bottom;
    asan_main_size_ = size;
  }
#endif
}

int32_t FiberScheduler::next_runnable(uint32_t self) const {
  for (uint32_t t = self + 1; t < n_; ++t) {
    if (state_[t] == kRunnable) return static_cast<int32_t>(t);
  }
  for (uint32_t t = 0; t < self; ++t) {
    if (state_[t] == kRunnable) return static_cast<int32_t>(t);
  }
  return -1;
}

void FiberScheduler::block(uint32_t self) {
  jump(static_cast<int32_t>(self), next_runnable(self));
}

// memcpy with the common sizes (one lane's or 32 lanes' float/int/half2/float4) as constants, so
// that they compile to a few vector moves instead of a library call.
template <uint32_t N>
static inline bool copy_fixed(void* dst, const void* src, uint32_t bytes) {
  if (bytes != N) return false;
  std::memcpy(dst, src, N);
  return true;
}

static inline void copy_value(void* dst, const void* src, uint32_t bytes) {
  if (copy_fixed<4>(dst, src, bytes) || copy_fixed<8>(dst, src, bytes) ||
      copy_fixed<16>(dst, src, bytes) || copy_fixed<32 * 4>(dst, src, bytes) ||
      copy_fixed<32 * 8>(dst, src, bytes) || copy_fixed<32 * 16>(dst, src, bytes)) {
    return;
  }
  if (bytes) std::memcpy(dst, src, bytes);
}

void FiberScheduler::release_barrier() {
  for (uint32_t t = 0; t < n_; ++t) {
    if (state_[t] == kAtBarrier) state_[t] = kRunnable;
  }
  at_barrier_ = 0;
}

void FiberScheduler::complete_round(uint32_t sg) {
  SimdGroup& q = sg_[sg];
  uint32_t waiting = q.arrived;
  q.done_live[q.seq & 1] = q.live;
  q.seq++;
  q.arrived = 0;
  q.kind = kNone;
  while (waiting) {
    uint32_t lane = static_cast<uint32_t>(__builtin_ctz(waiting));
    waiting &= waiting - 1;
    state_[sg * 32 + lane] = kRunnable;
  }
}

// threadgroup_barrier: every live thread of the group must arrive. (Metal's mem_flags only order
// memory; on one core switching fibers orders everything, so every flag behaves the same.)
void FiberScheduler::barrier() {
  uint32_t self = g_->current;
  if (++at_barrier_ == live_) {
    release_barrier();  // last to arrive: everyone may go on, this thread first
    return;
  }
  state_[self] = kAtBarrier;
  block(self);
}

void FiberScheduler::simd_exchange(const void* in, void* all, uint32_t bytes, Kind kind) {
  uint32_t self = g_->current;
  uint32_t sg = self >> 5, lane = self & 31;
  SimdGroup& q = sg_[sg];
  if (bytes > ALLOY_CPU_SIMD_SLOT_BYTES) {
    // (The error is built in its own statement: fail() never returns, so temporaries of its
    // argument expression would never be destroyed.)
    std::exception_ptr e =
        not_supported("simd exchange of a " + std::to_string(bytes) + "-byte value (at most " +
                      std::to_string(ALLOY_CPU_SIMD_SLOT_BYTES) + ")");
    fail(self, std::move(e));
  }
  if (q.arrived == 0) {
    q.kind = kind;
    q.bytes = bytes;
  } else if (q.kind != kind || q.bytes != bytes) {
    // Lanes of one simdgroup at different simd operations: divergent control flow, which Metal
    // runs with the other lanes masked off; a lane-count-blind exchange would mix them up.
    std::exception_ptr e = not_supported(
        "lanes of a simdgroup reached different simd functions (divergent control flow) in " +
        where());
    fail(self, std::move(e));
  }
  uint32_t parity = q.seq & 1;
  copy_value(q.slots[parity] + lane * bytes, in, bytes);
  q.arrived |= 1u << lane;
  if (q.arrived == q.live) {
    complete_round(sg);
  } else {
    state_[self] = kAtSimd;
    block(self);
  }
  copy_value(all, q.slots[parity], 32 * bytes);
  g_->simd_live = q.done_live[parity];
}

void FiberScheduler::finish(uint32_t self) {
  state_[self] = kDone;
  --live_;
  // A returned thread no longer counts: its simdgroup's open round and the group's barrier may
  // now be complete.
  SimdGroup& q = sg_[self >> 5];
  q.live &= ~(1u << (self & 31));
  if (q.arrived != 0 && q.arrived == q.live) complete_round(self >> 5);
  if (at_barrier_ != 0 && at_barrier_ == live_) release_barrier();
  jump(static_cast<int32_t>(self), next_runnable(self));
  __builtin_unreachable();  // nobody resumes a finished fiber
}

void FiberScheduler::fail(uint32_t self, std::exception_ptr&& error) {
  error_ = std::move(error);
  failed_ = true;
  jump(static_cast<int32_t>(self), -1);
  __builtin_unreachable();  // the group is abandoned; its stacks are reused by the next group
}

}  // namespace alloy::cpu
