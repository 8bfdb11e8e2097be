// The lazily declared core of the prelude (msl/prelude_select.h, PreludeSelection::core): half and
// bfloat, packed vectors and the CUDA entry's binding templates are declared only when a
// translation names them, and swizzle member lists only for the vectors a selected swizzle
// applies to. Checks which names select which piece, that the CUDA entry binds its parameters
// without the templates, that translations compile with NVRTC for sm_90 (no GPU needed) with
// what they select and fail without it (so the pieces are really left out), and that the
// selection is part of the CUDA cache key.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "backend/cuda/jit.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/tiered.h"
#include "core/backend.h"
#include "core/prelude_files.h"
#include "kernel/custom_kernel.h"
#include "kernel/program.h"
#include "msl/prelude_select.h"
#include "msl/translate.h"

namespace {

using alloy::msl::prelude_defines;
using alloy::msl::PreludeSelection;
using alloy::msl::select_prelude;

std::set<std::string> core_of(const std::string& code) {
  return select_prelude(code).core;
}

// NVRTC on `src` for sm_90 with the embedded prelude; "" when it compiles, else the log.
std::string nvrtc_errors(const std::string& src) {
  std::vector<alloy::cuda::nvrtc::Header> headers;
  for (const auto& f : alloy::prelude::embedded_files())
    headers.push_back({f.path.data(), f.text.data()});
  try {
    alloy::cuda::nvrtc::compile(src, "unit.cu", headers,
                                {"--gpu-architecture=sm_90", "--std=c++17", "-default-device",
                                 "-DALLOY_MATH_SAFE", "-minimal"},
                                /*cubin=*/true);
  } catch (const alloy::cuda::nvrtc::CompileFailure& e) {
    return e.log().empty() ? "failed" : e.log();
  }
  return "";
}

TEST(PreludeCore, PiecesByTheirNames) {
  const std::set<std::string> lowp = {"LOWP"};
  for (const char* n :
       {"half", "half4", "bfloat", "bfloat2", "bfloat16_t", "float16_t", "HALF_MAX", "HALF_EPSILON",
        "MAXHALF", "HUGE_VALH", "M_PI_H", "M_LN2_H", "half3x3", "simdgroup_half8x8", "is_half"})
    EXPECT_EQ(core_of(std::string("x = ") + n + ";").count("LOWP"), 1u) << n;
  for (const char* n :
       {"half", "bfloat", "bfloat16_t", "float16_t", "HALF_MAX", "M_PI_H", "is_half"})
    EXPECT_EQ(core_of(std::string("x = ") + n + ";"), lowp) << n;
  // A Metal half literal is translated to half(...), which selects it.
  auto tr = alloy::msl::translate(
      "kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
      "  o[i] = o[i] * 0.5h;\n}\n",
      {alloy::msl::Target::cuda, "k"});
  EXPECT_NE(tr.code.find("#define ALLOY_NEED_LOWP 1\n"), std::string::npos) << tr.code;
  // Packed vectors and the entry's templates work on whole vectors: VECTOR comes with them.
  EXPECT_EQ(core_of("packed_float3 p;"), (std::set<std::string>{"PACKED", "VECTOR"}));
  EXPECT_EQ(core_of("packed_half2 p;"), (std::set<std::string>{"LOWP", "PACKED", "VECTOR"}));
  EXPECT_EQ(core_of("::alloy_entry::arg<0>(&f, p, 4, 0, nullptr)"),
            (std::set<std::string>{"ENTRY_ARGS", "VECTOR"}));
  EXPECT_EQ(core_of("::alloy_entry::attr_to_param(t.thread_position_in_grid())"),
            (std::set<std::string>{"ENTRY_ARGS", "VECTOR"}));
  // Any vector type name is a vector value (without the attribute exemption, below).
  for (const char* n : {"float4", "uint3", "vec<float, 4>", "bool2", "ushort3", "half4"})
    EXPECT_EQ(core_of(n).count("VECTOR"), 1u) << n;
  // Near misses and what every small kernel names select nothing.
  for (const char* n : {"float", "exp", "thread_position_in_grid", "packed", "M_PI_F", "ptr_arg",
                        "alpha", "float5", "uint1", "vector", "attr_vec<unsigned int, 3>"})
    EXPECT_TRUE(core_of(n).empty()) << n;
  // The type traits no core code uses, by their names.
  for (const char* n : {"is_array_v<T>", "decay_t<T>", "is_unsigned<T>::value", "make_signed_t<T>",
                        "_disjunction<A, B>", "is_trivially_copyable_v<T>"})
    EXPECT_EQ(core_of(n), std::set<std::string>{"TRAITS"}) << n;
  for (const char* n : {"is_same_v<A, B>", "enable_if_t<B>", "is_signed_v<T>", "is_integral_v<T>"})
    EXPECT_TRUE(core_of(n).empty()) << n;
  EXPECT_EQ(core_of("numeric_limits<float>::max()"), std::set<std::string>{"LIMITS"});
  // A pasting macro may make any name: every piece.
  EXPECT_EQ(core_of("#define V(T) T##4 v;\nV(float)\n"), alloy::msl::prelude_core_pieces());
}

// Vector values: a vector-typed attribute parameter read only through single components needs
// none; anything else that could make or use a vector value selects VECTOR.
TEST(PreludeCore, VectorValuesByTheirUses) {
  const std::set<std::string> gid = {"gid"};
  auto vector = [&](const std::string& code) {
    return select_prelude(code, gid).core.count("VECTOR") == 1;
  };
  const std::string sig = "void k(device float* o, uint3 gid, const uint2 lid) {\n";
  EXPECT_FALSE(vector("void k(device float* o, uint3 gid) {\n  o[gid.x] = gid.y + gid.z;\n}\n"));
  // The CUDA translation's spelling of such a parameter (alloy_attr_uint3) counts as its
  // declaration too; rgba components are vector values (the plain struct has xyz only).
  EXPECT_FALSE(vector("void k(float* o, alloy_attr_uint3 gid) { o[gid.x] = 0; }"));
  EXPECT_TRUE(vector("void k(float* o, alloy_attr_uint3 gid) { o[gid.r] = 0; }"));
  EXPECT_TRUE(vector("void k(float* o, alloy_attr_uint3 gid) { alloy_attr_uint3 g; o[0] = 0; }"));
  EXPECT_FALSE(
      vector("void k(const uint3 gid, float* o) { o[gid.x] = s.gid + t.gid() + a::gid; }"));
  EXPECT_FALSE(vector("#define IDX gid.x\nvoid k(uint3 gid, float* o) { o[IDX] = 0; }"));
  EXPECT_TRUE(vector(sig + "o[gid.x] = 0;\n}\n"));  // lid is not exempt: its declaration counts
  const std::string one = "void k(device float* o, uint3 gid) {\n";
  for (const char* use : {
           "auto p = gid; o[p.x] = 0;",          // a copy
           "o[gid.xy.x] = 0;",                   // a swizzle
           "f(gid);",                            // passed whole
           "o[gid[0]] = 0;",                     // indexed
           "o[(gid + 1).x] = 0;",                // an operator
           "uint3 g2; o[0] = 0;",                // another vector declaration
           "o[0] = float(sizeof(gid));",         // the name alone
           "float4 v = float4(1); o[0] = v.x;",  // another vector type
           "o[0] = gid.template alloy_swizzle<0, 1>().x;",
           "\n#define G gid\n o[G.x] = 0;",  // in a directive, alone
       })
    EXPECT_TRUE(vector(one + use + "}\n")) << use;
  // Without the exemption (a CPU translation, or a name that is no vector attribute) any vector
  // type name counts.
  EXPECT_TRUE(select_prelude("void k(uint3 gid) { o[gid.x] = 0; }").core.count("VECTOR"));
  EXPECT_TRUE(select_prelude("void k(uint3 gid) { o[gid.x] = 0; }", {"lid"}).core.count("VECTOR"));
  // The translator exempts the kernels' vector-typed attributes: metal_kernel's body reading
  // thread_position_in_grid.x gets no vector values and compiles; one that uses vector
  // operators gets them.
  using namespace alloy;
  auto translation = [](const char* body) {
    auto k = metal_kernel("vecsel", {"inp"}, {"out"}, body);
    Array x = zeros({64}, float32, Device::cpu());
    KernelCall c;
    c.output_shapes = {{64}};
    c.output_dtypes = {float32};
    c.grid = {64, 1, 1};
    c.threadgroup = {32, 1, 1};
    kernel::SourceMap map;
    return kernel::call_gpu_translation(k, {x}, c, &map).code;
  };
  std::string scalar =
      translation("uint i = thread_position_in_grid.x;\nout[i] = exp(sin(inp[i]));\n");
  EXPECT_EQ(scalar.find("ALLOY_NEED_VECTOR"), std::string::npos) << scalar;
  std::string vec = translation(
      "uint2 p = uint2(thread_position_in_grid.xy);\nfloat2 v = float2(inp[p.x], 1) * 2.0f;\n"
      "out[p.x] = v.x + v.y;\n");
  EXPECT_NE(vec.find("#define ALLOY_NEED_VECTOR 1\n"), std::string::npos) << vec;
  std::string whole = translation("uint3 g = thread_position_in_grid;\nout[g.x] = inp[g.x];\n");
  EXPECT_NE(whole.find("#define ALLOY_NEED_VECTOR 1\n"), std::string::npos) << whole;
  if (!cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  EXPECT_EQ(nvrtc_errors(scalar), "");
  EXPECT_EQ(nvrtc_errors("#define ALLOY_QUICK_ENTRY 1\n" + scalar), "");
  EXPECT_EQ(nvrtc_errors(vec), "");
  EXPECT_EQ(nvrtc_errors(whole), "");
}

// The CUDA entry binds pointers, `constant T&` scalars and structs, and attributes of Metal's
// spellings without alloy_entry::arg or the attribute conversions, and the kernel compiles.
TEST(PreludeCore, CudaEntryBindsWithoutTemplates) {
  const char* src =
      "struct Params { float scale; uint n; };\n"
      "kernel void k(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],\n"
      "              constant float& bias [[buffer(2)]], constant Params& p [[buffer(3)]],\n"
      "              constant int* table [[buffer(4)]],\n"
      "              uint3 gid [[thread_position_in_grid]],\n"
      "              ushort2 lid [[thread_position_in_threadgroup]],\n"
      "              uint tid [[thread_index_in_threadgroup]],\n"
      "              const ushort lane [[thread_index_in_simdgroup]],\n"
      "              int3 tg [[threadgroup_position_in_grid]]) {\n"
      "  if (gid.x >= p.n) return;\n"
      "  out[gid.x] = in[gid.x] * p.scale + bias + float(lid.x + tid + lane + tg.y + table[0]);\n"
      "}\n";
  auto tr = alloy::msl::translate(src, {alloy::msl::Target::cuda, "k"});
  EXPECT_EQ(tr.code.find("alloy_entry::arg"), std::string::npos) << tr.code;
  EXPECT_EQ(tr.code.find("ALLOY_NEED_ENTRY_ARGS"), std::string::npos) << tr.code;
  EXPECT_EQ(tr.code.find("ALLOY_NEED_LOWP"), std::string::npos) << tr.code;
  if (!alloy::cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  EXPECT_EQ(nvrtc_errors(tr.code), "");
  // Robust pointers and an attribute of another spelling keep the templates, and compile.
  alloy::msl::TranslateOptions robust{alloy::msl::Target::cuda, "k"};
  robust.robust = true;
  auto rt = alloy::msl::translate(src, robust);
  EXPECT_NE(rt.code.find("#define ALLOY_NEED_ENTRY_ARGS 1\n"), std::string::npos);
  EXPECT_EQ(nvrtc_errors(rt.code), "");
  auto vt = alloy::msl::translate(
      "template <typename T>\n"
      "kernel void k(device T* out [[buffer(0)]], vec<uint, 2> gid [[thread_position_in_grid]],\n"
      "              T w [[threads_per_grid]]) {\n"
      "  out[gid.y * 4 + gid.x] = T(gid.x) + w;\n}\n"
      "template [[host_name(\"k_f\")]] kernel void k<float>(device float*, vec<uint, 2>, float);\n"
      "template [[host_name(\"k_u\")]] kernel void k<uint>(device uint*, vec<uint, 2>, uint);\n",
      {alloy::msl::Target::cuda, "k"});
  EXPECT_NE(vt.code.find("#define ALLOY_NEED_ENTRY_ARGS 1\n"), std::string::npos) << vt.code;
  EXPECT_EQ(nvrtc_errors(vt.code), "");
}

// CUDA: a vector-typed attribute whose every use reads one component is declared as a plain
// struct of its components (no `vec` parameter: NVRTC's IR generation and back end of one cost the
// quick compile ~2 ms); with vector values in the translation it is Metal's vector. Every 2- and
// 3-component spelling, const or not, in the full and the quick compile; the CPU translation keeps
// Metal's types.
TEST(PreludeCore, ComponentAttributesArePlainStructsOnCuda) {
  const std::string head =
      "kernel void k(device float* out [[buffer(0)]],\n"
      "              uint3 gid [[thread_position_in_grid]],\n"
      "              const ushort2 lid [[thread_position_in_threadgroup]],\n"
      "              int3 tg [[threadgroup_position_in_grid]],\n"
      "              uint2 tpg [[threads_per_grid]],\n"
      "              short2 sl [[thread_position_in_threadgroup]],\n"
      "              ushort3 tgs [[threads_per_threadgroup]],\n"
      "              int2 gpg [[threadgroups_per_grid]],\n"
      "              short3 tgp [[threadgroup_position_in_grid]],\n"
      "              uint tid [[thread_index_in_threadgroup]]) {\n";
  const std::string reads =
      "  int d = tg.y - 1;  // int components: negative values stay negative\n"
      "  out[gid.x] = float(lid.x + lid.y + d + int(tpg.y) + sl.x + tgs.z + gpg.y + tgp.z + tid) +"
      " float(gid.y + gid.z);\n";
  auto translate = [&](const std::string& body, alloy::msl::Target target) {
    return alloy::msl::translate(head + body + "}\n", {target, "k"}).code;
  };
  const std::string plain = translate(reads, alloy::msl::Target::cuda);
  EXPECT_EQ(plain.find("ALLOY_NEED_VECTOR"), std::string::npos) << plain;
  for (const char* decl :
       {"alloy_attr_uint3 gid", "const alloy_attr_ushort2 lid", "alloy_attr_int3 tg",
        "alloy_attr_uint2 tpg", "alloy_attr_short2 sl", "alloy_attr_ushort3 tgs",
        "alloy_attr_int2 gpg", "alloy_attr_short3 tgp", "uint tid"})
    EXPECT_NE(plain.find(decl), std::string::npos) << decl << "\n" << plain;
  const std::string cpu = translate(reads, alloy::msl::Target::cpu);
  EXPECT_EQ(cpu.find("alloy_attr_"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("uint3 gid"), std::string::npos) << cpu;
  // Uses of the vector value: a copy, a call with it, a swizzle, a component by rgba.
  const std::vector<std::string> vector_uses = {
      "  uint3 g = gid; out[g.x] = float(lid.x + tg.y + tpg.x + sl.x + tgs.x + gpg.x + tgp.x);\n",
      "  out[gid.x] = float(ushort2(lid).y + tg.x + tpg.x + sl.y + tgs.y + gpg.y + tgp.y + tid);\n",
      "  out[gid.x] = float(gid.yz.x + tg.x + lid.x + tpg.x + sl.x + tgs.x + gpg.x + tgp.x);\n",
      "  out[gid.r] = float(tg.x + lid.x + tpg.x + sl.x + tgs.x + gpg.x + tgp.x);\n"};
  std::vector<std::string> vec;
  for (const auto& use : vector_uses) {
    vec.push_back(translate(use, alloy::msl::Target::cuda));
    EXPECT_NE(vec.back().find("#define ALLOY_NEED_VECTOR 1\n"), std::string::npos) << vec.back();
  }
  if (!alloy::cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  // The parameter types really are the plain structs (3 x 4 bytes, 3 x 2 bytes; Metal's 3-vectors
  // are padded to 4 components), and Metal's vectors with vector values.
  const std::string plain_sizes =
      "\nstatic_assert(sizeof(alloy_attr_uint3) == 12 && sizeof(alloy_attr_short3) == 6 &&"
      " sizeof(alloy_attr_ushort2) == 4, \"plain\");\n";
  const std::string vec_sizes =
      "\nstatic_assert(sizeof(alloy_attr_uint3) == 16 && sizeof(alloy_attr_short3) == 8, "
      "\"vector\");\n";
  EXPECT_EQ(nvrtc_errors(plain + plain_sizes), "");
  EXPECT_EQ(nvrtc_errors("#define ALLOY_QUICK_ENTRY 1\n" + plain + plain_sizes), "");
  EXPECT_NE(nvrtc_errors(plain + vec_sizes), "");
  for (const auto& v : vec) {
    EXPECT_EQ(nvrtc_errors(v + vec_sizes), "") << v;
    EXPECT_EQ(nvrtc_errors("#define ALLOY_QUICK_ENTRY 1\n" + v), "") << v;
  }
  // A 2-component attribute has no .z, as in Metal.
  EXPECT_NE(nvrtc_errors(translate("  out[0] = float(tpg.z + gid.x);\n", alloy::msl::Target::cuda)),
            "");
}

// The pieces are really left out: a use compiles with its piece and fails without it.
TEST(PreludeCore, LeftOutPiecesFailToCompile) {
  if (!alloy::cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  auto unit = [](const std::string& defines, const std::string& body) {
    return defines +
           "#include \"metal_stdlib.h\"\nnamespace metal {\n"
           "ALLOY_FN void use(float* o, uint x) {\n" +
           body + "}\n}  // namespace metal\n";
  };
  const std::vector<std::pair<std::string, std::string>> uses = {
      {"LOWP", "half h = half(o[0]) * 2; bfloat b = bfloat(o[1]); o[0] = float(h + b);\n"},
      {"PACKED", "packed_float3 p = packed_float3(o[0], o[1], o[2]); o[0] = p.x + p[2];\n"},
      {"VECTOR", "float4 v = float4(o[0]); v = v * 2.0f + 1.0f; o[0] = v.x;\n"},
      {"TRAITS", "o[0] = is_array_v<float[2]> + is_unsigned_v<uint> ? 1.0f : 0.0f;\n"},
      {"LIMITS", "o[0] = numeric_limits<float>::max() + float(numeric_limits<int>::min());\n"},
  };
  for (const auto& [piece, body] : uses) {
    PreludeSelection s = select_prelude(body);
    EXPECT_TRUE(s.core.count(piece)) << piece;
    EXPECT_EQ(nvrtc_errors(unit(prelude_defines(s), body)), "") << piece;
    s.core.erase(piece);
    EXPECT_NE(nvrtc_errors(unit(prelude_defines(s), body)), "") << piece << " left out";
  }
  // Swizzles: each vector width's member list is there only when a selected swizzle applies to
  // it (yx: float2, float3, float4; zyx: float3, float4).
  const std::string swz =
      "float3 v = float3(o[0]); float2 u = float2(o[1]);\n"
      "o[0] = v.zyx[0] + u.yx[1];\n";
  std::string d = prelude_defines(select_prelude(swz));
  EXPECT_NE(d.find("#define ALLOY_SWIZZLES_2 1\n"), std::string::npos) << d;
  EXPECT_EQ(nvrtc_errors(unit(d, swz)), "");
  d.erase(d.find("#define ALLOY_SWIZZLES_2 1\n"), 26);
  EXPECT_NE(nvrtc_errors(unit(d, swz)), "") << "float2 swizzles left out";
  EXPECT_EQ(prelude_defines(select_prelude("o[0] = v.zyx[0];")).find("ALLOY_SWIZZLES_2"),
            std::string::npos);
}

// What NVRTC compiles for a kernel, and its cache key: two kernels whose translations select
// different pieces differ in the key (the selection is the source's first lines).
TEST(PreludeCore, CacheKeyCoversTheSelection) {
  using namespace alloy;
  auto request = [](Dtype dtype) {
    auto k = metal_kernel("core_key", {"inp"}, {"out"},
                          "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * 2;\n");
    Array x = zeros({64}, dtype, Device::cpu());
    KernelCall c;
    c.output_shapes = {{64}};
    c.output_dtypes = {dtype};
    c.grid = {64, 1, 1};
    c.threadgroup = {32, 1, 1};
    kernel::SourceMap map;
    msl::Translation tr = kernel::call_gpu_translation(k, {x}, c, &map);
    return cuda::kernel_source(kernel::compile_request(tr, map, "safe"));
  };
  cuda::KernelSource f32 = request(Dtype::float32), f16 = request(Dtype::float16);
  EXPECT_EQ(f32.source.find("ALLOY_NEED_LOWP"), std::string::npos);
  EXPECT_NE(f16.source.find("#define ALLOY_NEED_LOWP 1\n"), std::string::npos);
  auto sm90 = cuda::nvrtc::target_for(9, 0);
  EXPECT_NE(cuda::cache_key(f32, sm90), cuda::cache_key(f16, sm90));
  // The same source with another selection line is another key.
  cuda::KernelSource other = f32;
  other.source = "#define ALLOY_NEED_PACKED 1\n" + other.source;
  EXPECT_NE(cuda::cache_key(f32, sm90), cuda::cache_key(other, sm90));
  if (!cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  EXPECT_NO_THROW(cuda::compile(f32, sm90));
  EXPECT_NO_THROW(cuda::compile(f16, sm90));
}

}  // namespace
