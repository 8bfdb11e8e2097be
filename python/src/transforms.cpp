// alloy.grad, value_and_grad, vjp, jvp, custom_function, stop_gradient: MLX's Python transforms
// over include/alloy/transforms.h. Arguments and results may be nested lists, tuples and dicts of
// arrays ("trees"); other leaves (numbers, strings, None) pass through and are not
// differentiated.
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"

namespace alloy::python {
namespace {

// ---- Python objects held by graph nodes --------------------------------------------------------
// A custom_function's node keeps the user's Python functions. Nodes may be destroyed on a thread
// that does not hold the GIL (a CPU stream's worker drops an op after running it), so the last
// reference is released on a thread that holds it: at once when this one does, else queued for
// the interpreter's next pending call.

std::mutex& deferred_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<PyObject*>& deferred() {
  static auto* v = new std::vector<PyObject*>();  // never destroyed: used at exit
  return *v;
}

int drain_deferred(void*) {
  std::vector<PyObject*> v;
  {
    std::lock_guard lock(deferred_mu());
    v.swap(deferred());
  }
  for (PyObject* p : v) Py_DECREF(p);
  return 0;
}

struct PyRef {
  PyObject* ptr;
  explicit PyRef(nb::handle h) : ptr(h.inc_ref().ptr()) {}
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef() {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing to release
    if (PyGILState_Check()) {
      Py_DECREF(ptr);
      return;
    }
    bool first;
    {
      std::lock_guard lock(deferred_mu());
      first = deferred().empty();
      deferred().push_back(ptr);
    }
    // Failing (a full queue) leaves them for the next drain.
    if (first) Py_AddPendingCall(&drain_deferred, nullptr);
  }
  nb::handle get() const { return ptr; }
};
using Ref = std::shared_ptr<PyRef>;
Ref hold(nb::handle h) {
  return std::make_shared<PyRef>(h);
}

// ---- trees -------------------------------------------------------------------------------------

// Marks where an array sat in a tree's structure (a tree with its arrays taken out).
nb::handle slot() {
  static PyObject* s = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));
  return s;
}

void flatten(nb::handle h, std::vector<Array>& out) {
  if (nb::isinstance<Array>(h)) {
    out.push_back(nb::cast<Array>(h));
  } else if (PyList_Check(h.ptr()) || PyTuple_Check(h.ptr())) {
    for (nb::handle item : h) flatten(item, out);
  } else if (PyDict_Check(h.ptr())) {
    for (auto [k, v] : nb::borrow<nb::dict>(h)) flatten(v, out);
  }
}

// The tree `h` rebuilt with each array (or slot, when `from_slots`) replaced by `arrays[i++]`;
// with `arrays` null, by the slot (the tree's structure).
nb::object rebuild(nb::handle h, const std::vector<Array>* arrays, size_t& i, bool from_slots) {
  bool is_leaf = from_slots ? h.is(slot()) : nb::isinstance<Array>(h);
  if (is_leaf) {
    if (!arrays) return nb::borrow(slot());
    if (i >= arrays->size()) throw std::logic_error("tree: fewer arrays than leaves");
    return nb::cast((*arrays)[i++]);
  }
  if (PyList_Check(h.ptr())) {
    nb::list l;
    for (nb::handle item : h) l.append(rebuild(item, arrays, i, from_slots));
    return l;
  }
  if (PyTuple_Check(h.ptr())) {
    nb::list l;
    for (nb::handle item : h) l.append(rebuild(item, arrays, i, from_slots));
    return nb::tuple(l);
  }
  if (PyDict_Check(h.ptr())) {
    nb::dict d;
    for (auto [k, v] : nb::borrow<nb::dict>(h)) d[k] = rebuild(v, arrays, i, from_slots);
    return d;
  }
  return nb::borrow(h);
}

nb::object structure(nb::handle tree) {
  size_t i = 0;
  return rebuild(tree, nullptr, i, false);
}
nb::object fill(nb::handle structure, const std::vector<Array>& arrays, size_t& i) {
  return rebuild(structure, &arrays, i, true);
}

// A function's result as arrays: an array, or a tree of them.
std::vector<Array> outputs_of(nb::handle result, const char* fn) {
  std::vector<Array> out;
  flatten(result, out);
  if (out.empty())
    throw nb::type_error((std::string(fn) + ": the function must return an array or a "
                                            "list/tuple/dict of arrays")
                             .c_str());
  return out;
}

std::vector<Array> array_list(nb::handle seq, const char* fn, const char* what) {
  if (!PyList_Check(seq.ptr()) && !PyTuple_Check(seq.ptr()))
    throw nb::type_error((std::string(fn) + ": " + what + " must be a list of arrays").c_str());
  std::vector<Array> out;
  for (nb::handle h : seq) {
    if (!nb::isinstance<Array>(h))
      throw nb::type_error((std::string(fn) + ": " + what + " must be a list of arrays").c_str());
    out.push_back(nb::cast<Array>(h));
  }
  return out;
}

nb::list to_list(const std::vector<Array>& v) {
  nb::list l;
  for (auto& a : v) l.append(nb::cast(a));
  return l;
}

// ---- vjp / jvp ---------------------------------------------------------------------------------

// fun(*arrays) with its result flattened.
ArraysFn positional(nb::callable fun, const char* fn) {
  return [fun, fn](const std::vector<Array>& in) {
    nb::gil_scoped_acquire gil;
    nb::list args = to_list(in);
    return outputs_of(fun(*nb::tuple(args)), fn);
  };
}

nb::tuple py_vjp(nb::callable fun, nb::handle primals, nb::handle cotangents) {
  auto [o, g] = vjp(positional(fun, "vjp"), array_list(primals, "vjp", "primals"),
                    array_list(cotangents, "vjp", "cotangents"));
  return nb::make_tuple(to_list(o), to_list(g));
}

nb::tuple py_jvp(nb::callable fun, nb::handle primals, nb::handle tangents) {
  auto [o, t] = jvp(positional(fun, "jvp"), array_list(primals, "jvp", "primals"),
                    array_list(tangents, "jvp", "tangents"));
  return nb::make_tuple(to_list(o), to_list(t));
}

// ---- grad / value_and_grad ---------------------------------------------------------------------

struct GradSpec {
  std::vector<int> argnums;
  bool single = false;  // argnums was an int (or defaulted): the gradient is not in a tuple
  std::vector<std::string> argnames;
};

GradSpec grad_spec(nb::handle argnums, nb::handle argnames, const char* fn) {
  GradSpec s;
  if (nb::isinstance<nb::str>(argnames)) {
    s.argnames.push_back(nb::cast<std::string>(argnames));
  } else if (!argnames.is_none()) {
    for (nb::handle h : argnames) s.argnames.push_back(nb::cast<std::string>(h));
  }
  if (argnums.is_none()) {
    if (s.argnames.empty()) {
      s.argnums = {0};
      s.single = true;
    }
  } else if (PyLong_Check(argnums.ptr())) {
    s.argnums = {nb::cast<int>(argnums)};
    s.single = true;
  } else {
    for (nb::handle h : argnums) s.argnums.push_back(nb::cast<int>(h));
  }
  if (s.argnums.empty() && s.argnames.empty())
    throw std::invalid_argument(std::string(fn) + ": argnums and argnames are both empty");
  return s;
}

// fun(*args, **kwargs) and the gradient of its (first) output with respect to the arguments of
// `spec`, as MLX's value_and_grad returns them.
nb::tuple value_and_grad_call(nb::callable fun, const GradSpec& spec, nb::tuple args,
                              nb::dict kwargs, const char* fn) {
  int n = static_cast<int>(nb::len(args));
  std::vector<int> nums;
  for (int a : spec.argnums) {
    int v = a < 0 ? a + n : a;
    if (v < 0 || v >= n)
      throw std::invalid_argument(std::string(fn) + ": argnum " + std::to_string(a) +
                                  " is out of range for " + std::to_string(n) + " arguments");
    for (int u : nums)
      if (u == v) throw std::invalid_argument(std::string(fn) + ": argnums has duplicates");
    nums.push_back(v);
  }
  for (auto& name : spec.argnames)
    if (!kwargs.contains(name.c_str()))
      throw std::invalid_argument(std::string(fn) + ": the keyword argument '" + name +
                                  "' to differentiate was not given");
  // The differentiated arrays, in order: those of args[nums[0]], ..., then kwargs[argnames[0]]...
  std::vector<Array> diff;
  for (int a : nums) flatten(args[a], diff);
  for (auto& name : spec.argnames) flatten(kwargs[name.c_str()], diff);
  if (diff.empty())
    throw std::invalid_argument(std::string(fn) +
                                ": the arguments to differentiate hold no arrays");

  std::vector<nb::object> arg_structs, kw_structs;
  for (int a : nums) arg_structs.push_back(structure(args[a]));
  for (auto& name : spec.argnames) kw_structs.push_back(structure(kwargs[name.c_str()]));

  nb::object value;
  std::vector<int> all(diff.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  auto inner = [&](const std::vector<Array>& in) {
    size_t i = 0;
    nb::list new_args;
    for (nb::handle h : args) new_args.append(h);
    for (size_t k = 0; k < nums.size(); ++k) new_args[nums[k]] = fill(arg_structs[k], in, i);
    nb::dict new_kwargs;
    for (auto [k, v] : kwargs) new_kwargs[k] = v;
    for (size_t k = 0; k < spec.argnames.size(); ++k)
      new_kwargs[spec.argnames[k].c_str()] = fill(kw_structs[k], in, i);
    value = fun(*nb::tuple(new_args), **new_kwargs);
    nb::handle loss = value;
    if ((PyList_Check(value.ptr()) || PyTuple_Check(value.ptr())) && nb::len(value) > 0)
      loss = value[0];
    if (!nb::isinstance<Array>(loss))
      throw std::invalid_argument(std::string(fn) +
                                  ": the function must return a scalar array, or a list/tuple "
                                  "whose first element is one");
    return std::vector<Array>{nb::cast<Array>(loss)};
  };
  auto [outs, grads] = value_and_grad(inner, all)(diff);

  size_t i = 0;
  nb::list positional;
  for (auto& s : arg_structs) positional.append(fill(s, grads, i));
  nb::dict keyword;
  for (size_t k = 0; k < kw_structs.size(); ++k)
    keyword[spec.argnames[k].c_str()] = fill(kw_structs[k], grads, i);
  nb::object pos = spec.single ? nb::object(positional[0]) : nb::object(nb::tuple(positional));
  nb::object g = spec.argnames.empty() ? pos : nb::object(nb::make_tuple(pos, keyword));
  return nb::make_tuple(value, g);
}

// alloy.grad / value_and_grad are Python closures (python/alloy/_transforms.py) over `fun` and
// a _GradSpec, calling this with each call: a function held by a C++ closure is invisible to
// Python's garbage collector, and a module-level gradient function reaches itself through its
// function's globals (a cycle never freed: nanobind reported leaked arrays at exit).
nb::object py_grad_call(nb::callable fun, const GradSpec& spec, bool grad_only, nb::tuple args,
                        nb::dict kwargs) {
  const char* fn = grad_only ? "grad" : "value_and_grad";
  nb::tuple r = value_and_grad_call(fun, spec, args, kwargs, fn);
  return grad_only ? nb::object(r[1]) : nb::object(r);
}

// ---- custom_function ---------------------------------------------------------------------------

// MLX's mx.custom_function: a decorator whose .vjp / .jvp decorators give the wrapped function
// its own gradients. Keyword arguments are passed to the function as they are (not
// differentiated).
class CustomFunction {
 public:
  explicit CustomFunction(nb::callable fun) : fun_(hold(fun)) {}

  nb::object call(nb::args args, nb::kwargs kwargs) {
    std::vector<Array> primals;
    flatten(args, primals);
    // What the node keeps: references released safely (PyRef), structures without arrays.
    Ref fun = fun_, vjp = vjp_, jvp = jvp_;
    Ref arg_struct = hold(structure(args)), kw = hold(kwargs);
    auto out_struct = std::make_shared<Ref>();
    ArraysFn forward = [fun, arg_struct, kw, out_struct](const std::vector<Array>& in) {
      nb::gil_scoped_acquire gil;
      size_t i = 0;
      nb::object a = fill(arg_struct->get(), in, i);
      nb::object r = nb::borrow<nb::callable>(fun->get())(*nb::borrow<nb::tuple>(a),
                                                          **nb::borrow<nb::dict>(kw->get()));
      std::vector<Array> outs = outputs_of(r, "custom_function");
      if (!*out_struct) *out_struct = hold(structure(r));
      return outs;
    };
    std::optional<CustomVjpFn> vjp_fn;
    if (vjp)
      vjp_fn = [vjp, arg_struct, out_struct](const std::vector<Array>& p,
                                             const std::vector<Array>& ct,
                                             const std::vector<Array>& out) {
        nb::gil_scoped_acquire gil;
        size_t i = 0, j = 0, k = 0;
        nb::object primals = fill(arg_struct->get(), p, i);
        nb::object r = nb::borrow<nb::callable>(vjp->get())(
            primals, fill((*out_struct)->get(), ct, j), fill((*out_struct)->get(), out, k));
        std::vector<Array> g;
        flatten(r, g);
        return g;
      };
    std::optional<CustomJvpFn> jvp_fn;
    if (jvp)
      jvp_fn = [jvp, arg_struct](const std::vector<Array>& p, const std::vector<Array>& t,
                                 const std::vector<int>& argnums) {
        nb::gil_scoped_acquire gil;
        // MLX hands the jvp one tangent per primal: zeros where none was given.
        std::vector<Array> full;
        for (auto& a : p) full.push_back(zeros(a.shape(), a.dtype(), a.device()));
        for (size_t k = 0; k < argnums.size(); ++k) full[argnums[k]] = t[k];
        size_t i = 0, j = 0;
        nb::object r = nb::borrow<nb::callable>(jvp->get())(fill(arg_struct->get(), p, i),
                                                            fill(arg_struct->get(), full, j));
        std::vector<Array> out;
        flatten(r, out);
        return out;
      };
    std::vector<Array> outs = custom_function(forward, vjp_fn, jvp_fn)(primals);
    size_t i = 0;
    return fill((*out_struct)->get(), outs, i);
  }

  void set_vjp(nb::callable f) { vjp_ = hold(f); }
  void set_jvp(nb::callable f) { jvp_ = hold(f); }

  // Garbage collection (a decorated module-level function reaches itself through its globals):
  // the functions are reported only while this object alone holds them; while a graph node
  // built by a call holds one too, the node still needs it and nothing is reported.
  int traverse(visitproc visit, void* arg) const {
    for (const Ref* r : {&fun_, &vjp_, &jvp_})
      if (*r && r->use_count() == 1) Py_VISIT((*r)->get().ptr());
    return 0;
  }
  void clear() {
    for (Ref* r : {&fun_, &vjp_, &jvp_})
      if (*r && r->use_count() == 1) r->reset();
  }

 private:
  Ref fun_, vjp_, jvp_;
};

int custom_function_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  return nb::inst_ptr<CustomFunction>(self)->traverse(visit, arg);
}

int custom_function_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<CustomFunction>(self)->clear();
  return 0;
}

PyType_Slot custom_function_slots[] = {
    {Py_tp_traverse, reinterpret_cast<void*>(custom_function_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(custom_function_clear)},
    {0, nullptr}};

}  // namespace

void init_transforms(nb::module_& m) {
  m.def("vjp", &py_vjp, nb::arg("fun"), nb::arg("primals"), nb::arg("cotangents"),
        "Vector-Jacobian product of ``fun`` (a function of arrays returning an array or a list of "
        "arrays) at ``primals`` (a list of arrays) with ``cotangents`` (one per output, of its "
        "shape). Returns ``(outputs, vjps)``, two lists. As ``mlx.core.vjp``.");
  m.def("jvp", &py_jvp, nb::arg("fun"), nb::arg("primals"), nb::arg("tangents"),
        "Jacobian-vector product of ``fun`` at ``primals`` with ``tangents`` (one per primal, of "
        "its shape). Returns ``(outputs, jvps)``, two lists. As ``mlx.core.jvp``.");
  nb::class_<GradSpec>(m, "_GradSpec",
                       "Which arguments alloy.grad / value_and_grad differentiate (checked).")
      .def(
          "__init__",
          [](GradSpec* self, nb::handle argnums, nb::handle argnames, const std::string& fn) {
            new (self) GradSpec(grad_spec(argnums, argnames, fn.c_str()));
          },
          nb::arg("argnums").none(), nb::arg("argnames").none(), nb::arg("fn"));
  m.def("_grad_call", &py_grad_call, nb::arg("fun"), nb::arg("spec"), nb::arg("grad_only"),
        nb::arg("args"), nb::arg("kwargs"),
        "fun(*args, **kwargs) and its gradient as alloy.value_and_grad gives them (grad_only: the "
        "gradient alone, as alloy.grad).");
  m.def(
      "stop_gradient",
      [](const Array& a, nb::handle stream) {
        auto s = to_stream(stream);
        return s ? stop_gradient(a, *s) : stop_gradient(a);
      },
      nb::arg("a"), nb::kw_only(), nb::arg("stream") = nb::none(),
      "The same values with no gradient flowing through them (a view).");
  nb::class_<CustomFunction>(
      m, "custom_function", nb::type_slots(custom_function_slots),
      "Wraps a function of arrays so that it can be given its own vjp and jvp, as "
      "``mlx.core.custom_function``::\n\n"
      "    @alloy.custom_function\n"
      "    def f(x, y):\n"
      "        return alloy.sin(x) * y\n\n"
      "    @f.vjp\n"
      "    def f_vjp(primals, cotangent, output):\n"
      "        x, y = primals\n"
      "        return cotangent * alloy.cos(x) * y, cotangent * alloy.sin(x)\n\n"
      "    @f.jvp\n"
      "    def f_jvp(primals, tangents):\n"
      "        x, y = primals\n"
      "        dx, dy = tangents\n"
      "        return dx * alloy.cos(x) * y + dy * alloy.sin(x)\n\n"
      "Without a vjp (jvp) the function's own graph is differentiated. This is how a custom "
      "kernel gets a gradient. Keyword arguments are passed through, not differentiated.")
      .def(nb::init<nb::callable>(), nb::arg("fun"))
      .def("__call__", &CustomFunction::call)
      .def(
          "vjp",
          [](nb::handle self, nb::callable f) {
            nb::cast<CustomFunction&>(self).set_vjp(f);
            return nb::borrow(self);
          },
          nb::arg("fun"),
          "Sets the vjp: ``fun(primals, cotangent, output)`` with ``primals`` the tuple of "
          "arguments and ``cotangent``/``output`` shaped as the function's result; returns one "
          "cotangent per primal (a tuple, or an array for one argument).")
      .def(
          "jvp",
          [](nb::handle self, nb::callable f) {
            nb::cast<CustomFunction&>(self).set_jvp(f);
            return nb::borrow(self);
          },
          nb::arg("fun"),
          "Sets the jvp: ``fun(primals, tangents)`` with one tangent per argument; returns the "
          "output's tangent(s).")
      .def(
          "vmap",
          [](nb::handle, nb::handle) -> nb::object {
            throw NotSupported("custom_function", "not supported: vmap (Alloy has no vmap)");
          },
          nb::arg("fun"), "Not supported (Alloy has no vmap).");
}

}  // namespace alloy::python
