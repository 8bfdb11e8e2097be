// Cost of the host allocator's guard pages (issue 16, item 7; docs/reliability.md): every CPU
// array sits just before a guard page in its own mapping (sub-page arrays too). Run once per
// setting of ALLOY_HOST_GUARD_PAGES (all: the default; large: only blocks of a page or more;
// none: the C heap) and compare the alloy_ms columns; within one run, the peer is the C heap
// (aligned_alloc/free, what the allocator used for sub-page blocks before). Times per operation
// (one allocation + free, or one op), in ns.
//
//   BM_HostAllocReuse/bytes   host_alloc + host_free of one size (the free block is reused: the
//                             steady state of a kernel called in a loop).
//   BM_HostAllocFresh/bytes   1000 live blocks, freed, then the cache emptied: every block a new
//                             mapping (mmap + mprotect + first-touch page fault + munmap).
//   BM_HostAllocEagerOps      (a + b) * c on 256-float arrays, evaluated op by op, 100 times per
//                             iteration (an allocation per op; the cache warm). Peer: the same
//                             arithmetic in C++ with a fresh std::vector per op.
#include <cstdlib>

#include "bench_common.h"
#include "core/host_allocator.h"

namespace {

using namespace alloy;
using namespace alloy::bench;

// Per-operation times are nanoseconds: alloy_ns, <peer>_ns, cost_vs_<peer> = Alloy / peer.
void report_ns(benchmark::State& state, const PairTimes& t, const std::string& peer) {
  if (t.n == 0) return;
  state.counters["alloy_ns"] = 1e9 * t.alloy / t.n;
  state.counters[peer + "_ns"] = 1e9 * t.peer / t.n;
  state.counters["cost_vs_" + peer] = t.alloy / t.peer;
}

const char* guard_setting() {
  const char* v = std::getenv("ALLOY_HOST_GUARD_PAGES");
  return v && *v ? v : "all";
}

void BM_HostAllocReuse(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  constexpr int kReps = 1000;
  PairTimes t;
  for (auto _ : state) {
    double t0 = now_s();
    for (int r = 0; r < kReps; ++r) {
      void* p = host_alloc(n);
      static_cast<char*>(p)[0] = 1;
      benchmark::DoNotOptimize(p);
      host_free(p, n);
    }
    double t1 = now_s();
    for (int r = 0; r < kReps; ++r) {
      void* p = std::aligned_alloc(64, (n + 64 + 63) & ~size_t{63});
      static_cast<char*>(p)[0] = 1;
      benchmark::DoNotOptimize(p);
      std::free(p);
    }
    double t2 = now_s();
    t.alloy += (t1 - t0) / kReps;
    t.peer += (t2 - t1) / kReps;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  report_ns(state, t, "c_heap");
  state.SetLabel(std::string("ALLOY_HOST_GUARD_PAGES=") + guard_setting());
}
BENCHMARK(BM_HostAllocReuse)->Arg(64)->Arg(1024)->Arg(65536)->UseManualTime();

void BM_HostAllocFresh(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  constexpr int kLive = 1000;
  std::vector<void*> blocks(kLive);
  PairTimes t;
  for (auto _ : state) {
    double t0 = now_s();
    for (auto& p : blocks) {
      p = host_alloc(n);
      static_cast<char*>(p)[0] = 1;
    }
    for (auto& p : blocks) host_free(p, n);
    host_empty_cache();
    double t1 = now_s();
    for (auto& p : blocks) {
      p = std::aligned_alloc(64, (n + 64 + 63) & ~size_t{63});
      static_cast<char*>(p)[0] = 1;
    }
    for (auto& p : blocks) std::free(p);
    double t2 = now_s();
    t.alloy += (t1 - t0) / kLive;
    t.peer += (t2 - t1) / kLive;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  report_ns(state, t, "c_heap");
  state.SetLabel(std::string("ALLOY_HOST_GUARD_PAGES=") + guard_setting());
}
BENCHMARK(BM_HostAllocFresh)->Arg(64)->Arg(1024)->Arg(65536)->UseManualTime();

void BM_HostAllocEagerOps(benchmark::State& state) {
  constexpr int kN = 256, kReps = 100;
  Device cpu = Device::cpu();
  Array a = random_array({kN}, -1, 1, 1, cpu), b = random_array({kN}, -1, 1, 2, cpu),
        c = random_array({kN}, -1, 1, 3, cpu);
  a.eval();
  b.eval();
  c.eval();
  auto av = random_floats(kN, -1, 1, 1), bv = random_floats(kN, -1, 1, 2),
       cv = random_floats(kN, -1, 1, 3);
  ((a + b) * c).eval();  // compiles the ops
  PairTimes t;
  for (auto _ : state) {
    double t0 = now_s();
    for (int r = 0; r < kReps; ++r) {
      Array s = a + b;
      s.eval();
      Array p = s * c;
      p.eval();
      benchmark::DoNotOptimize(p);
    }
    double t1 = now_s();
    for (int r = 0; r < kReps; ++r) {
      std::vector<float> s(kN), p(kN);
      for (int i = 0; i < kN; ++i) s[i] = av[i] + bv[i];
      for (int i = 0; i < kN; ++i) p[i] = s[i] * cv[i];
      benchmark::DoNotOptimize(p.data());
    }
    double t2 = now_s();
    t.alloy += (t1 - t0) / kReps;
    t.peer += (t2 - t1) / kReps;
    ++t.n;
    state.SetIterationTime(t1 - t0);
  }
  report_ns(state, t, "cpp_vectors");
  state.SetLabel(std::string("ALLOY_HOST_GUARD_PAGES=") + guard_setting());
}
BENCHMARK(BM_HostAllocEagerOps)->UseManualTime();

}  // namespace
