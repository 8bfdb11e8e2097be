// Matrix products through the vendors' BLAS libraries, which the backends load at run time (no
// link-time dependency, as the CUDA driver): OpenBLAS on the CPU (src/backend/cpu/blas.cpp),
// cuBLAS on CUDA (src/backend/cuda/blas.cpp). The ops layer's Matmul primitive calls these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "alloy/array.h"

namespace alloy::blas {

/// One batched product C[i] = A[i] @ B[i] (i over the batch) of [m, k] by [k, n] matrices, all
/// three in row-major terms: element (r, p) of A is a[off_a[i] + r * lda + p], or with trans_a
/// a[off_a[i] + p * lda + r] (A stored transposed); likewise B. C is row-major with leading
/// dimension n, batch i at c + i * m * n. Offsets are in elements.
struct Gemm {
  Dtype dtype = Dtype::float32;  // of A, B and C
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  std::vector<int64_t> off_a, off_b;  // one per batch element
};

/// On the CPU (OpenBLAS's cblas_sgemm / cblas_dgemm): float32 and float64. Throws NotSupported
/// when OpenBLAS cannot be loaded.
void gemm_cpu(const Gemm& g);
/// On the GPU (cuBLAS, on the calling thread's current stream): float32, float16, bfloat16
/// (float accumulation). Throws NotSupported when cuBLAS cannot be loaded.
void gemm_gpu(const Gemm& g);

/// Whether the library loads (and why not).
bool cpu_blas_available(std::string* why = nullptr);
bool gpu_blas_available(std::string* why = nullptr);

}  // namespace alloy::blas
