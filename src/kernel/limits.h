// Bounds on the work one call may ask for (docs/reliability.md): a launch whose thread count
// cannot be meant (grid=(2**31-1,)*3 would run for hours) is rejected with the limit's name and
// how to raise it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "alloy/kernel.h"

namespace alloy::kernel {

/// Default of ALLOY_MAX_GRID_THREADS: 2^40 threads (minutes of work on a GPU, hours on a CPU).
constexpr uint64_t kDefaultMaxGridThreads = uint64_t{1} << 40;

/// $ALLOY_MAX_GRID_THREADS (a positive integer), else kDefaultMaxGridThreads. Throws
/// std::invalid_argument when the variable is set to something else.
uint64_t max_grid_threads();

/// Throws std::invalid_argument when grid[0] * grid[1] * grid[2] exceeds max_grid_threads().
/// `api` prefixes the message ("[metal_kernel]", "[library]").
void check_grid_threads(std::string_view api, const std::string& kernel, const Dims& grid);

}  // namespace alloy::kernel
