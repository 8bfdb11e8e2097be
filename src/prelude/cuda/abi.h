// The launch ABI between the CUDA runtime (src/backend/cuda) and NVRTC-compiled kernels.
// Each kernel entry i of a translated source is
//   extern "C" __global__ void alloy_entry_<i>(const alloy_cuda_launch L[, buffer pointers]);
// launched with gridDim = L.groups and blockDim = L.threadgroup (Metal dispatchThreads: threads
// past L.grid leave before the body; partial edge groups get Metal's attribute values).
// Entries of metal_kernel calls (whose outputs never alias anything) also take their device
// buffers as `__restrict__` parameters after L, in the order msl::KernelEntry::param_buffers
// lists them, and may run several threadgroups per CUDA block along x (KernelEntry::coarsen):
// then gridDim.x = ceil(L.groups[0] / coarsen) and block b runs groups b, b + gridDim.x, ...
#pragma once

#define ALLOY_CUDA_MAX_BUFFERS 48
// Bytes of small buffers (metal_kernel's `x_shape`, `x_strides`, `x_ndim`) carried in the
// parameter block itself instead of device memory.
#define ALLOY_CUDA_INLINE_BYTES 512

struct alloy_cuda_oob_record {  // robust mode: one out-of-range access
  unsigned int buffer;
  unsigned int is_write;
  long long index;
  unsigned int thread[3];
  unsigned int pad_;
};

struct alloy_cuda_launch {
  void* buffers[ALLOY_CUDA_MAX_BUFFERS];                    // [[buffer(n)]] device pointers
  unsigned long long buffer_bytes[ALLOY_CUDA_MAX_BUFFERS];  // sizes (robust mode)
  unsigned int grid[3];                                     // threads per grid
  unsigned int threadgroup[3];  // threads per threadgroup as dispatched (= blockDim)
  unsigned int groups[3];       // threadgroups per grid (= gridDim)
  unsigned int num_buffers;
  unsigned long long tg_param_offset[8];  // [[threadgroup(n)]]: byte offsets in dynamic shared mem
  unsigned long long tg_param_bytes[8];
  alloy_cuda_oob_record* oob_records;  // robust mode: device array, may be null
  unsigned int* oob_count;             // robust mode: device counter
  unsigned int oob_capacity;
  unsigned int full_groups[3];  // groups with no thread past the grid: grid / threadgroup
  unsigned int pad_;
  // Bit n set: [[buffer(n)]] lives in inline_data at byte offset (size_t)buffers[n].
  unsigned long long inline_mask;
  alignas(16) unsigned char inline_data[ALLOY_CUDA_INLINE_BYTES];
};
