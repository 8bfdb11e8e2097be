// NVRTC compile time of a small translated kernel (exp(sin(x)), as `alloy translate --target
// cuda` prints it) against the hand-written CUDA a CuPy RawKernel user writes, under the options
// issue "First-call latency" item 1 lists. No GPU needed (cubin for sm_90). Build and run:
//
//   build/alloy translate --target cuda --name expsin --input inp --input-dtype float32 \
//       --input-shape 1048576 --output out --output-dtype float32 --source body.metal > expsin.cu
//   g++ -std=c++20 -O2 -I/usr/local/cuda/include scripts/experiments/nvrtc_options.cpp \
//       -L/usr/local/cuda/lib64 -lnvrtc -lnvJitLink -o /tmp/nvrtc_options
//   /tmp/nvrtc_options expsin.cu src/prelude [runs]
//
// Prints the median wall time and process CPU time of nvrtcCompileProgram + cubin retrieval per
// variant (each run's source gets a unique comment, as a new kernel would; one NVRTC program per
// run). CPU time is the steadier measure on a loaded machine (NVRTC runs on one thread).
#include <nvJitLink.h>
#include <nvrtc.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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
double last_cpu = 0;  // CPU ms of the last compile()

// One compile; returns ms (or -1 on failure, printing the log). `lto`: -dlto, then nvJitLink.
double compile(const std::string& src0, const std::vector<std::string>& opts, bool lto = false) {
  std::string src = src0 + "\n// run " + std::to_string(++counter) + "\n";
  double t0 = now_ms(), c0 = cpu_ms();
  nvrtcProgram p;
  nvrtcCreateProgram(&p, src.c_str(), "kernel.cu", 0, nullptr, nullptr);
  std::vector<const char*> o;
  for (auto& s : opts) o.push_back(s.c_str());
  if (nvrtcCompileProgram(p, static_cast<int>(o.size()), o.data()) != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(p, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(p, log.data());
    std::fprintf(stderr, "compile failed: %s\n", log.substr(0, log.find('\n')).c_str());
    nvrtcDestroyProgram(&p);
    return -1;
  }
  size_t n = 0;
  std::vector<char> out;
  if (lto) {
    nvrtcGetLTOIRSize(p, &n);
    out.resize(n);
    nvrtcGetLTOIR(p, out.data());
    nvJitLinkHandle h;
    const char* lo[] = {"-arch=sm_90", "-lto"};
    nvJitLinkCreate(&h, 2, lo);
    nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, out.data(), out.size(), "k");
    if (nvJitLinkComplete(h) != NVJITLINK_SUCCESS) std::fprintf(stderr, "link failed\n");
    nvJitLinkGetLinkedCubinSize(h, &n);
    out.resize(n);
    nvJitLinkGetLinkedCubin(h, out.data());
    nvJitLinkDestroy(&h);
  } else {
    nvrtcGetCUBINSize(p, &n);
    out.resize(n);
    nvrtcGetCUBIN(p, out.data());
  }
  nvrtcDestroyProgram(&p);
  last_cpu = cpu_ms() - c0;
  return now_ms() - t0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s translated.cu prelude_dir [runs]\n", argv[0]);
    return 2;
  }
  std::string alloy = read(argv[1]);
  std::string inc = std::string("-I") + argv[2];
  int runs = argc > 3 ? std::atoi(argv[3]) : 7;
  const std::string hand =
      "extern \"C\" __global__ void expsin(const float* x, float* y, unsigned n) {\n"
      "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) y[i] = expf(sinf(x[i]));\n}\n";
  // The same entry without thread coarsening (the body once, not 4 + 1 times).
  std::string single = alloy;
  if (auto p = single.find("if (::alloy_entry::cuda_groups_whole(L, 4))"); p != std::string::npos)
    single.insert(p + 4, "false && ");
  std::vector<std::string> base = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device",
                                   "-DALLOY_MATH_SAFE",        "-minimal",    inc};
  auto with = [&](std::vector<std::string> extra, std::vector<std::string> o) {
    o.insert(o.end(), extra.begin(), extra.end());
    return o;
  };
  auto without = [&](const std::string& drop) {
    std::vector<std::string> o;
    for (auto& s : base)
      if (s != drop) o.push_back(s);
    return o;
  };
  struct Variant {
    std::string name;
    std::function<double()> run;
  };
  std::vector<Variant> variants = {
      // cupy/_core/core.pyx assemble_cupy_compiler_options + cupy/cuda/compiler.py (its -I
      // folders change nothing for this source; --pch only with CUPY_NVRTC_USE_PCH=1).
      {"hand-written CUDA, CuPy RawKernel's options (--std=c++17 -ftz=true -arch=sm_90 "
       "--device-as-default-execution-space)",
       [&] {
         return compile(hand, {"--std=c++17", "-ftz=true", "-arch=sm_90",
                               "--device-as-default-execution-space"});
       }},
      {"hand-written CUDA, --gpu-architecture=sm_90 only",
       [&] { return compile(hand, {"--gpu-architecture=sm_90"}); }},
      {"hand-written CUDA + Alloy's options",
       [&] {
         return compile(hand,
                        {"--gpu-architecture=sm_90", "--std=c++17", "-default-device", "-minimal"});
       }},
      {"Alloy translated (today's options)", [&] { return compile(alloy, base); }},
      {"Alloy translated, -DALLOY_QUICK_ENTRY (the first call's quick compile)",
       [&] { return compile(alloy, with({"-DALLOY_QUICK_ENTRY"}, base)); }},
      {"Alloy translated, no coarsened path", [&] { return compile(single, base); }},
      {"Alloy quick, -Ofc=mid (NVRTC takes --Ofast-compile= or -Ofc=, not -Ofast-compile=)",
       [&] {
         return compile(alloy, with({"-DALLOY_QUICK_ENTRY", "-Ofc=mid"}, base));
       }},
      {"Alloy, without -minimal", [&] { return compile(alloy, without("-minimal")); }},
      {"Alloy, --pch (automatic precompiled headers)",
       [&] { return compile(alloy, with({"--pch"}, base)); }},
      {"Alloy, -dlto + nvJitLink",
       [&] {
         auto o = base;
         o[0] = "--gpu-architecture=sm_90";
         o.push_back("-dlto");
         return compile(alloy, o, true);
       }},
  };
  // NVRTC 13.0 accepts -Ofast-compile={0,min,mid,max} (none helped here, see docs/performance.md);
  // the translated source needs -default-device (user helpers carry no __device__) and C++17.
  compile(hand, {"--gpu-architecture=sm_90"});  // loads NVRTC's builtins once
  compile(alloy, base);
  std::vector<std::vector<double>> times(variants.size()), cpu(variants.size());
  for (int r = 0; r < runs; ++r)
    for (size_t v = 0; v < variants.size(); ++v) {
      times[v].push_back(variants[v].run());
      cpu[v].push_back(last_cpu);
    }
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  std::printf("NVRTC %d.%d, %d runs each (interleaved), median ms (wall, CPU):\n", major, minor,
              runs);
  for (size_t v = 0; v < variants.size(); ++v)
    std::printf("  %8.1f %8.1f  %s\n", median(times[v]), median(cpu[v]), variants[v].name.c_str());
}
