#include "backend/cpu/fault_guard.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/env.h"
#include "core/host_allocator.h"

namespace alloy::cpu {
namespace {

// The jump target of the kernel running on this thread (null outside kernels), and what the
// handler saw. Read and written by the signal handler, so they use the initial-exec TLS model: in
// the Python extension (a dlopen'd library) the default model reaches them through
// __tls_get_addr, which on a thread's first access allocates that thread's block with malloc (and
// takes the loader's lock): not async-signal-safe, for instance on a thread that never ran a
// kernel and faults inside malloc. Initial-exec takes 32 bytes of the static TLS surplus.
#if defined(__GNUC__)
#define ALLOY_SIGNAL_TLS __attribute__((tls_model("initial-exec")))
#else
#define ALLOY_SIGNAL_TLS
#endif
thread_local sigjmp_buf* t_jump ALLOY_SIGNAL_TLS = nullptr;
thread_local FaultInfo t_fault ALLOY_SIGNAL_TLS;

struct sigaction g_previous_segv, g_previous_bus;

int access_kind(int sig, void* ctx) {
#if defined(__x86_64__) && defined(REG_ERR)
  // The page fault's error code: bit 1 is set for a write.
  if (sig == SIGSEGV && ctx)
    return (static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[REG_ERR] & 2) ? 2 : 1;
#else
  (void)sig;
  (void)ctx;
#endif
  return 0;
}

void on_fault(int sig, siginfo_t* si, void* ctx) {
  if (sigjmp_buf* jump = t_jump) {
    t_jump = nullptr;
    t_fault.signal = sig;
    t_fault.address = reinterpret_cast<uintptr_t>(si ? si->si_addr : nullptr);
    t_fault.access = access_kind(sig, ctx);
    siglongjmp(*jump, 1);
  }
  // Not inside a kernel: what would have happened without us.
  const struct sigaction& prev = sig == SIGBUS ? g_previous_bus : g_previous_segv;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) {
      prev.sa_sigaction(sig, si, ctx);
      return;
    }
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default action: restore it; returning re-executes the faulting access, which now kills.
  signal(sig, SIG_DFL);
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    // SA_ONSTACK: on the thread's alternate stack, where it has one (a fault on a guard page
    // below an overflowed stack could not run a handler on that stack).
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
}

// This thread's alternate signal stack, when it is ours (removed when the thread ends).
struct AltStack {
  void* mem = nullptr;
  size_t size = 0;
  ~AltStack() {
    if (!mem) return;
    stack_t cur{};
    if (sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == mem) {
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      sigaltstack(&off, nullptr);
    }
    ::munmap(mem, size);
  }
};

void alt_stack_once() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  stack_t old{};
  if (sigaltstack(nullptr, &old) == 0 && !(old.ss_flags & SS_DISABLE)) return;  // has one
  thread_local AltStack alt;
  // The kernel's signal frame holds the XSAVE state (about 2.7 KiB with AVX-512, 11 KiB with
  // AMX; _SC_MINSIGSTKSZ says how much here); the handler itself needs a few hundred bytes.
  size_t kBytes = 64 << 10;
#ifdef _SC_MINSIGSTKSZ
  if (long min = ::sysconf(_SC_MINSIGSTKSZ); min > 0 && kBytes < 4 * static_cast<size_t>(min))
    kBytes = 4 * static_cast<size_t>(min);
#endif
  void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;  // faults on an overflowed stack then stay fatal
  stack_t ss{};
  ss.ss_sp = p;
  ss.ss_size = kBytes;
  if (sigaltstack(&ss, nullptr) != 0) {
    ::munmap(p, kBytes);
    return;
  }
  alt.mem = p;
  alt.size = kBytes;
}

std::string size_text(uint64_t bytes) {
  return bytes == 1 ? "1 byte" : fmt::format("{} bytes", bytes);
}

}  // namespace

bool fault_guard_enabled() {
  static const bool on = [] { return env::flag("ALLOY_CPU_FAULT_GUARD", true); }();
  return on;
}

void prepare_fault_guard() {
  install_once();
  alt_stack_once();
}

sigjmp_buf* fault_target() {
  return t_jump;
}

sigjmp_buf* set_fault_target(sigjmp_buf* target) {
  sigjmp_buf* prev = t_jump;
  t_jump = target;
  // The handler reads t_jump: the store must not move past the kernel code that may fault.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return prev;
}

FaultInfo last_fault() {
  return t_fault;
}

bool run_fault_guarded(void (*body)(void*), void* arg, FaultInfo* info) {
  prepare_fault_guard();
  sigjmp_buf jump;
  // Neither is changed between sigsetjmp and the jump, so both keep their values after it.
  sigjmp_buf* const outer = t_jump;
  FaultInfo* const out = info;
  // savemask=0 (no system call per task): the handler is installed with SA_NODEFER and an empty
  // sa_mask, so the kernel adds nothing to the thread's signal mask while it runs, and the mask
  // after the jump is the one the kernel ran with.
  if (sigsetjmp(jump, 0) != 0) {
    set_fault_target(outer);
    *out = t_fault;
    return false;
  }
  set_fault_target(&jump);
  body(arg);
  set_fault_target(outer);
  return true;
}

std::string fault_message(const std::string& kernel, const FaultInfo& info,
                          const alloy_cpu_launch& L, const BufferNames* names,
                          const std::string& where) {
  // The buffer the address lies in, or the nearest one: before its start or past its end. The
  // host allocator places each buffer just before a guard page (a run past the end faults at
  // once) with the unused part of its pages in front (a run before the start faults once past
  // them).
  // A fault in a guarded mapping (the buffer's own pages or guard pages) is that buffer's;
  // elsewhere, only a buffer within a page counts.
  uintptr_t lo = 0, hi = 0;
  const bool in_mapping = host_guarded_mapping(info.address, &lo, &hi);
  const uint64_t near = in_mapping ? UINT64_MAX - 1 : 4096;
  std::string where_in;
  uint64_t best = UINT64_MAX;
  for (uint32_t b = 0; b < L.num_buffers; ++b) {
    auto start = reinterpret_cast<uintptr_t>(L.buffers[b]);
    if (!start) continue;
    if (in_mapping && (start < lo || start >= hi)) continue;
    uint64_t bytes = L.buffer_bytes ? L.buffer_bytes[b] : 0;
    uintptr_t end = start + bytes;
    std::string name = fmt::format("[[buffer({})]]", b);
    if (names && *names) {
      std::string n = (*names)(b);
      if (!n.empty() && n != name) name = fmt::format("'{}' ([[buffer({})]])", n, b);
    }
    uint64_t dist;
    std::string text;
    if (info.address < start) {
      dist = start - info.address;
      text = fmt::format("{} before the start of {}, {}: byte offset -{}", size_text(dist), name,
                         size_text(bytes), dist);
    } else if (info.address >= end) {
      dist = info.address - end;
      text = fmt::format("{} past the end of {}, {}: byte offset {}", size_text(dist), name,
                         size_text(bytes), info.address - start);
    } else {
      dist = 0;
      text = fmt::format("inside {}, {}: byte offset {}", name, size_text(bytes),
                         info.address - start);
    }
    if (dist < best) {
      best = dist;
      where_in = text;
    }
  }
  const char* verb = info.access == 2 ? "wrote" : info.access == 1 ? "read" : "accessed memory";
  std::string at = fmt::format("{} at address {:#x}", info.signal == SIGBUS ? "SIGBUS" : "SIGSEGV",
                               info.address);
  std::string buffer = best <= near    ? "; " + where_in
                       : in_mapping    ? "; in the guard pages of an array that is not one of its "
                                         "buffers"
                       : L.num_buffers ? "; not next to any of its buffers"
                                       : "";
  return fmt::format(
      "kernel '{}' {} outside its buffers ({}{}){}; the launch was stopped. Run it in robust mode "
      "(robust=True, or "
      "ALLOY_ROBUST=1) to find the access",
      kernel, verb, at, buffer, where.empty() ? "" : ", in " + where);
}

}  // namespace alloy::cpu
