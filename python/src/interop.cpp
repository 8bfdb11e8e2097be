// Sharing array memory with other Python libraries without copies.
//
// Export: the buffer protocol (CPU), __array__ (NumPy; copies GPU arrays to the host) and DLPack
// (__dlpack__ / __dlpack_device__, CPU and CUDA). The exported memory is owned by the alloy.array
// object, which the consumer's view keeps alive.
// Import: nanobind's ndarray caster reads DLPack capsules and buffer-protocol objects; the memory
// is wrapped in an Array whose buffer keeps the producer's object alive and releases it when the
// last Alloy view goes away.
//
// CUDA ordering (DLPack stream semantics): on import the producer is asked (`stream=`) to order its
// pending writes before Alloy's stream; on export Alloy's stream is synchronized before the capsule
// is handed out, so any consumer stream sees finished data.
#include "interop.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace alloy::python {
namespace {

namespace dl = nb::dlpack;
using ImportedArray = nb::ndarray<nb::ro>;

// DLPack device types (dlpack.h: DLDeviceType).
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;

Dtype from_dlpack_dtype(dl::dtype t) {
  using C = dl::dtype_code;
  if (t.lanes == 1) {
    switch (static_cast<C>(t.code)) {
      case C::Bool:
        if (t.bits == 8) return Dtype::bool_;
        break;
      case C::Int:
        if (t.bits == 8) return Dtype::int8;
        if (t.bits == 16) return Dtype::int16;
        if (t.bits == 32) return Dtype::int32;
        if (t.bits == 64) return Dtype::int64;
        break;
      case C::UInt:
        if (t.bits == 8) return Dtype::uint8;
        if (t.bits == 16) return Dtype::uint16;
        if (t.bits == 32) return Dtype::uint32;
        if (t.bits == 64) return Dtype::uint64;
        break;
      case C::Float:
        if (t.bits == 16) return Dtype::float16;
        if (t.bits == 32) return Dtype::float32;
        if (t.bits == 64) return Dtype::float64;
        break;
      case C::Bfloat:
        if (t.bits == 16) return Dtype::bfloat16;
        break;
      case C::Complex:
        if (t.bits == 64) return Dtype::complex64;
        break;
      default:
        break;
    }
  }
  throw nb::type_error(("alloy has no dtype for DLPack type code " + std::to_string(t.code) +
                        " with " + std::to_string(t.bits) + " bits x " + std::to_string(t.lanes) +
                        " lanes")
                           .c_str());
}

dl::dtype to_dlpack_dtype(Dtype t) {
  using C = dl::dtype_code;
  C code = C::Float;
  switch (t) {
    case Dtype::bool_:
      code = C::Bool;
      break;
    case Dtype::int8:
    case Dtype::int16:
    case Dtype::int32:
    case Dtype::int64:
      code = C::Int;
      break;
    case Dtype::uint8:
    case Dtype::uint16:
    case Dtype::uint32:
    case Dtype::uint64:
      code = C::UInt;
      break;
    case Dtype::float16:
    case Dtype::float32:
    case Dtype::float64:
      code = C::Float;
      break;
    case Dtype::bfloat16:
      code = C::Bfloat;
      break;
    case Dtype::complex64:
      code = C::Complex;
      break;
  }
  dl::dtype d;
  d.code = static_cast<uint8_t>(code);
  d.bits = static_cast<uint8_t>(size_of(t) * 8);
  d.lanes = 1;
  return d;
}

// Wraps imported memory: the buffer spans every element the view reaches (strides may be
// negative), and holds the producer's array until Alloy no longer needs it.
// `stream_ordered`: the producer keeps the memory valid for work queued on its stream (PyTorch's
// caching allocator), and Alloy runs on that stream: releasing the view need not wait.
Array wrap_imported(const ImportedArray& nd, std::optional<Dtype> as, bool stream_ordered = false) {
  Device dev;
  int dev_type = nd.device_type();
  if (dev_type == kDLCPU || dev_type == kDLCUDAHost) {
    dev = Device::cpu();
  } else if (dev_type == kDLCUDA || dev_type == kDLCUDAManaged) {
    if (!gpu_available())
      throw std::invalid_argument("the array is in CUDA memory but Alloy has no GPU: " +
                                  cuda::unavailable_reason());
    int id = static_cast<int>(nd.device_id());
    if (id < 0 || id >= gpu_count())
      throw std::invalid_argument("the array is on CUDA device " + std::to_string(id) +
                                  "; Alloy sees " + std::to_string(gpu_count()) + " GPU(s)");
    dev = Device::gpu(id);
  } else {
    throw nb::type_error(("alloy cannot use memory of DLPack device type " +
                          std::to_string(dev_type) + " (only CPU and CUDA)")
                             .c_str());
  }
  Dtype dt = as ? *as : from_dlpack_dtype(nd.dtype());
  size_t item = size_of(dt);

  int ndim = static_cast<int>(nd.ndim());
  Shape shape(ndim);
  Strides strides(ndim);
  for (int i = 0; i < ndim; ++i) {
    shape[i] = static_cast<int64_t>(nd.shape(i));
    strides[i] = nd.stride(i);
  }
  (void)item;
  // Released with the GIL on whichever thread drops the last reference (a stream worker, once
  // the kernels that read it ran); not while the interpreter is finalizing (delete_with_gil).
  std::shared_ptr<ImportedArray> holder(new ImportedArray(nd), delete_with_gil<ImportedArray>);
  bool gpu = dev.type == Device::Type::gpu && !stream_ordered;
  void* first = const_cast<void*>(static_cast<const void*>(nd.data()));
  return Array::from_external(first, std::move(shape), std::move(strides), dt, dev,
                              [holder, gpu, dev]() {
                                // Alloy's kernels may still read the memory, and the producer may
                                // reuse it once released: wait for Alloy's stream unless it is idle
                                // (the common case: outputs read, or never run).
                                if (gpu) {
                                  try {
                                    if (!cuda::is_idle(dev.index)) synchronize(dev);
                                  } catch (...) {
                                  }
                                }
                              });
}

bool is_numpy_bfloat16(nb::handle obj) {
  if (!nb::hasattr(obj, "dtype") || !nb::hasattr(obj, "view")) return false;
  try {
    return py_str(obj.attr("dtype")) == "bfloat16";
  } catch (const nb::python_error&) {
    return false;
  }
}

// Row-major-or-not checks in elements, for the buffer protocol's contiguity requests.
bool c_contiguous(const Array& a) {
  int64_t expect = 1;
  for (int i = a.ndim() - 1; i >= 0; --i) {
    if (a.shape()[i] != 1 && a.strides()[i] != expect) return false;
    expect *= a.shape()[i];
  }
  return true;
}
bool f_contiguous(const Array& a) {
  int64_t expect = 1;
  for (int i = 0; i < a.ndim(); ++i) {
    if (a.shape()[i] != 1 && a.strides()[i] != expect) return false;
    expect *= a.shape()[i];
  }
  return true;
}

const char* buffer_format(Dtype t) {
  switch (t) {
    case Dtype::bool_:
      return "?";
    case Dtype::int8:
      return "b";
    case Dtype::int16:
      return "h";
    case Dtype::int32:
      return "i";
    case Dtype::int64:
      return "q";
    case Dtype::uint8:
      return "B";
    case Dtype::uint16:
      return "H";
    case Dtype::uint32:
      return "I";
    case Dtype::uint64:
      return "Q";
    case Dtype::float16:
      return "e";
    case Dtype::float32:
      return "f";
    case Dtype::float64:
      return "d";
    case Dtype::complex64:
      return "Zf";
    case Dtype::bfloat16:
      return nullptr;  // no struct-module code
  }
  return nullptr;
}

// A view of the materialized `a` as a nanobind ndarray of element type `dtype`.
template <class Framework>
nb::ndarray<Framework> host_view(const Array& a, nb::handle owner, dl::dtype dtype, int device_type,
                                 int device_id) {
  std::vector<size_t> shape(a.shape().begin(), a.shape().end());
  void* data = a.is_evaluated() ? const_cast<void*>(a.data()) : nullptr;
  return nb::ndarray<Framework>(data, shape.size(), shape.data(), owner, a.strides().data(), dtype,
                                device_type, device_id);
}

struct BufferShape {
  std::vector<Py_ssize_t> shape, strides;
};

}  // namespace

uintptr_t cuda_work_stream() {
  if (!gpu_available()) return 0;
  return reinterpret_cast<uintptr_t>(cuda::stream_handle(default_stream(Device::gpu())));
}

Array import_external(nb::handle obj) {
  if (nb::isinstance<Array>(obj)) return nb::cast<Array>(obj);
  nb::object src = nb::borrow(obj);
  // CUDA producers (PyTorch, CuPy) order their pending work before Alloy's stream when asked.
  if (nb::hasattr(obj, "__dlpack_device__") && nb::hasattr(obj, "__dlpack__")) {
    nb::tuple where = nb::cast<nb::tuple>(obj.attr("__dlpack_device__")());
    int type = nb::cast<int>(where[0]);
    if (type == kDLCUDA || type == kDLCUDAManaged) {
      uintptr_t stream = cuda_work_stream();
      if (stream == 0)
        throw std::invalid_argument("the array is in CUDA memory but Alloy has no GPU: " +
                                    cuda::unavailable_reason());
      try {
        src = obj.attr("__dlpack__")(nb::arg("stream") = stream,
                                     nb::arg("max_version") = nb::make_tuple(1, 0));
      } catch (nb::python_error& e) {
        if (!e.matches(PyExc_TypeError)) throw;
        src = obj.attr("__dlpack__")(nb::arg("stream") = stream);  // producer predates DLPack 1.0
      }
    }
  }
  // A DLPack capsule: say what is wrong with it rather than "cannot make an alloy array".
  if (PyCapsule_CheckExact(src.ptr())) {
    if (PyCapsule_IsValid(src.ptr(), "used_dltensor") ||
        PyCapsule_IsValid(src.ptr(), "used_dltensor_versioned"))
      throw nb::value_error(
          "this DLPack capsule was already imported (a capsule can be consumed once; call the "
          "producer's __dlpack__() again for a new one)");
    if (!PyCapsule_IsValid(src.ptr(), "dltensor") &&
        !PyCapsule_IsValid(src.ptr(), "dltensor_versioned")) {
      const char* name = PyCapsule_GetName(src.ptr());
      PyErr_Clear();
      throw nb::type_error(("cannot make an alloy array from a PyCapsule named '" +
                            std::string(name ? name : "(null)") +
                            "': not a DLPack tensor (expected a capsule named 'dltensor')")
                               .c_str());
    }
  }
  ImportedArray nd;
  if (nb::try_cast(src, nd)) return wrap_imported(nd, std::nullopt);
  PyErr_Clear();  // a failed buffer-protocol probe may leave its error set
  // A CPU producer whose __dlpack__ raises: call it again to keep its own exception (the cast
  // above swallows it) and chain it to ours if no other protocol works. Only on this failure
  // path: a successful import calls the producer's __dlpack__ once.
  std::optional<nb::python_error> producer_error;
  if (src.is(obj) && !PyCapsule_CheckExact(obj.ptr()) && nb::hasattr(obj, "__dlpack__")) {
    try {
      nb::object probe = obj.attr("__dlpack__")();
    } catch (nb::python_error& e) {
      producer_error.emplace(std::move(e));
    }
  }
  // NumPy has no DLPack/buffer code for ml_dtypes' bfloat16: import its 16-bit patterns.
  if (is_numpy_bfloat16(obj)) {
    nb::object bits = obj.attr("view")(nb::module_::import_("numpy").attr("uint16"));
    if (nb::try_cast(bits, nd)) return wrap_imported(nd, Dtype::bfloat16);
  }
  if (producer_error)
    nb::raise_from(*producer_error, PyExc_TypeError,
                   "cannot make an alloy array from %s: its __dlpack__() raised %s",
                   nb::inst_name(obj).c_str(), nb::type_name(producer_error->type()).c_str());
  throw nb::type_error(("cannot make an alloy array from " +
                        std::string(nb::inst_name(obj).c_str()) +
                        " (expected an alloy.array, a scalar, a sequence, or an object with "
                        "__dlpack__ or the buffer protocol such as numpy.ndarray, torch.Tensor "
                        "or cupy.ndarray)")
                           .c_str());
}

Array import_stream_ordered(nb::handle capsule) {
  if (!PyCapsule_CheckExact(capsule.ptr()))
    throw nb::type_error("_from_dlpack_stream_ordered expects a DLPack capsule");
  ImportedArray nd;
  if (!nb::try_cast(capsule, nd)) {
    PyErr_Clear();
    return import_external(capsule);  // its message says what is wrong with the capsule
  }
  return wrap_imported(nd, std::nullopt, /*stream_ordered=*/true);
}

void init_interop(nb::module_& m) {
  m.def("_from_dlpack_stream_ordered", &import_stream_ordered, nb::arg("capsule"),
        "An array over a DLPack capsule's memory (no copy, no stream handshake) whose producer "
        "keeps the memory valid in the order of the CUDA stream Alloy's work on it runs on (the "
        "caller's promise; alloy.torch runs on torch's current stream): releasing the array does "
        "not wait for Alloy's GPU work. For CPU memory the same as from_dlpack.");
}

nb::tuple array_dlpack_device(const Array& a) {
  if (a.device().type == Device::Type::gpu) return nb::make_tuple(kDLCUDA, a.device().index);
  return nb::make_tuple(kDLCPU, 0);
}

nb::object array_dlpack(nb::handle self, const Array& a, nb::handle stream, nb::handle max_version,
                        nb::handle dl_device, nb::handle copy) {
  eval_released(a);
  Array src = a;
  nb::object owner = nb::borrow(self);
  if (!copy.is_none() && nb::cast<bool>(copy)) {
    auto bytes = a.to_bytes();
    src = Array::from_bytes(bytes.data(), a.shape(), a.dtype(), a.device());
    owner = nb::cast(src);
  }
  if (src.device().type == Device::Type::gpu) {
    // stream=-1: the consumer asks for no synchronization.
    bool no_sync =
        !stream.is_none() && nb::isinstance<nb::int_>(stream) && nb::cast<int64_t>(stream) == -1;
    if (!no_sync) {
      nb::gil_scoped_release release;
      synchronize(src.device());
    }
  }
  bool gpu = src.device().type == Device::Type::gpu;
  auto nd = host_view<nb::array_api>(src, owner, to_dlpack_dtype(src.dtype()),
                                     gpu ? kDLCUDA : kDLCPU, gpu ? src.device().index : 0);
  nb::object exported = nd.cast(nb::rv_policy::reference);
  nb::dict kwargs;
  if (!max_version.is_none()) kwargs["max_version"] = max_version;
  if (!dl_device.is_none()) kwargs["dl_device"] = dl_device;
  return exported.attr("__dlpack__")(**kwargs);
}

nb::object array_to_numpy(nb::handle self, const Array& a, nb::handle dtype, nb::handle copy) {
  bool copy_true = !copy.is_none() && nb::cast<bool>(copy);
  bool copy_false = !copy.is_none() && !nb::cast<bool>(copy);
  eval_released(a);
  Array src = a;
  nb::object owner = nb::borrow(self);
  if (a.device().type == Device::Type::gpu) {
    if (copy_false)
      throw std::invalid_argument(
          "copy=False: the array is in GPU memory; NumPy needs a copy in host memory");
    {
      nb::gil_scoped_release release;
      src = a.to(Device::cpu());  // lazy: a ToDevice node
      src.eval();
    }
    owner = nb::cast(src);
    copy_true = false;  // already a fresh copy
  }
  bool bf16 = src.dtype() == Dtype::bfloat16;
  dl::dtype dt = bf16 ? to_dlpack_dtype(Dtype::uint16) : to_dlpack_dtype(src.dtype());
  nb::object out = host_view<nb::numpy>(src, owner, dt, kDLCPU, 0).cast(nb::rv_policy::reference);
  if (bf16) {
    nb::object ml_dtypes;
    try {
      ml_dtypes = nb::module_::import_("ml_dtypes");
    } catch (nb::python_error&) {
      throw nb::type_error(
          "NumPy has no bfloat16: install ml_dtypes (pip install ml_dtypes), or convert first "
          "with a.astype(alloy.float32)");
    }
    out = out.attr("view")(ml_dtypes.attr("bfloat16"));
  }
  if (!dtype.is_none()) return out.attr("astype")(dtype);
  if (copy_true) return out.attr("copy")();
  return out;
}

int array_getbuffer(PyObject* exporter, Py_buffer* view, int flags) {
  view->obj = nullptr;
  // Evaluate through the Python method so that kernel errors surface as alloy exceptions.
  PyObject* r = PyObject_CallMethod(exporter, "eval", nullptr);
  if (!r) return -1;
  Py_DECREF(r);
  const Array& a = *nb::inst_ptr<Array>(exporter);
  if (a.device().type != Device::Type::cpu) {
    PyErr_SetString(PyExc_BufferError,
                    "the array is in GPU memory: the buffer protocol needs host memory (use "
                    "numpy.asarray(a), which copies, or DLPack)");
    return -1;
  }
  const char* format = buffer_format(a.dtype());
  if (!format) {
    PyErr_SetString(PyExc_BufferError,
                    "bfloat16 has no buffer-protocol format (numpy.asarray(a) works with "
                    "ml_dtypes installed)");
    return -1;
  }
  bool c = c_contiguous(a), f = f_contiguous(a);
  if (((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !c) ||
      ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !f) ||
      ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS && !c && !f) ||
      ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !c)) {
    PyErr_SetString(PyExc_BufferError, "the array is a strided view, not contiguous");
    return -1;
  }
  auto* info = new BufferShape;
  Py_ssize_t item = static_cast<Py_ssize_t>(a.itemsize());
  for (int i = 0; i < a.ndim(); ++i) {
    info->shape.push_back(static_cast<Py_ssize_t>(a.shape()[i]));
    info->strides.push_back(static_cast<Py_ssize_t>(a.strides()[i]) * item);
  }
  view->buf = a.is_evaluated() ? const_cast<void*>(a.data()) : nullptr;
  view->obj = Py_NewRef(exporter);
  view->len = static_cast<Py_ssize_t>(a.nbytes());
  view->readonly = 0;
  view->itemsize = item;
  view->format = (flags & PyBUF_FORMAT) ? const_cast<char*>(format) : nullptr;
  view->ndim = a.ndim();
  view->shape = (flags & PyBUF_ND) ? info->shape.data() : nullptr;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? info->strides.data() : nullptr;
  view->suboffsets = nullptr;
  view->internal = info;
  return 0;
}

void array_releasebuffer(PyObject*, Py_buffer* view) {
  delete static_cast<BufferShape*>(view->internal);
}

}  // namespace alloy::python
