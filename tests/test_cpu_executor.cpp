// The CPU threadgroup executor: partial groups, loop mode, fiber mode (barriers, simd exchanges,
// returned lanes, divergence), threadgroup memory, errors. Kernels are plain C++ functions with the
// entry signatures of prelude/cpu/abi.h, so these tests need neither the translator nor the JIT.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "alloy/errors.h"
#include "backend/cpu/executor.h"
#include "kernel/compile_pool.h"

namespace alloy::cpu {
namespace {

struct Dispatch {
  std::vector<void*> buffers;
  std::vector<uint64_t> sizes;
  alloy_cpu_launch L{};

  Dispatch(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> tg, std::vector<void*> bufs = {})
      : buffers(std::move(bufs)), sizes(buffers.size(), 0) {
    L.buffers = buffers.data();
    L.buffer_bytes = sizes.data();
    L.num_buffers = static_cast<uint32_t>(buffers.size());
    for (int d = 0; d < 3; ++d) {
      L.grid[d] = grid[d];
      L.threadgroup[d] = tg[d];
    }
    set_groups(L);
  }
};

// Local position of thread `lid` in its (possibly partial) group, x fastest.
void local_pos(const alloy_cpu_group* g, uint32_t lid, uint32_t out[3]) {
  out[0] = lid % g->group_size[0];
  out[1] = lid / g->group_size[0] % g->group_size[1];
  out[2] = lid / (g->group_size[0] * g->group_size[1]);
}

uint32_t global_x(const alloy_cpu_launch* L, const alloy_cpu_group* g, uint32_t lid) {
  return g->group_pos[0] * L->threadgroup[0] + lid % g->group_size[0];
}

// What the prelude's tg_slot does: the first thread to reach a `threadgroup` object allocates it.
void* tg_slot(alloy_cpu_group* g, int slot, uint64_t bytes, uint64_t align = 16) {
  if (!g->tg_slots[slot]) {
    uint64_t off = (g->tg_used + align - 1) / align * align;
    if (off + bytes > g->tg_capacity) throw std::runtime_error("threadgroup memory exhausted");
    g->tg_slots[slot] = g->tg_arena + off;
    g->tg_used = off + bytes;
  }
  return g->tg_slots[slot];
}

void barrier(alloy_cpu_group* g) {
  g->sync->threadgroup_barrier(g);
}

template <class T>
uint32_t gather(alloy_cpu_group* g, T v, T all[32]) {
  g->sync->simd_gather(g, &v, all, sizeof(T));
  return g->simd_live;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.5f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_ints(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(1, 1000);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

// ---- group shapes ----

// Every thread of the grid, once, with Metal's non-uniform edge groups.
struct Visit {
  std::atomic<int> count{0};
};

void check_coverage(bool fiber_mode) {
  const std::array<uint32_t, 3> grid = {10, 7, 3}, tg = {4, 4, 2};
  std::vector<Visit> visits(10 * 7 * 3);
  std::atomic<int> bad_sizes{0};
  Dispatch d(grid, tg, {visits.data(), &bad_sizes});
  EXPECT_EQ(d.L.groups[0], 3u);
  EXPECT_EQ(d.L.groups[1], 2u);
  EXPECT_EQ(d.L.groups[2], 2u);

  auto visit = [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
    auto* v = static_cast<Visit*>(L->buffers[0]);
    uint32_t l[3];
    local_pos(g, lid, l);
    uint32_t p[3];
    for (int d = 0; d < 3; ++d) {
      uint32_t start = g->group_pos[d] * L->threadgroup[d];
      uint32_t expect = std::min(L->threadgroup[d], L->grid[d] - start);
      if (g->group_size[d] != expect) static_cast<std::atomic<int>*>(L->buffers[1])[0]++;
      p[d] = start + l[d];
    }
    if (g->nthreads != g->group_size[0] * g->group_size[1] * g->group_size[2]) {
      static_cast<std::atomic<int>*>(L->buffers[1])[0]++;
    }
    v[(p[2] * L->grid[1] + p[1]) * L->grid[0] + p[0]].count++;
  };
  static decltype(visit)* fn = nullptr;
  fn = &visit;
  alloy_cpu_group_fn group_fn = [](const alloy_cpu_launch* L, alloy_cpu_group* g) {
    for (uint32_t lid = 0; lid < g->nthreads; ++lid) (*fn)(L, g, lid);
  };
  alloy_cpu_thread_fn thread_fn = [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
    (*fn)(L, g, lid);
  };
  run(d.L, group_fn, thread_fn, fiber_mode);
  EXPECT_EQ(bad_sizes.load(), 0);
  for (size_t i = 0; i < visits.size(); ++i) ASSERT_EQ(visits[i].count.load(), 1) << "thread " << i;
}

TEST(CpuExecutor, LoopModeCoversGridWithPartialEdgeGroups) {
  check_coverage(false);
}
TEST(CpuExecutor, FiberModeCoversGridWithPartialEdgeGroups) {
  check_coverage(true);
}

TEST(CpuExecutor, EdgeGroupSizes) {
  // A (256,1,1) group over 300 threads: groups of 256 and 44.
  std::vector<uint32_t> sizes(2, 0xFFFFFFFF);
  Dispatch d({300, 1, 1}, {256, 1, 1}, {sizes.data()});
  run(
      d.L,
      [](const alloy_cpu_launch* L, alloy_cpu_group* g) {
        static_cast<uint32_t*>(L->buffers[0])[g->group_pos[0]] = g->nthreads;
      },
      nullptr, false);
  EXPECT_EQ(sizes[0], 256u);
  EXPECT_EQ(sizes[1], 44u);
}

TEST(CpuExecutor, ZeroGridRunsNothing) {
  for (bool fiber : {false, true}) {
    int called = 0;
    for (auto grid : {std::array<uint32_t, 3>{0, 4, 1}, {4, 0, 1}, {4, 4, 0}}) {
      Dispatch d(grid, {4, 1, 1}, {&called});
      run(
          d.L,
          [](const alloy_cpu_launch* L, alloy_cpu_group*) { ++*static_cast<int*>(L->buffers[0]); },
          [](const alloy_cpu_launch* L, alloy_cpu_group*, uint32_t) {
            ++*static_cast<int*>(L->buffers[0]);
          },
          fiber);
    }
    EXPECT_EQ(called, 0);
  }
}

TEST(CpuExecutor, BadThreadgroupIsInvalidArgument) {
  auto noop = [](const alloy_cpu_launch*, alloy_cpu_group*) {};
  Dispatch big({4096, 1, 1}, {2048, 1, 1});
  EXPECT_THROW(run(big.L, noop, nullptr, false), std::invalid_argument);
  Dispatch big3({64, 64, 1}, {32, 64, 1});
  EXPECT_THROW(run(big3.L, noop, nullptr, false), std::invalid_argument);
  Dispatch zero({4, 1, 1}, {0, 1, 1});
  EXPECT_THROW(run(zero.L, noop, nullptr, false), std::invalid_argument);
}

// ---- loop mode ----

TEST(CpuExecutor, LoopModeElementwise) {
  const uint32_t n = 100003;  // not a multiple of the group
  std::vector<float> in = random_floats(n, 1), out(n, std::nanf(""));
  Dispatch d({n, 1, 1}, {256, 1, 1}, {in.data(), out.data()});
  run(
      d.L,
      [](const alloy_cpu_launch* L, alloy_cpu_group* g) {
        const float* a = static_cast<const float*>(L->buffers[0]);
        float* b = static_cast<float*>(L->buffers[1]);
        uint32_t base = g->group_pos[0] * L->threadgroup[0];
        for (uint32_t i = 0; i < g->group_size[0]; ++i) b[base + i] = std::exp(a[base + i]);
      },
      nullptr, false);
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_NEAR(out[i], std::exp(double(in[i])), 1e-6 * std::exp(double(in[i]))) << i;
  }
}

TEST(CpuExecutor, LoopModeExceptionPropagates) {
  std::vector<int> dummy(1);
  Dispatch d({1 << 16, 1, 1}, {64, 1, 1}, {dummy.data()});
  auto fn = [](const alloy_cpu_launch*, alloy_cpu_group* g) {
    if (g->group_pos[0] == 777) throw std::runtime_error("kernel failure in group 777");
  };
  try {
    run(d.L, fn, nullptr, false);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "kernel failure in group 777");
  }
}

// ---- threadgroup memory ----

TEST(CpuExecutor, ThreadgroupMemoryIsResetPerGroupAndParamsAllocated) {
  std::atomic<int> errors{0};
  Dispatch d({64 * 50, 1, 1}, {64, 1, 1}, {&errors});
  d.L.tg_param_bytes[0] = 1000;
  d.L.tg_param_bytes[2] = 64 * sizeof(float);
  for (bool fiber : {false, true}) {
    auto check = [](const alloy_cpu_launch* L, alloy_cpu_group* g) {
      auto* err = static_cast<std::atomic<int>*>(L->buffers[0]);
      bool ok = g->tg_used == 0 && g->tg_slots[0] == nullptr && g->tg_slots[5] == nullptr &&
                g->tg_params[0] != nullptr && g->tg_params[1] == nullptr &&
                g->tg_params[2] != nullptr &&
                reinterpret_cast<uintptr_t>(g->tg_params[0]) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(g->tg_arena) % 16 == 0 && g->tg_capacity >= 32768;
      if (!ok) (*err)++;
      // Dirty the state: the next group must see it reset.
      tg_slot(g, 0, 100);
      tg_slot(g, 5, 100);
      std::memset(g->tg_params[0], 0xAB, 1000);
      std::memset(g->tg_params[2], 0xCD, 64 * sizeof(float));
    };
    static decltype(check)* fn = nullptr;
    fn = &check;
    if (fiber) {
      run(
          d.L, nullptr,
          [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
            if (lid == 0) (*fn)(L, g);
            barrier(g);
          },
          true);
    } else {
      run(
          d.L, [](const alloy_cpu_launch* L, alloy_cpu_group* g) { (*fn)(L, g); }, nullptr, false);
    }
  }
  EXPECT_EQ(errors.load(), 0);
}

TEST(CpuExecutor, ThreadgroupMemoryOverflowPropagates) {
  Dispatch d({256, 1, 1}, {64, 1, 1});
  ExecOptions opts;
  opts.tg_arena_bytes = 32 << 10;
  for (bool fiber : {false, true}) {
    auto grab = [](const alloy_cpu_launch*, alloy_cpu_group* g) { tg_slot(g, 0, 64 << 10); };
    try {
      run(
          d.L, grab,
          [](const alloy_cpu_launch*, alloy_cpu_group* g, uint32_t) { tg_slot(g, 0, 64 << 10); },
          fiber, opts);
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("threadgroup memory"), std::string::npos);
    }
  }
}

// ---- fiber mode: barriers ----

// out[gid] = in[mirror of gid within its group], through threadgroup memory, with two barriers
// (the second protects the reuse of the same array for a second pass).
void reverse_kernel(const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
  const float* in = static_cast<const float*>(L->buffers[0]);
  float* out = static_cast<float*>(L->buffers[1]);
  float* shared = static_cast<float*>(tg_slot(g, 0, sizeof(float) * 1024));
  uint32_t n = g->nthreads;
  uint32_t gid = global_x(L, g, lid);
  shared[lid] = in[gid];
  barrier(g);
  float mine = shared[n - 1 - lid];
  barrier(g);
  shared[lid] = mine * 2.0f;  // second pass on the same array
  barrier(g);
  out[gid] = shared[n - 1 - lid];  // back to the original order, doubled
  out[gid] += mine;
}

void check_reverse(uint32_t total, uint32_t tg) {
  std::vector<float> in = random_floats(total, total + tg), out(total, std::nanf(""));
  Dispatch d({total, 1, 1}, {tg, 1, 1}, {in.data(), out.data()});
  run(d.L, nullptr, reverse_kernel, true);
  for (uint32_t i = 0; i < total; ++i) {
    uint32_t base = i / tg * tg, n = std::min(tg, total - base), lid = i - base;
    float expect = 2.0f * in[i] + in[base + n - 1 - lid];
    ASSERT_EQ(out[i], expect) << "thread " << i << " of " << total << " / " << tg;
  }
}

TEST(CpuExecutor, FiberBarrierReverse256) {
  check_reverse(256 * 37, 256);
}
TEST(CpuExecutor, FiberBarrierReverse80) {
  check_reverse(80 * 13, 80);
}
TEST(CpuExecutor, FiberBarrierReversePartialLastGroup) {
  check_reverse(256 * 5 + 77, 256);
}
TEST(CpuExecutor, FiberBarrierReverse1024) {
  check_reverse(1024 * 4, 1024);
}
TEST(CpuExecutor, FiberBarrierSingleThreadGroups) {
  check_reverse(33, 1);
}

// ---- fiber mode: simd exchanges ----

// Each lane gathers its simdgroup's values several times (each round's value depends on the last
// one, so a slot overwritten too early shows) and writes the sum over live lanes and the mask.
void simd_sum_kernel(const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
  const int32_t* in = static_cast<const int32_t*>(L->buffers[0]);
  int64_t* out = static_cast<int64_t*>(L->buffers[1]);
  uint32_t* masks = static_cast<uint32_t*>(L->buffers[2]);
  uint32_t gid = global_x(L, g, lid);
  int64_t v = in[gid];
  uint32_t mask = 0;
  for (int round = 0; round < 3; ++round) {
    int64_t all[32];
    mask = gather(g, v, all);
    int64_t sum = 0;
    for (int l = 0; l < 32; ++l) {
      if (mask >> l & 1) sum += all[l];
    }
    v = sum + (lid & 31);  // differs per lane
  }
  out[gid] = v;
  masks[gid] = mask;
}

void check_simd_sum(uint32_t total, uint32_t tg) {
  std::vector<int32_t> in = random_ints(total, total * 7 + tg);
  std::vector<int64_t> out(total, -1);
  std::vector<uint32_t> masks(total, 0xDEADBEEF);
  Dispatch d({total, 1, 1}, {tg, 1, 1}, {in.data(), out.data(), masks.data()});
  run(d.L, nullptr, simd_sum_kernel, true);
  for (uint32_t base = 0; base < total; base += tg) {
    uint32_t n = std::min(tg, total - base);
    for (uint32_t s = 0; s * 32 < n; ++s) {
      uint32_t lanes = std::min(32u, n - s * 32);
      std::vector<int64_t> v(lanes);
      for (uint32_t l = 0; l < lanes; ++l) v[l] = in[base + s * 32 + l];
      for (int round = 0; round < 3; ++round) {
        int64_t sum = std::accumulate(v.begin(), v.end(), int64_t{0});
        for (uint32_t l = 0; l < lanes; ++l) v[l] = sum + l;
      }
      uint32_t mask = lanes == 32 ? 0xFFFFFFFFu : (1u << lanes) - 1;
      for (uint32_t l = 0; l < lanes; ++l) {
        ASSERT_EQ(out[base + s * 32 + l], v[l]) << "group at " << base << " lane " << s * 32 + l;
        ASSERT_EQ(masks[base + s * 32 + l], mask);
      }
    }
  }
}

TEST(CpuExecutor, SimdGatherFullSimdgroups) {
  check_simd_sum(256 * 9, 256);
}
TEST(CpuExecutor, SimdGatherPartialSimdgroups80) {
  check_simd_sum(80 * 11, 80);
}  // 32+32+16
TEST(CpuExecutor, SimdGatherPartialEdgeGroup) {
  check_simd_sum(128 * 3 + 45, 128);
}  // 32+13
TEST(CpuExecutor, SimdGatherTinyGroups) {
  check_simd_sum(7 * 5, 7);
}
TEST(CpuExecutor, SimdGather1024) {
  check_simd_sum(1024 * 3 + 100, 1024);
}

struct Wide {
  double a;
  int32_t b[6];
  float c;
};

TEST(CpuExecutor, SimdGatherWideValuesAndSimdgroupBarrier) {
  const uint32_t total = 96 * 4, tg = 96;
  std::vector<int32_t> in = random_ints(total, 5);
  std::vector<double> out(total, std::nan(""));
  Dispatch d({total, 1, 1}, {tg, 1, 1}, {in.data(), out.data()});
  run(
      d.L, nullptr,
      [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
        const int32_t* a = static_cast<const int32_t*>(L->buffers[0]);
        double* o = static_cast<double*>(L->buffers[1]);
        uint32_t gid = global_x(L, g, lid);
        Wide w{double(a[gid]) * 0.5, {a[gid], 1, 2, 3, 4, 5}, float(lid)};
        g->sync->simdgroup_barrier(g);
        Wide all[32];
        uint32_t mask = gather(g, w, all);
        g->sync->simdgroup_barrier(g);
        // Value of the lane 3 positions up (rotating), as simd_shuffle_rotate_down would.
        uint32_t lane = lid & 31, src = (lane + 3) & 31;
        EXPECT_EQ(mask, 0xFFFFFFFFu);
        o[gid] = all[src].a + all[src].b[0] + all[src].b[5] + all[src].c;
      },
      true);
  for (uint32_t i = 0; i < total; ++i) {
    uint32_t lid = i % tg, src = lid / 32 * 32 + ((lid % 32 + 3) & 31);
    uint32_t j = i - lid + src;
    ASSERT_EQ(out[i], in[j] * 0.5 + in[j] + 5 + src) << i;
  }
}

TEST(CpuExecutor, SimdValueTooWideIsNotSupported) {
  Dispatch d({32, 1, 1}, {32, 1, 1});
  auto fn = [](const alloy_cpu_launch*, alloy_cpu_group* g, uint32_t) {
    char big[128] = {}, all[128 * 32];
    g->sync->simd_gather(g, big, all, 128);
  };
  EXPECT_THROW(run(d.L, nullptr, fn, true), NotSupported);
}

// ---- fiber mode: returned lanes ----

// Threads with lid % 3 == 0 return at once (Metal: inactive lanes); the rest meet at a barrier and
// a simd exchange that must count only them.
TEST(CpuExecutor, ReturnedThreadsAreExcluded) {
  const uint32_t total = 80 * 6, tg = 80;
  std::vector<int32_t> in = random_ints(total, 9);
  std::vector<int64_t> out(total, -1);
  std::vector<uint32_t> masks(total, 0);
  Dispatch d({total, 1, 1}, {tg, 1, 1}, {in.data(), out.data(), masks.data()});
  run(
      d.L, nullptr,
      [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
        if (lid % 3 == 0) return;
        const int32_t* a = static_cast<const int32_t*>(L->buffers[0]);
        uint32_t gid = global_x(L, g, lid);
        int64_t* shared = static_cast<int64_t*>(tg_slot(g, 0, sizeof(int64_t) * 80));
        shared[lid] = a[gid];
        barrier(g);
        int64_t all[32];
        uint32_t mask = gather(g, shared[lid], all);
        int64_t sum = 0;
        for (int l = 0; l < 32; ++l) sum += (mask >> l & 1) ? all[l] : 0;
        barrier(g);
        static_cast<int64_t*>(L->buffers[1])[gid] = sum;
        static_cast<uint32_t*>(L->buffers[2])[gid] = mask;
      },
      true);
  for (uint32_t i = 0; i < total; ++i) {
    uint32_t lid = i % tg;
    if (lid % 3 == 0) {
      ASSERT_EQ(out[i], -1);
      continue;
    }
    uint32_t first = i - lid + lid / 32 * 32, lanes = std::min(32u, tg - lid / 32 * 32);
    uint32_t mask = 0;
    int64_t sum = 0;
    for (uint32_t l = 0; l < lanes; ++l) {
      if ((first - (i - lid) + l) % 3 == 0) continue;
      mask |= 1u << l;
      sum += in[first + l];
    }
    ASSERT_EQ(masks[i], mask) << i;
    ASSERT_EQ(out[i], sum) << i;
  }
}

TEST(CpuExecutor, LaneReturningCompletesAPendingExchange) {
  // Lanes 0..30 wait in an exchange while lane 31 is still running; lane 31 then returns without
  // joining: the round completes without it.
  const uint32_t tg = 32;
  std::vector<uint32_t> masks(tg, 0);
  Dispatch d({tg, 1, 1}, {tg, 1, 1}, {masks.data()});
  run(
      d.L, nullptr,
      [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
        if (lid == 31) return;
        int all[32];
        static_cast<uint32_t*>(L->buffers[0])[lid] = gather(g, int(lid), all);
      },
      true);
  for (uint32_t l = 0; l < 31; ++l) EXPECT_EQ(masks[l], 0x7FFFFFFFu);
  EXPECT_EQ(masks[31], 0u);
}

// ---- fiber mode: divergence and errors ----

TEST(CpuExecutor, DivergentBarrierAndSimdDeadlockRaises) {
  Dispatch d({64 * 8, 1, 1}, {64, 1, 1});
  auto fn = [](const alloy_cpu_launch*, alloy_cpu_group* g, uint32_t lid) {
    if (lid % 32 < 16) {
      barrier(g);
    } else {
      int all[32];
      gather(g, 1, all);
    }
  };
  ExecOptions opts;
  opts.kernel = "divergent";
  try {
    run(d.L, nullptr, fn, true, opts);
    FAIL() << "no exception";
  } catch (const NotSupported& e) {
    EXPECT_EQ(e.kernel(), "divergent");
    EXPECT_NE(std::string(e.what()).find("not supported: barrier/simd function reached by only"),
              std::string::npos)
        << e.what();
  }
}

TEST(CpuExecutor, DifferentSimdFunctionsInOneSimdgroupRaise) {
  Dispatch d({32, 1, 1}, {32, 1, 1});
  auto fn = [](const alloy_cpu_launch*, alloy_cpu_group* g, uint32_t lid) {
    int all[32];
    if (lid < 8) {
      gather(g, 1, all);
    } else {
      g->sync->simdgroup_barrier(g);
    }
  };
  EXPECT_THROW(run(d.L, nullptr, fn, true), NotSupported);
}

TEST(CpuExecutor, BarrierReachedByAllLiveThreadsAfterOthersReturn) {
  // Threads that return before a barrier do not block it (they are no longer live).
  std::vector<int> out(128, 0);
  Dispatch d({128, 1, 1}, {128, 1, 1}, {out.data()});
  run(
      d.L, nullptr,
      [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
        if (lid >= 100) return;
        barrier(g);
        barrier(g);
        static_cast<int*>(L->buffers[0])[lid] = 1;
      },
      true);
  EXPECT_EQ(std::accumulate(out.begin(), out.end(), 0), 100);
}

TEST(CpuExecutor, ExceptionInFiberPropagatesAndExecutorRecovers) {
  std::vector<float> in = random_floats(256 * 64, 3), out(256 * 64, 0);
  Dispatch bad({256 * 64, 1, 1}, {256, 1, 1}, {in.data(), out.data()});
  auto fn = [](const alloy_cpu_launch*, alloy_cpu_group* g, uint32_t lid) {
    barrier(g);
    if (g->group_pos[0] == 41 && lid == 37) throw std::domain_error("thread 37 of group 41");
    barrier(g);
  };
  try {
    run(bad.L, nullptr, fn, true);
    FAIL() << "no exception";
  } catch (const std::domain_error& e) {
    EXPECT_STREQ(e.what(), "thread 37 of group 41");
  }
  // The abandoned fibers' stacks are reused: the next dispatch runs normally.
  check_reverse(256 * 64, 256);
}

// ---- robust mode reports ----

TEST(CpuExecutor, OutOfRangeReports) {
  for (bool fiber : {false, true}) {
    OobLog log(8);
    ExecOptions opts;
    opts.oob = &log;
    Dispatch d({40, 3, 1}, {16, 2, 1});
    auto report = [](const alloy_cpu_launch*, alloy_cpu_group* g, uint32_t lid) {
      g->current = lid;  // loop mode: the kernel's loop keeps `current` up to date
      uint32_t l[3];
      local_pos(g, lid, l);
      if (g->group_pos[0] == 2 && l[0] == 5 && l[1] == 0 && g->group_pos[1] == 1) {
        g->sync->report_oob(g, 3, -12, 1);
      }
      if (lid == 0) g->sync->report_oob(g, 0, 1000, 0);
    };
    static decltype(report)* fn = nullptr;
    fn = &report;
    run(
        d.L,
        [](const alloy_cpu_launch* L, alloy_cpu_group* g) {
          for (uint32_t lid = 0; lid < g->nthreads; ++lid) (*fn)(L, g, lid);
        },
        [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) { (*fn)(L, g, lid); },
        fiber, opts);
    EXPECT_EQ(log.count(), 1u + 3 * 2);  // one write, one read per group
    auto reports = log.reports();
    EXPECT_EQ(reports.size(), 7u);
    auto it = std::find_if(reports.begin(), reports.end(), [](auto& r) { return r.is_write == 1; });
    ASSERT_NE(it, reports.end());
    EXPECT_EQ(it->buffer, 3u);
    EXPECT_EQ(it->index, -12);
    EXPECT_EQ(it->thread_position_in_grid[0], 2u * 16 + 5);
    EXPECT_EQ(it->thread_position_in_grid[1], 2u);
    EXPECT_EQ(it->threadgroup_position_in_grid[0], 2u);
    EXPECT_EQ(it->threadgroup_position_in_grid[1], 1u);
  }
}

TEST(CpuExecutor, OutOfRangeLogKeepsTheFirstReportsAndCountsAll) {
  OobLog log(5);
  ExecOptions opts;
  opts.oob = &log;
  Dispatch d({4096, 1, 1}, {64, 1, 1});
  run(
      d.L,
      [](const alloy_cpu_launch*, alloy_cpu_group* g) {
        for (uint32_t lid = 0; lid < g->nthreads; ++lid) {
          g->current = lid;
          g->sync->report_oob(g, 1, lid, 0);
        }
      },
      nullptr, false, opts);
  EXPECT_EQ(log.count(), 4096u);
  EXPECT_EQ(log.reports().size(), 5u);
  log.clear();
  EXPECT_EQ(log.count(), 0u);
  // Without a log, reports are dropped.
  run(
      d.L, [](const alloy_cpu_launch*, alloy_cpu_group* g) { g->sync->report_oob(g, 0, 0, 1); },
      nullptr, false);
}

// ---- many groups ----

// A realistic fiber kernel: per-row sum with strided loads, simd reduction, threadgroup memory and
// barriers (the shape of MLX's row reductions). One group per row.
void rowsum_kernel(const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
  const float* x = static_cast<const float*>(L->buffers[0]);
  float* out = static_cast<float*>(L->buffers[1]);
  const uint32_t cols = *static_cast<const uint32_t*>(L->buffers[2]);
  uint32_t row = g->group_pos[1];
  float acc = 0;
  for (uint32_t c = lid; c < cols; c += g->nthreads) acc += x[size_t(row) * cols + c];
  float all[32];
  uint32_t mask = gather(g, acc, all);
  float s = 0;
  for (int l = 0; l < 32; ++l) s += (mask >> l & 1) ? all[l] : 0.0f;
  float* partial = static_cast<float*>(tg_slot(g, 0, 32 * sizeof(float)));
  if ((lid & 31) == 0) partial[lid >> 5] = s;
  barrier(g);
  if (lid < 32) {
    uint32_t nsg = (g->nthreads + 31) / 32;
    mask = gather(g, lid < nsg ? partial[lid] : 0.0f, all);
    s = 0;
    for (int l = 0; l < 32; ++l) s += (mask >> l & 1) ? all[l] : 0.0f;
    if (lid == 0) out[row] = s;
  }
}

TEST(CpuExecutor, ManyGroupsInParallelAreDeterministic) {
  const uint32_t rows = 3000, cols = 1000;
  std::vector<float> x = random_floats(size_t(rows) * cols, 11);
  uint32_t ncols = cols;
  std::vector<float> first;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> out(rows, std::nanf(""));
    Dispatch d({256, rows, 1}, {256, 1, 1}, {x.data(), out.data(), &ncols});
    run(d.L, nullptr, rowsum_kernel, true);
    if (rep == 0) {
      for (uint32_t r = 0; r < rows; ++r) {
        double ref = 0;
        for (uint32_t c = 0; c < cols; ++c) ref += x[size_t(r) * cols + c];
        ASSERT_NEAR(out[r], ref, 1e-4 * ref) << "row " << r;
      }
      first = out;
    } else {
      ASSERT_EQ(0, std::memcmp(first.data(), out.data(), rows * sizeof(float)));
    }
  }
}

TEST(CpuExecutor, SerialOptionGivesSameResults) {
  const uint32_t rows = 64, cols = 333;
  std::vector<float> x = random_floats(size_t(rows) * cols, 12);
  uint32_t ncols = cols;
  std::vector<float> a(rows, std::nanf("")), b(rows, std::nanf(""));
  Dispatch da({80, rows, 1}, {80, 1, 1}, {x.data(), a.data(), &ncols});
  Dispatch db({80, rows, 1}, {80, 1, 1}, {x.data(), b.data(), &ncols});
  ExecOptions serial;
  serial.parallel = false;
  run(da.L, nullptr, rowsum_kernel, true, serial);
  run(db.L, nullptr, rowsum_kernel, true);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), rows * sizeof(float)));
  for (uint32_t r = 0; r < rows; ++r) {
    double ref = 0;
    for (uint32_t c = 0; c < cols; ++c) ref += x[size_t(r) * cols + c];
    ASSERT_NEAR(a[r], ref, 1e-4 * ref);
  }
}

// ---- group scheduling ----

// Each group of a launch runs exactly once under both schedules, for group counts around the
// dynamic schedule's chunk sizes, in loop mode (one call per group and chunks of groups through
// a groups_fn) and fiber mode, and while another thread spins on a core (a preempted pool thread
// holds only the chunk it runs; the launch still completes with every group done once).
struct GroupCount {
  std::atomic<int> n{0};
};
void check_each_group_once(Schedule schedule, bool fiber_mode, bool chunks, uint32_t ngroups,
                           uint32_t tg) {
  std::vector<GroupCount> seen(ngroups);
  std::atomic<int> bad{0};
  Dispatch d({ngroups * tg, 1, 1}, {tg, 1, 1}, {seen.data(), &bad});
  alloy_cpu_group_fn group_fn = [](const alloy_cpu_launch* L, alloy_cpu_group* g) {
    static_cast<GroupCount*>(L->buffers[0])[g->group_pos[0]].n++;
  };
  alloy_cpu_thread_fn thread_fn = [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint32_t lid) {
    if (lid == 0) static_cast<GroupCount*>(L->buffers[0])[g->group_pos[0]].n++;
  };
  alloy_cpu_groups_fn groups_fn = [](const alloy_cpu_launch* L, alloy_cpu_group* g, uint64_t first,
                                     uint64_t count) {
    if (count == 0 || first + count > L->groups[0])
      static_cast<std::atomic<int>*>(L->buffers[1])[0]++;
    for (uint64_t i = first; i < first + count; ++i) static_cast<GroupCount*>(L->buffers[0])[i].n++;
  };
  ExecOptions opts;
  opts.schedule = schedule;
  run(d.L, group_fn, thread_fn, fiber_mode, opts, chunks ? groups_fn : nullptr);
  EXPECT_EQ(bad.load(), 0);
  for (uint32_t i = 0; i < ngroups; ++i)
    ASSERT_EQ(seen[i].n.load(), 1) << "group " << i << " of " << ngroups
                                   << (fiber_mode ? " fibers" : "") << (chunks ? " chunks" : "");
}

void check_schedules() {
  for (Schedule s : {Schedule::dynamic, Schedule::partitioned}) {
    for (uint32_t n : {1u, 2u, 7u, 33u, 1000u, 4099u, 65537u}) {
      check_each_group_once(s, false, false, n, 256);
      check_each_group_once(s, false, true, n, 256);
      check_each_group_once(s, false, false, n, 3);
      if (n <= 4099) check_each_group_once(s, true, false, n, 32);
    }
  }
}

TEST(CpuExecutor, EveryGroupRunsOnceUnderBothSchedules) {
  check_schedules();
}

TEST(CpuExecutor, EveryGroupRunsOnceBesideASpinningThread) {
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  check_schedules();
  stop = true;
  spinner.join();
}

TEST(CpuExecutor, DynamicScheduleResultsMatchSerial) {
  const uint32_t rows = 999, cols = 257;
  std::vector<float> x = random_floats(size_t(rows) * cols, 13);
  uint32_t ncols = cols;
  std::vector<float> a(rows, std::nanf("")), b(rows, std::nanf(""));
  Dispatch da({64, rows, 1}, {64, 1, 1}, {x.data(), a.data(), &ncols});
  Dispatch db({64, rows, 1}, {64, 1, 1}, {x.data(), b.data(), &ncols});
  ExecOptions serial, dynamic;
  serial.parallel = false;
  dynamic.schedule = Schedule::dynamic;
  run(da.L, nullptr, rowsum_kernel, true, serial);
  run(db.L, nullptr, rowsum_kernel, true, dynamic);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), rows * sizeof(float)));
}

TEST(CpuExecutor, ScheduleFromOptionsOverridesTheEnvironment) {
  ExecOptions o;
  o.schedule = Schedule::partitioned;
  EXPECT_EQ(schedule(o), Schedule::partitioned);
  o.schedule = Schedule::dynamic;
  EXPECT_EQ(schedule(o), Schedule::dynamic);
  o.schedule = Schedule::automatic;
  EXPECT_NE(schedule(o), Schedule::automatic);
}

// ALLOY_CPU_TRACE / set_trace_launches: a dynamic launch writes one line per launch whose tasks
// account for every group exactly as the kernel saw them; nothing is written when it is off.
std::atomic<uint64_t> traced_groups{0};
TEST(CpuExecutor, LaunchTraceAccountsForEveryGroup) {
  std::mt19937 rng(29);
  const uint32_t groups = 1000 + rng() % 2000;
  Dispatch d({groups * 32, 1, 1}, {32, 1, 1});
  alloy_cpu_group_fn fn = [](const alloy_cpu_launch*, alloy_cpu_group*) { ++traced_groups; };
  ExecOptions opts;
  opts.schedule = Schedule::dynamic;
  opts.kernel = "traced";
  for (bool on : {true, false}) {
    traced_groups = 0;
    set_trace_launches(on);
    testing::internal::CaptureStderr();
    run(d.L, fn, nullptr, false, opts);
    const std::string err = testing::internal::GetCapturedStderr();
    set_trace_launches(false);
    EXPECT_EQ(traced_groups.load(), groups);
    if (!on) {
      EXPECT_EQ(err.find("alloy cpu launch"), std::string::npos) << err;
      continue;
    }
    const std::string head = "alloy cpu launch traced: " + std::to_string(groups) + " groups, ";
    ASSERT_EQ(err.rfind(head, 0), 0u) << err;
    ASSERT_NE(err.find("; returns +"), std::string::npos) << err;
    // " [c]+<start>..<end>(<groups>)" per task.
    uint64_t sum = 0;
    int tasks = 0;
    for (size_t at = err.find(": ", head.size());
         (at = err.find('+', at + 1)) != std::string::npos;) {
      if (err.compare(at - 8, 8, "returns ") == 0) break;
      const size_t dots = err.find("..", at), open = err.find('(', at), close = err.find(')', at);
      ASSERT_TRUE(dots < open && open < close) << err;
      const double start = std::stod(err.substr(at + 1, dots - at - 1));
      const double end = std::stod(err.substr(dots + 2, open - dots - 2));
      EXPECT_LE(start, end) << err;
      sum += std::stoull(err.substr(open + 1, close - open - 1));
      ++tasks;
    }
    EXPECT_GE(tasks, 1) << err;
    EXPECT_EQ(sum, groups) << err;
  }
}

// ALLOY_CPU_SLICE_US / set_worker_slice_us: the pool's workers run with the requested scheduler
// slice (Linux >= 6.12), and go back to the default when it is set to 0; the caller's thread is
// left alone.
std::mutex slice_mu;
std::map<std::thread::id, uint64_t>* slice_seen = nullptr;
TEST(CpuExecutor, WorkersTakeTheRequestedSchedulerSlice) {
  // oneTBB's worker threads are shared by all arenas: on 2 cores the one worker can be busy with
  // a background compile queued by an earlier test (a one-process run), and then none joins.
  ASSERT_TRUE(kernel::compile_pool_wait_idle(std::chrono::minutes(5)));
  bool supported = false;
  uint64_t default_slice = 0;  // what a thread reports without a slice of its own
  std::thread probe([&] {
    default_slice = thread_slice_us();
    supported = set_thread_slice_us(700) && thread_slice_us() == 700;
  });
  probe.join();
  if (!supported) GTEST_SKIP() << "the kernel has no custom scheduler slices";
  const uint64_t saved = worker_slice_us();
  const uint64_t caller_before = thread_slice_us();
  for (uint64_t want : {uint64_t{500}, uint64_t{0}}) {
    set_worker_slice_us(want);
    std::map<std::thread::id, uint64_t> seen;
    slice_seen = &seen;
    Dispatch d({2000 * 32, 1, 1}, {32, 1, 1});
    alloy_cpu_group_fn fn = [](const alloy_cpu_launch*, alloy_cpu_group*) {
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(20)) {
      }
      const uint64_t s = thread_slice_us();
      std::lock_guard<std::mutex> lock(slice_mu);
      (*slice_seen)[std::this_thread::get_id()] = s;
    };
    ExecOptions opts;
    opts.schedule = Schedule::dynamic;
    run(d.L, fn, nullptr, false, opts);
    slice_seen = nullptr;
    int workers = 0;
    for (const auto& [id, s] : seen) {
      if (id == std::this_thread::get_id()) continue;
      ++workers;
      EXPECT_EQ(s, want ? want : default_slice) << "a pool worker's slice";
    }
    if (std::thread::hardware_concurrency() > 1) {
      EXPECT_GT(workers, 0) << "no worker joined";
    }
    EXPECT_EQ(thread_slice_us(), caller_before) << "the caller's slice changed";
  }
  set_worker_slice_us(saved);
}

}  // namespace
}  // namespace alloy::cpu
