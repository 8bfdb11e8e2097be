// Reductions on the CPU backend, shaped for the host compiler's loop vectoriser and for the CPU
// executor's task batching (docs/ops.md, "CPU reductions"):
//  - rows (the trailing axes of a row-contiguous input, [N, L]): a thread per row, or per piece
//    of a long row, keeps 32 lane accumulators in a local array. Its inner loop adds 32
//    consecutive elements into the 32 lanes (a vector loop over contiguous memory, no
//    reassociation needed) over blocks of 512 elements, each block's lanes then added into the
//    totals: blocked summation, each lane adding at most 16 elements before they join the
//    totals, so float32 sums keep an error near numpy's pairwise sum's.
//  - columns (leading or middle axes, [O, R, I] reduced over R): a thread per tile of up to 8192
//    adjacent columns and block of rows walks its rows in memory order, adding each row's tile
//    into as many accumulators (a vector loop), not a thread per column striding down it;
//    several row blocks write partial rows that further passes reduce.
// Both compute half / bfloat in float (the accumulator dtype chosen by the caller).
#pragma once
#include <string>
#include <vector>

#include "ops/kernels.h"

namespace alloy::ops {

/// Inputs of at least this many elements take the parallel grid shapes below; smaller ones run
/// as one task (the executor's thread pool costs more than they do).
constexpr int64_t kCpuParallelReduce = int64_t{1} << 16;

/// The lane kernel over rows of an [N, L] row-major input: thread y = row * P + p of a (1, N * P)
/// grid reduces piece p of its row into out[row * P + p].
OpKernel cpu_row_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out);

/// The tile kernel over an [O, R, I] row-major input reduced over R: thread y = (o * P + p) *
/// tiles + t of a (1, O * P * tiles) grid reduces row block p of P, tile t of columns, into
/// out[(o * P + p) * I + the tile's columns].
OpKernel cpu_column_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out);

/// Evaluates the reduction of `x` ([N, L] row-major) over L into outputs[0] (N elements).
void reduce_rows_cpu(const std::string& op, const Array& x, Dtype acc, std::vector<Array>& outputs);

/// Evaluates the reduction of `x` ([O, R, I] row-major) over R into outputs[0] (O * I elements).
void reduce_columns_cpu(const std::string& op, const Array& x, Dtype acc,
                        std::vector<Array>& outputs);

}  // namespace alloy::ops
