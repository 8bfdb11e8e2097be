// Launching one kernel entry (see src/prelude/cuda/abi.h): the alloy_cuda_launch struct is the
// entry's first parameter (then the device buffers of EntryLayout::param_buffers), gridDim =
// L.groups (x divided by EntryLayout::coarsen when the grid is deep enough), blockDim =
// L.threadgroup (Metal dispatchThreads: threads past L.grid leave before the body).
#pragma once
#include <cstdint>

#include "backend/cuda/device.h"
#include "backend/cuda/jit.h"
#include "prelude/cuda/abi.h"

namespace alloy::cuda {

/// What an entry takes beyond L (abi.h): device buffers as parameters (indices into L.buffers, in
/// parameter order) and how many threadgroups along x one block may run.
struct EntryLayout {
  const int* param_buffers = nullptr;
  uint32_t num_param_buffers = 0;
  uint32_t coarsen = 1;
};

/// Enqueues `fn` over `L` with `dynamic_shared_bytes` of dynamic shared memory (the
/// [[threadgroup(n)]] parameters) on the context's stream. A grid with no threads launches
/// nothing. Throws std::invalid_argument when the threadgroup has more threads than the compiled
/// function allows (MLX raises ValueError there, and callers catch it to pick another kernel) or
/// the threadgroup memory exceeds the device's; alloy::NotSupported for shapes CUDA cannot launch
/// (threadgroup depth > 64, more than 65535 groups along y or z); alloy::Error when the launch
/// fails. Errors inside the kernel surface at the next synchronization, naming it.
/// `label` (default: fn.kernel) names the kernel in errors. No allocation and no string work
/// unless it throws. The caller has made `ctx` current and checked it usable.
void launch(Context& ctx, const Function& fn, const alloy_cuda_launch& L,
            uint32_t dynamic_shared_bytes = 0, const char* label = nullptr,
            const EntryLayout& layout = {});

/// Sets L.groups (ceil(grid / threadgroup)) and L.full_groups (floor) from L.grid and
/// L.threadgroup.
void set_groups(alloy_cuda_launch& L);

}  // namespace alloy::cuda
