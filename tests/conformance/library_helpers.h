// Helpers of the MLX-library conformance tests (test_mlx_units.cpp,
// test_mlx_library_suite_fixes.cpp).
#pragma once
#include <cstdio>
#include <string>

#include "alloy/library.h"
#include "kernel/library.h"

namespace conformance {

/// Compiles every kernel of `lib` with NVRTC for sm_90 (prints why when NVRTC is missing).
inline void expect_cubin(const alloy::Library& lib) {
  std::string why = alloy::kernel::compile_library_cubin(lib, "sm_90");
  if (!why.empty()) std::printf("NVRTC compile skipped: %s\n", why.c_str());
}

/// A 1-D size (x, 1, 1).
inline alloy::Dims dims(int x) {
  return alloy::Dims{x, 1, 1};
}

}  // namespace conformance
