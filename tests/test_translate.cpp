// The token-level translator (src/msl/translate.cpp): rewrites, kernel discovery, line keeping.
#include <gtest/gtest.h>

#include <algorithm>

#include "alloy/errors.h"
#include "msl/lexer.h"
#include "msl/translate.h"
#include "prelude/cuda/abi.h"

using namespace alloy;
using namespace alloy::msl;

namespace {

std::string user_part(const Translation& t) {
  auto b = t.code.find("#line 1 \"kernel.metal\"\n");
  auto e = t.code.find("#line 100000");
  return t.code.substr(b + 23, e - b - 23);
}

int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

const char* kLibrary = R"(#include <metal_stdlib>
using namespace metal;
constant float kScale = 0.5;
constant constexpr int N = 4;

struct Acc { float v; METAL_FUNC void add(float x) { v += x; } };

[[kernel]] void scale(const device float* in [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      constant float& s [[buffer(2)]],
                      uint i [[thread_position_in_grid]]) {
  out[i] = in[i] * s * kScale + 1.0;
}

template <typename T>
kernel void sum(device const T* in, device T* out, threadgroup T* scratch [[threadgroup(0)]],
                uint lid [[thread_index_in_threadgroup]]) {
  threadgroup float partial[32], more[2][4];
  partial[lid % 32] = in[lid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[0] = partial[0] + 1e-3 + 2.5h;
}
template [[host_name("sum_float")]] [[kernel]] decltype(sum<float>) sum<float>;
template [[host_name("sum_half")]] [[kernel]] decltype(sum<half>) sum<half>;
)";

TEST(Translate, FindsKernelsAndTheirParameters) {
  auto t = translate(kLibrary, {Target::cpu, "lib"});
  ASSERT_EQ(t.kernels.size(), 3u);
  EXPECT_EQ(t.kernels[0].host_name, "scale");
  EXPECT_EQ(t.kernels[1].host_name, "sum_float");
  EXPECT_EQ(t.kernels[1].function, "alloy_kernel_sum < float >");
  EXPECT_EQ(t.kernels[2].host_name, "sum_half");
  const auto& p = t.kernels[0].params;
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[2].name, "s");
  EXPECT_TRUE(p[2].is_reference);
  EXPECT_EQ(p[2].index, 2);
  EXPECT_EQ(p[3].kind, ParamKind::attribute);
  EXPECT_EQ(p[3].attribute, "thread_position_in_grid");
  // Implicit buffer indices follow Metal: in order, skipping explicit ones.
  const auto& q = t.kernels[1].params;
  EXPECT_EQ(q[0].index, 0);
  EXPECT_EQ(q[1].index, 1);
  EXPECT_EQ(q[2].kind, ParamKind::threadgroup);
  EXPECT_EQ(q[2].index, 0);
  EXPECT_TRUE(t.uses_sync);
}

TEST(Translate, RewritesKeepLineNumbers) {
  for (Target target : {Target::cpu, Target::cuda}) {
    auto t = translate(kLibrary, {target, "lib"});
    std::string u = user_part(t);
    EXPECT_EQ(lines(u), lines(kLibrary) + 1) << u;  // + the newline closing the text
    EXPECT_EQ(u.find("[["), std::string::npos);
    EXPECT_EQ(u.find("device"), std::string::npos);
    EXPECT_EQ(u.find("host_name"), std::string::npos);  // instantiations become entries
    EXPECT_NE(u.find("const float kScale = 0.5f;"), std::string::npos);
    EXPECT_NE(u.find("constexpr int N = 4;"), std::string::npos);
    EXPECT_NE(u.find("1.0f"), std::string::npos);  // MSL has no double
    EXPECT_NE(u.find("1e-3f"), std::string::npos);
    EXPECT_NE(u.find("half(2.5f)"), std::string::npos);
    EXPECT_NE(u.find("const float& s"), std::string::npos);
  }
}

TEST(Translate, ThreadgroupObjectsPerTarget) {
  auto cpu = user_part(translate(kLibrary, {Target::cpu, "lib"}));
  EXPECT_NE(cpu.find("tg_slot(0"), std::string::npos);
  EXPECT_NE(cpu.find("tg_slot(1"), std::string::npos);  // `more`, a 2-D array
  auto cuda = user_part(translate(kLibrary, {Target::cuda, "lib"}));
  // CUDA: typedef'd, placed at compile time by the object's end in the kernel's threadgroup
  // frame (a __shared__ variable within Metal's 32 KiB, else dynamic shared memory); `more`
  // follows `partial`.
  EXPECT_NE(cuda.find("typedef float alloy_tg_t0 [ 32 ];"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("alloy_tg_t0& partial = ::alloy_target::tg_storage<alloy_tg_t0, "
                      "alloy_tg_end0, 0>();"),
            std::string::npos)
      << cuda;
  EXPECT_NE(cuda.find("typedef float alloy_tg_t1 [ 2 ] [ 4 ];"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("::alloy_target::tg_end<alloy_tg_t1>(alloy_tg_end0)"), std::string::npos)
      << cuda;
  // A threadgroup pointer parameter is just a pointer.
  EXPECT_NE(cpu.find("T* scratch"), std::string::npos);
}

TEST(Translate, EntriesPerTarget) {
  auto cpu = translate(kLibrary, {Target::cpu, "lib"}).code;
  // Kernel 2 has a barrier: split into work-item loops, its group entry is a loop entry.
  EXPECT_NE(cpu.find("extern \"C\" ALLOY_CPU_EXPORT ALLOY_CPU_LOOP_ENTRY void alloy_group_2("),
            std::string::npos);
  EXPECT_NE(cpu.find("extern \"C\" ALLOY_CPU_EXPORT void alloy_thread_2("), std::string::npos);
  auto cuda = translate(kLibrary, {Target::cuda, "lib"}).code;
  EXPECT_NE(cuda.find("extern \"C\" __global__ void alloy_entry_1("), std::string::npos);
  EXPECT_NE(cuda.find("if (t.outside_grid()) return;"), std::string::npos);
}

TEST(Translate, PragmasPerTarget) {
  const char* src =
      "kernel void k(device float* o) {\n#pragma unroll 4\nfor (int i = 0; i < 4; ++i) o[i] = i;\n"
      "#pragma clang loop unroll(full)\nfor (int i = 0; i < 4; ++i) o[i] += i;\n}\n";
  auto cpu = user_part(translate(src, {Target::cpu, "p"}));
  EXPECT_NE(cpu.find("#pragma GCC unroll 4"), std::string::npos);
  auto cuda = user_part(translate(src, {Target::cuda, "p"}));
  EXPECT_NE(cuda.find("#pragma unroll 4"), std::string::npos);
  EXPECT_NE(cuda.find("#pragma unroll\n"), std::string::npos);
}

TEST(Translate, RobustModeChecksDevicePointers) {
  const char* src =
      "kernel void k(const device float* in [[buffer(0)]], device float* out [[buffer(1)]],"
      " uint i [[thread_position_in_grid]]) {\n"
      "  const device float4* v = (const device float4*)in;\n"
      "  out[i] = v[0].x; }\n";
  auto plain = user_part(translate(src, {Target::cpu, "k"}));
  EXPECT_EQ(plain.find("alloy_robust"), std::string::npos);
  auto robust = user_part(translate(src, {Target::cpu, "k", "kernel.metal", true}));
  for (size_t p; (p = robust.find("  ")) != std::string::npos;) robust.erase(p, 1);
  EXPECT_NE(robust.find("::alloy_robust::ptr<const float> in"), std::string::npos) << robust;
  EXPECT_NE(robust.find("::alloy_robust::ptr<float> out"), std::string::npos);
  EXPECT_NE(robust.find("(::alloy_robust::ptr<const float4> )in"), std::string::npos) << robust;
  EXPECT_NE(robust.find("::alloy_robust::ptr<const float4> v ="), std::string::npos) << robust;
}

TEST(Translate, RejectsWhatAlloyDoesNotRun) {
  EXPECT_THROW(translate("kernel void k(texture2d<float> t [[texture(0)]]) {}", {Target::cpu, "t"}),
               NotSupported);
  EXPECT_THROW(
      translate("vertex float4 v(uint id [[vertex_id]]) { return 0; }", {Target::cpu, "v"}),
      NotSupported);
  EXPECT_THROW(translate("constant bool f [[function_constant(0)]];", {Target::cpu, "f"}),
               NotSupported);
  EXPECT_THROW(translate("#include \"mine.h\"\n", {Target::cpu, "i"}), NotSupported);
  try {
    translate("\n\nkernel void k(sampler s) {}", {Target::cpu, "smp"});
    FAIL();
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
    EXPECT_EQ(e.kernel(), "smp");
  }
}

TEST(Translate, BadKernelSignaturesAreInvalidArguments) {
  EXPECT_THROW(translate("kernel int k() { return 0; }", {Target::cpu, "k"}),
               std::invalid_argument);
  EXPECT_THROW(translate("kernel void k(device float x [[buffer(0)]]) {}", {Target::cpu, "k"}),
               std::invalid_argument);
}

TEST(Lexer, RoundTripsEveryCharacter) {
  std::string src = kLibrary;
  std::string back;
  for (auto& t : lex(src)) back += t.text;
  EXPECT_EQ(back, src);
  // Nested subscripts are not attributes.
  auto toks = lex("a[b[i]] = x;");
  back.clear();
  for (auto& t : toks) back += t.text;
  EXPECT_EQ(back, "a[b[i]] = x;");
}

}  // namespace

// CUDA entries of kernels whose buffers never alias (metal_kernel) take them as restrict
// parameters and, when their threads share nothing, run four threadgroups per block; small
// (shape) buffers stay in the launch block. Libraries, robust mode and the CPU get none of it.
TEST(Translate, CudaEntryLayout) {
  TranslateOptions o;
  o.target = Target::cuda;
  o.distinct_buffers = true;
  o.small_buffers = {2};
  auto t = translate(kLibrary, o);
  ASSERT_EQ(t.kernels.size(), 3u);
  // `scale`'s constant float& comes from buffer 2, the small one.
  EXPECT_EQ(t.kernels[0].param_buffers, (std::vector<int>{0, 1}));
  EXPECT_NE(t.code.find("const void* __restrict__ alloy_b0, void* __restrict__ alloy_b1)"),
            std::string::npos);
  EXPECT_NE(t.code.find("::alloy_entry::cuda_small_buffer(L, 2)"), std::string::npos);
  // Its parameter block (prelude/cuda/abi.h): a table of 3 buffers and inline data (buffer 2 is
  // small), no threadgroup parameters; sum's has 2 buffers, one threadgroup parameter, no inline
  // data.
  EXPECT_EQ(t.kernels[0].cuda_block.num_buffers, 3u);
  EXPECT_EQ(t.kernels[0].cuda_block.inline_bytes, static_cast<uint32_t>(ALLOY_CUDA_INLINE_BYTES));
  EXPECT_EQ(t.kernels[0].cuda_block.num_tg, 0u);
  EXPECT_FALSE(t.kernels[0].cuda_block.robust);
  EXPECT_NE(t.code.find("alloy_entry_0(const __grid_constant__ alloy_cuda_params<3u, 0u, false, "
                        "512u> L, const void* __restrict__ alloy_b0"),
            std::string::npos);
  EXPECT_EQ(t.kernels[1].cuda_block.num_buffers, 2u);
  EXPECT_EQ(t.kernels[1].cuda_block.num_tg, 1u);
  EXPECT_EQ(t.kernels[1].cuda_block.inline_bytes, 0u);
  EXPECT_NE(t.code.find("alloy_cuda_params<2u, 1u, false, 0u> L"), std::string::npos);
  // Always in the launch block (metal_kernel's shape parameters when they fit).
  TranslateOptions ob = o;
  ob.small_buffers.clear();
  ob.block_buffers = {2};
  auto tb = translate(kLibrary, ob);
  EXPECT_EQ(tb.kernels[0].param_buffers, (std::vector<int>{0, 1}));
  EXPECT_NE(tb.code.find("::alloy_entry::cuda_block_buffer(L, 2)"), std::string::npos);
  // The module has a barrier and threadgroup memory (decided per module): one group per block.
  EXPECT_EQ(t.kernels[0].coarsen, 1);
  EXPECT_EQ(t.kernels[1].coarsen, 1);
  EXPECT_EQ(t.kernels[1].param_buffers, (std::vector<int>{0, 1}));

  const char* independent = R"(
[[kernel]] void f(const device float* a [[buffer(0)]], device float* b [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) { b[i] = a[i]; })";
  auto ti = translate(independent, o);
  EXPECT_EQ(ti.kernels[0].coarsen, 4);
  EXPECT_NE(ti.code.find("cuda_groups_whole(L, 4)"), std::string::npos);
  for (auto variant : {0, 1, 2}) {
    TranslateOptions v = o;
    if (variant == 0) v.distinct_buffers = false;  // a library
    if (variant == 1) v.robust = true;
    if (variant == 2) v.target = Target::cpu;
    auto k = translate(independent, v).kernels[0];
    EXPECT_EQ(k.coarsen, 1) << variant;
    EXPECT_TRUE(k.param_buffers.empty()) << variant;
    // Robust entries' blocks carry the buffers' sizes and the out-of-range log; CPU entries
    // have none.
    EXPECT_EQ(k.cuda_block.robust != 0, variant == 1) << variant;
    EXPECT_EQ(k.cuda_block.num_buffers, variant == 2 ? 0u : 2u) << variant;
  }
  const char* with_simd = R"(
[[kernel]] void f(const device float* a [[buffer(0)]], device float* b [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) { b[i] = simd_sum(a[i]); })";
  EXPECT_EQ(translate(with_simd, o).kernels[0].coarsen, 1);
  const char* with_tg_param = R"(
[[kernel]] void f(const device float* a [[buffer(0)]], device float* b [[buffer(1)]],
                  threadgroup float* s [[threadgroup(0)]],
                  uint i [[thread_position_in_grid]]) { b[i] = a[i]; })";
  EXPECT_EQ(translate(with_tg_param, o).kernels[0].coarsen, 1);
}
