// The CUDA backend's quick first compile of coarsened entries (src/backend/cuda/tiered.h): which
// translations get one, that it compiles with NVRTC wherever the full entry does (sm_90, no GPU
// needed) with the body once instead of coarsen + 1 times, and, on a GPU, that a kernel's first
// call (quick code) and later calls (the full code, once the background compile is loaded) give
// the reference's results.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "alloy/alloy.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/tiered.h"
#include "conformance/harness.h"
#include "core/backend.h"
#include "kernel/custom_kernel.h"
#include "kernel/program.h"

namespace {

using namespace alloy;

KernelCall call_1d(int n, std::vector<Dtype> out_dtypes, int outputs = 1) {
  KernelCall c;
  for (int i = 0; i < outputs; ++i) c.output_shapes.push_back({n});
  c.output_dtypes = std::move(out_dtypes);
  c.grid = {n, 1, 1};
  c.threadgroup = {256, 1, 1};
  return c;
}

CompileRequest request(const MetalKernel& k, const std::vector<Array>& inputs,
                       const KernelCall& call) {
  kernel::SourceMap map;
  msl::Translation tr = kernel::call_gpu_translation(k, inputs, call, &map);
  return kernel::compile_request(tr, map, "safe");
}

// Kernels whose threads share nothing (so their CUDA entry runs 4 groups per block), in the
// shapes a user writes: several buffers, a constant scalar, vectors, a helper in the header,
// a template parameter, an integer output.
struct Case {
  const char* name;
  std::vector<const char*> inputs;
  std::vector<const char*> outputs;
  const char* source;
  const char* header = "";
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"expsin",
       {"inp"},
       {"out"},
       "uint i = thread_position_in_grid.x;\nout[i] = exp(sin(inp[i]));\n"},
      {"axpy",
       {"x", "y", "alpha"},
       {"out"},
       "uint i = thread_position_in_grid.x;\nout[i] = alpha[0] * x[i] + y[i];\n"},
      {"vec",
       {"inp"},
       {"out"},
       "uint2 p = uint2(thread_position_in_grid.xy);\nfloat4 v = float4(inp[p.x]);\n"
       "v = v * float4(1, 2, 3, 4) + 0.5f;\nout[p.x] = dot(v, float4(1.0f));\n"},
      {"helper",
       {"inp"},
       {"out"},
       "uint i = thread_position_in_grid.x;\nout[i] = twice(inp[i]);\n",
       "template <typename T> T twice(T v) { return v + v; }\n"},
      {"two_outputs",
       {"inp"},
       {"lo", "hi"},
       "uint i = thread_position_in_grid.x;\nlo[i] = floor(inp[i]);\nhi[i] = ceil(inp[i]);\n"},
      // An attribute that needs the group's size: the quick entry fills a thread_ids.
      {"group_size",
       {"inp"},
       {"out"},
       "uint i = thread_position_in_grid.x;\n"
       "out[i] = inp[i] * float(threads_per_threadgroup.x - thread_position_in_threadgroup.x);\n"},
  };
  return c;
}

std::vector<Array> inputs_for(const Case& c, int n) {
  std::vector<Array> in;
  for (const char* name : c.inputs) {
    bool scalar = std::string(name) == "alpha";
    in.push_back(Array::from_doubles(conformance::random_values(scalar ? 1 : n, -2, 2, 7),
                                     {scalar ? 1 : n}, float32, Device::cpu()));
  }
  return in;
}

TEST(CudaTiered, QuickSourceOnlyForCoarsenedEntries) {
  const int n = 1 << 20;
  for (const Case& c : cases()) {
    auto k = metal_kernel(c.name, {c.inputs.begin(), c.inputs.end()},
                          {c.outputs.begin(), c.outputs.end()}, c.source, c.header);
    CompileRequest r = request(k, inputs_for(c, n),
                               call_1d(n, std::vector<Dtype>(c.outputs.size(), float32),
                                       static_cast<int>(c.outputs.size())));
    ASSERT_EQ(r.entries.size(), 1u) << c.name;
    EXPECT_EQ(r.entries[0].coarsen, 4) << c.name;
    auto quick = cuda::quick_kernel_source(r);
    ASSERT_TRUE(quick.has_value()) << c.name;
    cuda::KernelSource full = cuda::kernel_source(r);
    EXPECT_EQ(quick->source, full.source) << c.name;  // the same text, one define more
    std::vector<std::string> want = full.options;
    want.push_back("-DALLOY_QUICK_ENTRY");
    want.push_back("--ptxas-options=-O0");  // unoptimised, registers capped: any block launches
    want.push_back("-maxrregcount=64");
    // NVVM optimises it (ALLOY_CUDA_QUICK_NVVM_O0=1 only: unoptimised NVVM fuses no
    // multiply-adds, and the first call's results would differ from later calls').
    EXPECT_EQ(quick->options, want) << c.name;
    // The quick entry runs one group per block, launched so (Function::one_group_per_block).
    // A kernel that reads only attributes without group sizes takes them from CUDA's ids
    // (cuda_grid_ids; its quick compile then leaves out thread_ids), the others fill thread_ids.
    const bool grid_ids = std::string(c.name) != "group_size";
    EXPECT_NE(
        full.source.find(
            grid_ids
                ? "#ifdef ALLOY_QUICK_ENTRY\n  const ::alloy_entry::cuda_grid_ids t{L.head()};\n"
                : "#ifdef ALLOY_QUICK_ENTRY\n  const ::alloy_entry::thread_ids t = "
                  "::alloy_entry::cuda_ids_at(L, blockIdx.x, false);\n"),
        std::string::npos)
        << full.source;
    EXPECT_EQ(full.source.find("#define ALLOY_ENTRY_GRID_IDS 1\n") != std::string::npos, grid_ids)
        << c.name;
    EXPECT_NE(full.source.find("#else\n  const unsigned alloy_nb = gridDim.x;\n  if "
                               "(::alloy_entry::cuda_groups_whole"),
              std::string::npos)
        << full.source;
    EXPECT_TRUE(quick->one_group_per_block) << c.name;
    EXPECT_FALSE(full.one_group_per_block) << c.name;
  }
  // Threads that share threadgroup memory: one group per block, nothing to make quick.
  auto shared = metal_kernel("tg", {"inp"}, {"out"},
                             "threadgroup float t[256];\n"
                             "uint l = thread_position_in_threadgroup.x;\n"
                             "t[l] = inp[thread_position_in_grid.x];\n"
                             "threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                             "out[thread_position_in_grid.x] = t[255 - l];\n");
  Array x = Array::from_doubles(conformance::random_values(1024, -1, 1, 3), {1024}, float32,
                                Device::cpu());
  CompileRequest r = request(shared, {x}, call_1d(1024, {float32}));
  EXPECT_EQ(r.entries.at(0).coarsen, 1);
  EXPECT_FALSE(cuda::quick_kernel_source(r).has_value());
}

// Both compiles succeed for sm_90 cubins; the quick one's entry holds the body once (its PTX is
// smaller) and keeps the entry's name.
TEST(CudaTiered, QuickEntryCompilesWithNvrtcAndIsSmaller) {
  if (!cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  const int n = 1 << 20;
  for (const Case& c : cases()) {
    auto k = metal_kernel(c.name, {c.inputs.begin(), c.inputs.end()},
                          {c.outputs.begin(), c.outputs.end()}, c.source, c.header);
    CompileRequest r = request(k, inputs_for(c, n),
                               call_1d(n, std::vector<Dtype>(c.outputs.size(), float32),
                                       static_cast<int>(c.outputs.size())));
    auto quick = cuda::quick_kernel_source(r);
    ASSERT_TRUE(quick.has_value()) << c.name;
    std::string full_cubin, quick_cubin;
    try {
      auto f = cuda::compile(cuda::kernel_source(r), {"sm_90", true});
      auto q = cuda::compile(*quick, {"sm_90", true});
      full_cubin.assign(f.bytes.begin(), f.bytes.end());
      quick_cubin.assign(q.bytes.begin(), q.bytes.end());
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.name << ": " << e.what();
      continue;
    }
    EXPECT_EQ(quick_cubin.rfind("\x7f"
                                "ELF",
                                0),
              0u)
        << c.name;
    EXPECT_NE(quick_cubin.find("alloy_entry_0"), std::string::npos) << c.name;
    // The body once: smaller PTX (the cubin is not a measure: ptxas does not optimise the quick
    // compile, whose code is then larger per instruction of PTX).
    auto full_ptx = cuda::compile(cuda::kernel_source(r), {"sm_90", false});
    auto quick_ptx = cuda::compile(*quick, {"sm_90", false});
    EXPECT_LT(quick_ptx.bytes.size(), full_ptx.bytes.size()) << c.name;
    // The opt-in NVVM -O0 reaches NVVM: larger PTX (locals in local memory, calls not inlined).
    cuda::KernelSource quick_unoptimised = *quick;
    quick_unoptimised.options.push_back(std::string(cuda::nvrtc::kNvvmUnoptimised));
    auto unoptimised_ptx = cuda::compile(quick_unoptimised, {"sm_90", false});
    EXPECT_GT(unoptimised_ptx.bytes.size(), quick_ptx.bytes.size()) << c.name;
  }
}

// On the GPU: the first call runs the quick code (one group per block), later calls the full
// code once its background compile is loaded (several groups per block where the grid is deep
// enough: 4M + 77 elements is, on an H100, with a partial last group); every call matches the
// float64 reference.
TEST(CudaTiered, FirstAndLaterCallsMatchTheReference) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU";
  for (const int n : {1 << 20, (1 << 22) + 77}) {
    auto k = metal_kernel(
        "tiered_expsin", {"inp"}, {"out"},
        "uint i = thread_position_in_grid.x;\nout[i] = exp(sin(inp[i]));\n"
        "// tiered test " +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    auto xs = conformance::random_values(n, -3, 3, 11);
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i)
      want[i] = std::exp(std::sin(static_cast<double>(static_cast<float>(xs[i]))));
    Array x = Array::from_doubles(xs, {n}, float32, Device::gpu());
    KernelCall call = call_1d(n, {float32});
    call.device = Device::gpu();
    conformance::poison(call);
    for (int round = 0; round < 6; ++round) {
      Array out = k({x}, call).at(0);
      conformance::expect_close(out, want, 2e-6, 1e-6);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
}

}  // namespace
