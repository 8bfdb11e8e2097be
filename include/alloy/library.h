// Whole Metal libraries: one source with several kernels, called by name, as with PyTorch's
// torch.mps.compile_shader.
//
//   auto lib = alloy::compile_library(R"(
//       kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
//                        constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
//         y[i] += a * x[i];
//       })");
//   alloy::LibraryCall call;
//   call.threads = {n, 1, 1};        // total threads (dispatchThreads), not threadgroups
//   call.group_size = {256, 1, 1};
//   alloy::Array y2 = lib("axpy", {x, y, 2.0f}, call)[0];  // the new y; `y` itself is unchanged
//
// Arguments bind to the kernel's buffer and `constant T&` parameters in declaration order
// (attribute and [[threadgroup(n)]] parameters take none). A call returns the new contents of the
// buffers the kernel can write (non-const `device` pointers and references), in order: kernels
// write in place as on Metal, but the arrays given are never modified (copy-on-write).
// docs/libraries.md describes dispatch, dtype placeholders, references, check mode and fallback.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "alloy/array.h"
#include "alloy/errors.h"
#include "alloy/kernel.h"
#include "alloy/stream.h"

namespace alloy {

/// A reference implementation of a kernel. It receives the call's arguments, one per buffer or
/// scalar parameter in declaration order (scalars as 0-d arrays of the parameter's dtype, the
/// previous contents of writable buffers as given, omitted writable buffers as invalid arrays),
/// and returns the new contents of the writable buffers, in order.
using ReferenceFn = std::function<std::vector<Array>(const std::vector<Array>& args)>;

/// An argument of a library kernel call.
class KernelArg {
 public:
  /// A new buffer of this shape and dtype, zero-filled before the kernel runs.
  struct NewBuffer {
    Shape shape;
    Dtype dtype;
  };
  using Value = std::variant<std::monostate, Array, double, int64_t, uint64_t, bool, NewBuffer>;

  /// Omitted: a writable buffer whose shape and dtype the kernel's reference infers.
  KernelArg() = default;
  KernelArg(Array a) : value_(std::move(a)) {}
  /// A number for a `constant T&` parameter, converted to T (float, half, int, uint, bool...).
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  KernelArg(T v) {
    if constexpr (std::is_same_v<T, bool>)
      value_ = v;
    else if constexpr (std::is_floating_point_v<T>)
      value_ = static_cast<double>(v);
    else if constexpr (std::is_signed_v<T>)
      value_ = static_cast<int64_t>(v);
    else
      value_ = static_cast<uint64_t>(v);
  }
  KernelArg(NewBuffer b) : value_(std::move(b)) {}
  /// A new zero-filled buffer for a writable parameter.
  static KernelArg output(Shape shape, Dtype dtype) { return NewBuffer{std::move(shape), dtype}; }

  const Value& value() const { return value_; }
  bool omitted() const { return std::holds_alternative<std::monostate>(value_); }

 private:
  Value value_;
};

/// Options of one library kernel call (torch.mps.compile_shader's keyword arguments and more).
struct LibraryCall {
  /// Threads per grid dimension: the TOTAL number of threads (Metal dispatchThreads), not the
  /// number of threadgroups. Default: (size of the first array argument, 1, 1).
  std::optional<Dims> threads;
  /// Threads per threadgroup (product <= 1024, and <= [[max_total_threads_per_threadgroup]]).
  /// Default: (min(threads.x, 256 or the kernel's maximum), 1, 1).
  std::optional<Dims> group_size;
  /// Bytes of each [[threadgroup(n)]] parameter, by n (Metal's setThreadgroupMemoryLength).
  std::map<int, size_t> threadgroup_memory;
  /// Where the kernel runs; the default device when omitted. Arrays are moved there.
  std::optional<Device> device;
  /// The stream it runs on (its device); the device's default stream when omitted.
  std::optional<Stream> stream;
  /// Check mode: when the outputs are evaluated, run the kernel and its reference and compare
  /// (a mismatch raises CheckError where the outputs are read). Default: the library's setting,
  /// else the ALLOY_CHECK environment variable.
  std::optional<bool> check;
  /// Run the reference (at evaluation) when the kernel cannot run on the device it is evaluated
  /// on (default: the library's setting).
  std::optional<bool> fallback;
  /// Check-mode tolerances |kernel - ref| <= atol + rtol * |ref|; default per output dtype.
  std::optional<double> rtol, atol;
};

/// The value of a Metal function constant (`constant T name [[function_constant(n)]];`),
/// converted to the constant's declared type T.
using FunctionConstant = std::variant<bool, int64_t, double>;

/// Options of compile_library.
struct LibraryOptions {
  /// Headers the source may `#include "name"` (or `<name>`), by the name written in the
  /// directive; looked up before include_dirs. Included text keeps its own line numbers in
  /// compiler messages ("name.h:12").
  std::map<std::string, std::string> headers;
  /// Folders searched, in order, for `#include`d headers not in `headers` (a "..." include also
  /// searches the including header's folder first). Metal's own headers (`<metal_stdlib>`...)
  /// are always provided; `#include <MetalPerformancePrimitives/...>` raises NotSupported.
  std::vector<std::string> include_dirs;
  /// Values of function constants, by index n of `[[function_constant(n)]]` and by the
  /// constant's name (as MTLFunctionConstantValues' setConstantValue:type:atIndex: / withName:).
  /// A constant given no value is undefined: `is_function_constant_defined(name)` is false. The
  /// values are part of the compiled source, hence of the compile cache key. A value for a
  /// constant the source does not declare raises std::invalid_argument.
  std::map<int, FunctionConstant> function_constants;
  std::map<std::string, FunctionConstant> named_function_constants;
  /// Dtype placeholders (CoreAI style): {"A": "TYPE"} replaces the identifier TYPE in the source
  /// by the Metal type of the dtype of argument "A" of each call (float, half, bfloat16_t...); one
  /// compiled variant per combination of dtypes.
  std::map<std::string, std::string> template_dtypes;
  /// "safe" (default), "relaxed" or "fast", as metal_kernel's compile_options.
  std::string math_mode = "safe";
  /// Reference implementations, by kernel name (see ReferenceFn). A kernel with a reference may
  /// fail to compile without failing the library: its calls run the reference (fallback).
  std::map<std::string, ReferenceFn> references;
  /// Run a kernel's reference (with a one-time warning) when the kernel cannot be compiled or
  /// launched on the device. ALLOY_FALLBACK=0 disables it by default.
  std::optional<bool> fallback;
  /// Check mode for every call (default: ALLOY_CHECK=1 in the environment).
  std::optional<bool> check;
  /// Robust mode for every kernel of the library (also ALLOY_ROBUST=1): bounds-checked buffer
  /// accesses, reported like metal_kernel's (take_out_of_range_reports), naming the parameter.
  bool robust = false;
  /// Name of the library in messages.
  std::string name = "library";
};

/// A kernel parameter as the library declares it (after template arguments are substituted).
struct KernelParamInfo {
  enum class Kind {
    buffer,       // `device`/`constant` pointer or `device T&`: takes an array
    scalar,       // `constant T&` (or `const device T&`): takes a number or a 0-d array
    threadgroup,  // [[threadgroup(n)]]: sized by LibraryCall::threadgroup_memory
    attribute,    // [[thread_position_in_grid]] etc.: takes no argument
  };
  std::string name;
  Kind kind = Kind::buffer;
  int index = -1;              // n of [[buffer(n)]] / [[threadgroup(n)]]
  std::string type;            // e.g. "const device float*"
  std::string element_type;    // e.g. "float", "half4", "atomic<uint>", "Params", a placeholder
  std::optional<Dtype> dtype;  // the dtype an array must have; none: any (structs) or placeholder
  std::string placeholder;     // element type is this template_dtypes placeholder
  bool writable = false;       // the call returns the buffer's new contents
  std::string attribute;       // Kind::attribute: e.g. "thread_position_in_grid"

  /// True for parameters that take an argument (buffers and scalars).
  bool takes_argument() const { return kind == Kind::buffer || kind == Kind::scalar; }
};

struct KernelInfo {
  std::string name;      // host name, what calls use
  std::string function;  // e.g. "reduce_sum<float>"
  std::vector<KernelParamInfo> params;
  int max_total_threads = 0;  // [[max_total_threads_per_threadgroup(n)]], 0 if none

  /// `name(const device float* x [[buffer(0)]], ..., uint i [[thread_position_in_grid]])`.
  std::string signature() const;
};

/// A check-mode mismatch between a kernel and its reference.
class CheckError : public Error {
 public:
  CheckError(std::string kernel, const std::string& what, std::string output, double max_abs,
             double max_rel, std::vector<int64_t> first_index)
      : Error(std::move(kernel), what),
        output_(std::move(output)),
        max_abs_(max_abs),
        max_rel_(max_rel),
        first_index_(std::move(first_index)) {}
  const std::string& output() const { return output_; }  // the parameter's name
  double max_abs_error() const { return max_abs_; }
  double max_rel_error() const { return max_rel_; }
  const std::vector<int64_t>& first_index() const { return first_index_; }

 private:
  std::string output_;
  double max_abs_, max_rel_;
  std::vector<int64_t> first_index_;
};

/// Options of Library::precompile.
struct PrecompileOptions {
  /// The device to compile for; the default device when omitted.
  std::optional<Device> device;
  /// Return at once and compile on background threads (oneTBB); a call of a kernel still being
  /// compiled waits for it. Errors then show at the kernels' calls.
  bool background = false;
  /// The dtype of each template_dtypes placeholder (by placeholder name; default float32).
  std::map<std::string, Dtype> placeholders;
  /// Only these kernels (host names), compiled as the other kernels' first calls would not be
  /// (an unknown name raises std::invalid_argument); every kernel when empty.
  std::vector<std::string> kernels;
};

namespace detail {
struct LibraryState;
struct LibraryAccess;  // internal (src/kernel/library.cpp)
}  // namespace detail

class Library;

/// A handle on one kernel of a library (cheap to copy; keeps the library alive).
class LibraryKernel {
 public:
  const std::string& name() const { return name_; }
  const KernelInfo& info() const;
  /// Runs the kernel (see Library::operator()).
  std::vector<Array> operator()(const std::vector<KernelArg>& args,
                                const LibraryCall& call = {}) const;
  /// Attaches (or replaces; an empty function removes) the kernel's reference implementation.
  void set_reference(ReferenceFn fn) const;
  bool has_reference() const;

 private:
  friend class Library;
  LibraryKernel(std::shared_ptr<detail::LibraryState> s, std::string name)
      : state_(std::move(s)), name_(std::move(name)) {}
  std::shared_ptr<detail::LibraryState> state_;
  std::string name_;
};

class Library {
 public:
  /// Host names of the kernels, in source order.
  std::vector<std::string> kernel_names() const;
  bool has_kernel(std::string_view name) const;
  /// Reflection of a kernel. Throws std::invalid_argument (listing the kernels) for unknown names.
  const KernelInfo& kernel_info(std::string_view name) const;
  LibraryKernel kernel(std::string_view name) const;

  /// Runs kernel `name`: returns pending outputs of a LibraryKernel primitive (nothing is
  /// compiled or run until they are evaluated). Throws std::invalid_argument for an unknown name
  /// or arguments that do not fit the kernel (the message shows its signature), and
  /// alloy::NotSupported for a kernel Alloy cannot read that has no reference to fall back to.
  /// Evaluating the outputs raises alloy::CompileError / NotSupported when the kernel cannot run
  /// there and has no reference (or fallback is off), alloy::CheckError in check mode when the
  /// kernel and its reference disagree.
  std::vector<Array> operator()(std::string_view name, const std::vector<KernelArg>& args,
                                const LibraryCall& call = {}) const;

  /// Compiles every kernel now (kernels otherwise compile one at a time, at their first call on
  /// a device), in a few translation units compiled in parallel. Throws, as a call would, the
  /// error of the first kernel that cannot run and has no reference to fall back to
  /// (alloy::CompileError with the user's lines, alloy::NotSupported); kernels already compiled
  /// (or being compiled) for that device are not compiled again.
  void precompile(const PrecompileOptions& options = {}) const;

  void set_reference(std::string_view name, ReferenceFn fn) const;
  /// The source as given.
  const std::string& source() const;

 private:
  friend Library compile_library(const std::string&, const LibraryOptions&);
  friend struct detail::LibraryAccess;
  explicit Library(std::shared_ptr<detail::LibraryState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::LibraryState> state_;
};

/// Reads a whole Metal source: `[[kernel]]`/`kernel` functions, helpers, structs, templates
/// instantiated with [[host_name("...")]] (also through MLX-style instantiate_kernel macros).
/// It is translated at once (reflection: kernel names and parameters, argument checks), but a
/// kernel is compiled only when it is first called on a device, alone (a library of thousands of
/// instantiations costs the caller of one kernel about what that kernel alone costs);
/// Library::precompile compiles everything up front. Throws std::invalid_argument for sources it
/// cannot read, alloy::NotSupported when a kernel without a reference uses a feature Alloy does
/// not support. Compile errors (alloy::CompileError) show at the kernel's first evaluation, or in
/// precompile().
Library compile_library(const std::string& source, const LibraryOptions& options = {});

/// Where warnings (e.g. "kernel 'k' runs its reference") go; the default prints to stderr.
/// An empty function restores the default. Returns the previous handler.
std::function<void(const std::string&)> set_warning_handler(
    std::function<void(const std::string&)> handler);

}  // namespace alloy
