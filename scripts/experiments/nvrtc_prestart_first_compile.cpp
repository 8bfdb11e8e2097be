// A worker's first real compiles, with the worker started ahead and warmed (nvrtc::prestart_workers
// with the runtime's warm-up, cuda::first_compile_warm_up) against started cold at the compile,
// as before (docs/nvrtc-workers.md, "Workers started ahead"). One process per run, one worker
// (ALLOY_NVRTC_WORKERS=1), full compiles (ALLOY_CUDA_TIERED=0: the warm-up then uses the full
// compile's options, as kernel::compile_call_cubin does), cubins for sm_90 (no GPU needed). The
// runtime's path: compile 1 of a burst runs in this process, compiles 2 and 3 (this process's slot
// held) go to the worker, 2 with the prelude core's PCH asked for, 3 with the whole selection's
// (nvrtc::auto_pch). Prints each compile's wall ms, then the warmed worker's memory (Rss, Pss from
// /proc/<pid>/smaps_rollup), its CPU time so far, and its PCH folder's size. Build (after the
// library) and run:
//
//   g++ -std=c++20 -O2 -Isrc -Iinclude scripts/experiments/nvrtc_prestart_first_compile.cpp \
//       build/liballoy.a -lfmt -ltbb -lboost_context -lssl -lcrypto -ldl -lpthread \
//       -o build/nvrtc_prestart_first_compile
//   for i in 1 2 3 4 5; do build/nvrtc_prestart_first_compile prestart; \
//       build/nvrtc_prestart_first_compile lazy; done
//   build/nvrtc_prestart_first_compile idle   # a warmed worker that got no compile
//
// (The binary sits in build/, beside alloy-nvrtc-worker, where the runtime finds it.)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "alloy/alloy.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/tiered.h"
#include "kernel/custom_kernel.h"

using namespace alloy;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A kernel of the benchmarks' shape (BM_ParallelCompileMetalKernel20), unique to this run.
double compile(int k, uint64_t tag) {
  Array x = Array::from_doubles({1, 2, 3, 4}, {4}, float32);
  KernelCall call;
  call.output_shapes = {{4096}};
  call.output_dtypes = {float32};
  call.grid = {4096, 1, 1};
  call.threadgroup = {256, 1, 1};
  call.device = Device::cpu();
  MetalKernel m =
      metal_kernel("scaled_" + std::to_string(k), {"inp"}, {"out"},
                   "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * " +
                       std::to_string(k + 1) + ".0f + 0.25f;  // " + std::to_string(tag) + "\n");
  auto t0 = std::chrono::steady_clock::now();
  std::string why = kernel::compile_call_cubin(m, {x}, call, "sm_90");
  if (!why.empty()) std::fprintf(stderr, "not compiled: %s\n", why.c_str());
  return ms_since(t0);
}

std::string field(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "prestart";
  ::setenv("ALLOY_NVRTC_WORKERS", "1", 1);
  ::setenv("ALLOY_CUDA_TIERED", "0", 1);
  const uint64_t tag = std::random_device{}();
  auto t0 = std::chrono::steady_clock::now();
  if (mode == "prestart" || mode == "idle") {
    cuda::nvrtc::prestart_workers(cuda::first_compile_warm_up(cuda::nvrtc::target_for(9, 0)));
    cuda::nvrtc::testing::wait_for_prestart(std::chrono::minutes(2));
    std::printf("%-8s warm after %6.1f ms", mode.c_str(), ms_since(t0));
  } else {
    std::printf("%-8s %22s", mode.c_str(), "");
  }
  // A pause (a model's weights load): the worker idles.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (mode != "idle") {  // idle: the warmed worker as it is when no compile came
    double c1 = compile(1, tag);
    cuda::nvrtc::testing::hold_in_process_slot(true);
    double c2 = compile(2, tag);
    double c3 = compile(3, tag);
    cuda::nvrtc::testing::hold_in_process_slot(false);
    std::printf("  in process %6.1f  worker: 1st %6.1f  2nd %6.1f ms", c1, c2, c3);
  }
  auto s = cuda::nvrtc::worker_stats();
  if (!s.live_pids.empty()) {
    const std::string proc = "/proc/" + std::to_string(s.live_pids[0]);
    std::ifstream stat(proc + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    // utime and stime: fields 14 and 15, after the ")" that ends the command name.
    unsigned long long utime = 0, stime = 0;
    std::sscanf(text.c_str() + text.rfind(')') + 2,
                "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime);
    uintmax_t pch = 0;
    std::error_code ec;
    for (auto& e : std::filesystem::recursive_directory_iterator(
             s.pch_dir + "/" + std::to_string(s.live_pids[0]), ec))
      if (e.is_regular_file()) pch += e.file_size();
    std::printf(
        "  | worker Rss%s Pss%s cpu %.0f ms, PCH %.1f MB (%ld compiles)",
        field(proc + "/smaps_rollup", "Rss:").c_str(),
        field(proc + "/smaps_rollup", "Pss:").c_str(),
        1e3 * static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK)),
        pch / 1e6, s.worker_compiles);
  }
  std::printf("\n");
  return 0;
}
