// What an NVRTC worker's first compile pays, step by step, and what a warm-up compile done ahead
// of it saves (docs/nvrtc-workers.md, "Workers started ahead"). One fresh process per run (a
// worker's first compile is that of a fresh process); the steps, in order, each timed (wall and
// this process's CPU ms):
//
//   load   dlopen of NVRTC + nvrtcVersion (a worker does it before its greeting)
//   then, by mode:
//   cold        K (its PCH made, as a cold worker's first compile), K2 (loads it)
//   init        an empty kernel without the prelude (NVRTC's first use), K, K2
//   match       W (another kernel with K's prefix, its PCH made: the warm-up), K, K2
//   core        W with the prelude's core only as its prefix (PCH made), K, K2
//   syntax      W with K's prefix, front end only (-fdevice-syntax-only; PCH made), K, K2
//   otheropts   W with K's prefix under the quick compile's options (PCH made), K, K2
//   nopch       an empty kernel, then K without the PCH options (the prelude parsed, no PCH),
//               K2 without them
//
// K, K2 and W are translations of one body with different constants, as
// `alloy translate --target cuda` prints them, turned into the text the runtime compiles from a
// selection's third compile on (nvrtc::auto_pch: the prefix's core and its math #defines and
// metal_stdlib.h before the core's end line). Options: Alloy's full compile's (sm_90). The
// prelude's files are in-memory headers, as src/backend/cuda/jit.cpp passes them. Build, run:
//
//   g++ -std=c++20 -O2 scripts/experiments/nvrtc_worker_warmup.cpp -ldl -o /tmp/nvrtc_warmup
//   for m in cold init match core otheropts nopch; do /tmp/nvrtc_warmup src/prelude K.cu K2.cu W.cu
//   $m; done
//
// NVRTC: $NVRTC or libnvrtc.so.13. The PCH folder is made under /tmp and removed.
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using nvrtcProgram = struct _nvrtcProgram*;
int (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
int (*compile)(nvrtcProgram, int, const char* const*);
int (*destroy)(nvrtcProgram*);
int (*log_size)(nvrtcProgram, size_t*);
int (*get_log)(nvrtcProgram, char*);
int (*version)(int*, int*);

double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr const char* kCoreEnd = "namespace metal {}  // the prelude's core\n";

// The source with the core's end line moved after the directives that follow it (auto_pch's
// whole()); `core_only`: as it is (the core's prefix).
std::string prefixed(const std::string& src, bool core_only) {
  if (core_only) return src;
  size_t at = src.find(kCoreEnd);
  if (at == std::string::npos) return src;
  size_t rest = at + std::string(kCoreEnd).size(), end = rest;
  while (end < src.size()) {
    size_t nl = src.find('\n', end);
    size_t next = nl == std::string::npos ? src.size() : nl + 1;
    std::string line = src.substr(end, next - end);
    size_t first = line.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && line[first] != '#') break;
    end = next;
  }
  return src.substr(0, at) + src.substr(rest, end - rest) + kCoreEnd + src.substr(end);
}

struct Headers {
  std::vector<std::string> names, texts;
  std::vector<const char*> n, t;
};

void step(const char* what, const std::string& src, const Headers& h,
          std::vector<std::string> opts) {
  std::vector<const char*> o;
  for (auto& s : opts) o.push_back(s.c_str());
  double w0 = wall_ms(), c0 = cpu_ms();
  nvrtcProgram p = nullptr;
  create(&p, src.c_str(), "k.cu", static_cast<int>(h.n.size()), h.t.data(), h.n.data());
  int r = compile(p, static_cast<int>(o.size()), o.data());
  double w = wall_ms() - w0, c = cpu_ms() - c0;
  size_t n = 0;
  log_size(p, &n);
  std::string log(n, '\0');
  get_log(p, log.data());
  destroy(&p);
  std::printf("  %-10s %7.1f ms wall %7.1f ms cpu%s\n", what, w, c, r ? "  FAILED" : "");
  if (std::getenv("LOG") && n > 1) std::printf("%s\n", log.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s PRELUDE_DIR K.cu K2.cu W.cu MODE\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[5];
  Headers h;
  for (auto& e : std::filesystem::recursive_directory_iterator(argv[1])) {
    if (e.path().extension() != ".h") continue;
    h.names.push_back(std::filesystem::relative(e.path(), argv[1]).string());
    h.texts.push_back(read(e.path().string()));
  }
  for (size_t i = 0; i < h.names.size(); ++i) {
    h.n.push_back(h.names[i].c_str());
    h.t.push_back(h.texts[i].c_str());
  }
  const std::string k = read(argv[2]), k2 = read(argv[3]), w = read(argv[4]);
  std::string dir = "/tmp/nvrtc-warmup-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::vector<std::string> full = {"--gpu-architecture=sm_90", "--std=c++17",
                                         "-default-device", "-DALLOY_MATH_SAFE", "-minimal"};
  std::vector<std::string> quick = full;
  for (const char* o : {"-DALLOY_QUICK_ENTRY", "--ptxas-options=-O0", "-maxrregcount=64"})
    quick.push_back(o);
  auto with_pch = [&](std::vector<std::string> o) {
    for (const char* p : {"--pch", "--pch-messages=false", "-diag-suppress=20283"}) o.push_back(p);
    o.push_back("--pch-dir=" + dir);
    return o;
  };
  const char* lib = std::getenv("NVRTC") ? std::getenv("NVRTC") : "libnvrtc.so.13";
  double w0 = wall_ms(), c0 = cpu_ms();
  void* so = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!so) {
    std::fprintf(stderr, "cannot load %s\n", lib);
    return 1;
  }
  create = reinterpret_cast<decltype(create)>(dlsym(so, "nvrtcCreateProgram"));
  compile = reinterpret_cast<decltype(compile)>(dlsym(so, "nvrtcCompileProgram"));
  destroy = reinterpret_cast<decltype(destroy)>(dlsym(so, "nvrtcDestroyProgram"));
  log_size = reinterpret_cast<decltype(log_size)>(dlsym(so, "nvrtcGetProgramLogSize"));
  get_log = reinterpret_cast<decltype(get_log)>(dlsym(so, "nvrtcGetProgramLog"));
  version = reinterpret_cast<decltype(version)>(dlsym(so, "nvrtcVersion"));
  int major = 0, minor = 0;
  version(&major, &minor);
  std::printf("%s (NVRTC %d.%d)\n  %-10s %7.1f ms wall %7.1f ms cpu\n", mode.c_str(), major, minor,
              "load", wall_ms() - w0, cpu_ms() - c0);
  const std::string empty = "extern \"C\" __global__ void warm() {}\n";
  const std::string K = prefixed(k, false), K2 = prefixed(k2, false);
  if (mode == "cold") {
  } else if (mode == "init") {
    step("empty", empty, h, full);
  } else if (mode == "match") {
    step("W", prefixed(w, false), h, with_pch(full));
  } else if (mode == "core") {
    step("W(core)", prefixed(w, true), h, with_pch(full));
  } else if (mode == "syntax") {
    std::vector<std::string> o = full;
    o.push_back("-fdevice-syntax-only");
    step("W(syntax)", prefixed(w, false), h, with_pch(o));
  } else if (mode == "otheropts") {
    step("W(quick)", prefixed(w, false), h, with_pch(quick));
  } else if (mode == "nopch") {
    step("empty", empty, h, full);
    step("K", K, h, full);
    step("K2", K2, h, full);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (mode != "nopch") {
    step("K", K, h, with_pch(full));
    step("K2", K2, h, with_pch(full));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
