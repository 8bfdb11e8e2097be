// Array: a lazy, reference-counted handle to an n-d array on a device.
//
// An array is either materialized (it owns a view of a buffer) or pending (it is the output of a
// primitive, e.g. a custom Metal kernel, whose inputs are arrays). eval() materializes it; reading
// data evaluates implicitly. Views (slices with steps, transposes) share the buffer of their
// source.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "alloy/device.h"
#include "alloy/dtype.h"
#include "alloy/stream.h"

namespace alloy {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;  // in elements, may be negative

struct ArrayNode;  // internal (src/core/array_node.h)

/// One axis of a slice: start, stop (exclusive), step; python-like defaults and negatives.
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
};

class Array {
 public:
  Array() = default;
  /// 0-d scalars. As in MLX, a C++ float becomes float32, an int int32, a bool bool.
  Array(float v);
  Array(int v);
  Array(bool v);
  /// Creates an array from host data of `dtype`, row-major, copied to `device`.
  static Array from_bytes(const void* data, Shape shape, Dtype dtype,
                          std::optional<Device> device = std::nullopt);
  /// Creates an array of `dtype` from float64 values (converted with round-to-nearest).
  static Array from_doubles(const std::vector<double>& values, Shape shape, Dtype dtype,
                            std::optional<Device> device = std::nullopt);
  template <class T>
  static Array from_vector(const std::vector<T>& v, Shape shape, Dtype dtype,
                           std::optional<Device> device = std::nullopt) {
    return from_bytes(v.data(), std::move(shape), dtype, device);
  }

  /// Wraps memory owned elsewhere (e.g. a DLPack tensor) without copying. `data` points at
  /// element 0 (host memory for cpu, a device pointer for gpu); `strides` are in elements (empty:
  /// row-major); `release` runs when the last Alloy view of it goes away.
  static Array from_external(void* data, Shape shape, Strides strides, Dtype dtype, Device device,
                             std::function<void()> release);

  bool valid() const { return node_ != nullptr; }
  Dtype dtype() const;
  const Shape& shape() const;
  int64_t shape(int axis) const;
  const Strides& strides() const;
  int64_t offset() const;  // in elements, into the buffer
  Device device() const;
  int ndim() const;
  int64_t size() const;
  size_t nbytes() const;  // size() * itemsize
  size_t itemsize() const { return size_of(dtype()); }

  /// True when the array is materialized.
  bool is_evaluated() const;
  /// Materializes the array (and what it depends on). GPU work is enqueued, not waited for.
  void eval() const;
  /// Row-major contiguous with offset 0 into its buffer's first element?
  bool is_row_contiguous() const;

  /// Row-major bytes of the logical array (evaluates; copies from the GPU if needed).
  std::vector<uint8_t> to_bytes() const;
  /// Logical elements converted to double (any dtype; complex64 gives the real parts).
  std::vector<double> to_doubles() const;
  template <class T>
  std::vector<T> to_vector() const {
    auto b = to_bytes();
    std::vector<T> out(b.size() / sizeof(T));
    std::copy(b.begin(), b.begin() + out.size() * sizeof(T),
              reinterpret_cast<uint8_t*>(out.data()));
    return out;
  }
  /// Scalar value of a 1-element array as double.
  double item() const;

  // Views and moves are lazy: each returns a pending array; nothing is evaluated here.

  /// Strided view: one Slice per leading axis (missing axes are taken whole).
  Array slice(const std::vector<Slice>& slices) const;
  /// Transposed view; empty `axes` reverses them.
  Array transpose(std::vector<int> axes = {}) const;
  /// The same elements in a new shape (one dimension may be -1); a view of row-contiguous
  /// arrays, else of a row-major copy.
  Array reshape(Shape shape) const;
  /// Numpy broadcasting to `shape` (a view with stride 0 along broadcast axes).
  Array broadcast_to(Shape shape) const;
  /// numpy's as_strided, relative to this array's element 0 (strides and offset in elements);
  /// the view must stay within this array's elements (std::invalid_argument otherwise).
  Array as_strided(Shape shape, Strides strides, int64_t offset = 0) const;
  /// Same data as a row-major contiguous array (a copy unless it already is one).
  Array contiguous() const;
  /// Converted to `dtype` (C casts, as numpy's astype; this array when the dtype is the same).
  Array astype(Dtype dtype) const;
  /// Copy on another device.
  Array to(Device device) const;

  /// Address of element 0 (a host pointer on the CPU, a device pointer on the GPU) of an
  /// evaluated array; std::invalid_argument when it is not evaluated.
  const void* data() const;
  void* data();
  template <class T>
  const T* data() const {
    return static_cast<const T*>(data());
  }
  template <class T>
  T* data() {
    return static_cast<T*>(data());
  }

 private:
  friend const std::shared_ptr<ArrayNode>& node_of(const Array& a);
  friend Array array_of(std::shared_ptr<ArrayNode> node);
  const std::shared_ptr<ArrayNode>& node() const { return node_; }
  explicit Array(std::shared_ptr<ArrayNode> node) : node_(std::move(node)) {}

 private:
  std::shared_ptr<ArrayNode> node_;
};

/// Evaluates several arrays together; returns when their data can be read (GPU work may still
/// be running: reading data waits for it). Rethrows the error of a primitive that failed.
void eval(const std::vector<Array>& arrays);
/// Hands the work below `arrays` to its streams and returns at once (CPU streams run it on their
/// worker threads); reading the arrays, eval() or synchronize() waits for it.
void async_eval(const std::vector<Array>& arrays);
/// Evaluates `a` when that happens entirely on the calling thread, without waiting for any
/// other thread: `a` is materialized already, or its op reads only materialized inputs, runs on
/// a CPU stream with nothing queued, and its primitive runs inline (Primitive::runs_inline: a
/// compiled metal_kernel of one small launch). Returns false, having done nothing, otherwise
/// (`a.eval()` then evaluates it as usual). Errors are those of `a.eval()`. The Python binding
/// keeps the GIL through such an evaluation (docs/architecture.md, "The GIL and evaluation").
/// ALLOY_EVAL_INLINE=0 (read once) makes it always return false: every evaluation then takes the
/// usual path (for measurements); a value that is not a flag raises std::invalid_argument.
bool eval_inline(const Array& a);
/// Waits until the work on every stream of `device` has finished (the default device when
/// omitted); rethrows the first error of queued work.
void synchronize(std::optional<Device> device = std::nullopt);

// Creation helpers (row-major, materialized on `device`, default device when omitted).
Array zeros(const Shape& shape, Dtype dtype, std::optional<Device> device = std::nullopt);
Array full(const Shape& shape, double value, Dtype dtype,
           std::optional<Device> device = std::nullopt);
Array arange(int64_t n, Dtype dtype, std::optional<Device> device = std::nullopt);
/// Uniform random values in [low, high), deterministic for a seed.
Array random_uniform(const Shape& shape, Dtype dtype, double low = -1.0, double high = 1.0,
                     uint64_t seed = 0, std::optional<Device> device = std::nullopt);

}  // namespace alloy
