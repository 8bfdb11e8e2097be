// The core's own primitives: views (metadata only: their outputs share the input's buffer) and
// moves (copy to row-major, dtype conversion, device transfer). All are lazy graph nodes: building
// one never evaluates anything.
//
// Views are evaluated here for every device (set_view). Copy and AsType run per device: on the
// CPU in src/backend/cpu/copy.cpp; on the GPU through the CUDA backend's copy (see
// Backend::copy_strided). ToDevice runs on its destination device.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/array_node.h"
#include "core/primitive.h"

namespace alloy {

/// Base of primitives whose one output is a view of their one input.
class ViewPrimitive : public Primitive {
 public:
  /// The output's layout for an input of this layout.
  virtual ViewLayout layout(const Array& input) const = 0;
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
};

/// a[start:stop:step] per axis (normalized: start/stop within range, step != 0).
class SliceView : public ViewPrimitive {
 public:
  SliceView(std::vector<int64_t> starts, std::vector<int64_t> stops, std::vector<int64_t> steps);
  /// Python-style slices (defaults, negatives, clamping) of `shape`, normalized.
  static std::shared_ptr<SliceView> from_slices(const Shape& shape,
                                                const std::vector<alloy::Slice>& s);
  const char* name() const override { return "Slice"; }
  ViewLayout layout(const Array& input) const override;
  PrimitiveState state() const override;
  /// Open ends are stored open and explicit non-negative bounds re-clamp to any shape as numpy
  /// clamps them (layout), so only bounds that from_slices made from the dimension (negative,
  /// or clamped to it) hold the call's shape.
  bool shapes_from_state() const override { return from_shape_; }

 private:
  std::vector<int64_t> starts_, stops_, steps_;
  bool from_shape_ = false;
};

class Transpose : public ViewPrimitive {
 public:
  explicit Transpose(std::vector<int64_t> axes);
  const char* name() const override { return "Transpose"; }
  ViewLayout layout(const Array& input) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;

 private:
  std::vector<int64_t> axes_;
};

/// A new shape over a row-contiguous input (Array::reshape copies first otherwise).
class Reshape : public ViewPrimitive {
 public:
  explicit Reshape(Shape shape) : shape_(std::move(shape)) {}
  const char* name() const override { return "Reshape"; }
  ViewLayout layout(const Array& input) const override;
  PrimitiveState state() const override;
  bool shapes_from_state() const override { return true; }
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;

 private:
  Shape shape_;
};

/// Numpy broadcasting of the input to `shape` (stride 0 along broadcast axes). `implicit`: made
/// by an elementwise op to bring its operands to their common shape (broadcast_view), so
/// the shape is by construction the broadcast of that op's operand shapes: compile's fusion may
/// read the source instead and broadcast it itself, also for new shapes. An explicit
/// broadcast_to keeps its shape whatever the other operands are.
class Broadcast : public ViewPrimitive {
 public:
  explicit Broadcast(Shape shape, bool implicit = false)
      : shape_(std::move(shape)), implicit_(implicit) {}
  const char* name() const override { return "Broadcast"; }
  ViewLayout layout(const Array& input) const override;
  PrimitiveState state() const override;
  bool shapes_from_state() const override { return true; }
  bool implicit() const { return implicit_; }

 private:
  Shape shape_;
  bool implicit_;
};

/// `x` broadcast to `shape` (a Broadcast view; Array::broadcast_to is the explicit one, an
/// elementwise op brings its operands to their common shape with implicit = true).
Array broadcast_view(const Array& x, Shape shape, bool implicit);

/// Any shape/strides/offset over the input's buffer, relative to the input's element 0 (as
/// numpy's as_strided; the caller promises the view stays inside the buffer: checked).
class AsStrided : public ViewPrimitive {
 public:
  AsStrided(Shape shape, Strides strides, int64_t offset)
      : shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset) {}
  const char* name() const override { return "AsStrided"; }
  ViewLayout layout(const Array& input) const override;
  PrimitiveState state() const override;
  bool shapes_from_state() const override { return true; }

 private:
  Shape shape_;
  Strides strides_;
  int64_t offset_;
};

/// A row-major copy of the input (Array::contiguous).
class Copy : public Primitive {
 public:
  const char* name() const override { return "Copy"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override { return PrimitiveState(1); }
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
};

/// A row-major copy converted to `dtype` (numpy's astype: C casts; float -> bool is x != 0).
class AsType : public Primitive {
 public:
  explicit AsType(Dtype dtype) : dtype_(dtype) {}
  const char* name() const override { return "AsType"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  Dtype dtype() const { return dtype_; }
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;

 private:
  Dtype dtype_;
};

/// The row-contiguous input, copied to the primitive's device (the device of its output).
class ToDevice : public Primitive {
 public:
  explicit ToDevice(Device device) : device_(device) {}
  const char* name() const override { return "ToDevice"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;

 private:
  Device device_;
};

/// Host-side strided copy of `shape` elements (element strides) into row-major `dst`, converted
/// to `dst_dtype` (src/core/copy_convert.cpp; Array::to_bytes and the CPU Copy/AsType use it).
void copy_convert_host(const void* src, const Shape& shape, const Strides& strides, Dtype src_dtype,
                       void* dst, Dtype dst_dtype);

}  // namespace alloy
