// export_function / import_function / exporter: MLX's mx.export_function API over
// include/alloy/export.h (docs/export.md).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace alloy::python {

namespace {

Args to_args(nb::args args) {
  Args out;
  for (nb::handle h : args)
    out.push_back(nb::isinstance<Array>(h) ? nb::cast<Array>(h)
                                           : to_array(h, std::nullopt, std::nullopt));
  return out;
}

Kwargs to_kwargs(nb::kwargs kwargs) {
  Kwargs out;
  for (auto [k, v] : kwargs)
    out.emplace(nb::cast<std::string>(k), nb::isinstance<Array>(v)
                                              ? nb::cast<Array>(v)
                                              : to_array(v, std::nullopt, std::nullopt));
  return out;
}

// The traced Python function: called with alloy arrays; returns an array or a list/tuple of them.
std::function<Args(const Args&, const Kwargs&)> wrap(nb::object fn) {
  if (!PyCallable_Check(fn.ptr())) throw nb::type_error("export_function: `fun` is not callable");
  return [fn](const Args& args, const Kwargs& kwargs) {
    nb::list a;
    for (auto& x : args) a.append(nb::cast(x));
    nb::dict kw;
    for (auto& [k, v] : kwargs) kw[nb::str(k.c_str())] = nb::cast(v);
    nb::object r = fn(*a, **kw);
    Args out;
    if (nb::isinstance<Array>(r)) {
      out.push_back(nb::cast<Array>(r));
    } else if (nb::isinstance<nb::list>(r) || nb::isinstance<nb::tuple>(r)) {
      for (nb::handle h : r) {
        if (!nb::isinstance<Array>(h))
          throw nb::type_error("export_function: the function must return alloy arrays");
        out.push_back(nb::cast<Array>(h));
      }
    } else {
      throw nb::type_error(
          "export_function: the function must return an alloy array or a list/tuple of them");
    }
    return out;
  };
}

}  // namespace

void init_export(nb::module_& m) {
  static nb::object untrusted = nb::steal(PyErr_NewExceptionWithDoc(
      "alloy.UntrustedKernelsError",
      "import_function refused a file holding kernels without consent: pass trust_kernels=True "
      "or allowed_kernels={hashes}. The message lists the kernels and their SHA-256 hashes.",
      PyExc_ValueError, nullptr));
  m.attr("UntrustedKernelsError") = untrusted;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const UntrustedKernels& e) {
      PyErr_SetString(untrusted.ptr(), e.what());
    }
  });

  m.def(
      "export_function",
      [](const std::string& file, nb::object fun, nb::args args, bool shapeless,
         nb::kwargs kwargs) {
        auto ex = exporter(file, wrap(fun), shapeless);
        ex(to_args(args), to_kwargs(kwargs));
      },
      nb::arg("file"), nb::arg("fun"), nb::arg("args"), nb::kw_only(), nb::arg("shapeless") = false,
      nb::arg("kwargs"),
      "Traces ``fun`` on arrays shaped like ``args``/``kwargs`` (values are not read) and writes "
      "it to ``file`` in Alloy's format, as ``mx.export_function``. ``shapeless=True``: the "
      "imported function accepts other shapes of the same dtypes and ranks. Works without a GPU.");

  nb::class_<FunctionExporter>(m, "FunctionExporter",
                               "Several traces of one function in one file (``alloy.exporter``).")
      .def(
          "__call__",
          [](FunctionExporter& self, nb::args args, nb::kwargs kwargs) {
            self(to_args(args), to_kwargs(kwargs));
          },
          nb::arg("args"), nb::arg("kwargs"), "Adds a trace for these arguments.")
      .def("__enter__", [](nb::object self) { return self; })
      .def(
          "__exit__", [](FunctionExporter&, nb::args) {}, nb::arg("args"))
      .def(
          "close", [](FunctionExporter&) {}, "The file is complete after every call already.");
  m.def(
      "exporter",
      [](const std::string& file, nb::object fun, bool shapeless) {
        return exporter(file, wrap(fun), shapeless);
      },
      nb::arg("file"), nb::arg("fun"), nb::kw_only(), nb::arg("shapeless") = false,
      "An exporter: call it once per input signature, as ``mx.exporter``.");

  nb::class_<ImportedFunction>(
      m, "ImportedFunction",
      "A function read by ``alloy.import_function``: call it with arrays (positional and "
      "keyword), as the function was exported; returns a list of arrays.")
      .def(
          "__call__",
          [](const ImportedFunction& f, nb::args args, nb::kwargs kwargs) {
            return f(to_args(args), to_kwargs(kwargs));
          },
          nb::arg("args"), nb::arg("kwargs"))
      .def_prop_ro("format", &ImportedFunction::format, "\"alloy\" or \"mlxfn\".")
      .def_prop_ro("shapeless", &ImportedFunction::shapeless)
      .def_prop_ro(
          "kernels",
          [](const ImportedFunction& f) {
            nb::list out;
            for (auto& k : f.kernels()) {
              nb::dict d;
              d["name"] = k.name;
              d["sha256"] = k.sha256;
              d["metal_source"] = k.metal_source;
              out.append(d);
            }
            return out;
          },
          "The file's kernels: name, sha256 (trust hash) and metal_source.")
      .def("describe", &ImportedFunction::describe, "A readable listing of the file.");

  m.def(
      "import_function",
      [](const std::string& file, bool trust_kernels, std::optional<std::set<std::string>> allowed,
         nb::handle device) {
        ImportOptions o;
        o.trust_kernels = trust_kernels;
        if (allowed) o.allowed_kernels = *allowed;
        o.device = to_device(device, "device");
        return import_function(file, o);
      },
      nb::arg("file"), nb::kw_only(), nb::arg("trust_kernels") = false,
      nb::arg("allowed_kernels") = nb::none(), nb::arg("device") = nb::none(),
      "Reads a function exported by ``alloy.export_function`` or by MLX's "
      "``mx.export_function`` (``.mlxfn``). Files with kernels need ``trust_kernels=True`` or "
      "their SHA-256 hashes in ``allowed_kernels`` (else ``alloy.UntrustedKernelsError`` lists "
      "them). Runs on ``device`` (default: the default device).");
  m.def("describe_exported_function", &describe_exported_function, nb::arg("file"),
        "The listing of an exported file (either format), without consent: nothing is compiled.");
}

}  // namespace alloy::python
