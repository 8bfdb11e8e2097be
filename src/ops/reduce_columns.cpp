// Cooperative column reductions (see reduce_columns.h).
#include "ops/reduce_columns.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "core/array_node.h"

namespace alloy::ops {
namespace {

std::atomic<bool> g_coop_cpu{false};

}  // namespace

void set_cooperative_columns_on_cpu(bool on) {
  g_coop_cpu = on;
}
bool cooperative_columns_on_cpu() {
  return g_coop_cpu;
}

int column_tile(int64_t inner) {
  int w = 1;
  while (w < 32 && w < inner) w *= 2;
  return w;
}

OpKernel column_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out, int tile) {
  std::string key = fmt::format("colcoop|{}|{}|{}|{}|{}", op, dtype_name(in), dtype_name(acc),
                                dtype_name(out), tile);
  return reduction_kernel(key, op, acc, "columns_coop", [&](const ReductionText& text) {
    const std::string &F = text.F, &A = text.A, &I = text.I;
    const int W = tile, lanes = kColumnThreads / tile;
    std::string s = fmt::format(
        "  uint tid = thread_position_in_threadgroup.x;\n"
        "  int64_t O = x_shape[0];\n"
        "  int64_t R = x_shape[1];\n"
        "  int64_t I = x_shape[2];\n"
        "  int64_t tiles = (I + {0} - 1) / {0};\n"
        "  int64_t P = int64_t(threadgroups_per_grid.x) / tiles;\n"
        "  int64_t g = threadgroup_position_in_grid.x;\n"
        "  int64_t t = g % tiles;\n"
        "  int64_t p = g / tiles;\n"
        // Outer rows along y and z (CUDA allows at most 65,535 threadgroups along y).
        "  int64_t o = threadgroup_position_in_grid.y +\n"
        "              int64_t(threadgroup_position_in_grid.z) * threadgroups_per_grid.y;\n"
        "  if (o >= O) return;\n"
        "  uint cx = tid % {0};\n"
        "  uint ry = tid / {0};\n"
        "  int64_t c = t * {0} + cx;\n"
        "  int64_t chunk = (R + P - 1) / P;\n"
        "  int64_t lo = p * chunk;\n"
        "  int64_t hi = metal::min(R, lo + chunk);\n"
        "  {2} a0 = {3};\n"
        "  {2} a1 = {3};\n"
        "  if (c < I) {{\n"
        "    int64_t base = o * R * I + c;\n"
        "    int64_t r = lo + ry;\n"
        // Two loads in flight per thread; a warp reads {0}-element runs of 32 / {0} rows.
        "    for (; r + {1} < hi; r += 2 * {1}) {{\n"
        "      a0 = {4}(a0, static_cast<{2}>(x[base + r * I]));\n"
        "      a1 = {4}(a1, static_cast<{2}>(x[base + (r + {1}) * I]));\n"
        "    }}\n"
        "    for (; r < hi; r += {1}) a0 = {4}(a0, static_cast<{2}>(x[base + r * I]));\n"
        "  }}\n"
        "  threadgroup {2} part[{5}];\n"
        "  part[tid] = {4}(a0, a1);\n"
        "  threadgroup_barrier(mem_flags::mem_threadgroup);\n",
        W, lanes, A, I, F, kColumnThreads);
    // Tree over the row lanes, unrolled (a fixed count per kernel).
    for (int half = lanes / 2; half > 0; half /= 2)
      s += fmt::format(
          "  if (ry < {0}) part[tid] = {1}(part[tid], part[tid + {2}]);\n"
          "  threadgroup_barrier(mem_flags::mem_threadgroup);\n",
          half, F, half * W);
    s += fmt::format(
        "  if (ry == 0 && c < I) out[(o * P + p) * I + c] = static_cast<{}>(part[tid]);\n",
        tname(out));
    return s;
  });
}

void reduce_columns(const std::string& op, const Array& x, Dtype acc, std::vector<Array>& outputs,
                    bool gpu) {
  int64_t O = x.shape()[0], R = x.shape()[1], I = x.shape()[2];
  Dtype out = outputs.at(0).dtype();
  int W = column_tile(I);
  int64_t tiles = (I + W - 1) / W, lanes = kColumnThreads / W;
  auto grid = [&](int64_t pieces) {
    constexpr int64_t kMaxY = 65535;
    return std::array<int64_t, 3>{tiles * pieces * kColumnThreads, std::min(O, kMaxY),
                                  (O + kMaxY - 1) / kMaxY};
  };
  // Few threadgroups over long columns: split R into pieces (each at least 16 rows per lane)
  // so that about 512 threadgroups run, then reduce the pieces' results.
  int64_t groups = tiles * O;
  int64_t pieces = 1;
  if (groups < 512 && R > 32 * lanes)
    pieces = std::min<int64_t>({(512 + groups - 1) / groups, R / (16 * lanes), 1024});
  if (pieces > 1) {
    std::vector<Array> partial{scratch({O, pieces, I}, acc, x.device())};
    run_kernel_grid(column_reduce_kernel(op, x.dtype(), acc, acc, W), {x}, partial, grid(pieces),
                    kColumnThreads, gpu);
    run_kernel_grid(column_reduce_kernel(op, acc, acc, out, W), partial, outputs, grid(1),
                    kColumnThreads, gpu);
    return;
  }
  run_kernel_grid(column_reduce_kernel(op, x.dtype(), acc, out, W), {x}, outputs, grid(1),
                  kColumnThreads, gpu);
}

}  // namespace alloy::ops
