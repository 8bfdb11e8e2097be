// The CUDA backend's BLAS (cuBLAS, loaded at run time): Backend::gemm of a CUDA backend.
#pragma once
#include <string>

#include "backend/cuda/device.h"
#include "core/blas.h"

namespace alloy::cuda {

/// C = A @ B (blas::Gemm) on `ctx`'s device, on the calling thread's current stream there:
/// float32, float16, bfloat16 (float accumulation). One cuBLAS handle per device. Throws
/// NotSupported when cuBLAS cannot be loaded.
void gemm(Context& ctx, const blas::Gemm& g);
/// Whether cuBLAS loads (and why not).
bool blas_available(std::string* why);
/// The cuBLAS file loaded (e.g. libcublas.so.13). Throws NotSupported when none loads.
std::string blas_library();

}  // namespace alloy::cuda
