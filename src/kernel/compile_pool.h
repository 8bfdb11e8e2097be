// Background compilation: kernels that a caller will need soon (a library kernel recorded in the
// graph, Library::precompile(background)) compile on oneTBB's workers while the caller goes on.
//
// A job that a caller needs before a worker took it runs on the caller's thread instead (see
// CompileJob), so nothing ever waits for a busy or starved pool; a job runs exactly once. A
// thread waiting for a job that another thread runs takes queued jobs meanwhile, so every
// waiting thread adds a compile thread (oneTBB gives the pool cores - 1 workers).
#pragma once
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>

namespace alloy::kernel {

/// Runs one queued compile_async job on this thread, if any; false when none is queued.
bool compile_help();

/// Keeps the pool's exit barrier (which waits for running compiles) ahead of the static
/// destructors of libraries loaded since it was registered: a compiler loaded at run time
/// (NVRTC) registers its destructors when loaded, and exit runs later registrations first, so a
/// compile still running on a pool thread at exit would use a destroyed compiler. Called after
/// each compile and when one is queued; re-registers the barrier when more libraries are loaded.
void keep_exit_barrier_first();

/// One compilation, run once by whichever comes first: a pool worker or a caller that needs it.
template <class T>
class CompileJob {
 public:
  explicit CompileJob(std::function<T()> work)
      : work_(std::move(work)), future_(promise_.get_future().share()) {}

  /// Runs the job on this thread unless it ran or runs already; then waits for its result
  /// (rethrowing its exception), running queued compile jobs meanwhile (so that a thread waiting
  /// for one compile adds a compile thread: the pool alone may have a single worker).
  const T& get() {
    run();
    while (!ready())
      if (!compile_help()) break;
    return future_.get();
  }
  /// Runs it here if nobody did yet (no wait for a run in progress elsewhere).
  void run() {
    if (claimed_.exchange(true)) return;
    try {
      T result = work_();
      keep_exit_barrier_first();
      promise_.set_value(std::move(result));
    } catch (...) {
      keep_exit_barrier_first();
      promise_.set_exception(std::current_exception());
    }
    work_ = nullptr;  // what it captured is no longer needed
  }
  bool started() const { return claimed_.load(); }
  bool ready() const {
    return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

 private:
  std::function<T()> work_;
  std::atomic<bool> claimed_{false};
  std::promise<T> promise_;
  std::shared_future<T> future_;
};

/// Runs `fn` on the compile pool (a oneTBB arena as wide as the cores this process may use);
/// returns at once. It runs soon on a pool thread whatever was queued before it (the worker it
/// wakes runs queued jobs until none is left), with no other thread waiting. Jobs still queued at
/// exit are skipped; running ones are waited for.
void compile_async(std::function<void()> fn);

/// Queues `fn` for the pool, but wakes a worker for it only when another job is queued already:
/// alone, it is usually taken at once by the thread that needs it (CompileJob::get), which
/// costs no thread start or handoff (a process's first warm start stays at ~0.7 ms instead of
/// ~1.4); jobs that pile up before an evaluation still compile in parallel.
void compile_soon(std::function<void()> fn);

/// How many compilations the pool runs at once.
int compile_concurrency();

/// True once the process is exiting (queued background jobs should do nothing).
bool compile_pool_stopping();

/// Runs what is queued on this thread, then waits up to `timeout` for the jobs running on the
/// pool's threads (e.g. tiered compiles' background full compiles); true when none is left.
/// For tests and benchmarks that count compiles, and for tests that change the environment (the
/// pool's threads read it). Constructs nothing when no job was ever queued.
bool compile_pool_wait_idle(std::chrono::milliseconds timeout);

}  // namespace alloy::kernel
