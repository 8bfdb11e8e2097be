// alloy.array: a lazy n-d array (evaluated when read), NumPy/DLPack interop, strided views by
// slicing, and the creation functions.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <complex>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "interop.h"

namespace alloy::python {
namespace {

std::optional<Dtype> optional_dtype(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  return to_dtype(h);
}

Shape to_shape_arg(nb::handle h) {
  if (PyLong_Check(h.ptr())) return {nb::cast<int64_t>(h)};
  return nb::cast<Shape>(h);
}

}  // namespace

void eval_released(const Array& a) {
  // Work that runs on this thread alone (alloy::eval_inline) keeps the GIL: no lock it takes is
  // ever held by a thread waiting for the GIL (docs/architecture.md, "The GIL and evaluation").
  if (eval_inline(a)) return;
  nb::gil_scoped_release release;
  a.eval();
}

namespace {

// One element at `p` as a Python scalar (bool, int, float, complex).
nb::object element(const uint8_t* p, Dtype t) {
  switch (t) {
    case Dtype::bool_:
      return nb::bool_(*p != 0);
    case Dtype::int8:
      return nb::int_(*reinterpret_cast<const int8_t*>(p));
    case Dtype::int16:
      return nb::int_(*reinterpret_cast<const int16_t*>(p));
    case Dtype::int32:
      return nb::int_(*reinterpret_cast<const int32_t*>(p));
    case Dtype::int64:
      return nb::int_(*reinterpret_cast<const int64_t*>(p));
    case Dtype::uint8:
      return nb::int_(*p);
    case Dtype::uint16:
      return nb::int_(*reinterpret_cast<const uint16_t*>(p));
    case Dtype::uint32:
      return nb::int_(*reinterpret_cast<const uint32_t*>(p));
    case Dtype::uint64:
      return nb::int_(*reinterpret_cast<const uint64_t*>(p));
    case Dtype::float16:
      return nb::float_(float16_to_float(*reinterpret_cast<const uint16_t*>(p)));
    case Dtype::bfloat16:
      return nb::float_(bfloat16_to_float(*reinterpret_cast<const uint16_t*>(p)));
    case Dtype::float32:
      return nb::float_(*reinterpret_cast<const float*>(p));
    case Dtype::float64:
      return nb::float_(*reinterpret_cast<const double*>(p));
    case Dtype::complex64: {
      auto c = *reinterpret_cast<const std::complex<float>*>(p);
      return nb::steal(PyComplex_FromDoubles(c.real(), c.imag()));
    }
  }
  return nb::none();
}

nb::object nested_list(const uint8_t*& p, const Shape& shape, size_t dim, Dtype t, size_t item) {
  if (dim == shape.size()) {
    nb::object e = element(p, t);
    p += item;
    return e;
  }
  nb::list out;
  for (int64_t i = 0; i < shape[dim]; ++i) out.append(nested_list(p, shape, dim + 1, t, item));
  return out;
}

nb::object to_list(const Array& a) {
  std::vector<uint8_t> bytes;
  {
    nb::gil_scoped_release release;
    bytes = a.to_bytes();
  }
  const uint8_t* p = bytes.data();
  return nested_list(p, a.shape(), 0, a.dtype(), a.itemsize());
}

nb::object item(const Array& a) {
  if (a.size() != 1)
    throw nb::value_error(
        ("item() needs an array of one element, this one has " + std::to_string(a.size())).c_str());
  std::vector<uint8_t> bytes;
  {
    nb::gil_scoped_release release;
    bytes = a.to_bytes();
  }
  return element(bytes.data(), a.dtype());
}

// Python code reading the shape of an array not evaluated yet: inside a traced function (compile,
// export) its trace now depends on the call's shapes (alloy::note_shape_read).
const Array& shape_read(const Array& a) {
  if (!a.is_evaluated()) alloy::note_shape_read();
  return a;
}

nb::tuple shape_tuple(const Array& a) {
  const Shape& s = a.shape();
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(s.size()));
  for (size_t i = 0; i < s.size(); ++i)
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(s[i]));
  return nb::steal<nb::tuple>(t);
}

// a[key] for integers, slices (any step, negative too), None and Ellipsis: a view sharing a's
// memory (strides and offset changed), as NumPy's basic indexing.
Array index(const Array& a, nb::handle key) {
  if (has_array_index(key)) return advanced_index(a, key);  // ops_misc.cpp
  std::vector<nb::handle> items;
  if (nb::isinstance<nb::tuple>(key)) {
    for (nb::handle h : nb::borrow<nb::tuple>(key)) items.push_back(h);
  } else {
    items.push_back(key);
  }
  int specified = 0, ellipses = 0;
  for (nb::handle h : items) {
    if (h.is_none()) continue;
    if (h.ptr() == Py_Ellipsis)
      ++ellipses;
    else
      ++specified;
  }
  if (ellipses > 1) throw nb::index_error("an index can only have a single ellipsis ('...')");
  if (specified > a.ndim())
    throw nb::index_error(
        ("too many indices for an array of " + std::to_string(a.ndim()) + " dimensions").c_str());
  // Only slices (and an ellipsis): a Slice view, whose open ends follow the input's shape when
  // a traced function is replayed on other shapes (export, compile).
  bool only_slices = true;
  for (nb::handle h : items) only_slices &= PySlice_Check(h.ptr()) || h.ptr() == Py_Ellipsis;
  if (only_slices) {
    auto bound = [](PyObject* v) -> std::optional<int64_t> {
      if (v == Py_None) return std::nullopt;
      Py_ssize_t x = PyNumber_AsSsize_t(v, nullptr);  // clipped to the Py_ssize_t range
      if (x == -1 && PyErr_Occurred()) throw nb::python_error();
      return static_cast<int64_t>(x);
    };
    std::vector<Slice> slices;
    for (nb::handle h : items) {
      if (h.ptr() == Py_Ellipsis) {
        for (int k = 0; k < a.ndim() - specified; ++k) slices.push_back(Slice{});
        continue;
      }
      Slice s{bound(h.attr("start").ptr()), bound(h.attr("stop").ptr()), 1};
      if (auto step = bound(h.attr("step").ptr())) s.step = *step;
      slices.push_back(s);
    }
    return a.slice(slices);
  }
  // A lazy view (as_strided relative to element 0): nothing is evaluated.
  struct {
    const Shape& shape;
    const Strides& strides;
  } src{a.shape(), a.strides()};
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  int axis = 0;
  auto keep = [&](int ax) {
    shape.push_back(src.shape[ax]);
    strides.push_back(src.strides[ax]);
  };
  for (nb::handle h : items) {
    PyObject* p = h.ptr();
    if (p == Py_None) {
      shape.push_back(1);
      strides.push_back(0);
    } else if (p == Py_Ellipsis) {
      for (int k = 0; k < a.ndim() - specified; ++k) keep(axis++);
    } else if (PySlice_Check(p)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(p, &start, &stop, &step) < 0) throw nb::python_error();
      Py_ssize_t count =
          PySlice_AdjustIndices(static_cast<Py_ssize_t>(src.shape[axis]), &start, &stop, step);
      if (count > 0) offset += start * src.strides[axis];
      shape.push_back(count);
      strides.push_back(src.strides[axis] * step);
      ++axis;
    } else if (PyIndex_Check(p) && !PyBool_Check(p)) {
      Py_ssize_t i = PyNumber_AsSsize_t(p, PyExc_IndexError);
      if (i == -1 && PyErr_Occurred()) throw nb::python_error();
      int64_t dim = src.shape[axis];
      if (i < 0) i += dim;
      if (i < 0 || i >= dim)
        throw nb::index_error(("index " + py_str(h) + " is out of bounds for axis " +
                               std::to_string(axis) + " with size " + std::to_string(dim))
                                  .c_str());
      offset += i * src.strides[axis];
      ++axis;
    } else {
      throw nb::type_error(("alloy arrays are indexed by integers, slices, None and '...'; got " +
                            std::string(nb::inst_name(h).c_str()))
                               .c_str());
    }
  }
  while (axis < a.ndim()) keep(axis++);
  return a.as_strided(std::move(shape), std::move(strides), offset);
}

// MLX's text (alloy::array_repr: 6 significant digits, large arrays summarised), with Python's
// True/False; evaluates the array without the GIL.
std::string repr(const Array& a) {
  nb::gil_scoped_release release;
  return array_repr(a, true);
}

void eval_all(nb::handle h, std::vector<Array>& out) {
  if (nb::isinstance<Array>(h)) {
    out.push_back(nb::cast<Array>(h));
  } else if (nb::isinstance<nb::list>(h) || nb::isinstance<nb::tuple>(h)) {
    for (nb::handle x : h) eval_all(x, out);
  } else if (nb::isinstance<nb::dict>(h)) {
    for (auto [k, v] : nb::borrow<nb::dict>(h)) eval_all(v, out);
  } else if (!h.is_none()) {
    throw nb::type_error(("eval() takes arrays and lists, tuples or dicts of arrays, got " +
                          std::string(nb::inst_name(h).c_str()))
                             .c_str());
  }
}

// eval / async_eval over the arrays in `args` (and lists, tuples or dicts of them), without the
// GIL while the work runs.
void eval_args(nb::args args, void (*evaluate)(const std::vector<Array>&)) {
  std::vector<Array> arrays;
  for (nb::handle h : args) eval_all(h, arrays);
  nb::gil_scoped_release release;
  evaluate(arrays);
}

PyType_Slot array_slots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void*>(array_getbuffer)},
    {Py_bf_releasebuffer, reinterpret_cast<void*>(array_releasebuffer)},
    {0, nullptr},
};

}  // namespace

void init_array(nb::module_& m) {
  nb::class_<Array>(m, "array", nb::type_slots(array_slots), nb::is_weak_referenceable(),
                    "An n-d array on a device (alloy.cpu or alloy.gpu).\n\n"
                    "Arrays are lazy: kernel outputs are computed when first read (item(), "
                    "tolist(), numpy.asarray(), DLPack, repr) or by alloy.eval(). Slicing gives "
                    "strided views of the same memory. CPU arrays export their memory without "
                    "copies through the buffer protocol and DLPack; GPU arrays through DLPack.")
      .def(
          "__init__",
          [](Array* self, nb::handle val, nb::handle dtype, nb::handle device) {
            new (self) Array(to_array(val, optional_dtype(dtype), to_device(device, "device")));
          },
          nb::arg("val"), nb::arg("dtype") = nb::none(), nb::kw_only(),
          nb::arg("device") = nb::none(),
          nb::sig("def __init__(self, val: object, dtype: Dtype | None = None, *, "
                  "device: Device | DeviceType | None = None) -> None"),
          "A new array holding a copy of `val`: a Python scalar (bool, int -> int32, float -> "
          "float32, complex -> complex64), a nested sequence (float -> float32, int -> int32), "
          "an alloy.array, a NumPy array (its dtype is kept; bfloat16 through ml_dtypes) or any "
          "object with __dlpack__ or the buffer protocol. `dtype` converts; `device` defaults to "
          "alloy.default_device().")
      .def_prop_ro(
          "shape", [](const Array& a) { return shape_tuple(shape_read(a)); },
          "The dimensions, a tuple of ints.")
      .def_prop_ro(
          "dtype", [](const Array& a) { return a.dtype(); }, "The element type (alloy.Dtype).")
      .def_prop_ro("ndim", &Array::ndim, "Number of dimensions.")
      .def_prop_ro(
          "size", [](const Array& a) { return shape_read(a).size(); }, "Number of elements.")
      .def_prop_ro(
          "nbytes", [](const Array& a) { return shape_read(a).nbytes(); }, "size * itemsize.")
      .def_prop_ro("itemsize", &Array::itemsize, "Bytes per element.")
      .def_prop_ro("device", &Array::device, "The device holding the array.")
      .def_prop_ro(
          "T", [](const Array& a) { return a.transpose(); },
          "The transposed view (axes reversed), sharing memory.")
      .def_prop_ro(
          "real", [](const Array& a) { return alloy::real(a); },
          "The real part (float32 for complex64; the array itself otherwise).")
      .def_prop_ro(
          "imag", [](const Array& a) { return alloy::imag(a); },
          "The imaginary part (float32 for complex64; zeros otherwise).")
      .def("item", &item, "The value of a one-element array as a Python scalar (evaluates).")
      .def("tolist", &to_list,
           "The elements as nested lists of Python scalars (a scalar for a 0-d array; "
           "evaluates).")
      .def(
          "eval", [](const Array& a) { eval_released(a); },
          "Computes the array now (it is otherwise computed when read). GPU work is enqueued, "
          "not waited for.")
      .def(
          "astype", [](const Array& a, nb::handle dtype) { return a.astype(to_dtype(dtype)); },
          nb::arg("dtype"), nb::sig("def astype(self, dtype: Dtype) -> array"),
          "The array converted to `dtype` (lazy; C casts as numpy's astype; the array itself "
          "when it has that dtype already).")
      .def(
          "to", [](const Array& a, nb::handle d) { return a.to(*to_device(d, "device")); },
          nb::arg("device"), nb::sig("def to(self, device: Device | DeviceType) -> array"),
          "The array on `device` (itself when it is there already, else a copy).")
      .def(
          "transpose", [](const Array& a, std::vector<int> axes) { return a.transpose(axes); },
          nb::arg("axes") = std::vector<int>{},
          "A view with the axes permuted (reversed when `axes` is empty).")
      .def("__getitem__", &index, nb::arg("key"),
           nb::sig("def __getitem__(self, key: object) -> array"),
           "Basic indexing: integers, slices with any step, None and '...' give views of the "
           "same memory. Integer arrays (alloy, NumPy or lists) index as NumPy's advanced "
           "indexing (a gather; combined with slices, integers and '...').")
      .def("__len__",
           [](const Array& a) {
             if (a.ndim() == 0) throw nb::type_error("len() of a 0-d array");
             return shape_read(a).shape()[0];
           })
      .def("__bool__",
           [](const Array& a) {
             if (a.size() != 1)
               throw nb::value_error(
                   "the truth value of an array with more than one element is ambiguous");
             int truth = PyObject_IsTrue(item(a).ptr());
             if (truth < 0) throw nb::python_error();
             return truth == 1;
           })
      .def("__int__", [](const Array& a) { return nb::int_(item(a)); })
      .def("__float__", [](const Array& a) { return nb::float_(item(a)); })
      .def(
          "__repr__", [](const Array& a) { return repr(a); }, nb::sig("def __repr__(self) -> str"))
      .def(
          "__array__",
          [](nb::handle self, nb::handle dtype, nb::handle copy) {
            return array_to_numpy(self, nb::cast<const Array&>(self), dtype, copy);
          },
          nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none(),
          nb::sig("def __array__(self, dtype: object = None, copy: bool | None = None) -> "
                  "numpy.ndarray"),
          "NumPy conversion: a view of CPU memory (no copy), a host copy of GPU memory; bfloat16 "
          "needs ml_dtypes.")
      .def(
          "__dlpack__",
          [](nb::handle self, nb::handle stream, nb::handle max_version, nb::handle dl_device,
             nb::handle copy) {
            return array_dlpack(self, nb::cast<const Array&>(self), stream, max_version, dl_device,
                                copy);
          },
          nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("max_version") = nb::none(),
          nb::arg("dl_device") = nb::none(), nb::arg("copy") = nb::none(),
          nb::sig("def __dlpack__(self, *, stream: int | None = None, max_version: "
                  "tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None, "
                  "copy: bool | None = None) -> object"),
          "A DLPack capsule viewing the array's memory (CPU or CUDA). GPU arrays are "
          "synchronized first, so the consumer's stream sees finished data.")
      .def("__dlpack_device__", &array_dlpack_device,
           nb::sig("def __dlpack_device__(self) -> tuple[int, int]"),
           "(1, 0) for the CPU, (2, 0) for the CUDA GPU.");

  m.def(
      "from_dlpack",
      [](nb::handle x, nb::handle device, nb::handle copy) {
        Array a = import_external(x);
        std::optional<Device> dev = to_device(device, "device");
        bool copy_true = !copy.is_none() && nb::cast<bool>(copy);
        bool copy_false = !copy.is_none() && !nb::cast<bool>(copy);
        if (dev && *dev != a.device()) {
          if (copy_false)
            throw nb::value_error("copy=False but the array must move to another device");
          return copy_to(a, *dev);
        }
        return copy_true ? copy_to(a, a.device()) : a;
      },
      nb::arg("x"), nb::kw_only(), nb::arg("device") = nb::none(), nb::arg("copy") = nb::none(),
      nb::sig("def from_dlpack(x: object, *, device: Device | DeviceType | None = None, "
              "copy: bool | None = None) -> array"),
      "An array sharing the memory of `x` (anything with __dlpack__ or the buffer protocol: "
      "NumPy, PyTorch, CuPy; CPU or CUDA memory). `x` is kept alive while Alloy uses it; CUDA "
      "producers order their pending work before Alloy's stream. `device` or copy=True make a "
      "copy.");
  m.def(
      "eval",
      [](nb::args args) {
        // alloy.eval(out) with one array: evaluated as out.eval() is (no list of arrays built).
        static PyTypeObject* array_type = reinterpret_cast<PyTypeObject*>(nb::type<Array>().ptr());
        if (args.size() == 1) {
          PyObject* a = PyTuple_GET_ITEM(args.ptr(), 0);
          if (Py_TYPE(a) == array_type && nb::inst_ready(a))
            return eval_released(*nb::inst_ptr<Array>(a));
        }
        eval_args(args, &eval);
      },
      nb::sig("def eval(*arrays: array | list | tuple | dict) -> None"),
      "Computes the given arrays (and lists, tuples or dicts of them) together.");
  m.def(
      "async_eval", [](nb::args args) { eval_args(args, &async_eval); },
      nb::sig("def async_eval(*arrays: array | list | tuple | dict) -> None"),
      "Hands the work of the given arrays to their streams and returns at once (CPU streams run "
      "it on their worker threads); reading the arrays or synchronize() waits for it.");
  m.def(
      "zeros",
      [](nb::handle shape, nb::handle dtype, nb::handle device) {
        return zeros(to_shape_arg(shape), optional_dtype(dtype).value_or(Dtype::float32),
                     to_device(device, "device"));
      },
      nb::arg("shape"), nb::arg("dtype") = nb::none(), nb::kw_only(),
      nb::arg("device") = nb::none(),
      nb::sig("def zeros(shape: int | Sequence[int], dtype: Dtype | None = None, *, device: "
              "Device | DeviceType | None = None) -> array"),
      "An array of zeros (float32 unless `dtype`).");
  m.def(
      "full",
      [](nb::handle shape, double value, nb::handle dtype, nb::handle device) {
        return full(to_shape_arg(shape), value, optional_dtype(dtype).value_or(Dtype::float32),
                    to_device(device, "device"));
      },
      nb::arg("shape"), nb::arg("vals"), nb::arg("dtype") = nb::none(), nb::kw_only(),
      nb::arg("device") = nb::none(),
      nb::sig("def full(shape: int | Sequence[int], vals: float, dtype: Dtype | None = None, *, "
              "device: Device | DeviceType | None = None) -> array"),
      "An array filled with `vals` (float32 unless `dtype`).");
  m.def(
      "arange",
      [](int64_t n, nb::handle dtype, nb::handle device) {
        return arange(n, optional_dtype(dtype).value_or(Dtype::int32), to_device(device, "device"));
      },
      nb::arg("stop"), nb::arg("dtype") = nb::none(), nb::kw_only(), nb::arg("device") = nb::none(),
      nb::sig("def arange(stop: int, dtype: Dtype | None = None, *, device: Device | DeviceType "
              "| None = None) -> array"),
      "0, 1, ..., stop - 1 (int32 unless `dtype`).");
}

Array basic_index(const Array& a, nb::handle key) {
  return index(a, key);
}

}  // namespace alloy::python
