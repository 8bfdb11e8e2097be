// ALLOY_TRACE_BUILD=1: timings of what a kernel's first call does (translation, cache, compiler,
// module load), printed to stderr, for "why is my first call slow".
#pragma once
#include <chrono>

namespace alloy::trace {

/// Whether ALLOY_TRACE_BUILD is set (read once).
bool build();

/// Milliseconds since `t0`.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace alloy::trace
