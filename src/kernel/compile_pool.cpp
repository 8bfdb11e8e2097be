#include "kernel/compile_pool.h"

#include <link.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>

#include "cache/compile_cache.h"
#include "core/backend.h"

namespace alloy::kernel {
namespace {

struct Pool {
  // Made at the first job handed to a worker: a compile queued alone and run by the thread that
  // needs it (a warm first call) never starts oneTBB (~0.07 ms on a process's first call).
  tbb::task_arena& arena() {
    std::call_once(arena_made, [this] {
      arena_ = std::make_unique<tbb::task_arena>(tbb::this_task_arena::max_concurrency());
    });
    return *arena_;
  }
  std::mutex mu;
  std::condition_variable idle;
  std::deque<std::function<void()>> queued;  // jobs no thread has taken yet
  int running = 0;                           // jobs queued or running
  std::atomic<bool> stopping{false};

 private:
  std::once_flag arena_made;
  std::unique_ptr<tbb::task_arena> arena_;
};

void wait_at_exit();

std::atomic<bool> pool_made{false};

Pool& pool() {
  // Leaked: jobs may still run while static objects are destroyed. The objects a compile uses
  // are made first, so that exit destroys them only after wait_at_exit (atexit handlers and
  // static destructors run in the reverse order of their registration). The translator's and
  // the library layer's function-local tables are made later, at their first use: they are
  // leaked (`*new`) so that exit never destroys them under a running job (a fuzzer's exit once
  // freed unsupported_attributes() while a pool thread translated).
  static Pool* p = [] {
    cache::CompileCache::global();
    cpu_backend();  // constructs the CPU compiler
    auto* p = new Pool();
    std::atexit(wait_at_exit);
    pool_made = true;
    return p;
  }();
  return *p;
}

void wait_at_exit() {
  Pool& p = pool();
  p.stopping = true;
  std::unique_lock lock(p.mu);
  p.running -= static_cast<int>(p.queued.size());  // never started: dropped
  p.queued.clear();
  p.idle.wait(lock, [&] { return p.running == 0; });
}

// Takes the oldest queued job and runs it on this thread; false when none is queued. Jobs are
// taken from one queue by the pool's workers and by threads waiting for a compile (helpers).
// Entries and workers' tasks are not paired: the oldest entry may be a compile_soon job that the
// thread needing it ran already (CompileJob::run; its entry is then a no-op), or one queued with
// no task of its own (compile_soon, alone). So a worker's task runs entries until the queue is
// empty (drain): a job queued with compile_async then always runs soon on a pool thread, whatever
// is queued before it.
bool run_one(Pool& p) {
  std::function<void()> fn;
  {
    std::lock_guard lock(p.mu);
    if (p.queued.empty()) return false;
    fn = std::move(p.queued.front());
    p.queued.pop_front();
  }
  if (!p.stopping.load()) {
    try {
      fn();
    } catch (...) {  // a job keeps its errors for whoever needs its result
    }
  }
  std::lock_guard lock(p.mu);
  if (--p.running == 0) p.idle.notify_all();
  return true;
}

// A worker's task: the queue's entries until none is left (see run_one).
void drain(Pool& p) {
  while (run_one(p)) {
  }
}

}  // namespace

void compile_async(std::function<void()> fn) {
  Pool& p = pool();
  keep_exit_barrier_first();
  {
    std::lock_guard lock(p.mu);
    p.queued.push_back(std::move(fn));
    ++p.running;
  }
  p.arena().enqueue([&p] { drain(p); });  // one task per job (a helper may have taken it)
}

void compile_soon(std::function<void()> fn) {
  Pool& p = pool();
  keep_exit_barrier_first();
  size_t queued;
  {
    std::lock_guard lock(p.mu);
    p.queued.push_back(std::move(fn));
    ++p.running;
    queued = p.queued.size();
  }
  if (queued >= 2) p.arena().enqueue([&p] { drain(p); });
}

void keep_exit_barrier_first() {
  pool();  // the barrier is registered with the pool
  static std::atomic<int> libraries_then{-1};
  int n = 0;
  dl_iterate_phdr(
      [](dl_phdr_info*, size_t, void* count) {
        ++*static_cast<int*>(count);
        return 0;
      },
      &n);
  int seen = libraries_then.load();
  if (n != seen && libraries_then.compare_exchange_strong(seen, n)) std::atexit(wait_at_exit);
}

bool compile_help() {
  return run_one(pool());
}

int compile_concurrency() {
  return pool().arena().max_concurrency();
}

bool compile_pool_stopping() {
  return pool().stopping.load();
}

bool compile_pool_wait_idle(std::chrono::milliseconds timeout) {
  if (!pool_made.load()) return true;  // nothing was ever queued (and nothing is constructed)
  Pool& p = pool();
  while (run_one(p)) {
  }
  std::unique_lock lock(p.mu);
  return p.idle.wait_for(lock, timeout, [&] { return p.running == 0; });
}

}  // namespace alloy::kernel
