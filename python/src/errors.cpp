// C++ exceptions -> Python exceptions. std::invalid_argument becomes ValueError (nanobind's
// default, as in MLX); alloy::Error and its subclasses become alloy.KernelError and subclasses of
// it, all RuntimeErrors, carrying the kernel's name (and the compiler's raw log for CompileError).
#include <exception>
#include <new>
#include <stdexcept>

#include "bindings.h"

namespace alloy::python {
namespace {

// Created once at import and kept for the life of the process (never decref'd: the translator may
// run until interpreter shutdown).
PyObject* g_kernel_error = nullptr;
PyObject* g_compile_error = nullptr;
PyObject* g_not_supported_error = nullptr;

PyObject* new_exception(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("alloy.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::borrow(type);
  return type;
}

void raise(PyObject* type, const Error& e, const std::string* raw_log) {
  nb::object exc = nb::steal(PyObject_CallOneArg(type, nb::str(e.what()).ptr()));
  if (!exc.is_valid()) return;  // the call set an error already
  exc.attr("kernel") = nb::str(e.kernel().c_str());
  if (raw_log) exc.attr("raw_log") = nb::str(raw_log->c_str());
  PyErr_SetObject(type, exc.ptr());
}

// Translates alloy exceptions; false for others.
bool raise_alloy_error(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const Interrupted& e) {
    // The interrupt check's own exception (KeyboardInterrupt from PyErr_CheckSignals).
    try {
      std::rethrow_exception(e.cause());
    } catch (const nb::python_error& pe) {
      // Not pe.restore(), which empties the shared exception: a failed evaluation is rethrown
      // on every read (NumPy reads again after a failed buffer request).
      nb::handle v = pe.value();
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(v.ptr())), v.ptr());
    } catch (...) {
      PyErr_SetString(PyExc_KeyboardInterrupt, "interrupted");
    }
  } catch (const CompileError& e) {
    raise(g_compile_error, e, &e.raw_log());
  } catch (const NotSupported& e) {
    raise(g_not_supported_error, e, nullptr);
  } catch (const Error& e) {
    raise(g_kernel_error, e, nullptr);
  } catch (...) {
    return false;
  }
  return true;
}

PyObject* builtin_type(nb::exception_type t) {
  switch (t) {
    case nb::exception_type::stop_iteration:
      return PyExc_StopIteration;
    case nb::exception_type::index_error:
      return PyExc_IndexError;
    case nb::exception_type::key_error:
      return PyExc_KeyError;
    case nb::exception_type::value_error:
      return PyExc_ValueError;
    case nb::exception_type::type_error:
      return PyExc_TypeError;
    case nb::exception_type::buffer_error:
      return PyExc_BufferError;
    case nb::exception_type::import_error:
      return PyExc_ImportError;
    case nb::exception_type::attribute_error:
      return PyExc_AttributeError;
    default:
      return PyExc_RuntimeError;
  }
}

}  // namespace

void set_python_error(const std::exception_ptr& p) {
  if (raise_alloy_error(p)) return;
  try {
    std::rethrow_exception(p);
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const nb::builtin_exception& e) {
    PyErr_SetString(builtin_type(e.type()), e.what());
  } catch (const std::bad_alloc& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (const std::out_of_range& e) {
    PyErr_SetString(PyExc_IndexError, e.what());
  } catch (const std::overflow_error& e) {
    PyErr_SetString(PyExc_OverflowError, e.what());
  } catch (const std::logic_error& e) {  // invalid_argument, domain_error, length_error
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

void init_errors(nb::module_& m) {
  g_kernel_error =
      new_exception(m, "KernelError", PyExc_RuntimeError,
                    "A kernel failed to compile or to run. `kernel` is the kernel's name.");
  g_compile_error = new_exception(
      m, "CompileError", g_kernel_error,
      "A kernel failed to compile. The message shows the compiler's diagnostics with line numbers "
      "of the kernel's own source (body or header) and the offending lines; `raw_log` is the "
      "compiler's untranslated output.");
  g_not_supported_error = new_exception(
      m, "NotSupportedError", g_kernel_error,
      "The kernel uses a Metal feature that Alloy does not support on the target device.");

  // Ctrl-C during a long CPU launch: KeyboardInterrupt at the next threadgroup boundary. The
  // launch runs with the GIL released; the check (called on the launching thread only) takes it
  // back briefly, and only on Python's main thread, the one that sees SIGINT.
  unsigned long main_ident = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  set_interrupt_check([main_ident] {
    if (PyThread_get_thread_ident() != main_ident || python_finalizing()) return;
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  });

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    if (!raise_alloy_error(p)) std::rethrow_exception(p);  // not ours: the next translator
  });
}

bool python_finalizing() {
  if (!Py_IsInitialized()) return true;
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

}  // namespace alloy::python
