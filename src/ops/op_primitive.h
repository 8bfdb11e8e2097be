// The base of the built-in ops' primitives (not public).
#pragma once
#include <vector>

#include "core/primitive.h"

namespace alloy::ops {

/// A built-in op's primitive: one evaluation serves both targets. Each op runs generated Metal
/// kernels (or BLAS) through the kernel layer, which reaches the backend of the outputs' device;
/// `gpu` says which target's evaluation asked, for the few choices that differ (a kernel
/// variant, a library call).
class OpPrimitive : public Primitive {
 public:
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) final {
    eval(inputs, outputs, false);
  }
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) final {
    eval(inputs, outputs, true);
  }

 protected:
  virtual void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) = 0;
};

}  // namespace alloy::ops
