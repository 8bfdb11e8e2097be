// Process CPU time of NVRTC on several CUDA sources, each against the hand-written exp(sin(x))
// kernel a CuPy RawKernel user writes (CuPy's options), interleaved in one process: to compare
// translations of one kernel, prelude versions, or prefixes of the prelude (docs/performance.md,
// "CUDA cold compile against CuPy"). No GPU needed (cubin for sm_90). Build and run:
//
//   g++ -std=c++20 -O2 scripts/experiments/nvrtc_prelude_cost.cpp -ldl -o /tmp/nvrtc_prelude_cost
//   /tmp/nvrtc_prelude_cost src/prelude 9 new.cu old.cu@/tmp/old/src/prelude
//   EXTRA=-fdevice-syntax-only /tmp/nvrtc_prelude_cost src/prelude 9 new.cu   # front end only
//
// NVRTC is loaded with dlopen: $NVRTC (a path) or else libnvrtc.so.13, libnvrtc.so.12,
// libnvrtc.so; the library's path and version are printed. A file may name its own prelude folder
// after '@' (a `git archive` of another commit's src/prelude). The prelude is passed as -I<folder>,
// or with MEM=1 as Alloy passes it: every *.h under the folder as an in-memory header
// (nvrtcCreateProgram's headers, named by their relative paths; src/backend/cuda/jit.cpp).
// Alloy's sources get Alloy's options and the quick first compile's (-DALLOY_QUICK_ENTRY
// --ptxas-options=-O0 -maxrregcount=64, src/backend/cuda/backend.cpp quick_kernel_source; NVVM
// optimises, as by default since c64ef7e: EXTRA=-Xnvvm=-opt=0 for ALLOY_CUDA_QUICK_NVVM_O0=1); a
// name ending in "#full" gets the full compile's (neither), "#before" the quick compile's before
// 2026-11-29 (-DALLOY_QUICK_ENTRY only). Two names are built in: "hand" (the hand-written kernel
// with the quick compile's options) and "empty" (an empty kernel with them). EXTRA adds options to
// every compile; DROP leaves options out of Alloy's (e.g. DROP=-minimal); KEEP=1 sets glibc's
// malloc to keep freed memory (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD 1 GiB); UNIQUE_PREFIX=1 puts
// each run's mark before the source (else after it; NVRTC's --pch then makes a new PCH each time);
// LOG=1 prints NVRTC's logs. Prints the median CPU ms
// per file and its ratio to the CuPy-style compile of the same run (and with WALL=1 the median wall
// ms too).
#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

// NVRTC's entry points (nvrtc.h's signatures; no CUDA headers needed), from the library dlopen
// found.
using nvrtcProgram = struct _nvrtcProgram*;
constexpr int NVRTC_SUCCESS = 0;
struct Nvrtc {
  int (*version)(int*, int*);
  int (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                const char* const*);
  int (*compile)(nvrtcProgram, int, const char* const*);
  int (*log_size)(nvrtcProgram, size_t*);
  int (*log)(nvrtcProgram, char*);
  int (*cubin_size)(nvrtcProgram, size_t*);
  int (*cubin)(nvrtcProgram, char*);
  int (*destroy)(nvrtcProgram*);
  std::string path;
};

template <class F>
void bind(void* h, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) {
    std::fprintf(stderr, "%s: no %s\n", dlerror(), name);
    std::exit(2);
  }
}

Nvrtc load() {
  std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  if (const char* e = std::getenv("NVRTC")) names = {e};
  for (const auto& n : names) {
    void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    Nvrtc l;
    bind(h, l.version, "nvrtcVersion");
    bind(h, l.create, "nvrtcCreateProgram");
    bind(h, l.compile, "nvrtcCompileProgram");
    bind(h, l.log_size, "nvrtcGetProgramLogSize");
    bind(h, l.log, "nvrtcGetProgramLog");
    bind(h, l.cubin_size, "nvrtcGetCUBINSize");
    bind(h, l.cubin, "nvrtcGetCUBIN");
    bind(h, l.destroy, "nvrtcDestroyProgram");
    Dl_info info{};
    l.path =
        dladdr(reinterpret_cast<void*>(l.version), &info) && info.dli_fname ? info.dli_fname : n;
    return l;
  }
  std::fprintf(stderr, "NVRTC not found (set NVRTC to its path)\n");
  std::exit(2);
}

const Nvrtc& nv() {
  static const Nvrtc l = load();
  return l;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every *.h under `dir` (relative names, sorted), as Alloy embeds src/prelude.
struct Headers {
  std::vector<std::string> names, texts;
};

const Headers& headers_of(const std::string& dir) {
  static std::map<std::string, Headers> cache;
  auto it = cache.find(dir);
  if (it != cache.end()) return it->second;
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".h")
      files[std::filesystem::relative(e.path(), dir).string()] = read(e.path().string());
  Headers h;
  for (auto& [n, t] : files) {
    h.names.push_back(n);
    h.texts.push_back(t);
  }
  return cache[dir] = std::move(h);
}

double cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int counter = 0;

struct Variant {
  std::string name, source;
  std::vector<std::string> options;
  const Headers* headers = nullptr;  // in memory (MEM=1), else none
};

struct Sample {
  double cpu = 0, wall = 0, sys = 0, faults = 0;  // ms, ms, ms of system time, minor page faults
};

rusage usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u;
}

double ms(const timeval& t) {
  return t.tv_sec * 1e3 + t.tv_usec / 1e3;
}

// One compile of `v` (made unique, as a new kernel is). Exits on an error.
Sample compile(const Variant& v, bool syntax_only) {
  const Nvrtc& l = nv();
  // UNIQUE_PREFIX=1: the run's mark goes first (a new text before the first #include: NVRTC's
  // automatic PCH, --pch, is then made anew each time), else last.
  static const bool unique_prefix =
      std::getenv("UNIQUE_PREFIX") && std::string(std::getenv("UNIQUE_PREFIX")) == "1";
  const std::string mark = "#define ALLOY_RUN_" + std::to_string(++counter) + " 1\n";
  std::string src = unique_prefix ? mark + v.source : v.source + "\n" + mark;
  std::vector<const char*> hn, ht;
  if (v.headers)
    for (size_t i = 0; i < v.headers->names.size(); ++i) {
      hn.push_back(v.headers->names[i].c_str());
      ht.push_back(v.headers->texts[i].c_str());
    }
  const rusage u0 = usage();
  double c0 = cpu_ms(), w0 = wall_ms();
  nvrtcProgram p;
  l.create(&p, src.c_str(), "kernel.cu", static_cast<int>(hn.size()), ht.data(), hn.data());
  std::vector<const char*> o;
  for (auto& s : v.options) o.push_back(s.c_str());
  if (l.compile(p, static_cast<int>(o.size()), o.data()) != NVRTC_SUCCESS) {
    size_t n = 0;
    l.log_size(p, &n);
    std::string log(n, '\0');
    l.log(p, log.data());
    std::fprintf(stderr, "compile of %s failed:\n%s\n", v.name.c_str(), log.c_str());
    std::exit(1);
  }
  static const bool print_log = std::getenv("LOG") && std::string(std::getenv("LOG")) == "1";
  if (print_log) {
    size_t n = 0;
    l.log_size(p, &n);
    std::string log(n, '\0');
    l.log(p, log.data());
    if (n > 1) std::fprintf(stderr, "log of %s:\n%s\n", v.name.c_str(), log.c_str());
  }
  if (!syntax_only) {
    size_t n = 0;
    l.cubin_size(p, &n);
    std::vector<char> cubin(n);
    l.cubin(p, cubin.data());
  }
  l.destroy(&p);
  Sample out{cpu_ms() - c0, wall_ms() - w0};
  const rusage u1 = usage();
  out.sys = ms(u1.ru_stime) - ms(u0.ru_stime);
  out.faults = static_cast<double>(u1.ru_minflt - u0.ru_minflt);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool ends_with(const std::string& a, const std::string& b) {
  return a.size() > b.size() && a.compare(a.size() - b.size(), b.size(), b) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s prelude_dir runs file.cu[@prelude_dir][#full|#before]...\n",
                 argv[0]);
    return 2;
  }
  const std::string prelude = argv[1];
  const int runs = std::max(1, std::atoi(argv[2]));
  const bool mem = std::getenv("MEM") && std::string(std::getenv("MEM")) == "1";
  const bool wall = std::getenv("WALL") && std::string(std::getenv("WALL")) == "1";
  std::vector<std::string> extra;
  bool syntax_only = false;
  if (const char* e = std::getenv("EXTRA")) {
    std::stringstream ss(e);
    for (std::string w; ss >> w;) {
      extra.push_back(w);
      syntax_only |= w == "-fdevice-syntax-only";
    }
  }
  std::vector<std::string> drop;  // DROP: options to leave out of Alloy's (e.g. -minimal)
  if (const char* e = std::getenv("DROP")) {
    std::stringstream ss(e);
    for (std::string w; ss >> w;) drop.push_back(w);
  }
  const std::string hand =
      "extern \"C\" __global__ void expsin(const float* x, float* y, unsigned n) {\n"
      "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) y[i] = expf(sinf(x[i]));\n}\n";
  // cupy/_core/core.pyx assemble_cupy_compiler_options + cupy/cuda/compiler.py.
  std::vector<std::string> cupy = {"--std=c++17", "-ftz=true", "-arch=sm_90",
                                   "--device-as-default-execution-space"};
  if (syntax_only) cupy.push_back("-fdevice-syntax-only");
  std::vector<Variant> vs = {{"hand-written CUDA, CuPy's options", hand, cupy}};
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    Variant v;
    v.name = a;
    const bool full = ends_with(a, "#full"), before = ends_with(a, "#before");
    if (full || before) a.resize(a.find('#'));
    size_t at = a.find('@');
    const std::string file = a.substr(0, at);
    const std::string dir = at == std::string::npos ? prelude : a.substr(at + 1);
    if (file == "hand")
      v.source = hand;
    else if (file == "empty")
      v.source = "extern \"C\" __global__ void k() {}\n";
    else
      v.source = read(file);
    v.options = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device", "-DALLOY_MATH_SAFE",
                 "-minimal"};
    if (!full) v.options.push_back("-DALLOY_QUICK_ENTRY");
    if (!full && !before)
      v.options.insert(v.options.end(), {"--ptxas-options=-O0", "-maxrregcount=64"});
    if (mem)
      v.headers = &headers_of(dir);
    else
      v.options.push_back("-I" + dir);
    v.options.insert(v.options.end(), extra.begin(), extra.end());
    for (const auto& d : drop) std::erase(v.options, d);
    vs.push_back(std::move(v));
  }
  // KEEP=1: glibc's malloc keeps freed memory (no trimming, no mmap for large blocks), so a
  // compile reuses pages an earlier one touched instead of faulting in new ones.
  const bool keep = std::getenv("KEEP") && std::string(std::getenv("KEEP")) == "1";
  if (keep) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  for (const auto& v : vs) compile(v, syntax_only);
  std::vector<std::vector<double>> t(vs.size()), w(vs.size()), sy(vs.size()), pf(vs.size());
  for (int r = 0; r < runs; ++r)
    for (size_t i = 0; i < vs.size(); ++i) {
      Sample s = compile(vs[i], syntax_only);
      t[i].push_back(s.cpu);
      w[i].push_back(s.wall);
      sy[i].push_back(s.sys);
      pf[i].push_back(s.faults);
    }
  int major = 0, minor = 0;
  nv().version(&major, &minor);
  std::printf(
      "NVRTC %d.%d (%s), %d runs each (interleaved), median process CPU ms (of it system ms, "
      "minor page faults)%s%s%s%s:\n",
      major, minor, nv().path.c_str(), runs, wall ? ", wall ms" : "",
      syntax_only ? " (front end only)" : "", mem ? " (prelude in memory)" : "",
      keep ? " (malloc keeps memory)" : "");
  const double peer = median(t[0]);
  for (size_t i = 0; i < vs.size(); ++i) {
    std::printf("  %8.1f  %5.2fx  (sys %5.1f, %6.0f faults)", median(t[i]), median(t[i]) / peer,
                median(sy[i]), median(pf[i]));
    if (wall) std::printf("  wall %8.1f", median(w[i]));
    std::printf("  %s\n", vs[i].name.c_str());
  }
}
