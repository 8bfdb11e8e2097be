// Conformance: Metal atomics. atomic<T> for int/uint/float (MLX's atomic_outputs gives
// `device atomic<T>*` outputs), the atomic_int/atomic_uint/atomic_float names, every *_explicit
// function with memory_order_relaxed, on device memory and on threadgroup memory. References are
// exact: integer results, and float sums of multiples of 1/8 (exact in any order).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

KernelCall atomic_call(std::vector<Shape> shapes, std::vector<Dtype> dtypes, int n, int tg,
                       double init) {
  auto c = make_call(std::move(shapes), std::move(dtypes), {n, 1, 1}, {tg, 1, 1});
  c.init_value = init;
  return c;
}

// ---- device atomics through atomic_outputs -------------------------------------------------

TEST(ConformanceAtomics, DeviceFetchAddHistogram) {
  constexpr int64_t n = 4096, bins = 16;
  auto k = metal_kernel("atomic_device_histogram", {"x"}, {"hist"}, R"MSL(
    uint i = thread_position_in_grid.x;
    device atomic_int* h = hist;  // atomic<int> and atomic_int are the same type
    atomic_fetch_add_explicit(&h[x[i]], 1, memory_order_relaxed);
  )MSL",
                        "", true, /*atomic_outputs=*/true);
  auto x = random_array({n}, int32, 0, bins, 701, Device::cpu());
  std::vector<double> ref(bins, 0.0);
  for (double v : x.to_doubles()) ref[static_cast<int>(v)] += 1;
  run_kernel(k, {x}, atomic_call({{bins}}, {int32}, n, 256, 0),
             [&](auto& o) { expect_equal(o[0], ref); });
}

// fetch_add returns the old value: a counter hands out unique slots; atomic_store fills them.
TEST(ConformanceAtomics, DeviceFetchAddReturnsOldValue) {
  constexpr int64_t n = 2048;
  auto k = metal_kernel("atomic_device_slots", {"x"}, {"counter", "slots"}, R"MSL(
    uint i = thread_position_in_grid.x;
    int old = atomic_fetch_add_explicit(&counter[0], 1, memory_order_relaxed);
    atomic_store_explicit(&slots[old], x[i], memory_order_relaxed);
  )MSL",
                        "", true, true);
  auto x = random_array({n}, int32, -1e6, 1e6, 702, Device::cpu());
  auto sorted_x = x.to_doubles();
  std::sort(sorted_x.begin(), sorted_x.end());
  run_kernel(k, {x}, atomic_call({{1}, {n}}, {int32, int32}, n, 128, 0), [&](auto& o) {
    expect_equal(o[0], {double(n)});
    auto slots = o[1].to_doubles();
    std::sort(slots.begin(), slots.end());
    EXPECT_EQ(slots, sorted_x) << "the slots are not a permutation of the inputs";
  });
}

TEST(ConformanceAtomics, DeviceIntAddSubMinMax) {
  constexpr int64_t n = 4096;
  auto k = metal_kernel("atomic_device_int_ops", {"x"}, {"acc"}, R"MSL(
    uint i = thread_position_in_grid.x;
    int v = x[i];
    atomic_fetch_sub_explicit(&acc[0], v, memory_order_relaxed);
    atomic_fetch_min_explicit(&acc[1], v, memory_order_relaxed);
    atomic_fetch_max_explicit(&acc[2], v, memory_order_relaxed);
    atomic_fetch_add_explicit(&acc[3], v, memory_order_relaxed);
  )MSL",
                        "", true, true);
  auto x = random_array({n}, int32, -1e5, 1e5, 703, Device::cpu());
  auto xv = x.to_doubles();
  double sum = 0, lo = 0, hi = 0;
  for (double v : xv) {
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  run_kernel(k, {x}, atomic_call({{4}}, {int32}, n, 256, 0), [&](auto& o) {
    expect_equal(o[0], {-sum, lo, hi, sum});
  });
}

TEST(ConformanceAtomics, DeviceUintBitwiseAndWrapping) {
  constexpr int64_t n = 4096;
  auto k = metal_kernel("atomic_device_uint_ops", {"x"}, {"acc"}, R"MSL(
    uint i = thread_position_in_grid.x;
    uint v = x[i];
    atomic_fetch_or_explicit(&acc[0], 1u << (v % 32u), memory_order_relaxed);
    atomic_fetch_xor_explicit(&acc[1], v, memory_order_relaxed);
    atomic_fetch_max_explicit(&acc[2], v, memory_order_relaxed);
    atomic_fetch_sub_explicit(&acc[3], v, memory_order_relaxed);
    atomic_fetch_add_explicit(&acc[4], v, memory_order_relaxed);
  )MSL",
                        "", true, true);
  auto x = random_array({n}, uint32, 1, 4294967295.0, 704, Device::cpu());
  auto xv = x.to_vector<uint32_t>();
  uint32_t orv = 0, xorv = 0, maxv = 0, sub = 0, add = 0;
  for (uint32_t v : xv) {
    orv |= 1u << (v % 32u);
    xorv ^= v;
    maxv = std::max(maxv, v);
    sub -= v;
    add += v;
  }
  run_kernel(k, {x}, atomic_call({{5}}, {uint32}, n, 256, 0), [&](auto& o) {
    expect_equal(o[0], {double(orv), double(xorv), double(maxv), double(sub), double(add)});
  });
}

// fetch_and and fetch_min need an all-ones start (init_value).
TEST(ConformanceAtomics, DeviceUintAndMin) {
  constexpr int64_t n = 4096;
  auto k = metal_kernel("atomic_device_uint_and_min", {"x"}, {"acc"}, R"MSL(
    uint i = thread_position_in_grid.x;
    uint v = x[i];
    atomic_fetch_and_explicit(&acc[0], v | 0xFFFF0FF0u, memory_order_relaxed);
    atomic_fetch_min_explicit(&acc[1], v, memory_order_relaxed);
  )MSL",
                        "", true, true);
  auto x = random_array({n}, uint32, 1, 4294967295.0, 705, Device::cpu());
  auto xv = x.to_vector<uint32_t>();
  uint32_t andv = 0xFFFFFFFFu, minv = 0xFFFFFFFFu;
  for (uint32_t v : xv) {
    andv &= v | 0xFFFF0FF0u;
    minv = std::min(minv, v);
  }
  run_kernel(k, {x}, atomic_call({{2}}, {uint32}, n, 256, 4294967295.0), [&](auto& o) {
    expect_equal(o[0], {double(andv), double(minv)});
  });
}

// atomic<float>: add/sub/store (multiples of 1/8 keep every partial sum exact).
TEST(ConformanceAtomics, DeviceFloatAddSubStore) {
  constexpr int64_t n = 4096;
  auto k = metal_kernel("atomic_device_float_ops", {"x"}, {"acc"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float v = x[i];
    atomic_fetch_add_explicit(&acc[0], v, memory_order_relaxed);
    atomic_fetch_sub_explicit(&acc[1], v, memory_order_relaxed);
    if (i == 7) atomic_store_explicit(&acc[2], v, memory_order_relaxed);
  )MSL",
                        "", true, true);
  auto xv = random_values(n, -64, 64, 706);
  for (auto& v : xv) v = (std::floor(v * 8) + 0.5) / 8;
  auto x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  double sum = 0;
  for (double v : xv) sum += v;
  run_kernel(k, {x}, atomic_call({{3}}, {float32}, n, 256, 0), [&](auto& o) {
    expect_equal(o[0], {sum, -sum, xv[7]});
  });
}

TEST(ConformanceAtomics, CompareExchangeWeakLoops) {
  constexpr int64_t n = 2048;
  auto k = metal_kernel("atomic_cas_loops", {"x"}, {"acc"}, R"MSL(
    uint i = thread_position_in_grid.x;
    int v = x[i];
    int expected = atomic_load_explicit(&acc[0], memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&acc[0], &expected, expected + v,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
    int cur = atomic_load_explicit(&acc[1], memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(&acc[1], &cur, v,
                                                             memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
  )MSL",
                        "", true, true);
  auto x = random_array({n}, int32, -1e5, 1e5, 707, Device::cpu());
  auto xv = x.to_doubles();
  double sum = 0, hi = 0;
  for (double v : xv) {
    sum += v;
    hi = std::max(hi, v);
  }
  run_kernel(k, {x}, atomic_call({{2}}, {int32}, n, 128, 0), [&](auto& o) {
    expect_equal(o[0], {sum, hi});
  });
}

// atomic_exchange returns the previous value: the returned values plus the final one are the
// initial value and every thread's value, each exactly once. Plain outputs cast to atomic_int*.
TEST(ConformanceAtomics, ExchangeThroughAtomicIntCast) {
  constexpr int64_t n = 1024;
  auto k = metal_kernel("atomic_exchange_cast", {"x"}, {"cell", "olds"}, R"MSL(
    uint i = thread_position_in_grid.x;
    device atomic_int* c = (device atomic_int*)cell;
    olds[i] = atomic_exchange_explicit(c, x[i], memory_order_relaxed);
  )MSL");
  auto xv = random_values(n, 1, 1e6, 708);
  for (auto& v : xv) v = std::floor(v);
  auto x = Array::from_doubles(xv, {n}, int32, Device::cpu());
  std::vector<double> expected = xv;
  expected.push_back(0);  // the initial value
  std::sort(expected.begin(), expected.end());
  run_kernel(k, {x}, atomic_call({{1}, {n}}, {int32, int32}, n, 128, 0), [&](auto& o) {
    auto seen = o[1].to_doubles();
    seen.push_back(o[0].to_doubles()[0]);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, expected);
  });
}

// The atomic_uint / atomic_float names on plain outputs.
TEST(ConformanceAtomics, AtomicUintAndFloatNames) {
  constexpr int64_t n = 2048;
  auto k = metal_kernel("atomic_type_names", {"x"}, {"fsum", "count"}, R"MSL(
    uint i = thread_position_in_grid.x;
    device atomic_float* f = (device atomic_float*)fsum;
    device atomic_uint* u = (device atomic_uint*)count;
    atomic_fetch_add_explicit(f, x[i], memory_order_relaxed);
    if (x[i] > 0.0f) atomic_fetch_add_explicit(u, 1u, memory_order_relaxed);
  )MSL");
  auto xv = random_values(n, -16, 16, 709);
  for (auto& v : xv) v = (std::floor(v * 8) + 0.5) / 8;
  auto x = Array::from_doubles(xv, {n}, float32, Device::cpu());
  double sum = 0, pos = 0;
  for (double v : xv) {
    sum += v;
    pos += v > 0;
  }
  run_kernel(k, {x}, atomic_call({{1}, {1}}, {float32, uint32}, n, 256, 0), [&](auto& o) {
    expect_equal(o[0], {sum});
    expect_equal(o[1], {pos});
  });
}

// atomic_store / atomic_load on device memory, ordered by threadgroup_barrier(mem_device) within
// a group; the last group is partial.
TEST(ConformanceAtomics, DeviceLoadStoreAcrossBarrier) {
  constexpr int64_t n = 300;
  auto k = metal_kernel("atomic_device_load_store", {"x"}, {"slots", "out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    uint lid = thread_position_in_threadgroup.x;
    uint count = threads_per_threadgroup.x;
    uint base = gid - lid;
    atomic_store_explicit(&slots[gid], x[gid] * 3u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_device);
    uint v = atomic_load_explicit(&slots[base + (lid + 1) % count], memory_order_relaxed);
    atomic_store_explicit(&out[gid], v + 1u, memory_order_relaxed);
  )MSL",
                        "", true, true);
  auto x = random_array({n}, uint32, 1, 1e6, 710, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> slots(n), ref(n);
  for (int64_t g = 0; g < n; ++g) {
    slots[g] = 3 * xv[g];
    int64_t base = g / 64 * 64, count = std::min<int64_t>(64, n - base);
    ref[g] = 3 * xv[base + (g - base + 1) % count] + 1;
  }
  run_kernel(k, {x}, atomic_call({{n}, {n}}, {uint32, uint32}, n, 64, 0), [&](auto& o) {
    expect_equal(o[0], slots);
    expect_equal(o[1], ref);
  });
}

// ---- threadgroup atomics ----------------------------------------------------------------------

TEST(ConformanceAtomics, ThreadgroupAtomics) {
  constexpr int64_t n = 512, tg = 128, groups = n / tg;
  auto k = metal_kernel("atomic_threadgroup", {"x"}, {"out"}, R"MSL(
    threadgroup atomic<int> bins[8];
    threadgroup atomic_uint total;
    threadgroup atomic_int hi;
    uint lid = thread_index_in_threadgroup;
    uint gid = thread_position_in_grid.x;
    uint group = threadgroup_position_in_grid.x;
    if (lid < 8) atomic_store_explicit(&bins[lid], 0, memory_order_relaxed);
    if (lid == 0) {
      atomic_store_explicit(&total, 0u, memory_order_relaxed);
      atomic_store_explicit(&hi, -1000000, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    int v = x[gid];
    atomic_fetch_add_explicit(&bins[v & 7], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&total, uint(v), memory_order_relaxed);
    atomic_fetch_max_explicit(&hi, v, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid < 8) out[group * 10 + lid] = atomic_load_explicit(&bins[lid], memory_order_relaxed);
    if (lid == 8) out[group * 10 + 8] = int(atomic_load_explicit(&total, memory_order_relaxed));
    if (lid == 9) out[group * 10 + 9] = atomic_load_explicit(&hi, memory_order_relaxed);
  )MSL");
  auto x = random_array({n}, int32, 0, 1000, 711, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(groups * 10, 0.0);
  for (int64_t g = 0; g < groups; ++g) {
    double total = 0, hi = -1000000;
    for (int64_t j = 0; j < tg; ++j) {
      int v = static_cast<int>(xv[g * tg + j]);
      ref[g * 10 + (v & 7)] += 1;
      total += v;
      hi = std::max(hi, double(v));
    }
    ref[g * 10 + 8] = total;
    ref[g * 10 + 9] = hi;
  }
  run_kernel(k, {x}, make_call({{groups, 10}}, {int32}, {n, 1, 1}, {tg, 1, 1}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

}  // namespace
