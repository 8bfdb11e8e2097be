// The CPU backend's BLAS (OpenBLAS, loaded at run time): Backend::gemm of the CPU backend.
#pragma once
#include <string>

#include "core/blas.h"

namespace alloy::cpu {

/// C = A @ B (blas::Gemm) through cblas_sgemm / cblas_dgemm: float32 and float64. Throws
/// NotSupported when OpenBLAS cannot be loaded.
void gemm(const blas::Gemm& g);
/// Whether OpenBLAS loads (and why not).
bool blas_available(std::string* why);
/// The OpenBLAS file in use and its openblas_get_config() string: ALLOY_OPENBLAS's file, else one
/// already loaded in the process (numpy's bundled scipy-openblas, shared rather than a second
/// thread pool), else a file named with add_cpu_blas_candidate (include/alloy/ops.h), else the
/// system's libopenblas.so.0. Throws NotSupported when none loads.
std::string blas_library();

}  // namespace alloy::cpu
