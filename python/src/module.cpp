// alloy._core: the extension module behind the `alloy` Python package.
#include "bindings.h"
#include "interop.h"

NB_MODULE(_core, m) {
  m.doc() =
      "Alloy: Metal compute kernels, written as for MLX's mx.fast.metal_kernel, run on NVIDIA GPUs "
      "(CUDA) and on CPUs.";
  using namespace alloy::python;
  init_errors(m);
  init_dtype(m);
  init_device(m);
  init_array(m);
  init_ops(m);
  init_kernel(m);
  init_cuda(m);
  bind_library(m);
  init_export(m);
  init_shape_expr(m);
  init_compile(m);
  init_interop(m);
  init_transforms(m);
  init_ops_misc(m);
  init_fast(m);
}
