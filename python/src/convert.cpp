// Python values -> Arrays: alloy.array(...) (copies), kernel inputs (no copy where possible), and
// dtype conversions.
#include <nanobind/stl/string.h>

#include <complex>
#include <string>

#include "bindings.h"

namespace alloy::python {
namespace {

bool fits_int32(long long v) {
  return v >= INT32_MIN && v <= INT32_MAX;
}

// A 0-d array from a Python bool/int/float/complex (MLX's defaults: bool, int32, float32,
// complex64), converted to `dtype` when given.
Array scalar_array(nb::handle v, std::optional<Dtype> dtype, Device dev) {
  PyObject* p = v.ptr();
  if (PyBool_Check(p))
    return Array::from_doubles({p == Py_True ? 1.0 : 0.0}, {}, dtype.value_or(Dtype::bool_), dev);
  if (PyLong_Check(p)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (overflow) {
      if (dtype != Dtype::uint64 || overflow < 0)
        throw nb::value_error("Python int too large for an alloy array (at most 64 bits)");
      unsigned long long u = PyLong_AsUnsignedLongLong(p);
      if (PyErr_Occurred()) throw nb::python_error();
      return Array::from_bytes(&u, {}, Dtype::uint64, dev);
    }
    Dtype t = dtype.value_or(fits_int32(x) ? Dtype::int32 : Dtype::int64);
    if (t == Dtype::int64) {
      int64_t y = x;
      return Array::from_bytes(&y, {}, t, dev);
    }
    if (t == Dtype::uint64) {
      uint64_t y = static_cast<uint64_t>(x);
      return Array::from_bytes(&y, {}, t, dev);
    }
    return Array::from_doubles({static_cast<double>(x)}, {}, t, dev);
  }
  if (PyFloat_Check(p))
    return Array::from_doubles({PyFloat_AsDouble(p)}, {}, dtype.value_or(Dtype::float32), dev);
  if (PyComplex_Check(p)) {
    Dtype t = dtype.value_or(Dtype::complex64);
    std::complex<float> c(static_cast<float>(PyComplex_RealAsDouble(p)),
                          static_cast<float>(PyComplex_ImagAsDouble(p)));
    if (t == Dtype::complex64) return Array::from_bytes(&c, {}, t, dev);
    return Array::from_doubles({c.real()}, {}, t, dev);
  }
  throw nb::type_error("not a Python scalar");
}

bool is_scalar(nb::handle v) {
  PyObject* p = v.ptr();
  return PyBool_Check(p) || PyLong_Check(p) || PyFloat_Check(p) || PyComplex_Check(p);
}

// Nested lists/tuples go through numpy.asarray; MLX's default types then apply (float32 for
// floats, int32 for ints that fit, bool, complex64).
Array sequence_array(nb::handle v, std::optional<Dtype> dtype, Device dev) {
  nb::object x = nb::module_::import_("numpy").attr("asarray")(v);
  std::string kind = nb::cast<std::string>(x.attr("dtype").attr("kind"));
  Dtype target;
  if (dtype) {
    target = *dtype;
  } else if (kind == "b") {
    target = Dtype::bool_;
  } else if (kind == "i" || kind == "u") {
    target = Dtype::int32;
    if (nb::cast<int64_t>(x.attr("size")) > 0) {
      nb::object lo = x.attr("min")(), hi = x.attr("max")();
      bool fits = PyObject_RichCompareBool(lo.ptr(), nb::int_(INT32_MIN).ptr(), Py_GE) == 1 &&
                  PyObject_RichCompareBool(hi.ptr(), nb::int_(INT32_MAX).ptr(), Py_LE) == 1;
      if (!fits) target = kind == "u" ? Dtype::uint64 : Dtype::int64;
    }
  } else if (kind == "f") {
    target = Dtype::float32;
  } else if (kind == "c") {
    target = Dtype::complex64;
  } else {
    throw nb::type_error(
        ("cannot make an alloy array from a sequence of " + py_str(x.attr("dtype")) + " elements")
            .c_str());
  }
  return python::astype(import_external(x), target, dev);
}

}  // namespace

Array copy_to(const Array& a, Device device) {
  a.eval();
  if (a.device().type == Device::Type::cpu && a.is_row_contiguous() && a.is_evaluated())
    return Array::from_bytes(a.data(), a.shape(), a.dtype(), device);
  std::vector<uint8_t> bytes = a.to_bytes();
  return Array::from_bytes(bytes.data(), a.shape(), a.dtype(), device);
}

Array astype(const Array& a, Dtype dtype, std::optional<Device> device) {
  Device dev = device.value_or(a.device());
  if (a.dtype() == dtype) return copy_to(a, dev);
  // Through float64: exact for every value of the 32-bit and smaller types.
  return Array::from_doubles(a.to_doubles(), a.shape(), dtype, dev);
}

Array to_array(nb::handle value, std::optional<Dtype> dtype, std::optional<Device> device) {
  Device dev = device.value_or(default_device());
  if (is_scalar(value)) return scalar_array(value, dtype, dev);
  if (nb::isinstance<nb::list>(value) || nb::isinstance<nb::tuple>(value))
    return sequence_array(value, dtype, dev);
  Array src = import_external(value);  // alloy.array, NumPy, DLPack, buffer protocol
  return python::astype(src, dtype.value_or(src.dtype()), dev);
}

Array as_input(nb::handle value) {
  if (nb::isinstance<Array>(value)) return nb::cast<Array>(value);
  PyObject* p = value.ptr();
  if (PyBool_Check(p)) return Array(p == Py_True);
  if (PyLong_Check(p)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (!overflow && fits_int32(x)) return Array(static_cast<int>(x));
    return scalar_array(value, std::nullopt, Device::cpu());
  }
  if (PyFloat_Check(p)) return Array(static_cast<float>(PyFloat_AsDouble(p)));
  if (is_scalar(value)) return scalar_array(value, std::nullopt, Device::cpu());
  if (nb::isinstance<nb::list>(value) || nb::isinstance<nb::tuple>(value))
    return sequence_array(value, std::nullopt, Device::cpu());
  return import_external(value);
}

}  // namespace alloy::python
