// Gradient rules of the core's views and moves that need the ops (see grad.h), and jvps that the
// primitives do not define. Every rule builds ordinary lazy graphs: nothing is evaluated.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "alloy/errors.h"
#include "alloy/kernel.h"
#include "alloy/ops.h"
#include "transforms/grad.h"

namespace alloy::transforms {

Array zeros_of(const Shape& shape, Dtype dtype, Device device) {
  return zeros({}, dtype, device).broadcast_to(shape);
}

namespace {

using Ints = std::vector<int64_t>;

// `g` (of `count` entries along `axis`) placed at positions start, start + step, ... of an axis
// of `dim` entries, zeros elsewhere: the adjoint of one axis of a strided slice. Built from
// views, concatenate and reshape (no scatter needed).
Array place_along(Array g, int axis, int64_t dim, int64_t start, int64_t step, int64_t count) {
  if (step < 0) {  // descending positions: reverse g, then place it ascending
    std::vector<alloy::Slice> rev(axis + 1);
    rev[axis].step = -1;
    g = g.slice(rev);
    start += (count - 1) * step;
    step = -step;
  }
  Dtype t = g.dtype();
  Device d = g.device();
  if (step > 1 && count > 1) {
    // Interleave step - 1 zeros after each entry: (.., count, 1, ..) ++ (.., count, step-1, ..)
    // along a new axis, flattened back into `axis`, then the trailing zeros cut.
    Array e = expand_dims(g, axis + 1);
    Shape zs = e.shape();
    zs[axis + 1] = step - 1;
    e = concatenate({e, zeros_of(zs, t, d)}, axis + 1);
    Shape rs = g.shape();
    rs[axis] = count * step;
    Shape lo(rs.size(), 0), hi = rs;
    hi[axis] = (count - 1) * step + 1;
    g = slice(reshape(e, rs), lo, hi);
  }
  int64_t len = (count - 1) * step + 1;
  std::vector<Array> parts;
  auto zeros_part = [&](int64_t n) {
    Shape s = g.shape();
    s[axis] = n;
    parts.push_back(zeros_of(s, t, d));
  };
  if (start > 0) zeros_part(start);
  parts.push_back(g);
  if (dim - start - len > 0) zeros_part(dim - start - len);
  return parts.size() == 1 ? g : concatenate(parts, axis);
}

// The vjp of Slice: the cotangent placed into zeros of the input's shape, axis by axis. The
// slice's stored start is clamped as SliceView::layout clamps it; the cotangent's extent is the
// count of taken entries (the stop is implied).
Array slice_vjp(const PrimitiveState& st, const Array& x, const Array& cot) {
  const auto& starts = st.get_as<Ints>("starts");
  const auto& steps = st.get_as<Ints>("steps");
  if (cot.size() == 0) return zeros_of(x.shape(), cot.dtype(), cot.device());
  Array g = cot;
  for (int ax = 0; ax < x.ndim(); ++ax) {
    int64_t dim = x.shape()[ax], step = steps[ax];
    int64_t start = std::clamp<int64_t>(starts[ax], step > 0 ? 0 : -1, step > 0 ? dim : dim - 1);
    int64_t count = cot.shape()[ax];
    if (step == 1 && start == 0 && count == dim) continue;
    g = place_along(g, ax, dim, start, step, count);
  }
  return g;
}

// The vjp of Broadcast: the cotangent summed over the axes the broadcast added or stretched.
Array broadcast_vjp(const Shape& in, const Array& cot) {
  const Shape& out = cot.shape();
  int lead = static_cast<int>(out.size() - in.size());
  std::vector<int> axes;
  for (int i = 0; i < static_cast<int>(out.size()); ++i)
    if (i < lead || (in[i - lead] == 1 && out[i] != 1)) axes.push_back(i);
  Array g = axes.empty() ? cot : sum(cot, axes, true);
  return g.shape() == in ? g : reshape(g, in);
}

// ---- AsStrided ----
// An as_strided view reads memory by offsets from its input's element 0, so its rules go through
// index tables computed on the host from the layouts alone (no values): `view_to_input` gives,
// for each element of the view, the input element it reads. The jvp gathers the tangent through
// that table; the vjp gathers the cotangent through its inverse, which exists when the view does
// not read an element twice (an overlapping view's adjoint is a scatter-add: not supported).

// The logical (row-major) index of the input element each view element reads; -1 where the view
// reads memory that holds none of the input's elements.
std::vector<int64_t> view_to_input(const PrimitiveState& st, const Array& in) {
  const auto& shape = st.get_as<Ints>("shape");
  const auto& strides = st.get_as<Ints>("strides");
  int64_t offset = st.get_int("offset");
  bool row_major = in.strides() == row_major_strides(in.shape());
  std::unordered_map<int64_t, int64_t> where;  // input element's position -> its index
  if (!row_major) {
    Shape idx(in.ndim(), 0);
    for (int64_t j = 0; j < in.size(); ++j) {
      int64_t pos = 0;
      for (int k = 0; k < in.ndim(); ++k) pos += idx[k] * in.strides()[k];
      where.emplace(pos, j);  // aliased elements (stride 0): the first
      for (int k = in.ndim() - 1; k >= 0 && ++idx[k] == in.shape()[k]; --k) idx[k] = 0;
    }
  }
  int64_t n = checked_numel(shape);
  std::vector<int64_t> table(n);
  Shape idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t pos = offset;
    for (size_t k = 0; k < shape.size(); ++k) pos += idx[k] * strides[k];
    if (row_major) {
      table[i] = pos >= 0 && pos < in.size() ? pos : -1;
    } else {
      auto it = where.find(pos);
      table[i] = it != where.end() ? it->second : -1;
    }
    for (int k = static_cast<int>(shape.size()) - 1; k >= 0 && ++idx[k] == shape[k]; --k)
      idx[k] = 0;
  }
  return table;
}

// out[i] = src[table[i]] (row-major), 0 where table[i] < 0: a small Metal kernel, run like any
// other (CPU or GPU; float64 on the CPU).
Array gather(const Array& src, const std::vector<int64_t>& table, const Shape& shape) {
  static const MetalKernel kernel = metal_kernel("alloy_grad_gather", {"src", "index"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    int64_t k = index[i];
    out[i] = k >= 0 ? src[k] : T(0);
)");
  int64_t n = static_cast<int64_t>(table.size());
  if (n == 0) return zeros_of(shape, src.dtype(), src.device());
  if (n > INT32_MAX)
    throw NotSupported("AsStrided",
                       "not supported: gradients of as_strided views of 2^31 or "
                       "more elements");
  Array index = Array::from_vector(table, {n}, Dtype::int64, src.device());
  int threads = static_cast<int>(n);
  return kernel({src, index}, {shape}, {src.dtype()}, {threads, 1, 1}, {256, 1, 1},
                {{"T", src.dtype()}}, std::nullopt, false, src.device())[0];
}

// Whether an AsStrided view of `in` only adds or drops dimensions of size 1 (expand_dims and
// squeeze make such views): the same elements in the same order, so a reshape is its rule.
bool only_unit_dims(const PrimitiveState& st, const Array& in) {
  if (st.get_int("offset") != 0) return false;
  auto squeezed = [](const Shape& shape, const Strides& strides) {
    std::vector<std::pair<int64_t, int64_t>> v;
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] != 1) v.emplace_back(shape[i], strides[i]);
    return v;
  };
  return squeezed(st.get_as<Ints>("shape"), st.get_as<Ints>("strides")) ==
         squeezed(in.shape(), in.strides());
}

Array as_strided_vjp(const PrimitiveState& st, const Array& in, const Array& cot) {
  if (only_unit_dims(st, in)) return reshape(cot, in.shape());
  std::vector<int64_t> table = view_to_input(st, in);
  std::vector<int64_t> inverse(in.size(), -1);
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i] < 0) continue;
    if (inverse[table[i]] >= 0)
      throw NotSupported("AsStrided",
                         "not supported: the gradient of an as_strided view that reads an "
                         "element more than once (its adjoint is a scatter-add)");
    inverse[table[i]] = static_cast<int64_t>(i);
  }
  return gather(cot, inverse, in.shape());
}

}  // namespace

std::optional<std::vector<Array>> core_vjp(const PendingOp& op, const std::vector<Array>& inputs,
                                           const std::vector<Array>& cot, const std::vector<int>&) {
  std::string n = op.primitive->name();
  if (n == "Broadcast") return std::vector<Array>{broadcast_vjp(inputs.at(0).shape(), cot.at(0))};
  if (n == "Slice")
    return std::vector<Array>{slice_vjp(op.primitive->state(), inputs.at(0), cot.at(0))};
  if (n == "AsType") return std::vector<Array>{cot.at(0).astype(inputs.at(0).dtype())};
  if (n == "ToDevice") return std::vector<Array>{cot.at(0).to(inputs.at(0).device())};
  if (n == "AsStrided")
    return std::vector<Array>{as_strided_vjp(op.primitive->state(), inputs.at(0), cot.at(0))};
  return std::nullopt;
}

std::optional<std::vector<Array>> core_jvp(const std::shared_ptr<PendingOp>& op,
                                           const std::vector<Array>& inputs,
                                           const std::vector<Array>& tangents,
                                           const std::vector<int>& argnums) {
  std::string n = op->primitive->name();
  if (n == "Slice" || n == "Transpose" || n == "Broadcast") {
    // Linear views whose layout is relative to their input's: the same view of the tangent.
    auto* v = static_cast<ViewPrimitive*>(op->primitive.get());
    const Array& t = tangents.at(0);
    return std::vector<Array>{make_pending_view(op->primitive, t, v->layout(t))};
  }
  if (n == "Reshape") return std::vector<Array>{tangents.at(0).reshape(op->shapes.at(0))};
  if (n == "AsStrided") {
    const Array& in = inputs.at(0);
    if (only_unit_dims(op->primitive->state(), in))
      return std::vector<Array>{reshape(tangents.at(0), op->shapes.at(0))};
    return std::vector<Array>{
        gather(tangents.at(0), view_to_input(op->primitive->state(), in), op->shapes.at(0))};
  }
  if (n == "Copy") return std::vector<Array>{tangents.at(0)};
  if (n == "AsType") return std::vector<Array>{tangents.at(0).astype(op->dtypes.at(0))};
  if (n == "ToDevice") return std::vector<Array>{tangents.at(0).to(op->device)};
  if (n == "Concatenate") {
    std::vector<Array> parts;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto it = std::find(argnums.begin(), argnums.end(), static_cast<int>(i));
      parts.push_back(it != argnums.end()
                          ? tangents[it - argnums.begin()]
                          : zeros_of(inputs[i].shape(), op->dtypes.at(0), inputs[i].device()));
    }
    return std::vector<Array>{
        concatenate(parts, static_cast<int>(op->primitive->state().get_int("axis")))};
  }
  return std::nullopt;
}

}  // namespace alloy::transforms
