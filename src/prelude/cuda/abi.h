// The launch ABI between the CUDA runtime (src/backend/cuda) and NVRTC-compiled kernels.
// Each kernel entry i of a translated source is
//   extern "C" __global__ void alloy_entry_<i>(const __grid_constant__
//       alloy_cuda_params<NB, NT, ROBUST, NI> L[, buffer pointers]);
// launched with gridDim = L.head().groups and blockDim = L.head().threadgroup (Metal
// dispatchThreads: threads past grid leave before the body; partial edge groups get Metal's
// attribute values).
//
// The parameter block L is sized to the kernel (the driver copies the declared parameter size on
// every launch): a fixed head, then tables whose lengths the translator chose for this entry
// (msl::KernelEntry::cuda_block, compile-time constants of the entry's declaration and, through
// CompileEntry, of the host's LaunchFunction). alloy_cuda_layout() below is the one definition of
// where each part sits; the device reads through it (alloy_cuda_params' accessors) and the host
// packs through it (alloy::cuda::ParamBlock, src/backend/cuda/launch.h):
//   head            alloy_cuda_head, 64 bytes
//   buffers[NB]     [[buffer(n)]] device pointers (byte offsets into inline data for inline ones)
//   robust builds:  buffer_bytes[NB] (sizes), then alloy_cuda_oob_log
//   tg_offset[NT]   [[threadgroup(n)]]: byte offsets in dynamic shared memory
//   inline[NI]      16-byte aligned: small buffers carried in the block (metal_kernel's `x_shape`,
//                   `x_strides`, `x_ndim`, small host inputs); NI = 0 for kernels that have none
// The whole block is 16-byte aligned and a multiple of 16 bytes.
//
// Entries of metal_kernel calls (whose outputs never alias anything) also take their device
// buffers as `__restrict__` parameters after L, in the order msl::KernelEntry::param_buffers
// lists them, and may run several threadgroups per CUDA block along x (KernelEntry::coarsen):
// then gridDim.x = ceil(groups[0] / coarsen) and block b runs groups b, b + gridDim.x, ...
#pragma once

#define ALLOY_CUDA_MAX_BUFFERS 48
#define ALLOY_CUDA_MAX_TG_PARAMS 8
// Bytes of small buffers (metal_kernel's `x_shape`, `x_strides`, `x_ndim`) a kernel that has
// such buffers carries in its parameter block instead of device memory.
#define ALLOY_CUDA_INLINE_BYTES 512

struct alloy_cuda_oob_record {  // robust mode: one out-of-range access
  unsigned int buffer;
  unsigned int is_write;
  long long index;
  unsigned int thread[3];
  unsigned int pad_;
};

// Robust mode: where a kernel appends its out-of-range records.
struct alloy_cuda_oob_log {
  alloy_cuda_oob_record* records;  // device array, may be null
  unsigned int* count;             // device counter
  unsigned int capacity;
  unsigned int pad_;
};

struct alloy_cuda_head {
  unsigned int grid[3];         // threads per grid
  unsigned int threadgroup[3];  // threads per threadgroup as dispatched (= blockDim)
  unsigned int groups[3];       // threadgroups per grid (gridDim before coarsening)
  unsigned int full_groups[3];  // groups with no thread past the grid: grid / threadgroup
  unsigned int num_buffers;     // buffer-table entries this launch bound
  unsigned int pad_;
  // Bit n set: [[buffer(n)]] lives in the inline data at byte offset (size_t)buffers[n].
  unsigned long long inline_mask;
};

// Byte offsets of a parameter block's parts (0 for parts it does not have) and its size.
struct alloy_cuda_param_layout {
  unsigned int num_buffers;   // NB
  unsigned int num_tg;        // NT
  unsigned int robust;        // ROBUST
  unsigned int inline_bytes;  // NI
  unsigned int buffers;
  unsigned int buffer_bytes;
  unsigned int oob;
  unsigned int tg_offset;
  unsigned int inline_data;
  unsigned int size;  // the entry's declared parameter size
};

constexpr unsigned int alloy_cuda_align16(unsigned int n) {
  return (n + 15u) / 16u * 16u;
}

constexpr alloy_cuda_param_layout alloy_cuda_layout(unsigned int num_buffers, unsigned int num_tg,
                                                    bool robust, unsigned int inline_bytes) {
  alloy_cuda_param_layout l{num_buffers, num_tg, robust ? 1u : 0u, inline_bytes, 0, 0, 0, 0, 0, 0};
  unsigned int at = sizeof(alloy_cuda_head);
  l.buffers = at;
  at += 8u * num_buffers;
  if (robust) {
    l.buffer_bytes = at;
    at += 8u * num_buffers;
    l.oob = at;
    at += sizeof(alloy_cuda_oob_log);
  }
  l.tg_offset = num_tg ? at : 0u;
  at += 8u * num_tg;
  if (inline_bytes) {
    at = alloy_cuda_align16(at);
    l.inline_data = at;
    at += inline_bytes;
  }
  l.size = alloy_cuda_align16(at);
  return l;
}

#if defined(ALLOY_TARGET_CUDA) || defined(__CUDACC__) || defined(__CUDACC_RTC__)
// The device's view of a parameter block: bytes laid out by alloy_cuda_layout(NB, NT, ROBUST, NI).
// Entries take it `const __grid_constant__`: the accessors' addresses are parameter-space ones
// and their loads constant-bank loads (no copy of the block to local memory).
template <unsigned int NB, unsigned int NT, bool ROBUST, unsigned int NI>
struct alignas(16) alloy_cuda_params {
  // Enumerators, not a static constexpr member: NVRTC would emit one device global for it per
  // instantiation (a module-load cost, tests/test_metal_kernel.cpp
  // SmallKernelHasAlmostNoDeviceGlobals).
  enum : unsigned int {
    k_buffers = alloy_cuda_layout(NB, NT, ROBUST, NI).buffers,
    k_buffer_bytes = alloy_cuda_layout(NB, NT, ROBUST, NI).buffer_bytes,
    k_oob = alloy_cuda_layout(NB, NT, ROBUST, NI).oob,
    k_tg_offset = alloy_cuda_layout(NB, NT, ROBUST, NI).tg_offset,
    k_inline_data = alloy_cuda_layout(NB, NT, ROBUST, NI).inline_data,
    k_size = alloy_cuda_layout(NB, NT, ROBUST, NI).size
  };
  unsigned char bytes[k_size];

  __device__ __forceinline__ const alloy_cuda_head& head() const {
    return *reinterpret_cast<const alloy_cuda_head*>(bytes);
  }
  __device__ __forceinline__ void* buffer(unsigned int n) const {
    return reinterpret_cast<void* const*>(bytes + k_buffers)[n];
  }
  __device__ __forceinline__ unsigned long long buffer_bytes(unsigned int n) const {
    static_assert(ROBUST, "buffer sizes are in robust builds' blocks only");
    return reinterpret_cast<const unsigned long long*>(bytes + k_buffer_bytes)[n];
  }
  __device__ __forceinline__ const alloy_cuda_oob_log* oob() const {
    static_assert(ROBUST, "the out-of-range log is in robust builds' blocks only");
    return reinterpret_cast<const alloy_cuda_oob_log*>(bytes + k_oob);
  }
  __device__ __forceinline__ unsigned long long tg_offset(unsigned int n) const {
    return reinterpret_cast<const unsigned long long*>(bytes + k_tg_offset)[n];
  }
  __device__ __forceinline__ unsigned char* inline_data() const {
    return const_cast<unsigned char*>(bytes + k_inline_data);
  }
};
#endif
