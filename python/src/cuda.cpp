// alloy.cuda: is a GPU there, what is it, how much memory does Alloy hold on it (alloy/cuda.h).
// Bound as _core.cuda_<name> and re-exported by python/alloy/cuda.py (a plain module, so that
// the generated type stubs cover it).
#include <nanobind/stl/string.h>

#include "bindings.h"

namespace alloy::python {

void init_cuda(nb::module_& m) {
  m.def("cuda_is_available", &cuda::is_available,
        "True when the CUDA driver loaded and a GPU was found (alloy.Device(alloy.gpu, i) is "
        "device i of those CUDA_VISIBLE_DEVICES shows; GPU 0 is the default).");
  m.def("cuda_device_count", &cuda::device_count, "How many GPUs CUDA shows (0 when unavailable).");
  m.def("cuda_unavailable_reason", &cuda::unavailable_reason,
        "Why is_available() is False ('' when it is True).");
  m.def("cuda_device_name", &cuda::device_name, nb::arg("device") = 0,
        "The name of GPU `device`, '' when unavailable.");
  m.def("cuda_device_arch", &cuda::device_arch, nb::arg("device") = 0,
        "The architecture of GPU `device` as NVRTC names it ('sm_90'), '' when unavailable.");
  m.def(
      "cuda_memory_stats",
      [](int device) {
        cuda::MemoryStats s = cuda::memory_stats(device);
        nb::dict d;
        d["active_bytes"] = s.active_bytes;
        d["cached_bytes"] = s.cached_bytes;
        d["peak_active_bytes"] = s.peak_active_bytes;
        d["num_allocs"] = s.num_allocs;
        d["num_cache_hits"] = s.num_cache_hits;
        d["num_frees"] = s.num_frees;
        return d;
      },
      nb::arg("device") = 0,
      "Memory of GPU `device` held by Alloy's caching allocator: active_bytes, cached_bytes, "
      "peak_active_bytes, num_allocs, num_cache_hits, num_frees (all 0 when unused).");
  m.def(
      "cuda_empty_cache",
      [] {
        nb::gil_scoped_release release;
        cuda::empty_cache();
      },
      "Waits for pending GPU work, then returns the cached blocks to the driver (every GPU).");
  m.def(
      "cuda_synchronize",
      [] {
        nb::gil_scoped_release release;
        cuda::synchronize();
      },
      "Waits for pending GPU work; raises alloy.KernelError naming the kernel when it failed.");
  m.def(
      "cuda_stream_from_handle",
      [](uintptr_t handle, int device) {
        return cuda::stream_from_handle(reinterpret_cast<void*>(handle), device);
      },
      nb::arg("handle"), nb::arg("device") = -1,
      "The alloy.Stream that enqueues on an existing CUDA stream, given its CUstream as an "
      "integer (e.g. torch.cuda.current_stream().cuda_stream, cupy's Stream.ptr): Alloy's work "
      "runs in order with the owner's. 0 gives the default stream. `device`: the stream's GPU "
      "(-1: the one the driver names; give it for CUDA's legacy default stream handles 1 and "
      "2, which stand for the current device's).");
  m.def(
      "cuda_stream_handle",
      [](const Stream& s) { return reinterpret_cast<uintptr_t>(cuda::stream_handle(s)); },
      nb::arg("stream"), "The CUstream behind a GPU stream, as an integer.");
}

}  // namespace alloy::python
