// The description of a matrix product for Backend::gemm (core/backend.h): the backends run it
// through the vendors' BLAS libraries, loaded at run time (no link-time dependency, as the CUDA
// driver): OpenBLAS on the CPU (src/backend/cpu/blas.cpp), cuBLAS on CUDA
// (src/backend/cuda/blas.cpp). The ops layer's Matmul primitive calls them.
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

}  // namespace alloy::blas
