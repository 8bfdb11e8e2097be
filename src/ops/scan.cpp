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
  if (in == Dtype::complex64)
    throw NotSupported("cum" + op, "not supported: complex64 scans (not implemented yet)");
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

void Scan::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  eval(inputs, outputs, false);
}

void Scan::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  eval(inputs, outputs, true);
}

namespace {
Array scan_op(const std::string& op, const Array& a, int axis, bool reverse, bool inclusive,
              StreamOrDevice s);
}

// Gradients: d cumsum: the cotangent scanned the other way; d cumprod (inclusive or exclusive):
// cumsum(g * y) the other way, divided by x (inputs with zeros give inf/NaN, as the formula).
std::vector<Array> Scan::vjp(const std::vector<Array>& primals,
                             const std::vector<Array>& cotangents, const std::vector<int>&,
                             const std::vector<Array>& outputs) {
  const Array& g = cotangents.at(0);
  if (op_ == "sum") return {scan_op("sum", g, axis_, !reverse_, inclusive_, {})};
  if (op_ == "prod") {
    const Array& x = primals.at(0);
    return {
        divide(scan_op("sum", multiply(g, outputs.at(0)), axis_, !reverse_, inclusive_, {}), x)};
  }
  throw NotSupported(label(), "not supported: the gradient of " + label());
}

std::vector<Array> Scan::jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                             const std::vector<int>&) {
  const Array& t = tangents.at(0);
  if (op_ == "sum") return {scan_op("sum", t, axis_, reverse_, inclusive_, {})};
  if (op_ == "prod") {
    const Array& x = primals.at(0);
    Array y = scan_op("prod", x, axis_, reverse_, inclusive_, {});
    return {multiply(y, scan_op("sum", divide(t, x), axis_, reverse_, inclusive_, {}))};
  }
  throw NotSupported(label(), "not supported: the gradient of " + label());
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
