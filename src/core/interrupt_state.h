// Interrupts across threads (alloy/interrupt.h, docs/reliability.md). The interrupt check (Ctrl-C
// in Python) can only run on the thread that called into Alloy, but the work it must stop may run
// elsewhere: on a CPU stream's worker thread. So the calling thread polls the check while it
// waits (eval, synchronize), and when the check throws it *requests* an interrupt: every CPU
// launch running then stops at its next threadgroup boundary with Interrupted(cause), and the
// waiting thread throws the same once the work it waited for has stopped.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>

#include "alloy/interrupt.h"

namespace alloy::interrupt {

/// The check installed by set_interrupt_check (null when none).
std::shared_ptr<const InterruptCheck> current_check();

/// Asks every CPU launch running now to stop with Interrupted(cause).
void request(std::exception_ptr cause);
/// How many requests were made so far: a launch remembers it when it starts and stops when it
/// changes.
uint64_t epoch();
/// What the latest request carried.
std::exception_ptr cause();

/// Marks the calling thread as a stream's worker: the check never runs there (a launch on it
/// stops only on a request).
void mark_worker_thread();
/// The check a launch started on this thread runs between its groups (null on a worker thread,
/// or when none is installed).
std::shared_ptr<const InterruptCheck> check_for_this_thread();

/// How often a waiting thread or a launch's calling thread runs the check.
inline constexpr std::chrono::milliseconds kPollInterval{50};

/// Waits on `cv` under `lock` until `ready()`, running the interrupt check every kPollInterval
/// on the way (when one is installed). When the check throws, requests an interrupt, goes on
/// waiting until `ready()` (the interrupted work stops at its next group boundary) and returns
/// what the check threw; otherwise returns null.
template <class Ready>
std::exception_ptr wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                        Ready ready) {
  auto check = current_check();
  if (!check) {
    cv.wait(lock, ready);
    return nullptr;
  }
  std::exception_ptr thrown;
  while (!ready()) {
    if (cv.wait_for(lock, kPollInterval, ready)) break;
    if (thrown) continue;
    lock.unlock();
    try {
      (*check)();
    } catch (...) {
      thrown = std::current_exception();
      request(thrown);
    }
    lock.lock();
  }
  return thrown;
}

}  // namespace alloy::interrupt
