// The pieces of the alloy._core extension (one init_* per binding file) and the conversions from
// Python objects that several of them share. The bindings are thin: they convert arguments, call
// the C++ API (include/alloy) and carry the docstrings.
#pragma once
#include <nanobind/nanobind.h>

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/cuda.h"

namespace nb = nanobind;

namespace alloy::python {

void init_errors(nb::module_& m);
/// Whether the interpreter is finalizing (or gone): a thread other than the finalizing one that
/// takes the GIL then is ended by CPython with a forced unwind, which a noexcept destructor turns
/// into std::terminate.
bool python_finalizing();
/// Deletes a Python-owned object that C++ holds (its last reference may go on any thread, e.g. a
/// stream worker): with the GIL; while the interpreter is finalizing, it is left to the process's
/// end instead (python_finalizing).
template <class T>
void delete_with_gil(T* p) {
  if (python_finalizing()) return;
  nb::gil_scoped_acquire gil;
  delete p;
}
/// Evaluates `a`: with the GIL held when that runs on this thread alone (alloy::eval_inline;
/// docs/architecture.md, "The GIL and evaluation"; ALLOY_EVAL_INLINE=0 turns that off for
/// measurements), else with the GIL released.
void eval_released(const Array& a);
/// Sets the Python error for a C++ exception, as the bindings' translators do (for code that runs
/// outside nanobind's dispatch, e.g. a type slot).
void set_python_error(const std::exception_ptr& p);
void init_dtype(nb::module_& m);
void init_device(nb::module_& m);
void init_array(nb::module_& m);
void init_ops(nb::module_& m);  // ops.cpp: alloy.add, ..., the array operators
void init_kernel(nb::module_& m);
void init_cuda(nb::module_& m);
void bind_library(nb::module_& m);     // library.cpp: compile_shader, Library, CheckError
void init_export(nb::module_& m);      // export.cpp: export_function, import_function, exporter
void init_shape_expr(nb::module_& m);  // shape_expr.cpp: alloy.ShapeExpr
void init_compile(nb::module_& m);     // compile.cpp: alloy.compile's C++ half

/// A kernel call's geometry argument (grid, threadgroup or output_shapes) with a callable turned
/// into its value: called once with symbolic shapes (per input a tuple of ShapeExpr dims), so
/// that `lambda shapes: (shapes[0][0], 1, 1)` becomes expressions of the input shapes; a
/// callable that cannot take symbols (it compares them, converts them to int...) raises
/// TypeError there and is called with the concrete shapes instead. Other values are returned
/// unchanged.
nb::object resolve_geometry(nb::handle value, const std::vector<Array>& inputs);
/// Whether a geometry value (a sequence, or a list of sequences) holds a ShapeExpr.
bool holds_shape_expr(nb::handle value);
/// A (3-element) sequence of ints and ShapeExprs.
DimsExpr to_dims_expr(nb::handle value, const char* name);
/// A list of sequences of ints and ShapeExprs (output_shapes).
std::vector<std::vector<ShapeExpr>> to_shape_exprs(nb::handle value);
// transforms.cpp: grad, value_and_grad, vjp, jvp, custom_function, stop_gradient
void init_transforms(nb::module_& m);
void bind_library(nb::module_& m);   // library.cpp: compile_shader, Library, CheckError
void init_export(nb::module_& m);    // export.cpp: export_function, import_function, exporter
void init_ops_misc(nb::module_& m);  // ops_misc.cpp: scans, indexing, a[...] = b, alloy.random
void init_fast(nb::module_& m);      // fast.cpp: alloy.fast.rms_norm, layer_norm, rope, sdpa

/// a[key] (array.cpp): views for integers, slices, None and '...'; advanced_index otherwise.
Array basic_index(const Array& a, nb::handle key);
/// Whether `key` (or an item of a tuple key) is an index array (alloy/NumPy array, list).
bool has_array_index(nb::handle key);
/// NumPy's advanced indexing (integer arrays, mixed with integers, slices, None, '...').
Array advanced_index(const Array& a, nb::handle key);

/// MLX's `stream` argument: None, an alloy.Stream, an alloy.Device or alloy.cpu / alloy.gpu
/// (their default streams). nullopt for None.
std::optional<Stream> to_stream(nb::handle h, const char* what = "stream");

/// str(h) as a C++ string.
inline std::string py_str(nb::handle h) {
  nb::object s = nb::steal(PyObject_Str(h.ptr()));
  if (!s.is_valid()) throw nb::python_error();
  const char* c = PyUnicode_AsUTF8(s.ptr());
  if (!c) throw nb::python_error();
  return c;
}

/// alloy.Dtype, a NumPy dtype (or type, e.g. numpy.float32) or a name ("float32", "half").
/// Raises TypeError for anything else.
Dtype to_dtype(nb::handle h);
/// None, alloy.Device, alloy.DeviceType (alloy.cpu / alloy.gpu) or alloy.Stream.
std::optional<Device> to_device(nb::handle h, const char* what = "stream");

/// `alloy.array(value, dtype)`: a new array holding a copy of `value` (scalar, nested sequence,
/// alloy.array, NumPy array or any DLPack / buffer-protocol object) on `device`.
Array to_array(nb::handle value, std::optional<Dtype> dtype, std::optional<Device> device);
/// A kernel input: alloy arrays as they are, Python scalars as 0-d arrays (bool, int32, float32,
/// as MLX makes them), DLPack / buffer-protocol objects (NumPy, PyTorch, CuPy) without a copy,
/// sequences copied.
Array as_input(nb::handle value);
/// Zero-copy import of a DLPack or buffer-protocol object (CPU or CUDA memory). `bfloat16`
/// NumPy arrays (ml_dtypes) are imported through their 16-bit pattern.
Array import_external(nb::handle obj);
/// A copy of `a` with elements converted to `dtype` (through float64, like Array::from_doubles),
/// on `device` (default: a's device).
Array astype(const Array& a, Dtype dtype, std::optional<Device> device = std::nullopt);
/// A row-major copy of `a` on `device` that shares no memory with `a`.
Array copy_to(const Array& a, Device device);

}  // namespace alloy::python
