// alloy.<op>: the built-in ops (include/alloy/ops.h) with MLX's Python signatures, and the array
// operators (+ - * / // % ** comparisons, & | ^ << >> ~, abs, -) and reduction methods. Python
// scalars next to arrays are "weak" as in MLX: `half_array * 2.0` stays float16.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"

namespace alloy::python {
namespace {

bool is_py_scalar(nb::handle h) {
  PyObject* p = h.ptr();
  return PyBool_Check(p) || PyLong_Check(p) || PyFloat_Check(p);
}

// `h` as an op operand next to `other` (when given): a Python scalar takes other's dtype unless
// its kind is wider (MLX's weak scalars); arrays, NumPy arrays and sequences as kernel inputs.
Array operand(nb::handle h, const Array* other) {
  if (nb::isinstance<Array>(h)) return nb::cast<Array>(h);
  if (other && is_py_scalar(h)) {
    PyObject* p = h.ptr();
    if (PyBool_Check(p) && other->dtype() == Dtype::bool_)
      return Array::from_doubles({p == Py_True ? 1.0 : 0.0}, {}, Dtype::bool_,
                                 other->ndim() == 0 ? other->device() : Device::cpu());
    double v = PyFloat_Check(p) ? PyFloat_AsDouble(p) : PyLong_AsDouble(p);
    if (PyErr_Occurred()) throw nb::python_error();
    return scalar_like(v, *other, !PyFloat_Check(p));
  }
  return as_input(h);
}

std::pair<Array, Array> operands(nb::handle a, nb::handle b) {
  if (!is_py_scalar(a)) {
    Array x = operand(a, nullptr);
    return {x, operand(b, &x)};
  }
  if (!is_py_scalar(b)) {
    Array y = operand(b, nullptr);
    return {operand(a, &y), y};
  }
  return {as_input(a), as_input(b)};
}

// axis=None (all), an int, or a sequence of ints.
std::optional<std::vector<int>> axes_arg(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  if (PyLong_Check(h.ptr())) return std::vector<int>{nb::cast<int>(h)};
  return nb::cast<std::vector<int>>(h);
}

Shape shape_arg(nb::handle h) {
  if (PyLong_Check(h.ptr())) return {nb::cast<int64_t>(h)};
  return nb::cast<Shape>(h);
}

// MLX's `stream=`: None, a Stream, or a device (its default stream).
StreamOrDevice to_stream_or_device(nb::handle h) {
  if (nb::isinstance<Stream>(h)) return nb::cast<Stream>(h);
  if (auto d = to_device(h, "stream")) return *d;
  return {};
}

using Unary = Array (*)(const Array&, StreamOrDevice);
using Binary = Array (*)(const Array&, const Array&, StreamOrDevice);

template <class F>
Array with_axes(F f, const Array& a, nb::handle axis, bool keepdims, StreamOrDevice s) {
  auto axes = axes_arg(axis);
  if (!axes) {
    std::vector<int> all(a.ndim());
    for (int i = 0; i < a.ndim(); ++i) all[i] = i;
    return f(a, all, keepdims, s);
  }
  return f(a, *axes, keepdims, s);
}

using Reduction = Array (*)(const Array&, const std::vector<int>&, bool, StreamOrDevice);

Array arg_reduction(bool is_max, const Array& a, nb::handle axis, bool keepdims, StreamOrDevice s) {
  if (axis.is_none()) return is_max ? argmax(a, keepdims, s) : argmin(a, keepdims, s);
  int ax = nb::cast<int>(axis);
  return is_max ? argmax(a, ax, keepdims, s) : argmin(a, ax, keepdims, s);
}

const char* kStreamDoc = " `stream` (a device or stream) says where it runs.";

}  // namespace

void init_ops(nb::module_& m) {
  // ---- unary -------------------------------------------------------------------------------
  struct U {
    const char* name;
    Unary f;
    const char* doc;
  };
  static const U unary[] = {
      {"abs", &abs, "Absolute value."},
      {"negative", &negative, "-a."},
      {"sign", &sign, "-1, 0 or 1 (NaN stays NaN)."},
      {"square", &square, "a * a."},
      {"exp", &exp, "e**a (integers give float32)."},
      {"expm1", &expm1, "exp(a) - 1, accurate near 0."},
      {"log", &log, "Natural logarithm."},
      {"log2", &log2, "Base-2 logarithm."},
      {"log10", &log10, "Base-10 logarithm."},
      {"log1p", &log1p, "log(1 + a), accurate near 0."},
      {"sqrt", &sqrt, "Square root."},
      {"rsqrt", &rsqrt, "1 / sqrt(a)."},
      {"sin", &sin, "Sine."},
      {"cos", &cos, "Cosine."},
      {"tan", &tan, "Tangent."},
      {"tanh", &tanh, "Hyperbolic tangent."},
      {"arcsin", &arcsin, "Inverse sine."},
      {"arccos", &arccos, "Inverse cosine."},
      {"arctan", &arctan, "Inverse tangent."},
      {"sinh", &sinh, "Hyperbolic sine."},
      {"cosh", &cosh, "Hyperbolic cosine."},
      {"sigmoid", &sigmoid, "1 / (1 + exp(-a))."},
      {"erf", &erf, "The error function."},
      {"erfc", &erfc, "1 - erf(a)."},
      {"erfinv", &erfinv, "Inverse of erf."},
      {"floor", &floor, "Floor (integers unchanged)."},
      {"ceil", &ceil, "Ceiling (integers unchanged)."},
      {"logical_not", &logical_not, "not a, as bool."},
      {"bitwise_invert", &bitwise_invert, "~a for integers and bool."},
      {"isnan", &isnan, "Elementwise NaN test."},
      {"isinf", &isinf, "Elementwise infinity test."},
      {"real", &real, "Real part (float32 for complex64; real inputs are returned)."},
      {"imag", &imag, "Imaginary part (float32 for complex64; zeros for real inputs)."},
      {"conjugate", &conjugate, "Complex conjugate (real inputs are returned)."},
      {"conj", &conjugate, "Complex conjugate (alias of conjugate)."},
  };
  for (const auto& u : unary) {
    Unary f = u.f;
    m.def(
        u.name,
        [f](nb::handle a, nb::handle stream) {
          return f(operand(a, nullptr), to_stream_or_device(stream));
        },
        nb::arg("a"), nb::kw_only(), nb::arg("stream") = nb::none(),
        nb::sig((std::string("def ") + u.name +
                 "(a: array | float | int | bool, /, *, stream: Device | DeviceType | Stream | "
                 "None = None) -> array")
                    .c_str()),
        (std::string(u.doc) + kStreamDoc).c_str());
  }
  m.def(
      "round",
      [](nb::handle a, int decimals, nb::handle stream) {
        return round(operand(a, nullptr), decimals, to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("decimals") = 0, nb::kw_only(), nb::arg("stream") = nb::none(),
      "Round half-way cases to even (integers unchanged); with decimals, MLX's\n"
      "round(a * 10**decimals) / 10**decimals (computed in float32 for integers).");

  // ---- binary ------------------------------------------------------------------------------
  struct B {
    const char* name;
    Binary f;
    const char* doc;
  };
  static const B binary[] = {
      {"add", &add, "a + b."},
      {"subtract", &subtract, "a - b."},
      {"multiply", &multiply, "a * b."},
      {"divide", &divide, "a / b (integers give float32)."},
      {"floor_divide", &floor_divide, "a // b (Python's floor division)."},
      {"remainder", &remainder, "a % b (the sign of b, as Python)."},
      {"power", &power, "a ** b."},
      {"maximum", &maximum, "Elementwise maximum (NaN if either is NaN)."},
      {"minimum", &minimum, "Elementwise minimum (NaN if either is NaN)."},
      {"arctan2", &arctan2, "Angle of (b, a) (integers give float32)."},
      {"logaddexp", &logaddexp, "log(exp(a) + exp(b)), without overflow."},
      {"equal", &equal, "a == b."},
      {"not_equal", &not_equal, "a != b."},
      {"less", &less, "a < b."},
      {"less_equal", &less_equal, "a <= b."},
      {"greater", &greater, "a > b."},
      {"greater_equal", &greater_equal, "a >= b."},
      {"logical_and", &logical_and, "a and b, as bool."},
      {"logical_or", &logical_or, "a or b, as bool."},
      {"bitwise_and", &bitwise_and, "a & b (integers and bool)."},
      {"bitwise_or", &bitwise_or, "a | b (integers and bool)."},
      {"bitwise_xor", &bitwise_xor, "a ^ b (integers and bool)."},
      {"left_shift", &left_shift, "a << b (integers)."},
      {"right_shift", &right_shift, "a >> b (integers)."},
  };
  for (const auto& b : binary) {
    Binary f = b.f;
    m.def(
        b.name,
        [f](nb::handle x, nb::handle y, nb::handle stream) {
          auto [p, q] = operands(x, y);
          return f(p, q, to_stream_or_device(stream));
        },
        nb::arg("a"), nb::arg("b"), nb::kw_only(), nb::arg("stream") = nb::none(),
        nb::sig((std::string("def ") + b.name +
                 "(a: array | float | int | bool, b: array | float | int | bool, /, *, stream: "
                 "Device | DeviceType | Stream | None = None) -> array")
                    .c_str()),
        (std::string(b.doc) + " Broadcasting and MLX's type promotion." + kStreamDoc).c_str());
  }

  m.def(
      "where",
      [](nb::handle c, nb::handle x, nb::handle y, nb::handle stream) {
        Array cond = operand(c, nullptr);
        auto [p, q] = operands(x, y);
        return where(cond, p, q, to_stream_or_device(stream));
      },
      nb::arg("condition"), nb::arg("x"), nb::arg("y"), nb::kw_only(),
      nb::arg("stream") = nb::none(), "x where condition is true, else y (broadcast).");
  m.def(
      "clip",
      [](nb::handle a, nb::handle lo, nb::handle hi, nb::handle stream) {
        Array x = operand(a, nullptr);
        std::optional<Array> l, h;
        if (!lo.is_none()) l = operand(lo, &x);
        if (!hi.is_none()) h = operand(hi, &x);
        return clip(x, l, h, to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("a_min"), nb::arg("a_max"), nb::kw_only(),
      nb::arg("stream") = nb::none(), "Values limited to [a_min, a_max] (either may be None).");
  m.def(
      "promote_types",
      [](nb::handle a, nb::handle b) { return promote_types(to_dtype(a), to_dtype(b)); },
      nb::arg("a"), nb::arg("b"), "MLX's type promotion of two dtypes.");

  // ---- reductions --------------------------------------------------------------------------
  struct R {
    const char* name;
    Reduction f;
    const char* doc;
  };
  static const R reductions[] = {
      {"sum", static_cast<Reduction>(&sum), "Sum over `axis` (all axes when None)."},
      {"prod", static_cast<Reduction>(&prod), "Product over `axis`."},
      {"max", static_cast<Reduction>(&max), "Maximum over `axis` (NaN if any is NaN)."},
      {"min", static_cast<Reduction>(&min), "Minimum over `axis` (NaN if any is NaN)."},
      {"all", static_cast<Reduction>(&all), "Whether all are true over `axis`."},
      {"any", static_cast<Reduction>(&any), "Whether any is true over `axis`."},
      {"mean", static_cast<Reduction>(&mean), "Mean over `axis` (float32 for integers)."},
      {"logsumexp", static_cast<Reduction>(&logsumexp), "log(sum(exp(a))) over `axis`, stably."},
  };
  nb::handle cls = nb::type<Array>();
  for (const auto& r : reductions) {
    Reduction f = r.f;
    auto fn = [f](nb::handle a, nb::handle axis, bool keepdims, nb::handle stream) {
      return with_axes(f, operand(a, nullptr), axis, keepdims, to_stream_or_device(stream));
    };
    std::string doc = std::string(r.doc) + " keepdims keeps reduced axes as size 1." + kStreamDoc;
    m.def(r.name, fn, nb::arg("a"), nb::arg("axis") = nb::none(), nb::arg("keepdims") = false,
          nb::kw_only(), nb::arg("stream") = nb::none(), doc.c_str());
    cls.attr(r.name) = nb::cpp_function(fn, nb::is_method(), nb::arg("axis") = nb::none(),
                                        nb::arg("keepdims") = false, nb::kw_only(),
                                        nb::arg("stream") = nb::none(), doc.c_str());
  }
  auto var_fn = [](nb::handle a, nb::handle axis, bool keepdims, int ddof, nb::handle stream) {
    auto f = [ddof](const Array& x, const std::vector<int>& ax, bool k, StreamOrDevice s) {
      return var(x, ax, k, ddof, s);
    };
    return with_axes(f, operand(a, nullptr), axis, keepdims, to_stream_or_device(stream));
  };
  m.def("var", var_fn, nb::arg("a"), nb::arg("axis") = nb::none(), nb::arg("keepdims") = false,
        nb::arg("ddof") = 0, nb::kw_only(), nb::arg("stream") = nb::none(),
        "Variance over `axis` with `ddof` delta degrees of freedom.");
  cls.attr("var") = nb::cpp_function(var_fn, nb::is_method(), nb::arg("axis") = nb::none(),
                                     nb::arg("keepdims") = false, nb::arg("ddof") = 0,
                                     nb::kw_only(), nb::arg("stream") = nb::none());
  m.def(
      "softmax",
      [](nb::handle a, nb::handle axis, bool precise, nb::handle stream) {
        auto f = [precise](const Array& x, const std::vector<int>& ax, bool, StreamOrDevice s) {
          return softmax(x, ax, precise, s);
        };
        return with_axes(f, operand(a, nullptr), axis, false, to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("axis") = nb::none(), nb::kw_only(), nb::arg("precise") = false,
      nb::arg("stream") = nb::none(), "exp(a) / sum(exp(a)) over `axis`, stably.");
  for (bool is_max : {true, false}) {
    auto fn = [is_max](nb::handle a, nb::handle axis, bool keepdims, nb::handle stream) {
      return arg_reduction(is_max, operand(a, nullptr), axis, keepdims,
                           to_stream_or_device(stream));
    };
    const char* name = is_max ? "argmax" : "argmin";
    const char* doc = is_max ? "Index (uint32) of the first maximum over `axis` (flattened when "
                               "None)."
                             : "Index (uint32) of the first minimum over `axis` (flattened when "
                               "None).";
    m.def(name, fn, nb::arg("a"), nb::arg("axis") = nb::none(), nb::arg("keepdims") = false,
          nb::kw_only(), nb::arg("stream") = nb::none(), doc);
    cls.attr(name) = nb::cpp_function(fn, nb::is_method(), nb::arg("axis") = nb::none(),
                                      nb::arg("keepdims") = false, nb::kw_only(),
                                      nb::arg("stream") = nb::none(), doc);
  }

  // ---- shapes and creation -------------------------------------------------------------------
  m.def(
      "reshape",
      [](nb::handle a, nb::handle shape, nb::handle stream) {
        return reshape(operand(a, nullptr), shape_arg(shape), to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("shape"), nb::kw_only(), nb::arg("stream") = nb::none(),
      "The same elements in a new shape (a view when possible; one dimension may be -1).");
  cls.attr("reshape") = nb::cpp_function(
      [](const Array& a, nb::args shape) {
        if (shape.size() == 1 && !PyLong_Check(shape[0].ptr()))
          return reshape(a, shape_arg(shape[0]));
        return reshape(a, nb::cast<Shape>(shape));
      },
      nb::is_method(),
      "The same elements in a new shape (`a.reshape(2, 3)` or `a.reshape((2, 3))`).");
  m.def(
      "transpose",
      [](nb::handle a, std::optional<std::vector<int>> axes, nb::handle stream) {
        Array x = operand(a, nullptr);
        return axes ? transpose(x, *axes, to_stream_or_device(stream))
                    : transpose(x, to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("axes") = nb::none(), nb::kw_only(), nb::arg("stream") = nb::none(),
      "A view with the axes permuted (reversed when None).");
  m.def(
      "swapaxes",
      [](nb::handle a, int a1, int a2, nb::handle stream) {
        return swapaxes(operand(a, nullptr), a1, a2, to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("axis1"), nb::arg("axis2"), nb::kw_only(),
      nb::arg("stream") = nb::none(), "A view with two axes exchanged.");
  m.def(
      "broadcast_to",
      [](nb::handle a, nb::handle shape, nb::handle stream) {
        return broadcast_to(operand(a, nullptr), shape_arg(shape), to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("shape"), nb::kw_only(), nb::arg("stream") = nb::none(),
      "A broadcast view (stride 0 along broadcast axes).");
  m.def(
      "expand_dims",
      [](nb::handle a, nb::handle axis, nb::handle stream) {
        return expand_dims(operand(a, nullptr), *axes_arg(axis), to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("axis"), nb::kw_only(), nb::arg("stream") = nb::none(),
      "A view with size-1 axes inserted.");
  auto squeeze_fn = [](nb::handle a, nb::handle axis, nb::handle stream) {
    Array x = operand(a, nullptr);
    auto axes = axes_arg(axis);
    return axes ? squeeze(x, *axes, to_stream_or_device(stream))
                : squeeze(x, to_stream_or_device(stream));
  };
  m.def("squeeze", squeeze_fn, nb::arg("a"), nb::arg("axis") = nb::none(), nb::kw_only(),
        nb::arg("stream") = nb::none(), "A view without the given (or all) size-1 axes.");
  cls.attr("squeeze") = nb::cpp_function(
      [squeeze_fn](nb::handle a, nb::handle axis) { return squeeze_fn(a, axis, nb::none()); },
      nb::is_method(), nb::arg("axis") = nb::none());
  auto arrays_arg = [](nb::handle seq) {
    std::vector<Array> v;
    for (nb::handle h : seq) v.push_back(operand(h, nullptr));
    return v;
  };
  m.def(
      "concatenate",
      [arrays_arg](nb::handle arrays, int axis, nb::handle stream) {
        return concatenate(arrays_arg(arrays), axis, to_stream_or_device(stream));
      },
      nb::arg("arrays"), nb::arg("axis") = 0, nb::kw_only(), nb::arg("stream") = nb::none(),
      "The arrays joined along an existing axis (dtypes promoted).");
  m.def(
      "stack",
      [arrays_arg](nb::handle arrays, int axis, nb::handle stream) {
        return stack(arrays_arg(arrays), axis, to_stream_or_device(stream));
      },
      nb::arg("arrays"), nb::arg("axis") = 0, nb::kw_only(), nb::arg("stream") = nb::none(),
      "The arrays joined along a new axis.");
  m.def(
      "ones",
      [](nb::handle shape, nb::handle dtype, nb::handle stream) {
        return ones(shape_arg(shape), dtype.is_none() ? Dtype::float32 : to_dtype(dtype),
                    to_stream_or_device(stream));
      },
      nb::arg("shape"), nb::arg("dtype") = nb::none(), nb::kw_only(),
      nb::arg("stream") = nb::none(), "An array of ones (float32 unless `dtype`).");
  m.def(
      "zeros_like",
      [](const Array& a, nb::handle stream) { return zeros_like(a, to_stream_or_device(stream)); },
      nb::arg("a"), nb::kw_only(), nb::arg("stream") = nb::none(), "Zeros of a's shape and dtype.");
  m.def(
      "ones_like",
      [](const Array& a, nb::handle stream) { return ones_like(a, to_stream_or_device(stream)); },
      nb::arg("a"), nb::kw_only(), nb::arg("stream") = nb::none(), "Ones of a's shape and dtype.");

  // ---- operators ---------------------------------------------------------------------------
  auto bin = [&](const char* name, Binary f, bool reflected) {
    cls.attr(name) = nb::cpp_function(
        [f, reflected](nb::handle self, nb::handle other) {
          auto [p, q] = reflected ? operands(other, self) : operands(self, other);
          return f(p, q, StreamOrDevice{});
        },
        nb::is_method());
  };
  struct Op {
    const char* name;
    const char* rname;
    Binary f;
  };
  static const Op operators[] = {
      {"__add__", "__radd__", &add},
      {"__sub__", "__rsub__", &subtract},
      {"__mul__", "__rmul__", &multiply},
      {"__truediv__", "__rtruediv__", &divide},
      {"__floordiv__", "__rfloordiv__", &floor_divide},
      {"__mod__", "__rmod__", &remainder},
      {"__pow__", "__rpow__", &power},
      {"__and__", "__rand__", &bitwise_and},
      {"__or__", "__ror__", &bitwise_or},
      {"__xor__", "__rxor__", &bitwise_xor},
      {"__lshift__", "__rlshift__", &left_shift},
      {"__rshift__", "__rrshift__", &right_shift},
      {"__eq__", nullptr, &equal},
      {"__ne__", nullptr, &not_equal},
      {"__lt__", nullptr, &less},
      {"__le__", nullptr, &less_equal},
      {"__gt__", nullptr, &greater},
      {"__ge__", nullptr, &greater_equal},
  };
  for (const auto& o : operators) {
    bin(o.name, o.f, false);
    if (o.rname) bin(o.rname, o.f, true);
  }
  // Arrays compare elementwise, so they cannot be dict keys (as numpy and MLX arrays).
  cls.attr("__hash__") = nb::none();
  cls.attr("__neg__") =
      nb::cpp_function([](const Array& a) { return negative(a); }, nb::is_method());
  cls.attr("__abs__") = nb::cpp_function([](const Array& a) { return abs(a); }, nb::is_method());
  cls.attr("__invert__") =
      nb::cpp_function([](const Array& a) { return bitwise_invert(a); }, nb::is_method());
  // ---- matrix products (src/ops/matmul.cpp, src/ops/quantized.cpp) ------------------------
  m.def(
      "matmul",
      [](nb::handle a, nb::handle b, nb::handle stream) {
        return matmul(as_input(a), as_input(b), to_stream_or_device(stream));
      },
      nb::arg("a"), nb::arg("b"), nb::kw_only(), nb::arg("stream") = nb::none(),
      "Matrix product (numpy/MLX semantics: 1-D promotion, batch broadcasting; floating dtypes). "
      "OpenBLAS on the CPU, cuBLAS on CUDA.");
  m.def(
      "blas_library",
      [](nb::handle device) {
        std::optional<Device> d = to_device(device, "device");
        return blas_library(d ? *d : Device::cpu());
      },
      nb::arg("device") = nb::none(),
      nb::sig("def blas_library(device: Device | DeviceType | None = None) -> str"),
      "The BLAS library `device`'s matmul (default: the CPU's) runs through, loaded now if it "
      "was not: on the CPU the "
      "OpenBLAS file and its configuration string (ALLOY_OPENBLAS's file, else an OpenBLAS "
      "already loaded in the process such as numpy's, whose thread pool is then shared, else "
      "numpy's bundled one, loaded here and then shared with numpy, else the system's "
      "libopenblas.so.0), on CUDA the cuBLAS file. Raises NotSupportedError when "
      "none loads.");
  m.def("_add_cpu_blas_candidate", &add_cpu_blas_candidate, nb::arg("file"),
        "An OpenBLAS file for the CPU's matmul to try after ALLOY_OPENBLAS's file and an "
        "OpenBLAS already loaded, before the system's (alloy's __init__ names numpy's bundled "
        "one). False, and nothing added, once the library has been chosen (at the first CPU "
        "product).");
  cls.attr("__matmul__") = nb::cpp_function(
      [](const Array& a, nb::handle b) { return matmul(a, as_input(b)); }, nb::is_method());
  cls.attr("__rmatmul__") = nb::cpp_function(
      [](const Array& b, nb::handle a) { return matmul(as_input(a), b); }, nb::is_method());
  m.def(
      "quantize",
      [](nb::handle w, int group_size, int bits, nb::handle stream) {
        auto r = quantize(as_input(w), group_size, bits, to_stream_or_device(stream));
        return nb::make_tuple(r[0], r[1], r[2]);
      },
      nb::arg("w"), nb::arg("group_size") = 64, nb::arg("bits") = 4, nb::kw_only(),
      nb::arg("stream") = nb::none(),
      "MLX's affine quantization: (w_q uint32, scales, biases) per group along the last axis.");
  m.def(
      "dequantize",
      [](nb::handle w, nb::handle scales, nb::handle biases, int group_size, int bits,
         nb::handle stream) {
        return dequantize(as_input(w), as_input(scales), as_input(biases), group_size, bits,
                          to_stream_or_device(stream));
      },
      nb::arg("w"), nb::arg("scales"), nb::arg("biases"), nb::arg("group_size") = 64,
      nb::arg("bits") = 4, nb::kw_only(), nb::arg("stream") = nb::none(),
      "The inverse of quantize: scales * q + biases.");
  m.def(
      "quantized_matmul",
      [](nb::handle x, nb::handle w, nb::handle scales, nb::handle biases, bool transpose,
         int group_size, int bits, nb::handle stream) {
        return quantized_matmul(as_input(x), as_input(w), as_input(scales), as_input(biases),
                                transpose, group_size, bits, to_stream_or_device(stream));
      },
      nb::arg("x"), nb::arg("w"), nb::arg("scales"), nb::arg("biases"), nb::arg("transpose") = true,
      nb::arg("group_size") = 64, nb::arg("bits") = 4, nb::kw_only(),
      nb::arg("stream") = nb::none(),
      "x @ dequantize(w).T (transpose) or x @ dequantize(w), without dequantizing w.");
  m.def(
      "gather_qmm",
      [](nb::handle x, nb::handle w, nb::handle scales, nb::handle biases, nb::handle lhs,
         nb::handle rhs, bool transpose, int group_size, int bits, bool /*sorted_indices*/,
         nb::handle stream) {
        std::optional<Array> l, r;
        if (!lhs.is_none()) l = as_input(lhs);
        if (!rhs.is_none()) r = as_input(rhs);
        return gather_qmm(as_input(x), as_input(w), as_input(scales), as_input(biases), l, r,
                          transpose, group_size, bits, to_stream_or_device(stream));
      },
      nb::arg("x"), nb::arg("w"), nb::arg("scales"), nb::arg("biases"),
      nb::arg("lhs_indices") = nb::none(), nb::arg("rhs_indices") = nb::none(),
      nb::arg("transpose") = true, nb::arg("group_size") = 64, nb::arg("bits") = 4, nb::kw_only(),
      nb::arg("sorted_indices") = false, nb::arg("stream") = nb::none(),
      "MLX's gather_qmm: x[lhs_indices] @ W[rhs_indices] for stacks of quantized matrices "
      "(sorted_indices is a hint MLX uses; accepted and not needed here).");

  for (const auto& u : unary) {
    std::string n = u.name;
    if (n == "abs" || n == "exp" || n == "log" || n == "log1p" || n == "sqrt" || n == "rsqrt" ||
        n == "square" || n == "sin" || n == "cos")
      cls.attr(u.name) = nb::cpp_function(
          [f = u.f](const Array& a) { return f(a, StreamOrDevice{}); }, nb::is_method(), u.doc);
  }
}

}  // namespace alloy::python
