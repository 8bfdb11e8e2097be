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

// The Python function a call may trace. It is passed with every call rather than held by the
// C++ object: a reference held in C++ is invisible to Python's garbage collector, and a module
// level compiled function reaches itself through its function's globals (a cycle never freed).
thread_local PyObject* g_traced = nullptr;

struct TracedScope {
  PyObject* saved;
  explicit TracedScope(nb::handle fn) : saved(g_traced) {
    if (!PyCallable_Check(fn.ptr())) throw nb::type_error("compile: fn is not callable");
    g_traced = fn.ptr();
  }
  ~TracedScope() { g_traced = saved; }
};

std::vector<Array> call_traced(const std::vector<Array>& inputs) {
  if (!g_traced) throw std::logic_error("compile: traced outside a call");
  nb::gil_scoped_acquire gil;
  nb::object out = nb::handle(g_traced)(nb::cast(inputs));
  std::vector<Array> arrays;
  if (!nb::try_cast(out, arrays))
    throw nb::type_error(
        "compile: the function must return arrays (or nested tuples, lists and dicts of "
        "arrays)");
  return arrays;
}

}  // namespace

void init_compile(nb::module_& m) {
  nb::class_<CompiledFunction>(m, "_CompiledArrays",
                               "compile() of a function of a list of arrays returning a list of "
                               "arrays; each call passes the function (alloy.compile wraps it).")
      .def(
          "__init__",
          [](CompiledFunction* self, bool shapeless) {
            new (self) CompiledFunction(compile(call_traced, shapeless));
          },
          nb::arg("shapeless") = false)
      .def(
          "__call__",
          [](const CompiledFunction& f, nb::handle inputs, nb::handle fn) {
            TracedScope scope(fn);
            return f(to_arrays(inputs));
          },
          nb::arg("inputs"), nb::arg("fn"))
      .def_prop_ro("trace_count", &CompiledFunction::trace_count,
                   "How many times the function has been traced.")
      .def(
          "graph",
          [](const CompiledFunction& f, nb::handle inputs, nb::handle fn) {
            TracedScope scope(fn);
            return f.graph(to_arrays(inputs));
          },
          nb::arg("inputs"), nb::arg("fn"),
          "Labels of the optimized graph's primitives for such inputs.")
      .def(
          "constant_count",
          [](const CompiledFunction& f, nb::handle inputs, nb::handle fn) {
            TracedScope scope(fn);
            return f.constant_count(to_arrays(inputs));
          },
          nb::arg("inputs"), nb::arg("fn"),
          "Number of constants of the optimized graph for such inputs.");
}

}  // namespace alloy::python
