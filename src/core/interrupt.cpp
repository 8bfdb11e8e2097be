#include "alloy/interrupt.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

#include "core/interrupt_state.h"

namespace alloy {
namespace {
std::mutex g_mu;
std::shared_ptr<const InterruptCheck> g_check;
// Raised (under g_mu) each time the check changes: a thread's copy of the check (t_check) is
// current while its version matches, so a CPU launch reads the check without the lock.
std::atomic<uint64_t> g_check_version{1};
std::exception_ptr g_cause;  // of the latest request (g_mu)
std::atomic<uint64_t> g_epoch{0};
thread_local bool t_worker = false;
struct ThreadCheck {
  uint64_t version = 0;  // 0: never read
  std::shared_ptr<const InterruptCheck> check;
};
thread_local ThreadCheck t_check;
}  // namespace

void set_interrupt_check(InterruptCheck check) {
  auto p = check ? std::make_shared<const InterruptCheck>(std::move(check)) : nullptr;
  std::lock_guard lock(g_mu);
  g_check.swap(p);  // the replaced check is destroyed after the lock (see request)
  g_check_version.fetch_add(1, std::memory_order_release);
}

namespace interrupt {

std::shared_ptr<const InterruptCheck> current_check() {
  uint64_t v = g_check_version.load(std::memory_order_acquire);
  if (t_check.version != v) {
    std::shared_ptr<const InterruptCheck> old;  // destroyed after the lock
    std::lock_guard lock(g_mu);
    old = std::exchange(t_check.check, g_check);
    t_check.version = g_check_version.load(std::memory_order_relaxed);
  }
  return t_check.check;
}

void mark_worker_thread() {
  t_worker = true;
}

std::shared_ptr<const InterruptCheck> check_for_this_thread() {
  return t_worker ? nullptr : current_check();
}

void request(std::exception_ptr cause) {
  {
    // The previous cause is destroyed after the lock: it may be a Python exception, whose
    // release takes the GIL, and a thread holding the GIL may wait for g_mu (current_check on a
    // thread's first launch, e.g. a Python evaluation run inline: alloy::eval_inline).
    std::lock_guard lock(g_mu);
    g_cause.swap(cause);
  }
  g_epoch.fetch_add(1, std::memory_order_release);
}

uint64_t epoch() {
  return g_epoch.load(std::memory_order_acquire);
}

std::exception_ptr cause() {
  std::lock_guard lock(g_mu);
  return g_cause;
}

}  // namespace interrupt
}  // namespace alloy
