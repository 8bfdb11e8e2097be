// Conformance: threadgroup memory and synchronization. `threadgroup T name[N]` (several, 2-D,
// scalars), threadgroup pointers passed to header helpers, threadgroup_barrier with
// mem_threadgroup / mem_device / mem_none / combined flags, simdgroup_barrier, and
// atomic_thread_fence in the "last threadgroup finishes the reduction" pattern.
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// ---- barriers ---------------------------------------------------------------------------------

// Reverses each threadgroup's slice through threadgroup memory. Grid 300 with groups of 128: the
// last group is partial (44 threads) and threads_per_threadgroup says so.
std::vector<double> reversed_in_groups(const std::vector<double>& x, int group) {
  std::vector<double> r(x.size());
  for (size_t base = 0; base < x.size(); base += group) {
    size_t n = std::min<size_t>(group, x.size() - base);
    for (size_t l = 0; l < n; ++l) r[base + l] = x[base + n - 1 - l];
  }
  return r;
}

void check_reverse_with_barrier(const char* name, const char* flags) {
  constexpr int64_t n = 300;
  std::string body = R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint count = threads_per_threadgroup.x;
    threadgroup float buf[128];
    buf[lid] = x[gid];
    threadgroup_barrier()MSL" +
                     std::string(flags) + R"MSL();
    out[gid] = buf[count - 1 - lid];
  )MSL";
  auto k = metal_kernel(name, {"x"}, {"out"}, body);
  auto x = random_array({n}, float32, -1, 1, 601, Device::cpu());
  auto ref = reversed_in_groups(x.to_doubles(), 128);
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {128, 1, 1}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

TEST(ConformanceThreadgroup, BarrierMemThreadgroup) {
  check_reverse_with_barrier("tg_barrier_mem_threadgroup", "mem_flags::mem_threadgroup");
}

// Real kernels exchange threadgroup data across mem_none barriers; Alloy's barriers always order
// memory, so this works as users expect.
TEST(ConformanceThreadgroup, BarrierMemNoneStillExchangesThreadgroupData) {
  check_reverse_with_barrier("tg_barrier_mem_none", "mem_flags::mem_none");
}

TEST(ConformanceThreadgroup, BarrierCombinedFlags) {
  check_reverse_with_barrier("tg_barrier_combined",
                             "mem_flags::mem_threadgroup | mem_flags::mem_device");
}

// Device memory written before threadgroup_barrier(mem_device) is visible to the group's threads.
TEST(ConformanceThreadgroup, BarrierMemDevice) {
  constexpr int64_t n = 300;
  auto k = metal_kernel("tg_barrier_mem_device", {"x"}, {"stage", "out"}, R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint count = threads_per_threadgroup.x;
    uint base = gid - lid;
    stage[gid] = x[gid] * 2.0f;
    threadgroup_barrier(mem_flags::mem_device);
    out[gid] = stage[base + (lid + 1) % count];
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 602, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> stage(n), ref(n);
  for (int64_t g = 0; g < n; ++g) {
    stage[g] = 2 * xv[g];
    int64_t base = g / 64 * 64, count = std::min<int64_t>(64, n - base);
    ref[g] = 2 * xv[base + (g - base + 1) % count];
  }
  run_kernel(k, {x}, make_call({{n}, {n}}, {float32, float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) {
               expect_equal(o[0], stage);
               expect_equal(o[1], ref);
             });
}

// simdgroup_barrier orders threadgroup memory between the lanes of one simdgroup.
TEST(ConformanceThreadgroup, SimdgroupBarrier) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("tg_simdgroup_barrier", {"x"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    uint lid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    threadgroup float buf[64];
    buf[lid] = x[gid];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    out[gid] = buf[sg * 32 + (lane ^ 1u)];
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 603, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t g = 0; g < n; ++g) ref[g] = xv[g ^ 1];
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

// ---- threadgroup declarations -----------------------------------------------------------------

// Several threadgroup arrays in one body, a 2-D one among them, with a 2-D threadgroup.
TEST(ConformanceThreadgroup, SeveralArraysAnd2D) {
  constexpr int W = 32, H = 16;
  auto k = metal_kernel("tg_several_2d", {"x"}, {"out"}, R"MSL(
    threadgroup float tile[8][9];
    threadgroup int counts[8];
    threadgroup float4 quads[4];
    uint2 l = uint2(thread_position_in_threadgroup.xy);
    uint2 g = uint2(thread_position_in_grid.xy);
    uint w = threads_per_grid.x;
    tile[l.y][l.x] = x[g.y * w + g.x];
    if (l.y == 0) counts[l.x] = int(l.x) * 3;
    if (l.x < 4 && l.y == 1) quads[l.x] = float4(float(l.x), float(l.x) + 0.5f, 0.0f, 1.0f);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[g.y * w + g.x] = tile[l.x][l.y] + float(counts[l.y]) + quads[l.x % 4].y;
  )MSL");
  auto x = random_array({H, W}, float32, -1, 1, 611, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(W * H);
  for (int gy = 0; gy < H; ++gy)
    for (int gx = 0; gx < W; ++gx) {
      int lx = gx % 8, ly = gy % 8, ox = gx - lx, oy = gy - ly;
      ref[gy * W + gx] = xv[(oy + lx) * W + ox + ly] + ly * 3 + (lx % 4) + 0.5;
    }
  run_kernel(k, {x}, make_call({{H, W}}, {float32}, {W, H, 1}, {8, 8, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

// A threadgroup scalar (`threadgroup T name;`) and a threadgroup struct.
TEST(ConformanceThreadgroup, ScalarAndStructObjects) {
  constexpr int64_t n = 192;
  auto k = metal_kernel("tg_scalar_struct", {"x"}, {"out"}, R"MSL(
    uint lid = thread_index_in_threadgroup;
    uint gid = thread_position_in_grid.x;
    threadgroup float first;
    threadgroup Pair pair;
    if (lid == 0) first = x[gid];
    if (lid == 1) { pair.a = x[gid]; pair.b = int(gid); }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid] = first + pair.a * 2.0f + float(pair.b);
  )MSL",
                        R"MSL(
struct Pair {
  float a;
  int b;
};
)MSL");
  auto x = random_array({n}, float32, -1, 1, 612, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t g = 0; g < n; ++g) {
    int64_t base = g / 64 * 64;
    ref[g] = xv[base] + 2 * xv[base + 1] + double(base + 1);
  }
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

// Threadgroup pointers passed to helper functions in the header (with barriers inside them), and
// pointer arithmetic on threadgroup memory.
TEST(ConformanceThreadgroup, PointerToHelperFunctions) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("tg_pointer_helpers", {"x"}, {"out"}, R"MSL(
    threadgroup float scratch[64];
    threadgroup float pairs[128];
    uint lid = thread_index_in_threadgroup;
    uint gid = thread_position_in_grid.x;
    float v = x[gid];
    float total = block_sum(scratch, v, lid, 64u);
    store_pair(pairs, lid, v, total);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    threadgroup float* tail = pairs + 64;
    out[gid] = pairs[2 * ((lid + 1) % 64)] + tail[1];
  )MSL",
                        R"MSL(
template <typename T>
METAL_FUNC T block_sum(threadgroup T* buf, T v, uint lid, uint n) {
  buf[lid] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = n / 2; stride > 0; stride /= 2) {
    if (lid < stride) buf[lid] += buf[lid + stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  T total = buf[0];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

inline void store_pair(threadgroup float* dst, uint i, float a, float b) {
  dst[2 * i] = a;
  dst[2 * i + 1] = b;
}
)MSL");
  auto x = random_array({n}, float32, -1, 1, 613, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t g = 0; g < n; ++g) {
    int64_t base = g / 64 * 64;
    double total = 0;
    for (int j = 0; j < 64; ++j) total += xv[base + j];
    ref[g] = xv[base + (g - base + 1) % 64] + total;
  }
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// ---- fences ------------------------------------------------------------------------------------

// The last threadgroup to finish (found with a device atomic counter, ordered by
// atomic_thread_fence) adds up every group's partial sum.
TEST(ConformanceThreadgroup, AtomicThreadFenceLastGroupReduction) {
  constexpr int64_t n = 1024, groups = n / 64;
  auto k = metal_kernel("tg_fence_last_group", {"x"}, {"sums", "counter", "total"}, R"MSL(
    uint lid = thread_index_in_threadgroup;
    uint gid = thread_position_in_grid.x;
    uint group = threadgroup_position_in_grid.x;
    uint ngroups = threadgroups_per_grid.x;
    threadgroup float partial[64];
    threadgroup bool last;
    partial[lid] = x[gid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0) {
      float s = 0.0f;
      for (uint j = 0; j < 64; ++j) s += partial[j];
      sums[group] = s;
      atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
      uint prev = atomic_fetch_add_explicit((device atomic_uint*)counter, 1u,
                                            memory_order_relaxed);
      last = (prev == ngroups - 1);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (last && lid == 0) {
      atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst);
      float t = 0.0f;
      for (uint g = 0; g < ngroups; ++g) t += sums[g];
      total[0] = t;
    }
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 621, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> sums(groups, 0.0);
  double total = 0;
  for (int64_t g = 0; g < n; ++g) sums[g / 64] += xv[g];
  for (double s : sums) total += s;
  KernelCall call =
      make_call({{groups}, {1}, {1}}, {float32, uint32, float32}, {n, 1, 1}, {64, 1, 1});
  call.init_value = 0;  // the counter starts at 0
  run_kernel(k, {x}, call, [&](auto& o) {
    expect_close(o[0], sums, 1e-5, 1e-5);
    expect_equal(o[1], {double(groups)});
    expect_close(o[2], {total}, 1e-5, 1e-5);
  });
}

}  // namespace
