// The node behind an Array handle.
#pragma once
#include <exception>
#include <memory>
#include <vector>

#include "alloy/array.h"
#include "alloy/stream.h"
#include "core/buffer.h"
#include "core/primitive.h"

namespace alloy {
struct OpDone;

/// A primitive application whose outputs are not computed yet. Shared by all its outputs.
struct PendingOp {
  std::shared_ptr<Primitive> primitive;
  std::vector<Array> inputs;
  std::vector<std::weak_ptr<ArrayNode>> outputs;
  std::vector<Shape> shapes;  // of every output, also those whose handles were dropped
  std::vector<Dtype> dtypes;
  Device device;
  Stream stream;      // where it runs (a stream of `device`)
  bool view = false;  // the output is a view of inputs[0] (its layout is fixed)
  /// Set when evaluating the op failed for good (alloy::Error, alloy::Interrupted): every later
  /// read rethrows it instead of running (and compiling) the op again (docs/reliability.md).
  std::exception_ptr error;
  /// Set once the op was handed to its stream (scheduler.h); guarded by the scheduler's mutex.
  std::shared_ptr<OpDone> done;
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

/// The node behind an array handle (internal code only: the public API has no node access).
inline const std::shared_ptr<ArrayNode>& node_of(const Array& a) {
  return a.node();
}
/// An array handle on a node.
inline Array array_of(std::shared_ptr<ArrayNode> node) {
  return Array(std::move(node));
}

Strides row_major_strides(const Shape& shape);
/// Elements of `shape`; throws std::invalid_argument for a negative dimension or a count that
/// overflows int64.
int64_t checked_numel(const Shape& shape);
/// A new materialized, row-major node with a fresh buffer on `device` (contents undefined).
Array make_empty(const Shape& shape, Dtype dtype, Device device);
/// Outputs of `primitive` applied to `inputs` (pending, row-major). (Shapes and dtypes by value:
/// callers that are done with theirs move them in, saving copies per call.)
std::vector<Array> make_pending(std::shared_ptr<Primitive> primitive, std::vector<Array> inputs,
                                std::vector<Shape> shapes, std::vector<Dtype> dtypes,
                                Stream stream);
/// The same on the default stream of `device`.
std::vector<Array> make_pending(std::shared_ptr<Primitive> primitive, std::vector<Array> inputs,
                                std::vector<Shape> shapes, std::vector<Dtype> dtypes,
                                Device device);
/// The layout of a view output: strides and offset (elements) into its source's buffer.
struct ViewLayout {
  Shape shape;
  Strides strides;
  int64_t offset = 0;
};
/// One output of `primitive` that is a view of its first input's buffer (set_view at eval).
Array make_pending_view(std::shared_ptr<Primitive> primitive, const Array& input,
                        const ViewLayout& layout);

/// Gives an unallocated output (row-major) a fresh buffer on its device.
void allocate_output(Array& out);
/// Makes `out` a view of `in`'s buffer: its layout was fixed when it was created.
void set_view(Array& out, const Array& in);
/// Number of buffers alive (all devices): tests check that evaluation frees intermediates.
int64_t live_buffers();

}  // namespace alloy
