// Scans (cumsum, cumprod, cummax, cummin): MLX's Scan primitive, one generated kernel per (op,
// dtypes, rank, axis, direction, inclusiveness): a thread per scanned row, reading the input
// through its strides and writing a row-major output.
#include <fmt/format.h>

#include <stdexcept>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "ops/kernels.h"
#include "ops/misc_primitives.h"
#include "ops/ops_internal.h"

namespace alloy::ops {

namespace {

Dtype opmath(Dtype t) {
  return t == Dtype::float16 || t == Dtype::bfloat16 ? Dtype::float32 : t;
}

OpKernel scan_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out, int ndim, int axis,
                     bool reverse, bool inclusive) {
  std::string key = fmt::format("scan|{}|{}|{}|{}|{}|{}|{}|{}", op, dtype_name(in), dtype_name(acc),
                                dtype_name(out), ndim, axis, reverse, inclusive);
  return op_kernel(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_scan_" + op;
    spec.input_names = {"x"};
    spec.output_names = {"out"};
    std::string f = reduction_functor(op);
    spec.header = functor_header({f});
    std::string a = std::string(msl_type_name(acc)), o = std::string(msl_type_name(out));
    std::string s =
        "  uint row = thread_position_in_grid.x;\n"
        "  int64_t base = 0;\n"
        "  uint64_t rem = row;\n";
    for (int d = ndim - 1; d >= 0; --d)
      if (d != axis)
        s += fmt::format(
            "  {{ uint64_t n = uint64_t(x_shape[{0}]); base += int64_t(rem % n) * x_strides[{0}]; "
            "rem /= n; }}\n",
            d);
    s += fmt::format(
        "  int64_t inner = 1;\n"
        "  for (int d = {0} + 1; d < {1}; ++d) inner *= x_shape[d];\n"
        "  int64_t n = x_shape[{0}], st = x_strides[{0}];\n"
        "  int64_t ob = (int64_t(row) / inner) * n * inner + int64_t(row) % inner;\n"
        "  {2} acc = {3};\n"
        "  for (int64_t j = 0; j < n; ++j) {{\n"
        "    int64_t k = {4};\n"
        "    {2} v = static_cast<{2}>(x[base + k * st]);\n",
        axis, ndim, a, reduction_identity(op, acc), reverse ? "n - 1 - j" : "j");
    std::string step = fmt::format("acc = {}_functor()(acc, v);", f);
    std::string write = fmt::format("out[ob + k * inner] = static_cast<{}>(acc);", o);
    s += inclusive ? "    " + step + "\n    " + write + "\n"
                   : "    " + write + "\n    " + step + "\n";
    s += "  }\n";
    spec.source = s;
    return spec;
  });
}

}  // namespace

Dtype scan_dtype(const std::string& op, Dtype in) {
  if (op == "sum" && in == Dtype::bool_) return Dtype::int32;
  return in;
}

Scan::Scan(std::string op, int axis, bool reverse, bool inclusive)
    : op_(std::move(op)), axis_(axis), reverse_(reverse), inclusive_(inclusive) {
  if (op_ != "sum" && op_ != "prod" && op_ != "max" && op_ != "min")
    throw std::invalid_argument("Scan: unknown scan '" + op_ + "'");
}

std::vector<Shape> Scan::output_shapes(const std::vector<Array>& inputs) const {
  const Shape& s = inputs.at(0).shape();
  if (axis_ < 0 || axis_ >= static_cast<int>(s.size()))
    throw std::invalid_argument(fmt::format("[cum{}] axis {} is out of range", op_, axis_));
  return {s};
}

PrimitiveState Scan::state() const {
  PrimitiveState s(1);
  s.set("op", op_)
      .set("axis", static_cast<int64_t>(axis_))
      .set("reverse", reverse_)
      .set("inclusive", inclusive_);
  return s;
}

void Scan::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  const Array& x = inputs.at(0);
  Dtype out = scan_dtype(op_, x.dtype());
  if (out != outputs.at(0).dtype())
    throw std::invalid_argument(label() + ": the output dtype does not match the input's");
  int64_t n = x.shape().at(axis_);
  int64_t rows = n == 0 ? 0 : x.size() / n;
  Dtype acc = opmath(out);
  OpKernel k = scan_kernel(op_, x.dtype(), acc, out, x.ndim(), axis_, reverse_, inclusive_);
  run_kernel(k, inputs, outputs, rows, gpu);
}

namespace {
Array scan_op(const std::string& op, const Array& a, int axis, bool reverse, bool inclusive,
              StreamOrDevice s);
}

namespace {

// `a` shifted by one along `axis` toward the end (`forward`) or the start, the vacated place
// filled with zeros: an exclusive scan's cotangent as the inclusive scan's.
Array shift(const Array& a, int axis, bool forward) {
  int64_t n = a.shape()[axis];
  Shape start(a.ndim(), 0), stop = a.shape(), zshape = a.shape();
  zshape[axis] = 1;
  Array z = zeros(zshape, a.dtype(), a.device());
  if (n <= 1) return zeros_like(a);
  if (forward) {
    stop[axis] = n - 1;
    return concatenate({z, slice(a, start, stop)}, axis);
  }
  start[axis] = 1;
  return concatenate({slice(a, start, stop), z}, axis);
}

// 0, 1, ..., n - 1 along `axis` of an array of `ndim` axes (int32, broadcastable).
Array positions(int64_t n, int ndim, int axis, Device d) {
  Shape sh(ndim, 1);
  sh[axis] = n;
  return reshape(arange(n, Dtype::int32, d), sh);
}

}  // namespace

// Gradients. cumsum: the cotangent scanned the other way. cumprod: cumsum(g * y) the other way
// divided by x, with zeros handled as MLX does (the first zero of a scan gets the gradient of
// the product with it set to 1; the elements after it get 0). cummax / cummin: each output's
// cotangent goes to the element holding the running extreme there (ties: the latest in scan
// order, as MLX), summed per element with differences of a cumulative sum. complex64 uses MLX's
// rule (the conjugate of the derivative).
std::vector<Array> Scan::vjp(const std::vector<Array>& primals,
                             const std::vector<Array>& cotangents, const std::vector<int>&,
                             const std::vector<Array>& outputs) {
  const Array& g = cotangents.at(0);
  const Array& x = primals.at(0);
  StreamContext on(x.device());
  if (op_ == "sum") return {scan_op("sum", g, axis_, !reverse_, inclusive_, {})};
  auto conj_if_complex = [](const Array& a) {
    return a.dtype() == Dtype::complex64 ? conjugate(a) : a;
  };
  if (op_ == "prod") {
    Array y = outputs.at(0);
    Array incl = inclusive_ ? y : scan_op("prod", x, axis_, reverse_, true, {});
    Array excl = inclusive_ ? scan_op("prod", x, axis_, reverse_, false, {}) : y;
    Array zero = zeros({}, x.dtype(), x.device());
    Array eq_zero = equal(incl, zero);
    Array first_zero = logical_and(eq_zero, not_equal(excl, zero));
    auto partial = [&](const Array& prods) {
      return scan_op("sum", multiply(g, conj_if_complex(prods)), axis_, !reverse_, inclusive_, {});
    };
    Array with_one = scan_op("prod", where(first_zero, ones({}, x.dtype(), x.device()), x), axis_,
                             reverse_, inclusive_, {});
    Array grad = divide(partial(y), conj_if_complex(x));
    return {where(first_zero, partial(with_one), where(eq_zero, zero, grad))};
  }
  // cummax / cummin, through the inclusive scan in the same direction.
  int64_t n = x.shape()[axis_];
  if (n == 0) return {zeros_like(x)};
  Array ct = inclusive_ ? g : shift(g, axis_, reverse_);
  Array y = inclusive_ ? outputs.at(0) : scan_op(op_, x, axis_, reverse_, true, {});
  Array marked = equal(x, y);  // x holds the running extreme here
  Array pos = positions(n, x.ndim(), axis_, x.device());
  Array zero = zeros({}, ct.dtype(), x.device());
  Shape one_shape = ct.shape();
  one_shape[axis_] = 1;
  Array pad = zeros(one_shape, ct.dtype(), x.device());
  if (!reverse_) {
    // Element i takes the cotangents of outputs i .. next marked - 1: S[i] - S[next].
    Array s = scan_op("sum", ct, axis_, true, true, {});
    Array next = scan_op("min", where(marked, pos, full({}, double(n), Dtype::int32)), axis_, true,
                         false, {});
    next = minimum(next, full({}, double(n), Dtype::int32));
    Array at_next = take_along_axis(concatenate({s, pad}, axis_), next, axis_);
    return {where(marked, subtract(s, at_next), zero)};
  }
  // Reverse scans: element i takes the cotangents of outputs previous marked + 1 .. i.
  Array s = scan_op("sum", ct, axis_, false, true, {});
  Array prev =
      scan_op("max", where(marked, pos, full({}, -1.0, Dtype::int32)), axis_, false, false, {});
  prev = maximum(prev, full({}, -1.0, Dtype::int32));
  Array at_prev =
      take_along_axis(concatenate({pad, s}, axis_), add(prev, ones({}, Dtype::int32)), axis_);
  return {where(marked, subtract(s, at_prev), zero)};
}

std::vector<Array> Scan::jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                             const std::vector<int>&) {
  const Array& t = tangents.at(0);
  if (op_ == "sum") return {scan_op("sum", t, axis_, reverse_, inclusive_, {})};
  const Array& x = primals.at(0);
  StreamContext on(x.device());
  if (op_ == "prod") {
    Array y = scan_op("prod", x, axis_, reverse_, inclusive_, {});
    return {multiply(y, scan_op("sum", divide(t, x), axis_, reverse_, inclusive_, {}))};
  }
  // cummax / cummin: the tangent of the element holding the running extreme (ties: the latest
  // in scan order), then shifted for an exclusive scan (its first output is a constant).
  int64_t n = x.shape()[axis_];
  if (n == 0) return {zeros_like(t)};
  Array y = scan_op(op_, x, axis_, reverse_, true, {});
  Array pos = positions(n, x.ndim(), axis_, x.device());
  Array owner = reverse_
                    ? scan_op("min", where(equal(x, y), pos, full({}, double(n), Dtype::int32)),
                              axis_, true, true, {})
                    : scan_op("max", where(equal(x, y), pos, full({}, -1.0, Dtype::int32)), axis_,
                              false, true, {});
  Array r = take_along_axis(t, owner, axis_);
  return {inclusive_ ? r : shift(r, axis_, !reverse_)};
}

namespace {
Array scan_op(const std::string& op, const Array& a, int axis, bool reverse, bool inclusive,
              StreamOrDevice s) {
  std::string name = "cum" + op;
  if (!a.valid()) throw std::invalid_argument("[" + name + "] an input is an empty handle");
  if (a.ndim() == 0) throw std::invalid_argument("[" + name + "] 0-d arrays cannot be scanned");
  axis = normalize_op_axes(a, {axis}, name.c_str())[0];
  Dtype out = scan_dtype(op, a.dtype());
  Device d = resolve_device({a}, s);
  check_op_dtype(d, a.dtype(), name.c_str());
  Array x = to_op_device(a, d);
  auto prim = std::make_shared<Scan>(op, axis, reverse, inclusive);
  return make_pending(prim, {x}, {x.shape()}, {out}, resolve_stream(d, s))[0];
}
}  // namespace

ALLOY_REGISTER_PRIMITIVE(Scan, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("Scan state version must be 1");
  return std::make_shared<Scan>(s.get_string("op"), static_cast<int>(s.get_int("axis")),
                                s.get_as<bool>("reverse"), s.get_as<bool>("inclusive"));
})

}  // namespace alloy::ops

namespace alloy {

#define ALLOY_SCAN(NAME, OP)                                                                \
  Array NAME(const Array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {    \
    return ops::scan_op(OP, a, axis, reverse, inclusive, s);                                \
  }                                                                                         \
  Array NAME(const Array& a, bool reverse, bool inclusive, StreamOrDevice s) {              \
    if (!a.valid()) throw std::invalid_argument("[" #NAME "] an input is an empty handle"); \
    return ops::scan_op(OP, reshape(a, {-1}, s), 0, reverse, inclusive, s);                 \
  }
ALLOY_SCAN(cumsum, "sum")
ALLOY_SCAN(cumprod, "prod")
ALLOY_SCAN(cummax, "max")
ALLOY_SCAN(cummin, "min")
#undef ALLOY_SCAN

}  // namespace alloy
