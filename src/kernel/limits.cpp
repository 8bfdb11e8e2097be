#include "kernel/limits.h"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <string_view>

#include "core/env.h"

namespace alloy::kernel {

uint64_t max_grid_threads() {
  constexpr std::string_view kExpected = "a positive integer (threads per launch)";
  std::optional<uint64_t> v = env::count("ALLOY_MAX_GRID_THREADS", kExpected);
  if (!v) return kDefaultMaxGridThreads;
  if (*v == 0)
    throw std::invalid_argument(fmt::format("ALLOY_MAX_GRID_THREADS=0: expected {}", kExpected));
  return *v;
}

void check_grid_threads(std::string_view api, const std::string& kernel, const Dims& grid) {
  // In long double: (2^31 - 1)^3 does not fit 64 bits.
  long double total = 1;
  for (int d : grid) total *= d;
  uint64_t limit = max_grid_threads();
  if (total > static_cast<long double>(limit))
    throw std::invalid_argument(fmt::format(
        "{} kernel '{}': the grid ({}, {}, {}) has {:.4g} threads, more than the limit of {} "
        "threads per launch (set the environment variable ALLOY_MAX_GRID_THREADS to raise it)",
        api, kernel, grid[0], grid[1], grid[2], static_cast<double>(total), limit));
}

}  // namespace alloy::kernel
