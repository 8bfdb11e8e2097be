// The CUDA runtime backend (src/backend/cuda): driver loading, NVRTC compilation and the compile
// cache (these run everywhere NVRTC is installed, GPU or not), and, on a machine with a GPU, the
// allocator, copies, launches and error reporting.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "alloy/cuda.h"
#include "alloy/errors.h"
#include "backend/cuda/allocator.h"
#include "backend/cuda/device.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/jit.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/nvrtc.h"
#include "cache/compile_cache.h"
#include "core/backend.h"

namespace alloy::cuda {
namespace {

#define REQUIRE_NVRTC()                                                            \
  do {                                                                             \
    ASSERT_TRUE(nvrtc::available()) << "NVRTC not found: " << nvrtc::load_error(); \
  } while (0)

#define REQUIRE_GPU(ctx)         \
  Context* ctx = Context::get(); \
  if (!ctx) GTEST_SKIP() << "no CUDA GPU: " << Context::unavailable_reason();

// A unique comment makes a source that no earlier run has cached.
std::string fresh_salt() {
  static std::mt19937_64 rng(std::random_device{}());
  return "// salt " + std::to_string(rng()) + "\n";
}

// y[i] = 2 * x[i] + i over the Metal grid; threads past the grid leave (dispatchThreads). Its
// parameter block has two buffers (the layout make_launch packs).
const char* kScaleSource = R"(#include "cuda/abi.h"
extern "C" __global__ void alloy_entry_0(const __grid_constant__ alloy_cuda_params<2, 0, false, 0> L) {
  const alloy_cuda_head& h = L.head();
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= h.grid[0] || j >= h.grid[1]) return;
  unsigned idx = j * h.grid[0] + i;
  const float* x = (const float*)L.buffer(0);
  float* y = (float*)L.buffer(1);
  y[idx] = 2.0f * x[idx] + (float)idx;
}
)";

// The other hand-written kernels over the same parameter block.
const char* kBoundedSource = R"(#include "cuda/abi.h"
extern "C" __global__ void __launch_bounds__(128) alloy_entry_0(
    const __grid_constant__ alloy_cuda_params<2, 0, false, 0> L) {
  if (threadIdx.x == 0) ((int*)L.buffer(0))[blockIdx.x] = 1;
}
)";
// Each group stages 16K floats (64 KiB) in shared memory and writes them reversed.
const char* kSharedReverseSource = R"(#include "cuda/abi.h"
extern "C" __global__ void alloy_entry_0(const __grid_constant__ alloy_cuda_params<2, 0, false, 0> L) {
  extern __shared__ float tile[];
  const unsigned n = 16384;
  const float* x = (const float*)L.buffer(0) + blockIdx.x * n;
  float* y = (float*)L.buffer(1) + blockIdx.x * n;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) tile[i] = x[i];
  __syncthreads();
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) y[i] = tile[n - 1 - i];
}
)";
const char* kFaultingSource = R"(#include "cuda/abi.h"
extern "C" __global__ void alloy_entry_0(const __grid_constant__ alloy_cuda_params<2, 0, false, 0> L) {
  ((volatile int*)0x10)[threadIdx.x] = 1;
}
)";

KernelSource scale_kernel(std::string salt = "") {
  KernelSource k;
  k.name = "scale_test";
  k.source = salt + kScaleSource;
  k.entries = {"alloy_entry_0"};
  return k;
}

// ---------------------------------------------------------------------------------------------
// Without a GPU (and with one).

TEST(CudaRuntime, MissingDriverLibraryIsReportedCleanly) {
  std::string error;
  auto d = load_driver("libcuda-alloy-test-missing.so.1", &error);
  EXPECT_EQ(d, nullptr);
  EXPECT_NE(error.find("libcuda-alloy-test-missing.so.1"), std::string::npos) << error;
}

TEST(CudaRuntime, AvailabilityIsConsistent) {
  bool available = is_available();
  EXPECT_EQ(available, Context::get() != nullptr);
  EXPECT_EQ(available, gpu_backend() != nullptr);
  if (!available) {
    EXPECT_FALSE(unavailable_reason().empty());
    EXPECT_EQ(device_name(), "");
    EXPECT_EQ(device_arch(), "");
    MemoryStats s = memory_stats();
    EXPECT_EQ(s.active_bytes + s.cached_bytes + s.num_allocs, 0u);
    EXPECT_NO_THROW(empty_cache());
    EXPECT_NO_THROW(synchronize());
  } else {
    EXPECT_EQ(unavailable_reason(), "");
    EXPECT_FALSE(device_name().empty());
    EXPECT_EQ(device_arch().rfind("sm_", 0), 0u) << device_arch();
  }
}

TEST(CudaRuntime, NoDriverOnThisMachineMeansUnavailable) {
  // On machines without libcuda (CI), everything reports "unavailable" instead of failing.
  std::string error;
  auto d = load_driver("libcuda.so.1", &error);
  if (d) GTEST_SKIP() << "a CUDA driver is installed here";
  EXPECT_FALSE(is_available());
  EXPECT_NE(unavailable_reason().find("libcuda.so.1"), std::string::npos) << unavailable_reason();
}

TEST(CudaRuntime, NvrtcIsFoundAndReportsItsVersion) {
  REQUIRE_NVRTC();
  nvrtc::Version v = nvrtc::version();
  EXPECT_GE(v.major, 11);
  EXPECT_FALSE(nvrtc::library_path().empty());
  EXPECT_EQ(nvrtc::compiler_id().rfind("nvrtc:", 0), 0u) << nvrtc::compiler_id();
  const auto& archs = nvrtc::supported_archs();
  ASSERT_FALSE(archs.empty());
  EXPECT_TRUE(std::is_sorted(archs.begin(), archs.end()));
}

TEST(CudaRuntime, TargetIsCubinForKnownArchitecturesElsePtx) {
  REQUIRE_NVRTC();
  nvrtc::Target t = nvrtc::target_for(9, 0);
  EXPECT_EQ(t.arch, "sm_90");
  EXPECT_TRUE(t.cubin);
  // A device newer than this NVRTC: PTX of the newest architecture NVRTC knows.
  nvrtc::Target future = nvrtc::target_for(99, 9);
  EXPECT_FALSE(future.cubin);
  EXPECT_EQ(future.arch, "compute_" + std::to_string(nvrtc::supported_archs().back()));
  EXPECT_THROW(nvrtc::target_for(1, 0), Error);
  EXPECT_EQ(arch_name(9, 0), "sm_90");
  EXPECT_EQ(arch_name(12, 1), "sm_121");
}

TEST(CudaRuntime, CompilesAbiKernelToSm90Cubin) {
  REQUIRE_NVRTC();
  KernelSource k = scale_kernel(fresh_salt());
  auto t0 = std::chrono::steady_clock::now();
  CompiledImage image = compile(k, {"sm_90", true});
  double cold_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(image.from_disk);
  const auto& b = image.bytes;
  ASSERT_GE(b.size(), 64u);
  ASSERT_EQ(std::memcmp(b.data(),
                        "\x7f"
                        "ELF",
                        4),
            0)
      << "not an ELF file";
  uint16_t machine = 0;
  uint32_t flags = 0;
  std::memcpy(&machine, b.data() + 18, 2);
  std::memcpy(&flags, b.data() + 48, 4);
  EXPECT_EQ(machine, 190) << "EM_CUDA";
  // The cubin's architecture: bits 8..15 of e_flags since ELF ABI version 8, bits 0..7 before.
  unsigned sm = static_cast<unsigned char>(b[8]) >= 8 ? (flags >> 8) & 0xff : flags & 0xff;
  EXPECT_EQ(sm, 90u);
  std::printf("[ NVRTC    ] cold compile of a small kernel: %.1f ms (%zu byte cubin)\n", cold_ms,
              b.size());

  // The second compile comes from the disk cache (when the cache has a folder), byte-identical.
  if (cache::CompileCache::global().has_disk()) {
    t0 = std::chrono::steady_clock::now();
    CompiledImage again = compile(k, {"sm_90", true});
    double warm_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(again.from_disk);
    EXPECT_EQ(again.bytes, image.bytes);
    EXPECT_EQ(again.key, image.key);
    std::printf("[ NVRTC    ] the same kernel from the disk cache: %.3f ms\n", warm_ms);
  }
}

TEST(CudaRuntime, CompilesToPtxForNewerDevices) {
  REQUIRE_NVRTC();
  KernelSource k = scale_kernel(fresh_salt());
  CompiledImage image = compile(k, {"compute_90", false});
  std::string ptx(image.bytes.begin(), image.bytes.end());
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(ptx.find("alloy_entry_0"), std::string::npos);
  EXPECT_EQ(image.bytes.back(), '\0') << "cuModuleLoadData needs NUL-terminated PTX";
}

TEST(CudaRuntime, CompileErrorCarriesNvrtcLogWithLine) {
  REQUIRE_NVRTC();
  KernelSource k;
  k.name = "broken_kernel";
  k.program_name = "broken.cu";
  k.source = fresh_salt() +                                            // line 1
             "extern \"C\" __global__ void alloy_entry_0(int* p) {\n"  // line 2
             "  p[threadIdx.x] = undeclared_name;\n"                   // line 3
             "}\n";
  k.entries = {"alloy_entry_0"};
  try {
    compile(k, {"sm_90", true});
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.kernel(), "broken_kernel");
    EXPECT_NE(e.raw_log().find("broken.cu(3): error"), std::string::npos) << e.raw_log();
    EXPECT_NE(e.raw_log().find("undeclared_name"), std::string::npos) << e.raw_log();
    EXPECT_NE(std::string(e.what()).find("broken_kernel"), std::string::npos) << e.what();
  }
}

TEST(CudaRuntime, NvrtcCompileFailureHasLog) {
  REQUIRE_NVRTC();
  try {
    nvrtc::compile("int x = ;\n", "bad.cu", {}, {"--gpu-architecture=sm_90"}, true);
    FAIL() << "expected a CompileFailure";
  } catch (const nvrtc::CompileFailure& e) {
    EXPECT_NE(e.log().find("bad.cu(1): error"), std::string::npos) << e.log();
  }
}

TEST(CudaRuntime, PreludeHeadersAreInMemory) {
  // "cuda/abi.h" is found without a file on disk or an include path: it comes from the embedded
  // prelude. Without the prelude, the include fails.
  REQUIRE_NVRTC();
  KernelSource k = scale_kernel(fresh_salt());
  EXPECT_NO_THROW(compile(k, {"sm_90", true}));
  EXPECT_THROW(nvrtc::compile(k.source, "k.cu", {}, {"--gpu-architecture=sm_90"}, true),
               nvrtc::CompileFailure);
}

TEST(CudaRuntime, CacheKeyCoversArchOptionsAndSourceButNotName) {
  REQUIRE_NVRTC();
  KernelSource k = scale_kernel();
  std::string base = cache_key(k, {"sm_90", true});
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(base, cache_key(k, {"sm_90", true}));
  EXPECT_NE(base, cache_key(k, {"sm_80", true}));
  EXPECT_NE(base, cache_key(k, {"compute_90", false}));
  KernelSource opt = k;
  opt.options = {"--use_fast_math"};
  EXPECT_NE(base, cache_key(opt, {"sm_90", true}));
  KernelSource std20 = k;
  std20.options = {"--std=c++20"};  // replaces the base --std=c++17
  EXPECT_NE(base, cache_key(std20, {"sm_90", true}));
  EXPECT_NO_THROW(compile(std20, {"sm_90", true}));
  KernelSource src = k;
  src.source += "\n";
  EXPECT_NE(base, cache_key(src, {"sm_90", true}));
  KernelSource renamed = k;
  renamed.name = "another_name";  // MLX bug #3832: the name alone must not select a binary
  EXPECT_EQ(base, cache_key(renamed, {"sm_90", true}));
}

TEST(CudaRuntime, AllocatorRoundsSizes) {
  EXPECT_EQ(Allocator::round_size(0), 512u);
  EXPECT_EQ(Allocator::round_size(1), 512u);
  EXPECT_EQ(Allocator::round_size(513), 1024u);
  EXPECT_EQ(Allocator::round_size(3000), 4096u);
  EXPECT_EQ(Allocator::round_size(1 << 20), size_t(1) << 20);
  EXPECT_EQ(Allocator::round_size((1 << 20) + 1), size_t(2) << 20);
  EXPECT_EQ(Allocator::round_size((5 << 20) + 7), size_t(6) << 20);
}

// ---------------------------------------------------------------------------------------------
// On a GPU.

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(CudaRuntime, AllocatorReusesFreedBlocksAndCounts) {
  REQUIRE_GPU(ctx);
  Allocator& a = ctx->allocator();
  a.empty_cache();
  MemoryStats s0 = a.stats();
  void* p = a.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  MemoryStats s1 = a.stats();
  EXPECT_EQ(s1.active_bytes, s0.active_bytes + 1024);
  EXPECT_EQ(s1.num_allocs, s0.num_allocs + 1);
  a.free(p);
  MemoryStats s2 = a.stats();
  EXPECT_EQ(s2.active_bytes, s0.active_bytes);
  EXPECT_EQ(s2.cached_bytes, s0.cached_bytes + 1024);
  // Same bucket: the freed block comes back, no new driver allocation.
  void* q = a.allocate(900);
  EXPECT_EQ(q, p);
  MemoryStats s3 = a.stats();
  EXPECT_EQ(s3.num_cache_hits, s2.num_cache_hits + 1);
  EXPECT_EQ(s3.num_allocs, s2.num_allocs);
  EXPECT_GE(s3.peak_active_bytes, s3.active_bytes);
  // Large blocks: best fit within 1/8.
  void* big = a.allocate(10 << 20);
  a.free(big);
  void* big2 = a.allocate((9 << 20) + 1);  // rounds to 10 MiB: reuses the block
  EXPECT_EQ(big2, big);
  a.free(big2);
  void* big3 = a.allocate(3 << 20);  // 4 MiB: the 10 MiB block is too large to waste
  EXPECT_NE(big3, big);
  a.free(big3);
  a.free(q);
  // Through the backend: a Buffer returns its block when the last reference goes.
  {
    auto buf = gpu_backend()->allocate(4096);
    EXPECT_EQ(buf->nbytes, 4096u);
    EXPECT_EQ(memory_stats().active_bytes, s0.active_bytes + 4096);
  }
  EXPECT_EQ(memory_stats().active_bytes, s0.active_bytes);
  empty_cache();
  MemoryStats s4 = memory_stats();
  EXPECT_EQ(s4.cached_bytes, 0u);
  EXPECT_GT(s4.num_frees, s0.num_frees);
}

// The allocator's lock is a spin lock and the driver is called without it (a miss, empty_cache):
// threads allocating and freeing random sizes while another empties the cache and reads the
// statistics never get one block twice, and the statistics add up afterwards.
TEST(CudaRuntime, AllocatorStaysExactAcrossThreads) {
  REQUIRE_GPU(ctx);
  Allocator& a = ctx->allocator();
  a.empty_cache();
  MemoryStats s0 = a.stats();
  constexpr int kThreads = 4, kRounds = 300;
  std::mutex held_mu;
  std::set<void*> held;  // blocks handed out and not freed yet, over all threads
  bool duplicate = false;
  std::atomic<bool> stop{false};
  std::atomic<size_t> allocations{0};
  auto worker = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> small(1, 1 << 20), large((1 << 20) + 1, 9 << 20);
    std::vector<std::pair<void*, size_t>> mine;
    for (int r = 0; r < kRounds; ++r) {
      if (mine.empty() || rng() % 3) {
        size_t n = rng() % 8 ? small(rng) : large(rng);
        size_t block = 0;
        void* p = a.allocate(n, &block);
        allocations++;
        EXPECT_GE(block, n);
        std::lock_guard lock(held_mu);
        duplicate |= !held.insert(p).second;
        mine.emplace_back(p, block);
      } else {
        size_t i = rng() % mine.size();
        {
          std::lock_guard lock(held_mu);
          held.erase(mine[i].first);
        }
        a.free(mine[i].first, mine[i].second);
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    for (auto& [p, block] : mine) {
      {
        std::lock_guard lock(held_mu);
        held.erase(p);
      }
      a.free(p, block);
    }
  };
  std::thread emptier([&] {
    while (!stop) {
      a.empty_cache();
      MemoryStats s = a.stats();
      EXPECT_LE(s.active_bytes, s.peak_active_bytes);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  std::random_device seeds;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, seeds());
  for (auto& t : threads) t.join();
  stop = true;
  emptier.join();
  EXPECT_FALSE(duplicate);
  MemoryStats s1 = a.stats();
  EXPECT_EQ(s1.active_bytes, s0.active_bytes);
  EXPECT_EQ((s1.num_allocs - s0.num_allocs) + (s1.num_cache_hits - s0.num_cache_hits),
            allocations.load());
  EXPECT_GT(s1.peak_active_bytes, s0.active_bytes);
  a.empty_cache();
  MemoryStats s2 = a.stats();
  EXPECT_EQ(s2.cached_bytes, 0u);
  // Every block from the driver went back to it (none lost between the cache and the driver).
  EXPECT_EQ(s2.num_frees - s0.num_frees, s2.num_allocs - s0.num_allocs);
}

TEST(CudaRuntime, CopiesRoundTripAndFillsPatterns) {
  REQUIRE_GPU(ctx);
  Backend* be = gpu_backend();
  const size_t n = 100003;  // not a multiple of anything convenient
  auto host = random_floats(n, 1);
  auto a = be->allocate(n * 4);
  auto b = be->allocate(n * 4);
  be->copy_to_device(a->ptr, host.data(), n * 4);
  be->copy_device(b->ptr, a->ptr, n * 4);
  std::vector<float> back(n, std::nanf(""));
  be->copy_to_host(back.data(), b->ptr, n * 4);
  EXPECT_EQ(std::memcmp(back.data(), host.data(), n * 4), 0);

  std::vector<uint8_t> raw(n * 4, 0xAB);
  be->fill(a->ptr, n * 4, 0x5Au, 1);
  be->copy_to_host(raw.data(), a->ptr, n * 4);
  for (size_t i = 0; i < raw.size(); ++i) ASSERT_EQ(raw[i], 0x5A) << i;
  std::vector<uint16_t> r16(n * 2, 0);
  be->fill(a->ptr, n * 4, 0xBEEFu, 2);
  be->copy_to_host(r16.data(), a->ptr, n * 4);
  for (size_t i = 0; i < r16.size(); ++i) ASSERT_EQ(r16[i], 0xBEEF) << i;
  std::vector<uint32_t> r32(n, 0);
  be->fill(a->ptr, n * 4, 0x7FC00001u, 4);
  be->copy_to_host(r32.data(), a->ptr, n * 4);
  for (size_t i = 0; i < r32.size(); ++i) ASSERT_EQ(r32[i], 0x7FC00001u) << i;
  EXPECT_THROW(be->fill(a->ptr, 6, 0, 4), std::invalid_argument);
  EXPECT_THROW(be->fill(a->ptr, 8, 0, 3), std::invalid_argument);
}

// Launch configuration as the kernel layer computes it (Metal dispatchThreads).
// The hand-written kernels' parameter block: two buffers.
ParamBlock make_launch(unsigned gx, unsigned gy, unsigned tx, unsigned ty) {
  ParamBlock L(alloy_cuda_layout(2, 0, false, 0));
  L.head.grid[0] = gx;
  L.head.grid[1] = gy;
  L.head.grid[2] = 1;
  L.head.threadgroup[0] = tx;
  L.head.threadgroup[1] = ty;
  L.head.threadgroup[2] = 1;
  L.head.groups[0] = (gx + tx - 1) / tx;
  L.head.groups[1] = (gy + ty - 1) / ty;
  L.head.groups[2] = 1;
  return L;
}

// The hand-written kernels compile (NVRTC for sm_90: no GPU needed) and declare the parameter
// block make_launch packs, the one the GPU tests launch them with.
TEST(CudaRuntime, HandWrittenKernelsDeclareTheBlockTheyAreLaunchedWith) {
  if (!nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  const std::string decl = ".param .align 16 .b8 alloy_entry_0_param_0[" +
                           std::to_string(make_launch(1, 1, 1, 1).layout.size) + "]";
  for (const char* src : {kScaleSource, kBoundedSource, kSharedReverseSource, kFaultingSource}) {
    KernelSource k;
    k.name = "hand_written";
    k.source = src;
    k.entries = {"alloy_entry_0"};
    auto img = compile(k, {"sm_90", false});
    EXPECT_NE(std::string(img.bytes.data()).find(decl), std::string::npos) << src;
  }
}

TEST(CudaRuntime, LaunchesHandWrittenKernelOverAbiStruct) {
  REQUIRE_GPU(ctx);
  Backend* be = gpu_backend();
  auto module = load(*ctx, scale_kernel());
  const Function& fn = module->function(0);
  EXPECT_GE(fn.max_threads, 256);

  // 2-D grid with partial groups on both edges: 1000 x 7 threads in 64 x 4 groups.
  const unsigned gx = 1000, gy = 7;
  const size_t n = size_t(gx) * gy;
  auto x = random_floats(n, 2);
  auto bx = be->allocate(n * 4);
  auto by = be->allocate((n + 64) * 4);  // room past the end to catch threads outside the grid
  be->copy_to_device(bx->ptr, x.data(), n * 4);
  be->fill(by->ptr, (n + 64) * 4, 0x7FC00000u, 4);  // NaN poison
  ParamBlock L = make_launch(gx, gy, 64, 4);
  L.set_buffer(0, bx->ptr);
  L.set_buffer(1, by->ptr);
  L.head.num_buffers = 2;
  launch(*ctx, fn, L);
  std::vector<float> y(n + 64);
  be->copy_to_host(y.data(), by->ptr, (n + 64) * 4);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(y[i], 2.0f * x[i] + static_cast<float>(i)) << "element " << i;
  }
  for (size_t i = n; i < n + 64; ++i) ASSERT_TRUE(std::isnan(y[i])) << "written past the grid";

  // The memory level of the cache hands back the same module.
  EXPECT_EQ(load(*ctx, scale_kernel()).get(), module.get());
  // A grid with no threads runs nothing and is no error.
  ParamBlock empty = make_launch(0, 1, 64, 1);
  EXPECT_NO_THROW(launch(*ctx, fn, empty));
  EXPECT_NO_THROW(ctx->synchronize());
}

TEST(CudaRuntime, DynamicSharedMemoryPast48KiB) {
  REQUIRE_GPU(ctx);
  if (ctx->info().max_shared_per_block_optin < 100 * 1024) GTEST_SKIP() << "small shared memory";
  Backend* be = gpu_backend();
  KernelSource k;
  k.name = "shared_reverse";
  // Each group stages 16K floats (64 KiB) in shared memory and writes them reversed.
  k.source = kSharedReverseSource;
  k.entries = {"alloy_entry_0"};
  auto module = load(*ctx, k);
  const size_t n = 16384 * 3;
  auto x = random_floats(n, 3);
  auto bx = be->allocate(n * 4);
  auto by = be->allocate(n * 4);
  be->copy_to_device(bx->ptr, x.data(), n * 4);
  be->fill(by->ptr, n * 4, 0x7FC00000u, 4);
  ParamBlock L = make_launch(3 * 256, 1, 256, 1);
  L.set_buffer(0, bx->ptr);
  L.set_buffer(1, by->ptr);
  launch(*ctx, module->function(0), L, 16384 * 4);
  std::vector<float> y(n);
  be->copy_to_host(y.data(), by->ptr, n * 4);
  for (size_t g = 0; g < 3; ++g) {
    for (size_t i = 0; i < 16384; ++i) {
      ASSERT_EQ(y[g * 16384 + i], x[g * 16384 + 16383 - i]) << g << " " << i;
    }
  }
  // More than the device has: a clear error, before launching.
  EXPECT_THROW(launch(*ctx, module->function(0), L, ctx->info().max_shared_per_block_optin + 1),
               std::invalid_argument);
}

TEST(CudaRuntime, ThreadgroupAboveFunctionMaximumThrowsInvalidArgument) {
  REQUIRE_GPU(ctx);
  KernelSource k;
  k.name = "bounded_kernel";
  k.source = kBoundedSource;
  k.entries = {"alloy_entry_0"};
  auto module = load(*ctx, k);
  const Function& fn = module->function(0);
  EXPECT_EQ(fn.max_threads, 128);
  auto buf = gpu_backend()->allocate(64);
  ParamBlock L = make_launch(256, 1, 256, 1);
  L.set_buffer(0, buf->ptr);
  try {
    launch(*ctx, fn, L);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "[metal_kernel] threadgroup of 256 threads exceeds the maximum of 128 for kernel "
                 "bounded_kernel");
  }
  L = make_launch(256, 1, 128, 1);
  L.set_buffer(0, buf->ptr);
  EXPECT_NO_THROW(launch(*ctx, fn, L));
  // CUDA cannot launch a threadgroup deeper than 64.
  ParamBlock deep = make_launch(1, 1, 1, 1);
  deep.head.grid[2] = 128;
  deep.head.threadgroup[2] = 128;
  EXPECT_THROW(launch(*ctx, fn, deep), NotSupported);
  EXPECT_NO_THROW(ctx->synchronize());
}

TEST(CudaRuntime, CachedLaunchOverheadAndWarmLoad) {
  REQUIRE_GPU(ctx);
  auto module = load(*ctx, scale_kernel());
  const Function& fn = module->function(0);
  Backend* be = gpu_backend();
  auto bx = be->allocate(4096);
  auto by = be->allocate(4096);
  ParamBlock L = make_launch(1024, 1, 256, 1);
  L.set_buffer(0, bx->ptr);
  L.set_buffer(1, by->ptr);
  // Host time per launch: batches shorter than the launch queue (so the GPU never throttles the
  // host), synchronized between batches; the median batch.
  auto per_launch_us = [&](const std::function<void()>& one) {
    std::vector<double> batches;
    for (int rep = 0; rep < 41; ++rep) {
      ctx->synchronize();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 128; ++i) one();
      batches.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          128);
    }
    ctx->synchronize();
    std::sort(batches.begin(), batches.end());
    return batches[batches.size() / 2];
  };
  double us = per_launch_us([&] { launch(*ctx, fn, L); });
  // The driver's own cost, for comparison: what launch() adds on top is Alloy's overhead.
  void* params[] = {const_cast<void*>(L.bytes())};
  double raw_us = per_launch_us([&] {
    ctx->driver().cuLaunchKernel(fn.handle, L.head.groups[0], 1, 1, L.head.threadgroup[0], 1, 1, 0,
                                 ctx->stream(), params, nullptr);
  });
  // And with one 8-byte parameter instead of the 80-byte parameter block.
  KernelSource small;
  small.name = "small_params";
  small.source = "extern \"C\" __global__ void alloy_entry_0(float* y) { y[threadIdx.x] = 1.0f; }";
  small.entries = {"alloy_entry_0"};
  auto small_module = load(*ctx, small);
  void* y = by->ptr;
  void* small_params[] = {&y};
  double small_us = per_launch_us([&] {
    ctx->driver().cuLaunchKernel(small_module->function(0).handle, 4, 1, 1, 256, 1, 1, 0,
                                 ctx->stream(), small_params, nullptr);
  });
  std::printf(
      "[ CUDA     ] host time per cached launch: %.2f us (cuLaunchKernel alone: %.2f us; "
      "with an 8-byte parameter: %.2f us)\n",
      us, raw_us, small_us);
  EXPECT_LT(us, 20.0);  // the target is <= 2 us; this only catches pathologies

  // Warm start from disk: a fresh process would find the cubin on disk, not in memory.
  if (cache::CompileCache::global().has_disk()) {
    cache::CompileCache::global().clear_memory();
    auto t1 = std::chrono::steady_clock::now();
    auto again = load(*ctx, scale_kernel());
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    EXPECT_TRUE(again->from_disk);
    std::printf("[ CUDA     ] warm load from the disk cache: %.3f ms\n", ms);
  }
}

TEST(CudaRuntime, AsynchronousFaultNamesTheKernel) {
  REQUIRE_GPU(ctx);
  // A fault leaves the CUDA context unusable for the rest of the process, so it happens in a
  // child process (gtest re-runs this test there).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Context* c = Context::get();
        KernelSource k;
        k.name = "faulting_kernel";
        k.source = kFaultingSource;
        k.entries = {"alloy_entry_0"};
        auto m = load(*c, k);
        ParamBlock L = make_launch(32, 1, 32, 1);
        launch(*c, m->function(0), L);
        try {
          c->synchronize();
          std::fprintf(stderr, "no error surfaced\n");
          std::_Exit(1);
        } catch (const Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          if (e.kernel() != "faulting_kernel") std::_Exit(2);
        }
        // Later calls report the earlier error instead of failing obscurely.
        try {
          c->synchronize();
          std::_Exit(3);
        } catch (const Error& e) {
          if (std::string(e.what()).find("faulting_kernel") == std::string::npos) std::_Exit(4);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "faulting_kernel");
}

}  // namespace
}  // namespace alloy::cuda
