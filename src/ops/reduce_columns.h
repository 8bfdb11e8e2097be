// Reductions over leading or middle axes of a row-contiguous input ("columns") as cooperative
// kernels: the input seen as [O, R, I] (outer, reduced, inner), a threadgroup of 256 threads per
// tile of W adjacent inner columns, its 256 / W row lanes striding over R (adjacent threads read
// adjacent elements: coalesced on CUDA), combined through threadgroup memory. Used on CUDA,
// where the column passes (kernels.cpp, a thread per column and block of 16 rows) need several
// launches and reductions over middle axes ran a thread per output walking a strided axis.
#pragma once
#include <string>
#include <vector>

#include "ops/kernels.h"

namespace alloy::ops {

/// Threads per threadgroup of the column kernel.
constexpr int kColumnThreads = 256;

/// Tile width W (a power of two, at most 32) for `inner` columns.
int column_tile(int64_t inner);

/// Reduction `op` of an [O, R, I] row-major input over R: the grid has (I / W tiles) * P
/// threadgroups along x and O along y (and z past 65,535); threadgroup (t + tiles * p, o) reduces
/// piece p of P equal pieces of R for columns [W t, W t + W) of outer row o into
/// out[(o * P + p) * I + column].
OpKernel column_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out, int tile);

/// Evaluates the reduction of `x` ([O, R, I] row-major) over R into outputs[0] (O * I elements):
/// few outputs over many rows first reduce P pieces of R on separate threadgroups.
void reduce_columns(const std::string& op, const Array& x, Dtype acc, std::vector<Array>& outputs,
                    bool gpu);

/// Test hook: Reduce uses reduce_columns on the CPU backend too, so the GPU's kernel text is
/// checked there.
void set_cooperative_columns_on_cpu(bool on);
bool cooperative_columns_on_cpu();

}  // namespace alloy::ops
