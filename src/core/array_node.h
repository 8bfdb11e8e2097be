// The node behind an Array handle.
#pragma once
#include <exception>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "alloy/array.h"
#include "alloy/stream.h"
#include "core/buffer.h"
#include "core/primitive.h"

namespace alloy {
struct OpDone;

struct ArrayNode;

/// An op's weak references to its output nodes: the first in place, the others in a vector (most
/// ops have one output: a kernel call then allocates no list for it).
class OutputRefs {
 public:
  size_t size() const { return has_first_ ? 1 + rest_.size() : 0; }
  void reserve(size_t n) {
    if (n > 1) rest_.reserve(n - 1);
  }
  void push_back(std::weak_ptr<ArrayNode> w) {
    if (has_first_) {
      rest_.push_back(std::move(w));
    } else {
      first_ = std::move(w);
      has_first_ = true;
    }
  }
  const std::weak_ptr<ArrayNode>& operator[](size_t i) const { return i ? rest_[i - 1] : first_; }

  class const_iterator {
   public:
    const_iterator(const OutputRefs* r, size_t i) : r_(r), i_(i) {}
    const std::weak_ptr<ArrayNode>& operator*() const { return (*r_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }

   private:
    const OutputRefs* r_;
    size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

 private:
  bool has_first_ = false;
  std::weak_ptr<ArrayNode> first_;
  std::vector<std::weak_ptr<ArrayNode>> rest_;
};

/// A list an op keeps of its outputs' shapes or dtypes: its own, or one borrowed from the op's
/// primitive (a kernel's cached call: a repeated call copies no list and updates no reference
/// count). Read as a const std::vector.
template <class T>
class OutputList {
 public:
  OutputList() = default;
  OutputList(std::vector<T> own) : own_(std::move(own)) {}
  OutputList(std::initializer_list<T> items) : own_(items) {}
  /// `list` must outlive this list and its moves (the op's primitive owns it); a copy owns a copy.
  static OutputList borrowed(const std::vector<T>& list) {
    OutputList l;
    l.ref_ = &list;
    return l;
  }
  OutputList(const OutputList& o) : own_(o.get()) {}
  OutputList(OutputList&& o) noexcept
      : own_(std::move(o.own_)), ref_(std::exchange(o.ref_, nullptr)) {}
  OutputList& operator=(const OutputList& o) {
    if (this != &o) *this = OutputList(o);
    return *this;
  }
  OutputList& operator=(OutputList&& o) noexcept {
    own_ = std::move(o.own_);
    ref_ = std::exchange(o.ref_, nullptr);
    return *this;
  }

  const std::vector<T>& get() const { return ref_ ? *ref_ : own_; }
  operator const std::vector<T>&() const { return get(); }
  size_t size() const { return get().size(); }
  bool empty() const { return get().empty(); }
  const T& operator[](size_t i) const { return get()[i]; }
  const T& at(size_t i) const { return get().at(i); }
  auto begin() const { return get().begin(); }
  auto end() const { return get().end(); }
  friend bool operator==(const OutputList& a, const OutputList& b) { return a.get() == b.get(); }

 private:
  std::vector<T> own_;
  const std::vector<T>* ref_ = nullptr;  // a borrowed list; null: own_
};

/// A primitive application whose outputs are not computed yet. Shared by all its outputs.
struct PendingOp {
  PendingOp() = default;
  /// An op with its primitive, inputs, outputs' shapes and dtypes and stream, made in place (a
  /// kernel call's: no default-made fields assigned again).
  PendingOp(std::shared_ptr<Primitive> p, std::vector<Array>&& in, OutputList<Shape>&& s,
            OutputList<Dtype>&& d, Stream st)
      : primitive(std::move(p)),
        inputs(std::move(in)),
        shapes(std::move(s)),
        dtypes(std::move(d)),
        device(st.device),
        stream(st) {}

  std::shared_ptr<Primitive> primitive;
  std::vector<Array> inputs;
  OutputRefs outputs;
  OutputList<Shape> shapes;  // of every output, also those whose handles were dropped
  OutputList<Dtype> dtypes;
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

/// Per-thread recycling of pending outputs' nodes (array.cpp): make() gives a node whose buffer
/// and pending link are null and offset 0, its other fields to be set (its shape and strides
/// storage reused, no allocation for them when the recycled node's fits); pooled() counts the
/// calling thread's spare nodes (tests).
namespace node_pool {
inline constexpr size_t kCapacity = 256;  // spare nodes a thread keeps
std::shared_ptr<ArrayNode> make();
size_t pooled();
}  // namespace node_pool

Strides row_major_strides(const Shape& shape);
/// Equality of shapes (or strides, or lists of them, or of dtypes) as a loop: operator== calls
/// memcmp, tens of instructions more per comparison on a cached kernel call's path, which
/// compares a few short lists (issue 9 item 7).
template <class T>
inline bool same_list(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if constexpr (requires { typename T::value_type; }) {
      if (!same_list(a[i], b[i])) return false;
    } else {
      if (a[i] != b[i]) return false;
    }
  return true;
}
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
/// The same with output shapes and dtypes that `primitive` owns (a cached kernel call's): the op
/// borrows them (no copy, no reference count); they must live as long as the primitive, and
/// their sizes were checked with check_output_sizes when the primitive kept them (a repeated
/// call does not check them again).
std::vector<Array> make_pending_borrowed(std::shared_ptr<Primitive> primitive,
                                         std::vector<Array> inputs,
                                         const std::vector<Shape>& shapes,
                                         const std::vector<Dtype>& dtypes, Stream stream);
/// Throws std::invalid_argument, as make_pending does, for a negative dimension or a size in
/// bytes that overflows int64.
void check_output_sizes(const std::vector<Shape>& shapes, const std::vector<Dtype>& dtypes);
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
