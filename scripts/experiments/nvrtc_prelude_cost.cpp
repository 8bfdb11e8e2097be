// Process CPU time of NVRTC on several CUDA sources, each against the hand-written exp(sin(x))
// kernel a CuPy RawKernel user writes (CuPy's options), interleaved in one process: to compare
// translations of one kernel, prelude versions, or prefixes of the prelude (docs/performance.md,
// "CUDA cold compile against CuPy"). No GPU needed (cubin for sm_90). Build and run:
//
//   g++ -std=c++20 -O2 -I/usr/local/cuda/include scripts/experiments/nvrtc_prelude_cost.cpp
//       -L/usr/local/cuda/lib64 -lnvrtc -o /tmp/nvrtc_prelude_cost        (one command line)
//   /tmp/nvrtc_prelude_cost src/prelude 9 new.cu old.cu@/tmp/old/src/prelude
//   EXTRA=-fdevice-syntax-only /tmp/nvrtc_prelude_cost src/prelude 9 new.cu   # front end only
//
// A file may name its own prelude folder after '@' (a `git archive` of another commit's
// src/prelude). Alloy's sources get Alloy's options and the quick first compile's
// (-DALLOY_QUICK_ENTRY --ptxas-options=-O0 -maxrregcount=64 -Xnvvm=-opt=0,
// src/backend/cuda/backend.cpp); a
// name ending in "#before" gets the quick compile's options before 2026-11-29 (-DALLOY_QUICK_ENTRY
// only), e.g. `old.cu@/tmp/old/src/prelude#before`. EXTRA adds options to every compile. Prints
// the median CPU ms per file and its ratio to the CuPy-style compile of the same run.
#include <nvrtc.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int counter = 0;

// One compile of `src0` (made unique, as a new kernel is); CPU ms. Exits on a compile error.
double compile(const std::string& src0, const std::vector<std::string>& opts, bool syntax_only) {
  std::string src = src0 + "\n// run " + std::to_string(++counter) + "\n";
  double c0 = cpu_ms();
  nvrtcProgram p;
  nvrtcCreateProgram(&p, src.c_str(), "kernel.cu", 0, nullptr, nullptr);
  std::vector<const char*> o;
  for (auto& s : opts) o.push_back(s.c_str());
  if (nvrtcCompileProgram(p, static_cast<int>(o.size()), o.data()) != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(p, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(p, log.data());
    std::fprintf(stderr, "compile failed:\n%s\n", log.c_str());
    std::exit(1);
  }
  if (!syntax_only) {
    size_t n = 0;
    nvrtcGetCUBINSize(p, &n);
    std::vector<char> cubin(n);
    nvrtcGetCUBIN(p, cubin.data());
  }
  nvrtcDestroyProgram(&p);
  return cpu_ms() - c0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s prelude_dir runs file.cu[@prelude_dir]...\n", argv[0]);
    return 2;
  }
  const std::string inc = std::string("-I") + argv[1];
  const int runs = std::max(1, std::atoi(argv[2]));
  std::vector<std::string> extra;
  bool syntax_only = false;
  if (const char* e = std::getenv("EXTRA")) {
    std::stringstream ss(e);
    for (std::string w; ss >> w;) {
      extra.push_back(w);
      syntax_only |= w == "-fdevice-syntax-only";
    }
  }
  // cupy/_core/core.pyx assemble_cupy_compiler_options + cupy/cuda/compiler.py.
  std::vector<std::string> cupy = {"--std=c++17", "-ftz=true", "-arch=sm_90",
                                   "--device-as-default-execution-space"};
  if (syntax_only) cupy.push_back("-fdevice-syntax-only");
  const std::vector<std::string> alloy = {
      "--gpu-architecture=sm_90", "--std=c++17", "-default-device",
      "-DALLOY_MATH_SAFE",        "-minimal",    "-DALLOY_QUICK_ENTRY"};
  std::vector<std::string> names = {"hand-written CUDA, CuPy's options"};
  std::vector<std::string> sources = {
      "extern \"C\" __global__ void expsin(const float* x, float* y, unsigned n) {\n"
      "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) y[i] = expf(sinf(x[i]));\n}\n"};
  std::vector<std::vector<std::string>> options = {cupy};
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    names.push_back(a);
    const std::string before = "#before";
    const bool old_options =
        a.size() > before.size() && a.compare(a.size() - before.size(), before.size(), before) == 0;
    if (old_options) a.resize(a.size() - before.size());
    size_t at = a.find('@');
    sources.push_back(read(a.substr(0, at)));
    std::vector<std::string> o = alloy;
    if (!old_options)
      o.insert(o.end(), {"--ptxas-options=-O0", "-maxrregcount=64", "-Xnvvm=-opt=0"});
    o.push_back(at == std::string::npos ? inc : "-I" + a.substr(at + 1));
    o.insert(o.end(), extra.begin(), extra.end());
    options.push_back(o);
  }
  for (size_t v = 0; v < sources.size(); ++v) compile(sources[v], options[v], syntax_only);
  std::vector<std::vector<double>> t(sources.size());
  for (int r = 0; r < runs; ++r)
    for (size_t v = 0; v < sources.size(); ++v)
      t[v].push_back(compile(sources[v], options[v], syntax_only));
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  std::printf("NVRTC %d.%d, %d runs each (interleaved), median process CPU ms%s:\n", major, minor,
              runs, syntax_only ? " (front end only)" : "");
  const double peer = median(t[0]);
  for (size_t v = 0; v < sources.size(); ++v)
    std::printf("  %8.1f  %5.2fx  %s\n", median(t[v]), median(t[v]) / peer, names[v].c_str());
}
