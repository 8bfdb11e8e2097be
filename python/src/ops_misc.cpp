// Python bindings of the scan, indexing and random ops (include/alloy/ops.h): alloy.cumsum ...,
// alloy.take / take_along_axis / put_along_axis / split / eye / tri..., NumPy's advanced indexing
// for a[index_array], MLX's functional a[key] = value (the Python object is rebound to a new graph
// node; other arrays that shared the old value keep it), and the alloy.random submodule.
#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"

namespace alloy::python {

namespace {

StreamOrDevice stream_arg(nb::handle h) {
  if (nb::isinstance<Stream>(h)) return nb::cast<Stream>(h);
  if (auto d = to_device(h, "stream")) return *d;
  return {};
}

Shape shape_of(nb::handle h) {
  if (h.is_none()) return {};
  if (PyLong_Check(h.ptr())) return {nb::cast<int64_t>(h)};
  return nb::cast<Shape>(h);
}

bool is_py_scalar(nb::handle h) {
  PyObject* p = h.ptr();
  return PyBool_Check(p) || PyLong_Check(p) || PyFloat_Check(p);
}

// `value` next to array `like`: a Python scalar is weak (takes like's dtype unless wider).
Array value_like(nb::handle value, const Array& like) {
  if (nb::isinstance<Array>(value)) return nb::cast<Array>(value);
  if (is_py_scalar(value)) {
    PyObject* p = value.ptr();
    if (PyBool_Check(p) && like.dtype() == Dtype::bool_)
      return Array::from_doubles({p == Py_True ? 1.0 : 0.0}, {}, Dtype::bool_, Device::cpu());
    double v = PyFloat_Check(p) ? PyFloat_AsDouble(p) : PyLong_AsDouble(p);
    if (PyErr_Occurred()) throw nb::python_error();
    return scalar_like(v, like, !PyFloat_Check(p));
  }
  return as_input(value);
}

bool is_index_array(nb::handle h) {
  if (nb::isinstance<Array>(h) || nb::isinstance<nb::list>(h)) return true;
  if (PyLong_Check(h.ptr()) || PyBool_Check(h.ptr())) return false;
  if (nb::hasattr(h, "__array__") || nb::hasattr(h, "__dlpack__")) {
    // A NumPy integer scalar (or 0-d integer array) indexes as an integer.
    bool scalar = nb::hasattr(h, "shape") && nb::len(nb::object(h.attr("shape"))) == 0;
    return !(scalar && PyIndex_Check(h.ptr()));
  }
  return false;
}

std::string shape_str(const Shape& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r;
}

// A boolean mask in a key: Python True/False, or an array (alloy, NumPy, list) of bool.
std::optional<Array> bool_mask(nb::handle h) {
  if (PyBool_Check(h.ptr()))
    return Array::from_doubles({h.ptr() == Py_True ? 1.0 : 0.0}, {}, Dtype::bool_, Device::cpu());
  if (!is_index_array(h)) return std::nullopt;
  Array x = as_input(h);
  if (x.dtype() != Dtype::bool_) return std::nullopt;
  return x;
}

Array index_array(nb::handle h) {
  Array x = as_input(h);
  // MLX raises the same ValueError: the result's shape would depend on the mask's values, which
  // a lazy graph does not know (`a[mask] = v` works: a `where`).
  if (x.dtype() == Dtype::bool_) throw nb::value_error("boolean indices are not yet supported");
  if (!is_integral(x.dtype()))
    throw nb::index_error(("arrays used as indices must be of integer type, got " +
                           std::string(dtype_name(x.dtype())))
                              .c_str());
  return x;
}

std::vector<nb::handle> key_items(nb::handle key) {
  std::vector<nb::handle> items;
  if (nb::isinstance<nb::tuple>(key))
    for (nb::handle h : nb::borrow<nb::tuple>(key)) items.push_back(h);
  else
    items.push_back(key);
  return items;
}

}  // namespace

bool has_array_index(nb::handle key) {
  for (nb::handle h : key_items(key))
    if (is_index_array(h) || PyBool_Check(h.ptr())) return true;
  return false;
}

Array advanced_index(const Array& a, nb::handle key) {
  auto items = key_items(key);
  for (nb::handle h : items)
    if (bool_mask(h)) throw nb::value_error("boolean indices are not yet supported");
  int specified = 0;
  for (nb::handle h : items)
    if (!h.is_none() && h.ptr() != Py_Ellipsis) ++specified;
  if (specified > a.ndim())
    throw nb::index_error(
        ("too many indices for an array of " + std::to_string(a.ndim()) + " dimensions").c_str());
  // The basic part first: each array or integer index becomes a whole slice of its axis, whose
  // position in that view is remembered.
  nb::object whole = nb::steal(PySlice_New(nullptr, nullptr, nullptr));
  nb::list basic;
  std::vector<int> axes, key_pos;
  std::vector<Array> idx;
  int view_axis = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    nb::handle h = items[k];
    bool integer = !is_index_array(h) && !PyBool_Check(h.ptr()) &&
                   (PyLong_Check(h.ptr()) || PyIndex_Check(h.ptr()));
    if (is_index_array(h) || integer) {
      Py_ssize_t v = integer ? PyNumber_AsSsize_t(h.ptr(), PyExc_IndexError) : 0;
      if (v == -1 && PyErr_Occurred()) throw nb::python_error();
      Array i = integer
                    ? Array::from_doubles({static_cast<double>(v)}, {}, Dtype::int64, Device::cpu())
                    : index_array(h);
      idx.push_back(i);
      axes.push_back(view_axis++);
      key_pos.push_back(static_cast<int>(k));
      basic.append(whole);
    } else if (h.ptr() == Py_Ellipsis) {
      view_axis += a.ndim() - specified;
      basic.append(h);
    } else {
      ++view_axis;  // a slice or None
      basic.append(h);
    }
  }
  Array view = basic_index(a, nb::tuple(basic));
  // Integer bounds (NumPy raises IndexError; arrays are not checked).
  for (size_t k = 0; k < idx.size(); ++k) {
    if (idx[k].ndim() != 0 || nb::isinstance<Array>(items[key_pos[k]])) continue;
    int64_t v = static_cast<int64_t>(idx[k].item()), n = view.shape()[axes[k]];
    if (v < -n || v >= n)
      throw nb::index_error(("index " + std::to_string(v) + " is out of bounds for axis " +
                             std::to_string(axes[k]) + " with size " + std::to_string(n))
                                .c_str());
  }
  Shape slice = view.shape();
  for (int ax : axes) slice[ax] = 1;
  Array g = gather(view, idx, axes, slice);
  int nb_dims = g.ndim() - view.ndim();
  std::vector<int> squeeze_axes;
  for (int ax : axes) squeeze_axes.push_back(nb_dims + ax);
  g = squeeze(g, squeeze_axes);
  // NumPy's placement: the broadcast index dims go where the first index was when the index
  // arrays were adjacent in the key, else first.
  bool adjacent = true;
  for (size_t k = 1; k < key_pos.size(); ++k) adjacent &= key_pos[k] == key_pos[k - 1] + 1;
  if (!adjacent || axes[0] == 0) return g;
  int before = axes[0];  // view dims before the first indexed axis (none of them indexed)
  std::vector<int> perm;
  int rest = g.ndim() - nb_dims;
  for (int d = 0; d < before; ++d) perm.push_back(nb_dims + d);
  for (int d = 0; d < nb_dims; ++d) perm.push_back(d);
  for (int d = before; d < rest; ++d) perm.push_back(nb_dims + d);
  return transpose(g, perm);
}

namespace {

// a[mask] = v (MLX's masked_scatter), lazily: `mask` covers a's leading axes (its shape is
// theirs); a value broadcasting to the trailing axes goes to every selected position (a `where`);
// a value with one more axis supplies the selected positions in order, its k-th row going to
// the k-th True (positions = cumsum(mask) - 1, a `take`, then the `where`).
Array masked_update(const Array& a, const Array& mask, const Array& v) {
  int k = mask.ndim(), tn = a.ndim() - k;
  bool leading = k <= a.ndim();
  for (int d = 0; d < k && leading; ++d) leading = mask.shape()[d] == a.shape()[d];
  if (!leading)
    throw nb::value_error(("[masked_scatter] The boolean mask should have the same shape as the "
                           "beginning of the indexed array but the mask has shape (" +
                           shape_str(mask.shape()) + ") and the array has shape (" +
                           shape_str(a.shape()) + ")")
                              .c_str());
  Shape trailing(a.shape().begin() + k, a.shape().end());
  Shape mask_shape = mask.shape();
  mask_shape.resize(a.ndim(), 1);
  Array m = reshape(mask, mask_shape);
  auto broadcasts_to_trailing = [&](const Shape& s) {
    if (static_cast<int>(s.size()) > tn) return false;
    for (size_t j = 0; j < s.size(); ++j)
      if (s[s.size() - 1 - j] != 1 && s[s.size() - 1 - j] != trailing[tn - 1 - j]) return false;
    return true;
  };
  if (v.ndim() <= tn) {
    if (!broadcasts_to_trailing(v.shape()))
      throw nb::value_error(("[masked_scatter] Value array shape (" + shape_str(v.shape()) +
                             ") must be broadcastable with the last " + std::to_string(tn) +
                             " dimensions of the input.")
                                .c_str());
    return where(m, v, a);
  }
  Shape rest(v.shape().begin() + 1, v.shape().end());
  if (v.ndim() != tn + 1 || !broadcasts_to_trailing(rest))
    throw nb::value_error(("[masked_scatter] Value array shape must be broadcastable with the "
                           "last " +
                           std::to_string(tn) + " dimensions of the input.")
                              .c_str());
  int64_t n = v.shape()[0];
  if (n == 0) throw nb::value_error("[masked_scatter] the value array has no rows");
  Shape vs{n};
  vs.insert(vs.end(), trailing.begin(), trailing.end());
  Array values = broadcast_to(v, vs);
  // The selected position's row: the number of Trues before it (rows past the value's last are
  // clamped to it; MLX raises at evaluation).
  Array pos = maximum(subtract(cumsum(reshape(alloy::astype(mask, Dtype::int32), {-1})), Array(1)),
                      Array(0));
  Array picked = take(values, pos, 0);  // [mask.size, trailing...]
  return where(m, reshape(picked, a.shape()), a);
}

// a[key] = value as a new array (MLX's functional update).
Array updated(const Array& a, nb::handle key, nb::handle value) {
  Array v = alloy::astype(value_like(value, a), a.dtype());
  if (auto items = key_items(key); items.size() == 1) {
    if (auto mask = bool_mask(items[0])) return masked_update(a, *mask, v);
  } else {
    for (nb::handle h : items)
      if (bool_mask(h))
        throw nb::value_error(
            "boolean masks combined with other indices are not supported in assignments");
  }
  if (!has_array_index(key)) {
    // Integers, slices, None and '...': one slice_update over the original axes.
    Array view = basic_index(a, key);
    Shape start, stop, strides, counts;
    int axis = 0;
    auto items = key_items(key);
    int specified = 0;
    for (nb::handle h : items)
      if (!h.is_none() && h.ptr() != Py_Ellipsis) ++specified;
    for (nb::handle h : items) {
      PyObject* p = h.ptr();
      if (p == Py_None) continue;
      if (p == Py_Ellipsis) {
        for (int k = 0; k < a.ndim() - specified; ++k, ++axis) {
          start.push_back(0);
          stop.push_back(a.shape()[axis]);
          strides.push_back(1);
          counts.push_back(a.shape()[axis]);
        }
        continue;
      }
      int64_t n = a.shape()[axis];
      if (PySlice_Check(p)) {
        Py_ssize_t b, e, st;
        if (PySlice_Unpack(p, &b, &e, &st) < 0) throw nb::python_error();
        Py_ssize_t c = PySlice_AdjustIndices(static_cast<Py_ssize_t>(n), &b, &e, st);
        int64_t end = b + c * st;
        start.push_back(b);
        stop.push_back(end < 0 ? end - n : end);  // -1 means "before 0", not "the last"
        strides.push_back(st);
        counts.push_back(c);
      } else {
        int64_t i = PyNumber_AsSsize_t(p, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) throw nb::python_error();
        if (i < 0) i += n;
        start.push_back(i);
        stop.push_back(i + 1);
        strides.push_back(1);
        counts.push_back(1);
      }
      ++axis;
    }
    for (; axis < a.ndim(); ++axis) {
      start.push_back(0);
      stop.push_back(a.shape()[axis]);
      strides.push_back(1);
      counts.push_back(a.shape()[axis]);
    }
    Array u = reshape(broadcast_to(v, view.shape()), counts);
    return slice_update(a, u, start, stop, strides);
  }
  // Index arrays: the flat positions the key selects (the same indexing applied to a range),
  // then one scatter into the flattened array.
  Dtype it = a.size() < (int64_t{1} << 31) ? Dtype::int32 : Dtype::int64;
  Array positions = basic_index(
      reshape(arange(0, static_cast<double>(a.size()), 1, it, a.device()), a.shape()), key);
  Array u = broadcast_to(v, positions.shape());
  Array flat =
      scatter(reshape(a, {-1}), {reshape(positions, {-1})}, reshape(u, {positions.size(), 1}), {0});
  return reshape(flat, a.shape());
}

// MLX's `a.at[key].add(v)`: functional updates that, unlike `a[key] = v`, count every
// repeated index. The key selects flat positions as indexing does (the key applied to a
// range); add and subtract are one scatter_add into the flattened array.
struct ArrayAt {
  Array a;
};
struct ArrayAtIndex {
  Array a;
  nb::object key;
};

Array at_update(const ArrayAtIndex& at, nb::handle value, const char* op) {
  const Array& a = at.a;
  std::string o = op;
  if (o != "add" && o != "subtract")
    throw NotSupported("at", fmt::format("not supported: a.at[...].{}() (a scatter that "
                                         "multiplies or takes extremes); a.at[...].add() and "
                                         ".subtract() are supported",
                                         o));
  for (nb::handle h : key_items(at.key))
    if (bool_mask(h))
      throw nb::value_error("[at] boolean masks are not supported as indices of a.at[...]");
  Array v = alloy::astype(value_like(value, a), a.dtype());
  if (o == "subtract") v = negative(v);
  Dtype it = a.size() < (int64_t{1} << 31) ? Dtype::int32 : Dtype::int64;
  Array positions = basic_index(
      reshape(arange(0, static_cast<double>(a.size()), 1, it, a.device()), a.shape()), at.key);
  Array u = broadcast_to(v, positions.shape());
  Array flat = scatter_add(reshape(a, {-1}), {reshape(positions, {-1})},
                           reshape(u, {positions.size(), 1}), {0});
  return reshape(flat, a.shape());
}

}  // namespace

void init_ops_misc(nb::module_& m) {
  nb::handle cls = nb::type<Array>();
  // ---- scans -------------------------------------------------------------------------------
  using ScanAxis = Array (*)(const Array&, int, bool, bool, StreamOrDevice);
  using ScanFlat = Array (*)(const Array&, bool, bool, StreamOrDevice);
  struct S {
    const char* name;
    ScanAxis axis;
    ScanFlat flat;
    const char* doc;
  };
  static const S scans[] = {
      {"cumsum", &cumsum, &cumsum, "Cumulative sum along `axis` (flattened when None)."},
      {"cumprod", &cumprod, &cumprod, "Cumulative product along `axis` (flattened when None)."},
      {"cummax", &cummax, &cummax, "Cumulative maximum along `axis` (flattened when None)."},
      {"cummin", &cummin, &cummin, "Cumulative minimum along `axis` (flattened when None)."},
  };
  for (const auto& sc : scans) {
    auto fn = [f = sc.axis, g = sc.flat](const Array& a, std::optional<int> axis, bool reverse,
                                         bool inclusive, nb::handle stream) {
      return axis ? f(a, *axis, reverse, inclusive, stream_arg(stream))
                  : g(a, reverse, inclusive, stream_arg(stream));
    };
    std::string doc = std::string(sc.doc) +
                      " `reverse` scans from the end; `inclusive=False` gives the exclusive "
                      "scan. cumsum of bool gives int32.";
    m.def(sc.name, fn, nb::arg("a"), nb::arg("axis") = nb::none(), nb::kw_only(),
          nb::arg("reverse") = false, nb::arg("inclusive") = true, nb::arg("stream") = nb::none(),
          doc.c_str());
    cls.attr(sc.name) =
        nb::cpp_function(fn, nb::is_method(), nb::arg("axis") = nb::none(), nb::kw_only(),
                         nb::arg("reverse") = false, nb::arg("inclusive") = true,
                         nb::arg("stream") = nb::none(), doc.c_str());
  }

  // ---- indexing ----------------------------------------------------------------------------
  m.def(
      "take",
      [](const Array& a, nb::handle indices, std::optional<int> axis, nb::handle stream) {
        Array i = index_array(indices);
        return axis ? take(a, i, *axis, stream_arg(stream)) : take(a, i, stream_arg(stream));
      },
      nb::arg("a"), nb::arg("indices"), nb::arg("axis") = nb::none(), nb::kw_only(),
      nb::arg("stream") = nb::none(),
      "Elements at `indices` along `axis` (of the flattened array when None); negative indices "
      "count from the end.");
  m.def(
      "take_along_axis",
      [](const Array& a, nb::handle indices, std::optional<int> axis, nb::handle stream) {
        Array i = index_array(indices);
        return axis ? take_along_axis(a, i, *axis, stream_arg(stream))
                    : take_along_axis(a, i, stream_arg(stream));
      },
      nb::arg("a"), nb::arg("indices"), nb::arg("axis") = nb::none(), nb::kw_only(),
      nb::arg("stream") = nb::none(),
      "out[..., j, ...] = a[..., indices[..., j, ...], ...] along `axis` (flattened when None).");
  m.def(
      "put_along_axis",
      [](const Array& a, nb::handle indices, nb::handle values, std::optional<int> axis,
         nb::handle stream) {
        Array i = index_array(indices), v = value_like(values, a);
        if (!axis)
          return reshape(put_along_axis(reshape(a, {-1}), reshape(i, {-1}), reshape(v, {-1}), 0,
                                        stream_arg(stream)),
                         a.shape());
        return put_along_axis(a, i, v, *axis, stream_arg(stream));
      },
      nb::arg("a"), nb::arg("indices"), nb::arg("values"), nb::arg("axis") = nb::none(),
      nb::kw_only(), nb::arg("stream") = nb::none(),
      "A copy of `a` with `values` written at `indices` along `axis`.");
  m.def(
      "split",
      [](const Array& a, nb::handle sections, int axis, nb::handle stream) {
        if (PyLong_Check(sections.ptr()))
          return split(a, nb::cast<int>(sections), axis, stream_arg(stream));
        return split(a, nb::cast<Shape>(sections), axis, stream_arg(stream));
      },
      nb::arg("a"), nb::arg("indices_or_sections"), nb::arg("axis") = 0, nb::kw_only(),
      nb::arg("stream") = nb::none(),
      "Views of `a` split along `axis` into equal sections (an int) or at the given indices.");
  m.def(
      "eye",
      [](int n, std::optional<int> mm, int k, nb::handle dtype, nb::handle stream) {
        return eye(n, mm.value_or(n), k, dtype.is_none() ? Dtype::float32 : to_dtype(dtype),
                   stream_arg(stream));
      },
      nb::arg("n"), nb::arg("m") = nb::none(), nb::arg("k") = 0, nb::arg("dtype") = nb::none(),
      nb::kw_only(), nb::arg("stream") = nb::none(),
      "An n x m array with ones on diagonal k (float32 unless `dtype`).");
  m.def(
      "identity",
      [](int n, nb::handle dtype, nb::handle stream) {
        return identity(n, dtype.is_none() ? Dtype::float32 : to_dtype(dtype), stream_arg(stream));
      },
      nb::arg("n"), nb::arg("dtype") = nb::none(), nb::kw_only(), nb::arg("stream") = nb::none(),
      "The n x n identity matrix.");
  m.def(
      "tri",
      [](int n, std::optional<int> mm, int k, nb::handle dtype, nb::handle stream) {
        return tri(n, mm.value_or(n), k, dtype.is_none() ? Dtype::float32 : to_dtype(dtype),
                   stream_arg(stream));
      },
      nb::arg("n"), nb::arg("m") = nb::none(), nb::arg("k") = 0, nb::arg("dtype") = nb::none(),
      nb::kw_only(), nb::arg("stream") = nb::none(),
      "An n x m array with ones on and below diagonal k.");
  m.def(
      "tril",
      [](const Array& x, int k, nb::handle stream) { return tril(x, k, stream_arg(stream)); },
      nb::arg("x"), nb::arg("k") = 0, nb::kw_only(), nb::arg("stream") = nb::none(),
      "The lower triangle (on and below diagonal k) of the last two axes; zeros elsewhere.");
  m.def(
      "triu",
      [](const Array& x, int k, nb::handle stream) { return triu(x, k, stream_arg(stream)); },
      nb::arg("x"), nb::arg("k") = 0, nb::kw_only(), nb::arg("stream") = nb::none(),
      "The upper triangle (on and above diagonal k) of the last two axes; zeros elsewhere.");

  nb::class_<ArrayAt>(m, "ArrayAt", "a.at: indexed by a key, gives the updates of those places.")
      .def(
          "__getitem__",
          [](const ArrayAt& at, nb::object key) {
            return ArrayAtIndex{at.a, std::move(key)};
          },
          nb::arg("key"));
  auto at_index = nb::class_<ArrayAtIndex>(
      m, "ArrayAtIndex", "a.at[key]: add/subtract give a copy of a updated at the key's places.");
  for (const char* op : {"add", "subtract", "multiply", "divide", "maximum", "minimum"})
    at_index.def(
        op, [op](const ArrayAtIndex& at, nb::handle value) { return at_update(at, value, op); },
        nb::arg("value"),
        "A copy of the array with `value` combined at the key's places; repeated indices each "
        "count (MLX's a.at[...]). multiply/divide/maximum/minimum are not supported yet.");
  cls.attr("at") = nb::module_::import_("builtins")
                       .attr("property")(nb::cpp_function(
                           [](const Array& a) { return ArrayAt{a}; }, nb::is_method(),
                           "MLX's a.at[key].add(value): updates that count repeated indices."));

  cls.attr("__setitem__") = nb::cpp_function(
      [](nb::handle self, nb::handle key, nb::handle value) {
        Array& a = *nb::inst_ptr<Array>(self);
        Array r = updated(a, key, value);
        a = r;
      },
      nb::is_method(), nb::arg("key"), nb::arg("value"),
      "a[key] = value as MLX's functional update: `a` becomes a new array (a graph node) with "
      "the selected elements replaced; arrays that shared a's old value (views, other names "
      "bound before) keep it. Keys as for indexing; repeated indices: the last value wins.");

  // ---- alloy.random ------------------------------------------------------------------------
  nb::module_ r = m.def_submodule("random", "Random numbers with explicit keys, as mx.random.");
  auto key_arg = [](nb::handle h) -> std::optional<Array> {
    if (h.is_none()) return std::nullopt;
    return nb::cast<Array>(h);
  };
  r.def(
      "seed", [](uint64_t s) { random::seed(s); }, nb::arg("seed"),
      "Seeds the key sequence used when no key is given.");
  r.def(
      "key", [](uint64_t s) { return random::key(s); }, nb::arg("seed"),
      "The key of a seed: a uint32 array of shape (2,).");
  r.def(
      "split",
      [](const Array& key, int num, nb::handle stream) {
        return random::split(key, num, stream_arg(stream));
      },
      nb::arg("key"), nb::arg("num") = 2, nb::kw_only(), nb::arg("stream") = nb::none(),
      "`num` new keys, shape (num, 2).");
  r.def(
      "uniform",
      [key_arg](nb::handle low, nb::handle high, nb::handle shape, nb::handle dtype, nb::handle key,
                nb::handle stream) {
        Dtype t = dtype.is_none() ? Dtype::float32 : to_dtype(dtype);
        Array lo = as_input(low), hi = as_input(high);
        return random::uniform(lo, hi, shape_of(shape), t, key_arg(key), stream_arg(stream));
      },
      nb::arg("low") = 0.0, nb::arg("high") = 1.0, nb::arg("shape") = nb::none(),
      nb::arg("dtype") = nb::none(), nb::arg("key") = nb::none(), nb::kw_only(),
      nb::arg("stream") = nb::none(), "Uniform samples in [low, high) (MLX's values).");
  r.def(
      "normal",
      [key_arg](nb::handle shape, nb::handle dtype, nb::handle loc, nb::handle scale,
                nb::handle key, nb::handle stream) {
        Dtype t = dtype.is_none() ? Dtype::float32 : to_dtype(dtype);
        std::optional<Array> l, sc;
        if (!loc.is_none()) l = as_input(loc);
        if (!scale.is_none()) sc = as_input(scale);
        return random::normal(shape_of(shape), t, l, sc, key_arg(key), stream_arg(stream));
      },
      nb::arg("shape") = nb::none(), nb::arg("dtype") = nb::none(), nb::arg("loc") = nb::none(),
      nb::arg("scale") = nb::none(), nb::arg("key") = nb::none(), nb::kw_only(),
      nb::arg("stream") = nb::none(), "Normal samples with mean `loc` and deviation `scale`.");
  r.def(
      "bernoulli",
      [key_arg](nb::handle p, nb::handle shape, nb::handle key, nb::handle stream) {
        Array pa = as_input(p);
        if (shape.is_none()) return random::bernoulli(pa, key_arg(key), stream_arg(stream));
        return random::bernoulli(pa, shape_of(shape), key_arg(key), stream_arg(stream));
      },
      nb::arg("p") = 0.5, nb::arg("shape") = nb::none(), nb::arg("key") = nb::none(), nb::kw_only(),
      nb::arg("stream") = nb::none(), "True with probability p.");
  r.def(
      "randint",
      [key_arg](nb::handle low, nb::handle high, nb::handle shape, nb::handle dtype, nb::handle key,
                nb::handle stream) {
        Dtype t = dtype.is_none() ? Dtype::int32 : to_dtype(dtype);
        return random::randint(as_input(low), as_input(high), shape_of(shape), t, key_arg(key),
                               stream_arg(stream));
      },
      nb::arg("low"), nb::arg("high"), nb::arg("shape") = nb::none(), nb::arg("dtype") = nb::none(),
      nb::arg("key") = nb::none(), nb::kw_only(), nb::arg("stream") = nb::none(),
      "Integers in [low, high).");
  r.def(
      "bits",
      [key_arg](nb::handle shape, int width, nb::handle key, nb::handle stream) {
        return random::bits(shape_of(shape), width, key_arg(key), stream_arg(stream));
      },
      nb::arg("shape") = nb::none(), nb::arg("width") = 4, nb::arg("key") = nb::none(),
      nb::kw_only(), nb::arg("stream") = nb::none(), "Random uint32 words (width 4).");
}

}  // namespace alloy::python
