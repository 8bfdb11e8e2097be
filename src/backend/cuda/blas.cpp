// GPU matrix products through cuBLAS, loaded at run time with dlopen like the driver (no
// link-time dependency; the CUDA toolkit's or a pip wheel's libcublas.so.13/.12/.11). The few
// cuBLAS types and entry points used are declared here (cublas_api.h's stable ABI).
#include "backend/cuda/blas.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <limits>
#include <mutex>

#include "alloy/errors.h"
#include "backend/cuda/graph.h"

namespace alloy::blas {
namespace {

using cublasHandle_t = struct cublasContext*;
using cublasStatus_t = int;
constexpr int CUBLAS_OP_N = 0, CUBLAS_OP_T = 1;
// cudaDataType (library_types.h) and cublasComputeType_t.
constexpr int CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14, CUDA_C_32F = 4;
constexpr int CUBLAS_COMPUTE_32F = 68;
constexpr int CUBLAS_GEMM_DEFAULT = -1;

using Create = cublasStatus_t (*)(cublasHandle_t*);
using SetStream = cublasStatus_t (*)(cublasHandle_t, cuda::CUstream);
using GemmEx = cublasStatus_t (*)(cublasHandle_t, int ta, int tb, int m, int n, int k,
                                  const void* alpha, const void* a, int atype, int lda,
                                  const void* b, int btype, int ldb, const void* beta, void* c,
                                  int ctype, int ldc, int compute, int algo);
using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, int ta, int tb, int m, int n, int k,
                                                const void* alpha, const void* a, int atype,
                                                int lda, long long stride_a, const void* b,
                                                int btype, int ldb, long long stride_b,
                                                const void* beta, void* c, int ctype, int ldc,
                                                long long stride_c, int batch, int compute,
                                                int algo);

struct CuBlas {
  Create create = nullptr;
  SetStream set_stream = nullptr;
  GemmEx gemm = nullptr;
  GemmStridedBatchedEx gemm_strided = nullptr;
  std::string file;  // the library loaded
  std::string error;
  std::mutex mu;                                  // the handles, each used by one thread at a time
  cublasHandle_t handle[cuda::kMaxDevices] = {};  // per device (a handle belongs to a context)
};

CuBlas& cublas() {
  static CuBlas* lib = [] {
    auto* l = new CuBlas;  // never unloaded (the handle lives as long as the context)
    const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"};
    std::string tried;
    for (const char* name : names) {
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* why = dlerror();
        tried += fmt::format("\n  {}: {}", name, why ? why : "not found");
        continue;
      }
      l->create = reinterpret_cast<Create>(dlsym(h, "cublasCreate_v2"));
      l->set_stream = reinterpret_cast<SetStream>(dlsym(h, "cublasSetStream_v2"));
      l->gemm = reinterpret_cast<GemmEx>(dlsym(h, "cublasGemmEx"));
      l->gemm_strided =
          reinterpret_cast<GemmStridedBatchedEx>(dlsym(h, "cublasGemmStridedBatchedEx"));
      if (l->create && l->set_stream && l->gemm && l->gemm_strided) {
        l->file = name;
        return l;
      }
      tried += fmt::format("\n  {}: lacks cublasGemmStridedBatchedEx", name);
      l->gemm = nullptr;
      dlclose(h);
    }
    l->error =
        "not supported: matmul on the GPU needs cuBLAS (libcublas.so.13/.12 of the CUDA "
        "toolkit, or pip's nvidia-cublas); tried:" +
        tried;
    return l;
  }();
  return *lib;
}

int as_int(int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max())
    throw NotSupported("matmul", fmt::format("not supported: matmul with {} = {} (cuBLAS takes "
                                             "32-bit sizes)",
                                             what, v));
  return static_cast<int>(v);
}

int cuda_type(Dtype t) {
  switch (t) {
    case Dtype::float32:
      return CUDA_R_32F;
    case Dtype::float16:
      return CUDA_R_16F;
    case Dtype::bfloat16:
      return CUDA_R_16BF;
    case Dtype::complex64:
      return CUDA_C_32F;
    default:
      throw std::invalid_argument(fmt::format(
          "gemm_gpu: {} is not a GPU BLAS dtype (float32, float16, bfloat16, complex64)",
          dtype_name(t)));
  }
}

// The common stride of offsets that are an arithmetic sequence, else -1.
int64_t uniform_stride(const std::vector<int64_t>& off) {
  if (off.size() < 2) return 0;
  int64_t s = off[1] - off[0];
  for (size_t i = 2; i < off.size(); ++i)
    if (off[i] - off[i - 1] != s) return -1;
  return s;
}

}  // namespace

}  // namespace alloy::blas

namespace alloy::cuda {
using namespace blas;

bool blas_available(std::string* why) {
  CuBlas& l = cublas();
  if (why) *why = l.error;
  return l.gemm != nullptr;
}

std::string blas_library() {
  CuBlas& l = cublas();
  if (!l.gemm) throw NotSupported("matmul", l.error);
  return l.file;
}

void gemm(Context& context, const Gemm& g) {
  CuBlas& l = cublas();
  if (!l.gemm) throw NotSupported("matmul", l.error);
  Context* ctx = &context;
  if (g.m == 0 || g.n == 0 || g.off_a.empty()) return;
  cuda::graph_recording::reject("a cuBLAS call");
  int t = cuda_type(g.dtype);
  int m = as_int(g.m, "m"), n = as_int(g.n, "n"), k = as_int(g.k, "k");
  int lda = as_int(g.lda, "lda"), ldb = as_int(g.ldb, "ldb");
  size_t esz = size_of(g.dtype);
  std::lock_guard lock(l.mu);
  ctx->make_current();
  ctx->check_usable();
  cublasHandle_t& handle = l.handle[ctx->ordinal()];
  if (!handle) {
    cublasStatus_t st = l.create(&handle);
    if (st != 0) throw Error("matmul", fmt::format("cublasCreate failed (status {})", st));
  }
  l.set_stream(handle, ctx->stream());
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets (B, A) and (n, m).
  int opa = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // alpha = 1 and beta = 0 in the compute type (float; complex64: (1, 0) and (0, 0)).
  const float one[2] = {1.0f, 0.0f}, zero[2] = {0.0f, 0.0f};
  auto* a = static_cast<const char*>(g.a);
  auto* b = static_cast<const char*>(g.b);
  auto* c = static_cast<char*>(g.c);
  int64_t sa = uniform_stride(g.off_a), sb = uniform_stride(g.off_b);
  size_t batch = g.off_a.size();
  ctx->note_launch("cublasGemmEx (matmul)");
  cublasStatus_t st = 0;
  if (sa >= 0 && sb >= 0 && batch <= static_cast<size_t>(std::numeric_limits<int>::max())) {
    st = l.gemm_strided(handle, opb, opa, n, m, k, one, b + g.off_b[0] * esz, t, ldb, sb,
                        a + g.off_a[0] * esz, t, lda, sa, zero, c, t, n, g.m * g.n,
                        static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  } else {
    for (size_t i = 0; i < batch && st == 0; ++i)
      st = l.gemm(handle, opb, opa, n, m, k, one, b + g.off_b[i] * esz, t, ldb,
                  a + g.off_a[i] * esz, t, lda, zero, c + i * g.m * g.n * esz, t, n,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  if (st != 0)
    throw Error("matmul", fmt::format("cuBLAS gemm failed (status {}) for [{}, {}] x [{}, {}] {}",
                                      st, g.m, g.k, g.k, g.n, dtype_name(g.dtype)));
}

}  // namespace alloy::cuda
