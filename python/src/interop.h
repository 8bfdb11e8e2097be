// Exchange of array memory with NumPy, PyTorch, CuPy...: the buffer protocol, __array__ and DLPack
// (export in dlpack.cpp, import in import_external()).
#pragma once
#include <cstdint>

#include "bindings.h"

namespace alloy::python {

/// numpy.asarray(a) / a.__array__(dtype, copy): a view of CPU memory (bfloat16 as ml_dtypes'
/// bfloat16); GPU arrays are copied to the host.
nb::object array_to_numpy(nb::handle self, const Array& a, nb::handle dtype, nb::handle copy);
/// a.__dlpack__(stream=..., max_version=..., dl_device=..., copy=...): a DLPack capsule viewing
/// the array's memory, which stays alive as long as the capsule's consumer needs it.
nb::object array_dlpack(nb::handle self, const Array& a, nb::handle stream, nb::handle max_version,
                        nb::handle dl_device, nb::handle copy);
/// a.__dlpack_device__(): (1, 0) for the CPU, (2, index) for a CUDA GPU.
nb::tuple array_dlpack_device(const Array& a);

/// The CUstream on which Alloy runs GPU work, as an integer (0 when there is no GPU). Producers
/// of imported CUDA memory order their pending writes before this stream (DLPack `stream=`).
uintptr_t cuda_work_stream();

/// alloy._core._from_dlpack_stream_ordered (see interop.cpp).
Array import_stream_ordered(nb::handle capsule);
void init_interop(nb::module_& m);

/// Buffer protocol slots of alloy.array (CPU memory only).
int array_getbuffer(PyObject* exporter, Py_buffer* view, int flags);
void array_releasebuffer(PyObject* exporter, Py_buffer* view);

}  // namespace alloy::python
