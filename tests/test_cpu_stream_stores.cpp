// Streaming (non-temporal) stores of write-once outputs on the CPU (msl/translate.cpp
// stream_outputs, msl/target.cpp, prelude/entry.h cpu_stream_copy): which outputs the translator
// proves write-once at the thread's own grid position, and that the streamed path (forced on with
// set_stream_min_bytes(0)) gives the same results as plain stores for odd sizes, partial groups,
// several outputs of different element sizes, and 2D grids (never streamed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "alloy/kernel.h"
#include "backend/cpu/executor.h"
#include "core/half_convert.h"
#include "msl/translate.h"
#include "scoped_env.h"

namespace alloy {
namespace {

// The names of kernel 0's streamed parameters.
std::vector<std::string> streamed(const std::string& body, const std::string& gid = "uint3") {
  std::string src =
      "#include <metal_stdlib>\nusing namespace metal;\n"
      "float helper(thread uint& v) { v += 1; return float(v); }\n"
      "kernel void k(device const float* inp [[buffer(0)]], device float* out [[buffer(1)]],\n"
      "              device float* out2 [[buffer(2)]], constant uint& n [[buffer(3)]],\n"
      "              " +
      gid + " gid [[thread_position_in_grid]]) {\n" + body + "\n}\n";
  auto t = msl::translate(src, {msl::Target::cpu, "t"});
  std::vector<std::string> names;
  for (size_t j : t.kernels.at(0).stream_params) names.push_back(t.kernels[0].params[j].name);
  return names;
}

using Names = std::vector<std::string>;

// ALLOY_CPU_STREAM for the test's duration (msl::cpu_stream_loops reads it at every translation:
// on the 2-core dev machine the default emits no streamed loops).
struct ScopedStreamEnv {
  explicit ScopedStreamEnv(const char* value) : env("ALLOY_CPU_STREAM", value) {}
  // The executor's threshold is read from the real environment, before the change.
  int threshold_read = ((void)cpu::stream_min_bytes(), 0);
  alloy::testing::ScopedEnv env;
};

class CpuStreamStores : public ::testing::Test {
  ScopedStreamEnv env_{"on"};
};

TEST_F(CpuStreamStores, TranslatorFindsWriteOnceOutputs) {
  EXPECT_EQ(streamed("out[gid.x] = exp(inp[gid.x]);"), Names{"out"});
  EXPECT_EQ(streamed("uint i = gid.x;\nfloat v = inp[i] * 2.0f;\nout[i] = v;\nout2[i] = v + 1;"),
            (Names{"out", "out2"}));
  EXPECT_EQ(streamed("const uint i = gid.x; out[i] = inp[i];"), Names{"out"});
  EXPECT_EQ(streamed("uint i = gid.x; out[i] = inp[i] + inp[min(i + 1, n - 1)] * i;"),
            Names{"out"});
  EXPECT_EQ(streamed("out[gid] = inp[gid];", "uint"), Names{"out"});
  EXPECT_EQ(streamed("auto i = gid.x; if (i < n) { out2[i] = 1; } out[i] = 2;"), Names{"out"});
}

TEST_F(CpuStreamStores, TranslatorRejectsWhatItCannotProve) {
  // Conditional, in a loop, after a possible return, read back, at another index.
  EXPECT_TRUE(streamed("if (gid.x < n) out[gid.x] = 1;").empty());
  EXPECT_TRUE(streamed("if (gid.x < n) { out[gid.x] = 1; }").empty());
  EXPECT_TRUE(streamed("for (uint j = 0; j < 2; ++j) out[gid.x] = j;").empty());
  EXPECT_TRUE(streamed("if (gid.x >= n) return; out[gid.x] = 1;").empty());
  EXPECT_TRUE(streamed("out[gid.x] = 1; out[gid.x] = out[gid.x] + 1;").empty());
  EXPECT_TRUE(streamed("out[gid.x + 1] = 1;").empty());
  EXPECT_TRUE(streamed("out[gid.y] = 1;").empty());
  EXPECT_TRUE(streamed("out[n] = 1;").empty());
  // The index changed, or maybe changed by a reference parameter.
  EXPECT_TRUE(streamed("uint i = gid.x; i += 1; out[i] = 1;").empty());
  EXPECT_TRUE(streamed("uint i = gid.x; ++i; out[i] = 1;").empty());
  EXPECT_TRUE(streamed("uint i = gid.x; float f = helper(i); out[i] = f;").empty());
  EXPECT_TRUE(streamed("gid.x = 0; out[gid.x] = 1;").empty());
  // The pointer escapes, or is used through a macro.
  EXPECT_TRUE(streamed("device float* p = out; p[gid.x] = 1;").empty());
  EXPECT_TRUE(streamed("#define O out\nO[gid.x] = 1;").empty());
  // ushort grid positions wrap; a scalar index of another type is not the grid position.
  EXPECT_TRUE(streamed("out[gid] = 1;", "ushort").empty());
}

// ALLOY_CPU_STREAM=off: no streamed loops (nothing to compile twice); the outputs are right.
TEST(CpuStreamStoresOff, NoStreamedLoopsWhenOff) {
  ScopedStreamEnv env("off");
  EXPECT_FALSE(msl::cpu_stream_loops());
  EXPECT_TRUE(streamed("out[gid.x] = exp(inp[gid.x]);").empty());
  const int n = 3001;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i) - 1000.0f;
  auto k = metal_kernel("stream_off", {"inp"}, {"out"},
                        "uint i = thread_position_in_grid.x; out[i] = inp[i] * 0.5f;");
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {n, 1, 1};
  call.threadgroup = {256, 1, 1};
  call.init_value = std::nan("");
  call.device = Device::cpu();
  std::vector<Array> in = {Array::from_vector(x, {n}, float32, Device::cpu())};
  auto t = msl::translate(k.metal_source(in, call), {msl::Target::cpu, "stream_off"});
  EXPECT_TRUE(t.kernels.at(0).stream_params.empty());
  auto out = k(in, call)[0].to_vector<float>();
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], x[i] * 0.5f) << i;
}

TEST(CpuStreamStoresOff, OnOrAThresholdEmitsStreamedLoops) {
  for (const char* v : {"on", "1048576"}) {
    ScopedStreamEnv env(v);
    EXPECT_TRUE(msl::cpu_stream_loops()) << v;
    EXPECT_EQ(streamed("out[gid.x] = 1;"), Names{"out"}) << v;
  }
}

// A kernel that uses barriers has no loop entry to stream from.
TEST_F(CpuStreamStores, TranslationsWithBarriersStreamNothing) {
  EXPECT_TRUE(streamed("out[gid.x] = 1; threadgroup_barrier(mem_flags::mem_none);").empty());
}

struct StreamMode {
  explicit StreamMode(uint64_t bytes) : saved(cpu::stream_min_bytes()) {
    cpu::set_stream_min_bytes(bytes);
  }
  ~StreamMode() { cpu::set_stream_min_bytes(saved); }
  uint64_t saved;
};

// out = exp(x) * 2 (float) and h = half(x) + 1 (half, 2-byte elements: odd byte counts at the
// edges of blocks and buffers), over n threads in groups of tg, both paths.
void check_elementwise(int n, int tg, uint64_t threshold) {
  std::mt19937 rng(n * 31 + tg);
  std::uniform_real_distribution<float> u(-4, 4);
  std::vector<float> x(n);
  for (auto& v : x) v = u(rng);
  auto k = metal_kernel("stream_two", {"inp"}, {"out", "h"},
                        "uint i = thread_position_in_grid.x;\n"
                        "float v = inp[i];\n"
                        "out[i] = metal::exp(v) * 2.0f;\n"
                        "h[i] = half(v + 1.0f);\n");
  KernelCall call;
  call.output_shapes = {{n}, {n}};
  call.output_dtypes = {float32, float16};
  call.grid = {n, 1, 1};
  call.threadgroup = {tg, 1, 1};
  call.init_value = std::nan("");
  call.device = Device::cpu();
  StreamMode mode(threshold);
  std::vector<Array> in = {Array::from_vector(x, {n}, float32, Device::cpu())};
  // Both outputs are streamable (so the forced runs below take the streamed path).
  auto t = msl::translate(k.metal_source(in, call), {msl::Target::cpu, "stream_two"});
  ASSERT_EQ(t.kernels.at(0).stream_params.size(), 2u);
  auto r = k(in, call);
  auto out = r[0].to_vector<float>();
  auto h = r[1].to_vector<uint16_t>();
  int bad = 0;
  for (int i = 0; i < n && bad < 5; ++i) {
    double want = std::exp(static_cast<double>(x[i])) * 2.0;
    double hw = static_cast<double>(x[i]) + 1.0;
    double hg = detail::f16_to_f32(h[i]);
    if (!(std::fabs(out[i] - want) <= 4e-7 * std::fabs(want)) ||
        !(std::fabs(hg - hw) <= std::ldexp(std::fabs(hw), -10) + 1e-7)) {
      ++bad;
      ADD_FAILURE() << "n " << n << " tg " << tg << " threshold " << threshold << ": element " << i
                    << " out " << out[i] << " (want " << want << ") h " << hg << " (want " << hw
                    << ")";
    }
  }
}

TEST_F(CpuStreamStores, ForcedStreamingMatchesReferenceOddSizesAndPartialGroups) {
  for (int n : {1, 3, 37, 255, 4096 + 37, 100003, 1 << 18})
    for (int tg : {256, 61, 1})
      if (!(tg == 1 && n > 5000)) check_elementwise(n, tg, 0);
}

TEST_F(CpuStreamStores, PlainStoresBelowThresholdAndWhenOff) {
  for (uint64_t threshold : {~uint64_t{0}, uint64_t{1} << 20})
    for (int n : {37, 300001}) check_elementwise(n, 256, threshold);
}

// A 2D grid writes out[gid.x] from every row (a race on a GPU; here each row's value is one
// that some thread wrote): the streamed path is not taken, and gid.x still indexes correctly.
// out2 gets every (x, y) element, written by a store the translator cannot prove.
TEST_F(CpuStreamStores, TwoDimensionalGridIsNotStreamed) {
  const int w = 1000, hgt = 3;
  std::vector<float> x(w);
  for (int i = 0; i < w; ++i) x[i] = static_cast<float>(i) * 0.5f;
  auto k = metal_kernel("stream_2d", {"inp"}, {"out", "all"},
                        "uint i = thread_position_in_grid.x;\n"
                        "all[thread_position_in_grid.y * inp_shape[0] + i] = inp[i] + "
                        "float(thread_position_in_grid.y);\n"
                        "out[i] = inp[i] * 3.0f;\n");
  KernelCall call;
  call.output_shapes = {{w}, {hgt * w}};
  call.output_dtypes = {float32, float32};
  call.grid = {w, hgt, 1};
  call.threadgroup = {64, 1, 1};
  call.init_value = -1.0;
  call.device = Device::cpu();
  StreamMode mode(0);
  auto r = k({Array::from_vector(x, {w}, float32, Device::cpu())}, call);
  auto out = r[0].to_vector<float>();
  auto all = r[1].to_vector<float>();
  for (int i = 0; i < w; ++i) {
    ASSERT_EQ(out[i], x[i] * 3.0f) << i;
    for (int y = 0; y < hgt; ++y) ASSERT_EQ(all[y * w + i], x[i] + y) << i << "," << y;
  }
}

// A grid smaller than the output: the elements past the grid keep the initial value.
TEST_F(CpuStreamStores, GridSmallerThanOutputLeavesTheRest) {
  const int n = 5000, grid = 4099;
  std::vector<float> x(n, 2.0f);
  auto k = metal_kernel("stream_part", {"inp"}, {"out"},
                        "uint i = thread_position_in_grid.x; out[i] = inp[i] + 1.0f;");
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {grid, 1, 1};
  call.threadgroup = {128, 1, 1};
  call.init_value = 7.0;
  call.device = Device::cpu();
  StreamMode mode(0);
  auto out = k({Array::from_vector(x, {n}, float32, Device::cpu())}, call)[0].to_vector<float>();
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], i < grid ? 3.0f : 7.0f) << i;
}

}  // namespace
}  // namespace alloy
