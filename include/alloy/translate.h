// What a kernel compiles to, for inspection (`alloy translate`): the Metal text of a metal_kernel
// call (byte-identical to MLX's), its CPU or CUDA translation, or the PTX NVRTC makes of it (no
// GPU needed), and the same for whole libraries.
#pragma once
#include <string>
#include <vector>

#include "alloy/kernel.h"
#include "alloy/library.h"

namespace alloy {

enum class TranslateTarget { metal, cpu, cuda, ptx };

struct TranslateOptions {
  TranslateTarget target = TranslateTarget::cpu;
  bool robust = false;             // the robust-mode translation (bounds-checked accesses)
  std::string math_mode = "safe";  // ptx: NVRTC's math flags
  std::string arch = "sm_90";      // ptx: the GPU architecture
  /// translate_library: only these kernels (host names), the others blanked, as the unit a
  /// kernel's first call compiles (an unknown name raises std::invalid_argument); all if empty.
  std::vector<std::string> kernels;
};

/// The text the call `kernel(inputs, call)` compiles to on `options.target` (the inputs' dtypes
/// and ranks matter, not their values). Throws std::invalid_argument for bad arguments,
/// alloy::CompileError when NVRTC rejects the translation (ptx).
std::string translate(const MetalKernel& kernel, const std::vector<Array>& inputs,
                      const KernelCall& call, const TranslateOptions& options);

/// The same for a whole Metal library, after its headers and function constants are applied
/// as compile_library applies them.
std::string translate_library(const std::string& source, const LibraryOptions& library,
                              const TranslateOptions& options);

}  // namespace alloy
