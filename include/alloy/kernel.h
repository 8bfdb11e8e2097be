// Custom Metal kernels with MLX's mx.fast.metal_kernel calling convention.
//
//   auto k = alloy::metal_kernel("myexp", {"inp"}, {"out"}, R"(
//       uint elem = thread_position_in_grid.x;
//       T tmp = inp[elem];
//       out[elem] = metal::exp(tmp);)");
//   auto out = k({a}, {a.shape()}, {alloy::float32}, {n, 1, 1}, {256, 1, 1},
//                {{"T", alloy::float32}})[0];
#pragma once
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "alloy/array.h"
#include "alloy/stream.h"

namespace alloy {

/// A template argument: a dtype (becomes its Metal type), an int, or a bool.
using TemplateArg = std::variant<Dtype, int, bool>;
using TemplateArgs = std::vector<std::pair<std::string, TemplateArg>>;
using Dims = std::array<int, 3>;

/// What metal_kernel() was given; immutable once created.
struct KernelSpec {
  std::string name;
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  std::string source;  // the kernel body
  std::string header;  // program-scope code placed before the kernel
  bool ensure_row_contiguous = true;
  bool atomic_outputs = false;
  std::string math_mode = "safe";  // "safe" | "relaxed" | "fast"
  /// Robust mode: bounds-checked buffer accesses; out-of-range reads give 0, writes are dropped,
  /// each is reported (see take_out_of_range_reports). Also process-wide with ALLOY_ROBUST=1.
  bool robust = false;
};

/// A launch dimension or output dimension given as an expression of the inputs' shapes, so that
/// a traced graph computes the right geometry for new input sizes (shapeless compile, export):
///   using E = alloy::ShapeExpr;
///   call.grid_expr = {{E::size(0), 1, 1}};
///   call.output_shape_exprs = {{E::dim(0, 0), E::ceil_div(E::dim(0, 1), 32)}};
class ShapeExpr {
 public:
  ShapeExpr(int64_t value = 0);  // NOLINT: a constant converts implicitly
  ShapeExpr(int value) : ShapeExpr(static_cast<int64_t>(value)) {}  // NOLINT
  /// inputs[input].shape[axis] (a negative axis counts from the end).
  static ShapeExpr dim(int input, int axis);
  /// inputs[input].size (elements).
  static ShapeExpr size(int input);
  static ShapeExpr ceil_div(const ShapeExpr& a, const ShapeExpr& b);
  static ShapeExpr min(const ShapeExpr& a, const ShapeExpr& b);
  static ShapeExpr max(const ShapeExpr& a, const ShapeExpr& b);
  friend ShapeExpr operator+(const ShapeExpr& a, const ShapeExpr& b);
  friend ShapeExpr operator-(const ShapeExpr& a, const ShapeExpr& b);
  friend ShapeExpr operator*(const ShapeExpr& a, const ShapeExpr& b);
  /// Floor division.
  friend ShapeExpr operator/(const ShapeExpr& a, const ShapeExpr& b);

  /// The value for inputs of these shapes. Throws std::invalid_argument for a missing input or
  /// axis, or a division by zero.
  int64_t eval(const std::vector<Shape>& input_shapes) const;
  bool is_constant() const;
  /// "ceil_div(in0.shape[1], 32)"-style text, for messages.
  std::string str() const;
  /// The expression as a postfix program of integers (stable: export files store it).
  std::vector<int64_t> code() const;
  /// Reads code(); throws std::invalid_argument for a malformed program.
  static ShapeExpr from_code(std::vector<int64_t> code);
  bool operator==(const ShapeExpr& o) const { return code() == o.code(); }

 private:
  int64_t value_ = 0;  // a constant (code_ empty): no allocation per launch dimension
  std::vector<int64_t> code_;
};
using DimsExpr = std::array<ShapeExpr, 3>;

/// Options of one call (MLX's keyword arguments after `inputs`).
struct KernelCall {
  std::vector<Shape> output_shapes;
  std::vector<Dtype> output_dtypes;
  Dims grid{1, 1, 1};
  Dims threadgroup{1, 1, 1};
  TemplateArgs template_args;
  std::optional<double> init_value;  // outputs are filled with it before the kernel runs
  bool verbose = false;              // print the generated Metal source
  std::optional<Device> device;      // default device when omitted
  std::optional<Stream> stream;      // runs on this stream (its device); the device's default
  /// Geometry as expressions of the input shapes; when set they replace grid / threadgroup /
  /// output_shapes (which may then be left empty).
  std::optional<DimsExpr> grid_expr;
  std::optional<DimsExpr> threadgroup_expr;
  std::vector<std::vector<ShapeExpr>> output_shape_exprs;
};

namespace detail {
struct KernelVariants;  // compiled variants of one kernel (per dtypes/template args/device)
}

class MetalKernel {
 public:
  explicit MetalKernel(std::shared_ptr<const KernelSpec> spec);

  /// Enqueues the kernel; returns its outputs (lazy). Throws std::invalid_argument for bad
  /// arguments, alloy::CompileError when the source does not compile.
  std::vector<Array> operator()(const std::vector<Array>& inputs, const KernelCall& call) const;
  /// The same, taking the list of inputs over (a caller done with it saves its copy).
  std::vector<Array> operator()(std::vector<Array>&& inputs, const KernelCall& call) const;

  /// MLX's positional C++ order: inputs, output_shapes, output_dtypes, grid, threadgroup, ...
  std::vector<Array> operator()(const std::vector<Array>& inputs,
                                const std::vector<Shape>& output_shapes,
                                const std::vector<Dtype>& output_dtypes, Dims grid,
                                Dims threadgroup, const TemplateArgs& template_args = {},
                                std::optional<double> init_value = std::nullopt,
                                bool verbose = false,
                                std::optional<Device> device = std::nullopt) const;

  /// The Metal source (byte-identical to MLX's) that this call would compile.
  std::string metal_source(const std::vector<Array>& inputs, const KernelCall& call) const;

  const KernelSpec& spec() const { return *spec_; }

 private:
  std::shared_ptr<const KernelSpec> spec_;
  std::shared_ptr<detail::KernelVariants> variants_;
};

/// Creates a kernel from a Metal body, as mx.fast.metal_kernel does. compile_options accepts
/// {"math_mode": "safe"|"relaxed"|"fast"}; anything else raises std::invalid_argument.
MetalKernel metal_kernel(const std::string& name, const std::vector<std::string>& input_names,
                         const std::vector<std::string>& output_names, const std::string& source,
                         const std::string& header = "", bool ensure_row_contiguous = true,
                         bool atomic_outputs = false,
                         const std::map<std::string, std::string>& compile_options = {},
                         bool robust = false);

/// One out-of-range buffer access made by a robust-mode kernel (the access was suppressed).
struct OutOfRangeAccess {
  std::string kernel;
  std::string buffer;                       // the input/output name (or "buffer(n)")
  int64_t index = 0;                        // element index relative to the start of the buffer
  std::array<uint32_t, 3> thread{0, 0, 0};  // thread_position_in_grid
};

/// The out-of-range accesses reported since the last call (and forgets them). Each robust launch
/// that made some also prints a one-line summary to stderr, which counts them all. Kept: the
/// first 64 accesses of each launch (on the GPU, the first 64 to be recorded, in no set order),
/// and at most 4096 in all until this is called; the rest are counted on stderr only.
std::vector<OutOfRangeAccess> take_out_of_range_reports();

/// True when ALLOY_ROBUST=1 makes every kernel robust.
bool robust_by_default();

}  // namespace alloy
