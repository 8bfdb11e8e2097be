// Translated CUDA source -> NVRTC -> cubin -> loaded module with function handles.
//
// Cubins go through the shared compile cache (src/cache): memory (loaded modules), then disk
// (<cache dir>/cuda-sm_90/<key>.bin), then NVRTC. The key hashes the source, the target
// architecture, the NVRTC library (compiler_id: path, size, mtime, so its version), the options
// and the prelude's contents; never the kernel name. The Metal prelude (src/prelude) is given to
// NVRTC as in-memory headers, so `#include "metal_stdlib.h"` works without any file on disk.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/nvrtc.h"

namespace alloy::cuda {

/// One kernel's translated source and how to compile it.
struct KernelSource {
  std::string name;                        // the kernel's name, for messages (not part of the key)
  std::string source;                      // CUDA C++ (may #include prelude headers)
  std::vector<std::string> entries;        // extern "C" __global__ functions to load, in order
  std::vector<std::string> options;        // NVRTC options; --gpu-architecture is added per device
  std::string program_name = "kernel.cu";  // the file name NVRTC's diagnostics show
  // The entries run one threadgroup per block whatever their coarsening (the quick first
  // compile, tiered.h): launches of its functions use the uncoarsened layout. Follows from the
  // options (-DALLOY_QUICK_ENTRY), so it needs no place in the key.
  bool one_group_per_block = false;
};

/// A loaded __global__ function and what launching it needs, queried once at load time.
struct Function {
  CUfunction handle = nullptr;
  std::string entry;      // e.g. "alloy_entry_0"
  std::string kernel;     // KernelSource::name, for messages
  int max_threads = 0;    // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: after register allocation
  int static_shared = 0;  // bytes of __shared__ declared in the source
  int num_regs = 0;
  int local_bytes = 0;               // spills and local arrays, per thread
  bool one_group_per_block = false;  // KernelSource::one_group_per_block
  // The module places threadgroup objects past Metal's 32 KiB in dynamic shared memory
  // (alloy_target::tg_storage, prelude/cuda/target.h): launched with all the device allows.
  bool large_threadgroup = false;
  // The largest dynamic shared memory this function was configured for (set past 48 KiB).
  mutable std::atomic<int> dynamic_shared_limit{0};
};

/// A cubin (or PTX) loaded into the device's context; functions in KernelSource::entries order.
/// Modules stay loaded until the process ends.
struct Module {
  CUmodule handle = nullptr;
  std::string target;  // cache target, e.g. "cuda-sm_90"
  std::string key;     // cache key of the image
  bool from_disk = false;
  std::deque<Function> functions;  // deque: Function holds an atomic and must not move

  const Function& function(size_t i) const { return functions.at(i); }
};

/// The compiled image of a kernel for one target (no GPU needed).
struct CompiledImage {
  std::vector<char> bytes;  // cubin (ELF) or NUL-terminated PTX
  nvrtc::Target target;
  std::string key;
  bool from_disk = false;  // found in the disk cache
};

/// NVRTC options every Alloy kernel gets before KernelSource::options ("--std=c++17",
/// "-default-device"), unless KernelSource::options has one of the same name ("--std=c++20").
/// Returned for information; compile() adds them itself.
const std::vector<std::string>& base_options();

/// The cache key of `k` compiled for `target` (hex). Includes everything that changes the image.
std::string cache_key(const KernelSource& k, const nvrtc::Target& target);

/// Compiles `k` for `target` through the disk cache. Throws alloy::CompileError (raw_log() =
/// NVRTC's log) when the source does not compile, alloy::Error when NVRTC is missing.
CompiledImage compile(const KernelSource& k, const nvrtc::Target& target);

/// What compile() gives NVRTC for `k` and `target` (the options, with the architecture, and the
/// prelude as in-memory headers, its metal/math.h evaluated for `k`'s math selection), less the
/// automatic PCH's options, which depend on what this process compiled before: the warm-up
/// compile of the workers started ahead (nvrtc::prestart_workers).
nvrtc::WarmUp warm_up_compile(const KernelSource& k, const nvrtc::Target& target);

/// `k` loaded on the device: from the memory cache, else compiled (or read from disk) for the
/// device's architecture and loaded. Thread-safe; one compile per key. Throws like compile().
std::shared_ptr<const Module> load(Context& ctx, const KernelSource& k);

/// Whether load(ctx, k) would find `k` without compiling: loaded before in this process, or its
/// cubin for the device's architecture in the disk cache (a file check, not verified).
bool is_loaded_or_cached(Context& ctx, const KernelSource& k);

}  // namespace alloy::cuda
