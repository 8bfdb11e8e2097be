// The CUDA backend, as seen from user code: is a GPU there, what is it, how much memory does
// Alloy hold on it. The driver and NVRTC are loaded at run time, so every function here works (and
// reports "unavailable") on machines without CUDA.
#pragma once
#include <cstddef>
#include <string>

#include "alloy/stream.h"

namespace alloy::cuda {

/// True when the CUDA driver (libcuda.so.1) loaded and a device was found. Device::gpu(i) is
/// device i of those CUDA_VISIBLE_DEVICES shows; GPU 0 is the default.
bool is_available();
/// Why is_available() is false ("" when it is true).
std::string unavailable_reason();
/// How many GPUs CUDA shows (0 when unavailable); the same as alloy::gpu_count().
int device_count();
/// The device's name ("NVIDIA H100 80GB HBM3"), "" when unavailable.
std::string device_name(int device = 0);
/// The device's architecture as NVRTC names it ("sm_90"), "" when unavailable.
std::string device_arch(int device = 0);

/// Device memory held by Alloy's caching allocator (all zero when unavailable).
struct MemoryStats {
  size_t active_bytes = 0;       // in blocks used by live buffers (block sizes, not requests)
  size_t cached_bytes = 0;       // in freed blocks kept for reuse
  size_t peak_active_bytes = 0;  // highest active_bytes so far
  size_t num_allocs = 0;         // blocks obtained from the driver (cuMemAlloc)
  size_t num_cache_hits = 0;     // allocations served from cached blocks
  size_t num_frees = 0;          // blocks given back to the driver (cuMemFree)
};
/// Of GPU `device` (all zero when Alloy has not used it).
MemoryStats memory_stats(int device = 0);
/// Waits for pending GPU work, then returns every cached block to the driver (every GPU).
void empty_cache();
/// Waits for pending GPU work (every GPU); throws alloy::Error (naming the kernel) when it failed.
void synchronize();

/// The Alloy stream that enqueues on an existing CUDA stream (a `CUstream`, e.g. PyTorch's
/// `torch.cuda.current_stream().cuda_stream`), so work interleaves with the owner's in order.
/// The owner keeps the stream alive while Alloy work on it is pending. nullptr gives the default
/// stream. The stream's GPU is `device`, or when -1 the one the driver says the stream belongs
/// to (GPU 0 for nullptr and CUDA's legacy/per-thread default stream handles, which stand for
/// the current context's: give `device` for those). std::invalid_argument when there is no such
/// GPU.
Stream stream_from_handle(void* cu_stream, int device = -1);
/// True when no work enqueued by Alloy on a stream of GPU `device` (-1: of any GPU) is still
/// pending (true without a GPU).
bool is_idle(int device = -1);
/// The CUstream behind a GPU stream (Alloy's default stream's handle for the default stream).
void* stream_handle(Stream s);

}  // namespace alloy::cuda
