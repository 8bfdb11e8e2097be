// CPU matrix products through OpenBLAS, loaded at run time with dlopen (no link-time dependency).
// The CBLAS prototypes used are declared here, for both integer widths OpenBLAS is built with:
// 32-bit (LP64: Debian's libopenblas0-pthread, libopenblas.so.0) and 64-bit (ILP64: numpy's
// bundled scipy-openblas64, whose symbols are renamed scipy_cblas_sgemm64_ and so on).
//
// Which library: ALLOY_OPENBLAS (a file) first; then an OpenBLAS already loaded in the process
// (numpy's, when numpy was imported before the first CPU product); then the files the program
// named with add_cpu_blas_candidate (the Python package names numpy's bundled one, found without
// importing numpy, so the order of imports does not matter); then the system's. Sharing a
// loaded one matters: each OpenBLAS keeps its own thread pool whose threads spin for a while
// after every call, and two pools alternating on few cores slow each other down (a 256^2 float32
// product after a numpy product took 3.8 ms instead of 0.2 ms on 2 cores; docs/performance.md).
#include "backend/cpu/blas.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "alloy/errors.h"
#include "alloy/ops.h"

namespace alloy::blas {
namespace {

// cblas.h: enum CBLAS_ORDER / CBLAS_TRANSPOSE (ints in both integer widths).
constexpr int kRowMajor = 101;
constexpr int kNoTrans = 111;
constexpr int kTrans = 112;

// The entry points of one library, with sizes of type I (int: LP64, int64_t: ILP64).
template <class I>
struct Cblas {
  using Sgemm = void (*)(int order, int ta, int tb, I m, I n, I k, float alpha, const float* a,
                         I lda, const float* b, I ldb, float beta, float* c, I ldc);
  using Dgemm = void (*)(int order, int ta, int tb, I m, I n, I k, double alpha, const double* a,
                         I lda, const double* b, I ldb, double beta, double* c, I ldc);
  using Sgemv = void (*)(int order, int ta, I m, I n, float alpha, const float* a, I lda,
                         const float* x, I incx, float beta, float* y, I incy);
  using Dgemv = void (*)(int order, int ta, I m, I n, double alpha, const double* a, I lda,
                         const double* x, I incx, double beta, double* y, I incy);
  // The complex products take alpha and beta by address (cblas_cgemm / cblas_cgemv).
  using Cgemm = void (*)(int order, int ta, int tb, I m, I n, I k, const void* alpha, const void* a,
                         I lda, const void* b, I ldb, const void* beta, void* c, I ldc);
  using Cgemv = void (*)(int order, int ta, I m, I n, const void* alpha, const void* a, I lda,
                         const void* x, I incx, const void* beta, void* y, I incy);
  Sgemm sgemm = nullptr;
  Dgemm dgemm = nullptr;
  Sgemv sgemv = nullptr;
  Dgemv dgemv = nullptr;
  Cgemm cgemm = nullptr;  // complex64; null if the library lacks it (complex matmul then raises)
  Cgemv cgemv = nullptr;

  // Looks the entry points up as prefix + name + suffix; false unless the four real ones exist.
  bool resolve(void* h, const std::string& prefix, const std::string& suffix) {
    auto sym = [&](const char* name) { return dlsym(h, (prefix + name + suffix).c_str()); };
    sgemm = reinterpret_cast<Sgemm>(sym("cblas_sgemm"));
    dgemm = reinterpret_cast<Dgemm>(sym("cblas_dgemm"));
    sgemv = reinterpret_cast<Sgemv>(sym("cblas_sgemv"));
    dgemv = reinterpret_cast<Dgemv>(sym("cblas_dgemv"));
    cgemm = reinterpret_cast<Cgemm>(sym("cblas_cgemm"));
    cgemv = reinterpret_cast<Cgemv>(sym("cblas_cgemv"));
    if (!cgemm || !cgemv) cgemm = nullptr, cgemv = nullptr;
    if (sgemm && dgemm && sgemv && dgemv) return true;
    *this = Cblas{};
    return false;
  }
};

struct OpenBlas {
  bool ilp64 = false;        // which of the two tables is filled
  Cblas<int> lp64_fns;       // 32-bit sizes
  Cblas<int64_t> ilp64_fns;  // 64-bit sizes
  std::string description;   // the file and openblas_get_config(), or empty when none loaded
  std::string error;
};

// Symbol spellings: plain OpenBLAS, and the scipy-openblas wheels' (numpy's bundled library).
constexpr std::pair<const char*, const char*> kSpellings[] = {
    {"", ""}, {"scipy_", "64_"}, {"scipy_", ""}, {"", "64_"}};

// Fills `l` from the library handle `h`; false if it lacks the CBLAS products (or, with
// `openblas_only`, is not an OpenBLAS: a reference BLAS would be slower than any OpenBLAS).
bool take(void* h, bool openblas_only, OpenBlas& l) {
  for (auto [prefix, suffix] : kSpellings) {
    using GetConfig = const char* (*)();
    auto get_config = reinterpret_cast<GetConfig>(
        dlsym(h, (std::string(prefix) + "openblas_get_config" + suffix).c_str()));
    if (openblas_only && !get_config) continue;
    std::string config = get_config ? get_config() : "";
    // The integer width: OpenBLAS's configuration string names 64-bit builds (USE64BITINT);
    // without one, the "64_" suffix is the convention for them.
    bool ilp64 = get_config ? config.find("USE64BITINT") != std::string::npos
                            : std::string_view(suffix) == "64_";
    bool ok =
        ilp64 ? l.ilp64_fns.resolve(h, prefix, suffix) : l.lp64_fns.resolve(h, prefix, suffix);
    if (!ok) continue;
    l.ilp64 = ilp64;
    // The file that holds the code (dlsym also searches the handle's dependencies).
    Dl_info info{};
    void* code = ilp64 ? reinterpret_cast<void*>(l.ilp64_fns.sgemm)
                       : reinterpret_cast<void*>(l.lp64_fns.sgemm);
    std::string file = dladdr(code, &info) && info.dli_fname ? info.dli_fname : "?";
    l.description = config.empty() ? file : fmt::format("{} ({})", file, config);
    return true;
  }
  return false;
}

// Files the embedding program names (add_cpu_blas_candidate: the Python package names numpy's
// bundled OpenBLAS), read once, when the library is chosen; later additions are refused.
struct Candidates {
  std::mutex mu;
  bool chosen = false;
  std::vector<std::string> files;
};

Candidates& candidates() {
  static Candidates* c = new Candidates;  // never destroyed (a choice may come at exit)
  return *c;
}

// The files of the BLAS libraries loaded in the process now (a name containing "blas": numpy's
// libscipy_openblas64_-<hash>.so, Debian's libopenblas.so.0 or its libblas.so.3), in load order.
std::vector<std::string> loaded_blas_files() {
  std::vector<std::string> files;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* path = info->dlpi_name;
        if (!path || !*path) return 0;
        const char* slash = std::strrchr(path, '/');
        if (std::strstr(slash ? slash + 1 : path, "blas"))
          static_cast<std::vector<std::string>*>(data)->emplace_back(path);
        return 0;
      },
      &files);
  return files;
}

const OpenBlas& openblas() {
  static const OpenBlas* lib = [] {
    auto* l = new OpenBlas;  // never unloaded (its threads outlive static destruction)
    std::vector<std::string> named;
    {
      Candidates& c = candidates();
      std::lock_guard lock(c.mu);
      c.chosen = true;
      named = c.files;
    }
    std::string tried;
    auto attempt = [&](const std::string& name, bool loaded) {
      // RTLD_NOLOAD: a handle to the library loaded, never a second copy.
      void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | (loaded ? RTLD_NOLOAD : 0));
      if (!h) {
        const char* why = dlerror();
        if (!loaded) tried += fmt::format("\n  {}: {}", name, why ? why : "not found");
        return false;
      }
      if (take(h, loaded, *l)) return true;
      if (!loaded) tried += fmt::format("\n  {}: lacks cblas_sgemm/dgemm/sgemv/dgemv", name);
      dlclose(h);
      return false;
    };
    // ALLOY_OPENBLAS: an explicit library file (e.g. a Debian package unpacked into a prefix, as
    // scripts/device-test.sh does), tried first.
    if (const char* env = std::getenv("ALLOY_OPENBLAS"); env && *env)
      if (attempt(env, false)) return l;
    // An OpenBLAS already loaded (numpy's); then the program's candidates: loading numpy's
    // bundled library here means numpy, imported later, uses this copy (the dynamic loader
    // reuses a library of the same soname); then the system's.
    for (const std::string& file : loaded_blas_files())
      if (attempt(file, true)) return l;
    for (const std::string& file : named)
      if (attempt(file, false)) return l;
    for (const char* n : {"libopenblas.so.0", "libopenblas.so",
                          "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"})
      if (attempt(n, false)) return l;
    l->error =
        "not supported: matmul on the CPU needs OpenBLAS (Debian: apt install "
        "libopenblas0-pthread); tried:" +
        tried;
    return l;
  }();
  return *lib;
}

// A size as the library's integer type.
template <class I>
I as_size(int64_t v, const char* what) {
  if (v > std::numeric_limits<I>::max())
    throw NotSupported("matmul", fmt::format("not supported: matmul with {} = {} (OpenBLAS takes "
                                             "32-bit sizes)",
                                             what, v));
  return static_cast<I>(v);
}

// (re, im) pairs of float, as std::complex<float> and complex64 store them.
struct c64 {
  float re, im;
};

template <class I>
void gemm_with(const Cblas<I>& f, const Gemm& g) {
  I m = as_size<I>(g.m, "m"), n = as_size<I>(g.n, "n"), k = as_size<I>(g.k, "k");
  I lda = as_size<I>(g.lda, "lda"), ldb = as_size<I>(g.ldb, "ldb");
  int ta = g.trans_a ? kTrans : kNoTrans, tb = g.trans_b ? kTrans : kNoTrans;
  size_t batch = g.off_a.size();
  // One row (or one column) of output: a matrix-vector product (gemm would pack the whole
  // matrix first, several times slower for a vector).
  auto run = [&](auto* a, auto* b, auto* c, auto gemm, auto gemv, auto one, auto zero) {
    for (size_t i = 0; i < batch; ++i) {
      auto* ai = a + g.off_a[i];
      auto* bi = b + g.off_b[i];
      auto* ci = c + static_cast<int64_t>(i) * g.m * g.n;
      if (m == 1)  // c[0, :] = a[0, :] op(B): B's rows are read as a [k, n] or [n, k] matrix
        gemv(kRowMajor, g.trans_b ? kNoTrans : kTrans, g.trans_b ? n : k, g.trans_b ? k : n, one,
             bi, ldb, ai, g.trans_a ? lda : I{1}, zero, ci, I{1});
      else if (n == 1)  // c[:, 0] = op(A) b[:, 0]
        gemv(kRowMajor, g.trans_a ? kTrans : kNoTrans, g.trans_a ? k : m, g.trans_a ? m : k, one,
             ai, lda, bi, g.trans_b ? I{1} : ldb, zero, ci, I{1});
      else
        gemm(kRowMajor, ta, tb, m, n, k, one, ai, lda, bi, ldb, zero, ci, n);
    }
  };
  if (g.dtype == Dtype::float32) {
    run(static_cast<const float*>(g.a), static_cast<const float*>(g.b), static_cast<float*>(g.c),
        f.sgemm, f.sgemv, 1.0f, 0.0f);
  } else if (g.dtype == Dtype::float64) {
    run(static_cast<const double*>(g.a), static_cast<const double*>(g.b), static_cast<double*>(g.c),
        f.dgemm, f.dgemv, 1.0, 0.0);
  } else if (g.dtype == Dtype::complex64) {
    if (!f.cgemm)
      throw NotSupported("matmul",
                         "not supported: complex64 matmul: the OpenBLAS library found "
                         "lacks cblas_cgemm");
    auto cgemm = [&](int o, int ta_, int tb_, I m_, I n_, I k_, c64 alpha, const c64* a, I lda_,
                     const c64* b, I ldb_, c64 beta, c64* c, I ldc) {
      f.cgemm(o, ta_, tb_, m_, n_, k_, &alpha, a, lda_, b, ldb_, &beta, c, ldc);
    };
    auto cgemv = [&](int o, int ta_, I m_, I n_, c64 alpha, const c64* a, I lda_, const c64* x,
                     I incx, c64 beta, c64* y,
                     I incy) { f.cgemv(o, ta_, m_, n_, &alpha, a, lda_, x, incx, &beta, y, incy); };
    run(static_cast<const c64*>(g.a), static_cast<const c64*>(g.b), static_cast<c64*>(g.c), cgemm,
        cgemv, c64{1.0f, 0.0f}, c64{0.0f, 0.0f});
  } else {
    throw std::invalid_argument(fmt::format(
        "gemm_cpu: {} is not a BLAS dtype (float32, float64, complex64)", dtype_name(g.dtype)));
  }
}

}  // namespace

}  // namespace alloy::blas

namespace alloy::cpu {
using namespace blas;

bool blas_available(std::string* why) {
  const OpenBlas& l = openblas();
  if (why) *why = l.error;
  return !l.description.empty();
}

std::string blas_library() {
  const OpenBlas& l = openblas();
  if (l.description.empty()) throw NotSupported("matmul", l.error);
  return l.description;
}

void gemm(const Gemm& g) {
  const OpenBlas& l = openblas();
  if (l.description.empty()) throw NotSupported("matmul", l.error);
  if (g.m == 0 || g.n == 0) return;
  if (l.ilp64)
    gemm_with(l.ilp64_fns, g);
  else
    gemm_with(l.lp64_fns, g);
}

}  // namespace alloy::cpu

namespace alloy {

bool add_cpu_blas_candidate(const std::string& file) {
  blas::Candidates& c = blas::candidates();
  std::lock_guard lock(c.mu);
  if (c.chosen) return false;
  c.files.push_back(file);
  return true;
}

}  // namespace alloy
