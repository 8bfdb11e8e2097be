// Gradient rules of the core's views and moves that need the ops (see grad.h), and jvps that the
// primitives do not define. Every rule builds ordinary lazy graphs: nothing is evaluated.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "alloy/errors.h"
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

// Whether an AsStrided view of `in` only adds or drops dimensions of size 1 (expand_dims and
// squeeze are such views): the same elements in the same order, so a reshape is its adjoint.
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

}  // namespace

std::optional<std::vector<Array>> core_vjp(const PendingOp& op, const std::vector<Array>& inputs,
                                           const std::vector<Array>& cot, const std::vector<int>&) {
  std::string n = op.primitive->name();
  if (n == "Broadcast") return std::vector<Array>{broadcast_vjp(inputs.at(0).shape(), cot.at(0))};
  if (n == "Slice")
    return std::vector<Array>{slice_vjp(op.primitive->state(), inputs.at(0), cot.at(0))};
  if (n == "AsType") return std::vector<Array>{cot.at(0).astype(inputs.at(0).dtype())};
  if (n == "ToDevice") return std::vector<Array>{cot.at(0).to(inputs.at(0).device())};
  if (n == "AsStrided") {
    if (only_unit_dims(op.primitive->state(), inputs.at(0)))
      return std::vector<Array>{reshape(cot.at(0), inputs.at(0).shape())};
    throw NotSupported("AsStrided",
                       "not supported: no gradient for as_strided views other than expand_dims / "
                       "squeeze (a general view may overlap itself: its adjoint is a "
                       "scatter-add); use slices, reshapes and transposes instead");
  }
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
  if (n == "AsStrided" && only_unit_dims(op->primitive->state(), inputs.at(0)))
    return std::vector<Array>{reshape(tangents.at(0), op->shapes.at(0))};
  if (n == "AsStrided") {
    // Strides are in elements of the input's buffer: the same view of a row-contiguous tangent
    // means the same thing only when the input is row-contiguous too.
    if (!inputs.at(0).is_row_contiguous())
      throw NotSupported("AsStrided",
                         "not supported: jvp of as_strided over an input that is not "
                         "row-contiguous");
    auto* v = static_cast<ViewPrimitive*>(op->primitive.get());
    Array t = tangents.at(0).contiguous();
    return std::vector<Array>{make_pending_view(op->primitive, t, v->layout(t))};
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
