// CPU barrier/simd kernels as work-item loops (msl/regions.h): which kernels the splitter takes
// and why it leaves others to fibers, and Metal's semantics on the split path (early returns,
// partial groups and simdgroups, thread-dependent branches around simd functions, values of any
// declared type across barriers). The conformance suite runs on both paths: by default (split
// where possible) and again under ALLOY_CPU_SYNC=fibers (the ctest entry
// alloy_conformance_fibers).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "conformance/harness.h"
#include "msl/regions.h"
#include "msl/translate.h"

namespace {

using namespace conformance;

const alloy::msl::KernelEntry& translated(const std::string& src, alloy::msl::CpuSyncMode mode,
                                          alloy::msl::Translation& keep) {
  alloy::msl::TranslateOptions opt;
  opt.target = alloy::msl::Target::cpu;
  opt.cpu_sync = static_cast<int>(mode);
  keep = alloy::msl::translate(src, opt);
  return keep.kernels.at(0);
}

constexpr const char* kLib = R"MSL(
#include <metal_stdlib>
using namespace metal;
kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
              uint lid [[thread_position_in_threadgroup]],
              uint gid [[thread_position_in_grid]], uint n [[threads_per_threadgroup]]) {
  threadgroup float t[256];
  t[lid] = x[gid];
  BODY
  y[gid] = t[(lid + 1) % n];
}
)MSL";

std::string lib(const std::string& body) {
  std::string s = kLib;
  s.replace(s.find("BODY"), 4, body);
  return s;
}

TEST(CpuSplit, PathAndReason) {
  using alloy::msl::CpuSyncMode;
  alloy::msl::Translation tr;
  auto& a = translated(lib("threadgroup_barrier(mem_flags::mem_threadgroup);"),
                       CpuSyncMode::automatic, tr);
  EXPECT_TRUE(a.split);
  EXPECT_FALSE(a.fibers);
  EXPECT_EQ(a.sync_path, "split into work-item loops");

  auto& f =
      translated(lib("threadgroup_barrier(mem_flags::mem_threadgroup);"), CpuSyncMode::fibers, tr);
  EXPECT_FALSE(f.split);
  EXPECT_TRUE(f.fibers);
  EXPECT_NE(f.sync_path.find("ALLOY_CPU_SYNC=fibers"), std::string::npos);

  // A barrier under a thread-dependent condition cannot be split.
  auto& d = translated(lib("if (lid < 3) threadgroup_barrier(mem_flags::mem_threadgroup);"),
                       CpuSyncMode::split, tr);
  EXPECT_FALSE(d.split);
  EXPECT_NE(d.sync_path.find("thread-dependent"), std::string::npos) << d.sync_path;

  // ... nor one in a loop whose bound depends on the thread.
  auto& l = translated(
      lib("for (uint i = 0; i < lid; ++i) threadgroup_barrier(mem_flags::mem_threadgroup);"),
      CpuSyncMode::split, tr);
  EXPECT_FALSE(l.split);
  EXPECT_NE(l.sync_path.find("not threadgroup-uniform"), std::string::npos) << l.sync_path;

  // A uniform loop (kernel scalar / threadgroup size) around barriers is split.
  auto& u = translated(
      lib("for (uint s = n / 2; s > 0; s /= 2) { threadgroup_barrier(mem_flags::mem_threadgroup);"
          " if (lid < s) t[lid] += t[lid + s]; }"),
      CpuSyncMode::split, tr);
  EXPECT_TRUE(u.split) << u.sync_path;

  // A simd function in a conditionally evaluated operand.
  auto& c = translated(lib("float v = lid > 2 ? simd_sum(t[lid]) : 0.0f; t[lid] = v;"),
                       CpuSyncMode::split, tr);
  EXPECT_FALSE(c.split);
  EXPECT_NE(c.sync_path.find("conditionally evaluated"), std::string::npos) << c.sync_path;
}

// Early returns, partial groups (100 threads: simdgroups of 32, 32, 32, 4) and values of
// several declared types (auto, arrays, vectors) live across barriers.
TEST(CpuSplit, EarlyReturnPartialGroupsAndLiveValues) {
  auto k = metal_kernel("split_live", {"x"}, {"out"}, R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    auto scale = 2.0f;
    float pair[2] = {x[gid], x[gid] * scale};
    float2 v2 = float2(pair[0], pair[1]);
    threadgroup float sh[128];
    sh[lid] = v2.y;
    if (lid % 7 == 3) { out[gid] = -5.0f; return; }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = simd_sum(v2.x);
    uint lane = thread_index_in_simdgroup;
    if (lane % 2 == 0) {
      float odd_sum = simd_sum(pair[1]);
      total += odd_sum;
    }
    out[gid] = total + sh[lid];
  )MSL");
  constexpr int64_t n = 250, tg = 100;
  auto x = random_array({n}, float32, -1, 1, 9101, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t base = 0; base < n; base += tg) {
    int64_t size = std::min(tg, n - base);
    for (int64_t l = 0; l < size; ++l) {
      int64_t g = base + l;
      if (l % 7 == 3) {
        ref[g] = -5;
        continue;
      }
      int64_t sg = l / 32;
      double all = 0, even = 0;
      for (int64_t m = sg * 32; m < std::min(size, sg * 32 + 32); ++m) {
        if (m % 7 == 3) continue;  // returned: not an active lane
        all += xv[base + m];
        if ((m % 32) % 2 == 0) even += 2 * xv[base + m];
      }
      ref[g] = all + (l % 2 == 0 ? even : 0) + 2 * xv[g];
    }
  }
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {tg, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// A threadgroup tree reduction in a uniform loop; the loop variable and the group size are
// group values, the partial sums live in threadgroup memory.
TEST(CpuSplit, UniformLoopOfBarriers) {
  auto k = metal_kernel("split_tree", {"x"}, {"out"}, R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint n = threads_per_threadgroup.x;
    threadgroup float part[256];
    part[lid] = x[thread_position_in_grid.x];
    for (uint s = 128; s > 0; s /= 2) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (lid < s && lid + s < n) part[lid] += part[lid + s];
    }
    if (lid == 0) out[threadgroup_position_in_grid.x] = part[0];
  )MSL");
  constexpr int64_t n = 1000, tg = 256, groups = (n + tg - 1) / tg;
  auto x = random_array({n}, float32, -1, 1, 9102, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(groups, 0.0);
  for (int64_t g = 0; g < n; ++g) ref[g / tg] += xv[g];
  run_kernel(k, {x}, make_call({{groups}}, {float32}, {n, 1, 1}, {tg, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// Loops without barriers inside a split kernel run with the loop outermost (a group-level loop
// around a region per iteration, so the thread loop vectorises): strided loops with
// thread-dependent starts and trip counts (partial groups: the last iterations are masked),
// `<=` and signed variables, a thread-dependent bound, a step whose values wrap (run as
// written), a nested uniform loop, and a return inside an interchanged loop.
TEST(CpuSplit, InterchangedThreadLoops) {
  const std::string body = R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint tpg = threads_per_threadgroup.x;
    uint len = x_shape[0];
    out[gid] = -1.0f;
    float acc = 0.0f;
    for (uint i = lid; i < len; i += tpg) acc += x[i];
    for (int j = int(lid) - 5; j <= 7; j += 3) acc += float(j);
    for (uint k = 0; k < lid % 5; ++k) acc += 0.25f;
    uint wraps = 0;
    for (uint w = lid; w < 0xfffffff0u; w += 0x7fffffffu) wraps += 1;
    for (uint i = lid; i < 40; i += tpg)
      for (uint j = 0; j < 3; ++j) acc += x[(i * 3 + j) % len];
    for (uint i = lid; i < 64; i += 32) {
      if (x[i] > 0.95f) return;
    }
    float tot = acc + float(wraps);
    float ss = simd_sum(tot);
    out[gid] = tot + 0.5f * ss;
  )MSL";
  alloy::msl::Translation tr;
  const std::string lib_src = std::string(R"MSL(
#include <metal_stdlib>
using namespace metal;
kernel void k(device const float* x [[buffer(0)]], constant int* x_shape [[buffer(1)]],
              device float* out [[buffer(2)]],
              uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
              uint3 thread_position_in_grid [[thread_position_in_grid]],
              uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {)MSL") +
                              body + "}";
  auto& e = translated(lib_src, alloy::msl::CpuSyncMode::split, tr);
  ASSERT_TRUE(e.split) << e.sync_path;
  EXPECT_NE(tr.code.find("::alloy_split::advance"), std::string::npos);

  auto k = metal_kernel("split_interchange", {"x"}, {"out"}, body);
  constexpr int64_t n = 250, tg = 96, len = 250;
  auto x = random_array({n}, float32, -1, 1, 9103, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> tot(n, 0.0), ref(n, -1.0);
  std::vector<bool> live(n, true);
  for (int64_t base = 0; base < n; base += tg) {
    const int64_t size = std::min(tg, n - base);
    for (int64_t l = 0; l < size; ++l) {
      double acc = 0;
      for (int64_t i = l; i < len; i += size) acc += xv[i];
      for (int64_t j = l - 5; j <= 7; j += 3) acc += double(j);
      acc += 0.25 * double(l % 5);
      uint32_t wraps = 0;
      for (uint32_t w = uint32_t(l); w < 0xfffffff0u; w += 0x7fffffffu) ++wraps;
      for (int64_t i = l; i < 40; i += size)
        for (int64_t j = 0; j < 3; ++j) acc += xv[(i * 3 + j) % len];
      for (int64_t i = l; i < 64; i += 32)
        if (xv[i] > 0.95) live[base + l] = false;
      tot[base + l] = acc + double(wraps);
    }
    for (int64_t l = 0; l < size; ++l) {
      if (!live[base + l]) continue;
      double ss = 0;
      for (int64_t m = l / 32 * 32; m < std::min(size, l / 32 * 32 + 32); ++m)
        if (live[base + m]) ss += tot[base + m];
      ref[base + l] = tot[base + l] + 0.5 * ss;
    }
  }
  // On the CPU only: NVIDIA's ptxas (CUDA 13.0, optimising) miscompiles the wrapping `w` loop
  // (lanes 0, 1, 4, 5, ... count two iterations more; hand-written CUDA through CuPy does the
  // same, ptxas -O0 does not: scripts/experiments/wrap_loop.py, docs/msl-support.md "Known
  // failures"). SimdSumAfterDivergentLoops covers divergent loops before simd_sum on every device.
  KernelCall call = make_call({{n}}, {float32}, {n, 1, 1}, {tg, 1, 1});
  poison(call);
  call.device = Device::cpu();
  auto o = k({x}, call);
  eval(o);
  expect_close(o[0], ref, 1e-4, 1e-4);
}

// Loops with lane-dependent trip counts before simd_sum, with each lane's own total and the
// simdgroup sum written to separate outputs, without an early return and with one: on a GPU
// this tells a per-lane value computed wrong after the divergent loops from a simd_sum over the
// wrong lanes (lanes that are still running must all take part).
TEST(CpuSplit, SimdSumAfterDivergentLoops) {
  for (bool early : {false, true}) {
    SCOPED_TRACE(early ? "with early returns" : "no early return");
    const std::string body = std::string(R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint tpg = threads_per_threadgroup.x;
    tot_out[gid] = -1.0f;
    ss_out[gid] = -1.0f;
    float acc = 0.0f;
    for (uint k = 0; k < lid % 5; ++k) acc += 0.25f;
    uint wraps = 0;
    for (uint w = lid; w < 3 * tpg; w += 5) wraps += 1;
    for (uint i = lid; i < 40; i += tpg) acc += x[i % x_shape[0]];
    )MSL") + (early ? "for (uint i = lid; i < 64; i += 32) { if (x[i] > 0.95f) return; }" : "") +
                             R"MSL(
    float tot = acc + float(wraps);
    tot_out[gid] = tot;
    ss_out[gid] = simd_sum(tot);
  )MSL";
    auto k = metal_kernel(early ? "split_divergent_ret" : "split_divergent", {"x"},
                          {"tot_out", "ss_out"}, body);
    constexpr int64_t n = 250, tg = 96;
    auto x = random_array({n}, float32, -1, 1, 9103, Device::cpu());
    auto xv = x.to_doubles();
    std::vector<double> tot(n, -1.0), ss(n, -1.0);
    std::vector<bool> live(n, true);
    for (int64_t base = 0; base < n; base += tg) {
      const int64_t size = std::min(tg, n - base);
      for (int64_t l = 0; l < size; ++l) {
        double acc = 0.25 * double(l % 5);
        uint32_t wraps = 0;
        for (int64_t w = l; w < 3 * size; w += 5) ++wraps;
        for (int64_t i = l; i < 40; i += size) acc += xv[i % n];
        if (early)
          for (int64_t i = l; i < 64; i += 32)
            if (xv[i] > 0.95) live[base + l] = false;
        if (live[base + l]) tot[base + l] = f32(acc) + double(wraps);
      }
      for (int64_t l = 0; l < size; ++l) {
        if (!live[base + l]) continue;
        double sum = 0;
        for (int64_t m = l / 32 * 32; m < std::min(size, l / 32 * 32 + 32); ++m)
          if (live[base + m]) sum += tot[base + m];
        ss[base + l] = sum;
      }
    }
    run_kernel(k, {x}, make_call({{n}, {n}}, {float32, float32}, {n, 1, 1}, {tg, 1, 1}),
               [&](auto& o) {
                 {
                   SCOPED_TRACE("each lane's total");
                   expect_close(o[0], tot, 1e-4, 1e-4);
                 }
                 SCOPED_TRACE("simd_sum");
                 expect_close(o[1], ss, 1e-4, 1e-4);
               });
  }
}

// Regions under thread-dependent predicates run in blocks of up to 32 threads of one x row:
// whole blocks unmasked, empty ones skipped, mixed ones per thread (a 40x3 group, so blocks and
// simdgroups cross x rows; a partial last group; early returns). Loops with a compile-time trip
// count over a per-thread array stay in their region and are unrolled; a pointer computed from a
// template parameter (`x + gy * W`) is recomputed in each region rather than stored.
TEST(CpuSplit, MaskedBlocksAndConstantLoops) {
  const std::string body = R"MSL(
    uint lid = thread_index_in_threadgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint gx = thread_position_in_grid.x;
    uint gy = thread_position_in_grid.y;
    uint gid = gy * W + gx;
    const device float* row = x + gy * W;
    float st[PER];
    for (int i = 0; i < PER; ++i) st[i] = row[(gx + i) % W] * float(i + 1);
    if (lid % 11 == 5) { out[gid] = -7.0f; return; }
    float v = st[0] + st[PER - 1];
    if (sg == 1) { v = simd_sum(v); }
    float w = st[1];
    if (lid % 3 == 0) { w = simd_max(w); }
    float z = 0.0f;
    if (lid > 5000) { z = simd_sum(w); }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float acc = 0.0f;
    for (int i = 0; i < PER; ++i) acc += st[i];
    out[gid] = v + 2.0f * w + z + 0.5f * acc + row[0];
  )MSL";
  alloy::msl::Translation tr;
  const std::string lib_src = std::string(R"MSL(
#include <metal_stdlib>
using namespace metal;
constant uint W = 40;
constant int PER = 3;
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
              uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],
              uint2 thread_position_in_grid [[thread_position_in_grid]]) {)MSL") +
                              body + "}";
  auto& e = translated(lib_src, alloy::msl::CpuSyncMode::split, tr);
  ASSERT_TRUE(e.split) << e.sync_path;
  EXPECT_NE(tr.code.find("GCC unroll"), std::string::npos);
  EXPECT_EQ(tr.code.find("decltype(row)"), std::string::npos) << "row is stored per thread";

  auto k = metal_kernel("split_masked_blocks", {"x"}, {"out"}, body);
  constexpr int64_t w = 40, rows = 8, ty = 3, per = 3;
  auto x = random_array({rows * w}, float32, -1, 1, 9104, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(rows * w, 0.0);
  for (int64_t g0 = 0; g0 < rows; g0 += ty) {
    const int64_t gh = std::min(ty, rows - g0), size = gh * w;
    std::vector<double> v(size), wv(size), acc(size);
    auto at = [&](int64_t l) { return (g0 + l / w) * w + l % w; };
    for (int64_t l = 0; l < size; ++l) {
      const int64_t gx = l % w, gy = g0 + l / w;
      double st[per];
      for (int64_t i = 0; i < per; ++i) st[i] = xv[gy * w + (gx + i) % w] * double(i + 1);
      v[l] = st[0] + st[per - 1];
      wv[l] = st[1];
      acc[l] = st[0] + st[1] + st[2];
    }
    for (int64_t l = 0; l < size; ++l) {
      if (l % 11 == 5) {
        ref[at(l)] = -7;
        continue;
      }
      const int64_t sg = l / 32, end = std::min(size, sg * 32 + 32);
      double vv = v[l], ww = wv[l];
      if (sg == 1) {
        vv = 0;
        for (int64_t m = sg * 32; m < end; ++m)
          if (m % 11 != 5) vv += v[m];
      }
      if (l % 3 == 0) {
        ww = -1e300;
        for (int64_t m = sg * 32; m < end; ++m)
          if (m % 11 != 5 && m % 3 == 0) ww = std::max(ww, wv[m]);
      }
      ref[at(l)] = vv + 2 * ww + 0.5 * acc[l] + xv[(g0 + l / w) * w];
    }
  }
  run_kernel(k, {x},
             make_call({{rows * w}}, {float32}, {w, rows, 1}, {w, ty, 1},
                       {{"W", int(w)}, {"PER", int(per)}}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// A loop with literal bounds and at most 16 iterations and no loop inside stays inside its
// region, unrolled (a tiled matmul's `for (j = 0; j < 8; ++j) acc += as[y][j] * bs[j][x];`:
// one region per tile step, the thread loop vectorised across x with `acc` in a register),
// where it used to become one region per iteration; longer loops are still interchanged.
// Partial tiles in every dimension, `<=` with a step, and a 20-iteration loop after the last
// barrier; on both paths.
TEST(CpuSplit, SmallConstantLoopsStayInTheirRegion) {
  const std::string body = R"MSL(
    uint gx = thread_position_in_grid.x, gy = thread_position_in_grid.y;
    uint lx = thread_position_in_threadgroup.x, ly = thread_position_in_threadgroup.y;
    threadgroup float as[8][8];
    threadgroup float bs[8][8];
    float acc = 0.0f;
    for (uint t = 0; t < K; t += 8) {
      as[ly][lx] = (gy < M && t + lx < K) ? a[gy * K + t + lx] : 0.0f;
      bs[ly][lx] = (t + ly < K && gx < N) ? b[(t + ly) * N + gx] : 0.0f;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (uint j = 0; j < 8; ++j) acc += as[ly][j] * bs[j][lx];
      for (int q = 1; q <= 7; q += 3) acc += 0.001f * float(q) * as[ly][q];
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (uint r = 0; r < 20; ++r) acc += 0.01f * bs[r % 8][(lx + r) % 8];
    if (gx < N && gy < M) c[gy * N + gx] = acc;
  )MSL";
  alloy::msl::Translation tr;
  const std::string lib_src = std::string(R"MSL(
#include <metal_stdlib>
using namespace metal;
constant uint M = 20;
constant uint N = 28;
constant uint K = 21;
kernel void k(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
              device float* c [[buffer(2)]],
              uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
              uint3 thread_position_in_grid [[thread_position_in_grid]]) {)MSL") +
                              body + "}";
  auto& e = translated(lib_src, alloy::msl::CpuSyncMode::split, tr);
  ASSERT_TRUE(e.split) << e.sync_path;
  EXPECT_NE(tr.code.find("_Pragma(\"GCC unroll 16\") for (uint j = 0; j < 8; ++j)"),
            std::string::npos)
      << tr.code;
  EXPECT_NE(tr.code.find("_Pragma(\"GCC unroll 16\") for (int q = 1; q <= 7; q += 3)"),
            std::string::npos);
  EXPECT_EQ(tr.code.find("_Pragma(\"GCC unroll 16\") for (uint r"), std::string::npos);
  EXPECT_NE(tr.code.find("for (uint r = 0; r < 20; ++r)"), std::string::npos);

  auto k = metal_kernel("split_small_loops", {"a", "b"}, {"c"}, body);
  constexpr int64_t m = 20, n = 28, kd = 21;
  auto a = random_array({m * kd}, float32, -1, 1, 9105, Device::cpu());
  auto b = random_array({kd * n}, float32, -1, 1, 9106, Device::cpu());
  auto av = a.to_doubles(), bv = b.to_doubles();
  std::vector<double> ref(m * n, 0.0);
  for (int64_t y = 0; y < m; ++y)
    for (int64_t x = 0; x < n; ++x) {
      double acc = 0;
      const int64_t lx = x % 8;
      std::vector<double> last_b(64, 0.0);
      for (int64_t t = 0; t < kd; t += 8) {
        for (int64_t j = 0; j < 8; ++j) {
          const double av_j = t + j < kd ? av[y * kd + t + j] : 0.0;
          acc += av_j * (t + j < kd ? bv[(t + j) * n + x] : 0.0);
        }
        for (int64_t q = 1; q <= 7; q += 3)
          acc += 0.001 * double(q) * (t + q < kd ? av[y * kd + t + q] : 0.0);
        // bs of the last tile step, for the loop after it (the group's 8 columns)
        for (int64_t r = 0; r < 8; ++r)
          for (int64_t cx = 0; cx < 8; ++cx) {
            const int64_t gx = x - lx + cx;
            last_b[r * 8 + cx] = t + r < kd && gx < n ? bv[(t + r) * n + gx] : 0.0;
          }
      }
      for (int64_t r = 0; r < 20; ++r) acc += 0.01 * last_b[(r % 8) * 8 + (lx + r) % 8];
      ref[y * n + x] = acc;
    }
  run_kernel(k, {a, b},
             make_call({{m * n}}, {float32}, {32, 24, 1}, {8, 8, 1},
                       {{"M", int(m)}, {"N", int(n)}, {"K", int(kd)}}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

}  // namespace

namespace {

// A value a region only reads is not stored back to its per-thread array at the region's end
// (regions.cpp, Splitter::writes); every way a region can change one still stores it: a
// reference parameter, an address taken, a member, an increment, a macro of the header (whose
// names the statements do not show). Values changed only that way are neither recomputed per
// region nor kept once per group (they were: `float e = 0.25f;` changed by a macro became one
// group-wide value, `float a = x[gid];` passed to `thread float&` was recomputed from x).
TEST(CpuSplit, ValuesStoredBackOnlyWhereChanged) {
  const std::string header = R"MSL(
inline void bump(thread float& a, float d) { a += d; }
#define ADD_TO_E(v) e += (v)
)MSL";
  const std::string body = R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    float a = x[gid];
    float b = a * 2.0f;
    float c = a - 1.0f;
    float2 v = float2(a, b);
    uint cnt = lid;
    float e = 0.25f;
    float ro = a * 3.0f;
    threadgroup float sh[64];
    sh[lid] = a;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    bump(a, sh[(lid + 1) % 64]);
    thread float* pb = &b;
    *pb += 1.0f;
    v.y = v.x + 3.0f;
    cnt++;
    ADD_TO_E(ro);
    float r = c * 2.0f + ro;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = r + ro;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid] = a + b + v.y + float(cnt) + e + s + c + ro;
  )MSL";
  alloy::msl::Translation tr;
  const std::string lib_src = std::string(R"MSL(
#include <metal_stdlib>
using namespace metal;
)MSL") + header + R"MSL(
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint2 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
              uint2 thread_position_in_grid [[thread_position_in_grid]]) {)MSL" +
                              body + "}";
  auto& e = translated(lib_src, alloy::msl::CpuSyncMode::split, tr);
  ASSERT_TRUE(e.split) << e.sync_path;
  auto stores = [&](const std::string& name) {
    size_t count = 0;
    const std::string what = "[alloy_t.li], " + name + ");";
    for (size_t at = tr.code.find(what); at != std::string::npos; at = tr.code.find(what, at + 1))
      ++count;
    return count;
  };
  // Stored where declared and where changed (`ro`: the region with the macro), not where only
  // read (`s = r + ro`, the last region).
  EXPECT_EQ(stores("a"), 2u) << tr.code;
  EXPECT_EQ(stores("ro"), 2u) << tr.code;
  EXPECT_EQ(stores("s"), 1u) << tr.code;

  auto k = alloy::metal_kernel("split_store_back", {"x"}, {"out"}, body, header);
  constexpr int64_t n = 192, tg = 64;
  auto x = random_array({n}, float32, -1, 1, 9107, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t base = 0; base < n; base += tg) {
    for (int64_t l = 0; l < tg; ++l) {
      const int64_t g = base + l;
      double a = xv[g], b = 2 * a, c = a - 1, vy = a + 3, cnt = l + 1, ro = 3 * a;
      a += xv[base + (l + 1) % 64];
      b += 1;
      double ee = 0.25 + ro;
      double r = c * 2 + ro;
      double s = r + ro;
      ref[g] = a + b + vy + cnt + ee + s + c + ro;
    }
  }
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {tg, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
}

// Versioned regions (regions.cpp version_stmt, alloy_entry::cpu_region_v): a region whose buffer
// subscripts depend on the thread runs a copy in which g++ may take `C + lid.x` as contiguous
// where the subscript's value at each row's first thread is below 2^31, and the region as
// written elsewhere. Both must keep Metal's uint arithmetic: with `off` near UINT_MAX the
// subscript wraps inside a row (rows of the slow copy, indices that come back in range), with
// `off` = 0 every row takes the fast copy, with `off` = 2^31 + 5 none does. A thread returns
// inside the versioned region (the fast copy's own exit), groups are partial in x, and the last
// region runs after the return (masked: the slow copy).
TEST(CpuSplit, VersionedRegionsWrapLikeMetal) {
  const std::string body = R"MSL(
    uint lx = thread_position_in_threadgroup.x;
    uint ly = thread_position_in_threadgroup.y;
    uint gx = thread_position_in_grid.x;
    uint gy = thread_position_in_grid.y;
    uint w = threads_per_grid.x;
    uint o = off[0];
    threadgroup float sh[4][32];
    sh[ly][lx] = 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (gx == 37u && gy == 9u) { out[gy * w + gx] = -1.0f; return; }
    if (o + gy * 8u + lx < 2048u) sh[ly][lx] = x[o + gy * 8u + lx] + 0.25f * x[(o + gy * 8u + lx) ^ 1u];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint nx = threads_per_threadgroup.x;
    out[gy * w + gx] = sh[ly][lx] + 0.5f * sh[ly][(lx + 1) % nx];
  )MSL";
  alloy::msl::Translation tr;
  const std::string lib_src = std::string(R"MSL(
#include <metal_stdlib>
using namespace metal;
kernel void k(device const float* x [[buffer(0)]], device const uint* off [[buffer(1)]],
              device float* out [[buffer(2)]],
              uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
              uint3 thread_position_in_grid [[thread_position_in_grid]],
              uint3 threads_per_grid [[threads_per_grid]],
              uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {)MSL") +
                              body + "}";
  auto& e = translated(lib_src, alloy::msl::CpuSyncMode::split, tr);
  ASSERT_TRUE(e.split) << e.sync_path;
  EXPECT_NE(tr.code.find("::alloy_split::index_far(o + gy * 8u + lx)"), std::string::npos)
      << tr.code;
  EXPECT_NE(tr.code.find("::alloy_split::index_far((o + gy * 8u + lx) ^ 1u)"), std::string::npos);
  EXPECT_NE(tr.code.find("::alloy_split::index_far(gy * w + gx)"), std::string::npos);
  EXPECT_NE(tr.code.find("::alloy_split::index_part(gy * w"), std::string::npos);

  auto k = metal_kernel("split_versioned", {"x", "off"}, {"out"}, body);
  constexpr int64_t w = 40, h = 12, nxs = 2048;
  auto x = random_array({nxs}, float32, -1, 1, 9111, Device::cpu());
  auto xv = x.to_doubles();
  for (uint32_t off : {0u, 0xffffffffu - 40u, 0x80000005u, 0xfffffff0u}) {
    SCOPED_TRACE(off);
    auto offa = Array::from_doubles({double(off)}, {1}, uint32, Device::cpu());
    std::vector<double> ref(w * h);
    auto sh = [&](int64_t gx, int64_t gy) -> double {
      if (gx == 37 && gy == 9) return 0.0;
      const uint32_t lx = uint32_t(gx % 32);
      const uint32_t i = off + uint32_t(gy) * 8u + lx;
      return i < 2048u ? xv[i] + 0.25 * xv[i ^ 1u] : 0.0;
    };
    for (int64_t gy = 0; gy < h; ++gy)
      for (int64_t gx = 0; gx < w; ++gx) {
        const int64_t base = gx / 32 * 32, nx = std::min<int64_t>(32, w - base);
        ref[gy * w + gx] =
            gx == 37 && gy == 9 ? -1.0 : sh(gx, gy) + 0.5 * sh(base + (gx - base + 1) % nx, gy);
      }
    run_kernel(k, {x, offa}, make_call({{w * h}}, {float32}, {w, h, 1}, {32, 4, 1}),
               [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
  }
}

// Liveness of per-thread values (regions.cpp read_later / overwritten): a region stores a value
// back only where code after it may read it, and a region does not load a value it overwrites
// before reading it. Stored: a value read after the region (`live`), one changed under a
// condition before its last read (`cond`: a conditional assignment does not overwrite it), one
// read only at the top of the next iteration of a loop around barriers (`carry`), an operand
// read again outside its simd fold (`both`), the operands of simd functions evaluated where they
// are consumed (a shuffle: `shv`, `simd_broadcast_first`: `bf`), a fold's operand changed by an
// earlier region than the one that publishes it (`pre`). Not stored: a value nothing names after
// the region (`dead`), a simd fold's operand that the statement overwrites (`acc = simd_sum(acc);`,
// not loaded there either).
TEST(CpuSplit, ValuesStoredOnlyWhereReadLater) {
  const std::string body = R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    threadgroup float sh[64];
    threadgroup float sh2[64];
    float live = x[gid];
    float dead = x[gid] * 3.0f;
    float carry = x[gid] - 0.5f;
    float cond = x[gid] + 2.0f;
    float shv = x[gid] * 0.25f;
    float pre = x[gid] * 1.5f;
    float bf = x[gid] * 0.125f;
    sh[lid] = dead;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    live += sh[(lid + 1) % 64];
    dead = dead * 2.0f + live;
    sh2[lid] = dead;
    if (lid % 3 == 0) cond = 1.0f;
    pre += sh[(lid + 2) % 64];
    bf -= 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint t = 0; t < 3; ++t) {
      sh[lid] = carry;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      carry = carry * 0.5f + sh[(lid + 3) % 64];
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    pre = simd_sum(pre);
    bf = simd_broadcast_first(bf);
    float acc = sh2[(lid + 5) % 64] * live;
    acc = simd_sum(acc);
    float both = live - cond;
    both = simd_sum(both) + both;
    shv = simd_shuffle_xor(shv, 1u);
    out[gid] = acc + both + shv + cond + sh[lid] + sh2[lid] + pre + bf;
  )MSL";
  alloy::msl::Translation tr;
  const std::string lib_src = std::string(R"MSL(
#include <metal_stdlib>
using namespace metal;
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
              uint3 thread_position_in_grid [[thread_position_in_grid]]) {)MSL") +
                              body + "}";
  auto& e = translated(lib_src, alloy::msl::CpuSyncMode::split, tr);
  ASSERT_TRUE(e.split) << e.sync_path;
  auto count = [&](const std::string& what) {
    size_t c = 0;
    for (size_t at = tr.code.find(what); at != std::string::npos; at = tr.code.find(what, at + 1))
      ++c;
    return c;
  };
  auto stores = [&](const std::string& n) { return count("[alloy_t.li], " + n + ");"); };
  auto loads = [&](const std::string& n) { return count("::alloy_split::copy(" + n + ", "); };
  EXPECT_EQ(stores("dead"), 1u) << tr.code;  // where declared, not where last changed
  EXPECT_EQ(loads("dead"), 1u);
  EXPECT_EQ(stores("live"), 2u);
  EXPECT_EQ(stores("cond"), 2u);
  EXPECT_EQ(stores("carry"), 2u);  // declared, and changed at the loop's end
  EXPECT_EQ(stores("acc"), 1u);    // consumed (read by the last region), not published
  EXPECT_EQ(loads("acc"), 1u);     // by the last region only
  EXPECT_EQ(stores("both"), 2u);   // declared, and changed where consumed
  EXPECT_EQ(loads("both"), 2u);    // where consumed (`+ both`), and by the last region
  EXPECT_GE(loads("shv"), 2u);     // the shuffle's publishing region and the consuming one

  auto k = metal_kernel("split_liveness", {"x"}, {"out"}, body);
  constexpr int64_t n = 192, tg = 64;
  auto x = random_array({n}, float32, -1, 1, 9113, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t base = 0; base < n; base += tg) {
    std::vector<double> live(tg), sh(tg), sh2(tg), carry(tg), cond(tg), shv(tg), pre(tg);
    for (int64_t l = 0; l < tg; ++l) {
      live[l] = xv[base + l] + 3 * xv[base + (l + 1) % 64];
      sh2[l] = 3 * xv[base + l] * 2 + live[l];
      cond[l] = l % 3 == 0 ? 1.0 : xv[base + l] + 2;
      carry[l] = xv[base + l] - 0.5;
      shv[l] = 0.25 * xv[base + (l ^ 1)];
      pre[l] = 1.5 * xv[base + l] + 3 * xv[base + (l + 2) % 64];
    }
    for (int t = 0; t < 3; ++t) {
      sh = carry;
      for (int64_t l = 0; l < tg; ++l) carry[l] = carry[l] * 0.5 + sh[(l + 3) % 64];
    }
    for (int64_t l = 0; l < tg; ++l) {
      double acc = 0, both = 0, pres = 0;
      const int64_t first = l / 32 * 32;
      for (int64_t m = first; m < first + 32; ++m) {
        acc += sh2[(m + 5) % 64] * live[m];
        both += live[m] - cond[m];
        pres += pre[m];
      }
      const double bf = 0.125 * xv[base + first] - 1;
      ref[base + l] =
          acc + both + (live[l] - cond[l]) + shv[l] + cond[l] + sh[l] + sh2[l] + pres + bf;
    }
  }
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {tg, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-4, 1e-4); });
}

// A value that a region inside an interchanged loop (a thread-dependent start: `acc`) or inside
// a group-level loop with a uniform header (`acc2`) changes and that only the loop's next
// iteration reads (nothing names it after the loop): stored at the region's end.
TEST(CpuSplit, ValuesReadInTheNextIterationOfInterchangedLoops) {
  const std::string body = R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint base = gid - lid;
    uint reps = threads_per_threadgroup.x / 16;
    threadgroup float sh[64];
    sh[lid] = x[gid];
    float acc = x[gid] * 0.5f;
    float acc2 = x[gid] + 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = lid; i < 192; i += 64) {
      out[base * 3 + i] = acc + sh[(i + 1) % 64];
      acc = acc * 0.75f + x[(i + 7) % 192];
    }
    for (uint j = 0; j < reps; ++j) {
      out2[gid * 4 + j] = acc2;
      acc2 = acc2 * 0.5f + x[(gid + j) % 192];
    }
  )MSL";
  alloy::msl::Translation tr;
  const std::string lib_src = std::string(R"MSL(
#include <metal_stdlib>
using namespace metal;
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              device float* out2 [[buffer(2)]],
              uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
              uint3 thread_position_in_grid [[thread_position_in_grid]],
              uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {)MSL") +
                              body + "}";
  auto& e = translated(lib_src, alloy::msl::CpuSyncMode::split, tr);
  ASSERT_TRUE(e.split) << e.sync_path;
  EXPECT_NE(tr.code.find("::alloy_split::advance"), std::string::npos) << tr.code;

  auto k = metal_kernel("split_loop_carried", {"x"}, {"out", "out2"}, body);
  constexpr int64_t n = 192, tg = 64;
  auto x = random_array({n}, float32, -1, 1, 9117, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n * 3), ref2(n * 4);
  for (int64_t g = 0; g < n; ++g) {
    const int64_t l = g % tg, base = g - l;
    double acc = 0.5 * xv[g], acc2 = xv[g] + 1;
    for (int64_t i = l; i < 192; i += 64) {
      ref[base * 3 + i] = acc + xv[base + (i + 1) % 64];
      acc = acc * 0.75 + xv[(i + 7) % 192];
    }
    for (int64_t j = 0; j < 4; ++j) {
      ref2[g * 4 + j] = acc2;
      acc2 = acc2 * 0.5 + xv[(g + j) % 192];
    }
  }
  run_kernel(k, {x}, make_call({{n * 3}, {n * 4}}, {float32, float32}, {n, 1, 1}, {tg, 1, 1}),
             [&](auto& o) {
               expect_close(o[0], ref, 1e-5, 1e-5);
               expect_close(o[1], ref2, 1e-5, 1e-5);
             });
}

// simd folds of whole groups (every lane active: state::fold's chains, eight, four, two and one
// simdgroups at a time) for group sizes that take each combination: the sum within float32's
// rounding of the float64 sum, and on the CPU exactly the float32 sum in lane order (the order
// the fiber path folds in); the maximum exactly.
TEST(CpuSplit, SimdFoldsOfWholeGroupsInLaneOrder) {
  auto k = metal_kernel("split_folds", {"x"}, {"sum", "mx"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    float v = x[gid];
    float s = simd_sum(v);
    float m = simd_max(v);
    sum[gid] = s;
    mx[gid] = m;
  )MSL");
  for (int tg : {32, 64, 96, 128, 224, 256, 480, 1024}) {
    SCOPED_TRACE(tg);
    const int n = 2 * tg;
    auto x = random_array({n}, float32, -1, 1, 9120 + tg, Device::cpu());
    auto xv = x.to_doubles();
    std::vector<double> sum64(n), sum32(n), mx(n);
    for (int64_t sg = 0; sg < n; sg += 32) {
      double s = 0, m = xv[sg];
      float f = static_cast<float>(xv[sg]);
      for (int64_t l = 0; l < 32; ++l) {
        s += xv[sg + l];
        m = std::max(m, xv[sg + l]);
        if (l) f += static_cast<float>(xv[sg + l]);
      }
      for (int64_t l = 0; l < 32; ++l) {
        sum64[sg + l] = s;
        sum32[sg + l] = f;
        mx[sg + l] = m;
      }
    }
    KernelCall call = make_call({{n}, {n}}, {float32, float32}, {n, 1, 1}, {tg, 1, 1});
    run_kernel(k, {x}, call, [&](auto& o) {
      expect_close(o[0], sum64, 1e-5, 1e-5);
      expect_equal(o[1], mx);
    });
    poison(call);
    call.device = Device::cpu();
    auto o = k({x}, call);
    eval(o);
    expect_equal(o[0], sum32);
  }
}

// A region that can only have an effect at x = 0 of its group (`if (lane == 0) out[...] = s;`
// after a simd_sum, with statements before it that only compute values) runs those threads
// alone (cpu_region_x0); one with a store for every thread before its `if` (`out2[gid] = ...`)
// runs all of them. Partial groups (50 threads in x, groups of 32), and an x = 0 thread that
// returned (its row's value stays unwritten: poisoned).
TEST(CpuSplit, RegionsOnlyTheFirstThreadOfARowAffects) {
  const std::string body = R"MSL(
    uint lane = thread_position_in_threadgroup.x;
    uint row = thread_position_in_grid.y;
    uint gx = thread_position_in_grid.x;
    uint gid = row * 50 + gx;
    float v = x[gid];
    if (row == 5 && lane == 0) return;
    float s = simd_sum(v);
    float t2 = s * 2.0f + x[gid];
    if (lane == 0) out[row * 2 + gx / 32] = t2;
    threadgroup_barrier(mem_flags::mem_none);
    float m = simd_max(v);
    out2[gid] = m + v;
    if (lane == 0) out3[row * 2 + gx / 32] = m;
  )MSL";
  alloy::msl::Translation tr;
  const std::string lib_src = std::string(R"MSL(
#include <metal_stdlib>
using namespace metal;
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              device float* out2 [[buffer(2)]], device float* out3 [[buffer(3)]],
              uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
              uint3 thread_position_in_grid [[thread_position_in_grid]]) {)MSL") +
                              body + "}";
  auto& e = translated(lib_src, alloy::msl::CpuSyncMode::split, tr);
  ASSERT_TRUE(e.split) << e.sync_path;
  size_t x0 = 0;
  for (size_t at = tr.code.find("cpu_region_x0"); at != std::string::npos;
       at = tr.code.find("cpu_region_x0", at + 1))
    ++x0;
  EXPECT_EQ(x0, 1u) << tr.code;

  auto k = metal_kernel("split_first_x", {"x"}, {"out", "out2", "out3"}, body);
  constexpr int w = 50, rows = 6;
  auto x = random_array({w * rows}, float32, -1, 1, 9127, Device::cpu());
  auto xv = x.to_doubles();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> ref(rows * 2, nan), ref2(w * rows, nan), ref3(rows * 2, nan);
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < 2; ++g) {
      const int b = g * 32, end = std::min(w, b + 32);
      double s = 0, m = -1e30;
      for (int c = b; c < end; ++c) {
        if (r == 5 && c == b) continue;  // returned
        s += xv[r * w + c];
        m = std::max(m, xv[r * w + c]);
      }
      for (int c = b; c < end; ++c)
        if (!(r == 5 && c == b)) ref2[r * w + c] = m + xv[r * w + c];
      if (r == 5) continue;
      ref[r * 2 + g] = s * 2 + xv[r * w + b];
      ref3[r * 2 + g] = m;
    }
  run_kernel(k, {x},
             make_call({{rows * 2}, {w * rows}, {rows * 2}}, {float32, float32, float32},
                       {w, rows, 1}, {32, 1, 1}),
             [&](auto& o) {
               expect_close(o[0], ref, 1e-5, 1e-5);
               expect_close(o[1], ref2, 1e-6, 1e-6);
               expect_close(o[2], ref3, 1e-6, 1e-6);
             });
}

// A macro of the header that reads a per-thread value without the body naming it (`e`): with
// macros in the body every value a region changes is stored back.
TEST(CpuSplit, ValuesReadByMacrosAreStored) {
  const std::string header = "#define STORE_E(i) out[i] = e\n";
  const std::string body = R"MSL(
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    threadgroup float sh[64];
    float e = x[gid];
    sh[lid] = e;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    e += sh[(lid + 1) % 64];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    STORE_E(gid);
  )MSL";
  auto k = metal_kernel("split_macro_reads", {"x"}, {"out"}, body, header);
  constexpr int64_t n = 192, tg = 64;
  auto x = random_array({n}, float32, -1, 1, 9119, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int64_t g = 0; g < n; ++g) ref[g] = xv[g] + xv[g - g % tg + (g % tg + 1) % tg];
  run_kernel(k, {x}, make_call({{n}}, {float32}, {n, 1, 1}, {tg, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

}  // namespace

namespace {

// The prelude's 512-bit vector preference (cpu/target.h) does not outlive a precompiled prelude
// (a `#pragma GCC target` inside a PCH is not in effect after it, its macros are): a CPU
// translation sets it again right after the prelude's headers, before any code of the kernel,
// under the prelude's macro; a CUDA translation has no such line.
TEST(CpuSplit, WideVectorPreferenceIsSetAgainAfterThePrelude) {
  const std::string src = lib("threadgroup_barrier(mem_flags::mem_threadgroup);");
  for (auto mode : {alloy::msl::CpuSyncMode::split, alloy::msl::CpuSyncMode::fibers}) {
    alloy::msl::Translation tr;
    translated(src, mode, tr);
    const std::string again =
        "#include \"entry.h\"\n#ifdef ALLOY_CPU_WIDE_VECTORS\n#pragma GCC reset_options\n"
        "#pragma GCC target(\"prefer-vector-width=512\")\n#endif\n";
    const size_t at = tr.code.find(again);
    ASSERT_NE(at, std::string::npos) << tr.code.substr(0, 400);
    EXPECT_LT(at, tr.code.find("namespace metal {"));
  }
  alloy::msl::TranslateOptions opt;
  opt.target = alloy::msl::Target::cuda;
  EXPECT_EQ(alloy::msl::translate(src, opt).code.find("prefer-vector-width"), std::string::npos);
}

}  // namespace
