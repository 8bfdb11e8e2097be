// Out-of-range accesses reported by robust-mode kernels (DESIGN.md §2), collected per process.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloy/kernel.h"
#include "backend/cpu/executor.h"
#include "core/buffer.h"
#include "msl/signature.h"
#include "prelude/cuda/abi.h"

namespace alloy::kernel {

/// Records the accesses of one launch (`total` counts all, `kept` the first few) and prints a
/// one-line summary to stderr.
void add_out_of_range(const std::string& kernel, uint64_t total,
                      std::vector<OutOfRangeAccess> kept);

using BufferNamer = std::function<std::string(uint32_t buffer)>;

/// Records what a robust CPU launch logged.
void collect_cpu_reports(const std::string& kernel, const cpu::OobLog& log,
                         const BufferNamer& name);

/// The device-side log of a robust CUDA launch: attach() points the launch at a small device
/// buffer; collect() reads it back after the launch (it synchronizes: robust mode is for
/// debugging) and records the reports.
class GpuOobLog {
 public:
  void attach(alloy_cuda_launch& L);
  void collect(const std::string& kernel, const alloy_cuda_launch& L, const BufferNamer& name);

 private:
  static constexpr unsigned kCapacity = 64;
  std::shared_ptr<Buffer> buffer_;
};

/// The name of [[buffer(n)]] of a metal_kernel: its input/output name ("x", "x_shape", "out").
std::string buffer_name(const KernelSpec& spec, const std::vector<msl::Binding>& bindings,
                        uint32_t buffer);

}  // namespace alloy::kernel
