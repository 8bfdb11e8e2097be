// Conformance: SIMD-group functions. Reductions, votes, broadcasts, shuffles and prefix scans on
// scalars and vectors, in partial simdgroups: a grid of 200 threads in groups of 80 has
// simdgroups of 32, 32, 16 lanes, then an edge group of 40 threads (32 + 8 lanes). Inactive lanes
// are excluded from reductions and scans; lanes that read an inactive lane (undefined in Metal)
// are masked by the kernel itself and not compared.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// ---- simdgroup layout of a 1-D dispatch -----------------------------------------------------

constexpr int kN = 200, kTg = 80;  // groups of 80 = 32 + 32 + 16 lanes; edge group 40 = 32 + 8

struct Lanes {
  int first;  // global index of lane 0 of the thread's simdgroup
  int size;   // active lanes in it
  int lane;
};
Lanes lanes_of(int g, int n = kN, int tg = kTg) {
  int group = g / tg, lid = g % tg, gsize = std::min(tg, n - group * tg), sg = lid / 32;
  return {group * tg + sg * 32, std::min(32, gsize - sg * 32), lid % 32};
}

constexpr double kUndef = -1000;  // what the kernels write where Metal leaves a shuffle undefined

// ---- 2-D and 3-D groups with partial edges ----------------------------------------------------

// Metal numbers a partial group's threads over its actual size (lid = x + w * (y + h * z)), and
// simdgroups are 32 consecutive lids. Grid (13, 11, 3) in groups of (8, 8, 2): groups partial in
// x (5 wide), in y (3 high) and in z (1 deep), full ones of 128 threads (4 simdgroups).
TEST(ConformanceSimd, PartialGroupsIn2DAnd3D) {
  constexpr int GX = 13, GY = 11, GZ = 3, TX = 8, TY = 8, TZ = 2, K = 5;
  auto k = metal_kernel("simd_partial_3d", {"x"}, {"out"}, R"MSL(
    uint3 p = thread_position_in_grid;
    uint row = p.x + threads_per_grid.x * (p.y + threads_per_grid.y * p.z);
    float v = x[row];
    device float* o = out + row * 5;
    o[0] = simd_sum(v);
    o[1] = simd_prefix_exclusive_sum(v);
    o[2] = float(thread_index_in_simdgroup);
    o[3] = float(simdgroup_index_in_threadgroup);
    o[4] = float(thread_index_in_threadgroup);
  )MSL");
  const int n = GX * GY * GZ;
  auto x = random_array({n}, float32, -1, 1, 871, Device::cpu());
  auto xv = x.to_doubles();
  const int G[3] = {GX, GY, GZ}, T[3] = {TX, TY, TZ};
  std::vector<double> ref(size_t(n) * K);
  // Per group: its threads in lid order, then sums per simdgroup.
  for (int gz = 0; gz * TZ < GZ; ++gz)
    for (int gy = 0; gy * TY < GY; ++gy)
      for (int gx = 0; gx * TX < GX; ++gx) {
        int gp[3] = {gx, gy, gz}, size[3];
        for (int d = 0; d < 3; ++d) size[d] = std::min(T[d], G[d] - gp[d] * T[d]);
        int threads = size[0] * size[1] * size[2];
        std::vector<int> row_of(threads);
        for (int lid = 0; lid < threads; ++lid) {
          int lx = lid % size[0], ly = lid / size[0] % size[1], lz = lid / (size[0] * size[1]);
          int px = gx * TX + lx, py = gy * TY + ly, pz = gz * TZ + lz;
          row_of[lid] = px + GX * (py + GY * pz);
        }
        for (int lid = 0; lid < threads; ++lid) {
          int first = lid / 32 * 32, last = std::min(threads, first + 32);
          double sum = 0, prefix = 0;
          for (int j = first; j < last; ++j) sum += xv[row_of[j]];
          for (int j = first; j < lid; ++j) prefix += xv[row_of[j]];
          double* r = &ref[size_t(row_of[lid]) * K];
          r[0] = sum;
          r[1] = prefix;
          r[2] = lid % 32;
          r[3] = lid / 32;
          r[4] = lid;
        }
      }
  run_kernel(k, {x}, make_call({{n, K}}, {float32}, {GX, GY, GZ}, {TX, TY, TZ}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"simd_sum", "simd_prefix_exclusive_sum", "thread_index_in_simdgroup",
                  "simdgroup_index_in_threadgroup", "thread_index_in_threadgroup"},
                 1e-5, 1e-5);
  });
}

// ---- reductions ------------------------------------------------------------------------------

TEST(ConformanceSimd, FloatReductionsPartialSimdgroups) {
  auto k = metal_kernel("simd_float_reductions", {"x"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    float v = x[gid];
    out[4 * gid + 0] = simd_sum(v);
    out[4 * gid + 1] = simd_product(v);
    out[4 * gid + 2] = simd_min(v);
    out[4 * gid + 3] = simd_max(v);
  )MSL");
  auto x = random_array({kN}, float32, 0.8, 1.25, 801, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int g = 0; g < kN; ++g) {
    auto L = lanes_of(g);
    double s = 0, p = 1, lo = 1e9, hi = -1e9;
    for (int j = L.first; j < L.first + L.size; ++j) {
      s += xv[j];
      p *= xv[j];
      lo = std::min(lo, xv[j]);
      hi = std::max(hi, xv[j]);
    }
    for (double v : {s, p, lo, hi}) ref.push_back(v);
  }
  run_kernel(k, {x}, make_call({{kN, 4}}, {float32}, {kN, 1, 1}, {kTg, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref, {"simd_sum", "simd_product", "simd_min", "simd_max"}, 1e-5, 1e-5);
  });
}

TEST(ConformanceSimd, IntegerReductionsPartialSimdgroups) {
  auto k = metal_kernel("simd_int_reductions", {"x", "u"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    int v = x[gid];
    uint w = u[gid];
    device int64_t* o = out + 8 * gid;
    o[0] = simd_sum(v);
    o[1] = simd_min(v);
    o[2] = simd_max(v);
    o[3] = simd_and(w);
    o[4] = simd_or(w);
    o[5] = simd_xor(w);
    o[6] = simd_product(uint(v & 3) + 1u);
    o[7] = simd_sum(w >> 8);
  )MSL");
  auto x = random_array({kN}, int32, -1e6, 1e6, 802, Device::cpu());
  auto u = random_array({kN}, uint32, 1, 4294967295.0, 803, Device::cpu());
  auto xv = x.to_vector<int32_t>();
  auto uv = u.to_vector<uint32_t>();
  std::vector<double> ref;
  for (int g = 0; g < kN; ++g) {
    auto L = lanes_of(g);
    int64_t s = 0;
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    uint32_t a = 0xFFFFFFFFu, orv = 0, xo = 0, prod = 1, s8 = 0;
    for (int j = L.first; j < L.first + L.size; ++j) {
      s += xv[j];
      lo = std::min(lo, xv[j]);
      hi = std::max(hi, xv[j]);
      a &= uv[j];
      orv |= uv[j];
      xo ^= uv[j];
      prod *= uint32_t(xv[j] & 3) + 1u;
      s8 += uv[j] >> 8;
    }
    for (double v : {double(s), double(lo), double(hi), double(a), double(orv), double(xo),
                     double(prod), double(s8)})
      ref.push_back(v);
  }
  run_kernel(k, {x, u}, make_call({{kN, 8}}, {int64}, {kN, 1, 1}, {kTg, 1, 1}), [&](auto& o) {
    expect_table(
        o[0], ref,
        {"simd_sum(int)", "simd_min(int)", "simd_max(int)", "simd_and(uint)", "simd_or(uint)",
         "simd_xor(uint)", "simd_product(uint) wrapping", "simd_sum(uint)"},
        0, 0);
  });
}

// ---- votes and broadcasts -------------------------------------------------------------------

TEST(ConformanceSimd, VotesBroadcastsPartialSimdgroups) {
  auto k = metal_kernel("simd_votes_broadcasts", {"x"}, {"out", "ballot"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    float v = x[gid];
    bool p = v > -0.9f;
    bool q = v > 0.95f;
    out[5 * gid + 0] = simd_all(p) ? 1.0f : 0.0f;
    out[5 * gid + 1] = simd_any(q) ? 1.0f : 0.0f;
    out[5 * gid + 2] = simd_broadcast(v, 5);
    out[5 * gid + 3] = simd_broadcast_first(v);
    out[5 * gid + 4] = simd_is_first() ? 1.0f : 0.0f;
    ballot[gid] = static_cast<uint64_t>(simd_ballot(p));
  )MSL");
  auto x = random_array({kN}, float32, -1, 1, 811, Device::cpu());
  auto xv = x.to_vector<float>();
  std::vector<double> ref;
  std::vector<uint64_t> rballot;
  for (int g = 0; g < kN; ++g) {
    auto L = lanes_of(g);
    bool all = true, any = false;
    uint64_t b = 0;
    for (int j = 0; j < L.size; ++j) {
      float v = xv[L.first + j];
      all &= v > -0.9f;
      any |= v > 0.95f;
      if (v > -0.9f) b |= uint64_t(1) << j;
    }
    for (double v : {double(all), double(any), double(xv[L.first + 5]), double(xv[L.first]),
                     L.lane == 0 ? 1.0 : 0.0})
      ref.push_back(v);
    rballot.push_back(b);
  }
  run_kernel(k, {x}, make_call({{kN, 5}, {kN}}, {float32, uint64}, {kN, 1, 1}, {kTg, 1, 1}),
             [&](auto& o) {
               expect_table(o[0], ref,
                            {"simd_all", "simd_any", "simd_broadcast(v, 5)", "simd_broadcast_first",
                             "simd_is_first"},
                            0, 0);
               auto got = o[1].template to_vector<uint64_t>();
               ASSERT_EQ(got.size(), rballot.size());
               for (int g = 0; g < kN; ++g)
                 EXPECT_EQ(got[g], rballot[g]) << "simd_ballot, thread " << g;
             });
}

// ---- shuffles -------------------------------------------------------------------------------

// Where each shuffle reads from; -1 where the source lane is inactive (Metal: undefined).
// up/down do not wrap: lanes whose source is outside 0..31 keep their own value.
int shuffle_source(const Lanes& L, int kind) {
  int lane = L.lane, size = L.size;
  auto active = [&](int s) { return s < size ? s : -1; };
  switch (kind) {
    case 0:
      return (lane * 5 + 3) % size;  // simd_shuffle
    case 1:
      return lane < 3 ? lane : lane - 3;  // shuffle_up(3)
    case 2:
      return lane + 5 >= 32 ? lane : active(lane + 5);  // shuffle_down(5)
    case 3:
      return active(lane ^ 6);  // shuffle_xor(6)
    case 4:
      return active((lane + 32 - 7) % 32);  // rotate_up(7)
    default:
      return active((lane + 9) % 32);  // rotate_down(9)
  }
}

constexpr const char* kShuffleMasks = R"MSL(
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint size = min(32u, threads_per_threadgroup.x - sg * 32u);  // active lanes here
    ushort src = ushort((lane * 5u + 3u) % size);
    bool down_ok = lane + 5u >= 32u || lane + 5u < size;
    bool xor_ok = (lane ^ 6u) < size;
    bool rup_ok = ((lane + 32u - 7u) % 32u) < size;
    bool rdown_ok = ((lane + 9u) % 32u) < size;
)MSL";

TEST(ConformanceSimd, ShufflesPartialSimdgroups) {
  auto k = metal_kernel("simd_shuffles", {"x"}, {"out"}, std::string(kShuffleMasks) + R"MSL(
    uint gid = thread_position_in_grid.x;
    float v = x[gid];
    const float undef = -1000.0f;
    float d = simd_shuffle_down(v, 5);
    float xr = simd_shuffle_xor(v, 6);
    float ru = simd_shuffle_rotate_up(v, 7);
    float rd = simd_shuffle_rotate_down(v, 9);
    out[6 * gid + 0] = simd_shuffle(v, src);
    out[6 * gid + 1] = simd_shuffle_up(v, 3);
    out[6 * gid + 2] = down_ok ? d : undef;
    out[6 * gid + 3] = xor_ok ? xr : undef;
    out[6 * gid + 4] = rup_ok ? ru : undef;
    out[6 * gid + 5] = rdown_ok ? rd : undef;
  )MSL");
  auto x = random_array({kN}, float32, -1, 1, 821, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int g = 0; g < kN; ++g) {
    auto L = lanes_of(g);
    for (int kind = 0; kind < 6; ++kind) {
      int s = shuffle_source(L, kind);
      ref.push_back(s < 0 ? kUndef : xv[L.first + s]);
    }
  }
  run_kernel(k, {x}, make_call({{kN, 6}}, {float32}, {kN, 1, 1}, {kTg, 1, 1}), [&](auto& o) {
    expect_table(
        o[0], ref,
        {"simd_shuffle", "simd_shuffle_up(3)", "simd_shuffle_down(5)", "simd_shuffle_xor(6)",
         "simd_shuffle_rotate_up(7)", "simd_shuffle_rotate_down(9)"},
        0, 0);
  });
}

// The same functions on vectors (float4, int2) and a reduction of a vector.
TEST(ConformanceSimd, VectorOperandsPartialSimdgroups) {
  auto k = metal_kernel("simd_vectors", {"x", "ix"}, {"out"}, std::string(kShuffleMasks) + R"MSL(
    uint gid = thread_position_in_grid.x;
    float f = x[gid];
    float4 v = float4(f, 2.0f * f, -f, 1.0f);
    int2 w = int2(ix[gid], -ix[gid]);
    float4 s = simd_sum(v);
    int2 m = simd_max(w);
    float4 d = simd_shuffle_down(v, 5);
    int2 b = simd_broadcast(w, 2);
    float2 e = simd_prefix_exclusive_sum(v.xy);
    int2 r = simd_shuffle_rotate_down(w, 9);
    float4 sh = simd_shuffle(v, src);
    device float* o = out + 12 * gid;
    o[0] = s.y;
    o[1] = s.w;
    o[2] = float(m.x);
    o[3] = float(m.y);
    o[4] = down_ok ? d.z : -1000.0f;
    o[5] = float(b.y);
    o[6] = e.x;
    o[7] = e.y;
    o[8] = rdown_ok ? float(r.x) : -1000.0f;
    o[9] = sh.x;
    o[10] = sh.y;
    o[11] = simd_min(v).z;
  )MSL");
  auto x = random_array({kN}, float32, -1, 1, 831, Device::cpu());
  auto ix = random_array({kN}, int32, -1000, 1000, 832, Device::cpu());
  auto xv = x.to_doubles(), iv = ix.to_doubles();
  std::vector<double> ref;
  for (int g = 0; g < kN; ++g) {
    auto L = lanes_of(g);
    double s = 0, mx = -1e9, mneg = -1e9, pre = 0, mn = 1e9;
    for (int j = L.first; j < L.first + L.size; ++j) {
      s += xv[j];
      mx = std::max(mx, iv[j]);
      mneg = std::max(mneg, -iv[j]);
      mn = std::min(mn, -xv[j]);
    }
    for (int j = L.first; j < L.first + L.lane; ++j) pre += xv[j];
    int d = shuffle_source(L, 2), r = shuffle_source(L, 5), sh = shuffle_source(L, 0);
    double row[12] = {2 * s,
                      double(L.size),
                      mx,
                      mneg,
                      d < 0 ? kUndef : -xv[L.first + d],
                      -iv[L.first + 2],
                      pre,
                      2 * pre,
                      r < 0 ? kUndef : iv[L.first + r],
                      xv[L.first + sh],
                      2 * xv[L.first + sh],
                      mn};
    ref.insert(ref.end(), row, row + 12);
  }
  run_kernel(k, {x, ix}, make_call({{kN, 12}}, {float32}, {kN, 1, 1}, {kTg, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"simd_sum(float4).y", "simd_sum(float4).w", "simd_max(int2).x",
                  "simd_max(int2).y", "simd_shuffle_down(float4).z", "simd_broadcast(int2).y",
                  "simd_prefix_exclusive_sum(float2).x", "simd_prefix_exclusive_sum(float2).y",
                  "simd_shuffle_rotate_down(int2).x", "simd_shuffle(float4).x",
                  "simd_shuffle(float4).y", "simd_min(float4).z"},
                 1e-5, 1e-5);
  });
}

// ---- prefix scans ---------------------------------------------------------------------------

TEST(ConformanceSimd, PrefixScansPartialSimdgroups) {
  auto k = metal_kernel("simd_prefix", {"x", "ix"}, {"out", "iout"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    float v = x[gid];
    int w = ix[gid];
    out[4 * gid + 0] = simd_prefix_inclusive_sum(v);
    out[4 * gid + 1] = simd_prefix_exclusive_sum(v);
    out[4 * gid + 2] = simd_prefix_inclusive_product(v);
    out[4 * gid + 3] = simd_prefix_exclusive_product(v);
    iout[3 * gid + 0] = simd_prefix_inclusive_sum(w);
    iout[3 * gid + 1] = simd_prefix_exclusive_sum(w);
    iout[3 * gid + 2] = int(simd_prefix_exclusive_sum(uint(w & 7)));
  )MSL");
  auto x = random_array({kN}, float32, 0.8, 1.25, 841, Device::cpu());
  auto ix = random_array({kN}, int32, -1e6, 1e6, 842, Device::cpu());
  auto xv = x.to_doubles();
  auto iv = ix.to_vector<int32_t>();
  std::vector<double> ref, iref;
  for (int g = 0; g < kN; ++g) {
    auto L = lanes_of(g);
    double s = 0, p = 1;
    int64_t is = 0;
    int u = 0;
    for (int j = L.first; j < g; ++j) {
      s += xv[j];
      p *= xv[j];
      is += iv[j];
      u += iv[j] & 7;
    }
    for (double v : {s + xv[g], s, p * xv[g], p}) ref.push_back(v);
    for (double v : {double(is + iv[g]), double(is), double(u)}) iref.push_back(v);
  }
  run_kernel(
      k, {x, ix}, make_call({{kN, 4}, {kN, 3}}, {float32, int32}, {kN, 1, 1}, {kTg, 1, 1}),
      [&](auto& o) {
        expect_table(o[0], ref,
                     {"inclusive_sum", "exclusive_sum", "inclusive_product", "exclusive_product"},
                     1e-5, 1e-5);
        expect_table(o[1], iref,
                     {"inclusive_sum(int)", "exclusive_sum(int)", "exclusive_sum(uint)"}, 0, 0);
      });
}

// ---- inactive lanes from an early return ----------------------------------------------------

// Lanes 0..2 of every simdgroup return before the simd functions: they are inactive, so the sum
// skips them, lane 3 is the first active lane.
TEST(ConformanceSimd, LanesThatReturnedAreInactive) {
  constexpr int n = 256;
  auto k = metal_kernel("simd_after_return", {"x"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    uint lane = thread_index_in_simdgroup;
    if (lane < 3u) {
      out[3 * gid] = -1.0f;
      out[3 * gid + 1] = -1.0f;
      out[3 * gid + 2] = -1.0f;
      return;
    }
    float v = x[gid];
    out[3 * gid] = simd_sum(v);
    out[3 * gid + 1] = simd_broadcast_first(v);
    out[3 * gid + 2] = simd_is_first() ? 1.0f : 0.0f;
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 851, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref;
  for (int g = 0; g < n; ++g) {
    int lane = g % 32, first = g - lane;
    if (lane < 3) {
      ref.insert(ref.end(), {-1, -1, -1});
      continue;
    }
    double s = 0;
    for (int j = first + 3; j < first + 32; ++j) s += xv[j];
    ref.insert(ref.end(), {s, xv[first + 3], lane == 3 ? 1.0 : 0.0});
  }
  run_kernel(k, {x}, make_call({{n, 3}}, {float32}, {n, 1, 1}, {64, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref, {"simd_sum", "simd_broadcast_first", "simd_is_first"}, 1e-5, 1e-5);
  });
}

// ---- MLX's 64-bit and bool shuffle overloads ---------------------------------------------------

TEST(ConformanceSimd, MlxShuffleDown64BitAndBool) {
  auto k =
      metal_kernel("simd_shuffle_64", {"x"}, {"u", "s", "b"}, std::string(kShuffleMasks) + R"MSL(
    uint gid = thread_position_in_grid.x;
    uint delta = 5;
    uint64_t big = (uint64_t(x[gid]) << 32) | uint64_t(gid);
    int64_t sb = -int64_t(big >> 1);
    bool flag = (x[gid] & 1u) != 0u;
    uint64_t d = simd_shuffle_down(big, delta);
    int64_t e = simd_shuffle_down(sb, delta);
    bool f = simd_shuffle_down(flag, delta);
    u[gid] = down_ok ? d : 0ul;
    s[gid] = down_ok ? e : 0l;
    b[gid] = down_ok ? (f ? 1 : 0) : -1;
  )MSL");
  auto x = random_array({kN}, uint32, 1, 4294967295.0, 861, Device::cpu());
  auto xv = x.to_vector<uint32_t>();
  run_kernel(k, {x}, make_call({{kN}, {kN}, {kN}}, {uint64, int64, int32}, {kN, 1, 1}, {kTg, 1, 1}),
             [&](auto& o) {
               auto u = o[0].template to_vector<uint64_t>();
               auto s = o[1].template to_vector<int64_t>();
               auto b = o[2].template to_vector<int32_t>();
               for (int g = 0; g < kN; ++g) {
                 auto L = lanes_of(g);
                 int src = shuffle_source(L, 2);
                 if (src < 0) {
                   EXPECT_EQ(u[g], 0u) << g;
                   EXPECT_EQ(s[g], 0) << g;
                   EXPECT_EQ(b[g], -1) << g;
                   continue;
                 }
                 int j = L.first + src;
                 uint64_t big = (uint64_t(xv[j]) << 32) | uint64_t(j);
                 EXPECT_EQ(u[g], big) << "uint64_t, thread " << g;
                 EXPECT_EQ(s[g], -int64_t(big >> 1)) << "int64_t, thread " << g;
                 EXPECT_EQ(b[g], int(xv[j] & 1u)) << "bool, thread " << g;
               }
             });
}

// ---- half and bfloat through a dtype template argument ----------------------------------------

TEST(ConformanceSimd, HalfAndBfloatOperands) {
  auto k = metal_kernel("simd_typed", {"x"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    T v = x[gid];
    device float* o = out + 5 * gid;
    o[0] = float(simd_max(v));
    o[1] = float(simd_min(v));
    o[2] = float(simd_shuffle_xor(v, 1));
    o[3] = float(simd_broadcast(v, 0));
    o[4] = simd_sum(float(v));
  )MSL");
  constexpr int n = 256;
  for (Dtype T : {float16, bfloat16}) {
    SCOPED_TRACE(std::string(dtype_name(T)));
    auto x = random_array({n}, T, -4, 4, 871, Device::cpu());
    auto xv = x.to_doubles();
    std::vector<double> ref;
    for (int g = 0; g < n; ++g) {
      int first = g - g % 32;
      double hi = -1e9, lo = 1e9, s = 0;
      for (int j = first; j < first + 32; ++j) {
        hi = std::max(hi, xv[j]);
        lo = std::min(lo, xv[j]);
        s += xv[j];
      }
      ref.insert(ref.end(), {hi, lo, xv[g ^ 1], xv[first], s});
    }
    run_kernel(k, {x}, make_call({{n, 5}}, {float32}, {n, 1, 1}, {128, 1, 1}, {{"T", T}}),
               [&](auto& o) {
                 expect_table(o[0], ref,
                              {"simd_max(T)", "simd_min(T)", "simd_shuffle_xor(T)",
                               "simd_broadcast(T)", "simd_sum(float(T))"},
                              1e-5, 1e-5);
               });
  }
}

// Reductions in half precision itself (order of the additions unspecified: looser tolerance).
TEST(ConformanceSimd, HalfSum) {
  constexpr int n = 256;
  auto k = metal_kernel("simd_half_sum", {"x"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    half v = x[gid];
    out[gid] = simd_sum(v);
  )MSL");
  auto x = random_array({n}, float16, 0.5, 1, 881, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(n);
  for (int g = 0; g < n; ++g) {
    int first = g - g % 32;
    for (int j = first; j < first + 32; ++j) ref[g] += xv[j];
  }
  run_kernel(k, {x}, make_call({{n}}, {float16}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-2, 0); });
}

}  // namespace
