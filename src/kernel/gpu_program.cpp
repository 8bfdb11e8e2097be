#include "kernel/gpu_program.h"

#include <fmt/format.h>

#include <cstring>

#include "alloy/errors.h"
#include "backend/cuda/device.h"
#include "backend/cuda/jit.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/nvrtc.h"

namespace alloy::kernel {
namespace {

cuda::KernelSource kernel_source(const msl::Translation& tr, const std::string& math_mode,
                                 const SourceMap& source) {
  cuda::KernelSource k;
  k.name = source.label;
  k.source = tr.code;
  for (size_t i = 0; i < tr.kernels.size(); ++i)
    k.entries.push_back(fmt::format("alloy_entry_{}", i));
  // Math modes never share a cache entry: the options are part of the key.
  if (math_mode == "fast")
    k.options = {"-DALLOY_MATH_FAST", "-D__FAST_MATH__", "--use_fast_math"};
  else if (math_mode == "relaxed")
    k.options = {"-DALLOY_MATH_RELAXED"};
  else
    k.options = {"-DALLOY_MATH_SAFE"};
  // Translated kernels use none of what -minimal leaves out (nvrtc::compile drops it where NVRTC
  // is too old to know it; the key includes the NVRTC library, so that stays consistent).
  k.options.push_back("-minimal");
  return k;
}

// NVRTC's log, with lines mapped to the user's source.
[[noreturn]] void rethrow_mapped(const CompileError& e, const SourceMap& source,
                                 const std::string& filename) {
  throw CompileError(source.label, map_compile_log(source, e.raw_log(), filename), e.raw_log());
}

}  // namespace

bool nvrtc_available(std::string* why) {
  bool ok = cuda::nvrtc::available();
  if (!ok && why) *why = "NVRTC not found: " + cuda::nvrtc::load_error();
  return ok;
}

GpuCompiled compile_gpu_program(const msl::Translation& tr, const std::string& math_mode,
                                const SourceMap& source, const std::string& filename) {
  cuda::Context* ctx = cuda::Context::get();
  if (!ctx)
    throw std::invalid_argument("no GPU is available: " + cuda::Context::unavailable_reason());
  std::shared_ptr<const cuda::Module> module;
  try {
    module = cuda::load(*ctx, kernel_source(tr, math_mode, source));
  } catch (const CompileError& e) {
    rethrow_mapped(e, source, filename);
  }
  GpuCompiled out;
  out.module = std::const_pointer_cast<cuda::Module>(module);
  for (size_t i = 0; i < tr.kernels.size(); ++i) {
    // Aliasing pointer: the Function lives as long as the module.
    out.functions.push_back(
        std::shared_ptr<void>(out.module, const_cast<cuda::Function*>(&module->function(i))));
  }
  return out;
}

std::vector<char> compile_cubin(const msl::Translation& tr, const std::string& math_mode,
                                const SourceMap& source, const std::string& filename,
                                const std::string& arch) {
  int cc = std::stoi(arch.substr(arch.find('_') + 1));
  try {
    return cuda::compile(kernel_source(tr, math_mode, source),
                         cuda::nvrtc::target_for(cc / 10, cc % 10))
        .bytes;
  } catch (const CompileError& e) {
    rethrow_mapped(e, source, filename);
  }
}

std::string compile_ptx(const msl::Translation& tr, const std::string& math_mode,
                        const SourceMap& source, const std::string& filename,
                        const std::string& arch) {
  try {
    auto image = cuda::compile(kernel_source(tr, math_mode, source), {arch, false});
    return std::string(image.bytes.data(), strnlen(image.bytes.data(), image.bytes.size()));
  } catch (const CompileError& e) {
    rethrow_mapped(e, source, filename);
  }
}

void launch_gpu(const CompiledKernel& k, alloy_cuda_launch& L, size_t dynamic_smem,
                const std::string& label) {
  cuda::Context* ctx = cuda::Context::get();
  if (!ctx)
    throw std::invalid_argument("no GPU is available: " + cuda::Context::unavailable_reason());
  const auto* fn = static_cast<const cuda::Function*>(k.gpu.get());
  cuda::set_groups(L);
  cuda::EntryLayout layout;
  layout.param_buffers = k.entry.param_buffers.data();
  layout.num_param_buffers = static_cast<uint32_t>(k.entry.param_buffers.size());
  layout.coarsen = static_cast<uint32_t>(k.entry.coarsen);
  cuda::launch(*ctx, *fn, L, static_cast<uint32_t>(dynamic_smem), label.c_str(), layout);
}

}  // namespace alloy::kernel
