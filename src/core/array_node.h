// The node behind an Array handle.
#pragma once
#include <exception>
#include <memory>
#include <vector>

#include "alloy/array.h"
#include "core/buffer.h"
#include "core/primitive.h"

namespace alloy {

/// A primitive application whose outputs are not computed yet. Shared by all its outputs.
struct PendingOp {
  std::shared_ptr<Primitive> primitive;
  std::vector<Array> inputs;
  std::vector<std::weak_ptr<ArrayNode>> outputs;
  std::vector<Shape> shapes;  // of every output, also those whose handles were dropped
  std::vector<Dtype> dtypes;
  Device device;
  /// Set when evaluating the op failed for good (alloy::Error, alloy::Interrupted): every later
  /// read rethrows it instead of running (and compiling) the op again (docs/reliability.md).
  std::exception_ptr error;
};

struct ArrayNode {
  Dtype dtype = Dtype::float32;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // elements
  Device device;
  std::shared_ptr<Buffer> buffer;      // materialized
  std::shared_ptr<PendingOp> pending;  // not yet computed (buffer is null)

  int64_t size() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  /// Address of element 0 of the view (host or device pointer).
  void* data() const {
    return static_cast<char*>(buffer->ptr) + offset * static_cast<int64_t>(size_of(dtype));
  }
};

Strides row_major_strides(const Shape& shape);
/// A new materialized, row-major node with a fresh buffer on `device` (contents undefined).
Array make_empty(const Shape& shape, Dtype dtype, Device device);
/// Outputs of `primitive` applied to `inputs` (pending).
std::vector<Array> make_pending(std::shared_ptr<Primitive> primitive, std::vector<Array> inputs,
                                const std::vector<Shape>& shapes, const std::vector<Dtype>& dtypes,
                                Device device);

}  // namespace alloy
