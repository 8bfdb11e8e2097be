// alloy.metal_kernel: MLX's mx.fast.metal_kernel, same arguments, same keyword-only call.
// The call path converts its arguments here in C++ (no Python loops) and hands a KernelCall to
// MetalKernel, which returns lazy outputs; compilation happens at the first evaluation and is
// cached per kernel object, dtypes and template arguments.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.h"

namespace alloy::python {
namespace {

[[noreturn]] void bad_argument(const char* name, const char* expected, nb::handle got) {
  throw nb::type_error((std::string("[metal_kernel] Expected `") + name + "` to be " + expected +
                        ", got " + nb::inst_name(got).c_str() + ".")
                           .c_str());
}

bool to_int(PyObject* p, int64_t& out) {
  if (PyLong_Check(p) && !PyBool_Check(p)) {
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(p, &overflow);
    return !overflow;
  }
  if (PyIndex_Check(p) && !PyBool_Check(p)) {  // numpy integers
    nb::object i = nb::steal(PyNumber_Index(p));
    if (!i.is_valid()) {
      PyErr_Clear();
      return false;
    }
    return to_int(i.ptr(), out);
  }
  return false;
}

// A list or tuple, as a borrowed PySequence_Fast view.
struct FastSeq {
  nb::object seq;
  Py_ssize_t size = 0;
  PyObject** items = nullptr;
  bool load(nb::handle h) {
    if (!PyList_Check(h.ptr()) && !PyTuple_Check(h.ptr())) return false;
    seq = nb::borrow(h);
    size = PySequence_Fast_GET_SIZE(h.ptr());
    items = PySequence_Fast_ITEMS(h.ptr());
    return true;
  }
};

Shape to_shape(nb::handle h) {
  FastSeq s;
  if (!s.load(h)) bad_argument("output_shapes", "a list of tuples (or lists) of ints", h);
  Shape shape(s.size);
  for (Py_ssize_t i = 0; i < s.size; ++i)
    if (!to_int(s.items[i], shape[i]))
      bad_argument("output_shapes", "a list of tuples (or lists) of ints", s.items[i]);
  return shape;
}

Dims to_dims(nb::handle h, const char* name) {
  FastSeq s;
  Dims d{1, 1, 1};
  if (!s.load(h) || s.size != 3) bad_argument(name, "a tuple of 3 ints", h);
  for (int i = 0; i < 3; ++i) {
    int64_t v = 0;
    if (!to_int(s.items[i], v) || v < INT32_MIN || v > INT32_MAX)
      bad_argument(name, "a tuple of 3 ints", s.items[i]);
    d[i] = static_cast<int>(v);
  }
  return d;
}

// MLX checks bool before int (True is an int in Python), then Dtype.
TemplateArgs to_template(nb::handle h) {
  TemplateArgs args;
  if (h.is_none()) return args;
  FastSeq s;
  if (!s.load(h)) bad_argument("template", "a list of (name, value) tuples", h);
  args.reserve(s.size);
  for (Py_ssize_t i = 0; i < s.size; ++i) {
    FastSeq pair;
    if (!pair.load(s.items[i]) || pair.size != 2 || !PyUnicode_Check(pair.items[0]))
      bad_argument("template", "a list of (name, value) tuples", s.items[i]);
    std::string name = nb::cast<std::string>(nb::handle(pair.items[0]));
    PyObject* v = pair.items[1];
    Dtype t;
    if (PyBool_Check(v)) {
      args.emplace_back(std::move(name), v == Py_True);
    } else if (PyLong_Check(v)) {
      int64_t x = 0;
      if (!to_int(v, x) || x < INT32_MIN || x > INT32_MAX)
        throw nb::value_error("[metal_kernel] Template argument does not fit in an int.");
      args.emplace_back(std::move(name), static_cast<int>(x));
    } else if (nb::try_cast<Dtype>(nb::handle(v), t, /*convert=*/false)) {
      args.emplace_back(std::move(name), t);
    } else {
      throw nb::value_error(
          "[metal_kernel] Invalid template argument. Must be `alloy.Dtype`, `int` or `bool`.");
    }
  }
  return args;
}

PyTypeObject* array_type() {
  static PyTypeObject* t = reinterpret_cast<PyTypeObject*>(nb::type<Array>().ptr());
  return t;
}

// The 0-d arrays made of the Python scalars (float, int, bool) of a kernel object's last calls,
// one per input position: a call that passes the same value at the same position again (a
// model's `eps`, a scale) reuses the array instead of allocating a new one (its node, shape,
// strides and buffer). Arrays are immutable and a 0-d input is never an output, so sharing one
// between calls is invisible. Used with the GIL held (CallCache), by one call at a time.
class ScalarInputs {
 public:
  /// The input for the scalar `p` at position `i`; nullptr when `p` is not a plain scalar that
  /// fits its 0-d array exactly (other values are converted per call by as_input).
  const Array* find_or_make(size_t i, PyObject* p) {
    Key key;
    if (PyFloat_CheckExact(p)) {
      float f = static_cast<float>(PyFloat_AS_DOUBLE(p));
      uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof bits);
      key = {Kind::f32, bits};
    } else if (PyBool_Check(p)) {
      key = {Kind::boolean, p == Py_True ? 1u : 0u};
    } else if (PyLong_CheckExact(p)) {
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(p, &overflow);
      if (overflow || x < INT32_MIN || x > INT32_MAX) return nullptr;
      key = {Kind::i32, static_cast<uint32_t>(static_cast<int32_t>(x))};
    } else {
      return nullptr;
    }
    if (i >= slots_.size()) {
      if (i >= kMaxInputs) return nullptr;
      slots_.resize(i + 1);
    }
    Slot& s = slots_[i];
    if (s.key.kind != key.kind || s.key.bits != key.bits) {
      s.array = make(key);
      s.key = key;
    }
    return &s.array;
  }

 private:
  enum class Kind : uint8_t { none, f32, i32, boolean };
  struct Key {
    Kind kind = Kind::none;
    uint32_t bits = 0;
  };
  struct Slot {
    Key key;
    Array array;
  };
  static constexpr size_t kMaxInputs = 32;
  static Array make(Key k) {
    switch (k.kind) {
      case Kind::f32: {
        float f = 0;
        std::memcpy(&f, &k.bits, sizeof f);
        return Array(f);
      }
      case Kind::i32:
        return Array(static_cast<int>(static_cast<int32_t>(k.bits)));
      default:
        return Array(k.bits != 0);
    }
  }
  std::vector<Slot> slots_;
};

// The inputs of a call: alloy.array objects as they are, scalars through `scalars` when given
// (the GIL-held cached path), everything else through as_input.
std::vector<Array> to_inputs(nb::handle h, ScalarInputs* scalars = nullptr) {
  FastSeq s;
  if (!s.load(h)) bad_argument("inputs", "a list of arrays or scalars", h);
  std::vector<Array> inputs;
  inputs.reserve(s.size);
  PyTypeObject* const type = array_type();
  for (Py_ssize_t i = 0; i < s.size; ++i) {
    PyObject* item = s.items[i];
    if (Py_TYPE(item) == type && nb::inst_ready(item)) {  // alloy.array: no type lookups
      inputs.push_back(*nb::inst_ptr<Array>(item));
      continue;
    }
    if (scalars)
      if (const Array* a = scalars->find_or_make(static_cast<size_t>(i), item)) {
        inputs.push_back(*a);
        continue;
      }
    inputs.push_back(as_input(item));
  }
  return inputs;
}

// Everything of a call but the inputs (shared by __call__ and metal_source).
// Geometry (grid, threadgroup, output_shapes) may be functions of the input shapes or hold
// alloy.ShapeExpr values (python/src/shape_expr.cpp): then it is kept as expressions.
KernelCall to_call(const std::vector<Array>& inputs, nb::handle output_shapes_arg,
                   nb::handle output_dtypes, nb::handle grid_arg, nb::handle threadgroup_arg,
                   nb::handle template_args, nb::handle init_value, bool verbose,
                   nb::handle stream) {
  KernelCall call;
  nb::object output_shapes = resolve_geometry(output_shapes_arg, inputs);
  nb::object grid = resolve_geometry(grid_arg, inputs);
  nb::object threadgroup = resolve_geometry(threadgroup_arg, inputs);
  FastSeq shapes, dtypes;
  if (holds_shape_expr(output_shapes)) {
    call.output_shape_exprs = to_shape_exprs(output_shapes);
  } else {
    if (!shapes.load(output_shapes))
      bad_argument("output_shapes", "a list of tuples (or lists) of ints", output_shapes);
    call.output_shapes.reserve(shapes.size);
    for (Py_ssize_t i = 0; i < shapes.size; ++i)
      call.output_shapes.push_back(to_shape(shapes.items[i]));
  }
  if (!dtypes.load(output_dtypes)) bad_argument("output_dtypes", "a list of dtypes", output_dtypes);
  call.output_dtypes.reserve(dtypes.size);
  for (Py_ssize_t i = 0; i < dtypes.size; ++i)
    call.output_dtypes.push_back(to_dtype(dtypes.items[i]));
  if (holds_shape_expr(grid))
    call.grid_expr = to_dims_expr(grid, "grid");
  else if (grid.is_valid())
    call.grid = to_dims(grid, "grid");
  if (holds_shape_expr(threadgroup))
    call.threadgroup_expr = to_dims_expr(threadgroup, "threadgroup");
  else if (threadgroup.is_valid())
    call.threadgroup = to_dims(threadgroup, "threadgroup");
  call.template_args = to_template(template_args);
  if (init_value.is_valid() && !init_value.is_none()) {
    if (!PyFloat_Check(init_value.ptr()) && !PyLong_Check(init_value.ptr()))
      bad_argument("init_value", "a float or None", init_value);
    call.init_value = nb::cast<double>(init_value);
  }
  call.verbose = verbose;
  call.stream = to_stream(stream);
  return call;
}

std::map<std::string, std::string> to_compile_options(nb::handle h) {
  std::map<std::string, std::string> options;
  if (h.is_none()) return options;
  if (!nb::isinstance<nb::dict>(h))
    throw nb::value_error("[metal_kernel] Expected `compile_options` to be a dict.");
  for (auto [k, v] : nb::borrow<nb::dict>(h)) {
    if (!nb::isinstance<nb::str>(k) || !nb::isinstance<nb::str>(v))
      throw nb::value_error(
          "[metal_kernel] Expected `compile_options` to map option names to strings, e.g. "
          "{'math_mode': 'fast'}.");
    options[nb::cast<std::string>(k)] = nb::cast<std::string>(v);
  }
  return options;
}

// The last call of a kernel object whose arguments were plain values (lists or tuples of Python
// ints for the geometry, alloy.Dtype members, a float or None init_value), with their
// conversion: a call whose arguments are equal reuses that KernelCall instead of converting
// them again (a model calls one kernel with the same arguments at every step). Inputs and
// `stream` are converted per call. Read and written with the GIL held; a call made while
// another runs on the same object (a reentrant one) takes the general path.
struct CallCache {
  bool valid = false;
  bool busy = false;
  uint64_t hits = 0;                    // calls that took the cached conversion (tests read it)
  KernelCall call;                      // stream unset (converted per call)
  ScalarInputs scalars;                 // the scalar inputs' 0-d arrays
  std::vector<nb::object> dtypes;       // the output_dtypes items, compared by identity
  std::vector<nb::object> type_values;  // per template argument: its value if a Dtype, else None

  static bool exact_int(PyObject* p, int64_t want) {
    if (!PyLong_CheckExact(p)) return false;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    return !overflow && v == want;
  }
  static bool exact_seq(PyObject* p, Py_ssize_t size) {
    return (PyList_CheckExact(p) || PyTuple_CheckExact(p)) && PySequence_Fast_GET_SIZE(p) == size;
  }
  static bool same_dims(PyObject* p, const Dims& d) {
    if (!exact_seq(p, 3)) return false;
    PyObject** items = PySequence_Fast_ITEMS(p);
    for (int i = 0; i < 3; ++i)
      if (!exact_int(items[i], d[i])) return false;
    return true;
  }

  /// Whether the call's arguments (none absent among the first five; absent optional ones null)
  /// are those `call` was converted from.
  bool matches(PyObject* const* v) const {
    const auto& shapes = call.output_shapes;
    if (!exact_seq(v[1], static_cast<Py_ssize_t>(shapes.size()))) return false;
    for (size_t i = 0; i < shapes.size(); ++i) {
      PyObject* s = PySequence_Fast_ITEMS(v[1])[i];
      if (!exact_seq(s, static_cast<Py_ssize_t>(shapes[i].size()))) return false;
      for (size_t d = 0; d < shapes[i].size(); ++d)
        if (!exact_int(PySequence_Fast_ITEMS(s)[d], shapes[i][d])) return false;
    }
    if (!exact_seq(v[2], static_cast<Py_ssize_t>(dtypes.size()))) return false;
    for (size_t i = 0; i < dtypes.size(); ++i)
      if (PySequence_Fast_ITEMS(v[2])[i] != dtypes[i].ptr()) return false;
    if (!same_dims(v[3], call.grid) || !same_dims(v[4], call.threadgroup)) return false;
    const TemplateArgs& targs = call.template_args;
    if (!v[5] || v[5] == Py_None) {
      if (!targs.empty()) return false;
    } else {
      if (!exact_seq(v[5], static_cast<Py_ssize_t>(targs.size()))) return false;
      for (size_t i = 0; i < targs.size(); ++i) {
        PyObject* pair = PySequence_Fast_ITEMS(v[5])[i];
        if (!exact_seq(pair, 2)) return false;
        PyObject* name = PySequence_Fast_ITEMS(pair)[0];
        PyObject* value = PySequence_Fast_ITEMS(pair)[1];
        Py_ssize_t len = 0;
        const char* utf8 =
            PyUnicode_CheckExact(name) ? PyUnicode_AsUTF8AndSize(name, &len) : nullptr;
        if (!utf8) {
          PyErr_Clear();
          return false;
        }
        if (std::string_view(utf8, static_cast<size_t>(len)) != targs[i].first) return false;
        const auto& want = targs[i].second;
        if (auto* b = std::get_if<bool>(&want)) {
          if (value != (*b ? Py_True : Py_False)) return false;
        } else if (auto* n = std::get_if<int>(&want)) {
          if (!exact_int(value, *n)) return false;
        } else if (value != type_values[i].ptr()) {
          return false;
        }
      }
    }
    if (!v[6] || v[6] == Py_None) return !call.init_value;
    return call.init_value && PyFloat_CheckExact(v[6]) &&
           PyFloat_AS_DOUBLE(v[6]) == *call.init_value;
  }

  /// Remembers a call that was just converted (`converted`, from the arguments `v`), if its
  /// arguments are plain values that matches() recognizes.
  void remember(PyObject* const* v, const KernelCall& converted) {
    valid = false;
    if (converted.verbose || converted.grid_expr || converted.threadgroup_expr ||
        !converted.output_shape_exprs.empty() || converted.device)
      return;
    call = converted;
    call.stream.reset();
    dtypes.clear();
    type_values.clear();
    if (!exact_seq(v[2], static_cast<Py_ssize_t>(call.output_dtypes.size()))) return;
    for (size_t i = 0; i < call.output_dtypes.size(); ++i)
      dtypes.push_back(nb::borrow(PySequence_Fast_ITEMS(v[2])[i]));
    if (v[5] && v[5] != Py_None) {
      if (!exact_seq(v[5], static_cast<Py_ssize_t>(call.template_args.size()))) return;
      for (size_t i = 0; i < call.template_args.size(); ++i) {
        PyObject* pair = PySequence_Fast_ITEMS(v[5])[i];
        if (!exact_seq(pair, 2)) return;
        type_values.push_back(std::holds_alternative<Dtype>(call.template_args[i].second)
                                  ? nb::borrow(PySequence_Fast_ITEMS(pair)[1])
                                  : nb::none());
      }
    }
    valid = matches(v);  // only what the next call can be recognized by
  }
};

PyObject* kernel_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                            PyObject* kwnames);

// The Python object of a kernel: the kernel, its call cache and its vectorcall entry.
struct PyKernel : MetalKernel {
  explicit PyKernel(MetalKernel k) : MetalKernel(std::move(k)) {}
  CallCache cache;
  vectorcallfunc vectorcall = kernel_vectorcall;  // read by CPython (tp_vectorcall_offset)
};

std::vector<Array> call_kernel(const MetalKernel& k, nb::handle inputs, nb::handle output_shapes,
                               nb::handle output_dtypes, nb::handle grid, nb::handle threadgroup,
                               nb::handle template_args, nb::handle init_value, bool verbose,
                               nb::handle stream) {
  std::vector<Array> in = to_inputs(inputs);
  KernelCall call = to_call(in, output_shapes, output_dtypes, grid, threadgroup, template_args,
                            init_value, verbose, stream);
  return k(std::move(in), call);
}

// An optional keyword's value: None when the call left it out (null).
nb::handle or_none(PyObject* p) {
  return p ? nb::handle(p) : nb::handle(Py_None);
}

// A call through the type slot: the cached conversion when the arguments match it.
std::vector<Array> call_cached(PyKernel& k, PyObject* const* v, bool verbose) {
  CallCache& c = k.cache;
#ifndef Py_GIL_DISABLED  // the cache relies on the GIL
  if (!verbose && !c.busy) {
    c.busy = true;
    struct Busy {
      bool& b;
      ~Busy() { b = false; }
    } busy{c.busy};
    if (c.valid && c.matches(v)) {
      ++c.hits;
      std::vector<Array> in = to_inputs(v[0], &c.scalars);
      c.call.stream = to_stream(or_none(v[8]));
      return k(std::move(in), c.call);
    }
    std::vector<Array> in = to_inputs(v[0], &c.scalars);
    KernelCall call =
        to_call(in, v[1], v[2], v[3], v[4], or_none(v[5]), or_none(v[6]), verbose, or_none(v[8]));
    std::vector<Array> out = k(std::move(in), call);
    c.remember(v, call);
    return out;
  }
#endif
  return call_kernel(k, v[0], v[1], v[2], v[3], v[4], or_none(v[5]), or_none(v[6]), verbose,
                     or_none(v[8]));
}

// The keywords of a call, in call_kernel's order; the first five are required.
constexpr const char* kKeywords[] = {"inputs",     "output_shapes", "output_dtypes",
                                     "grid",       "threadgroup",   "template",
                                     "init_value", "verbose",       "stream"};
constexpr int kNumKeywords = 9, kNumRequired = 5;

// The kernel's outputs as a new list of alloy.array objects, made directly (no look-up of the
// output's address among the live instances, no type look-up, as nb::cast does per element).
PyObject* wrap_outputs(std::vector<Array>&& out) {
  nb::object list = nb::steal(PyList_New(static_cast<Py_ssize_t>(out.size())));
  if (!list.is_valid()) throw nb::python_error();
  nb::handle type(reinterpret_cast<PyObject*>(array_type()));
  for (size_t i = 0; i < out.size(); ++i) {
    nb::object o = nb::inst_alloc(type);
    new (nb::inst_ptr<Array>(o)) Array(std::move(out[i]));
    nb::inst_mark_ready(o);
    PyList_SET_ITEM(list.ptr(), static_cast<Py_ssize_t>(i), o.release().ptr());
  }
  return list.release().ptr();
}

// One keyword argument of a call into its slot of `value` (kKeywords' order).
void take_keyword(PyObject* key, PyObject* v, PyObject** value) {
  static PyObject* interned[kNumKeywords] = {};
  if (!interned[0])
    for (int i = 0; i < kNumKeywords; ++i) interned[i] = PyUnicode_InternFromString(kKeywords[i]);
  int i = 0;
  while (i < kNumKeywords && key != interned[i]) ++i;  // call sites use interned names
  if (i == kNumKeywords) {
    i = 0;
    while (i < kNumKeywords && PyUnicode_CompareWithASCIIString(key, kKeywords[i]) != 0) ++i;
  }
  if (i == kNumKeywords)
    throw nb::type_error(
        ("MetalKernel.__call__() got an unexpected keyword argument '" + py_str(key) + "'")
            .c_str());
  value[i] = v;
}

[[noreturn]] void positional_arguments() {
  throw nb::type_error(
      "MetalKernel.__call__() takes keyword arguments only (inputs=..., output_shapes=..., "
      "output_dtypes=..., grid=..., threadgroup=..., ...), as MLX's kernels do");
}

// The call once its keywords are in `value`: checks, runs, wraps the outputs.
PyObject* call_with(PyObject* self, PyObject** value) {
  for (int i = 0; i < kNumRequired; ++i)
    if (!value[i])
      throw nb::type_error((std::string("MetalKernel.__call__() missing required keyword "
                                        "argument: '") +
                            kKeywords[i] + "'")
                               .c_str());
  bool verbose = false;
  if (value[7]) {
    int truth = PyObject_IsTrue(value[7]);
    if (truth < 0) throw nb::python_error();
    verbose = truth == 1;
  }
  return wrap_outputs(call_cached(*nb::inst_ptr<PyKernel>(self), value, verbose));
}

// tp_call of MetalKernel, for calls that come with a keyword dict (`kernel(**kwargs)` through
// PyObject_Call, C code). Calling an instance goes straight here or to kernel_vectorcall
// instead of through the `__call__` attribute, which would go through nanobind's dispatcher: a
// kernel call is on the hot path of every step. `__call__` stays defined (same conversions) for
// introspection and the type stubs.
PyObject* kernel_call_slot(PyObject* self, PyObject* args, PyObject* kwargs) {
  try {
    if (PyTuple_GET_SIZE(args) != 0) positional_arguments();
    PyObject* value[kNumKeywords] = {};
    if (kwargs) {
      Py_ssize_t pos = 0;
      PyObject *key, *v;
      while (PyDict_Next(kwargs, &pos, &key, &v)) take_keyword(key, v, value);
    }
    return call_with(self, value);
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
}

// The vectorcall of a MetalKernel instance (PyKernel::vectorcall): `kernel(inputs=..., ...)`
// in Python code arrives here with the keyword names as a tuple and their values in an array,
// so the interpreter builds no keyword dict for the call (as it must for tp_call).
PyObject* kernel_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                            PyObject* kwnames) {
  try {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 0) positional_arguments();
    PyObject* value[kNumKeywords] = {};
    if (kwnames) {
      Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
      for (Py_ssize_t i = 0; i < n; ++i)
        take_keyword(PyTuple_GET_ITEM(kwnames, i), args[nargs + i], value);
    }
    return call_with(self, value);
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
}

// Turns on the vectorcall protocol for MetalKernel instances, given the first one: the type's
// tp_vectorcall_offset is where PyKernel::vectorcall lies in an instance (nanobind keeps the C++
// object inside the Python object at a fixed offset for a type), which the instance tells.
void enable_vectorcall(nb::handle kernel) {
  auto* type = reinterpret_cast<PyTypeObject*>(Py_TYPE(kernel.ptr()));
  PyKernel* k = nb::inst_ptr<PyKernel>(kernel);
  auto offset = static_cast<Py_ssize_t>(reinterpret_cast<char*>(&k->vectorcall) -
                                        reinterpret_cast<char*>(kernel.ptr()));
  if (!(type->tp_flags & Py_TPFLAGS_HAVE_VECTORCALL)) {
    type->tp_vectorcall_offset = offset;
    type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
  } else if (type->tp_vectorcall_offset != offset) {
    throw std::logic_error("MetalKernel: an instance whose layout differs from the first one's");
  }
}

constexpr const char* kCallDoc = R"(Run the kernel.

Args:
  inputs (list[array | scalar]): The inputs, in the order of ``input_names``: alloy arrays,
    NumPy arrays, PyTorch/CuPy tensors (CPU or CUDA, used without a copy), bool/int/float
    scalars (0-d bool, int32, float32) or nested lists.
  output_shapes (list[Sequence[int]]): The shape of each output in ``output_names``.
  output_dtypes (list[Dtype]): The dtype of each output in ``output_names``.
  grid (tuple[int, int, int]): Threads per dimension, as Metal's ``dispatchThreads``.
  threadgroup (tuple[int, int, int]): Threads per threadgroup (at most 1024 in all).

  ``output_shapes``, ``grid`` and ``threadgroup`` may also be functions of the inputs' shapes
  (``grid=lambda shapes: (shapes[0][0], 1, 1)``) or hold ``alloy.ShapeExpr`` values: they are
  kept as expressions of the input shapes, so compiled (shapeless) and exported functions
  follow new sizes (see ``alloy.ShapeExpr``).
  template (list[tuple[str, bool | int | Dtype]], optional): Template arguments of the kernel.
  init_value (float, optional): Value the outputs are filled with before the kernel runs;
    by default they are uninitialized.
  verbose (bool): Print the generated Metal source.
  stream (Stream | Device | DeviceType, optional): Where the kernel runs (default device when
    omitted).

Returns:
  list[array]: The outputs (lazy: computed when read or by alloy.eval).)";

constexpr const char* kKernelDoc = R"(A custom Metal kernel from the body of a function, as MLX's
``mx.fast.metal_kernel``: the signature is generated from the inputs, outputs, template arguments
and the Metal attributes the body uses (``thread_position_in_grid``, ...). It is compiled when first
run for given dtypes and template arguments (NVRTC for the GPU, the host compiler for the CPU) and
cached.

Args:
  name (str): Name of the kernel.
  input_names (list[str]): Parameter names of the inputs.
  output_names (list[str]): Parameter names of the outputs.
  source (str): The body of the kernel, in Metal.
  header (str): Code placed before the kernel (helper functions, includes).
  ensure_row_contiguous (bool): Copy strided inputs to row-contiguous ones before the kernel
    runs. With False the kernel reads ``<name>_shape``, ``<name>_strides`` and ``<name>_ndim``.
  atomic_outputs (bool): Declare the outputs as ``device atomic<T>*``.
  compile_options (dict, optional): ``{"math_mode": "safe" | "relaxed" | "fast"}``.
  robust (bool, keyword only; an Alloy extension): bounds-check every buffer access: reads out
    of range give 0, writes out of range are dropped, and each is reported (see
    ``alloy.take_out_of_range_reports``). ``ALLOY_ROBUST=1`` makes every kernel robust.

Returns:
  MetalKernel: call it with keyword arguments (see ``MetalKernel.__call__``).

Example:

  .. code-block:: python

    kernel = alloy.metal_kernel(
        name="myexp", input_names=["inp"], output_names=["out"],
        source='''
            uint elem = thread_position_in_grid.x;
            T tmp = inp[elem];
            out[elem] = metal::exp(tmp);
        ''')
    out = kernel(inputs=[a], template=[("T", alloy.float32)], grid=(a.size, 1, 1),
                 threadgroup=(256, 1, 1), output_shapes=[a.shape],
                 output_dtypes=[a.dtype])[0])";

}  // namespace

void init_kernel(nb::module_& m) {
  nb::class_<PyKernel> cls(m, "MetalKernel",
                           "A kernel made by alloy.metal_kernel(); call it to run it.");
  cls.def(
         "__call__",
         [](const PyKernel& k, nb::handle inputs, nb::handle output_shapes,
            nb::handle output_dtypes, nb::handle grid, nb::handle threadgroup,
            nb::handle template_args, nb::handle init_value, bool verbose, nb::handle stream) {
           return call_kernel(k, inputs, output_shapes, output_dtypes, grid, threadgroup,
                              template_args, init_value, verbose, stream);
         },
         nb::kw_only(), nb::arg("inputs"), nb::arg("output_shapes"), nb::arg("output_dtypes"),
         nb::arg("grid"), nb::arg("threadgroup"), nb::arg("template") = nb::none(),
         nb::arg("init_value") = nb::none(), nb::arg("verbose") = false,
         nb::arg("stream") = nb::none(),
         nb::sig("def __call__(self, *, inputs: Sequence[object], "
                 "output_shapes: Sequence[Sequence[int | ShapeExpr]] | Callable, "
                 "output_dtypes: Sequence[Dtype], "
                 "grid: tuple[int | ShapeExpr, int | ShapeExpr, int | ShapeExpr] | Callable, "
                 "threadgroup: tuple[int | ShapeExpr, int | ShapeExpr, int | ShapeExpr] | "
                 "Callable, "
                 "template: Sequence[tuple[str, bool | int | Dtype]] | None = None, "
                 "init_value: float | None = None, verbose: bool = False, "
                 "stream: Stream | Device | DeviceType | None = None) -> list[array]"),
         kCallDoc)
      .def(
          "metal_source",
          [](const PyKernel& k, nb::handle inputs, nb::handle output_dtypes,
             nb::handle template_args) {
            std::vector<Array> in = to_inputs(inputs);
            nb::list shapes;
            FastSeq dtypes;
            if (dtypes.load(output_dtypes))
              for (Py_ssize_t i = 0; i < dtypes.size; ++i) shapes.append(nb::tuple());
            KernelCall call = to_call(in, shapes, output_dtypes, nb::handle(), nb::handle(),
                                      template_args, nb::handle(), false, nb::none());
            return k.metal_source(in, call);
          },
          nb::kw_only(), nb::arg("inputs"), nb::arg("output_dtypes"),
          nb::arg("template") = nb::none(),
          nb::sig("def metal_source(self, *, inputs: Sequence[object], "
                  "output_dtypes: Sequence[Dtype], template: Sequence[tuple[str, bool | "
                  "int | Dtype]] | None = None) -> str"),
          "The Metal source (identical to MLX's) that a call with these inputs, output dtypes "
          "and template arguments compiles; what verbose=True prints.")
      .def_prop_ro(
          "name", [](const PyKernel& k) { return k.spec().name; }, "The kernel's name.")
      .def_prop_ro(
          "input_names", [](const PyKernel& k) { return k.spec().input_names; },
          "Parameter names of the inputs.")
      .def_prop_ro(
          "output_names", [](const PyKernel& k) { return k.spec().output_names; },
          "Parameter names of the outputs.")
      .def_prop_ro(
          "source", [](const PyKernel& k) { return k.spec().source; }, "The kernel body.")
      .def_prop_ro(
          "header", [](const PyKernel& k) { return k.spec().header; }, "The header.")
      .def_prop_ro(
          "ensure_row_contiguous", [](const PyKernel& k) { return k.spec().ensure_row_contiguous; },
          "Whether strided inputs are made row-contiguous first.")
      .def_prop_ro(
          "atomic_outputs", [](const PyKernel& k) { return k.spec().atomic_outputs; },
          "Whether the outputs are atomic.")
      .def_prop_ro(
          "robust", [](const PyKernel& k) { return k.spec().robust; },
          "Whether buffer accesses are bounds-checked (robust mode).")
      .def_prop_ro(
          "_call_cache_hits", [](const PyKernel& k) { return k.cache.hits; },
          "How many calls reused the conversion of the previous call's arguments (for tests).")
      .def("__repr__",
           [](const PyKernel& k) { return "MetalKernel(name='" + k.spec().name + "')"; });
  // Set after the `__call__` attribute (defining an attribute resets the slot).
  reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_call = kernel_call_slot;

  m.def(
      "metal_kernel",
      [](const std::string& name, const std::vector<std::string>& input_names,
         const std::vector<std::string>& output_names, const std::string& source,
         const std::string& header, bool ensure_row_contiguous, bool atomic_outputs,
         nb::handle compile_options, bool robust) {
        nb::object kernel = nb::cast(PyKernel(
            metal_kernel(name, input_names, output_names, source, header, ensure_row_contiguous,
                         atomic_outputs, to_compile_options(compile_options), robust)));
        enable_vectorcall(kernel);
        return kernel;
      },
      nb::arg("name"), nb::arg("input_names"), nb::arg("output_names"), nb::arg("source"),
      nb::arg("header") = "", nb::arg("ensure_row_contiguous") = true,
      nb::arg("atomic_outputs") = false, nb::arg("compile_options") = nb::none(), nb::kw_only(),
      nb::arg("robust") = false,
      nb::sig("def metal_kernel(name: str, input_names: Sequence[str], output_names: "
              "Sequence[str], source: str, header: str = '', ensure_row_contiguous: bool = True, "
              "atomic_outputs: bool = False, compile_options: dict[str, str] | None = None, *, "
              "robust: bool = False) -> MetalKernel"),
      kKernelDoc);

  m.def(
      "take_out_of_range_reports",
      [] {
        nb::list out;
        for (const OutOfRangeAccess& r : take_out_of_range_reports()) {
          nb::dict d;
          d["kernel"] = r.kernel;
          d["buffer"] = r.buffer;
          d["index"] = r.index;
          d["thread"] = nb::make_tuple(r.thread[0], r.thread[1], r.thread[2]);
          out.append(d);
        }
        return out;
      },
      nb::sig("def take_out_of_range_reports() -> list[dict]"),
      "The out-of-range buffer accesses that robust kernels made (and suppressed) since the last "
      "call, oldest first, then forgets them: dicts with `kernel`, `buffer` (the input or output "
      "name), `index` (element index from the buffer's start) and `thread` "
      "(thread_position_in_grid).");
  m.def("robust_by_default", &robust_by_default,
        "True when the environment variable ALLOY_ROBUST=1 makes every kernel robust.");
}

}  // namespace alloy::python
