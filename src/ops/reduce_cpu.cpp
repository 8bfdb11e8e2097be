// CPU reductions over rows and columns (see reduce_cpu.h).
#include "ops/reduce_cpu.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/array_node.h"
#include "kernel/custom_kernel.h"

namespace alloy::ops {
namespace {

// Lanes of the row kernel, elements per block (each lane adds kBlock / kLanes of them before
// they join its total) and the column kernel's tile width.
constexpr int kLanes = 32;
constexpr int kBlock = 512;
// The column kernel's tile: 32 KiB of accumulators (8192 float32 columns; 4096 of 8-byte types),
// at most 8192 columns. Measured on an 8192 x 8192 float32 column sum (EPYC, one core): tiles of
// 1024 and 4096 columns ran ~10-25% slower than a whole 8192-column row.
int column_tile(Dtype acc) {
  return static_cast<int>(std::min<size_t>(8192, 32768 / size_of(acc)));
}
// Elements per column-kernel thread (rows K = this / tile width): 2^18.
constexpr int64_t kColumnThreadElements = int64_t{1} << 18;
// Rows a column tile adds into fresh accumulators before they join its totals (blocked sums).
constexpr int kRowBlock = 16;
// Elements per piece of a long row split over several threads.
constexpr int64_t kPiece = 8192;

// How the CPU executor batches groups into tasks: groups worth 8192 dispatched threads per task
// (src/backend/cpu/executor.cpp), a cost estimate made for light threads. These kernels' threads
// are heavy (hundreds to thousands of elements each), so they run along y with a grid of width
// 1 and a dispatched threadgroup of (Tx, Ty): each group holds Ty threads (x is partial), a task
// 8192 / (Tx * Ty) groups, that is 8192 / Tx threads. Tx is chosen so that a task reduces about
// 2^16 elements: enough work to amortise a task, enough tasks to share the cores.
constexpr int64_t kTaskElements = int64_t{1} << 16;
constexpr int64_t kThreadsPerTask = 8192;

// Runs `threads` heavy threads of about `work` elements each (see above).
void run_heavy(const OpKernel& k, const std::vector<Array>& inputs, std::vector<Array>& outputs,
               int64_t threads, int64_t work) {
  int64_t tx = 1;
  while (tx < 1024 && tx * kTaskElements < kThreadsPerTask * work) tx *= 2;
  int64_t ty = 1024 / tx;
  launch_op_kernel(k, inputs, outputs, {1, threads, 1}, {tx, ty, 1}, /*gpu=*/false);
}

}  // namespace

OpKernel cpu_row_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out) {
  std::string key =
      fmt::format("cpurow|{}|{}|{}|{}", op, dtype_name(in), dtype_name(acc), dtype_name(out));
  return reduction_kernel(key, op, acc, "rows_cpu", [&](const ReductionText& text) {
    const std::string &F = text.F, &A = text.A, &I = text.I;
    std::string s = fmt::format(
        "  int64_t id = thread_position_in_grid.y;\n"
        "  int64_t P = int64_t(threads_per_grid.y) / x_shape[0];\n"
        "  int64_t row = id / P, p = id % P;\n"
        "  int64_t L = x_shape[1];\n"
        // Pieces of a multiple of {0} elements; the last ones may be empty (the identity).
        "  int64_t W = ((L + P - 1) / P + {0} - 1) / {0} * {0};\n"
        "  int64_t lo = metal::min(L, p * W), hi = metal::min(L, lo + W);\n"
        "  const device {2}* xr = x + row * L;\n"
        "  {3} tot[{0}];\n"
        "  for (int j = 0; j < {0}; ++j) tot[j] = {4};\n"
        "  int64_t r = lo;\n"
        "  for (; r + {1} <= hi; r += {1}) {{\n"
        "    {3} blk[{0}];\n"
        "    for (int j = 0; j < {0}; ++j) blk[j] = static_cast<{3}>(xr[r + j]);\n"
        "    for (int k = {0}; k < {1}; k += {0})\n"
        "      for (int j = 0; j < {0}; ++j) blk[j] = {5}(blk[j], static_cast<{3}>(xr[r + k + "
        "j]));\n"
        "    for (int j = 0; j < {0}; ++j) tot[j] = {5}(tot[j], blk[j]);\n"
        "  }}\n"
        "  for (; r + {0} <= hi; r += {0})\n"
        "    for (int j = 0; j < {0}; ++j) tot[j] = {5}(tot[j], static_cast<{3}>(xr[r + j]));\n"
        "  {3} a = {4};\n"
        "  for (; r < hi; ++r) a = {5}(a, static_cast<{3}>(xr[r]));\n"
        "  for (int w = {0} / 2; w > 0; w /= 2)\n"
        "    for (int j = 0; j < w; ++j) tot[j] = {5}(tot[j], tot[j + w]);\n"
        "  out[row * P + p] = static_cast<{6}>({5}(tot[0], a));\n",
        kLanes, kBlock, tname(in), A, I, F, tname(out));
    return s;
  });
}

OpKernel cpu_column_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out) {
  std::string key =
      fmt::format("cpucol|{}|{}|{}|{}", op, dtype_name(in), dtype_name(acc), dtype_name(out));
  return reduction_kernel(key, op, acc, "columns_cpu", [&](const ReductionText& text) {
    const std::string &F = text.F, &A = text.A, &I = text.I;
    // A full tile has a constant width (a vector loop of known trip count); the last tile of a
    // row may be narrower.
    return fmt::format(
        "  int64_t id = thread_position_in_grid.y;\n"
        "  int64_t O = x_shape[0], R = x_shape[1], I = x_shape[2];\n"
        "  int64_t tiles = (I + {0} - 1) / {0};\n"
        "  int64_t P = int64_t(threads_per_grid.y) / (tiles * O);\n"
        "  int64_t t = id % tiles, p = (id / tiles) % P, o = id / tiles / P;\n"
        "  int64_t K = (R + P - 1) / P;\n"
        "  int64_t r0 = metal::min(R, p * K), r1 = metal::min(R, r0 + K);\n"
        "  int64_t c0 = t * {0};\n"
        "  const device {1}* xb = x + o * R * I + c0;\n"
        "  device {4}* ob = out + (o * P + p) * I + c0;\n"
        "  {2} a[{0}], b[{0}];\n"
        "  int64_t w = metal::min(int64_t({0}), I - c0);\n"
        "  if (w == {0}) {{\n"
        "    for (int j = 0; j < {0}; ++j) a[j] = {3};\n"
        "    for (int64_t r = r0; r < r1; r += {6}) {{\n"
        "      int64_t e = metal::min(r1, r + {6});\n"
        "      for (int j = 0; j < {0}; ++j) b[j] = {3};\n"
        "      for (int64_t q = r; q < e; ++q) {{\n"
        "        const device {1}* xrow = xb + q * I;\n"
        "        for (int j = 0; j < {0}; ++j) b[j] = {5}(b[j], static_cast<{2}>(xrow[j]));\n"
        "      }}\n"
        "      for (int j = 0; j < {0}; ++j) a[j] = {5}(a[j], b[j]);\n"
        "    }}\n"
        "    for (int j = 0; j < {0}; ++j) ob[j] = static_cast<{4}>(a[j]);\n"
        "  }} else {{\n"
        "    for (int64_t j = 0; j < w; ++j) a[j] = {3};\n"
        "    for (int64_t r = r0; r < r1; r += {6}) {{\n"
        "      int64_t e = metal::min(r1, r + {6});\n"
        "      for (int64_t j = 0; j < w; ++j) b[j] = {3};\n"
        "      for (int64_t q = r; q < e; ++q) {{\n"
        "        const device {1}* xrow = xb + q * I;\n"
        "        for (int64_t j = 0; j < w; ++j) b[j] = {5}(b[j], static_cast<{2}>(xrow[j]));\n"
        "      }}\n"
        "      for (int64_t j = 0; j < w; ++j) a[j] = {5}(a[j], b[j]);\n"
        "    }}\n"
        "    for (int64_t j = 0; j < w; ++j) ob[j] = static_cast<{4}>(a[j]);\n"
        "  }}\n",
        column_tile(acc), tname(in), A, I, tname(out), F, kRowBlock);
  });
}

void reduce_rows_cpu(const std::string& op, const Array& x, Dtype acc,
                     std::vector<Array>& outputs) {
  int64_t N = x.shape()[0], L = x.shape()[1];
  Dtype out = outputs.at(0).dtype();
  // A thread per row; few long rows are split into pieces of about 1024 elements (so that they
  // spread over the cores), whose results are reduced again.
  int64_t P = 1;
  if (N < 64 && L > 4 * kPiece && x.size() >= kCpuParallelReduce) P = (L + kPiece - 1) / kPiece;
  if (P == 1) {
    run_heavy(cpu_row_reduce_kernel(op, x.dtype(), acc, out), {x}, outputs, N, L);
    return;
  }
  std::vector<Array> partial{scratch({N, P}, acc, x.device())};
  run_heavy(cpu_row_reduce_kernel(op, x.dtype(), acc, acc), {x}, partial, N * P, (L + P - 1) / P);
  reduce_rows_cpu(op, partial[0], acc, outputs);
}

void reduce_columns_cpu(const std::string& op, const Array& x, Dtype acc,
                        std::vector<Array>& outputs) {
  int64_t O = x.shape()[0], R = x.shape()[1], I = x.shape()[2];
  Dtype out = outputs.at(0).dtype();
  int64_t tile = column_tile(acc);
  int64_t tiles = (I + tile - 1) / tile, width = std::min<int64_t>(I, tile);
  // A thread per tile of up to 8192 columns (column_tile) and block of K rows (about 2^18
  // elements): it reads whole rows (or long runs of them) in memory order; the blocks' partial
  // rows are reduced again.
  int64_t K = std::max<int64_t>(16, kColumnThreadElements / width);
  int64_t P = 1;
  if (x.size() >= kCpuParallelReduce && R > K) P = (R + K - 1) / K;
  if (P == 1) {
    run_heavy(cpu_column_reduce_kernel(op, x.dtype(), acc, out), {x}, outputs, tiles * O,
              R * width);
    return;
  }
  std::vector<Array> partial{scratch({O, P, I}, acc, x.device())};
  run_heavy(cpu_column_reduce_kernel(op, x.dtype(), acc, acc), {x}, partial, tiles * P * O,
            K * width);
  reduce_columns_cpu(op, partial[0], acc, outputs);
}

}  // namespace alloy::ops
