// Primitives: the operations in the lazy graph. A primitive is a pure function of its inputs plus
// its own state (no captured arrays, no hidden globals), so a traced graph can be replayed on new
// inputs, re-traced for new shapes, and serialized.
#pragma once
#include <string>
#include <vector>

#include "alloy/array.h"

namespace alloy {

class Primitive {
 public:
  virtual ~Primitive() = default;
  virtual std::string name() const = 0;
  /// `outputs` arrive allocated (row-major contiguous, on the primitive's device); fill them.
  virtual void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) = 0;
  virtual void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) = 0;
  /// Output shapes for given inputs (used when re-tracing for new shapes).
  virtual std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const = 0;
};

}  // namespace alloy
