#include "ops/primitives.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "ops/kernels.h"
#include "ops/ops_internal.h"
#include "ops/reduce_columns.h"
#include "ops/reduce_cpu.h"
#include "ops/reduce_rows.h"

namespace alloy::ops {

namespace {

Dtype opmath(Dtype t) {
  return t == Dtype::float16 || t == Dtype::bfloat16 ? Dtype::float32 : t;
}

}  // namespace

ElementwisePlan plan_elementwise(const OpInfo& op, const std::vector<Dtype>& in) {
  if (static_cast<int>(in.size()) != op.arity)
    throw std::invalid_argument(
        fmt::format("{}: expected {} inputs, got {}", op.op, op.arity, in.size()));
  bool complex = false;
  for (size_t j = std::string_view(op.op) == "select" ? 1 : 0; j < in.size(); ++j)
    complex |= in[j] == Dtype::complex64;
  // MLX's set of complex ops (its ValueError "Not supported for complex64").
  if (complex && !op.complex_ok)
    throw std::invalid_argument(fmt::format("[{}] Not supported for complex64.", op.op));
  ElementwisePlan p;
  size_t n = in.size();
  if (std::string_view(op.op) == "select") {
    Dtype t = promote_types(in[1], in[2]);
    p.via = {Dtype::bool_, t, t};
    p.compute = p.via;
    p.out = t;
    return p;
  }
  Dtype t = in[0];
  for (size_t j = 1; j < n; ++j) t = promote_types(t, in[j]);
  auto reject_bool = [&] {
    if (t == Dtype::bool_ && !op.bool_ok)
      throw std::invalid_argument(fmt::format("{}: not supported for bool arrays", op.op));
  };
  switch (op.family) {
    case Family::arith:
      reject_bool();
      p.via.assign(n, t);
      p.compute.assign(n, opmath(t));
      p.out = t;
      break;
    case Family::float_math:
    case Family::float_or_identity: {
      Dtype f = is_floating(t) ? t : Dtype::float32;
      p.via.assign(n, f);
      p.compute.assign(n, opmath(f));
      p.out = f;
      break;
    }
    case Family::integer_only:
      if (!is_integral(t))
        throw std::invalid_argument(fmt::format(
            "{}: only integer and bool arrays are supported, got {}", op.op, dtype_name(t)));
      reject_bool();
      p.via.assign(n, t);
      p.compute.assign(n, t);
      p.out = t;
      break;
    case Family::compare:
      p.via.assign(n, t);
      p.compute.assign(n, opmath(t));
      p.out = Dtype::bool_;
      break;
    case Family::logical:
      p.via.assign(n, Dtype::bool_);
      p.compute.assign(n, Dtype::bool_);
      p.out = Dtype::bool_;
      break;
    case Family::complex_part:
      if (t != Dtype::complex64)
        throw std::invalid_argument(
            fmt::format("{}: the kernel takes complex64 inputs, got {}", op.op, dtype_name(t)));
      p.via.assign(n, t);
      p.compute.assign(n, t);
      p.out = std::string_view(op.op) == "conjugate" ? t : Dtype::float32;
      break;
  }
  if (complex && std::string_view(op.op) == "abs") p.out = Dtype::float32;  // |z|
  return p;
}

// ---- Elementwise -------------------------------------------------------------------------------

Elementwise::Elementwise(const std::string& op) : op_(op), info_(&op_info(op)) {}

std::string Elementwise::label() const {
  // Primitives shared by several ops (MLX's Log, Sqrt, BitwiseBinary) name the op too.
  std::string_view p = info_->primitive;
  bool shared = p == "Log" || p == "Sqrt" || p == "BitwiseBinary";
  return shared ? fmt::format("{}({})", p, op_) : std::string(p);
}

std::vector<Shape> Elementwise::output_shapes(const std::vector<Array>& inputs) const {
  Shape s;
  for (auto& a : inputs) s = broadcast_shapes(s, a.shape());
  return {s};
}

PrimitiveState Elementwise::state() const {
  PrimitiveState s(1);
  s.set("op", op_);
  return s;
}

void Elementwise::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  std::vector<Dtype> dtypes;
  for (auto& a : inputs) dtypes.push_back(a.dtype());
  ElementwisePlan p = plan_elementwise(*info_, dtypes);
  Array& out = outputs.at(0);
  if (p.out != out.dtype())
    throw std::invalid_argument(fmt::format("{}: the output dtype {} does not match the inputs'",
                                            label(), dtype_name(out.dtype())));
  for (auto& a : inputs)
    if (a.ndim() != 0 && a.shape() != out.shape())
      throw std::invalid_argument(fmt::format(
          "{}: inputs must be 0-d or of the output's shape (broadcast by the op)", label()));
  OpKernel k = elementwise_kernel({op_, p.via, p.compute, p.out}, inputs, out.shape());
  run_kernel(k, inputs, outputs, out.size(), gpu);
}

// Derivatives, written once in terms of the ops: d out / d input k at the primals (`y` = out).
Array Elementwise::partial(const std::vector<Array>& x, const Array& y, int k) const {
  const std::string& o = op_;
  auto c = [&](double v) { return scalar_like(v, y, false); };
  const Array& a = x[0];
  if (info_->arity == 1) {
    if (o == "abs") return sign(a);
    if (o == "negative") return full_like(y, -1.0);
    if (o == "square") return multiply(c(2.0), a);
    if (o == "exp") return y;
    if (o == "expm1") return add(y, c(1.0));
    if (o == "log") return divide(c(1.0), a);
    if (o == "log2") return divide(c(1.0 / std::log(2.0)), a);
    if (o == "log10") return divide(c(1.0 / std::log(10.0)), a);
    if (o == "log1p") return divide(c(1.0), add(a, c(1.0)));
    if (o == "sqrt") return divide(c(0.5), y);
    if (o == "rsqrt") return multiply(c(-0.5), divide(y, a));
    if (o == "sin") return cos(a);
    if (o == "cos") return negative(sin(a));
    if (o == "tan") return add(c(1.0), square(y));
    if (o == "tanh") return subtract(c(1.0), square(y));
    if (o == "arcsin") return rsqrt(subtract(c(1.0), square(a)));
    if (o == "arccos") return negative(rsqrt(subtract(c(1.0), square(a))));
    if (o == "arctan") return divide(c(1.0), add(c(1.0), square(a)));
    if (o == "sinh") return cosh(a);
    if (o == "cosh") return sinh(a);
    if (o == "sigmoid") return multiply(y, subtract(c(1.0), y));
    if (o == "erf") return multiply(c(2.0 / std::sqrt(M_PI)), exp(negative(square(a))));
    if (o == "erfc") return multiply(c(-2.0 / std::sqrt(M_PI)), exp(negative(square(a))));
    if (o == "erfinv") return multiply(c(std::sqrt(M_PI) / 2.0), exp(square(y)));
    if (o == "sign" || o == "floor" || o == "ceil" || o == "round") return zeros_like(y);
  } else if (info_->arity == 2) {
    const Array& b = x[1];
    if (o == "add") return full_like(y, 1.0);
    if (o == "subtract") return full_like(y, k == 0 ? 1.0 : -1.0);
    if (o == "multiply") return broadcast_to(astype(k == 0 ? b : a, y.dtype()), y.shape());
    if (o == "divide")
      return k == 0 ? broadcast_to(divide(c(1.0), b), y.shape()) : negative(divide(y, b));
    if (o == "power")
      return k == 0 ? multiply(b, power(a, subtract(b, c(1.0)))) : multiply(y, log(a));
    if (o == "maximum" || o == "minimum") {
      // Ties send the gradient to the first argument.
      Array first = o == "maximum" ? greater_equal(a, b) : less_equal(a, b);
      return astype(k == 0 ? first : logical_not(first), y.dtype());
    }
    if (o == "arctan2") {
      Array den = add(square(a), square(b));
      return k == 0 ? divide(b, den) : negative(divide(a, den));
    }
    if (o == "logaddexp") return k == 0 ? exp(subtract(a, y)) : exp(subtract(b, y));
    if (o == "remainder") return k == 0 ? full_like(y, 1.0) : negative(floor_divide(a, b));
    if (o == "floor_divide") return zeros_like(y);
  } else if (o == "select") {
    if (k == 0) return zeros_like(y);
    return astype(k == 1 ? x[0] : logical_not(x[0]), y.dtype());
  }
  if (info_->family == Family::compare || info_->family == Family::logical ||
      info_->family == Family::integer_only)
    return zeros_like(y);  // piecewise constant (as MLX: zero gradients)
  throw NotSupported(label(), "no gradient for " + label());
}

namespace {
// A cotangent of the output's shape, summed to an input's shape (0-d inputs were broadcast).
Array unbroadcast(const Array& g, const Array& primal) {
  if (primal.shape() == g.shape()) return g;
  return sum(g, false);
}
}  // namespace

std::vector<Array> Elementwise::vjp(const std::vector<Array>& primals,
                                    const std::vector<Array>& cotangents,
                                    const std::vector<int>& argnums,
                                    const std::vector<Array>& outputs) {
  StreamContext on(outputs.at(0).device());  // the derivative's ops run where the op ran
  std::vector<Array> out;
  for (int k : argnums) {
    // MLX's rule for complex64: the vjp multiplies by the conjugate of the jvp's multiplier.
    Array p = partial(primals, outputs.at(0), k);
    if (p.dtype() == Dtype::complex64) p = conjugate(p);
    out.push_back(unbroadcast(multiply(cotangents.at(0), p), primals.at(k)));
  }
  return out;
}

std::vector<Array> Elementwise::jvp(const std::vector<Array>& primals,
                                    const std::vector<Array>& tangents,
                                    const std::vector<int>& argnums) {
  StreamContext on(primals.at(0).device());
  Array y = apply_elementwise(op_, primals, primals.at(0).device());
  Array t;
  for (size_t i = 0; i < argnums.size(); ++i) {
    Array term = multiply(tangents.at(i), partial(primals, y, argnums[i]));
    t = t.valid() ? add(t, term) : term;
  }
  return {t};
}

// ---- Reduce ------------------------------------------------------------------------------------

std::pair<Dtype, Dtype> reduce_dtypes(const std::string& op, Dtype in) {
  if (op == "all" || op == "any") return {Dtype::bool_, Dtype::bool_};
  if (op == "max" || op == "min") return {opmath(in), in};
  // sum / prod
  Dtype out = in;
  switch (in) {
    case Dtype::bool_:
    case Dtype::int8:
    case Dtype::int16:
      out = Dtype::int32;
      break;
    case Dtype::uint8:
    case Dtype::uint16:
      out = Dtype::uint32;
      break;
    default:
      break;
  }
  return {opmath(out), out};
}

Reduce::Reduce(std::string op, std::vector<int> axes) : op_(std::move(op)), axes_(std::move(axes)) {
  static const char* kOps[] = {"sum", "prod", "max", "min", "all", "any"};
  if (std::find_if(std::begin(kOps), std::end(kOps), [&](const char* o) { return op_ == o; }) ==
      std::end(kOps))
    throw std::invalid_argument("Reduce: unknown reduction '" + op_ + "'");
  std::sort(axes_.begin(), axes_.end());
  if (std::adjacent_find(axes_.begin(), axes_.end()) != axes_.end())
    throw std::invalid_argument("Reduce: duplicate axes");
}

std::vector<Shape> Reduce::output_shapes(const std::vector<Array>& inputs) const {
  Shape s = inputs.at(0).shape();
  for (int ax : axes_) {
    if (ax < 0 || ax >= static_cast<int>(s.size()))
      throw std::invalid_argument(
          fmt::format("{}: axis {} is out of range for an array of {} "
                      "dimensions",
                      op_, ax, s.size()));
    s[ax] = 1;
  }
  return {s};
}

PrimitiveState Reduce::state() const {
  PrimitiveState s(1);
  s.set("op", op_).set("axes", std::vector<int64_t>(axes_.begin(), axes_.end()));
  return s;
}

namespace {
// A materialized row-major array over `x`'s buffer (a row-contiguous x) in another shape.
Array row_major_alias(const Array& x, const Shape& shape) {
  auto n = std::make_shared<ArrayNode>(*node_of(x));
  n->pending = nullptr;
  n->shape = shape;
  n->strides = row_major_strides(shape);
  return array_of(std::move(n));
}
}  // namespace

void Reduce::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  const Array& x = inputs.at(0);
  auto [acc, out] = reduce_dtypes(op_, x.dtype());
  if (out != outputs.at(0).dtype())
    throw std::invalid_argument(label() + ": the output dtype does not match the input's");
  int nred = static_cast<int>(axes_.size());
  // One run of leading or middle axes of a row-contiguous input, seen as [outer, reduced, inner]:
  // on CUDA the cooperative column kernel (reduce_columns.h), on the CPU reduce_cpu.h's.
  bool run = x.is_row_contiguous() && nred > 0 && x.size() > 0 && axes_.back() < x.ndim() - 1;
  for (int j = 0; j < nred && run; ++j) run = axes_[j] == axes_[0] + j;
  if (run) {
    int64_t outer = 1, red = 1, inner = 1;
    for (int d = 0; d < x.ndim(); ++d)
      (d < axes_[0] ? outer : d <= axes_.back() ? red : inner) *= x.shape()[d];
    Array x3 = row_major_alias(x, {outer, red, inner});
    if (gpu || cooperative_columns_on_cpu())
      reduce_columns(op_, x3, acc, outputs, gpu);
    else
      reduce_columns_cpu(op_, x3, acc, outputs);  // tiles of columns walking rows (reduce_cpu.h)
    return;
  }
  // Few long rows (e.g. every axis of a large array): a first pass over chunks of each row
  // spreads the work over many threads; the partial results are then reduced per row.
  bool trailing = x.is_row_contiguous();
  for (int j = 0; j < nred; ++j) trailing &= axes_[j] == x.ndim() - nred + j;
  int64_t len = 1;
  for (int j = 0; j < nred; ++j) len *= x.shape()[x.ndim() - nred + j];
  int64_t n_out = outputs[0].size();
  // Cooperative row kernels (reduce_rows.h) on CUDA: a threadgroup per row.
  if ((gpu || cooperative_rows_on_cpu()) && trailing && len >= 64 && x.size() > 0 &&
      row_reduce_supported(op_, acc)) {
    reduce_rows(op_, row_major_alias(x, {n_out, len}), acc, outputs, gpu);
    return;
  }
  // The CPU's lane kernel (reduce_cpu.h): a thread per row (or piece of a long row).
  if (!gpu && !cooperative_rows_on_cpu() && trailing && nred > 0 && x.size() > 0) {
    reduce_rows_cpu(op_, row_major_alias(x, {n_out, len}), acc, outputs);
    return;
  }
  if (trailing && len > 4 * kRowChunk && n_out < 256 && x.size() > 0) {
    int64_t chunks = (len + kRowChunk - 1) / kRowChunk;
    std::vector<Array> partial{scratch({n_out, chunks}, acc, x.device())};
    run_kernel(row_chunk_kernel(op_, x.dtype(), acc), {row_major_alias(x, {n_out, len})}, partial,
               chunks, gpu, n_out);
    run_kernel(reduce_kernel({op_, {1}, acc, out}, partial[0]), partial, outputs, n_out, gpu);
    return;
  }
  OpKernel k = reduce_kernel({op_, axes_, acc, out}, x);
  run_kernel(k, inputs, outputs, outputs[0].size(), gpu);
}

std::vector<Array> Reduce::vjp(const std::vector<Array>& primals,
                               const std::vector<Array>& cotangents, const std::vector<int>&,
                               const std::vector<Array>& outputs) {
  const Array& x = primals.at(0);
  StreamContext on(x.device());
  Array g = broadcast_to(cotangents.at(0), x.shape());
  if (op_ == "sum") return {g};
  const Array& y = outputs.at(0);
  if (op_ == "prod") {
    Array others = divide(broadcast_to(y, x.shape()), x);  // the product of the other elements
    if (others.dtype() == Dtype::complex64) others = conjugate(others);  // MLX's complex rule
    return {multiply(g, others)};
  }
  if (op_ == "max" || op_ == "min") {
    // Ties share the cotangent equally (as MLX): a maximum taken by k equal elements (e.g. of a
    // broadcast) sends each 1/k of it.
    Array mask = astype(equal(x, y), g.dtype());
    return {multiply(g, divide(mask, broadcast_to(sum(mask, axes_, true), x.shape())))};
  }
  return {zeros_like(x)};
}

std::vector<Array> Reduce::jvp(const std::vector<Array>& primals,
                               const std::vector<Array>& tangents, const std::vector<int>&) {
  const Array& x = primals.at(0);
  StreamContext on(x.device());
  const Array& t = tangents.at(0);
  if (op_ == "sum") return {sum(t, axes_, true)};
  Array y = make_pending(std::make_shared<Reduce>(op_, axes_), {x}, output_shapes({x}),
                         {reduce_dtypes(op_, x.dtype()).second}, x.device())[0];
  if (op_ == "prod") return {multiply(y, sum(divide(t, x), axes_, true))};
  if (op_ == "max" || op_ == "min") {
    Array mask = astype(equal(x, y), t.dtype());
    return {divide(sum(multiply(t, mask), axes_, true), sum(mask, axes_, true))};
  }
  return {zeros_like(y)};
}

// ---- ArgReduce ---------------------------------------------------------------------------------

ArgReduce::ArgReduce(std::string op, int axis) : op_(std::move(op)), axis_(axis) {
  if (op_ != "argmax" && op_ != "argmin")
    throw std::invalid_argument("ArgReduce: unknown reduction '" + op_ + "'");
}

std::vector<Shape> ArgReduce::output_shapes(const std::vector<Array>& inputs) const {
  Shape s = inputs.at(0).shape();
  if (axis_ < 0 || axis_ >= static_cast<int>(s.size()))
    throw std::invalid_argument(
        fmt::format("{}: axis {} is out of range for an array of {} "
                    "dimensions",
                    op_, axis_, s.size()));
  s[axis_] = 1;
  return {s};
}

PrimitiveState ArgReduce::state() const {
  PrimitiveState s(1);
  s.set("op", op_).set("axis", static_cast<int64_t>(axis_));
  return s;
}

void ArgReduce::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  const Array& x = inputs.at(0);
  if (x.shape().at(axis_) == 0 && outputs.at(0).size() > 0)
    throw std::invalid_argument(op_ + ": cannot reduce over an empty axis");
  Dtype acc = opmath(x.dtype());
  OpKernel k = reduce_kernel({op_, {axis_}, acc, Dtype::uint32}, x);
  run_kernel(k, inputs, outputs, outputs[0].size(), gpu);
}

// ---- Concatenate -------------------------------------------------------------------------------

std::vector<Shape> Concatenate::output_shapes(const std::vector<Array>& inputs) const {
  if (inputs.empty()) throw std::invalid_argument("[concatenate] no arrays given");
  Shape s = inputs[0].shape();
  int nd = static_cast<int>(s.size());
  if (axis_ < 0 || axis_ >= nd)
    throw std::invalid_argument(fmt::format("[concatenate] axis {} is out of range", axis_));
  for (size_t j = 1; j < inputs.size(); ++j) {
    const Shape& t = inputs[j].shape();
    bool ok = static_cast<int>(t.size()) == nd;
    for (int d = 0; ok && d < nd; ++d) ok = d == axis_ || t[d] == s[d];
    if (!ok)
      throw std::invalid_argument(
          fmt::format("[concatenate] all arrays must have the same shape except along axis {}; "
                      "got ({}) and ({})",
                      axis_, fmt::join(s, ","), fmt::join(t, ",")));
    s[axis_] += t[axis_];
  }
  return {s};
}

PrimitiveState Concatenate::state() const {
  PrimitiveState s(1);
  s.set("axis", static_cast<int64_t>(axis_));
  return s;
}

std::vector<Array> Concatenate::vjp(const std::vector<Array>& primals,
                                    const std::vector<Array>& cotangents,
                                    const std::vector<int>& argnums, const std::vector<Array>&) {
  StreamContext on(cotangents.at(0).device());
  std::vector<Array> out;
  for (int k : argnums) {
    int64_t start = 0;
    for (int j = 0; j < k; ++j) start += primals[j].shape()[axis_];
    Shape lo(primals[k].ndim(), 0), hi = primals[k].shape();
    lo[axis_] = start;
    hi[axis_] = start + primals[k].shape()[axis_];
    out.push_back(slice(cotangents.at(0), lo, hi));
  }
  return out;
}

void Concatenate::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  Dtype t = outputs.at(0).dtype();
  for (auto& a : inputs)
    if (a.dtype() != t)
      throw std::invalid_argument("[concatenate] inputs must have the output's dtype");
  run_kernel(concatenate_kernel(static_cast<int>(inputs.size()), t, axis_, inputs[0].ndim()),
             inputs, outputs, outputs[0].size(), gpu);
}

// ---- registry ----------------------------------------------------------------------------------

namespace {
std::shared_ptr<Primitive> elementwise_from_state(const char* name, const PrimitiveState& s) {
  if (s.version() != 1)
    throw std::invalid_argument(
        fmt::format("{} state version {} is not supported (1 is)", name, s.version()));
  const std::string& op = s.get_string("op");
  const OpInfo& info = op_info(op);
  if (std::string_view(info.primitive) != name)
    throw std::invalid_argument(fmt::format("{}: op '{}' belongs to {}", name, op, info.primitive));
  return std::make_shared<Elementwise>(op);
}
}  // namespace

#define ALLOY_REGISTER_ELEMENTWISE(NAME) \
  ALLOY_REGISTER_PRIMITIVE(              \
      NAME, [](const PrimitiveState& s) { return elementwise_from_state(#NAME, s); })

ALLOY_REGISTER_ELEMENTWISE(Abs)
ALLOY_REGISTER_ELEMENTWISE(Negative)
ALLOY_REGISTER_ELEMENTWISE(Sign)
ALLOY_REGISTER_ELEMENTWISE(Square)
ALLOY_REGISTER_ELEMENTWISE(Exp)
ALLOY_REGISTER_ELEMENTWISE(Expm1)
ALLOY_REGISTER_ELEMENTWISE(Log)
ALLOY_REGISTER_ELEMENTWISE(Log1p)
ALLOY_REGISTER_ELEMENTWISE(Sqrt)
ALLOY_REGISTER_ELEMENTWISE(Sin)
ALLOY_REGISTER_ELEMENTWISE(Cos)
ALLOY_REGISTER_ELEMENTWISE(Tan)
ALLOY_REGISTER_ELEMENTWISE(Tanh)
ALLOY_REGISTER_ELEMENTWISE(ArcSin)
ALLOY_REGISTER_ELEMENTWISE(ArcCos)
ALLOY_REGISTER_ELEMENTWISE(ArcTan)
ALLOY_REGISTER_ELEMENTWISE(Sinh)
ALLOY_REGISTER_ELEMENTWISE(Cosh)
ALLOY_REGISTER_ELEMENTWISE(Sigmoid)
ALLOY_REGISTER_ELEMENTWISE(Erf)
ALLOY_REGISTER_ELEMENTWISE(Erfc)
ALLOY_REGISTER_ELEMENTWISE(ErfInv)
ALLOY_REGISTER_ELEMENTWISE(Floor)
ALLOY_REGISTER_ELEMENTWISE(Ceil)
ALLOY_REGISTER_ELEMENTWISE(Round)
ALLOY_REGISTER_ELEMENTWISE(Real)
ALLOY_REGISTER_ELEMENTWISE(Imag)
ALLOY_REGISTER_ELEMENTWISE(Conjugate)
ALLOY_REGISTER_ELEMENTWISE(LogicalNot)
ALLOY_REGISTER_ELEMENTWISE(BitwiseInvert)
ALLOY_REGISTER_ELEMENTWISE(Add)
ALLOY_REGISTER_ELEMENTWISE(Subtract)
ALLOY_REGISTER_ELEMENTWISE(Multiply)
ALLOY_REGISTER_ELEMENTWISE(Divide)
ALLOY_REGISTER_ELEMENTWISE(FloorDivide)
ALLOY_REGISTER_ELEMENTWISE(Remainder)
ALLOY_REGISTER_ELEMENTWISE(Power)
ALLOY_REGISTER_ELEMENTWISE(Maximum)
ALLOY_REGISTER_ELEMENTWISE(Minimum)
ALLOY_REGISTER_ELEMENTWISE(ArcTan2)
ALLOY_REGISTER_ELEMENTWISE(LogAddExp)
ALLOY_REGISTER_ELEMENTWISE(Equal)
ALLOY_REGISTER_ELEMENTWISE(NotEqual)
ALLOY_REGISTER_ELEMENTWISE(Less)
ALLOY_REGISTER_ELEMENTWISE(LessEqual)
ALLOY_REGISTER_ELEMENTWISE(Greater)
ALLOY_REGISTER_ELEMENTWISE(GreaterEqual)
ALLOY_REGISTER_ELEMENTWISE(LogicalAnd)
ALLOY_REGISTER_ELEMENTWISE(LogicalOr)
ALLOY_REGISTER_ELEMENTWISE(BitwiseBinary)
ALLOY_REGISTER_ELEMENTWISE(Select)

ALLOY_REGISTER_PRIMITIVE(Reduce, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("Reduce state version must be 1");
  const auto& axes = s.get_as<std::vector<int64_t>>("axes");
  return std::make_shared<Reduce>(s.get_string("op"), std::vector<int>(axes.begin(), axes.end()));
})
ALLOY_REGISTER_PRIMITIVE(Concatenate, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("Concatenate state version must be 1");
  return std::make_shared<Concatenate>(static_cast<int>(s.get_int("axis")));
})
ALLOY_REGISTER_PRIMITIVE(ArgReduce, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("ArgReduce state version must be 1");
  return std::make_shared<ArgReduce>(s.get_string("op"), static_cast<int>(s.get_int("axis")));
})

}  // namespace alloy::ops
