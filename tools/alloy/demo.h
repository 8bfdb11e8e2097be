#pragma once
#include <string>

namespace alloy::tools {
/// `alloy demo`: runs the example kernels (exp, grid_sample forward and backward) on `device`
/// ("best", "cpu", "gpu"), checks them against float64 references, prints results and timings.
/// Returns the process exit code (non-zero when a result is wrong).
int run_demo(const std::string& device);
}  // namespace alloy::tools
