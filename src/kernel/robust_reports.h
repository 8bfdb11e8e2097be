// Out-of-range accesses reported by robust-mode kernels (DESIGN.md §2), collected per process.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloy/kernel.h"
#include "core/buffer.h"
#include "msl/signature.h"

namespace alloy::kernel {

/// Records the accesses of one launch (`total` counts all, `kept` the first few) and prints a
/// one-line summary to stderr.
void add_out_of_range(const std::string& kernel, uint64_t total,
                      std::vector<OutOfRangeAccess> kept);

/// The name of [[buffer(n)]] of a metal_kernel: its input/output name ("x", "x_shape", "out").
std::string buffer_name(const KernelSpec& spec, const std::vector<msl::Binding>& bindings,
                        uint32_t buffer);

}  // namespace alloy::kernel
