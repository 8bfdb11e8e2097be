// The compile pool (src/kernel/compile_pool.h): a job queued with compile_async runs on a pool
// thread without any other thread waiting for a compile, whatever was queued before it (a
// compile_soon job that its caller ran already, or one queued alone with no worker woken).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <thread>

#include "kernel/compile_pool.h"

namespace alloy::kernel {
namespace {

// Runs what earlier tests left queued, so that each test starts from an empty queue.
void drain_compile_queue() {
  while (compile_help()) {
  }
}

// Waits (never helping the pool) up to two minutes, a loaded machine's worst case, for `f`.
bool ran_on_its_own(std::future<std::thread::id>& f, std::thread::id* on) {
  if (f.wait_for(std::chrono::minutes(2)) != std::future_status::ready) return false;
  *on = f.get();
  return true;
}

int random_value() {
  static std::mt19937 rng(std::random_device{}());
  return static_cast<int>(rng() % 1000000);
}

// A kernel's first call: its compile queued with compile_soon, alone (no worker woken), and run by
// the caller that needs it (CompileJob::get), which leaves a no-op entry in the queue; then the
// background job (CUDA's full compile, CompiledModule::refine) queued with compile_async. That job
// used to wait behind the no-op entry until another compile came (the worker's one task took the
// no-op), taking the in-process NVRTC slot from the next kernel's first call.
TEST(CompilePool, AsyncJobRunsAloneAfterACallerRanItsSoonJob) {
  drain_compile_queue();
  int want = random_value();
  auto job = std::make_shared<CompileJob<int>>([want] { return want; });
  compile_soon([weak = std::weak_ptr<CompileJob<int>>(job)] {
    if (auto j = weak.lock()) j->run();
  });
  EXPECT_EQ(job->get(), want);  // run here, by the thread that needs it
  // Shared with the job: it may still run after a failed test returned.
  auto ran = std::make_shared<std::promise<std::thread::id>>();
  auto ran_future = ran->get_future();
  compile_async([ran] { ran->set_value(std::this_thread::get_id()); });
  std::thread::id on;
  ASSERT_TRUE(ran_on_its_own(ran_future, &on)) << "the compile_async job never ran";
  EXPECT_NE(on, std::this_thread::get_id());
}

// A compile_soon job nobody took yet (no worker was woken for it) and a compile_async job after
// it: both run on pool threads with nobody waiting.
TEST(CompilePool, AsyncJobRunsEarlierUnwokenSoonJobsToo) {
  drain_compile_queue();
  auto soon_ran = std::make_shared<std::promise<std::thread::id>>();
  auto async_ran = std::make_shared<std::promise<std::thread::id>>();
  auto soon_future = soon_ran->get_future();
  auto async_future = async_ran->get_future();
  compile_soon([soon_ran] { soon_ran->set_value(std::this_thread::get_id()); });
  compile_async([async_ran] { async_ran->set_value(std::this_thread::get_id()); });
  std::thread::id on;
  ASSERT_TRUE(ran_on_its_own(async_future, &on)) << "the compile_async job never ran";
  EXPECT_NE(on, std::this_thread::get_id());
  ASSERT_TRUE(ran_on_its_own(soon_future, &on)) << "the compile_soon job never ran";
  EXPECT_NE(on, std::this_thread::get_id());
}

// Many jobs queued at once all run (several pool threads drain one queue; each runs exactly once).
TEST(CompilePool, ManyAsyncJobsEachRunOnce) {
  drain_compile_queue();
  constexpr int kJobs = 64;
  struct State {
    std::atomic<int> runs[kJobs] = {};
    std::atomic<int> done{0};
    std::promise<void> all;
  };
  auto s = std::make_shared<State>();
  auto all_future = s->all.get_future();
  for (int i = 0; i < kJobs; ++i) {
    compile_async([s, i] {
      s->runs[i].fetch_add(1);
      if (s->done.fetch_add(1) + 1 == kJobs) s->all.set_value();
    });
  }
  ASSERT_EQ(all_future.wait_for(std::chrono::minutes(2)), std::future_status::ready);
  for (int i = 0; i < kJobs; ++i) EXPECT_EQ(s->runs[i].load(), 1) << "job " << i;
  EXPECT_FALSE(compile_help());  // nothing left queued
}

}  // namespace
}  // namespace alloy::kernel
