#include "backend/cpu/fault_guard.h"

#include <fmt/format.h>
#include <signal.h>

#include <cstdlib>
#include <mutex>

namespace alloy::cpu {
namespace {

// The jump target of the kernel running on this thread (null outside kernels). Plain pointers
// in thread_local storage: read by the signal handler (async-signal-safe: no allocation).
thread_local sigjmp_buf* t_jump = nullptr;
thread_local FaultInfo t_fault;

struct sigaction g_previous_segv, g_previous_bus;

void on_fault(int sig, siginfo_t* si, void* ctx) {
  if (sigjmp_buf* jump = t_jump) {
    t_jump = nullptr;
    t_fault.signal = sig;
    t_fault.address = reinterpret_cast<uintptr_t>(si ? si->si_addr : nullptr);
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
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
}

}  // namespace

bool fault_guard_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("ALLOY_CPU_FAULT_GUARD");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

bool run_fault_guarded(void (*body)(void*), void* arg, FaultInfo* info) {
  install_once();
  sigjmp_buf jump;
  // savemask=0 (no system call per task): the handler is installed with SA_NODEFER, so the
  // signal mask is the same after the jump.
  if (sigsetjmp(jump, 0) != 0) {
    *info = t_fault;
    return false;
  }
  sigjmp_buf* outer = t_jump;
  t_jump = &jump;
  body(arg);
  t_jump = outer;
  return true;
}

std::string fault_message(const std::string& kernel, const FaultInfo& info,
                          const alloy_cpu_launch& L) {
  // The buffer nearest to the address: inside, before its start or past its end.
  std::string where;
  uint64_t best = UINT64_MAX;
  for (uint32_t b = 0; b < L.num_buffers; ++b) {
    auto start = reinterpret_cast<uintptr_t>(L.buffers[b]);
    if (!start) continue;
    uint64_t bytes = L.buffer_bytes ? L.buffer_bytes[b] : 0;
    uintptr_t end = start + bytes;
    uint64_t dist;
    std::string text;
    if (info.address < start) {
      dist = start - info.address;
      text = fmt::format("{} bytes before [[buffer({})]] ({} bytes)", dist, b, bytes);
    } else if (info.address >= end) {
      dist = info.address - end;
      text = fmt::format("{} bytes past the end of [[buffer({})]] ({} bytes)", dist, b, bytes);
    } else {
      dist = 0;
      text = fmt::format("inside [[buffer({})]]", b);
    }
    if (dist < best) {
      best = dist;
      where = text;
    }
  }
  return fmt::format(
      "kernel '{}' accessed memory outside its buffers ({} at address {:#x}{}); the launch was "
      "stopped. Run it in robust mode (robust=True, or ALLOY_ROBUST=1) to find the access",
      kernel, info.signal == SIGBUS ? "SIGBUS" : "SIGSEGV", info.address,
      where.empty() ? "" : ", " + where);
}

}  // namespace alloy::cpu
