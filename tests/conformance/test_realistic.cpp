// Conformance: realistic kernels of the kind MLX users write with mx.fast.metal_kernel. The MLX
// docs' first example, online softmax (from -INFINITY, simd_max/simd_sum + threadgroup memory),
// layer norm, a block prefix scan (simd_prefix_* + threadgroup memory), a histogram with
// threadgroup and device atomics, a 4-bit quantized GEMV (MLX's packing: 8 values per uint32,
// per-group scale and bias) with simd_sum, a tiled transpose through threadgroup memory with 2-D
// threadgroups, and a half/bfloat reduction through a dtype template argument.
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

// ---- the MLX docs' example --------------------------------------------------------------------

// docs/src/dev/custom_metal_kernels.rst: float16 input, T = float32.
TEST(ConformanceRealistic, DocsMyexp) {
  auto k = metal_kernel("myexp", {"inp"}, {"out"}, R"MSL(
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
  )MSL");
  auto a = random_array({4, 16}, float16, -2, 2, 1201, Device::cpu());
  auto av = a.to_doubles();
  std::vector<double> ref(av.size());
  for (size_t i = 0; i < av.size(); ++i) ref[i] = std::exp(av[i]);
  ref = round_to(float16, ref);
  run_kernel(k, {a}, make_call({{4, 16}}, {float16}, {64, 1, 1}, {256, 1, 1}, {{"T", float32}}),
             [&](auto& o) { expect_close(o[0], ref, 1e-3, 1e-3); });
}

// ---- softmax ----------------------------------------------------------------------------------

// One threadgroup of 128 threads per row; every thread keeps an online (max, sum) starting from
// (-INFINITY, 0), so its first update computes exp(-INFINITY) and threads without elements
// contribute exp(-INFINITY - max) = 0.
constexpr const char* kSoftmaxBody = R"MSL(
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint nsg = simdgroups_per_threadgroup;
    int tpt = int(threads_per_threadgroup.x);
    int cols = x_shape[1];
    const device float* in = x + row * cols;
    device float* o = out + row * cols;
    float m = -INFINITY;
    float s = 0.0f;
    for (int j = int(lid); j < cols; j += tpt) {
      float v = in[j];
      float mn = max(m, v);
      s = s * exp(m - mn) + exp(v - mn);
      m = mn;
    }
    float sm = simd_max(m);
    s = simd_sum(s * exp(m - sm));
    threadgroup float tg_m[32];
    threadgroup float tg_s[32];
    if (lane == 0) {
      tg_m[sg] = sm;
      tg_s[sg] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float M = -INFINITY;
    for (uint k = 0; k < nsg; ++k) M = max(M, tg_m[k]);
    float S = 0.0f;
    for (uint k = 0; k < nsg; ++k) S += tg_s[k] * exp(tg_m[k] - M);
    float inv = 1.0f / S;
    for (int j = int(lid); j < cols; j += tpt) o[j] = exp(in[j] - M) * inv;
)MSL";

std::vector<double> softmax_rows(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> r(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, x[i * cols + j]);
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[i * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) r[i * cols + j] = std::exp(x[i * cols + j] - m) / s;
  }
  return r;
}

TEST(ConformanceRealistic, SoftmaxOnline) {
  auto k = metal_kernel("softmax_online", {"x"}, {"out"}, kSoftmaxBody);
  // 1000 columns: every thread has elements; 100: threads 100..127 have none.
  for (int64_t cols : {1000, 100}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    constexpr int64_t rows = 6;
    auto x = random_array({rows, cols}, float32, -8, 8, 1211 + cols, Device::cpu());
    auto ref = softmax_rows(x.to_doubles(), rows, cols);
    run_kernel(k, {x}, make_call({{rows, cols}}, {float32}, {int(rows) * 128, 1, 1}, {128, 1, 1}),
               [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-7); });
  }
}

// The same kernel with the fast math mode (MLX's fast softmax relies on exp(-INF) == 0 there too).
TEST(ConformanceRealistic, SoftmaxOnlineFastMath) {
  auto k = metal_kernel("softmax_online_fast", {"x"}, {"out"}, kSoftmaxBody, "", true, false,
                        {{"math_mode", "fast"}});
  constexpr int64_t rows = 4, cols = 100;
  auto x = random_array({rows, cols}, float32, -8, 8, 1221, Device::cpu());
  auto ref = softmax_rows(x.to_doubles(), rows, cols);
  run_kernel(k, {x}, make_call({{rows, cols}}, {float32}, {int(rows) * 128, 1, 1}, {128, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-3, 1e-6); });
}

// ---- layer norm -------------------------------------------------------------------------------

TEST(ConformanceRealistic, LayerNorm) {
  auto k = metal_kernel("layer_norm", {"x", "w", "b", "eps"}, {"out"}, R"MSL(
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint nsg = simdgroups_per_threadgroup;
    int tpt = int(threads_per_threadgroup.x);
    int cols = x_shape[1];
    const device T* in = x + row * cols;
    threadgroup float partial[32];
    float s = 0.0f;
    for (int j = int(lid); j < cols; j += tpt) s += float(in[j]);
    s = simd_sum(s);
    if (lane == 0) partial[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint k = 0; k < nsg; ++k) total += partial[k];
    float mean = total / float(cols);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = 0.0f;
    for (int j = int(lid); j < cols; j += tpt) {
      float d = float(in[j]) - mean;
      v += d * d;
    }
    v = simd_sum(v);
    if (lane == 0) partial[sg] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float var = 0.0f;
    for (uint k = 0; k < nsg; ++k) var += partial[k];
    var /= float(cols);
    float inv = metal::precise::rsqrt(var + eps);
    for (int j = int(lid); j < cols; j += tpt)
      out[row * cols + j] = static_cast<T>((float(in[j]) - mean) * inv * float(w[j]) + float(b[j]));
  )MSL");
  constexpr int64_t rows = 8, cols = 768;
  for (Dtype T : {float32, float16}) {
    SCOPED_TRACE(std::string(dtype_name(T)));
    auto x = random_array({rows, cols}, T, -3, 5, 1231, Device::cpu());
    auto w = random_array({cols}, T, 0.5, 1.5, 1232, Device::cpu());
    auto b = random_array({cols}, T, -0.5, 0.5, 1233, Device::cpu());
    auto xv = x.to_doubles(), wv = w.to_doubles(), bv = b.to_doubles();
    double eps = static_cast<float>(1e-5);
    std::vector<double> ref(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j) mean += xv[i * cols + j];
      mean /= cols;
      for (int64_t j = 0; j < cols; ++j) var += std::pow(xv[i * cols + j] - mean, 2);
      var /= cols;
      for (int64_t j = 0; j < cols; ++j)
        ref[i * cols + j] = (xv[i * cols + j] - mean) / std::sqrt(var + eps) * wv[j] + bv[j];
    }
    double tol = T == float32 ? 1e-5 : 3e-3;
    run_kernel(k, {x, w, b, Array(1e-5f)},
               make_call({{rows, cols}}, {T}, {int(rows) * 256, 1, 1}, {256, 1, 1}, {{"T", T}}),
               [&](auto& o) { expect_close(o[0], ref, tol, tol); });
  }
}

// ---- prefix scan ------------------------------------------------------------------------------

// Inclusive and exclusive scans of each threadgroup's block: simd_prefix_inclusive_sum inside
// simdgroups, simd totals scanned by the first simdgroup through threadgroup memory. 1000
// elements in groups of 256: the last group has 232 threads (7 full simdgroups + 8 lanes).
TEST(ConformanceRealistic, BlockPrefixScan) {
  constexpr int64_t n = 1000, tg = 256;
  auto k = metal_kernel("block_prefix_scan", {"x"}, {"incl", "excl"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint nsg = simdgroups_per_threadgroup;
    threadgroup int sg_totals[32];
    int v = x[gid];
    int in_simd = simd_prefix_inclusive_sum(v);
    int total = simd_sum(v);
    if (simd_is_first()) sg_totals[sg] = total;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
      int t = lane < nsg ? sg_totals[lane] : 0;
      sg_totals[lane] = simd_prefix_exclusive_sum(t);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    incl[gid] = in_simd + sg_totals[sg];
    excl[gid] = in_simd - v + sg_totals[sg];
  )MSL");
  auto x = random_array({n}, int32, -1000, 1000, 1241, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> incl(n), excl(n);
  for (int64_t base = 0; base < n; base += tg) {
    double acc = 0;
    for (int64_t g = base; g < std::min(n, base + tg); ++g) {
      excl[g] = acc;
      acc += xv[g];
      incl[g] = acc;
    }
  }
  run_kernel(k, {x}, make_call({{n}, {n}}, {int32, int32}, {n, 1, 1}, {tg, 1, 1}), [&](auto& o) {
    expect_equal(o[0], incl);
    expect_equal(o[1], excl);
  });
}

// ---- histogram --------------------------------------------------------------------------------

// Per-threadgroup histogram in threadgroup atomics, merged into the device histogram with
// atomic_outputs. 20000 values in groups of 256: the last group has 32 threads.
TEST(ConformanceRealistic, HistogramWithAtomics) {
  constexpr int64_t n = 20000, bins = 64;
  auto k = metal_kernel("histogram_atomics", {"x"}, {"hist"}, R"MSL(
    threadgroup atomic_uint local[64];
    uint lid = thread_index_in_threadgroup;
    uint gid = thread_position_in_grid.x;
    uint tpt = threads_per_threadgroup.x;
    for (uint b = lid; b < 64; b += tpt) atomic_store_explicit(&local[b], 0u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&local[x[gid]], 1u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint b = lid; b < 64; b += tpt) {
      uint c = atomic_load_explicit(&local[b], memory_order_relaxed);
      if (c > 0) atomic_fetch_add_explicit(&hist[b], c, memory_order_relaxed);
    }
  )MSL",
                        "", true, /*atomic_outputs=*/true);
  auto x = random_array({n}, int32, 0, bins, 1251, Device::cpu());
  std::vector<double> ref(bins, 0.0);
  for (double v : x.to_doubles()) ref[static_cast<int>(v)] += 1;
  auto call = make_call({{bins}}, {uint32}, {n, 1, 1}, {256, 1, 1});
  call.init_value = 0;
  run_kernel(k, {x}, call, [&](auto& o) { expect_equal(o[0], ref); });
}

// ---- quantized GEMV ---------------------------------------------------------------------------

// MLX's affine 4-bit format: 8 values per uint32 (value e in bits 4e..4e+3), groups of 64
// values with a scale and a bias: w = scale * q + bias. One simdgroup per output row.
TEST(ConformanceRealistic, QuantizedGemv4Bit) {
  auto k = metal_kernel("qgemv_4bit", {"w", "scales", "biases", "x"}, {"out"}, R"MSL(
    uint lane = thread_index_in_simdgroup;
    uint row = thread_position_in_grid.x / 32;
    int K = x_shape[0];
    int words = K / 8;
    int groups = K / GROUP;
    const device uint32_t* wr = w + row * words;
    float acc = 0.0f;
    for (int wi = int(lane); wi < words; wi += 32) {
      uint32_t packed = wr[wi];
      int g = (wi * 8) / GROUP;
      float scale = float(scales[row * groups + g]);
      float bias = float(biases[row * groups + g]);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float q = float((packed >> (4 * e)) & 0xFu);
        acc += (scale * q + bias) * float(x[wi * 8 + e]);
      }
    }
    acc = simd_sum(acc);
    if (lane == 0) out[row] = static_cast<T>(acc);
  )MSL");
  constexpr int64_t O = 48, K = 512, G = 64;
  auto w = random_array({O, K / 8}, uint32, 1, 4294967295.0, 1261, Device::cpu());
  auto wv = w.to_vector<uint32_t>();
  for (Dtype T : {float16, float32}) {
    SCOPED_TRACE(std::string(dtype_name(T)));
    auto scales = random_array({O, K / G}, T, 0.01, 0.1, 1262, Device::cpu());
    auto biases = random_array({O, K / G}, T, -0.5, 0.5, 1263, Device::cpu());
    auto x = random_array({K}, T, -1, 1, 1264, Device::cpu());
    auto sv = scales.to_doubles(), bv = biases.to_doubles(), xv = x.to_doubles();
    std::vector<double> ref(O);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t kk = 0; kk < K; ++kk) {
        uint32_t q = (wv[o * (K / 8) + kk / 8] >> (4 * (kk % 8))) & 0xF;
        int64_t g = o * (K / G) + kk / G;
        ref[o] += (sv[g] * q + bv[g]) * xv[kk];
      }
    double tol = T == float32 ? 1e-4 : 2e-3;
    run_kernel(
        k, {w, scales, biases, x},
        make_call({{O}}, {T}, {int(O) * 32, 1, 1}, {64, 1, 1}, {{"T", T}, {"GROUP", int(G)}}),
        [&](auto& o) { expect_close(o[0], ref, tol, tol); });
  }
}

// ---- transpose --------------------------------------------------------------------------------

// 16 x 16 tiles through threadgroup memory (padded against bank conflicts), 2-D threadgroups, a
// 50 x 37 input (the grid is rounded up to whole tiles; threads outside the matrix only help load).
TEST(ConformanceRealistic, TiledTranspose) {
  constexpr int R = 50, C = 37;
  auto k = metal_kernel("tiled_transpose", {"x"}, {"out"}, R"MSL(
    threadgroup float tile[16][17];
    uint2 t = uint2(thread_position_in_threadgroup.xy);
    uint2 g = uint2(threadgroup_position_in_grid.xy);
    int rows = x_shape[0];
    int cols = x_shape[1];
    int c = int(g.x * 16 + t.x);
    int r = int(g.y * 16 + t.y);
    if (r < rows && c < cols) tile[t.y][t.x] = x[r * cols + c];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    int out_col = int(g.y * 16 + t.x);
    int out_row = int(g.x * 16 + t.y);
    if (out_row < cols && out_col < rows) out[out_row * rows + out_col] = tile[t.x][t.y];
  )MSL");
  auto x = random_array({R, C}, float32, -1, 1, 1271, Device::cpu());
  auto xv = x.to_doubles();
  std::vector<double> ref(R * C);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) ref[c * R + r] = xv[r * C + c];
  int gx = (C + 15) / 16 * 16, gy = (R + 15) / 16 * 16;
  run_kernel(k, {x}, make_call({{C, R}}, {float32}, {gx, gy, 1}, {16, 16, 1}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

// ---- half / bfloat reduction ------------------------------------------------------------------

// Row sums (accumulated in float) and maxima (in T, from Limits<T>::min) of half and bfloat
// rows; per-simdgroup results meet in threadgroup memory of type T.
TEST(ConformanceRealistic, HalfAndBfloatRowReduction) {
  auto k = metal_kernel("row_reduce_typed", {"x"}, {"sum_out", "max_out"}, R"MSL(
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint nsg = simdgroups_per_threadgroup;
    int tpt = int(threads_per_threadgroup.x);
    int cols = x_shape[1];
    const device T* in = x + row * cols;
    float s = 0.0f;
    T m = Limits<T>::min;
    for (int j = int(lid); j < cols; j += tpt) {
      T v = in[j];
      s += float(v);
      m = max(m, v);
    }
    s = simd_sum(s);
    m = simd_max(m);
    threadgroup float ts[32];
    threadgroup T tm[32];
    if (lane == 0) {
      ts[sg] = s;
      tm[sg] = m;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0) {
      float total = 0.0f;
      T best = tm[0];
      for (uint k = 0; k < nsg; ++k) {
        total += ts[k];
        best = max(best, tm[k]);
      }
      sum_out[row] = static_cast<T>(total);
      max_out[row] = best;
    }
  )MSL");
  constexpr int64_t rows = 16, cols = 777;
  for (Dtype T : {float16, bfloat16}) {
    SCOPED_TRACE(std::string(dtype_name(T)));
    auto x = random_array({rows, cols}, T, -2, 3, 1281, Device::cpu());
    auto xv = x.to_doubles();
    std::vector<double> sums(rows, 0.0), maxes(rows, -1e9);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        sums[i] += xv[i * cols + j];
        maxes[i] = std::max(maxes[i], xv[i * cols + j]);
      }
    double tol = T == float16 ? 2e-3 : 1e-2;
    run_kernel(
        k, {x},
        make_call({{rows}, {rows}}, {T, T}, {int(rows) * 128, 1, 1}, {128, 1, 1}, {{"T", T}}),
        [&](auto& o) {
          expect_close(o[0], sums, tol, tol);
          expect_equal(o[1], maxes);
        });
  }
}

}  // namespace
