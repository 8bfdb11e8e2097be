// Primitives of the scan, indexing and random ops (src/ops/scan.cpp, indexing.cpp, random.cpp),
// named as MLX's so an MLX graph maps onto them by name:
//   - Scan {"op": sum|prod|max|min, "axis", "reverse", "inclusive"}: MLX's Scan (cumsum, cumprod,
//     cummax, cummin).
//   - Gather {"axes", "slice_sizes"}: MLX's Gather; inputs a, then one index array per axis (all of
//     one shape I); the output has shape I + slice_sizes.
//   - GatherAxis {"axis"}: MLX's GatherAxis (take_along_axis).
//   - ScatterAxis {"axis"}: MLX's ScatterAxis with no reduction (put_along_axis).
//   - Scatter {"op": none|add, "axes"}: MLX's Scatter; inputs a, updates, one index array per
//     axis; updates have shape I + [1 on the axes, a's size elsewhere].
//   - SliceUpdate {"start", "stop", "strides"}: MLX's SliceUpdate; inputs src, update.
//   - RandomBits {"shape", "width"}: MLX's RandomBits (threefry 2x32 of one key, uint32 words).
// Each generates its kernel as the elementwise ops do (src/ops/kernels.h) and runs it through the
// metal_kernel machinery on the CPU or the GPU.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ops/op_primitive.h"

namespace alloy::ops {

/// The output dtype of a scan of `in` (MLX's: cumsum of bool is int32, the rest keep the dtype).
Dtype scan_dtype(const std::string& op, Dtype in);

class Scan : public OpPrimitive {
 public:
  Scan(std::string op, int axis, bool reverse, bool inclusive);
  const char* name() const override { return "Scan"; }
  std::string label() const override { return "Scan(" + op_ + ")"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  std::string op_;
  int axis_;
  bool reverse_, inclusive_;
};

class Gather : public OpPrimitive {
 public:
  Gather(std::vector<int> axes, Shape slice_sizes);
  const char* name() const override { return "Gather"; }
  bool shapes_from_state() const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  std::vector<int> axes_;
  Shape slice_sizes_;
};

class GatherAxis : public OpPrimitive {
 public:
  explicit GatherAxis(int axis) : axis_(axis) {}
  const char* name() const override { return "GatherAxis"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  int axis_;
};

class ScatterAxis : public OpPrimitive {
 public:
  explicit ScatterAxis(int axis) : axis_(axis) {}
  const char* name() const override { return "ScatterAxis"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  int axis_;
};

class Scatter : public OpPrimitive {
 public:
  Scatter(std::string op, std::vector<int> axes);
  const char* name() const override { return "Scatter"; }
  std::string label() const override { return "Scatter(" + op_ + ")"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                         const std::vector<int>& argnums) override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  std::string op_;
  std::vector<int> axes_;
};

class SliceUpdate : public OpPrimitive {
 public:
  SliceUpdate(Shape start, Shape stop, Shape strides);
  const char* name() const override { return "SliceUpdate"; }
  bool shapes_from_state() const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums,
                         const std::vector<Array>& outputs) override;
  /// Elements along each axis (the update's shape).
  Shape counts() const;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  Shape start_, stop_, strides_;
};

class RandomBits : public OpPrimitive {
 public:
  RandomBits(Shape shape, int width);
  const char* name() const override { return "RandomBits"; }
  bool shapes_from_state() const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) override;
  Shape shape_;
  int width_;
};

/// A 0-d evaluated array seen as shape (1,) (generated kernels read 0-d inputs as Metal scalars).
Array at_least_1d_alias(const Array& x);
/// An int64 host array of `v` (kernel parameters that are not template constants).
Array param_array(const std::vector<int64_t>& v);

}  // namespace alloy::ops
