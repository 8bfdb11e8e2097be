// The public ops (include/alloy/ops.h): argument checks, MLX's promotion and broadcasting, and
// the graph nodes. Nothing here evaluates.
#include "alloy/ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "alloy/errors.h"
#include "core/array_node.h"
#include "core/primitives.h"
#include "ops/functors.h"
#include "ops/ops_internal.h"
#include "ops/primitives.h"
#include "ops/reduce_rows.h"

namespace alloy {

// ---- promotion and broadcasting ---------------------------------------------------------------

Dtype promote_types(Dtype a, Dtype b) {
  if (a == b) return a;
  if (a == Dtype::bool_) return b;
  if (b == Dtype::bool_) return a;
  if (a == Dtype::complex64 || b == Dtype::complex64) return Dtype::complex64;
  if (a == Dtype::float64 || b == Dtype::float64) return Dtype::float64;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    // float16 with bfloat16: float32 (neither holds the other); else the wider.
    if (size_of(a) == size_of(b)) return Dtype::float32;
    return size_of(a) > size_of(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integers.
  bool sa = is_signed(a), sb = is_signed(b);
  if (sa == sb) return size_of(a) >= size_of(b) ? a : b;
  Dtype s = sa ? a : b, u = sa ? b : a;
  if (u == Dtype::uint64) return Dtype::float32;
  size_t bytes = std::max(size_of(s), 2 * size_of(u));
  return bytes >= 8 ? Dtype::int64 : bytes == 4 ? Dtype::int32 : Dtype::int16;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(fmt::format("shapes ({}) and ({}) cannot be broadcast",
                                              fmt::join(a, ","), fmt::join(b, ",")));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

void check_valid(const Array& a, const char* op) {
  if (!a.valid()) throw std::invalid_argument(fmt::format("{}: an input is an empty handle", op));
}

// Where an op runs: the given device, else the device of its first input that is not 0-d (a
// scalar follows the arrays it is combined with), else its first input's.
std::optional<Device> device_of(const StreamOrDevice& s) {
  if (auto* st = std::get_if<Stream>(&s)) return st->device;
  if (auto* d = std::get_if<Device>(&s)) return *d;
  return std::nullopt;
}

// The stream an op on device `d` runs on: the one given, else the device's default stream.
Stream op_stream(Device d, const StreamOrDevice& s) {
  if (auto* st = std::get_if<Stream>(&s)) return *st;
  return default_stream(d);
}

Device op_device(const std::vector<Array>& in, StreamOrDevice s) {
  if (auto d = device_of(s)) return *d;
  for (auto& a : in)
    if (a.ndim() > 0) return a.device();
  return in.empty() ? default_device() : in[0].device();
}

// The input on the op's device. Small row-contiguous host arrays (scalars) stay on the host for
// a GPU op: their bytes travel with the launch (as metal_kernel's).
Array on_device(const Array& a, Device d) {
  if (a.device() == d) return a;
  if (d.type == Device::Type::gpu && a.device().type == Device::Type::cpu && a.size() < 8 &&
      a.is_row_contiguous())
    return a;
  return a.to(d);
}

void check_device_dtype(Device d, Dtype t, const char* op) {
  if (d.type == Device::Type::gpu && t == Dtype::float64)
    throw std::invalid_argument(
        fmt::format("{}: float64 is not supported on the GPU (Metal has no double)", op));
  if (d.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument(fmt::format("{}: no GPU is available", op));
}

std::vector<int> normalize_axes(const Array& a, std::vector<int> axes, const char* op) {
  int nd = a.ndim();
  for (auto& ax : axes) {
    if (ax < -nd || ax >= nd)
      throw std::invalid_argument(
          fmt::format("[{}] axis {} is out of bounds for an array of {} dimensions", op, ax, nd));
    if (ax < 0) ax += nd;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    throw std::invalid_argument(fmt::format("[{}] received duplicate axes", op));
  return axes;
}

std::vector<int> all_axes(const Array& a) {
  std::vector<int> ax(a.ndim());
  std::iota(ax.begin(), ax.end(), 0);
  return ax;
}

Array squeeze_axes(const Array& r, const std::vector<int>& axes) {
  Shape s;
  for (int i = 0; i < r.ndim(); ++i)
    if (!std::binary_search(axes.begin(), axes.end(), i)) s.push_back(r.shape()[i]);
  return r.reshape(s);
}

Array reduce(const char* op, const Array& a, std::vector<int> axes, bool keepdims,
             StreamOrDevice s) {
  check_valid(a, op);
  axes = normalize_axes(a, std::move(axes), op);
  auto [acc, out] = ops::reduce_dtypes(op, a.dtype());
  Device d = op_device({a}, s);
  check_device_dtype(d, a.dtype(), op);
  Array x = on_device(a, d);
  std::string_view o = op;
  // all / any read complex64 values as "either part non-zero" (the kernels' conversions to bool
  // would keep the real part only).
  if (a.dtype() == Dtype::complex64 && (o == "all" || o == "any"))
    x = not_equal(x, scalar_like(0.0, x, false), d);
  if (axes.empty()) return x.astype(out);
  if ((o == "max" || o == "min")) {
    bool empty_axis = false;
    for (int ax : axes) empty_axis |= a.shape()[ax] == 0;
    if (empty_axis)
      throw std::invalid_argument(fmt::format("[{}] cannot reduce over an empty axis", op));
  }
  auto prim = std::make_shared<ops::Reduce>(op, axes);
  Array r = make_pending(prim, {x}, prim->output_shapes({x}), {out}, op_stream(d, s))[0];
  return keepdims ? r : squeeze_axes(r, axes);
}

Array arg_reduce(const char* op, const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  check_valid(a, op);
  axis = normalize_axes(a, {axis}, op)[0];
  if (a.shape()[axis] == 0)
    throw std::invalid_argument(fmt::format("[{}] cannot reduce over an empty axis", op));
  Device d = op_device({a}, s);
  check_device_dtype(d, a.dtype(), op);
  Array x = on_device(a, d);
  auto prim = std::make_shared<ops::ArgReduce>(op, axis);
  Array r = make_pending(prim, {x}, prim->output_shapes({x}), {Dtype::uint32}, op_stream(d, s))[0];
  return keepdims ? r : squeeze_axes(r, {axis});
}

int64_t reduced_count(const Array& a, const std::vector<int>& axes) {
  int64_t n = 1;
  for (int ax : normalize_axes(a, axes, "mean")) n *= a.shape()[ax];
  return n;
}

// Whether `axes` is the last axis of a non-empty one (the fused softmax / logsumexp's case).
bool last_axis_only(const Array& a, const std::vector<int>& axes) {
  if (a.ndim() == 0 || a.shape().back() == 0 || a.dtype() == Dtype::complex64) return false;
  auto ax = normalize_axes(a, axes, "softmax");
  return ax.size() == 1 && ax[0] == a.ndim() - 1;
}

Dtype at_least_float(Dtype t) {
  return is_floating(t) ? t : Dtype::float32;
}

}  // namespace

namespace ops {

Array apply_elementwise(const std::string& op, const std::vector<Array>& inputs, StreamOrDevice s) {
  const OpInfo& info = op_info(op);
  std::vector<Dtype> dtypes;
  Shape shape;
  for (auto& a : inputs) {
    check_valid(a, info.op);
    dtypes.push_back(a.dtype());
    shape = broadcast_shapes(shape, a.shape());
  }
  ElementwisePlan plan = plan_elementwise(info, dtypes);
  Device d = op_device(inputs, s);
  for (auto t : dtypes) check_device_dtype(d, t, info.op);
  std::vector<Array> in;
  for (auto& a : inputs) {
    Array x = on_device(a, d);
    if (x.ndim() > 0 && x.shape() != shape) x = broadcast_view(x, shape, /*implicit=*/true);
    in.push_back(std::move(x));
  }
  return make_pending(std::make_shared<Elementwise>(op), std::move(in), {shape}, {plan.out},
                      op_stream(d, s))[0];
}

}  // namespace ops

using ops::apply_elementwise;

// ---- creation ----------------------------------------------------------------------------

Array ones(const Shape& shape, Dtype dtype, StreamOrDevice s) {
  return full(shape, 1.0, dtype, device_of(s));
}
Array zeros_like(const Array& a, StreamOrDevice s) {
  return full(a.shape(), 0.0, a.dtype(), device_of(s).value_or(a.device()));
}
Array ones_like(const Array& a, StreamOrDevice s) {
  return full(a.shape(), 1.0, a.dtype(), device_of(s).value_or(a.device()));
}
Array full_like(const Array& a, double value, StreamOrDevice s) {
  return full(a.shape(), value, a.dtype(), device_of(s).value_or(a.device()));
}

Array arange(double start, double stop, double step, Dtype dtype, StreamOrDevice s) {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop))
    throw std::invalid_argument("[arange] start, stop and step must be finite, step non-zero");
  double count = std::ceil((stop - start) / step);
  if (count > 1e10) throw std::invalid_argument("[arange] too many elements");
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * step;
  return Array::from_doubles(v, {n}, dtype, device_of(s));
}

// ---- unary -------------------------------------------------------------------------------

#define ALLOY_UNARY(NAME)                        \
  Array NAME(const Array& a, StreamOrDevice s) { \
    return apply_elementwise(#NAME, {a}, s);     \
  }
ALLOY_UNARY(abs)
ALLOY_UNARY(negative)
ALLOY_UNARY(sign)
ALLOY_UNARY(square)
ALLOY_UNARY(exp)
ALLOY_UNARY(expm1)
ALLOY_UNARY(log)
ALLOY_UNARY(log2)
ALLOY_UNARY(log10)
ALLOY_UNARY(log1p)
ALLOY_UNARY(sqrt)
ALLOY_UNARY(rsqrt)
ALLOY_UNARY(sin)
ALLOY_UNARY(cos)
ALLOY_UNARY(tan)
ALLOY_UNARY(tanh)
ALLOY_UNARY(arcsin)
ALLOY_UNARY(arccos)
ALLOY_UNARY(arctan)
ALLOY_UNARY(sinh)
ALLOY_UNARY(cosh)
ALLOY_UNARY(sigmoid)
ALLOY_UNARY(erf)
ALLOY_UNARY(erfc)
ALLOY_UNARY(erfinv)
ALLOY_UNARY(logical_not)
ALLOY_UNARY(bitwise_invert)
#undef ALLOY_UNARY

// Integers are their own floor/ceil/round: no kernel.
#define ALLOY_ROUNDING(NAME)                                             \
  Array NAME(const Array& a, StreamOrDevice s) {                         \
    check_valid(a, #NAME);                                               \
    if (!is_floating(a.dtype())) return on_device(a, op_device({a}, s)); \
    return apply_elementwise(#NAME, {a}, s);                             \
  }
ALLOY_ROUNDING(floor)
ALLOY_ROUNDING(ceil)
ALLOY_ROUNDING(round)
#undef ALLOY_ROUNDING

Array round(const Array& a, int decimals, StreamOrDevice s) {
  check_valid(a, "round");
  if (decimals == 0) return round(a, s);
  if (a.dtype() == Dtype::complex64)
    throw std::invalid_argument("[round] Not supported for complex64.");
  Device d = op_device({a}, s);
  Dtype t = is_floating(a.dtype()) ? a.dtype() : Dtype::float32;
  // The scale and its inverse in float, as MLX computes them.
  float scale = static_cast<float>(std::pow(10.0, decimals));
  Array r = multiply(astype(a, t, s), full({}, scale, t, d), s);
  r = multiply(round(r, s), full({}, 1.0f / scale, t, d), s);
  return astype(r, a.dtype(), s);
}

Array isnan(const Array& a, StreamOrDevice s) {
  check_valid(a, "isnan");
  if (!is_floating(a.dtype())) return full(a.shape(), 0.0, Dtype::bool_, op_device({a}, s));
  return not_equal(a, a, s);
}

Array isinf(const Array& a, StreamOrDevice s) {
  check_valid(a, "isinf");
  if (!is_floating(a.dtype())) return full(a.shape(), 0.0, Dtype::bool_, op_device({a}, s));
  Array m = abs(a, s);  // float32 |z| for complex64 (inf when either part is)
  return equal(m, scalar_like(std::numeric_limits<double>::infinity(), m, false), s);
}

// ---- complex parts -----------------------------------------------------------------------

Array real(const Array& a, StreamOrDevice s) {
  check_valid(a, "real");
  if (a.dtype() != Dtype::complex64) return on_device(a, op_device({a}, s));
  return apply_elementwise("real", {a}, s);
}
Array imag(const Array& a, StreamOrDevice s) {
  check_valid(a, "imag");
  if (a.dtype() != Dtype::complex64) return full(a.shape(), 0.0, a.dtype(), op_device({a}, s));
  return apply_elementwise("imag", {a}, s);
}
Array conjugate(const Array& a, StreamOrDevice s) {
  check_valid(a, "conjugate");
  if (a.dtype() != Dtype::complex64) return on_device(a, op_device({a}, s));
  return apply_elementwise("conjugate", {a}, s);
}

// ---- binary --------------------------------------------------------------------------------

#define ALLOY_BINARY(NAME)                                       \
  Array NAME(const Array& a, const Array& b, StreamOrDevice s) { \
    return apply_elementwise(#NAME, {a, b}, s);                  \
  }
ALLOY_BINARY(add)
ALLOY_BINARY(subtract)
ALLOY_BINARY(multiply)
ALLOY_BINARY(divide)
ALLOY_BINARY(floor_divide)
ALLOY_BINARY(remainder)
ALLOY_BINARY(power)
ALLOY_BINARY(maximum)
ALLOY_BINARY(minimum)
ALLOY_BINARY(arctan2)
ALLOY_BINARY(logaddexp)
ALLOY_BINARY(equal)
ALLOY_BINARY(not_equal)
ALLOY_BINARY(less)
ALLOY_BINARY(less_equal)
ALLOY_BINARY(greater)
ALLOY_BINARY(greater_equal)
ALLOY_BINARY(logical_and)
ALLOY_BINARY(logical_or)
ALLOY_BINARY(bitwise_and)
ALLOY_BINARY(bitwise_or)
ALLOY_BINARY(bitwise_xor)
ALLOY_BINARY(left_shift)
ALLOY_BINARY(right_shift)
#undef ALLOY_BINARY

// ---- ternary and conversions ---------------------------------------------------------------

Array where(const Array& condition, const Array& x, const Array& y, StreamOrDevice s) {
  return apply_elementwise("select", {condition, x, y}, s);
}

Array astype(const Array& a, Dtype dtype, StreamOrDevice s) {
  check_valid(a, "astype");
  Device d = op_device({a}, s);
  check_device_dtype(d, dtype, "astype");
  return on_device(a, d).astype(dtype);
}

Array clip(const Array& a, const std::optional<Array>& a_min, const std::optional<Array>& a_max,
           StreamOrDevice s) {
  if (!a_min && !a_max)
    throw std::invalid_argument("[clip] at most one of a_min and a_max may be None");
  Array r = a;
  if (a_min) r = maximum(r, *a_min, s);
  if (a_max) r = minimum(r, *a_max, s);
  return r;
}

// ---- reductions ----------------------------------------------------------------------------

#define ALLOY_REDUCTION(NAME)                                                                 \
  Array NAME(const Array& a, bool keepdims, StreamOrDevice s) {                               \
    return reduce(#NAME, a, all_axes(a), keepdims, s);                                        \
  }                                                                                           \
  Array NAME(const Array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) { \
    return reduce(#NAME, a, axes, keepdims, s);                                               \
  }                                                                                           \
  Array NAME(const Array& a, int axis, bool keepdims, StreamOrDevice s) {                     \
    return reduce(#NAME, a, {axis}, keepdims, s);                                             \
  }
ALLOY_REDUCTION(sum)
ALLOY_REDUCTION(prod)
ALLOY_REDUCTION(max)
ALLOY_REDUCTION(min)
ALLOY_REDUCTION(all)
ALLOY_REDUCTION(any)
#undef ALLOY_REDUCTION

Array mean(const Array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {
  check_valid(a, "mean");
  int64_t n = reduced_count(a, axes);
  Dtype f = at_least_float(a.dtype());
  Array total = sum(a, axes, keepdims, s);
  return multiply(astype(total, f, s), scalar_like(1.0 / static_cast<double>(n), total, false), s);
}
Array mean(const Array& a, bool keepdims, StreamOrDevice s) {
  return mean(a, all_axes(a), keepdims, s);
}
Array mean(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return mean(a, std::vector<int>{axis}, keepdims, s);
}

Array var(const Array& a, const std::vector<int>& axes, bool keepdims, int ddof, StreamOrDevice s) {
  check_valid(a, "var");
  int64_t n = reduced_count(a, axes);
  Array x = astype(a, at_least_float(a.dtype()), s);
  Array centered = subtract(x, mean(x, axes, true, s), s);
  // complex64: the mean of |x - mean|^2, a float32 (MLX, numpy).
  if (x.dtype() == Dtype::complex64) centered = abs(centered, s);
  Array ss = sum(square(centered, s), axes, keepdims, s);
  double denom = static_cast<double>(n - ddof);
  return multiply(ss, scalar_like(denom > 0 ? 1.0 / denom : std::nan(""), ss, false), s);
}
Array var(const Array& a, bool keepdims, int ddof, StreamOrDevice s) {
  return var(a, all_axes(a), keepdims, ddof, s);
}
Array var(const Array& a, int axis, bool keepdims, int ddof, StreamOrDevice s) {
  return var(a, std::vector<int>{axis}, keepdims, ddof, s);
}

Array logsumexp(const Array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {
  check_valid(a, "logsumexp");
  Array x = astype(a, at_least_float(a.dtype()), s);
  // Over the last axis: one fused kernel (src/ops/reduce_gpu.cpp).
  if (last_axis_only(a, axes)) {
    Array r = ops::row_softmax(x, true, false, s);
    return keepdims ? r : squeeze_axes(r, {a.ndim() - 1});
  }
  Array m = max(x, axes, true, s);
  // An infinite maximum (all -inf, or +inf present) is not subtracted: exp(x - inf) is NaN.
  m = where(isinf(m, s), zeros_like(m), m, s);
  Array r = add(log(sum(exp(subtract(x, m, s), s), axes, true, s), s), m, s);
  return keepdims ? r : squeeze_axes(r, normalize_axes(a, axes, "logsumexp"));
}
Array logsumexp(const Array& a, bool keepdims, StreamOrDevice s) {
  return logsumexp(a, all_axes(a), keepdims, s);
}
Array logsumexp(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return logsumexp(a, std::vector<int>{axis}, keepdims, s);
}

Array softmax(const Array& a, const std::vector<int>& axes, bool precise, StreamOrDevice s) {
  check_valid(a, "softmax");
  Dtype f = at_least_float(a.dtype());
  Array x = astype(a, precise ? promote_types(f, Dtype::float32) : f, s);
  if (last_axis_only(a, axes)) return astype(ops::row_softmax(x, false, precise, s), f, s);
  Array e = exp(subtract(x, max(x, axes, true, s), s), s);
  Array r = divide(e, sum(e, axes, true, s), s);
  return astype(r, f, s);
}
Array softmax(const Array& a, bool precise, StreamOrDevice s) {
  return softmax(a, all_axes(a), precise, s);
}
Array softmax(const Array& a, int axis, bool precise, StreamOrDevice s) {
  return softmax(a, std::vector<int>{axis}, precise, s);
}

Array argmax(const Array& a, bool keepdims, StreamOrDevice s) {
  check_valid(a, "argmax");
  Array r = arg_reduce("argmax", flatten(a, s), 0, false, s);
  return keepdims ? r.reshape(Shape(a.ndim(), 1)) : r;
}
Array argmax(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return arg_reduce("argmax", a, axis, keepdims, s);
}
Array argmin(const Array& a, bool keepdims, StreamOrDevice s) {
  check_valid(a, "argmin");
  Array r = arg_reduce("argmin", flatten(a, s), 0, false, s);
  return keepdims ? r.reshape(Shape(a.ndim(), 1)) : r;
}
Array argmin(const Array& a, int axis, bool keepdims, StreamOrDevice s) {
  return arg_reduce("argmin", a, axis, keepdims, s);
}

// ---- shapes --------------------------------------------------------------------------------

Array reshape(const Array& a, Shape shape, StreamOrDevice s) {
  check_valid(a, "reshape");
  return on_device(a, op_device({a}, s)).reshape(std::move(shape));
}

Array flatten(const Array& a, StreamOrDevice s) {
  return reshape(a, {-1}, s);
}

Array transpose(const Array& a, std::vector<int> axes, StreamOrDevice s) {
  check_valid(a, "transpose");
  if (static_cast<int>(axes.size()) != a.ndim())
    throw std::invalid_argument("[transpose] axes must list every dimension once");
  for (auto& ax : axes) {
    if (ax < -a.ndim() || ax >= a.ndim())
      throw std::invalid_argument(fmt::format("[transpose] axis {} is out of bounds", ax));
    if (ax < 0) ax += a.ndim();
  }
  return on_device(a, op_device({a}, s)).transpose(std::move(axes));
}

Array transpose(const Array& a, StreamOrDevice s) {
  std::vector<int> axes(a.ndim());
  std::iota(axes.rbegin(), axes.rend(), 0);
  return transpose(a, axes, s);
}

Array swapaxes(const Array& a, int axis1, int axis2, StreamOrDevice s) {
  auto ax = normalize_axes(a, {axis1}, "swapaxes")[0],
       bx = normalize_axes(a, {axis2}, "swapaxes")[0];
  std::vector<int> axes(a.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  std::swap(axes[ax], axes[bx]);
  return transpose(a, axes, s);
}

Array broadcast_to(const Array& a, const Shape& shape, StreamOrDevice s) {
  check_valid(a, "broadcast_to");
  Array x = on_device(a, op_device({a}, s));
  return x.shape() == shape ? x : x.broadcast_to(shape);
}

Array expand_dims(const Array& a, const std::vector<int>& axes, StreamOrDevice s) {
  check_valid(a, "expand_dims");
  int nd = a.ndim() + static_cast<int>(axes.size());
  std::vector<int> ax = axes;
  for (auto& x : ax) {
    if (x < -nd || x >= nd)
      throw std::invalid_argument(fmt::format("[expand_dims] axis {} is out of bounds", x));
    if (x < 0) x += nd;
  }
  std::sort(ax.begin(), ax.end());
  if (std::adjacent_find(ax.begin(), ax.end()) != ax.end())
    throw std::invalid_argument("[expand_dims] received duplicate axes");
  Shape shape;
  Strides strides;
  size_t k = 0, src = 0;
  for (int i = 0; i < nd; ++i) {
    if (k < ax.size() && ax[k] == i) {
      shape.push_back(1);
      strides.push_back(0);
      ++k;
    } else {
      shape.push_back(a.shape()[src]);
      strides.push_back(a.strides()[src]);
      ++src;
    }
  }
  return on_device(a, op_device({a}, s)).as_strided(shape, strides, 0);
}

Array expand_dims(const Array& a, int axis, StreamOrDevice s) {
  return expand_dims(a, std::vector<int>{axis}, s);
}

Array squeeze(const Array& a, const std::vector<int>& axes, StreamOrDevice s) {
  check_valid(a, "squeeze");
  auto ax = normalize_axes(a, axes, "squeeze");
  Shape shape;
  Strides strides;
  for (int i = 0; i < a.ndim(); ++i) {
    if (std::binary_search(ax.begin(), ax.end(), i)) {
      if (a.shape()[i] != 1)
        throw std::invalid_argument(
            fmt::format("[squeeze] cannot squeeze axis {} of size {}", i, a.shape()[i]));
      continue;
    }
    shape.push_back(a.shape()[i]);
    strides.push_back(a.strides()[i]);
  }
  return on_device(a, op_device({a}, s)).as_strided(shape, strides, 0);
}

Array squeeze(const Array& a, StreamOrDevice s) {
  std::vector<int> axes;
  for (int i = 0; i < a.ndim(); ++i)
    if (a.shape()[i] == 1) axes.push_back(i);
  return squeeze(a, axes, s);
}

Array slice(const Array& a, const Shape& start, const Shape& stop, const Shape& strides,
            StreamOrDevice s) {
  check_valid(a, "slice");
  if (start.size() != stop.size() || (!strides.empty() && strides.size() != start.size()))
    throw std::invalid_argument("[slice] start, stop and strides must have the same length");
  std::vector<Slice> sl;
  for (size_t i = 0; i < start.size(); ++i)
    sl.push_back(Slice{start[i], stop[i], strides.empty() ? 1 : strides[i]});
  return on_device(a, op_device({a}, s)).slice(sl);
}

Array concatenate(const std::vector<Array>& arrays, int axis, StreamOrDevice s) {
  if (arrays.empty()) throw std::invalid_argument("[concatenate] no arrays given");
  for (auto& a : arrays) check_valid(a, "concatenate");
  if (arrays[0].ndim() == 0)
    throw std::invalid_argument("[concatenate] 0-d arrays cannot be concatenated");
  axis = normalize_axes(arrays[0], {axis}, "concatenate")[0];
  Dtype t = arrays[0].dtype();
  for (auto& a : arrays) t = promote_types(t, a.dtype());
  Device d = op_device(arrays, s);
  check_device_dtype(d, t, "concatenate");
  std::vector<Array> in;
  for (auto& a : arrays) in.push_back(on_device(a, d).astype(t));
  if (in.size() == 1) return in[0];
  auto prim = std::make_shared<ops::Concatenate>(axis);
  Shape shape = prim->output_shapes(in)[0];
  return make_pending(prim, std::move(in), {shape}, {t}, op_stream(d, s))[0];
}

Array stack(const std::vector<Array>& arrays, int axis, StreamOrDevice s) {
  if (arrays.empty()) throw std::invalid_argument("[stack] no arrays given");
  std::vector<Array> expanded;
  for (auto& a : arrays) {
    check_valid(a, "stack");
    if (a.shape() != arrays[0].shape())
      throw std::invalid_argument("[stack] all arrays must have the same shape");
    expanded.push_back(expand_dims(a, axis, s));
  }
  int nd = arrays[0].ndim() + 1;
  return concatenate(expanded, axis < 0 ? axis + nd : axis, s);
}

// ---- operators -------------------------------------------------------------------------------

Array scalar_like(double value, const Array& like, bool is_integer) {
  check_valid(like, "scalar");
  Dtype t = like.dtype();
  if (t == Dtype::bool_)
    t = is_integer ? Dtype::int32 : Dtype::float32;
  else if (!is_integer && !is_floating(t))
    t = Dtype::float32;
  // Scalars live on the host next to arrays (they travel with a GPU launch), on the array's
  // device next to a 0-d array (so that the op runs there).
  Device d = like.ndim() == 0 ? like.device() : Device::cpu();
  return Array::from_doubles({value}, {}, t, d);
}

Array operator-(const Array& a) {
  return negative(a);
}
Array operator!(const Array& a) {
  return logical_not(a);
}
Array operator~(const Array& a) {
  return bitwise_invert(a);
}
Array operator+(const Array& a, const Array& b) {
  return add(a, b);
}
Array operator-(const Array& a, const Array& b) {
  return subtract(a, b);
}
Array operator*(const Array& a, const Array& b) {
  return multiply(a, b);
}
Array operator/(const Array& a, const Array& b) {
  return divide(a, b);
}
Array operator%(const Array& a, const Array& b) {
  return remainder(a, b);
}
Array operator==(const Array& a, const Array& b) {
  return equal(a, b);
}
Array operator!=(const Array& a, const Array& b) {
  return not_equal(a, b);
}
Array operator<(const Array& a, const Array& b) {
  return less(a, b);
}
Array operator<=(const Array& a, const Array& b) {
  return less_equal(a, b);
}
Array operator>(const Array& a, const Array& b) {
  return greater(a, b);
}
Array operator>=(const Array& a, const Array& b) {
  return greater_equal(a, b);
}
Array operator&&(const Array& a, const Array& b) {
  return logical_and(a, b);
}
Array operator||(const Array& a, const Array& b) {
  return logical_or(a, b);
}
Array operator&(const Array& a, const Array& b) {
  return bitwise_and(a, b);
}
Array operator|(const Array& a, const Array& b) {
  return bitwise_or(a, b);
}
Array operator^(const Array& a, const Array& b) {
  return bitwise_xor(a, b);
}
Array operator<<(const Array& a, const Array& b) {
  return left_shift(a, b);
}
Array operator>>(const Array& a, const Array& b) {
  return right_shift(a, b);
}

// ---- placement helpers shared with the other op files (ops_internal.h) ---------------------

namespace ops {
Device resolve_device(const std::vector<Array>& inputs, StreamOrDevice s) {
  return op_device(inputs, s);
}
Stream resolve_stream(Device d, const StreamOrDevice& s) {
  return op_stream(d, s);
}
Array to_op_device(const Array& a, Device d) {
  return on_device(a, d);
}
void check_op_dtype(Device d, Dtype t, const char* op) {
  check_device_dtype(d, t, op);
}
std::vector<int> normalize_op_axes(const Array& a, std::vector<int> axes, const char* op) {
  return normalize_axes(a, std::move(axes), op);
}
}  // namespace ops

}  // namespace alloy
