#include "alloy/array.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "alloy/errors.h"
#include "alloy/interrupt.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "core/block_pool.h"
#include "core/half_convert.h"
#include "core/host_allocator.h"
#include "core/hot.h"
#include "core/primitives.h"
#include "core/scheduler.h"
#include "core/thread_cache.h"

namespace alloy {

// ---- buffers ---------------------------------------------------------------------------------

ALLOY_HOT std::shared_ptr<Buffer> allocate(Device device, size_t nbytes) {
  try {
    return backend(device).allocate(nbytes);
  } catch (const OutOfMemory&) {
    throw;
  } catch (const std::bad_alloc&) {
    // Say how much was asked for: a bare std::bad_alloc does not tell a typo'd shape from a
    // machine that is out of memory.
    char size[32];
    std::snprintf(size, sizeof size, "%.1f GiB", static_cast<double>(nbytes) / (1ull << 30));
    throw OutOfMemory("cannot allocate " + std::to_string(nbytes) + " bytes (" + size +
                      ") for an array on the " +
                      (device.type == Device::Type::gpu ? "GPU" : "CPU"));
  }
}

// ---- nodes -----------------------------------------------------------------------------------

namespace {
// Row-major strides of `shape` into `out` (its storage reused: a recycled node's).
ALLOY_HOT void set_row_major_strides(const Shape& shape, Strides& out) {
  out.resize(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    out[i] = acc;
    acc *= shape[i];
  }
}
}  // namespace

Strides row_major_strides(const Shape& shape) {
  Strides s;
  set_row_major_strides(shape, s);
  return s;
}

namespace live_count {
namespace {
// Every slot ever made (never freed: a buffer may be freed during static destruction, after
// thread-local destructors ran), the free ones for reuse by later threads, and the counts of
// exited threads and of threads without a slot.
struct Registry {
  std::mutex mu;
  Slot* all = nullptr;
  std::vector<Slot*> free;
  std::atomic<int64_t> base{0};
};
Registry* g_registry = nullptr;
Registry& registry() {
  // Leaked: used during static destruction. Its lock is held across fork() (taken before, let go
  // after, in parent and child), so a child never starts with it held by a thread it lacks.
  static Registry* r = [] {
    g_registry = new Registry;
    pthread_atfork([] { g_registry->mu.lock(); }, [] { g_registry->mu.unlock(); },
                   [] { g_registry->mu.unlock(); });
    return g_registry;
  }();
  return *r;
}
thread_local bool t_exited = false;
// Gives the slot back at the thread's exit: its count moves to the shared total.
struct Owner {
  bool made = false;
  ~Owner() {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    if (Slot* s = std::exchange(t_slot, nullptr)) {
      r.base.fetch_add(s->n.exchange(0, std::memory_order_relaxed), std::memory_order_relaxed);
      r.free.push_back(s);
    }
    t_exited = true;
  }
};
thread_local Owner t_owner;
// Made when the library loads, before any thread of the process: a fork() while another thread
// ran registry()'s first call would leave the child waiting on its initialisation forever.
[[maybe_unused]] Registry& g_registry_at_load = registry();
}  // namespace

constinit thread_local Slot* t_slot = nullptr;

void add_slow(int64_t d) {
  Registry& r = registry();
  if (t_exited) {
    r.base.fetch_add(d, std::memory_order_relaxed);
    return;
  }
  t_owner.made = true;  // constructs it: its destructor returns the slot
  std::lock_guard lock(r.mu);
  Slot* s;
  if (!r.free.empty()) {
    s = r.free.back();
    r.free.pop_back();
  } else {
    s = new Slot;
    s->next = r.all;
    r.all = s;
  }
  s->n.store(d, std::memory_order_relaxed);
  t_slot = s;
}

int64_t total() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  int64_t n = r.base.load(std::memory_order_relaxed);
  for (Slot* s = r.all; s; s = s->next) n += s->n.load(std::memory_order_relaxed);
  return n;
}
}  // namespace live_count

int64_t live_buffers() {
  return live_count::total();
}

namespace {
std::string shape_text(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}
}  // namespace

// Element count, checked: a product that overflows int64 must not wrap (to 0, say).
ALLOY_HOT int64_t checked_numel(const Shape& shape) {
  // One pass (it runs for every output a kernel call allocates): a zero dimension makes the count
  // 0 even where the other dimensions' product would overflow.
  int64_t n = 1;
  bool zero = false, overflow = false;
  for (auto d : shape) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_text(shape));
    zero |= d == 0;
    overflow |= __builtin_mul_overflow(n, d, &n);
  }
  if (zero) return 0;
  if (overflow)
    throw std::invalid_argument("the element count of shape " + shape_text(shape) +
                                " overflows a 64-bit integer");
  return n;
}

namespace {
// Bytes of a row-major array, checked against int64 (what byte offsets are computed in).
ALLOY_HOT size_t checked_nbytes(const Shape& shape, Dtype dtype) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(checked_numel(shape), static_cast<int64_t>(size_of(dtype)), &bytes))
    throw std::invalid_argument("the size in bytes of shape " + shape_text(shape) + " of " +
                                std::string(dtype_name(dtype)) + " overflows a 64-bit integer");
  return static_cast<size_t>(bytes);
}
}  // namespace

Array make_empty(const Shape& shape, Dtype dtype, Device device) {
  size_t bytes = checked_nbytes(shape, dtype);
  auto n = std::make_shared<ArrayNode>();
  n->dtype = dtype;
  n->shape = shape;
  n->strides = row_major_strides(shape);
  n->device = device;
  n->buffer = allocate(device, bytes);
  return array_of(n);
}

std::vector<Array> make_pending(std::shared_ptr<Primitive> primitive, std::vector<Array> inputs,
                                std::vector<Shape> shapes, std::vector<Dtype> dtypes,
                                Device device) {
  return make_pending(std::move(primitive), std::move(inputs), std::move(shapes), std::move(dtypes),
                      default_stream(device));
}

namespace node_pool {
namespace {
// Output nodes of pending ops, recycled per thread (core/thread_cache.h): a node dropped on a
// thread goes to that thread's cache with its shape and strides storage, and the thread's next
// pending output takes it (2 heap allocations fewer per kernel call: the node and its two vectors
// were 3; the control block of its reference count is the 1 left). The cache deletes its nodes
// at the thread's exit; a node dropped after that (static destruction) is deleted.
void release(ArrayNode* n) noexcept {
  delete n;
}
using Spare = ThreadCache<ArrayNode, 1, kCapacity, release>;

// The deleter of pooled nodes: what the node holds is released first (that may drop other
// nodes, recycled in turn), then the node goes to the cache, or is deleted when it is full.
struct Recycle {
  ALLOY_HOT void operator()(ArrayNode* n) const noexcept {
    n->buffer.reset();
    n->pending.reset();
    if (!Spare::give(0, n)) delete n;
  }
};
}  // namespace

// A node for a pending output (buffer and pending null, offset 0); the caller sets every other
// field. Its storage is a recycled node's when the thread has one.
ALLOY_HOT std::shared_ptr<ArrayNode> make() {
  ArrayNode* n = Spare::take(0);
  if (n)
    n->offset = 0;
  else
    n = new ArrayNode;
  // The reference-count block from the thread's block pool (on bad_alloc the deleter takes n).
  return std::shared_ptr<ArrayNode>(n, Recycle{}, block_pool::Allocator<ArrayNode>{});
}

size_t pooled() {
  return Spare::size(0);
}
}  // namespace node_pool

namespace {
// `checked`: the output sizes were checked already (check_output_sizes; a cached kernel call's).
template <class Shapes, class Dtypes>
ALLOY_HOT std::vector<Array> make_pending_op(std::shared_ptr<Primitive> primitive,
                                             std::vector<Array> inputs, Shapes shapes_in,
                                             Dtypes dtypes_in, Stream stream,
                                             bool checked = false) {
  Device device = stream.device;
  auto op = std::allocate_shared<PendingOp>(
      block_pool::Allocator<PendingOp>{}, std::move(primitive), std::move(inputs),
      OutputList<Shape>(std::move(shapes_in)), OutputList<Dtype>(std::move(dtypes_in)), stream);
  const std::vector<Shape>& shapes = op->shapes;
  const std::vector<Dtype>& dtypes = op->dtypes;
  std::vector<Array> outs;
  outs.reserve(shapes.size());
  op->outputs.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!checked) checked_nbytes(shapes[i], dtypes[i]);
    auto n = node_pool::make();
    n->dtype = dtypes[i];
    n->shape = shapes[i];
    set_row_major_strides(shapes[i], n->strides);
    n->device = device;
    op->outputs.push_back(n);
    // The last output takes this function's reference to the op, and every handle its node's
    // (no reference-count round trip per call).
    if (i + 1 < shapes.size())
      n->pending = op;
    else
      n->pending = std::move(op);
    outs.push_back(array_of(std::move(n)));
  }
  return outs;
}
}  // namespace

std::vector<Array> make_pending(std::shared_ptr<Primitive> primitive, std::vector<Array> inputs,
                                std::vector<Shape> shapes, std::vector<Dtype> dtypes,
                                Stream stream) {
  return make_pending_op(std::move(primitive), std::move(inputs), std::move(shapes),
                         std::move(dtypes), stream);
}

ALLOY_HOT std::vector<Array> make_pending_borrowed(std::shared_ptr<Primitive> primitive,
                                                   std::vector<Array> inputs,
                                                   const std::vector<Shape>& shapes,
                                                   const std::vector<Dtype>& dtypes,
                                                   Stream stream) {
  return make_pending_op(std::move(primitive), std::move(inputs),
                         OutputList<Shape>::borrowed(shapes), OutputList<Dtype>::borrowed(dtypes),
                         stream, /*checked=*/true);
}

void check_output_sizes(const std::vector<Shape>& shapes, const std::vector<Dtype>& dtypes) {
  if (shapes.size() != dtypes.size())
    throw std::invalid_argument("check_output_sizes: shapes and dtypes differ in count");
  for (size_t i = 0; i < shapes.size(); ++i) checked_nbytes(shapes[i], dtypes[i]);
}

Array make_pending_view(std::shared_ptr<Primitive> primitive, const Array& input,
                        const ViewLayout& layout) {
  auto op = std::make_shared<PendingOp>();
  op->primitive = std::move(primitive);
  op->inputs = {input};
  op->device = input.device();
  // A view runs where its input is produced (it only takes the input's buffer).
  {
    auto p = scheduler::pending_of(*node_of(input));
    op->stream = p ? p->stream : default_stream(op->device);
  }
  op->shapes = {layout.shape};
  op->dtypes = {input.dtype()};
  auto n = std::make_shared<ArrayNode>();
  n->dtype = input.dtype();
  n->shape = layout.shape;
  n->strides = layout.strides;
  n->offset = layout.offset;
  n->device = input.device();
  n->pending = op;
  op->view = true;
  op->outputs.push_back(n);
  return array_of(n);
}

ALLOY_HOT void allocate_output(Array& out) {
  ArrayNode& n = *node_of(out);
  n.buffer = allocate(n.device, checked_nbytes(n.shape, n.dtype));
}

void set_view(Array& out, const Array& in) {
  node_of(out)->buffer = node_of(in)->buffer;
}

// ---- Array -----------------------------------------------------------------------------------

namespace {
Array scalar_from(const void* v, Dtype t) {
  return Array::from_bytes(v, {}, t, Device::cpu());
}
}  // namespace

Array::Array(float v) : Array(scalar_from(&v, Dtype::float32)) {}
Array::Array(int v) : Array(scalar_from(&v, Dtype::int32)) {}
Array::Array(bool v) : Array(scalar_from(&v, Dtype::bool_)) {}

Array Array::from_bytes(const void* data, Shape shape, Dtype dtype, std::optional<Device> device) {
  Device d = device.value_or(default_device());
  Array a = make_empty(shape, dtype, d);
  size_t n = a.nbytes();
  if (n == 0) return a;
  backend(d).copy_to_device(node_of(a)->data(), data, n);
  return a;
}

namespace {
// A double to an integer type as NumPy's astype does on x86: in range, the truncated value; out of
// range, wrapped modulo 2^bits through int64 (C++20 defines that conversion); NaN gives 0. (A
// plain cast of an out-of-range double is undefined behaviour: UBSan stops CI on it.)
template <class T>
T wrap_to_int(double v) {
  if (std::isnan(v)) return T(0);
  if (v >= 0x1p63) return static_cast<T>(v < 0x1p64 ? static_cast<uint64_t>(v) : UINT64_MAX);
  if (v < -0x1p63) return static_cast<T>(INT64_MIN);
  return static_cast<T>(static_cast<int64_t>(v));
}

void store_double(void* dst, Dtype t, double v) {
  switch (t) {
    case Dtype::bool_:
      *static_cast<bool*>(dst) = v != 0;
      break;
    case Dtype::int8:
      *static_cast<int8_t*>(dst) = wrap_to_int<int8_t>(v);
      break;
    case Dtype::int16:
      *static_cast<int16_t*>(dst) = wrap_to_int<int16_t>(v);
      break;
    case Dtype::int32:
      *static_cast<int32_t*>(dst) = wrap_to_int<int32_t>(v);
      break;
    case Dtype::int64:
      *static_cast<int64_t*>(dst) = wrap_to_int<int64_t>(v);
      break;
    case Dtype::uint8:
      *static_cast<uint8_t*>(dst) = wrap_to_int<uint8_t>(v);
      break;
    case Dtype::uint16:
      *static_cast<uint16_t*>(dst) = wrap_to_int<uint16_t>(v);
      break;
    case Dtype::uint32:
      *static_cast<uint32_t*>(dst) = wrap_to_int<uint32_t>(v);
      break;
    case Dtype::uint64:
      *static_cast<uint64_t*>(dst) = wrap_to_int<uint64_t>(v);
      break;
    case Dtype::float16:
      *static_cast<uint16_t*>(dst) = detail::f32_to_f16(static_cast<float>(v));
      break;
    case Dtype::bfloat16:
      *static_cast<uint16_t*>(dst) = detail::f32_to_bf16(static_cast<float>(v));
      break;
    case Dtype::float32:
      *static_cast<float*>(dst) = static_cast<float>(v);
      break;
    case Dtype::float64:
      *static_cast<double*>(dst) = v;
      break;
    case Dtype::complex64:
      *static_cast<std::complex<float>*>(dst) = {static_cast<float>(v), 0.0f};
      break;
  }
}
double load_double(const void* src, Dtype t) {
  switch (t) {
    case Dtype::bool_:
      return *static_cast<const bool*>(src) ? 1 : 0;
    case Dtype::int8:
      return *static_cast<const int8_t*>(src);
    case Dtype::int16:
      return *static_cast<const int16_t*>(src);
    case Dtype::int32:
      return *static_cast<const int32_t*>(src);
    case Dtype::int64:
      return static_cast<double>(*static_cast<const int64_t*>(src));
    case Dtype::uint8:
      return *static_cast<const uint8_t*>(src);
    case Dtype::uint16:
      return *static_cast<const uint16_t*>(src);
    case Dtype::uint32:
      return *static_cast<const uint32_t*>(src);
    case Dtype::uint64:
      return static_cast<double>(*static_cast<const uint64_t*>(src));
    case Dtype::float16:
      return detail::f16_to_f32(*static_cast<const uint16_t*>(src));
    case Dtype::bfloat16:
      return detail::bf16_to_f32(*static_cast<const uint16_t*>(src));
    case Dtype::float32:
      return *static_cast<const float*>(src);
    case Dtype::float64:
      return *static_cast<const double*>(src);
    case Dtype::complex64:
      return static_cast<const std::complex<float>*>(src)->real();
  }
  return 0;
}

}  // namespace

Array Array::from_external(void* data, Shape shape, Strides strides, Dtype dtype, Device device,
                           std::function<void()> release) {
  checked_numel(shape);
  if (strides.empty()) strides = row_major_strides(shape);
  if (strides.size() != shape.size())
    throw std::invalid_argument("from_external: strides and shape differ in length");
  if (device.type == Device::Type::gpu && !gpu_backend(device.index))
    throw std::invalid_argument(
        device.index == 0 ? std::string("from_external: no GPU is available (no CUDA driver or "
                                        "device)")
                          : "from_external: gpu:" + std::to_string(device.index) +
                                " is not available: " + gpu_unavailable_reason(device.index));
  // The buffer spans the elements the view can reach; offset 0 is element 0.
  int64_t lo = 0, hi = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) lo = hi = 0;
    int64_t reach = (shape[i] - 1) * strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  auto n = std::make_shared<ArrayNode>();
  n->dtype = dtype;
  n->shape = std::move(shape);
  n->strides = std::move(strides);
  n->device = device;
  n->offset = -lo;
  size_t item = size_of(dtype);
  char* start = static_cast<char*>(data) + lo * static_cast<int64_t>(item);
  n->buffer = std::make_shared<Buffer>(start, static_cast<size_t>(hi - lo + 1) * item, device,
                                       [release](void*, size_t) {
                                         if (release) release();
                                       });
  return array_of(n);
}

Array Array::from_doubles(const std::vector<double>& values, Shape shape, Dtype dtype,
                          std::optional<Device> device) {
  checked_numel(shape);
  if (static_cast<int64_t>(values.size()) != checked_numel(shape))
    throw std::invalid_argument("from_doubles: " + std::to_string(values.size()) +
                                " values for a shape of " + std::to_string(checked_numel(shape)) +
                                " elements");
  size_t item = size_of(dtype);
  std::vector<uint8_t> bytes(values.size() * item);
  for (size_t i = 0; i < values.size(); ++i)
    store_double(bytes.data() + i * item, dtype, values[i]);
  return from_bytes(bytes.data(), std::move(shape), dtype, device);
}

ALLOY_HOT Dtype Array::dtype() const {
  return node_->dtype;
}
ALLOY_HOT const Shape& Array::shape() const {
  return node_->shape;
}
int64_t Array::shape(int axis) const {
  int nd = ndim();
  if (axis < 0) axis += nd;
  if (axis < 0 || axis >= nd) throw std::invalid_argument("axis out of range");
  return node_->shape[axis];
}
const Strides& Array::strides() const {
  return node_->strides;
}
int64_t Array::offset() const {
  return node_->offset;
}
ALLOY_HOT Device Array::device() const {
  return node_->device;
}
int Array::ndim() const {
  return static_cast<int>(node_->shape.size());
}
int64_t Array::size() const {
  return node_->size();
}
size_t Array::nbytes() const {
  return static_cast<size_t>(size()) * size_of(dtype());
}
bool Array::is_evaluated() const {
  return scheduler::is_ready(*node_);
}
ALLOY_HOT void Array::eval() const {
  scheduler::eval_one(*this);
}

ALLOY_HOT bool Array::is_row_contiguous() const {
  if (node_->offset != 0) return false;
  int64_t expect = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (node_->shape[i] != 1 && node_->strides[i] != expect) return false;
    expect *= node_->shape[i];
  }
  return true;
}

std::vector<uint8_t> Array::to_bytes() const {
  eval();
  size_t item = itemsize();
  std::vector<uint8_t> out(nbytes());
  if (out.empty()) return out;
  const ArrayNode& n = *node_;
  if (n.device.type == Device::Type::gpu) {
    // Copy the span the view covers, then gather on the host.
    if (is_row_contiguous()) {
      backend(n.device).copy_to_host(out.data(), n.data(), out.size());
      return out;
    }
    std::vector<uint8_t> all(n.buffer->nbytes);
    backend(n.device).copy_to_host(all.data(), n.buffer->ptr, all.size());
    copy_convert_host(all.data() + n.offset * item, n.shape, n.strides, n.dtype, out.data(),
                      n.dtype);
    return out;
  }
  copy_convert_host(n.data(), n.shape, n.strides, n.dtype, out.data(), n.dtype);
  return out;
}

std::vector<double> Array::to_doubles() const {
  auto b = to_bytes();
  size_t item = itemsize();
  std::vector<double> out(b.size() / item);
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_double(b.data() + i * item, dtype());
  return out;
}

double Array::item() const {
  if (size() != 1)
    throw std::invalid_argument("item: array has " + std::to_string(size()) +
                                " elements, expected 1");
  return to_doubles()[0];
}

Array Array::slice(const std::vector<Slice>& slices) const {
  auto prim = SliceView::from_slices(shape(), slices);
  return make_pending_view(prim, *this, prim->layout(*this));
}

Array Array::transpose(std::vector<int> axes) const {
  int nd = ndim();
  if (axes.empty()) {
    axes.resize(nd);
    for (int i = 0; i < nd; ++i) axes[i] = nd - 1 - i;
  }
  if (static_cast<int>(axes.size()) != nd)
    throw std::invalid_argument("transpose: axes must list every dimension once");
  std::vector<int64_t> ax;
  for (auto a : axes) ax.push_back(a < 0 ? a + nd : a);
  auto prim = std::make_shared<Transpose>(std::move(ax));
  return make_pending_view(prim, *this, prim->layout(*this));
}

Array Array::reshape(Shape new_shape) const {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("reshape: only one dimension can be -1");
      infer = static_cast<int>(i);
    } else if (new_shape[i] < 0) {
      throw std::invalid_argument("reshape: negative dimension in shape");
    } else if (__builtin_mul_overflow(known, new_shape[i], &known)) {
      throw std::invalid_argument("reshape: shape has more elements than fit in 64 bits");
    }
  }
  if (infer >= 0) {
    if (known == 0 || size() % known != 0)
      throw std::invalid_argument("reshape: cannot infer the -1 dimension for " +
                                  std::to_string(size()) + " elements");
    new_shape[infer] = size() / known;
  }
  Array src = is_row_contiguous() ? *this : contiguous();
  auto prim = std::make_shared<Reshape>(std::move(new_shape));
  return make_pending_view(prim, src, prim->layout(src));
}

Array Array::broadcast_to(Shape new_shape) const {
  return broadcast_view(*this, std::move(new_shape), /*implicit=*/false);
}

Array Array::as_strided(Shape new_shape, Strides new_strides, int64_t offset) const {
  auto prim = std::make_shared<AsStrided>(std::move(new_shape), std::move(new_strides), offset);
  return make_pending_view(prim, *this, prim->layout(*this));
}

Array Array::contiguous() const {
  if (is_row_contiguous()) return *this;
  return make_pending(std::make_shared<Copy>(), {*this}, {shape()}, {dtype()}, device())[0];
}

Array Array::astype(Dtype t) const {
  if (t == dtype()) return *this;
  if (t == Dtype::float64 && device().type == Device::Type::gpu)
    throw std::invalid_argument(
        "astype: float64 is not supported on the GPU (Metal has no double)");
  return make_pending(std::make_shared<AsType>(t), {*this}, {shape()}, {t}, device())[0];
}

Array Array::to(Device d) const {
  if (d == device()) return *this;
  if (d.type == Device::Type::gpu) backend(d);  // throws when that GPU is not there
  Array src = contiguous();
  return make_pending(std::make_shared<ToDevice>(d), {src}, {shape()}, {dtype()}, d)[0];
}

const void* Array::data() const {
  if (!node_->buffer)
    throw std::invalid_argument("data(): the array is not evaluated (call eval() first)");
  return node_->data();
}

void* Array::data() {
  if (!node_->buffer)
    throw std::invalid_argument("data(): the array is not evaluated (call eval() first)");
  return node_->data();
}

// ---- creation --------------------------------------------------------------------------------

Array zeros(const Shape& shape, Dtype dtype, std::optional<Device> device) {
  return full(shape, 0.0, dtype, device);
}

namespace {
// The float64 staging values of a new array of `shape`, with the array's own size in the error.
std::vector<double> staging(const Shape& shape, Dtype dtype, double value = 0) {
  size_t bytes = checked_nbytes(shape, dtype);
  try {
    return std::vector<double>(static_cast<size_t>(checked_numel(shape)), value);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory("cannot allocate an array of " + std::to_string(bytes) + " bytes of " +
                      std::string(dtype_name(dtype)) + " (shape " + shape_text(shape) + ")");
  } catch (const std::length_error&) {
    throw OutOfMemory("cannot allocate an array of " + std::to_string(bytes) + " bytes of " +
                      std::string(dtype_name(dtype)) + " (shape " + shape_text(shape) + ")");
  }
}
}  // namespace

Array full(const Shape& shape, double value, Dtype dtype, std::optional<Device> device) {
  checked_numel(shape);
  return Array::from_doubles(staging(shape, dtype, value), shape, dtype, device);
}

Array arange(int64_t n, Dtype dtype, std::optional<Device> device) {
  if (n < 0) throw std::invalid_argument("arange: negative length");
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 0.0);
  return Array::from_doubles(v, {n}, dtype, device);
}

Array random_uniform(const Shape& shape, Dtype dtype, double low, double high, uint64_t seed,
                     std::optional<Device> device) {
  checked_numel(shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> v = staging(shape, dtype);
  for (auto& x : v) {
    x = dist(rng);
    if (is_integral(dtype)) x = std::floor(x);
  }
  return Array::from_doubles(v, shape, dtype, device);
}

}  // namespace alloy
