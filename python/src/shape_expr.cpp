// alloy.ShapeExpr: a kernel call's geometry as an expression of its inputs' shapes, and the
// conversion of geometry lambdas (`grid=lambda shapes: (shapes[0][0], 1, 1)`) into such
// expressions, so that a traced call (compile, export) follows new input sizes.
#include <nanobind/operators.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace alloy::python {

namespace {

bool is_sequence(nb::handle h) {
  return PyList_Check(h.ptr()) || PyTuple_Check(h.ptr());
}

ShapeExpr to_expr(nb::handle h, const char* name) {
  ShapeExpr e;
  if (nb::try_cast<ShapeExpr>(h, e, /*convert=*/false)) return e;
  if (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) return ShapeExpr(nb::cast<int64_t>(h));
  if (PyIndex_Check(h.ptr()) && !PyBool_Check(h.ptr()))  // numpy integers
    return ShapeExpr(nb::cast<int64_t>(nb::steal(PyNumber_Index(h.ptr()))));
  throw nb::type_error((std::string("[metal_kernel] Expected `") + name +
                        "` to hold ints or alloy.ShapeExpr values, got " +
                        nb::inst_name(h).c_str() + ".")
                           .c_str());
}

}  // namespace

nb::object resolve_geometry(nb::handle value, const std::vector<Array>& inputs) {
  if (!value.is_valid() || !PyCallable_Check(value.ptr()) || nb::isinstance<ShapeExpr>(value))
    return nb::borrow(value);
  nb::list symbolic, concrete;
  for (size_t i = 0; i < inputs.size(); ++i) {
    nb::list dims, values;
    for (int ax = 0; ax < inputs[i].ndim(); ++ax) {
      dims.append(nb::cast(ShapeExpr::dim(static_cast<int>(i), ax)));
      values.append(inputs[i].shape(ax));
    }
    symbolic.append(nb::tuple(dims));
    concrete.append(nb::tuple(values));
  }
  try {
    return value(symbolic);
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_TypeError)) throw;
  }
  // Not expressible (comparisons, int(), math.ceil...): the value for these shapes only.
  return value(concrete);
}

bool holds_shape_expr(nb::handle value) {
  if (!value.is_valid()) return false;
  if (nb::isinstance<ShapeExpr>(value)) return true;
  if (!is_sequence(value)) return false;
  for (nb::handle item : value)
    if (holds_shape_expr(item)) return true;
  return false;
}

DimsExpr to_dims_expr(nb::handle value, const char* name) {
  if (!is_sequence(value) || nb::len(value) != 3)
    throw nb::type_error((std::string("[metal_kernel] Expected `") + name +
                          "` to be a tuple of 3 ints or alloy.ShapeExpr values (or a function "
                          "of the input shapes returning one).")
                             .c_str());
  DimsExpr d;
  for (size_t i = 0; i < 3; ++i) d[i] = to_expr(value[i], name);
  return d;
}

std::vector<std::vector<ShapeExpr>> to_shape_exprs(nb::handle value) {
  if (!is_sequence(value))
    throw nb::type_error(
        "[metal_kernel] Expected `output_shapes` to be a list of shapes (or a function of the "
        "input shapes returning one).");
  std::vector<std::vector<ShapeExpr>> out;
  for (nb::handle shape : value) {
    if (!is_sequence(shape))
      throw nb::type_error("[metal_kernel] Expected each output shape to be a tuple.");
    std::vector<ShapeExpr> dims;
    for (nb::handle d : shape) dims.push_back(to_expr(d, "output_shapes"));
    out.push_back(std::move(dims));
  }
  return out;
}

void init_shape_expr(nb::module_& m) {
  using E = ShapeExpr;
  nb::class_<E> cls(m, "ShapeExpr", R"(A dimension computed from the input shapes of a kernel call.

A kernel call's ``grid``, ``threadgroup`` and ``output_shapes`` may be functions of the inputs'
shapes, e.g. ``grid=lambda shapes: (shapes[0][0] * shapes[0][1], 1, 1)``: the function is called
once with symbolic shapes (each dimension a ShapeExpr) and its result is kept as expressions, so
the call stays right when a compiled (``alloy.compile(..., shapeless=True)``) or exported
function runs on new sizes. ShapeExprs support ``+``, ``-``, ``*``, ``//`` (floor division) and
``ShapeExpr.ceil_div`` / ``min`` / ``max``; a function that compares them or converts them to
int is called with the concrete shapes instead (its geometry is then fixed for those shapes).)");
  cls.def(nb::init<int64_t>(), nb::arg("value") = 0, "A constant.")
      .def_static("dim", &E::dim, nb::arg("input"), nb::arg("axis"),
                  "inputs[input].shape[axis] (a negative axis counts from the end).")
      .def_static("size", &E::size, nb::arg("input"), "inputs[input].size (elements).")
      .def_static("ceil_div", &E::ceil_div, nb::arg("a"), nb::arg("b"), "ceil(a / b).")
      .def_static("min", &E::min, nb::arg("a"), nb::arg("b"), "min(a, b).")
      .def_static("max", &E::max, nb::arg("a"), nb::arg("b"), "max(a, b).")
      .def(
          "eval", [](const E& e, const std::vector<Shape>& shapes) { return e.eval(shapes); },
          nb::arg("input_shapes"), "The value for inputs of these shapes.")
      .def_prop_ro("is_constant", &E::is_constant, "Whether it depends on no input shape.")
      .def(
          "__add__", [](const E& a, const E& b) { return a + b; }, nb::is_operator())
      .def(
          "__radd__", [](const E& a, const E& b) { return b + a; }, nb::is_operator())
      .def(
          "__sub__", [](const E& a, const E& b) { return a - b; }, nb::is_operator())
      .def(
          "__rsub__", [](const E& a, const E& b) { return b - a; }, nb::is_operator())
      .def(
          "__mul__", [](const E& a, const E& b) { return a * b; }, nb::is_operator())
      .def(
          "__rmul__", [](const E& a, const E& b) { return b * a; }, nb::is_operator())
      .def(
          "__floordiv__", [](const E& a, const E& b) { return a / b; }, nb::is_operator())
      .def(
          "__rfloordiv__", [](const E& a, const E& b) { return b / a; }, nb::is_operator())
      .def("__neg__", [](const E& a) { return E(0) - a; })
      .def("__bool__",
           [](const E&) -> bool {
             throw nb::type_error("a ShapeExpr has no truth value (its value depends on shapes)");
           })
      .def("__repr__", [](const E& e) { return "ShapeExpr(" + e.str() + ")"; })
      .def("__str__", &E::str);
  nb::implicitly_convertible<int64_t, E>();
}

}  // namespace alloy::python
