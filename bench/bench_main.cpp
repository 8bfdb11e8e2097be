// Entry point of alloy_bench. Runs every benchmark with a fresh, empty compile cache
// (ALLOY_CACHE_DIR = a new temp folder, removed at exit) so that "cold" means cold and "warm from
// disk" reads what this run wrote; set ALLOY_BENCH_CACHE_DIR to use a folder of your own instead.
// The context printed first names the CPU, the GPU (if any) and NVRTC.
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "alloy/alloy.h"
#include "alloy/cuda.h"
#include "backend/cuda/nvrtc.h"
#include "bench_common.h"

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, family, model;
  while (std::getline(in, line)) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (name.empty() && line.rfind("model name", 0) == 0) name = value();
    if (family.empty() && line.rfind("cpu family", 0) == 0) family = value();
    if (model.empty() && line.rfind("model\t", 0) == 0) model = value();
  }
  return name + " (family " + family + ", model " + model + ")";
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  // A child process started by a benchmark to measure a fresh process (see run_child).
  if (const char* child = std::getenv("ALLOY_BENCH_CHILD"); child && *child) {
    std::string mode = child;
    if (mode == "cpu-warm") return alloy::bench::cpu_warm_child();
    if (mode == "gpu-warm") return alloy::bench::gpu_warm_child();
    if (mode == "gpu-first-burst") return alloy::bench::gpu_first_burst_child();
    std::fprintf(stderr, "unknown ALLOY_BENCH_CHILD mode %s\n", child);
    return 2;
  }
  // Kernel benchmarks time a kernel from its first calls on: the GPU and the CPU compile it fully
  // at once (no quick first compile that a background one replaces mid-measurement) unless asked
  // (BM_CpuJitColdTiered turns the CPU's on for itself).
  ::setenv("ALLOY_CUDA_TIERED", "0", /*overwrite=*/0);
  ::setenv("ALLOY_CPU_TIERED", "0", /*overwrite=*/0);
  fs::path temp_cache;
  if (const char* dir = std::getenv("ALLOY_BENCH_CACHE_DIR"); dir && *dir) {
    ::setenv("ALLOY_CACHE_DIR", dir, 1);
  } else {
    std::string tmpl = (fs::temp_directory_path() / "alloy-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data())) {
      temp_cache = tmpl;
      ::setenv("ALLOY_CACHE_DIR", tmpl.c_str(), 1);
    }
  }

  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("hardware_threads",
                              std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext(
      "gpu", alloy::gpu_available()
                 ? alloy::cuda::device_name() + " (" + alloy::cuda::device_arch() + ")"
                 : "none (" + alloy::cuda::unavailable_reason() + ")");
  benchmark::AddCustomContext(
      "nvrtc", alloy::cuda::nvrtc::available() ? alloy::cuda::nvrtc::library_path() : "not found");
  if (const char* dir = std::getenv("ALLOY_CACHE_DIR")) {
    benchmark::AddCustomContext("alloy_cache_dir", dir);
  }

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  if (!temp_cache.empty()) {
    std::error_code ec;
    fs::remove_all(temp_cache, ec);
  }
  return 0;
}
