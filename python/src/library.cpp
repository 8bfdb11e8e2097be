// alloy.compile_shader: whole Metal libraries (include/alloy/library.h), called the way
// torch.mps.compile_shader's are: each kernel is an attribute of the library, called with its
// buffers and scalars in declaration order, `threads` (TOTAL threads, Metal dispatchThreads) and
// `group_size`. A call returns the new contents of the buffers the kernel writes (copy-on-write:
// the arrays given are not modified). References are Python callables.
#include "alloy/library.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"

namespace alloy::python {
namespace {

PyObject* g_check_error = nullptr;  // alloy.CheckError, kept for the process

[[noreturn]] void bad(const std::string& what, nb::handle got) {
  throw nb::type_error(
      ("[compile_shader] " + what + ", got " + nb::inst_name(got).c_str() + ".").c_str());
}

// An int, or a sequence of 1 to 3 ints (missing dimensions are 1).
Dims to_dims(nb::handle h, const char* name) {
  Dims d{1, 1, 1};
  auto one = [&](nb::handle v) -> int {
    if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
      bad(std::string("expected `") + name + "` to be an int or up to 3 ints", v);
    long long x = nb::cast<long long>(nb::steal(PyNumber_Index(v.ptr())));
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      throw nb::value_error(
          (std::string("[compile_shader] `") + name + "` is out of range").c_str());
    return static_cast<int>(x);
  };
  if (PyIndex_Check(h.ptr()) && !PyBool_Check(h.ptr())) {
    d[0] = one(h);
    return d;
  }
  if (!PySequence_Check(h.ptr()) || PyUnicode_Check(h.ptr()))
    bad(std::string("expected `") + name + "` to be an int or up to 3 ints", h);
  nb::sequence seq = nb::borrow<nb::sequence>(h);
  size_t n = nb::len(seq);
  if (n < 1 || n > 3) bad(std::string("expected `") + name + "` to hold 1 to 3 ints", h);
  for (size_t i = 0; i < n; ++i) d[i] = one(seq[i]);
  return d;
}

bool is_numpy_scalar(nb::handle h) {
  nb::handle type = reinterpret_cast<PyObject*>(Py_TYPE(h.ptr()));
  nb::object mod = nb::getattr(type, "__module__", nb::none());
  if (!nb::isinstance<nb::str>(mod) || nb::cast<std::string>(mod) != "numpy") return false;
  return !nb::hasattr(h, "__array_interface__") || !nb::hasattr(h, "__len__");
}

// One argument: None (omitted), a Python/NumPy number (converted to the parameter's type), or
// anything alloy.array accepts (alloy arrays as they are, DLPack/buffer objects without a copy).
KernelArg to_arg(nb::handle h) {
  PyObject* p = h.ptr();
  if (h.is_none()) return {};
  if (PyBool_Check(p)) return KernelArg(p == Py_True);
  if (PyLong_Check(p)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (!overflow) return KernelArg(static_cast<int64_t>(v));
    unsigned long long u = PyLong_AsUnsignedLongLong(p);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      throw nb::value_error("[compile_shader] integer argument out of the 64-bit range");
    }
    return KernelArg(static_cast<uint64_t>(u));
  }
  if (PyFloat_Check(p)) return KernelArg(PyFloat_AsDouble(p));
  if (is_numpy_scalar(h)) return to_arg(h.attr("item")());
  return KernelArg(as_input(h));
}

// A Python callable as a ReferenceFn: called with alloy arrays (None for omitted outputs); returns
// an array, or a tuple/list of arrays (one per writable buffer). The callable is released with
// the GIL held (delete_with_gil).
ReferenceFn wrap_reference(nb::handle fn) {
  if (fn.is_none()) return {};
  if (!PyCallable_Check(fn.ptr())) bad("expected a reference to be callable", fn);
  std::shared_ptr<nb::object> callable(new nb::object(nb::borrow(fn)), delete_with_gil<nb::object>);
  return [callable](const std::vector<Array>& args) {
    nb::gil_scoped_acquire gil;
    nb::list py_args;
    for (auto& a : args) py_args.append(a.valid() ? nb::cast(a) : nb::none());
    nb::object r = (*callable)(*nb::tuple(py_args));
    std::vector<Array> out;
    if (r.is_none()) return out;
    if (nb::isinstance<nb::tuple>(r) || nb::isinstance<nb::list>(r)) {
      for (nb::handle item : r) out.push_back(as_input(item));
    } else {
      out.push_back(as_input(r));
    }
    return out;
  };
}

nb::object outputs_to_py(std::vector<Array> out) {
  if (out.empty()) return nb::none();
  if (out.size() == 1) return nb::cast(std::move(out[0]));
  nb::list l;
  for (auto& a : out) l.append(nb::cast(std::move(a)));
  return nb::tuple(l);
}

const char* kind_name(KernelParamInfo::Kind k) {
  switch (k) {
    case KernelParamInfo::Kind::buffer:
      return "buffer";
    case KernelParamInfo::Kind::scalar:
      return "scalar";
    case KernelParamInfo::Kind::threadgroup:
      return "threadgroup";
    case KernelParamInfo::Kind::attribute:
      return "attribute";
  }
  return "";
}

nb::list params_to_py(const KernelInfo& info) {
  nb::list l;
  for (auto& p : info.params) {
    nb::dict d;
    d["name"] = p.name;
    d["kind"] = kind_name(p.kind);
    d["index"] = p.index;
    d["type"] = p.type;
    d["element_type"] = p.element_type;
    d["dtype"] = p.dtype ? nb::cast(*p.dtype) : nb::none();
    d["placeholder"] = p.placeholder.empty() ? nb::none() : nb::cast(p.placeholder);
    d["writable"] = p.writable;
    d["attribute"] = p.attribute.empty() ? nb::none() : nb::cast(p.attribute);
    l.append(d);
  }
  return l;
}

nb::object call(const LibraryKernel& k, nb::args args, nb::kwargs kwargs) {
  LibraryCall c;
  const KernelInfo& info = k.info();
  std::vector<const KernelParamInfo*> data;
  for (auto& p : info.params)
    if (p.takes_argument()) data.push_back(&p);
  std::vector<KernelArg> a;
  std::vector<bool> given;
  for (nb::handle h : args) {
    a.push_back(to_arg(h));
    given.push_back(true);
  }
  for (auto [key_h, value] : kwargs) {
    std::string key = nb::cast<std::string>(key_h);
    if (key == "threads") {
      if (!value.is_none()) c.threads = to_dims(value, "threads");
    } else if (key == "group_size") {
      if (!value.is_none()) c.group_size = to_dims(value, "group_size");
    } else if (key == "threadgroup_memory") {
      if (value.is_none()) continue;
      if (!nb::isinstance<nb::dict>(value))
        bad("expected `threadgroup_memory` to be a dict {index: bytes}", value);
      for (auto [n, bytes] : nb::borrow<nb::dict>(value)) {
        // Keys are the n of [[threadgroup(n)]], values byte counts (nb::cast would say only
        // "std::bad_cast").
        if (!PyLong_Check(n.ptr()) || PyBool_Check(n.ptr()))
          bad("`threadgroup_memory` keys must be ints (the n of [[threadgroup(n)]])", n);
        if (!PyLong_Check(bytes.ptr()) || PyBool_Check(bytes.ptr()))
          bad("`threadgroup_memory` values must be ints (bytes)", bytes);
        long long idx = PyLong_AsLongLong(n.ptr());
        long long size = PyLong_AsLongLong(bytes.ptr());
        if (PyErr_Occurred()) {
          PyErr_Clear();
          size = -1;
        }
        if (idx < 0 || idx > 7)
          throw nb::value_error(("`threadgroup_memory`: index " + py_str(n) +
                                 " is not a [[threadgroup(n)]] index (0 to 7)")
                                    .c_str());
        if (size < 0)
          throw nb::value_error(("`threadgroup_memory`: the size of [[threadgroup(" +
                                 std::to_string(idx) + ")]] must be a byte count >= 0, got " +
                                 py_str(bytes))
                                    .c_str());
        c.threadgroup_memory[static_cast<int>(idx)] = static_cast<size_t>(size);
      }
    } else if (key == "stream") {
      c.stream = to_stream(value, key.c_str());
    } else if (key == "device") {
      c.device = to_device(value, key.c_str());
    } else if (key == "check") {
      if (!value.is_none()) c.check = nb::cast<bool>(value);
    } else if (key == "fallback") {
      if (!value.is_none()) c.fallback = nb::cast<bool>(value);
    } else if (key == "rtol") {
      if (!value.is_none()) c.rtol = nb::cast<double>(value);
    } else if (key == "atol") {
      if (!value.is_none()) c.atol = nb::cast<double>(value);
    } else {
      // A kernel argument by its parameter name.
      size_t pos = data.size();
      for (size_t i = 0; i < data.size(); ++i)
        if (data[i]->name == key) pos = i;
      if (pos == data.size())
        throw nb::type_error(("[compile_shader] kernel '" + info.name +
                              "' got an unexpected keyword argument '" + key +
                              "'; its signature: " + info.signature())
                                 .c_str());
      if (a.size() <= pos) {
        a.resize(pos + 1);
        given.resize(pos + 1, false);
      }
      if (given[pos])
        throw nb::type_error(("[compile_shader] kernel '" + info.name +
                              "' got several values for argument '" + key + "'")
                                 .c_str());
      a[pos] = to_arg(value);
      given[pos] = true;
    }
  }
  // Trailing writable buffers may be left out (their reference infers them).
  bool trailing_outputs = a.size() < data.size();
  for (size_t i = a.size(); i < data.size(); ++i) trailing_outputs &= data[i]->writable;
  if (trailing_outputs) a.resize(data.size());
  return outputs_to_py(k(a, c));
}

constexpr const char* kCompileShaderDoc = R"(Compile a whole Metal library (as
``torch.mps.compile_shader``): ``[[kernel]]``/``kernel`` functions with ``[[buffer(n)]]``,
``[[threadgroup(n)]]`` and attribute parameters, ``constant T&`` scalars, helper functions and
structs, templates instantiated with ``[[host_name("...")]]`` (also through MLX-style
``instantiate_kernel`` macros). Kernels are attributes of the returned library.

The source is read at once (kernel names, parameters, argument checks); each kernel compiles
alone at its first call on a device, so a library of thousands of kernels costs the caller of one
about what that kernel alone costs. Compile errors show when the kernel's outputs are evaluated;
``lib.precompile()`` compiles everything up front (in parallel) and raises them there.

Args:
  source (str): The Metal source.
  template_dtypes (dict[str, str], optional): Dtype placeholders, e.g. ``{"A": "TYPE"}``: the
    identifier ``TYPE`` in the source becomes the Metal type of argument ``A``'s dtype in each call
    (``float``, ``float16_t``, ``bfloat16_t``...); one compiled variant per dtype combination.
  references (dict[str, Callable], optional): Reference implementations by kernel name: called
    with the kernel's arguments (arrays; scalars as 0-d arrays; None for omitted outputs), they
    return the new contents of the writable buffers (an array, or a tuple of them). Used to infer
    omitted outputs, as a fallback when the kernel cannot run on the device (with a one-time
    warning), and by check mode.
  math_mode (str): ``"safe"`` (default), ``"relaxed"`` or ``"fast"``.
  robust (bool): Bounds-checked buffer accesses for every kernel (also ``ALLOY_ROBUST=1``):
      out-of-range reads give 0, writes are dropped, and each is reported
      (``alloy.take_out_of_range_reports()``) naming the kernel parameter.
  fallback (bool, optional): Run the reference when a kernel cannot be compiled or launched
    (default: True unless ``ALLOY_FALLBACK=0``).
  check (bool, optional): Check mode for every call: the kernel and its reference both run and
    their outputs are compared (default: ``ALLOY_CHECK=1``).
  name (str): The library's name in messages.
  include_dirs (list[str], optional): Folders searched, in order, for ``#include``d headers.
  headers (dict[str, str], optional): In-memory headers by the name the source includes them
    with (looked up before ``include_dirs``). Compiler messages name the header and its line.
  function_constants (dict[int | str, bool | int | float], optional): Values of
    ``[[function_constant(n)]]`` constants, keyed by index ``n`` or by the constant's name (as
    ``MTLFunctionConstantValues``). A constant without a value is undefined
    (``is_function_constant_defined`` is false). Part of the compile cache key.

Returns:
  Library: ``lib.kernel_name(*args, threads=..., group_size=...)`` runs a kernel.

Example:

.. code-block:: python

    lib = alloy.compile_shader('''
        kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                         constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
          y[i] += a * x[i];
        }''')
    y2 = lib.axpy(x, y, 2.0, threads=x.size, group_size=256)  # y2 = y + 2 x; y is unchanged)";

constexpr const char* kCallDoc = R"(Run the kernel.

Positional (or keyword, by parameter name) arguments bind to the kernel's buffer and ``constant
T&`` parameters in declaration order: arrays (alloy, NumPy, PyTorch, CuPy...) for buffers,
numbers (converted to the parameter's type) or 0-d arrays for scalars, None for a writable buffer
that the kernel's reference should infer (trailing ones may be left out).

Keyword Args:
  threads (int | Sequence[int]): TOTAL threads per dimension (Metal ``dispatchThreads``), not
    threadgroups. Default: the size of the first array argument.
  group_size (int | Sequence[int]): Threads per threadgroup (at most 1024 in all). Default:
    ``min(threads[0], 256)``.
  threadgroup_memory (dict[int, int]): Bytes of each ``[[threadgroup(n)]]`` parameter.
  stream (Stream | Device | DeviceType): Where the kernel runs (default device when omitted).
  check (bool): Check mode for this call: when the result is evaluated, the kernel and its
    reference both run and are compared (a mismatch raises ``CheckError`` where it is read).
  fallback (bool): Allow running the reference (at evaluation) when the kernel cannot run.
  rtol, atol (float): Check-mode tolerances (default per dtype).

Returns:
  array | tuple[array, ...] | None: the new contents of the buffers the kernel can write
  (non-const ``device`` pointers), in order; the arrays passed are not modified.)";

}  // namespace

void bind_library(nb::module_& m) {
  g_check_error = PyErr_NewExceptionWithDoc(
      "alloy.CheckError",
      "Check mode: a kernel's output differs from its reference. Attributes: kernel, output "
      "(the parameter's name), max_abs_error, max_rel_error, first_index (tuple).",
      m.attr("KernelError").ptr(), nullptr);
  if (!g_check_error) throw nb::python_error();
  m.attr("CheckError") = nb::borrow(g_check_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const CheckError& e) {
      nb::object exc = nb::steal(PyObject_CallOneArg(g_check_error, nb::str(e.what()).ptr()));
      if (!exc.is_valid()) return;
      exc.attr("kernel") = nb::str(e.kernel().c_str());
      exc.attr("output") = nb::str(e.output().c_str());
      exc.attr("max_abs_error") = e.max_abs_error();
      exc.attr("max_rel_error") = e.max_rel_error();
      nb::list idx;
      for (auto i : e.first_index()) idx.append(i);
      exc.attr("first_index") = nb::tuple(idx);
      PyErr_SetObject(g_check_error, exc.ptr());
    }
  });

  // Warnings (e.g. a kernel runs its reference) become Python RuntimeWarnings.
  set_warning_handler([](const std::string& message) {
    nb::gil_scoped_acquire gil;
    if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) < 0) throw nb::python_error();
  });

  nb::class_<LibraryKernel>(m, "LibraryKernel",
                            "One kernel of a library made by alloy.compile_shader; call it to run "
                            "it.")
      .def("__call__", &call,
           nb::sig("def __call__(self, *args: object, threads: int | Sequence[int] | None = "
                   "None, group_size: int | Sequence[int] | None = None, threadgroup_memory: "
                   "dict[int, int] | None = None, stream: Stream | Device | DeviceType | None = "
                   "None, check: bool | None = None, fallback: bool | None = None, rtol: float | "
                   "None = None, atol: float | None = None, **kwargs: object) -> object"),
           kCallDoc)
      .def_prop_ro("name", &LibraryKernel::name, "The kernel's host name.")
      .def_prop_ro(
          "function", [](const LibraryKernel& k) { return k.info().function; },
          "The function instance, e.g. ``row_sum<half>``.")
      .def_prop_ro(
          "params", [](const LibraryKernel& k) { return params_to_py(k.info()); },
          "The parameters: dicts with name, kind ('buffer', 'scalar', 'threadgroup', "
          "'attribute'), index, type, element_type, dtype (alloy.Dtype or None), placeholder, "
          "writable, attribute.")
      .def_prop_ro(
          "arg_names",
          [](const LibraryKernel& k) {
            std::vector<std::string> names;
            for (auto& p : k.info().params)
              if (p.takes_argument()) names.push_back(p.name);
            return names;
          },
          "Names of the parameters that take an argument, in call order.")
      .def_prop_ro(
          "signature", [](const LibraryKernel& k) { return k.info().signature(); },
          "The kernel's signature as Metal declares it.")
      .def_prop_ro(
          "max_total_threads", [](const LibraryKernel& k) { return k.info().max_total_threads; },
          "[[max_total_threads_per_threadgroup(n)]], 0 if none.")
      .def_prop_ro("has_reference", &LibraryKernel::has_reference,
                   "True when a reference implementation is attached.")
      .def(
          "set_reference",
          [](const LibraryKernel& k, nb::handle fn) { k.set_reference(wrap_reference(fn)); },
          nb::arg("fn").none(),
          nb::sig("def set_reference(self, fn: Callable[..., object] | None) -> None"),
          "Attach (or, with None, remove) the kernel's reference implementation.")
      .def("__repr__", [](const LibraryKernel& k) {
        return "<alloy.LibraryKernel " + k.info().signature() + ">";
      });

  nb::class_<Library>(m, "Library",
                      "A Metal library made by alloy.compile_shader. Its kernels are attributes: "
                      "``lib.my_kernel(a, b, 3.0, threads=n, group_size=256)``.")
      .def("kernel_names", &Library::kernel_names, "Host names of the kernels, in source order.")
      .def(
          "__getattr__",
          [](const Library& l, const std::string& name) {
            if (!l.has_kernel(name)) {
              std::string names;
              for (auto& n : l.kernel_names()) names += (names.empty() ? "" : ", ") + n;
              throw nb::attribute_error(("[compile_shader] the library has no kernel named '" +
                                         name + "'; its kernels are: " + names)
                                            .c_str());
            }
            return l.kernel(name);
          },
          nb::arg("name"))
      .def(
          "__getitem__", [](const Library& l, const std::string& name) { return l.kernel(name); },
          nb::arg("name"))
      .def("__contains__",
           [](const Library& l, const std::string& name) { return l.has_kernel(name); })
      .def("__dir__",
           [](const Library& l) {
             auto names = l.kernel_names();
             for (const char* a : {"kernel_names", "precompile", "set_reference", "source"})
               names.push_back(a);
             return names;
           })
      .def(
          "set_reference",
          [](const Library& l, const std::string& name, nb::handle fn) {
            l.set_reference(name, wrap_reference(fn));
          },
          nb::arg("name"), nb::arg("fn").none(),
          nb::sig("def set_reference(self, name: str, fn: Callable[..., object] | None) -> None"),
          "Attach (or, with None, remove) the reference implementation of kernel `name`.")
      .def(
          "precompile",
          [](const Library& l, nb::handle stream, bool background, nb::handle placeholders,
             std::optional<std::vector<std::string>> kernels) {
            PrecompileOptions o;
            if (kernels) o.kernels = *kernels;
            o.device = to_device(stream, "stream");
            o.background = background;
            if (!placeholders.is_none()) {
              if (!nb::isinstance<nb::dict>(placeholders))
                bad("expected `placeholders` to be a dict of placeholder name -> dtype",
                    placeholders);
              for (auto [k, v] : nb::cast<nb::dict>(placeholders))
                o.placeholders[nb::cast<std::string>(k)] = to_dtype(v);
            }
            nb::gil_scoped_release release;
            l.precompile(o);
          },
          nb::arg("stream").none() = nb::none(), nb::arg("background") = false,
          nb::arg("placeholders").none() = nb::none(), nb::arg("kernels").none() = nb::none(),
          nb::sig("def precompile(self, stream: Stream | Device | DeviceType | None = None, "
                  "background: bool = False, placeholders: dict[str, Dtype] | None = None, "
                  "kernels: Sequence[str] | None = None) -> None"),
          "Compile every kernel now (kernels otherwise compile one at a time, at their first "
          "call on a device), in a few units compiled in parallel. Raises, as a call would, the "
          "error of the first kernel that cannot run and has no reference (CompileError, "
          "NotSupportedError). With ``background=True`` it returns at once and compiles on "
          "background threads; a call of a kernel still compiling waits for it. "
          "``placeholders`` gives the dtype of each template_dtypes placeholder (default "
          "float32). ``kernels`` (host names) compiles only those.")
      .def_prop_ro("source", &Library::source, "The Metal source as given.")
      .def("__repr__", [](const Library& l) {
        std::string names;
        for (auto& n : l.kernel_names()) names += (names.empty() ? "" : ", ") + n;
        return "<alloy.Library kernels: " + names + ">";
      });

  m.def(
      "compile_shader",
      [](const std::string& source, nb::handle template_dtypes, nb::handle references,
         const std::string& math_mode, nb::handle fallback, nb::handle check,
         const std::string& name, bool robust, nb::handle include_dirs, nb::handle headers,
         nb::handle function_constants) {
        LibraryOptions o;
        if (!include_dirs.is_none()) {
          if (!nb::isinstance<nb::list>(include_dirs) && !nb::isinstance<nb::tuple>(include_dirs))
            bad("expected `include_dirs` to be a list of folders", include_dirs);
          for (auto d : include_dirs) o.include_dirs.push_back(nb::cast<std::string>(nb::str(d)));
        }
        if (!headers.is_none()) {
          if (!nb::isinstance<nb::dict>(headers))
            bad("expected `headers` to be a dict {name: text}", headers);
          for (auto [k, v] : nb::borrow<nb::dict>(headers))
            o.headers[nb::cast<std::string>(k)] = nb::cast<std::string>(v);
        }
        if (!function_constants.is_none()) {
          if (!nb::isinstance<nb::dict>(function_constants))
            bad("expected `function_constants` to be a dict {index or name: value}",
                function_constants);
          for (auto [k, v] : nb::borrow<nb::dict>(function_constants)) {
            FunctionConstant value;
            if (nb::isinstance<nb::bool_>(v))
              value = nb::cast<bool>(v);
            else if (nb::isinstance<nb::int_>(v))
              value = nb::cast<int64_t>(v);
            else if (nb::isinstance<nb::float_>(v))
              value = nb::cast<double>(v);
            else
              bad("expected a function constant's value to be a bool, int or float", v);
            if (nb::isinstance<nb::int_>(k) && !nb::isinstance<nb::bool_>(k))
              o.function_constants[nb::cast<int>(k)] = value;
            else if (nb::isinstance<nb::str>(k))
              o.named_function_constants[nb::cast<std::string>(k)] = value;
            else
              bad("expected a function constant's key to be its index (int) or name (str)", k);
          }
        }
        o.math_mode = math_mode;
        o.name = name;
        o.robust = robust;
        if (!template_dtypes.is_none()) {
          if (!nb::isinstance<nb::dict>(template_dtypes))
            bad("expected `template_dtypes` to be a dict {argument: placeholder}", template_dtypes);
          for (auto [k, v] : nb::borrow<nb::dict>(template_dtypes))
            o.template_dtypes[nb::cast<std::string>(k)] = nb::cast<std::string>(v);
        }
        if (!references.is_none()) {
          if (!nb::isinstance<nb::dict>(references))
            bad("expected `references` to be a dict {kernel: callable}", references);
          for (auto [k, v] : nb::borrow<nb::dict>(references))
            o.references[nb::cast<std::string>(k)] = wrap_reference(v);
        }
        if (!fallback.is_none()) o.fallback = nb::cast<bool>(fallback);
        if (!check.is_none()) o.check = nb::cast<bool>(check);
        return compile_library(source, o);
      },
      nb::arg("source"), nb::arg("template_dtypes") = nb::none(),
      nb::arg("references") = nb::none(), nb::arg("math_mode") = "safe",
      nb::arg("fallback") = nb::none(), nb::arg("check") = nb::none(), nb::arg("name") = "library",
      nb::arg("robust") = false, nb::arg("include_dirs") = nb::none(),
      nb::arg("headers") = nb::none(), nb::arg("function_constants") = nb::none(),
      nb::sig("def compile_shader(source: str, template_dtypes: dict[str, str] | None = None, "
              "references: dict[str, Callable[..., object]] | None = None, math_mode: str = "
              "'safe', fallback: bool | None = None, check: bool | None = None, name: str = "
              "'library', robust: bool = False, include_dirs: Sequence[str] | None = None, "
              "headers: dict[str, str] | None = None, function_constants: dict[int | str, bool "
              "| int | float] | None = None) -> Library"),
      kCompileShaderDoc);
}

}  // namespace alloy::python
