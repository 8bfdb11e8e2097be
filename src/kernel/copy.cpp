// Row-major copies of strided GPU arrays (ensure_row_contiguous, Array::contiguous) run as a Metal
// kernel through the same machinery as user kernels: one translator, one prelude, every target.
#include "alloy/kernel.h"
#include "core/array_node.h"

namespace alloy {

Array contiguous_gpu(const Array& a) {
  static const MetalKernel copy = metal_kernel("alloy_copy_strided", {"inp"}, {"out"}, R"(
    uint elem = thread_position_in_grid.x;
    out[elem] = inp[elem_to_loc(elem, inp_shape, inp_strides, inp_ndim)];
)",
                                               "", /*ensure_row_contiguous=*/false);
  int n = static_cast<int>(a.size());
  if (n == 0) return make_empty(a.shape(), a.dtype(), a.device());
  auto out = copy({a}, {a.shape()}, {a.dtype()}, {n, 1, 1}, {256, 1, 1}, {}, std::nullopt, false,
                  a.device())[0];
  out.eval();
  return out;
}

}  // namespace alloy
