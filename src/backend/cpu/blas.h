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

}  // namespace alloy::cpu
