// The CUDA side of kernel::Program: NVRTC compilation of a translation and kernel launches.
// Implemented over the CUDA backend (src/backend/cuda); without a GPU, compile_gpu_program still
// works where NVRTC is found (CI compiles every conformance kernel for sm_90 this way).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernel/program.h"
#include "msl/translate.h"
#include "prelude/cuda/abi.h"

namespace alloy::kernel {

struct GpuCompiled {
  std::shared_ptr<void> module;                  // keeps the loaded module alive
  std::vector<std::shared_ptr<void>> functions;  // one per translation kernel
};

/// NVRTC-compiles `tr` for the current GPU and loads it. Throws alloy::CompileError (user lines).
GpuCompiled compile_gpu_program(const msl::Translation& tr, const std::string& math_mode,
                                const SourceMap& source, const std::string& filename);

/// NVRTC-compiles `tr` to a cubin for `arch` (e.g. "sm_90") without needing a GPU.
std::vector<char> compile_cubin(const msl::Translation& tr, const std::string& math_mode,
                                const SourceMap& source, const std::string& filename,
                                const std::string& arch);

/// NVRTC's PTX for `tr` on `arch` (for `alloy translate --target ptx`: what the generated code
/// compiles to). Throws alloy::CompileError (user lines).
std::string compile_ptx(const msl::Translation& tr, const std::string& math_mode,
                        const SourceMap& source, const std::string& filename,
                        const std::string& arch);

/// True when NVRTC can be loaded; otherwise `why` says what was looked for.
bool nvrtc_available(std::string* why = nullptr);

/// Enqueues one kernel after setting L.groups / L.full_groups from L.grid and L.threadgroup.
/// Throws std::invalid_argument when the threadgroup exceeds what the compiled function allows.
void launch_gpu(const CompiledKernel& k, alloy_cuda_launch& L, size_t dynamic_smem,
                const std::string& label);

}  // namespace alloy::kernel
