// What NVRTC compiles for a translation (CompileRequest -> KernelSource), and the quick first
// compile of coarsened entries (docs/performance.md, "CUDA cold compile against CuPy").
//
// A translation whose CUDA entries are thread-coarsened (several whole threadgroups per block,
// the body unrolled coarsen + 1 times) compiles first with ALLOY_QUICK_ENTRY defined: the entry
// runs one threadgroup per block (the body compiled once, no loop), so NVVM and ptxas see a
// fraction of the code, and neither optimises it (--ptxas-options=-O0, registers capped at 64
// so that any block size launches; NVVM optimises it: -Xnvvm=-opt=0, nvrtc::kNvvmUnoptimised,
// only with ALLOY_CUDA_QUICK_NVVM_O0=1, since unoptimised NVVM fuses no multiply-adds and the
// results would differ from the full code's). Same parameters and results; its functions are
// launched with the uncoarsened layout (KernelSource/Function::one_group_per_block: the launch
// reads it from the function it launches). The full compile then runs on the compile pool
// (CompiledModule::refine; as background work, nvrtc::BackgroundScope: with NVRTC workers it
// compiles in one and leaves the in-process NVRTC slot to the next first call) and the launches
// switch to it (code and layout) when it is loaded; a full image already in the disk cache is
// used at once. ALLOY_CUDA_TIERED=0 turns this off
// (alloy_bench sets it: its kernel benchmarks time the full code from the first call on).
#pragma once
#include <optional>

#include "backend/cuda/jit.h"
#include "core/backend.h"

namespace alloy::cuda {

/// NVRTC's view of a translation (math-mode options, -minimal). Math modes never share a cache
/// entry: the options are part of the key.
KernelSource kernel_source(const CompileRequest& r);

/// The quick first compile of `r` (kernel_source(r) + -DALLOY_QUICK_ENTRY --ptxas-options=-O0
/// -maxrregcount=64, one group per block),
/// or nothing when no entry is coarsened. (The backend uses it unless ALLOY_CUDA_TIERED=0.)
std::optional<KernelSource> quick_kernel_source(const CompileRequest& r);

/// The warm-up compile of NVRTC workers started ahead (docs/nvrtc-workers.md, "Workers started
/// ahead"): a small elementwise kernel (the translation of a float metal_kernel that reads its
/// thread position and two buffers, whose prelude core is the default selection's) compiled as
/// its first call compiles it for `target` (the quick compile unless ALLOY_CUDA_TIERED=0, math
/// mode "safe"). The PCH it makes in a worker covers that prelude core under those options.
nvrtc::WarmUp first_compile_warm_up(const nvrtc::Target& target);

/// Called when the process creates its first GPU context: starts the NVRTC workers ahead
/// (nvrtc::prestart_workers), each warmed by first_compile_warm_up for that device, so that they
/// are warm when the process's first kernels are compiled (after a model's weights load, say).
/// Once per process. Returns at once: the warm-up's translation (~0.3 ms) is done here, NVRTC's
/// load and the workers' start on a thread of its own. Nothing when ALLOY_NVRTC_PRESTART=0 or
/// ALLOY_NVRTC_WORKERS=0. Never throws.
void prestart_nvrtc_workers(const DeviceInfo& info);

}  // namespace alloy::cuda
