// Conformance: the kernel attributes MLX declares when a body mentions them, with Metal's values
// on 1-, 2- and 3-D grids, including non-uniform (partial) threadgroups at the grid's edges:
// threads_per_threadgroup is the partial size there, dispatch_threads_per_threadgroup the
// dispatched one. MLX dispatches min(threadgroup, grid) per dimension.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "alloy/library.h"
#include "conformance/harness.h"
#include "kernel/library.h"

namespace {
using namespace conformance;

int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// ---- 3-D grid with partial groups in every dimension -------------------------------------------

TEST(ConformanceAttributes, Grid3DPartialThreadgroups) {
  constexpr int GX = 10, GY = 6, GZ = 3, TX = 8, TY = 4, TZ = 2, K = 31;
  auto k = metal_kernel("attr_grid3d", {"x"}, {"out"}, R"MSL(
    uint3 p = thread_position_in_grid;
    uint row = p.x + threads_per_grid.x * (p.y + threads_per_grid.y * p.z);
    device int* o = out + row * 31;
    int zero = x[row] > 2.0f ? 1 : 0;   // x < 1: keeps the input used
    uint3 tpg = threads_per_grid;
    uint3 gs = grid_size;
    uint3 tpitg = thread_position_in_threadgroup;
    uint3 tgpig = threadgroup_position_in_grid;
    uint3 tptg = threads_per_threadgroup;
    uint3 dtptg = dispatch_threads_per_threadgroup;
    uint3 tgpg = threadgroups_per_grid;
    uint3 origin = grid_origin;
    o[0] = p.x + zero; o[1] = p.y; o[2] = p.z;
    o[3] = tpg.x; o[4] = tpg.y; o[5] = tpg.z;
    o[6] = gs.x; o[7] = gs.y; o[8] = gs.z;
    o[9] = tpitg.x; o[10] = tpitg.y; o[11] = tpitg.z;
    o[12] = tgpig.x; o[13] = tgpig.y; o[14] = tgpig.z;
    o[15] = tptg.x; o[16] = tptg.y; o[17] = tptg.z;
    o[18] = dtptg.x; o[19] = dtptg.y; o[20] = dtptg.z;
    o[21] = tgpg.x; o[22] = tgpg.y; o[23] = tgpg.z;
    o[24] = threads_per_simdgroup;
    o[25] = thread_execution_width;
    o[26] = dispatch_simdgroups_per_threadgroup;
    o[27] = simdgroups_per_threadgroup;
    o[28] = origin.x; o[29] = origin.y; o[30] = origin.z;
  )MSL");
  int n = GX * GY * GZ;
  auto x = random_array({n}, float32, -1, 1, 1001, Device::cpu());
  int G[3] = {GX, GY, GZ}, T[3] = {TX, TY, TZ};
  std::vector<double> ref;
  for (int z = 0; z < GZ; ++z)
    for (int y = 0; y < GY; ++y)
      for (int xx = 0; xx < GX; ++xx) {
        int p[3] = {xx, y, z}, gpos[3], local[3], gsize[3];
        for (int d = 0; d < 3; ++d) {
          gpos[d] = p[d] / T[d];
          local[d] = p[d] % T[d];
          gsize[d] = std::min(T[d], G[d] - gpos[d] * T[d]);
        }
        int threads = gsize[0] * gsize[1] * gsize[2];
        std::vector<double> row = {double(xx), double(y), double(z)};
        for (int d = 0; d < 3; ++d) row.push_back(G[d]);
        for (int d = 0; d < 3; ++d) row.push_back(G[d]);
        for (int d = 0; d < 3; ++d) row.push_back(local[d]);
        for (int d = 0; d < 3; ++d) row.push_back(gpos[d]);
        for (int d = 0; d < 3; ++d) row.push_back(gsize[d]);
        for (int d = 0; d < 3; ++d) row.push_back(T[d]);
        for (int d = 0; d < 3; ++d) row.push_back(ceil_div(G[d], T[d]));
        row.insert(row.end(), {32, 32, double(ceil_div(TX * TY * TZ, 32)),
                               double(ceil_div(threads, 32)), 0, 0, 0});
        ref.insert(ref.end(), row.begin(), row.end());
      }
  run_kernel(k, {x}, make_call({{n, K}}, {int32}, {GX, GY, GZ}, {TX, TY, TZ}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"thread_position_in_grid.x",
                  ".y",
                  ".z",
                  "threads_per_grid.x",
                  ".y",
                  ".z",
                  "grid_size.x",
                  ".y",
                  ".z",
                  "thread_position_in_threadgroup.x",
                  ".y",
                  ".z",
                  "threadgroup_position_in_grid.x",
                  ".y",
                  ".z",
                  "threads_per_threadgroup.x",
                  ".y",
                  ".z",
                  "dispatch_threads_per_threadgroup.x",
                  ".y",
                  ".z",
                  "threadgroups_per_grid.x",
                  ".y",
                  ".z",
                  "threads_per_simdgroup",
                  "thread_execution_width",
                  "dispatch_simdgroups_per_threadgroup",
                  "simdgroups_per_threadgroup",
                  "grid_origin.x",
                  ".y",
                  ".z"},
                 0, 0);
  });
}

// ---- linear indices, simdgroups and quadgroups --------------------------------------------------

// Uniform 2-D groups of 8 x 6 = 48 threads: linear index x fastest, simdgroups of 32 + 16.
TEST(ConformanceAttributes, LinearIndicesIn2DGroups) {
  constexpr int GX = 16, GY = 12, TX = 8, TY = 6, K = 8;
  auto k = metal_kernel("attr_linear_2d", {"x"}, {"out"}, R"MSL(
    uint2 p = uint2(thread_position_in_grid.xy);
    uint row = p.x + 16u * p.y;
    device int* o = out + row * 8;
    o[0] = thread_index_in_threadgroup + (x[row] > 2.0f ? 1 : 0);
    o[1] = thread_index_in_simdgroup;
    o[2] = simdgroup_index_in_threadgroup;
    o[3] = simdgroups_per_threadgroup;
    o[4] = thread_index_in_quadgroup;
    o[5] = quadgroup_index_in_threadgroup;
    o[6] = quadgroups_per_threadgroup;
    o[7] = dispatch_quadgroups_per_threadgroup;
  )MSL");
  auto x = random_array({GX * GY}, float32, -1, 1, 1011, Device::cpu());
  std::vector<double> ref;
  for (int y = 0; y < GY; ++y)
    for (int xx = 0; xx < GX; ++xx) {
      int lid = xx % TX + TX * (y % TY);
      ref.insert(ref.end(), {double(lid), double(lid % 32), double(lid / 32), 2.0, double(lid % 4),
                             double(lid / 4), 12.0, 12.0});
    }
  run_kernel(k, {x}, make_call({{GX * GY, K}}, {int32}, {GX, GY, 1}, {TX, TY, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"thread_index_in_threadgroup", "thread_index_in_simdgroup",
                  "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
                  "thread_index_in_quadgroup", "quadgroup_index_in_threadgroup",
                  "quadgroups_per_threadgroup", "dispatch_quadgroups_per_threadgroup"},
                 0, 0);
  });
}

// 1-D grid of 90 in groups of 40: the edge group has 10 threads.
TEST(ConformanceAttributes, PartialEdgeGroup1D) {
  constexpr int N = 90, TG = 40, K = 10;
  auto k = metal_kernel("attr_partial_1d", {"x"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    device int* o = out + gid * 10;
    o[0] = thread_index_in_threadgroup + (x[gid] > 2.0f ? 1 : 0);
    o[1] = threads_per_threadgroup.x;
    o[2] = dispatch_threads_per_threadgroup.x;
    o[3] = simdgroups_per_threadgroup;
    o[4] = dispatch_simdgroups_per_threadgroup;
    o[5] = simdgroup_index_in_threadgroup;
    o[6] = thread_index_in_simdgroup;
    o[7] = quadgroups_per_threadgroup;
    o[8] = dispatch_quadgroups_per_threadgroup;
    o[9] = threadgroups_per_grid.x;
  )MSL");
  auto x = random_array({N}, float32, -1, 1, 1021, Device::cpu());
  std::vector<double> ref;
  for (int g = 0; g < N; ++g) {
    int lid = g % TG, size = std::min(TG, N - g / TG * TG);
    ref.insert(ref.end(),
               {double(lid), double(size), double(TG), double(ceil_div(size, 32)),
                double(ceil_div(TG, 32)), double(lid / 32), double(lid % 32),
                double(ceil_div(size, 4)), double(ceil_div(TG, 4)), double(ceil_div(N, TG))});
  }
  run_kernel(k, {x}, make_call({{N, K}}, {int32}, {N, 1, 1}, {TG, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"thread_index_in_threadgroup", "threads_per_threadgroup.x",
                  "dispatch_threads_per_threadgroup.x", "simdgroups_per_threadgroup",
                  "dispatch_simdgroups_per_threadgroup", "simdgroup_index_in_threadgroup",
                  "thread_index_in_simdgroup", "quadgroups_per_threadgroup",
                  "dispatch_quadgroups_per_threadgroup", "threadgroups_per_grid.x"},
                 0, 0);
  });
}

// A (256, 1, 1) threadgroup on a (4, 1, 1) grid is dispatched as a (4, 1, 1) group (MLX).
TEST(ConformanceAttributes, ThreadgroupClampedToGrid) {
  constexpr int N = 4;
  auto k = metal_kernel("attr_tg_clamped", {"x"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    out[3 * gid] = threads_per_threadgroup.x + (x[gid] > 2.0f ? 1 : 0);
    out[3 * gid + 1] = dispatch_threads_per_threadgroup.x;
    out[3 * gid + 2] = threadgroups_per_grid.x;
  )MSL");
  auto x = random_array({N}, float32, -1, 1, 1031, Device::cpu());
  std::vector<double> ref;
  for (int g = 0; g < N; ++g) ref.insert(ref.end(), {4, 4, 1});
  run_kernel(k, {x}, make_call({{N, 3}}, {int32}, {N, 1, 1}, {256, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"threads_per_threadgroup.x", "dispatch_threads_per_threadgroup.x",
                  "threadgroups_per_grid.x"},
                 0, 0);
  });
}

// Kernels without a bounds check rely on exactly `grid` threads running (non-uniform edge
// groups): every element of a 1000-element output is written once, none past its end.
TEST(ConformanceAttributes, ExactlyGridThreadsRun) {
  constexpr int N = 1000;
  auto k = metal_kernel("attr_exact_grid", {"x"}, {"out", "count"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    out[gid] = x[gid] + 1.0f;
    atomic_fetch_add_explicit((device atomic_uint*)count, 1u, memory_order_relaxed);
  )MSL");
  auto x = random_array({N}, float32, -1, 1, 1041, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(N);
  for (int i = 0; i < N; ++i) ref[i] = xv[i] + 1;
  auto call = make_call({{N}, {1}}, {float32, uint32}, {N, 1, 1}, {256, 1, 1});
  call.init_value = 0;
  run_kernel(k, {x}, call, [&](auto& o) {
    expect_close(o[0], ref, 1e-6, 1e-6);
    expect_equal(o[1], {double(N)});
  });
}

// Vector-typed attributes of every 2- and 3-component spelling read one component at a time: the
// CUDA translation declares them as plain structs of their components (prelude/entry.h,
// alloy_attr_<spelling>), with the element type's arithmetic (int and short components are
// signed: `tg.x - 3` is negative in the first groups). 2-D grid with partial groups in both
// dimensions.
TEST(ConformanceAttributes, ComponentOnlyVectorSpellings) {
  constexpr int GX = 13, GY = 7, TX = 4, TY = 3, K = 9;
  Library lib = compile_library(R"(
#include <metal_stdlib>
using namespace metal;
kernel void f(device const float* x [[buffer(0)]], device int* out [[buffer(1)]],
              uint3 gid [[thread_position_in_grid]],
              const ushort2 lid [[thread_position_in_threadgroup]],
              int3 tg [[threadgroup_position_in_grid]],
              uint2 tpg [[threads_per_grid]],
              short2 sl [[thread_position_in_threadgroup]],
              ushort3 tgs [[threads_per_threadgroup]],
              int2 gpg [[threadgroups_per_grid]],
              short3 tgp [[threadgroup_position_in_grid]]) {
  uint row = gid.y * tpg.x + gid.x;
  device int* o = out + row * 9;
  o[0] = int(gid.x) + (x[row] > 2.0f ? 1 : 0);
  o[1] = gid.y + gid.z;
  o[2] = lid.x * 100 + lid.y;
  o[3] = tg.x - 3;
  o[4] = tg.y * tg.z;
  o[5] = sl.y - 2;
  o[6] = tgs.x * 10 + tgs.y;
  o[7] = gpg.y - 10;
  o[8] = tgp.y - tgp.x;
}
)");
  constexpr int n = GX * GY;
  auto xv = random_values(n, -1, 1, 1051);
  std::vector<double> ref;
  for (int y = 0; y < GY; ++y)
    for (int xx = 0; xx < GX; ++xx) {
      int lx = xx % TX, ly = y % TY, gx = xx / TX, gy = y / TY;
      int sx = std::min(TX, GX - gx * TX), sy = std::min(TY, GY - gy * TY);
      ref.insert(ref.end(),
                 {double(xx), double(y), double(lx * 100 + ly), double(gx - 3), 0.0, double(ly - 2),
                  double(sx * 10 + sy), double(ceil_div(GY, TY) - 10), double(gy - gx)});
    }
  for_each_device([&](Device dev) {
    auto x = Array::from_doubles(xv, {n}, float32, dev);
    LibraryCall c;
    c.threads = Dims{GX, GY, 1};
    c.group_size = Dims{TX, TY, 1};
    c.device = dev;
    auto o = lib("f", {x, KernelArg::output({n, K}, int32)}, c)[0];
    expect_table(o, ref,
                 {"gid.x", "gid.y + gid.z", "lid", "tg.x - 3", "tg.y * tg.z", "sl.y - 2", "tgs",
                  "gpg.y - 10", "tgp.y - tgp.x"},
                 0, 0);
  });
  std::string why = kernel::compile_library_cubin(lib, "sm_90");
  if (!why.empty()) std::printf("NVRTC compile skipped: %s\n", why.c_str());
}

}  // namespace
