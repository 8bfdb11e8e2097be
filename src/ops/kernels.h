// Kernels of the built-in ops, generated as metal_kernel specifications (a Metal body plus the
// functors as its header) and run through the CustomKernel primitive's evaluation: the same
// signature writer, variant cache, translator and CPU/NVRTC JITs as user kernels. Each distinct
// generated text is built once per process (a spec cache keyed by op, dtypes and input layouts);
// its compiled programs live in the kernel layer's variant cache, keyed by content.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "alloy/dtype.h"
#include "alloy/kernel.h"

namespace alloy::ops {

/// How a generated kernel reads an input of an elementwise op whose output has `out_shape`:
///   's' a 0-d array (a Metal scalar reference),
///   'u' one value for every element (all strides 0),
///   'c' row-contiguous in the output's shape (read at the thread's index),
///   'g' any other strides (elem_to_loc over the input's shape and strides).
char input_layout(const Array& a, const Shape& out_shape);

/// One elementwise kernel: the functor `op`; per input the promoted dtype it is converted to
/// first (`via`: numpy's promotion, so an int64 added to float16 rounds to float16 first) and the
/// type the functor computes in (`compute`: float for half/bfloat, "opmath"); the output dtype.
struct ElementwiseKernel {
  std::string op;
  std::vector<Dtype> via;      // per input
  std::vector<Dtype> compute;  // per input
  Dtype out;
};

/// A generated kernel: its specification and the specification's content key.
struct OpKernel {
  std::shared_ptr<const KernelSpec> spec;
  std::string key;
};

/// The Metal header a generated kernel calling the functors of `ops` needs: the shared helpers,
/// then each functor after those it calls (compile's fused kernels use it too).
std::string functor_header(const std::vector<std::string>& ops);

/// The kernel for these (evaluated or pending) inputs: layouts come from their layouts.
OpKernel elementwise_kernel(const ElementwiseKernel& k, const std::vector<Array>& inputs,
                            const Shape& out_shape);

/// Reductions over `axes` of the input (its other axes kept; the output has the reduced axes as
/// size 1). `op`: sum, prod, max, min, all, any (accumulating in `acc`), argmax, argmin (one
/// axis, uint32 indices).
struct ReduceKernel {
  std::string op;
  std::vector<int> axes;  // sorted, distinct, non-negative
  Dtype acc;
  Dtype out;
};
OpKernel reduce_kernel(const ReduceKernel& k, const Array& input);

/// One pass of a reduction over the rows of a row-major [R, C] input (reducing leading axes):
/// thread (c, p) of a (C, ceil(R / K)) grid reduces rows [K p, K p + K) of column c into out[p, c].
/// Adjacent threads read adjacent elements, so the CPU's thread loop vectorises and CUDA's loads
/// coalesce; passes repeat until one row is left.
constexpr int kColumnPassRows = 16;
OpKernel column_pass_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out);

/// Evaluates a generated kernel with one thread per element of the first output (the grid), on
/// the CPU or the GPU: outputs arrive unallocated, as a primitive's do.
/// `rows` > 1: a (threads, rows) grid.
void run_kernel(const OpKernel& k, const std::vector<Array>& inputs, std::vector<Array>& outputs,
                int64_t threads, bool gpu, int64_t rows = 1);

/// The metal_kernel call run_kernel would make (tests compile it with NVRTC for sm_90).
/// First pass of a long reduction over the rows of a row-major [N, L] input (trailing axes):
/// thread (q, o) of a (ceil(L / K), N) grid reduces elements [K q, K q + K) of row o into
/// out[o, q] (an [N, ceil(L / K)] output, in the accumulator's dtype), so that few long rows
/// still spread over many threads.
constexpr int kRowChunk = 4096;
OpKernel row_chunk_kernel(const std::string& op, Dtype in, Dtype acc);

/// Concatenation of `n` inputs of dtype `t` along `axis` (row-major output; inputs read through
/// their strides).
OpKernel concatenate_kernel(int n, Dtype t, int axis, int ndim);

KernelCall kernel_call(const Shape& out_shape, Dtype out_dtype, int64_t threads, bool gpu,
                       int64_t rows = 1);

/// A generated kernel built once per `cache_key` by `build` (the same spec cache as the kernels
/// above). `ensure_row_contiguous`: inputs are copied row-major before the kernel reads them (as
/// metal_kernel's option), for kernels that index their inputs as flat row-major arrays.
OpKernel op_kernel(const std::string& cache_key, const std::function<KernelSpec()>& build,
                   bool ensure_row_contiguous = false);

/// An unallocated row-major array for an intermediate pass (the kernel that writes it allocates
/// it).
Array scratch(const Shape& shape, Dtype dtype, Device device);

/// Runs a generated kernel over `grid` threads in groups of `threadgroup` (Metal's
/// dispatchThreads), writing `outputs` (unallocated, their shapes and dtypes set), on the CPU or
/// the GPU; outputs are poisoned first under set_poison_outputs. run_kernel and run_kernel_grid
/// choose the geometry; kernels with their own use this.
void launch_op_kernel(const OpKernel& k, const std::vector<Array>& inputs,
                      std::vector<Array>& outputs, std::array<int64_t, 3> grid,
                      std::array<int64_t, 3> threadgroup, bool gpu);

/// Runs a generated kernel over an explicit (x, y, z) grid with threadgroups of `threadgroup`
/// threads along x (kernels with simdgroup or threadgroup cooperation choose their own).
void run_kernel_grid(const OpKernel& k, const std::vector<Array>& inputs,
                     std::vector<Array>& outputs, std::array<int64_t, 3> grid, int threadgroup,
                     bool gpu);

/// For kernels written elsewhere in the ops layer: a reduction's functor name ("add" for sum,
/// "maximum" for max ...; the functor is `<name>_functor`), its identity in the accumulator's
/// type as Metal text, and the kernel header holding the shared helpers and these functors.
std::string reduction_functor(const std::string& op);
std::string reduction_identity(const std::string& op, Dtype acc);

/// The Metal name of a dtype in generated kernel text (float, half, bfloat16_t, ...).
inline std::string tname(Dtype t) {
  return std::string(msl_type_name(t));
}

/// What a reduction kernel's text names: the op's functor call `F` ("add_functor()"), the
/// accumulator's Metal type `A` and the op's identity in it `I`.
struct ReductionText {
  std::string F, A, I;
};
/// A reduction kernel from input "x" to output "out", named "alloy_<op>_<suffix>", with the op's
/// functor in its header and `source(text)` as its body; built once per `key`, which must hold
/// every parameter the body depends on.
OpKernel reduction_kernel(const std::string& key, const std::string& op, Dtype acc,
                          const std::string& suffix,
                          const std::function<std::string(const ReductionText&)>& source);

/// Test hook: poison outputs (NaN for floats, 0xFF.. patterns otherwise) before each op kernel
/// runs, so that elements a kernel fails to write are caught.
void set_poison_outputs(bool on);

}  // namespace alloy::ops
