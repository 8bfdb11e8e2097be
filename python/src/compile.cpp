// The C++ half of alloy.compile: alloy.CompiledFunction over a Python function of a flat list of
// arrays (python/alloy/_compile.py flattens arguments and outputs and keys non-array arguments).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace alloy::python {

namespace {

std::vector<Array> to_arrays(nb::handle list) {
  std::vector<Array> out;
  for (nb::handle h : list) out.push_back(as_input(h));
  return out;
}

}  // namespace

void init_compile(nb::module_& m) {
  nb::class_<CompiledFunction>(m, "_CompiledArrays",
                               "compile() of a function of a list of arrays returning a list of "
                               "arrays (alloy.compile wraps it).")
      .def(
          "__init__",
          [](CompiledFunction* self, nb::object fn, bool shapeless) {
            if (!PyCallable_Check(fn.ptr())) throw nb::type_error("compile: fn is not callable");
            // The function runs only while tracing, from a call made with the GIL held.
            auto traced = [fn](const std::vector<Array>& inputs) {
              nb::gil_scoped_acquire gil;
              nb::object out = fn(nb::cast(inputs));
              std::vector<Array> arrays;
              if (!nb::try_cast(out, arrays))
                throw nb::type_error(
                    "compile: the function must return arrays (or nested tuples, lists and "
                    "dicts of arrays)");
              return arrays;
            };
            new (self) CompiledFunction(compile(traced, shapeless));
          },
          nb::arg("fn"), nb::arg("shapeless") = false)
      .def(
          "__call__",
          [](const CompiledFunction& f, nb::handle inputs) { return f(to_arrays(inputs)); },
          nb::arg("inputs"))
      .def_prop_ro("trace_count", &CompiledFunction::trace_count,
                   "How many times the function has been traced.")
      .def(
          "graph",
          [](const CompiledFunction& f, nb::handle inputs) { return f.graph(to_arrays(inputs)); },
          nb::arg("inputs"), "Labels of the optimized graph's primitives for such inputs.")
      .def(
          "constant_count",
          [](const CompiledFunction& f, nb::handle inputs) {
            return f.constant_count(to_arrays(inputs));
          },
          nb::arg("inputs"), "Number of constants of the optimized graph for such inputs.");
}

}  // namespace alloy::python
