// Indexing ops: take, take_along_axis, put_along_axis, gather, scatter / scatter_add,
// slice_update (MLX's Gather, GatherAxis, ScatterAxis, Scatter, SliceUpdate primitives), split,
// eye / identity / tri / tril / triu. Kernels are generated per (dtypes, rank, axes) and read
// their inputs through strides; a kernel's geometry that varies per call (slice sizes, starts,
// steps) travels in a small int64 parameter array, so a new shape does not build a new kernel.
//
// Index values: negative ones count from the end (as MLX); ones still out of range are clamped
// by gathers and dropped by scatters (MLX leaves them undefined).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "ops/kernels.h"
#include "ops/misc_primitives.h"
#include "ops/ops_internal.h"

namespace alloy::ops {

namespace {

constexpr int64_t kScatterChunk = 4096;

// Index k read at flat position `p` of the (broadcast) index shape, made non-negative.
std::string read_index(int k, const std::string& p, const std::string& n) {
  return fmt::format(
      "int64_t v{0} = int64_t(i{0}[elem_to_loc({1}, i{0}_shape, i{0}_strides, i{0}_ndim)]);\n"
      "    if (v{0} < 0) v{0} += {2};\n",
      k, p, n);
}

OpKernel gather_kernel(Dtype a, const std::vector<Dtype>& idx, int nd,
                       const std::vector<int>& axes) {
  std::vector<std::string> it;
  for (auto t : idx) it.emplace_back(dtype_name(t));
  std::string key = fmt::format("gather|{}|{}|{}|{}", dtype_name(a), fmt::join(it, ","), nd,
                                fmt::join(axes, ","));
  return op_kernel(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_gather";
    spec.input_names = {"a", "ss"};
    for (size_t k = 0; k < idx.size(); ++k) spec.input_names.push_back(fmt::format("i{}", k));
    spec.output_names = {"out"};
    spec.header = functor_header({});
    std::string s = fmt::format(
        "  uint i = thread_position_in_grid.x;\n"
        "  int64_t S = 1;\n"
        "  for (int d = 0; d < {0}; ++d) S *= ss[d];\n"
        "  int64_t p = int64_t(i) / S, r = int64_t(i) % S, loc = 0;\n"
        "  for (int d = {0} - 1; d >= 0; --d) {{\n"
        "    int64_t c = r % ss[d];\n"
        "    r /= ss[d];\n"
        "    loc += c * a_strides[d];\n"
        "  }}\n",
        nd);
    for (size_t k = 0; k < axes.size(); ++k) {
      std::string n = fmt::format("int64_t(a_shape[{}])", axes[k]);
      s += "  {\n    " + read_index(static_cast<int>(k), "p", n);
      s += fmt::format(
          "    int64_t hi = {1} - ss[{2}];\n"
          "    v{0} = v{0} < 0 ? 0 : (v{0} > hi ? hi : v{0});\n"
          "    loc += v{0} * a_strides[{2}];\n"
          "  }}\n",
          k, n, axes[k]);
    }
    s += "  out[i] = a[loc];\n";
    spec.source = s;
    return spec;
  });
}

OpKernel gather_axis_kernel(Dtype a, Dtype idx, int nd, int axis) {
  std::string key = fmt::format("gatheraxis|{}|{}|{}|{}", dtype_name(a), dtype_name(idx), nd, axis);
  return op_kernel(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_take_along_axis";
    spec.input_names = {"a", "i0"};
    spec.output_names = {"out"};
    spec.header = functor_header({});
    spec.source = fmt::format(
        "  uint i = thread_position_in_grid.x;\n"
        "  int64_t rem = int64_t(i), loc = 0;\n"
        "  for (int d = {0} - 1; d >= 0; --d) {{\n"
        "    int64_t n = i0_shape[d], c = rem % n;\n"
        "    rem /= n;\n"
        "    if (d != {1}) loc += c * a_strides[d];\n"
        "  }}\n"
        "  {{\n    {2}"
        "    int64_t n = a_shape[{1}];\n"
        "    v0 = v0 < 0 ? 0 : (v0 >= n ? n - 1 : v0);\n"
        "    loc += v0 * a_strides[{1}];\n"
        "  }}\n"
        "  out[i] = a[loc];\n",
        nd, axis, read_index(0, "i", "int64_t(a_shape[" + std::to_string(axis) + "])"));
    return spec;
  });
}

OpKernel scatter_axis_kernel(Dtype a, Dtype idx, int nd, int axis) {
  std::string key =
      fmt::format("scatteraxis|{}|{}|{}|{}", dtype_name(a), dtype_name(idx), nd, axis);
  return op_kernel(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_put_along_axis";
    spec.input_names = {"a", "idx", "upd"};
    spec.output_names = {"out"};
    spec.header = functor_header({});
    std::string s =
        "  uint row = thread_position_in_grid.x;\n"
        "  int64_t ab = 0, ib = 0, ub = 0;\n"
        "  uint64_t rem = row;\n";
    for (int d = nd - 1; d >= 0; --d)
      if (d != axis)
        s += fmt::format(
            "  {{ uint64_t n = uint64_t(a_shape[{0}]); int64_t c = int64_t(rem % n); rem /= n; "
            "ab += c * a_strides[{0}]; ib += c * idx_strides[{0}]; ub += c * upd_strides[{0}]; "
            "}}\n",
            d);
    s += fmt::format(
        "  int64_t inner = 1;\n"
        "  for (int d = {0} + 1; d < {1}; ++d) inner *= a_shape[d];\n"
        "  int64_t L = a_shape[{0}], M = idx_shape[{0}];\n"
        "  int64_t ob = (int64_t(row) / inner) * L * inner + int64_t(row) % inner;\n"
        "  for (int64_t k = 0; k < L; ++k) out[ob + k * inner] = a[ab + k * a_strides[{0}]];\n"
        "  for (int64_t j = 0; j < M; ++j) {{\n"
        "    int64_t v = int64_t(idx[ib + j * idx_strides[{0}]]);\n"
        "    if (v < 0) v += L;\n"
        "    if (v >= 0 && v < L) out[ob + v * inner] = upd[ub + j * upd_strides[{0}]];\n"
        "  }}\n",
        axis, nd);
    spec.source = s;
    return spec;
  });
}

OpKernel scatter_kernel(const std::string& op, Dtype a, const std::vector<Dtype>& idx, int nd,
                        const std::vector<int>& axes) {
  std::vector<std::string> it;
  for (auto t : idx) it.emplace_back(dtype_name(t));
  std::string key = fmt::format("scatter|{}|{}|{}|{}|{}|{}", op, dtype_name(a), fmt::join(it, ","),
                                nd, fmt::join(axes, ","), kScatterChunk);
  return op_kernel(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_scatter";
    spec.input_names = {"a", "upd"};
    for (size_t k = 0; k < idx.size(); ++k) spec.input_names.push_back(fmt::format("i{}", k));
    spec.output_names = {"out"};
    spec.header = functor_header({"add"});
    auto is_axis = [&](int d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); };
    // Thread (r, c): rest position r (the dims that are not indexed), chunk c of the indexed
    // positions: copies its chunk, then applies every index that falls in it, in order.
    std::string s = fmt::format(
        "  int64_t r = thread_position_in_grid.x, c = thread_position_in_grid.y;\n"
        "  int64_t os[{0}];\n"
        "  os[{0} - 1] = 1;\n"
        "  for (int d = {0} - 2; d >= 0; --d) os[d] = os[d + 1] * a_shape[d + 1];\n"
        "  int64_t ab = 0, ob = 0, slin = 0, S = 1, rem = r;\n",
        nd);
    for (int d = nd - 1; d >= 0; --d)
      if (!is_axis(d))
        s += fmt::format(
            "  {{ int64_t n = a_shape[{0}], k = rem % n; rem /= n; ab += k * a_strides[{0}]; "
            "ob += k * os[{0}]; slin += k * S; S *= n; }}\n",
            d);
    s += "  int64_t Q = 1;\n";
    for (int ax : axes) s += fmt::format("  Q *= a_shape[{}];\n", ax);
    s += fmt::format(
        "  int64_t q0 = c * {0}, q1 = min(Q, q0 + {0});\n"
        "  for (int64_t q = q0; q < q1; ++q) {{\n"
        "    int64_t rq = q, ao = 0, oo = 0;\n",
        kScatterChunk);
    for (int k = static_cast<int>(axes.size()) - 1; k >= 0; --k)
      s += fmt::format(
          "    {{ int64_t n = a_shape[{0}], x = rq % n; rq /= n; ao += x * a_strides[{0}]; oo += x "
          "* os[{0}]; }}\n",
          axes[k]);
    s += "    out[ob + oo] = a[ab + ao];\n  }\n";
    s += "  int64_t P = 1;\n  for (int d = 0; d < i0_ndim; ++d) P *= i0_shape[d];\n";
    s += "  for (int64_t p = 0; p < P; ++p) {\n    int64_t oo = 0, qq = 0;\n    bool ok = true;\n";
    for (size_t k = 0; k < axes.size(); ++k) {
      std::string n = fmt::format("int64_t(a_shape[{}])", axes[k]);
      s += "    " + read_index(static_cast<int>(k), "p", n);
      s += fmt::format(
          "    ok = ok && v{0} >= 0 && v{0} < {1};\n"
          "    oo += v{0} * os[{2}];\n"
          "    qq = qq * {1} + v{0};\n",
          k, n, axes[k]);
    }
    std::string u = "upd[elem_to_loc(p * S + slin, upd_shape, upd_strides, upd_ndim)]";
    std::string w = op == "add" ? fmt::format("add_functor()(out[ob + oo], {})", u) : u;
    s += fmt::format("    if (ok && qq >= q0 && qq < q1) out[ob + oo] = {};\n  }}\n", w);
    spec.source = s;
    return spec;
  });
}

OpKernel slice_update_kernel(Dtype t, int nd) {
  std::string key = fmt::format("sliceupdate|{}|{}", dtype_name(t), nd);
  return op_kernel(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_slice_update";
    spec.input_names = {"src", "upd", "p"};
    spec.output_names = {"out"};
    spec.header = functor_header({});
    spec.source = fmt::format(
        "  uint i = thread_position_in_grid.x;\n"
        "  int64_t rem = int64_t(i), uo = 0;\n"
        "  bool in = true;\n"
        "  for (int d = {0} - 1; d >= 0; --d) {{\n"
        "    int64_t n = src_shape[d], c = rem % n;\n"
        "    rem /= n;\n"
        "    int64_t k = c - p[d], st = p[{0} + d];\n"
        "    in = in && k % st == 0;\n"
        "    k /= st;\n"
        "    in = in && k >= 0 && k < upd_shape[d];\n"
        "    uo += k * upd_strides[d];\n"
        "  }}\n"
        "  out[i] = in ? upd[uo] : src[elem_to_loc(i, src_shape, src_strides, src_ndim)];\n",
        nd);
    return spec;
  });
}

void check_index_dtype(const Array& i, const char* op) {
  if (!is_integral(i.dtype()) || i.dtype() == Dtype::bool_)
    throw std::invalid_argument(
        fmt::format("[{}] indices must be integers, got {}", op, dtype_name(i.dtype())));
}

Shape concat_shapes(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

}  // namespace

Array at_least_1d_alias(const Array& x) {
  if (x.ndim() > 0) return x;
  auto n = std::make_shared<ArrayNode>(*node_of(x));
  n->pending = nullptr;
  n->shape = {1};
  n->strides = {1};
  return array_of(std::move(n));
}

Array param_array(const std::vector<int64_t>& v) {
  std::vector<int64_t> p = v.empty() ? std::vector<int64_t>{0} : v;
  return Array::from_vector(p, {static_cast<int64_t>(p.size())}, Dtype::int64, Device::cpu());
}

// ---- Gather ------------------------------------------------------------------------------------

Gather::Gather(std::vector<int> axes, Shape slice_sizes)
    : axes_(std::move(axes)), slice_sizes_(std::move(slice_sizes)) {}

std::vector<Shape> Gather::output_shapes(const std::vector<Array>& inputs) const {
  const Array& a = inputs.at(0);
  if (inputs.size() != axes_.size() + 1)
    throw std::invalid_argument("[gather] one index array per axis is needed");
  if (static_cast<int>(slice_sizes_.size()) != a.ndim())
    throw std::invalid_argument("[gather] slice_sizes must have one entry per dimension of a");
  for (int ax : axes_)
    if (ax < 0 || ax >= a.ndim()) throw std::invalid_argument("[gather] axis out of range");
  for (int d = 0; d < a.ndim(); ++d)
    if (slice_sizes_[d] < 0 || slice_sizes_[d] > a.shape()[d])
      throw std::invalid_argument("[gather] slice sizes must be within a's shape");
  Shape idx = inputs.size() > 1 ? inputs[1].shape() : Shape{};
  for (size_t k = 2; k < inputs.size(); ++k)
    if (inputs[k].shape() != idx)
      throw std::invalid_argument("[gather] index arrays must have one shape");
  return {concat_shapes(idx, slice_sizes_)};
}

PrimitiveState Gather::state() const {
  PrimitiveState s(1);
  s.set("axes", std::vector<int64_t>(axes_.begin(), axes_.end())).set("slice_sizes", slice_sizes_);
  return s;
}

void Gather::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  Array a = at_least_1d_alias(inputs.at(0));
  std::vector<Dtype> idt;
  std::vector<Array> in{a, param_array(slice_sizes_)};
  for (size_t k = 1; k < inputs.size(); ++k) {
    idt.push_back(inputs[k].dtype());
    in.push_back(at_least_1d_alias(inputs[k]));
  }
  if (outputs.at(0).size() == 0) {
    allocate_output(outputs[0]);
    return;
  }
  for (int ax : axes_)
    if (a.shape()[ax] == 0) throw std::invalid_argument("[gather] cannot index an empty axis");
  run_kernel(gather_kernel(a.dtype(), idt, a.ndim(), axes_), in, outputs, outputs[0].size(), gpu);
}

std::vector<Array> Gather::vjp(const std::vector<Array>& primals,
                               const std::vector<Array>& cotangents,
                               const std::vector<int>& argnums, const std::vector<Array>&) {
  const Array& a = primals.at(0);
  for (int d = 0; d < a.ndim(); ++d) {
    bool indexed = std::find(axes_.begin(), axes_.end(), d) != axes_.end();
    if (slice_sizes_[d] != (indexed ? 1 : a.shape()[d]))
      throw NotSupported("Gather", "not supported: the gradient of a gather of partial slices");
  }
  std::vector<Array> idx(primals.begin() + 1, primals.end());
  std::vector<Array> out;
  for (int k : argnums) {
    if (k != 0) throw std::invalid_argument("[gather] indices have no gradient");
    out.push_back(scatter_add(zeros_like(a), idx, cotangents.at(0), axes_));
  }
  return out;
}

std::vector<Array> Gather::jvp(const std::vector<Array>& primals,
                               const std::vector<Array>& tangents,
                               const std::vector<int>& argnums) {
  if (argnums.size() != 1 || argnums[0] != 0)
    throw std::invalid_argument("[gather] indices have no gradient");
  std::vector<Array> idx(primals.begin() + 1, primals.end());
  return {gather(tangents.at(0), idx, axes_, slice_sizes_)};
}

// ---- GatherAxis / ScatterAxis ------------------------------------------------------------------

std::vector<Shape> GatherAxis::output_shapes(const std::vector<Array>& inputs) const {
  const Array &a = inputs.at(0), &i = inputs.at(1);
  if (a.ndim() != i.ndim() || axis_ < 0 || axis_ >= a.ndim())
    throw std::invalid_argument("[take_along_axis] indices must have a's rank, axis in range");
  return {i.shape()};
}

PrimitiveState GatherAxis::state() const {
  PrimitiveState s(1);
  s.set("axis", static_cast<int64_t>(axis_));
  return s;
}

void GatherAxis::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  const Array &a = inputs.at(0), &i = inputs.at(1);
  if (outputs.at(0).size() == 0) {
    allocate_output(outputs[0]);
    return;
  }
  if (a.shape()[axis_] == 0)
    throw std::invalid_argument("[take_along_axis] cannot index an empty axis");
  run_kernel(gather_axis_kernel(a.dtype(), i.dtype(), a.ndim(), axis_), inputs, outputs,
             outputs[0].size(), gpu);
}

// d a: the cotangent added at the gathered positions: a scatter_add over every axis, with the
// other axes' indices as broadcast ranges.
std::vector<Array> GatherAxis::vjp(const std::vector<Array>& primals,
                                   const std::vector<Array>& cotangents,
                                   const std::vector<int>& argnums, const std::vector<Array>&) {
  const Array &a = primals.at(0), &i = primals.at(1);
  std::vector<Array> idx;
  std::vector<int> axes;
  for (int d = 0; d < a.ndim(); ++d) {
    axes.push_back(d);
    if (d == axis_) {
      idx.push_back(i);
      continue;
    }
    Shape s(a.ndim(), 1);
    s[d] = a.shape()[d];
    idx.push_back(broadcast_to(
        reshape(arange(0.0, static_cast<double>(a.shape()[d]), 1.0, Dtype::int32, a.device()), s),
        i.shape()));
  }
  Shape us = i.shape();
  us.insert(us.end(), a.ndim(), 1);
  std::vector<Array> out;
  for (int k : argnums) {
    if (k != 0) throw std::invalid_argument("[take_along_axis] indices have no gradient");
    out.push_back(scatter_add(zeros_like(a), idx, reshape(cotangents.at(0), us), axes));
  }
  return out;
}

std::vector<Shape> ScatterAxis::output_shapes(const std::vector<Array>& inputs) const {
  const Array &a = inputs.at(0), &i = inputs.at(1), &u = inputs.at(2);
  if (a.ndim() != i.ndim() || i.shape() != u.shape() || axis_ < 0 || axis_ >= a.ndim())
    throw std::invalid_argument("[put_along_axis] indices and values must have a's rank");
  for (int d = 0; d < a.ndim(); ++d)
    if (d != axis_ && i.shape()[d] != a.shape()[d])
      throw std::invalid_argument("[put_along_axis] indices must match a's shape off the axis");
  return {a.shape()};
}

PrimitiveState ScatterAxis::state() const {
  PrimitiveState s(1);
  s.set("axis", static_cast<int64_t>(axis_));
  return s;
}

void ScatterAxis::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  const Array &a = inputs.at(0), &i = inputs.at(1), &u = inputs.at(2);
  if (u.dtype() != a.dtype()) throw std::invalid_argument("[put_along_axis] dtype mismatch");
  int64_t L = a.shape()[axis_];
  if (outputs.at(0).size() == 0 || L == 0) {
    allocate_output(outputs[0]);
    return;
  }
  run_kernel(scatter_axis_kernel(a.dtype(), i.dtype(), a.ndim(), axis_), inputs, outputs,
             a.size() / L, gpu);
}

// put_along_axis (a copy of a with values written): d a is the cotangent with zeros where values
// went, d values the cotangent read back there (MLX's rule; indices have none).
std::vector<Array> ScatterAxis::vjp(const std::vector<Array>& primals,
                                    const std::vector<Array>& cotangents,
                                    const std::vector<int>& argnums, const std::vector<Array>&) {
  const Array &i = primals.at(1), &u = primals.at(2);
  const Array& g = cotangents.at(0);
  StreamContext on(g.device());
  std::vector<Array> out;
  for (int k : argnums) {
    if (k == 1) throw std::invalid_argument("[put_along_axis] indices have no gradient");
    out.push_back(k == 0 ? put_along_axis(g, i, zeros_like(u), axis_)
                         : take_along_axis(g, i, axis_));
  }
  return out;
}

std::vector<Array> ScatterAxis::jvp(const std::vector<Array>& primals,
                                    const std::vector<Array>& tangents,
                                    const std::vector<int>& argnums) {
  const Array &a = primals.at(0), &i = primals.at(1), &u = primals.at(2);
  StreamContext on(a.device());
  Array ta = zeros_like(a), tu = zeros_like(u);
  for (size_t n = 0; n < argnums.size(); ++n) {
    if (argnums[n] == 1) throw std::invalid_argument("[put_along_axis] indices have no gradient");
    (argnums[n] == 0 ? ta : tu) = tangents.at(n);
  }
  return {put_along_axis(ta, i, tu, axis_)};
}

// ---- Scatter -----------------------------------------------------------------------------------

Scatter::Scatter(std::string op, std::vector<int> axes)
    : op_(std::move(op)), axes_(std::move(axes)) {
  if (op_ != "none" && op_ != "add")
    throw std::invalid_argument("Scatter: unknown reduction '" + op_ + "'");
  if (axes_.empty()) throw std::invalid_argument("[scatter] at least one axis is needed");
  auto sorted = axes_;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw std::invalid_argument("[scatter] duplicate axes");
}

std::vector<Shape> Scatter::output_shapes(const std::vector<Array>& inputs) const {
  const Array &a = inputs.at(0), &u = inputs.at(1);
  if (inputs.size() != axes_.size() + 2)
    throw std::invalid_argument("[scatter] one index array per axis is needed");
  const Shape& idx = inputs[2].shape();
  for (size_t k = 3; k < inputs.size(); ++k)
    if (inputs[k].shape() != idx)
      throw std::invalid_argument("[scatter] index arrays must have one shape");
  Shape want = idx;
  for (int d = 0; d < a.ndim(); ++d) {
    if (std::find(axes_.begin(), axes_.end(), d) != axes_.end())
      want.push_back(1);
    else
      want.push_back(a.shape()[d]);
  }
  for (int ax : axes_)
    if (ax < 0 || ax >= a.ndim()) throw std::invalid_argument("[scatter] axis out of range");
  if (u.shape() != want)
    throw std::invalid_argument(fmt::format(
        "[scatter] updates must have shape ({}) (the indices' shape, then a slice of a with "
        "size 1 on the indexed axes); got ({})",
        fmt::join(want, ","), fmt::join(u.shape(), ",")));
  return {a.shape()};
}

PrimitiveState Scatter::state() const {
  PrimitiveState s(1);
  s.set("op", op_).set("axes", std::vector<int64_t>(axes_.begin(), axes_.end()));
  return s;
}

void Scatter::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  const Array& a = inputs.at(0);
  if (inputs.at(1).dtype() != a.dtype()) throw std::invalid_argument("[scatter] dtype mismatch");
  if (outputs.at(0).size() == 0) {
    allocate_output(outputs[0]);
    return;
  }
  std::vector<Dtype> idt;
  std::vector<Array> in{a, at_least_1d_alias(inputs[1])};
  for (size_t k = 2; k < inputs.size(); ++k) {
    idt.push_back(inputs[k].dtype());
    in.push_back(at_least_1d_alias(inputs[k]));
  }
  int64_t Q = 1;
  for (int ax : axes_) Q *= a.shape()[ax];
  int64_t rest = a.size() / Q, chunks = (Q + kScatterChunk - 1) / kScatterChunk;
  run_kernel(scatter_kernel(op_, a.dtype(), idt, a.ndim(), axes_), in, outputs, rest, gpu, chunks);
}

// scatter / scatter_add: d updates is the cotangent gathered at the indices (the updates' own
// shape); d a is the cotangent (add) or the cotangent with zeros where updates went (scatter:
// those elements were overwritten). Repeated indices: as MLX, every update gets its gathered
// cotangent. Indices have no gradient.
std::vector<Array> Scatter::vjp(const std::vector<Array>& primals,
                                const std::vector<Array>& cotangents,
                                const std::vector<int>& argnums, const std::vector<Array>&) {
  const Array &a = primals.at(0), &u = primals.at(1);
  const Array& g = cotangents.at(0);
  StreamContext on(g.device());
  std::vector<Array> idx(primals.begin() + 2, primals.end());
  Shape slice_sizes = a.shape();
  for (int ax : axes_) slice_sizes[ax] = 1;
  std::vector<Array> out;
  for (int k : argnums) {
    if (k >= 2) throw std::invalid_argument("[scatter] indices have no gradient");
    if (k == 1)
      out.push_back(reshape(gather(g, idx, axes_, slice_sizes), u.shape()));
    else
      out.push_back(op_ == "add" ? g : scatter(g, idx, zeros_like(u), axes_));
  }
  return out;
}

std::vector<Array> Scatter::jvp(const std::vector<Array>& primals,
                                const std::vector<Array>& tangents,
                                const std::vector<int>& argnums) {
  const Array &a = primals.at(0), &u = primals.at(1);
  StreamContext on(a.device());
  std::vector<Array> idx(primals.begin() + 2, primals.end());
  Array ta = zeros_like(a), tu = zeros_like(u);
  for (size_t n = 0; n < argnums.size(); ++n) {
    if (argnums[n] >= 2) throw std::invalid_argument("[scatter] indices have no gradient");
    (argnums[n] == 0 ? ta : tu) = tangents.at(n);
  }
  return {op_ == "add" ? scatter_add(ta, idx, tu, axes_) : scatter(ta, idx, tu, axes_)};
}

// ---- SliceUpdate -------------------------------------------------------------------------------

SliceUpdate::SliceUpdate(Shape start, Shape stop, Shape strides)
    : start_(std::move(start)), stop_(std::move(stop)), strides_(std::move(strides)) {
  if (start_.size() != stop_.size() || start_.size() != strides_.size())
    throw std::invalid_argument("[slice_update] start, stop and strides must have one length");
  for (auto st : strides_)
    if (st == 0) throw std::invalid_argument("[slice_update] strides must be non-zero");
}

Shape SliceUpdate::counts() const {
  Shape c;
  for (size_t d = 0; d < start_.size(); ++d) {
    int64_t st = strides_[d];
    int64_t n =
        st > 0 ? (stop_[d] - start_[d] + st - 1) / st : (start_[d] - stop_[d] - st - 1) / -st;
    c.push_back(std::max<int64_t>(n, 0));
  }
  return c;
}

std::vector<Shape> SliceUpdate::output_shapes(const std::vector<Array>& inputs) const {
  const Array &src = inputs.at(0), &upd = inputs.at(1);
  if (static_cast<int>(start_.size()) != src.ndim())
    throw std::invalid_argument("[slice_update] one start/stop/stride per dimension is needed");
  if (upd.shape() != counts())
    throw std::invalid_argument(
        fmt::format("[slice_update] the update must have shape ({})", fmt::join(counts(), ",")));
  return {src.shape()};
}

PrimitiveState SliceUpdate::state() const {
  PrimitiveState s(1);
  s.set("start", start_).set("stop", stop_).set("strides", strides_);
  return s;
}

void SliceUpdate::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  const Array &src = inputs.at(0), &upd = inputs.at(1);
  if (upd.dtype() != src.dtype()) throw std::invalid_argument("[slice_update] dtype mismatch");
  if (outputs.at(0).size() == 0) {
    allocate_output(outputs[0]);
    return;
  }
  std::vector<int64_t> p = start_;
  p.insert(p.end(), strides_.begin(), strides_.end());
  // Nothing to write: src stands in for the update and the region starts past the end.
  Array u = upd.size() == 0 ? src : upd;
  if (upd.size() == 0)
    for (int d = 0; d < src.ndim(); ++d) p[src.ndim() + d] = 1, p[d] = src.shape()[d];
  run_kernel(slice_update_kernel(src.dtype(), src.ndim()), {src, u, param_array(p)}, outputs,
             outputs[0].size(), gpu);
}

std::vector<Array> SliceUpdate::vjp(const std::vector<Array>& primals,
                                    const std::vector<Array>& cotangents,
                                    const std::vector<int>& argnums, const std::vector<Array>&) {
  const Array& g = cotangents.at(0);
  std::vector<Array> out;
  for (int k : argnums) {
    if (k == 0) {
      out.push_back(
          slice_update(g, zeros(counts(), g.dtype(), g.device()), start_, stop_, strides_));
    } else {
      // The updated region of g, as a strided view.
      Shape c = counts();
      Strides st;
      int64_t off = 0;
      Array gc = g.contiguous();
      Strides base = row_major_strides(g.shape());
      bool empty = false;
      for (size_t d = 0; d < c.size(); ++d) {
        st.push_back(base[d] * strides_[d]);
        empty |= c[d] == 0;
        off += start_[d] * base[d];
      }
      out.push_back(empty ? zeros(c, g.dtype(), g.device()) : gc.as_strided(c, st, off));
    }
  }
  (void)primals;
  return out;
}

// ---- registry ----------------------------------------------------------------------------------

namespace {
std::vector<int> ints(const std::vector<int64_t>& v) {
  return {v.begin(), v.end()};
}
void check_version(const PrimitiveState& s, const char* name) {
  if (s.version() != 1) throw std::invalid_argument(std::string(name) + " state version must be 1");
}
}  // namespace

ALLOY_REGISTER_PRIMITIVE(Gather, [](const PrimitiveState& s) {
  check_version(s, "Gather");
  return std::make_shared<Gather>(ints(s.get_as<std::vector<int64_t>>("axes")),
                                  s.get_as<std::vector<int64_t>>("slice_sizes"));
})
ALLOY_REGISTER_PRIMITIVE(GatherAxis, [](const PrimitiveState& s) {
  check_version(s, "GatherAxis");
  return std::make_shared<GatherAxis>(static_cast<int>(s.get_int("axis")));
})
ALLOY_REGISTER_PRIMITIVE(ScatterAxis, [](const PrimitiveState& s) {
  check_version(s, "ScatterAxis");
  return std::make_shared<ScatterAxis>(static_cast<int>(s.get_int("axis")));
})
ALLOY_REGISTER_PRIMITIVE(Scatter, [](const PrimitiveState& s) {
  check_version(s, "Scatter");
  return std::make_shared<Scatter>(s.get_string("op"),
                                   ints(s.get_as<std::vector<int64_t>>("axes")));
})
ALLOY_REGISTER_PRIMITIVE(SliceUpdate, [](const PrimitiveState& s) {
  check_version(s, "SliceUpdate");
  return std::make_shared<SliceUpdate>(s.get_as<std::vector<int64_t>>("start"),
                                       s.get_as<std::vector<int64_t>>("stop"),
                                       s.get_as<std::vector<int64_t>>("strides"));
})

}  // namespace alloy::ops

// ---- public ops --------------------------------------------------------------------------------

namespace alloy {

using ops::normalize_op_axes;
using ops::resolve_device;
using ops::resolve_stream;
using ops::to_op_device;

namespace {

void check_handle(const Array& a, const char* op) {
  if (!a.valid()) throw std::invalid_argument(fmt::format("[{}] an input is an empty handle", op));
}

// Index arrays broadcast to one shape, on device d.
std::vector<Array> broadcast_indices(const std::vector<Array>& indices, Device d, const char* op) {
  Shape s;
  for (auto& i : indices) {
    check_handle(i, op);
    ops::check_index_dtype(i, op);
    s = broadcast_shapes(s, i.shape());
  }
  std::vector<Array> out;
  for (auto& i : indices) out.push_back(broadcast_to(to_op_device(i, d), s));
  return out;
}

// Python-style normalisation of one slice bound (start or stop) for a dimension of size n.
int64_t clamp_bound(int64_t v, int64_t n, int64_t step) {
  if (v < 0) v += n;
  return step > 0 ? std::clamp<int64_t>(v, 0, n) : std::clamp<int64_t>(v, -1, n - 1);
}

// Where a creation op (no array input) runs: the given device, else the default one.
Device creation_device(const StreamOrDevice& s) {
  if (auto* st = std::get_if<Stream>(&s)) return st->device;
  if (auto* d = std::get_if<Device>(&s)) return *d;
  return default_device();
}

}  // namespace

Array gather(const Array& a, const std::vector<Array>& indices, const std::vector<int>& axes,
             const Shape& slice_sizes, StreamOrDevice s) {
  check_handle(a, "gather");
  if (indices.size() != axes.size())
    throw std::invalid_argument("[gather] one index array per axis is needed");
  if (a.ndim() == 0) throw std::invalid_argument("[gather] cannot gather from a 0-d array");
  std::vector<int> ax;
  for (int x : axes) ax.push_back(normalize_op_axes(a, {x}, "gather")[0]);
  Device d = resolve_device({a}, s);
  ops::check_op_dtype(d, a.dtype(), "gather");
  std::vector<Array> in{to_op_device(a, d)};
  for (auto& i : broadcast_indices(indices, d, "gather")) in.push_back(i);
  auto prim = std::make_shared<ops::Gather>(ax, slice_sizes);
  Shape shape = prim->output_shapes(in)[0];
  return make_pending(prim, std::move(in), {shape}, {a.dtype()}, resolve_stream(d, s))[0];
}

Array take(const Array& a, const Array& indices, int axis, StreamOrDevice s) {
  check_handle(a, "take");
  check_handle(indices, "take");
  if (a.ndim() == 0) throw std::invalid_argument("[take] cannot index a 0-d array");
  axis = normalize_op_axes(a, {axis}, "take")[0];
  if (a.shape()[axis] == 0 && indices.size() > 0)
    throw std::invalid_argument("[take] cannot take from an empty axis");
  Shape ss = a.shape();
  ss[axis] = 1;
  Array g = gather(a, {indices}, {axis}, ss, s);
  int ni = indices.ndim();
  // g: I + a.shape (1 at axis) -> a.shape[:axis] + I + a.shape[axis+1:].
  g = squeeze(g, {ni + axis}, s);
  std::vector<int> perm;
  for (int d = 0; d < axis; ++d) perm.push_back(ni + d);
  for (int d = 0; d < ni; ++d) perm.push_back(d);
  for (int d = axis + 1; d < a.ndim(); ++d) perm.push_back(ni + d - 1);
  bool identity = true;
  for (size_t j = 0; j < perm.size(); ++j) identity &= perm[j] == static_cast<int>(j);
  return identity ? g : transpose(g, perm, s);
}

Array take(const Array& a, const Array& indices, StreamOrDevice s) {
  check_handle(a, "take");
  return take(reshape(a, {-1}, s), indices, 0, s);
}

Array take(const Array& a, int index, int axis, StreamOrDevice s) {
  return take(a, Array::from_doubles({static_cast<double>(index)}, {}, Dtype::int32, Device::cpu()),
              axis, s);
}

Array take_along_axis(const Array& a, const Array& indices, int axis, StreamOrDevice s) {
  check_handle(a, "take_along_axis");
  check_handle(indices, "take_along_axis");
  ops::check_index_dtype(indices, "take_along_axis");
  if (a.ndim() != indices.ndim() || a.ndim() == 0)
    throw std::invalid_argument(fmt::format(
        "[take_along_axis] indices of rank {} for an array of rank {} (they must match)",
        indices.ndim(), a.ndim()));
  axis = normalize_op_axes(a, {axis}, "take_along_axis")[0];
  Shape as = a.shape(), is = indices.shape();
  as[axis] = 1;
  is[axis] = 1;
  Shape b = broadcast_shapes(as, is);
  Shape at = b, it = b;
  at[axis] = a.shape()[axis];
  it[axis] = indices.shape()[axis];
  Device d = resolve_device({a}, s);
  ops::check_op_dtype(d, a.dtype(), "take_along_axis");
  Array x = broadcast_to(to_op_device(a, d), at);
  Array i = broadcast_to(to_op_device(indices, d), it);
  if (x.shape()[axis] == 0 && i.size() > 0)
    throw std::invalid_argument("[take_along_axis] cannot take from an empty axis");
  return make_pending(std::make_shared<ops::GatherAxis>(axis), {x, i}, {it}, {a.dtype()},
                      resolve_stream(d, s))[0];
}

Array take_along_axis(const Array& a, const Array& indices, StreamOrDevice s) {
  return take_along_axis(reshape(a, {-1}, s), reshape(indices, {-1}, s), 0, s);
}

Array put_along_axis(const Array& a, const Array& indices, const Array& values, int axis,
                     StreamOrDevice s) {
  check_handle(a, "put_along_axis");
  check_handle(indices, "put_along_axis");
  check_handle(values, "put_along_axis");
  ops::check_index_dtype(indices, "put_along_axis");
  if (a.ndim() != indices.ndim() || a.ndim() == 0)
    throw std::invalid_argument("[put_along_axis] indices must have a's rank");
  axis = normalize_op_axes(a, {axis}, "put_along_axis")[0];
  Shape it = a.shape();
  it[axis] = indices.shape()[axis];
  Device d = resolve_device({a}, s);
  ops::check_op_dtype(d, a.dtype(), "put_along_axis");
  Array x = to_op_device(a, d);
  Array i = broadcast_to(to_op_device(indices, d), it);
  Array v = broadcast_to(astype(to_op_device(values, d), a.dtype()), it);
  return make_pending(std::make_shared<ops::ScatterAxis>(axis), {x, i, v}, {a.shape()}, {a.dtype()},
                      resolve_stream(d, s))[0];
}

namespace {
Array scatter_op(const char* name, const char* op, const Array& a,
                 const std::vector<Array>& indices, const Array& updates,
                 const std::vector<int>& axes, StreamOrDevice s) {
  check_handle(a, name);
  check_handle(updates, name);
  if (indices.size() != axes.size() || axes.empty())
    throw std::invalid_argument(fmt::format("[{}] one index array per axis is needed", name));
  if (a.ndim() == 0) throw std::invalid_argument(fmt::format("[{}] a must not be 0-d", name));
  std::vector<int> ax;
  for (int x : axes) ax.push_back(normalize_op_axes(a, {x}, name)[0]);
  Device d = resolve_device({a}, s);
  ops::check_op_dtype(d, a.dtype(), name);
  auto idx = broadcast_indices(indices, d, name);
  Shape want = idx[0].shape();
  for (int dd = 0; dd < a.ndim(); ++dd)
    want.push_back(std::find(ax.begin(), ax.end(), dd) != ax.end() ? 1 : a.shape()[dd]);
  Array u = astype(to_op_device(updates, d), a.dtype());
  if (u.shape() != want) {
    try {
      u = broadcast_to(u, want);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(
          fmt::format("[{}] updates of shape ({}) do not broadcast to ({}) (the indices' shape, "
                      "then a's shape with 1 on the indexed axes)",
                      name, fmt::join(updates.shape(), ","), fmt::join(want, ",")));
    }
  }
  std::vector<Array> in{to_op_device(a, d), u};
  for (auto& i : idx) in.push_back(i);
  return make_pending(std::make_shared<ops::Scatter>(op, ax), std::move(in), {a.shape()},
                      {a.dtype()}, resolve_stream(d, s))[0];
}
}  // namespace

Array scatter(const Array& a, const std::vector<Array>& indices, const Array& updates,
              const std::vector<int>& axes, StreamOrDevice s) {
  return scatter_op("scatter", "none", a, indices, updates, axes, s);
}

Array scatter_add(const Array& a, const std::vector<Array>& indices, const Array& updates,
                  const std::vector<int>& axes, StreamOrDevice s) {
  return scatter_op("scatter_add", "add", a, indices, updates, axes, s);
}

Array slice_update(const Array& src, const Array& update, Shape start, Shape stop, Shape strides,
                   StreamOrDevice s) {
  check_handle(src, "slice_update");
  check_handle(update, "slice_update");
  int nd = src.ndim();
  if (strides.empty()) strides.assign(start.size(), 1);
  if (static_cast<int>(start.size()) != nd || static_cast<int>(stop.size()) != nd ||
      static_cast<int>(strides.size()) != nd)
    throw std::invalid_argument("[slice_update] one start, stop and stride per dimension");
  Device d = resolve_device({src}, s);
  ops::check_op_dtype(d, src.dtype(), "slice_update");
  Array x = to_op_device(src, d);
  Array u = astype(to_op_device(update, d), src.dtype());
  if (nd == 0) return broadcast_to(u, {});
  for (int i = 0; i < nd; ++i) {
    if (strides[i] == 0) throw std::invalid_argument("[slice_update] strides must be non-zero");
    start[i] = clamp_bound(start[i], src.shape()[i], strides[i]);
    stop[i] = clamp_bound(stop[i], src.shape()[i], strides[i]);
  }
  auto prim = std::make_shared<ops::SliceUpdate>(start, stop, strides);
  Shape c = prim->counts();
  if (u.shape() != c) u = broadcast_to(u, c);
  return make_pending(prim, {x, u}, {src.shape()}, {src.dtype()}, resolve_stream(d, s))[0];
}

Array slice_update(const Array& src, const Array& update, Shape start, Shape stop,
                   StreamOrDevice s) {
  return slice_update(src, update, std::move(start), std::move(stop), {}, s);
}

std::vector<Array> split(const Array& a, const Shape& indices, int axis, StreamOrDevice s) {
  check_handle(a, "split");
  axis = normalize_op_axes(a, {axis}, "split")[0];
  int64_t n = a.shape()[axis];
  std::vector<Array> out;
  int64_t prev = 0;
  auto piece = [&](int64_t lo, int64_t hi) {
    Shape st(a.ndim(), 0), sp = a.shape();
    lo = std::clamp<int64_t>(lo < 0 ? lo + n : lo, 0, n);
    hi = std::clamp<int64_t>(hi < 0 ? hi + n : hi, 0, n);
    st[axis] = lo;
    sp[axis] = std::max(lo, hi);
    out.push_back(slice(a, st, sp, {}, s));
  };
  for (int64_t i : indices) {
    piece(prev, i);
    prev = i;
  }
  piece(prev, n);
  return out;
}

std::vector<Array> split(const Array& a, int num_splits, int axis, StreamOrDevice s) {
  check_handle(a, "split");
  axis = normalize_op_axes(a, {axis}, "split")[0];
  int64_t n = a.shape()[axis];
  if (num_splits <= 0 || n % num_splits != 0)
    throw std::invalid_argument(fmt::format(
        "[split] an axis of size {} cannot be split into {} equal parts", n, num_splits));
  Shape idx;
  for (int i = 1; i < num_splits; ++i) idx.push_back(n / num_splits * i);
  return split(a, idx, axis, s);
}

Array tri(int n, int m, int k, Dtype dtype, StreamOrDevice s) {
  if (n < 0 || m < 0) throw std::invalid_argument("[tri] n and m must be non-negative");
  Device dev = creation_device(s);
  Array r = reshape(arange(0, n, 1, Dtype::int32, dev), {n, 1});
  Array c = reshape(arange(0, m, 1, Dtype::int32, dev), {1, m});
  return astype(greater_equal(add(r, scalar_like(k, r, true)), c, s), dtype, s);
}

Array tri(int n, Dtype dtype, StreamOrDevice s) {
  return tri(n, n, 0, dtype, s);
}

Array eye(int n, int m, int k, Dtype dtype, StreamOrDevice s) {
  if (n < 0 || m < 0) throw std::invalid_argument("[eye] n and m must be non-negative");
  Device dev = creation_device(s);
  Array r = reshape(arange(0, n, 1, Dtype::int32, dev), {n, 1});
  Array c = reshape(arange(0, m, 1, Dtype::int32, dev), {1, m});
  return astype(equal(add(r, scalar_like(k, r, true)), c, s), dtype, s);
}

Array eye(int n, Dtype dtype, StreamOrDevice s) {
  return eye(n, n, 0, dtype, s);
}

Array identity(int n, Dtype dtype, StreamOrDevice s) {
  return eye(n, n, 0, dtype, s);
}

Array tril(const Array& x, int k, StreamOrDevice s) {
  check_handle(x, "tril");
  if (x.ndim() < 2) throw std::invalid_argument("[tril] the array must have 2 or more dimensions");
  Device d = resolve_device({x}, s);
  Array mask = tri(static_cast<int>(x.shape()[x.ndim() - 2]),
                   static_cast<int>(x.shape()[x.ndim() - 1]), k, Dtype::bool_, d);
  return where(mask, x, zeros_like(x, d), s);
}

Array triu(const Array& x, int k, StreamOrDevice s) {
  check_handle(x, "triu");
  if (x.ndim() < 2) throw std::invalid_argument("[triu] the array must have 2 or more dimensions");
  Device d = resolve_device({x}, s);
  Array mask = tri(static_cast<int>(x.shape()[x.ndim() - 2]),
                   static_cast<int>(x.shape()[x.ndim() - 1]), k - 1, Dtype::bool_, d);
  return where(mask, zeros_like(x, d), x, s);
}

}  // namespace alloy
