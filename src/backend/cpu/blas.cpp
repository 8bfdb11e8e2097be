// CPU matrix products through OpenBLAS, loaded at run time with dlopen (no link-time dependency;
// Debian's libopenblas0-pthread provides libopenblas.so.0). The two CBLAS prototypes used are
// declared here (the CBLAS ABI: 32-bit integers in Debian's libopenblas0).
#include "backend/cpu/blas.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <mutex>
#include <vector>

#include "alloy/errors.h"

namespace alloy::blas {
namespace {

// cblas.h: enum CBLAS_ORDER / CBLAS_TRANSPOSE.
constexpr int kRowMajor = 101;
constexpr int kNoTrans = 111;
constexpr int kTrans = 112;

using Sgemm = void (*)(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a,
                       int lda, const float* b, int ldb, float beta, float* c, int ldc);
using Dgemm = void (*)(int order, int ta, int tb, int m, int n, int k, double alpha,
                       const double* a, int lda, const double* b, int ldb, double beta, double* c,
                       int ldc);

// The complex products take alpha and beta by address (cblas_cgemm / cblas_cgemv).
using Cgemm = void (*)(int order, int ta, int tb, int m, int n, int k, const void* alpha,
                       const void* a, int lda, const void* b, int ldb, const void* beta, void* c,
                       int ldc);
using Cgemv = void (*)(int order, int ta, int m, int n, const void* alpha, const void* a, int lda,
                       const void* x, int incx, const void* beta, void* y, int incy);

using Sgemv = void (*)(int order, int ta, int m, int n, float alpha, const float* a, int lda,
                       const float* x, int incx, float beta, float* y, int incy);
using Dgemv = void (*)(int order, int ta, int m, int n, double alpha, const double* a, int lda,
                       const double* x, int incx, double beta, double* y, int incy);

struct OpenBlas {
  Sgemm sgemm = nullptr;
  Dgemm dgemm = nullptr;
  Sgemv sgemv = nullptr;
  Dgemv dgemv = nullptr;
  Cgemm cgemm = nullptr;  // complex64; null if the library lacks it (complex matmul then raises)
  Cgemv cgemv = nullptr;
  std::string error;
};

const OpenBlas& openblas() {
  static const OpenBlas* lib = [] {
    auto* l = new OpenBlas;  // never unloaded (its threads outlive static destruction)
    // ALLOY_OPENBLAS: an explicit library path (e.g. a Debian package unpacked into a prefix,
    // as scripts/device-test.sh does), tried first.
    std::vector<std::string> names;
    if (const char* env = std::getenv("ALLOY_OPENBLAS"); env && *env) names.emplace_back(env);
    for (const char* n : {"libopenblas.so.0", "libopenblas.so",
                          "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"})
      names.emplace_back(n);
    std::string tried;
    for (const std::string& nm : names) {
      const char* name = nm.c_str();
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* why = dlerror();
        tried += fmt::format("\n  {}: {}", name, why ? why : "not found");
        continue;
      }
      l->sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
      l->dgemm = reinterpret_cast<Dgemm>(dlsym(h, "cblas_dgemm"));
      l->sgemv = reinterpret_cast<Sgemv>(dlsym(h, "cblas_sgemv"));
      l->dgemv = reinterpret_cast<Dgemv>(dlsym(h, "cblas_dgemv"));
      l->cgemm = reinterpret_cast<Cgemm>(dlsym(h, "cblas_cgemm"));
      l->cgemv = reinterpret_cast<Cgemv>(dlsym(h, "cblas_cgemv"));
      if (!l->cgemm || !l->cgemv) l->cgemm = nullptr, l->cgemv = nullptr;
      if (l->sgemm && l->dgemm && l->sgemv && l->dgemv) return l;
      tried += fmt::format("\n  {}: lacks cblas_sgemm/dgemm/sgemv/dgemv", name);
      l->sgemm = nullptr;
      l->dgemm = nullptr;
      dlclose(h);
    }
    l->error =
        "not supported: matmul on the CPU needs OpenBLAS (Debian: apt install "
        "libopenblas0-pthread); tried:" +
        tried;
    return l;
  }();
  return *lib;
}

int as_int(int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max())
    throw NotSupported("matmul", fmt::format("not supported: matmul with {} = {} (OpenBLAS takes "
                                             "32-bit sizes)",
                                             what, v));
  return static_cast<int>(v);
}

}  // namespace

}  // namespace alloy::blas

namespace alloy::cpu {
using namespace blas;

bool blas_available(std::string* why) {
  const OpenBlas& l = openblas();
  if (why) *why = l.error;
  return l.sgemm != nullptr;
}

void gemm(const Gemm& g) {
  const OpenBlas& l = openblas();
  if (!l.sgemm) throw NotSupported("matmul", l.error);
  int m = as_int(g.m, "m"), n = as_int(g.n, "n"), k = as_int(g.k, "k");
  int lda = as_int(g.lda, "lda"), ldb = as_int(g.ldb, "ldb");
  int ta = g.trans_a ? kTrans : kNoTrans, tb = g.trans_b ? kTrans : kNoTrans;
  size_t batch = g.off_a.size();
  if (g.m == 0 || g.n == 0) return;
  // One row (or one column) of output: a matrix-vector product (gemm would pack the whole
  // matrix first, several times slower for a vector).
  auto run = [&](auto* a, auto* b, auto* c, auto gemm, auto gemv, auto one, auto zero) {
    for (size_t i = 0; i < batch; ++i) {
      auto* ai = a + g.off_a[i];
      auto* bi = b + g.off_b[i];
      auto* ci = c + static_cast<int64_t>(i) * g.m * g.n;
      if (m == 1)  // c[0, :] = a[0, :] op(B): B's rows are read as a [k, n] or [n, k] matrix
        gemv(kRowMajor, g.trans_b ? kNoTrans : kTrans, g.trans_b ? n : k, g.trans_b ? k : n, one,
             bi, ldb, ai, g.trans_a ? lda : 1, zero, ci, 1);
      else if (n == 1)  // c[:, 0] = op(A) b[:, 0]
        gemv(kRowMajor, g.trans_a ? kTrans : kNoTrans, g.trans_a ? k : m, g.trans_a ? m : k, one,
             ai, lda, bi, g.trans_b ? 1 : ldb, zero, ci, 1);
      else
        gemm(kRowMajor, ta, tb, m, n, k, one, ai, lda, bi, ldb, zero, ci, n);
    }
  };
  if (g.dtype == Dtype::float32) {
    run(static_cast<const float*>(g.a), static_cast<const float*>(g.b), static_cast<float*>(g.c),
        l.sgemm, l.sgemv, 1.0f, 0.0f);
  } else if (g.dtype == Dtype::float64) {
    run(static_cast<const double*>(g.a), static_cast<const double*>(g.b), static_cast<double*>(g.c),
        l.dgemm, l.dgemv, 1.0, 0.0);
  } else if (g.dtype == Dtype::complex64) {
    if (!l.cgemm)
      throw NotSupported("matmul",
                         "not supported: complex64 matmul: the OpenBLAS library found "
                         "lacks cblas_cgemm");
    // (re, im) pairs of float, as std::complex<float> and complex64 store them.
    struct c64 {
      float re, im;
    };
    auto cgemm = [&](int o, int ta_, int tb_, int m_, int n_, int k_, c64 alpha, const c64* a,
                     int lda_, const c64* b, int ldb_, c64 beta, c64* c, int ldc) {
      l.cgemm(o, ta_, tb_, m_, n_, k_, &alpha, a, lda_, b, ldb_, &beta, c, ldc);
    };
    auto cgemv = [&](int o, int ta_, int m_, int n_, c64 alpha, const c64* a, int lda_,
                     const c64* x, int incx, c64 beta, c64* y, int incy) {
      l.cgemv(o, ta_, m_, n_, &alpha, a, lda_, x, incx, &beta, y, incy);
    };
    run(static_cast<const c64*>(g.a), static_cast<const c64*>(g.b), static_cast<c64*>(g.c), cgemm,
        cgemv, c64{1.0f, 0.0f}, c64{0.0f, 0.0f});
  } else {
    throw std::invalid_argument(fmt::format(
        "gemm_cpu: {} is not a BLAS dtype (float32, float64, complex64)", dtype_name(g.dtype)));
  }
}

}  // namespace alloy::cpu
