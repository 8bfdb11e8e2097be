#include "core/primitives.h"

#include <algorithm>
#include <stdexcept>

#include "alloy/errors.h"

namespace alloy {

// ---- views -----------------------------------------------------------------------------------

std::vector<Shape> ViewPrimitive::output_shapes(const std::vector<Array>& inputs) const {
  return {layout(inputs.at(0)).shape};
}

void ViewPrimitive::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  set_view(outputs[0], inputs[0]);
}

void ViewPrimitive::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  set_view(outputs[0], inputs[0]);
}

SliceView::SliceView(std::vector<int64_t> starts, std::vector<int64_t> stops,
                     std::vector<int64_t> steps)
    : starts_(std::move(starts)), stops_(std::move(stops)), steps_(std::move(steps)) {
  if (starts_.size() != stops_.size() || starts_.size() != steps_.size())
    throw std::invalid_argument("Slice: starts, stops and steps differ in length");
  for (auto s : steps_)
    if (s == 0) throw std::invalid_argument("slice: step cannot be zero");
}

std::shared_ptr<SliceView> SliceView::from_slices(const Shape& shape,
                                                  const std::vector<alloy::Slice>& sl) {
  if (sl.size() > shape.size()) throw std::invalid_argument("slice: more slices than dimensions");
  std::vector<int64_t> starts, stops, steps;
  bool from_shape = false;  // a bound made from the dimension: negative, or clamped to it
  for (size_t ax = 0; ax < shape.size(); ++ax) {
    alloy::Slice s = ax < sl.size() ? sl[ax] : alloy::Slice{};
    if (s.step == 0) throw std::invalid_argument("slice: step cannot be zero");
    int64_t dim = shape[ax];
    for (auto v : {s.start, s.stop}) from_shape |= v && (*v < 0 || *v > dim);
    auto norm = [&](std::optional<int64_t> v, int64_t dflt, int64_t lo, int64_t hi) {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + dim : *v;
      return std::clamp(x, lo, hi);
    };
    // An open end ("to the end") is stored as kOpenEnd, which layout() clamps to the input's
    // extent: a traced slice x[:, ::2] then follows inputs of other shapes (shapeless replay).
    constexpr int64_t kOpenEnd = INT64_MAX;
    int64_t start, stop;
    if (s.step > 0) {
      start = norm(s.start, 0, 0, dim);
      stop = s.stop ? std::max(start, norm(s.stop, dim, 0, dim)) : kOpenEnd;
    } else {
      start = s.start ? norm(s.start, dim - 1, -1, dim - 1) : kOpenEnd;
      stop = norm(s.stop, -1, -1, dim - 1);
      if (s.stop && *s.stop < -dim) stop = -1;
      stop = std::min(start, stop);
    }
    starts.push_back(start);
    stops.push_back(stop);
    steps.push_back(s.step);
  }
  auto view = std::make_shared<SliceView>(std::move(starts), std::move(stops), std::move(steps));
  view->from_shape_ = from_shape;
  return view;
}

ViewLayout SliceView::layout(const Array& in) const {
  if (starts_.size() != static_cast<size_t>(in.ndim()))
    throw std::invalid_argument("Slice: the input has " + std::to_string(in.ndim()) +
                                " dimensions, the slice " + std::to_string(starts_.size()));
  ViewLayout l{in.shape(), in.strides(), in.offset()};
  for (size_t ax = 0; ax < starts_.size(); ++ax) {
    int64_t start = starts_[ax], stop = stops_[ax], step = steps_[ax], dim = in.shape()[ax];
    // Re-clamp for inputs of another shape (a re-traced graph).
    start = std::clamp<int64_t>(start, step > 0 ? 0 : -1, step > 0 ? dim : dim - 1);
    stop = std::clamp<int64_t>(stop, step > 0 ? 0 : -1, step > 0 ? dim : dim - 1);
    int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                             : (start > stop ? (start - stop - step - 1) / (-step) : 0);
    if (count > 0) l.offset += start * in.strides()[ax];
    l.shape[ax] = count;
    l.strides[ax] = in.strides()[ax] * step;
  }
  return l;
}

PrimitiveState SliceView::state() const {
  PrimitiveState s(1);
  s.set("starts", starts_).set("stops", stops_).set("steps", steps_);
  return s;
}

Transpose::Transpose(std::vector<int64_t> axes) : axes_(std::move(axes)) {
  std::vector<bool> used(axes_.size(), false);
  for (auto a : axes_) {
    if (a < 0 || a >= static_cast<int64_t>(axes_.size()) || used[a])
      throw std::invalid_argument("transpose: axes must list every dimension once");
    used[a] = true;
  }
}

ViewLayout Transpose::layout(const Array& in) const {
  if (axes_.size() != static_cast<size_t>(in.ndim()))
    throw std::invalid_argument("transpose: axes must list every dimension once");
  ViewLayout l{in.shape(), in.strides(), in.offset()};
  for (size_t i = 0; i < axes_.size(); ++i) {
    l.shape[i] = in.shape()[axes_[i]];
    l.strides[i] = in.strides()[axes_[i]];
  }
  return l;
}

PrimitiveState Transpose::state() const {
  PrimitiveState s(1);
  s.set("axes", axes_);
  return s;
}

ViewLayout Reshape::layout(const Array& in) const {
  if (checked_numel(shape_) != in.size())
    throw std::invalid_argument("reshape: cannot reshape an array of " + std::to_string(in.size()) +
                                " elements to a shape of " + std::to_string(checked_numel(shape_)));
  if (!in.is_row_contiguous() && in.size() > 0)
    throw std::invalid_argument("Reshape: the input must be row-contiguous");
  return {shape_, row_major_strides(shape_), in.offset()};
}

PrimitiveState Reshape::state() const {
  PrimitiveState s(1);
  s.set("shape", shape_);
  return s;
}

ViewLayout Broadcast::layout(const Array& in) const {
  int nd = static_cast<int>(shape_.size()), ind = in.ndim();
  if (ind > nd)
    throw std::invalid_argument("broadcast_to: cannot broadcast " + std::to_string(ind) +
                                " dimensions to " + std::to_string(nd));
  ViewLayout l{shape_, Strides(nd, 0), in.offset()};
  for (int i = 0; i < ind; ++i) {
    int64_t d = in.shape()[i], o = shape_[nd - ind + i];
    if (d == o)
      l.strides[nd - ind + i] = in.strides()[i];
    else if (d != 1)
      throw std::invalid_argument("broadcast_to: dimension " + std::to_string(i) + " of size " +
                                  std::to_string(d) + " cannot be broadcast to " +
                                  std::to_string(o));
  }
  checked_numel(shape_);
  return l;
}

PrimitiveState Broadcast::state() const {
  PrimitiveState s(1);
  s.set("shape", shape_);
  if (implicit_) s.set("implicit", true);  // absent: explicit (files written before it existed)
  return s;
}

Array broadcast_view(const Array& x, Shape shape, bool implicit) {
  checked_numel(shape);
  auto prim = std::make_shared<Broadcast>(std::move(shape), implicit);
  return make_pending_view(prim, x, prim->layout(x));
}

ViewLayout AsStrided::layout(const Array& in) const {
  if (shape_.size() != strides_.size())
    throw std::invalid_argument("as_strided: shape and strides differ in length");
  int64_t n = checked_numel(shape_);
  // Elements reachable from the input's element 0 must lie within the input's extent: the
  // input's own span [lo, hi] (relative to its element 0).
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < in.ndim(); ++i) {
    if (in.shape()[i] == 0) continue;
    int64_t r = (in.shape()[i] - 1) * in.strides()[i];
    (r < 0 ? lo : hi) += r;
  }
  if (n > 0) {
    int64_t vlo = offset_, vhi = offset_;
    for (size_t i = 0; i < shape_.size(); ++i) {
      int64_t r = (shape_[i] - 1) * strides_[i];
      (r < 0 ? vlo : vhi) += r;
    }
    if (in.size() == 0 || vlo < lo || vhi > hi)
      throw std::invalid_argument("as_strided: the view reaches outside the input's elements");
  }
  return {shape_, strides_, in.offset() + offset_};
}

PrimitiveState AsStrided::state() const {
  PrimitiveState s(1);
  s.set("shape", shape_).set("strides", strides_).set("offset", offset_);
  return s;
}

// ---- moves -----------------------------------------------------------------------------------

std::vector<Shape> Copy::output_shapes(const std::vector<Array>& inputs) const {
  return {inputs.at(0).shape()};
}

std::vector<Shape> AsType::output_shapes(const std::vector<Array>& inputs) const {
  return {inputs.at(0).shape()};
}

PrimitiveState AsType::state() const {
  PrimitiveState s(1);
  s.set("dtype", std::string(dtype_name(dtype_)));
  return s;
}

std::vector<Shape> ToDevice::output_shapes(const std::vector<Array>& inputs) const {
  return {inputs.at(0).shape()};
}

PrimitiveState ToDevice::state() const {
  PrimitiveState s(1);
  s.set("device", device_.type == Device::Type::gpu ? std::string("gpu") : std::string("cpu"))
      .set("index", static_cast<int64_t>(device_.index));
  return s;
}

// ---- gradients of views ------------------------------------------------------------------------
// The structural views differentiate through other views. The rules that need the ops (Slice,
// Broadcast, AsStrided, AsType, ToDevice, and the views' jvps) are in src/transforms/grad_rules.cpp
// (core sits below ops).

std::vector<Array> Transpose::vjp(const std::vector<Array>&, const std::vector<Array>& cot,
                                  const std::vector<int>&, const std::vector<Array>&) {
  std::vector<int> inverse(axes_.size());
  for (size_t i = 0; i < axes_.size(); ++i) inverse[axes_[i]] = static_cast<int>(i);
  return {cot[0].transpose(inverse)};
}

std::vector<Array> Reshape::vjp(const std::vector<Array>& primals, const std::vector<Array>& cot,
                                const std::vector<int>&, const std::vector<Array>&) {
  return {cot[0].reshape(primals[0].shape())};
}

std::vector<Array> Copy::vjp(const std::vector<Array>&, const std::vector<Array>& cot,
                             const std::vector<int>&, const std::vector<Array>&) {
  return {cot[0]};
}

// ---- registry --------------------------------------------------------------------------------

namespace {
Device device_from_state(const PrimitiveState& s) {
  const std::string& t = s.get_string("device");
  if (t != "cpu" && t != "gpu") throw std::invalid_argument("ToDevice: unknown device '" + t + "'");
  return Device(t == "gpu" ? Device::Type::gpu : Device::Type::cpu,
                static_cast<int>(s.get_int("index")));
}
using Ints = std::vector<int64_t>;
}  // namespace

ALLOY_REGISTER_PRIMITIVE(Slice, [](const PrimitiveState& s) {
  return std::make_shared<SliceView>(s.get_as<Ints>("starts"), s.get_as<Ints>("stops"),
                                     s.get_as<Ints>("steps"));
})
ALLOY_REGISTER_PRIMITIVE(Transpose, [](const PrimitiveState& s) {
  return std::make_shared<Transpose>(s.get_as<Ints>("axes"));
})
ALLOY_REGISTER_PRIMITIVE(Reshape, [](const PrimitiveState& s) {
  return std::make_shared<Reshape>(s.get_as<Ints>("shape"));
})
ALLOY_REGISTER_PRIMITIVE(Broadcast, [](const PrimitiveState& s) {
  return std::make_shared<Broadcast>(s.get_as<Ints>("shape"),
                                     s.has("implicit") && s.get_as<bool>("implicit"));
})
ALLOY_REGISTER_PRIMITIVE(AsStrided, [](const PrimitiveState& s) {
  return std::make_shared<AsStrided>(s.get_as<Ints>("shape"), s.get_as<Ints>("strides"),
                                     s.get_int("offset"));
})
ALLOY_REGISTER_PRIMITIVE(Copy, [](const PrimitiveState&) { return std::make_shared<Copy>(); })
ALLOY_REGISTER_PRIMITIVE(AsType, [](const PrimitiveState& s) {
  return std::make_shared<AsType>(dtype_from_name(s.get_string("dtype")));
})
ALLOY_REGISTER_PRIMITIVE(ToDevice, [](const PrimitiveState& s) {
  return std::make_shared<ToDevice>(device_from_state(s));
})

}  // namespace alloy
