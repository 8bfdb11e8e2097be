// Prelude selection (msl/prelude_select.h): the optional prelude parts and swizzles a translated
// kernel gets from the identifiers of its source, and checks that the selection rules cover every
// name the optional headers declare (so a kernel never loses a Metal function it uses).
#include <cpuid.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/nvrtc.h"
#include "core/prelude_files.h"
#include "msl/lexer.h"
#include "msl/prelude_select.h"
#include "msl/translate.h"

namespace {

namespace fs = std::filesystem;
using alloy::msl::prelude_defines;
using alloy::msl::PreludeSelection;
using alloy::msl::select_prelude;

std::set<std::string> set_of(std::initializer_list<const char*> l) {
  return std::set<std::string>(l.begin(), l.end());
}

// metal_stdlib.h includes atomic.h for ALLOY_NEED_SYNC too.
bool includes_part(const PreludeSelection& s, const std::string& part) {
  return s.all || s.needs.count(part) || (part == "ATOMIC" && s.needs.count("SYNC"));
}

TEST(PreludeSelection, SmallKernelNeedsNoOptionalPart) {
  const char* src =
      "kernel void k(device const float* inp [[buffer(0)]], device float* out [[buffer(1)]],\n"
      "              uint3 thread_position_in_grid [[thread_position_in_grid]]) {\n"
      "  uint elem = thread_position_in_grid.x;\n"
      "  out[elem] = metal::exp(inp[elem]);\n"
      "}\n";
  for (auto target : {alloy::msl::Target::cpu, alloy::msl::Target::cuda}) {
    auto tr = alloy::msl::translate(src, {target, "k"});
    PreludeSelection s = select_prelude(tr.code, {"thread_position_in_grid"});
    EXPECT_FALSE(s.all);
    EXPECT_TRUE(s.needs.empty());
    EXPECT_TRUE(s.swizzles.empty());
    EXPECT_EQ(s.math, set_of({"exp"}));
    // No half/bfloat, packed vector, swizzle or vector value (the attribute is read through .x);
    // the CUDA entry binds its parameters without the entry's binding templates (the CPU
    // entries use them, and with them vector values: ENTRY_ARGS means nothing there).
    EXPECT_EQ(s.core, target == alloy::msl::Target::cuda ? std::set<std::string>{}
                                                         : set_of({"ENTRY_ARGS", "VECTOR"}));
    // The translation starts with the selection, before the prelude is included; on CUDA the
    // prelude's core first (ended by a declaration, so that NVRTC's PCH of it serves every math
    // selection), then the math functions.
    EXPECT_EQ(tr.code.rfind(target == alloy::msl::Target::cuda
                                ? std::string("#define ALLOY_SELECT 1\n#include \"metal_core.h\"\n"
                                              "#include \"entry.h\"\n") +
                                      std::string(alloy::msl::kPreludeCoreEnd) +
                                      "#define ALLOY_USE_exp 1\n#include \"metal_stdlib.h\"\n"
                                : "#define ALLOY_SELECT 1\n#define ALLOY_NEED_ENTRY_ARGS 1\n"
                                  "#define ALLOY_NEED_VECTOR 1\n#define ALLOY_USE_exp 1\n"
                                  "#include \"metal_stdlib.h\"\n",
                            0),
              0u)
        << tr.code.substr(0, 200);
  }
}

TEST(PreludeSelection, TranslationDefinesWhatTheKernelUses) {
  const char* src =
      "kernel void k(device float4* p [[buffer(0)]], device atomic_uint* c [[buffer(1)]],\n"
      "              uint i [[thread_position_in_grid]]) {\n"
      "  float4 v = p[i];\n"
      "  p[i].zyx = simd_sum(v).bgr;\n"
      "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
      "}\n";
  auto tr = alloy::msl::translate(src, {alloy::msl::Target::cuda, "k"});
  for (const char* d :
       {"#define ALLOY_SELECT 1\n", "#define ALLOY_NEED_SIMD 1\n", "#define ALLOY_NEED_SYNC 1\n",
        "#define ALLOY_NEED_ATOMIC 1\n", "#define ALLOY_SWIZZLE_zyx 1\n"})
    EXPECT_NE(tr.code.find(d), std::string::npos) << d << tr.code;
  EXPECT_EQ(tr.code.find("ALLOY_NEED_MATRIX"), std::string::npos);
  EXPECT_EQ(tr.code.find("ALLOY_NEED_INTEGER"), std::string::npos);
}

TEST(PreludeSelection, PartsByTheirNames) {
  const std::map<std::string, std::vector<const char*>> cases = {
      {"INTEGER",
       {"popcount", "clz", "ctz", "extract_bits", "insert_bits", "mulhi", "addsat", "rotate",
        "reverse_bits", "mad24", "madsat"}},
      {"ATOMIC",
       {"atomic", "atomic_int", "atomic_float", "atomic_fetch_add_explicit",
        "atomic_compare_exchange_weak_explicit", "memory_order_relaxed", "memory_order",
        "thread_scope_device", "atomic_load", "atomic_store"}},
      {"SYNC",
       {"threadgroup_barrier", "simdgroup_barrier", "mem_flags", "mem_none",
        "atomic_thread_fence"}},
      {"SIMD",
       {"simd_sum", "simd_shuffle_down", "simd_prefix_exclusive_sum", "simd_ballot", "simd_vote",
        "quad_sum", "quad_shuffle_xor", "quad_vote", "simd_is_first"}},
      {"MATRIX",
       {"matrix", "float2x2", "float4x3", "half3x3", "transpose", "determinant", "simdgroup_matrix",
        "simdgroup_float8x8", "simdgroup_load", "simdgroup_store", "simdgroup_multiply_accumulate",
        "make_filled_simdgroup_matrix"}},
      {"MLX",
       {"elem_to_loc", "elem_to_loc_2_nd", "elem_to_loc_nd", "complex64_t", "Limits", "ceildiv",
        "log1p", "expm1", "bfloat16_to_uint16", "uint16_to_bfloat16", "MTL_CONST", "METAL_FUNC",
        "MLX_MTL_PRAGMA_UNROLL"}},
      {"METAL_INTERNAL",
       {"__metal_exp", "__metal_simd_shuffle", "__metal_get_simdgroup_size",
        "__METAL_MAYBE_FAST_MATH__", "__METAL_PRECISE_MATH__"}},
  };
  for (const auto& [part, names] : cases) {
    EXPECT_TRUE(alloy::msl::prelude_parts().count(part)) << part;
    for (const char* n : names) {
      PreludeSelection s = select_prelude(std::string("x = ") + n + "(y);");
      EXPECT_TRUE(includes_part(s, part)) << n << " should select " << part;
    }
  }
  // Not parts of theirs: near misses and attribute names.
  for (const char* n : {"simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
                        "quadgroup_index_in_threadgroup", "thread_index_in_simdgroup", "float4",
                        "half8x8", "exp", "clamp", "uint3", "popcounts"}) {
    EXPECT_TRUE(select_prelude(n).needs.empty()) << n;
  }
  EXPECT_EQ(select_prelude("simdgroup_barrier(mem_flags::mem_none);").needs, set_of({"SYNC"}));
}

TEST(PreludeSelection, Swizzles) {
  EXPECT_EQ(select_prelude("a.xy + b.zyx + c.wzyx").swizzles, set_of({"xy", "zyx", "wzyx"}));
  // rgba spellings select the same member as their xyzw twin.
  EXPECT_EQ(select_prelude("c.rgb = d.bgra; e.ar").swizzles, set_of({"xyz", "zyxw", "wx"}));
  // One letter is a plain member; mixed sets and 5 letters are no swizzles.
  EXPECT_TRUE(select_prelude("v.x = v.r; v.xr; v.xyzwx; v.xg; v.rgbx").swizzles.empty());
  // Conservative: the name anywhere counts (a variable named xy, a member of a user struct,
  // `v.float4::xy`), except in the prelude's own namespaces.
  EXPECT_EQ(select_prelude("int xy = s.rg;").swizzles, set_of({"xy"}));
  EXPECT_EQ(select_prelude("ns::xy = v.float4::zw;").swizzles, set_of({"xy", "zw"}));
  EXPECT_TRUE(select_prelude("::alloy_entry::arg<0>(f); alloy_target::bar();").swizzles.empty());
  EXPECT_EQ(select_prelude("ns::simd_sum(x)").needs, set_of({"SIMD"}));
}

TEST(PreludeSelection, DirectivesCommentsStrings) {
  // Names in preprocessor directives count (macros expand to them).
  PreludeSelection s = select_prelude("#define REDUCE(v) simd_max((v).yx)\nfloat f;\n");
  EXPECT_EQ(s.needs, set_of({"SIMD"}));
  EXPECT_EQ(s.swizzles, set_of({"yx"}));
  // Comments and string literals do not.
  s = select_prelude("// simd_sum(v.xy)\n/* popcount */ const char* s = \"atomic_int v.zw\";\n");
  EXPECT_TRUE(s.needs.empty());
  EXPECT_TRUE(s.swizzles.empty());
}

TEST(PreludeSelection, TokenPasting) {
  // A parameter pasted: any part, math function or swizzle.
  PreludeSelection s = select_prelude("#define CAT(a, b) a##b\nfloat x = CAT(simd_, sum)(y);\n");
  EXPECT_FALSE(s.all);
  EXPECT_EQ(s.needs, alloy::msl::prelude_parts());
  EXPECT_TRUE(s.all_math);
  EXPECT_TRUE(s.all_swizzles);
  EXPECT_NE(prelude_defines(s).find("#define ALLOY_SWIZZLES_ALL 1\n#define ALLOY_MATH_ALL 1\n"),
            std::string::npos);
  // T##2 is a vector type name, never a swizzle; chains and continuation lines too.
  s = select_prelude("#define V(T) \\\n  T##2 v = T ## 2(0); T##x##2 w;\nV(float)\n");
  EXPECT_EQ(s.needs, alloy::msl::prelude_parts());
  EXPECT_TRUE(s.all_math);
  EXPECT_FALSE(s.all_swizzles);
  EXPECT_TRUE(s.swizzles.empty());
  // Literal operands make a known name.
  s = select_prelude("#define SW v.x##y\n#define F pop##count\n");
  EXPECT_EQ(s.swizzles, set_of({"xy"}));
  EXPECT_EQ(s.needs, set_of({"INTEGER"}));
  EXPECT_FALSE(s.all_math);
  // A pasted parameter next to letters a swizzle may have: every swizzle.
  EXPECT_TRUE(select_prelude("#define S(v, c) v.c##x\n").all_swizzles);
  EXPECT_FALSE(select_prelude("#define S(p) p##_sum\n").all_swizzles);
  // `##` outside a #define: everything.
  s = select_prelude("#pragma foo ## bar\n");
  EXPECT_TRUE(s.all);
  EXPECT_EQ(prelude_defines(s), "");
}

TEST(PreludeSelection, Defines) {
  PreludeSelection s;
  s.needs = set_of({"MLX", "SIMD"});
  s.swizzles = set_of({"xy"});
  EXPECT_EQ(prelude_defines(s),
            "#define ALLOY_SELECT 1\n#define ALLOY_NEED_MLX 1\n#define ALLOY_NEED_SIMD 1\n"
            "#define ALLOY_SWIZZLES_2 1\n#define ALLOY_SWIZZLES_3 1\n#define ALLOY_SWIZZLES_4 1\n"
            "#define ALLOY_SWIZZLE_xy 1\n");
  // A swizzle's member lists: only the vectors that have its components.
  s = PreludeSelection{};
  s.swizzles = set_of({"zyx", "ww"});
  s.core = set_of({"LOWP"});
  EXPECT_EQ(
      prelude_defines(s),
      "#define ALLOY_SELECT 1\n#define ALLOY_NEED_LOWP 1\n#define ALLOY_SWIZZLES_3 1\n"
      "#define ALLOY_SWIZZLES_4 1\n#define ALLOY_SWIZZLE_ww 1\n#define ALLOY_SWIZZLE_zyx 1\n");
}

// Every swizzle member of vector.h sits under the guard of its own xyzw name, and both of its
// spellings select that guard.
TEST(PreludeSelection, SwizzleGuardsMatchTheirMembers) {
  std::string vector_h;
  for (const auto& f : alloy::prelude::embedded_files())
    if (f.path == "metal/vector.h") vector_h = f.text;
  ASSERT_FALSE(vector_h.empty());
  std::istringstream in(vector_h);
  std::string prev, line;
  int members = 0;
  while (std::getline(in, line)) {
    if (line.rfind("    swizzle<T, ", 0) == 0) {
      ++members;
      // "    swizzle<T, 4, 2, 1, 0> zyx, bgr;"
      auto gt = line.find("> ");
      auto comma = line.find(", ", gt);
      std::string xyzw = line.substr(gt + 2, comma - gt - 2);
      std::string rgba = line.substr(comma + 2, line.size() - comma - 3);
      EXPECT_EQ(prev, "#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_" + xyzw + ")")
          << line;
      EXPECT_EQ(select_prelude("v." + xyzw).swizzles, std::set<std::string>{xyzw}) << line;
      EXPECT_EQ(select_prelude("v." + rgba).swizzles, std::set<std::string>{xyzw}) << line;
    }
    prev = line;
  }
  EXPECT_EQ(members, (4 + 8 + 16) + (9 + 27 + 81) + (16 + 64 + 256));
}

// ---- Checks against the headers and compilers ----

// The prelude as shipped (the embedded files), written to a folder for the host compiler.
const fs::path& prelude_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("alloy_prelude_sel_" + std::to_string(::getpid()));
    for (const auto& f : alloy::prelude::embedded_files()) {
      fs::create_directories((d / f.path).parent_path());
      std::ofstream(d / f.path, std::ios::binary) << f.text;
    }
    return d;
  }();
  return dir;
}

std::string host_cxx() {
  const char* env = std::getenv("ALLOY_CXX");
  std::string cxx = env && *env ? env : "c++";
  if (std::system((cxx + " --version > /dev/null 2>&1").c_str()) != 0) return "";
  return cxx;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs the host compiler on `source` with `flags`; returns its exit status, output in *log.
int host_compile(const std::string& cxx, const std::string& source, const std::string& flags,
                 std::string* log, const std::string& name = "unit") {
  fs::path src = prelude_dir() / (name + ".cpp");
  fs::path out = prelude_dir() / (name + ".out");
  std::ofstream(src) << source;
  std::string cmd = cxx + " -std=c++20 " + flags + " -I" + prelude_dir().string() + " " +
                    src.string() + " > " + out.string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  *log = read_file(out);
  return rc;
}

std::set<std::string> identifiers(const std::string& text) {
  std::set<std::string> ids;
  for (const auto& t : alloy::msl::lex(text))
    if (t.kind == alloy::msl::TokKind::ident) ids.insert(t.text);
  return ids;
}

// Names in an optional header that are not API: parameters, locals, members, helpers. Anything
// else an optional header adds must select its part (a new function needs a rule in
// msl/prelude_select.cpp, or, if internal, a place here).
const std::map<std::string, std::set<std::string>>& internal_names() {
  static const std::map<std::string, std::set<std::string>> m = {
      {"INTEGER", {"W", "insert", "int_t", "low_mask", "offset", "width_c"}},
      {"ATOMIC",
       {"atomic_ptr", "failure", "fence_after", "fence_before", "flags", "obj", "ok", "order",
        "scope", "success"}},
      {"SYNC", {"flags", "scope"}},
      {"SIMD",
       {"below",    "data",   "delta",  "exclusive_scan", "filling",    "from_data",   "have",
        "identity", "incl",   "lane",   "last",           "live",       "lowest_lane", "modulo",
        "op_and",   "op_max", "op_min", "op_or",          "op_product", "op_sum",      "op_xor",
        "prev",     "scan",   "shift",  "vote_t"}},
      {"MATRIX",
       {"Cols",
        "Rows",
        "acc0",
        "acc1",
        "ak",
        "arow",
        "bk",
        "col",
        "cols",
        "columns",
        "elements_per_row",
        "j",
        "matrix_origin",
        "minor",
        "row",
        "sg_col",
        "sg_lane",
        "sg_row",
        "term",
        "thread_elements",
        "transpose_matrix"}},
      {"MLX",
       {"IdxT", "NDIM", "a_strides", "b_strides", "c_strides", "elem_", "expm1f", "finite_max",
        "finite_min", "im", "imag", "loc", "log1pf", "ndim", "re", "real", "shape", "stride",
        "strides"}},
      {"METAL_INTERNAL", {"Mode", "e", "fill", "k", "lane", "modulo", "delta"}},
  };
  return m;
}

// C++ keywords an optional header may be the only one to use.
const std::set<std::string>& keywords() {
  static const std::set<std::string> k = {"alignas",     "alignof",      "auto",
                                          "bool",        "break",        "case",
                                          "char",        "class",        "const",
                                          "const_cast",  "constexpr",    "continue",
                                          "decltype",    "default",      "do",
                                          "double",      "dynamic_cast", "else",
                                          "enum",        "explicit",     "false",
                                          "float",       "for",          "if",
                                          "inline",      "int",          "long",
                                          "mutable",     "namespace",    "noexcept",
                                          "nullptr",     "operator",     "reinterpret_cast",
                                          "return",      "short",        "signed",
                                          "sizeof",      "static",       "static_assert",
                                          "static_cast", "struct",       "switch",
                                          "template",    "this",         "true",
                                          "typedef",     "typename",     "union",
                                          "unsigned",    "using",        "void",
                                          "volatile",    "while"};
  return k;
}

std::string select_defines(const std::set<std::string>& parts) {
  std::string d =
      "#define ALLOY_SELECT 1\n#define ALLOY_SWIZZLES_ALL 1\n#define ALLOY_MATH_ALL 1\n";
  for (const auto& p : parts) d += "#define ALLOY_NEED_" + p + " 1\n";
  return d;
}

// Preprocesses the prelude (CUDA target: no system headers) with everything but `part` (and the
// parts that include it); the identifiers that disappear are what the part's header adds. Each
// must select the part, or be internal.
TEST(PreludeSelection, RulesCoverWhatTheHeadersDeclare) {
  std::string cxx = host_cxx();
  if (cxx.empty()) GTEST_SKIP() << "no host compiler";
  auto preprocess = [&](const std::string& defines, std::set<std::string>* ids) {
    std::string log;
    int rc = host_compile(cxx, defines + "#include \"metal_stdlib.h\"\n",
                          "-E -P -dD -D__CUDACC_RTC__", &log, "pp");
    ASSERT_EQ(rc, 0) << log;
    *ids = identifiers(log);
  };
  const auto& parts = alloy::msl::prelude_parts();
  std::set<std::string> full;
  preprocess(select_defines(parts), &full);
  for (const auto& part : parts) {
    std::set<std::string> others = parts;
    others.erase(part);
    if (part == "ATOMIC") others.erase("SYNC");          // sync.h includes atomic.h
    if (part == "SIMD") others.erase("METAL_INTERNAL");  // metal_internal.h brings simd.h
    std::set<std::string> reduced;
    preprocess(select_defines(others), &reduced);
    int added = 0;
    for (const auto& id : full) {
      if (reduced.count(id) || id.rfind("alloy_", 0) == 0 || id.rfind("ALLOY_", 0) == 0 ||
          keywords().count(id))
        continue;
      ++added;
      if (internal_names().at(part).count(id)) continue;
      // Removing SIMD also removes metal_internal.h (it needs simd.h): its names select it.
      if (part == "SIMD" && (internal_names().at("METAL_INTERNAL").count(id) ||
                             includes_part(select_prelude(id), "METAL_INTERNAL")))
        continue;
      EXPECT_TRUE(includes_part(select_prelude(id), part))
          << id << " (declared with " << part << ") does not select it";
    }
    EXPECT_GT(added, 5) << part;  // the check saw the header
  }
}

// One use of each part, which must select that part and compile with just it (and the core).
const std::map<std::string, std::string>& part_uses() {
  static const std::map<std::string, std::string> m = {
      {"INTEGER",
       "uint a = popcount(x) + clz(x) + extract_bits(x, 2u, 3u) + rotate(x, 3u);\n"
       "int2 b = addsat(int2(int(x)), int2(5)) + mulhi(int2(3), int2(int(x)));\n"
       "o[0] = float(a) + float(b.x);\n"},
      {"ATOMIC",
       "atomic_int* c = (atomic_int*)q;\n"
       "int old = atomic_fetch_add_explicit(c, 1, memory_order_relaxed);\n"
       "atomic_store_explicit(c, old, memory_order_relaxed);\n"},
      {"SYNC",
       "threadgroup_barrier(mem_flags::mem_threadgroup);\n"
       "simdgroup_barrier(mem_flags::mem_none);\n"
       "atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst);\n"},
      {"SIMD",
       "float s = simd_sum(o[0]) + simd_shuffle_down(o[1], 1u) + quad_sum(o[2]);\n"
       "float4 v = simd_max(float4(s));\n"
       "o[0] = v.x + float(simd_ballot(s > 0).all());\n"},
      {"MATRIX",
       "float3x3 m = float3x3(1.0f);\n"
       "o[0] = determinant(transpose(m)) + (m * float3(o[1])).x;\n"
       "simdgroup_float8x8 a = make_filled_simdgroup_matrix<float, 8, 8>(o[2]), b;\n"
       "simdgroup_multiply(b, a, a);\n"
       "simdgroup_store(b, o, 8);\n"},
      {"MLX",
       "complex64_t z = complex64_t(o[0], o[1]) * complex64_t(2.0f, 1.0f);\n"
       "int shape[2] = {2, 3};\n"
       "int64_t strides[2] = {3, 1};\n"
       "o[0] = z.real + float(elem_to_loc(x, shape, strides, 2)) + log1p(o[1]) + "
       "Limits<float>::max + ceildiv(x, 2u);\n"},
      {"METAL_INTERNAL",
       "float e = __metal_exp(o[0], __METAL_MAYBE_FAST_MATH__) + __metal_fma(o[1], o[2], o[3]);\n"
       "o[0] = e + __metal_simd_sum(o[1]) + __metal_simd_shuffle(o[2], ushort(1));\n"},
  };
  return m;
}

std::string unit(const std::string& defines, const std::string& body) {
  return defines +
         "#include \"metal_stdlib.h\"\nnamespace metal {\n"
         "ALLOY_FN void use(float* o, int* q, uint x) {\n" +
         body + "}\n}  // namespace metal\n";
}

// Compiles `src` with the host compiler and NVRTC (those available) and expects `ok`.
class UnitCompiler {
 public:
  UnitCompiler() : cxx_(host_cxx()), nvrtc_(alloy::cuda::nvrtc::available()) {
    for (const auto& f : alloy::prelude::embedded_files())
      headers_.push_back({f.path.data(), f.text.data()});
  }
  bool any() const { return !cxx_.empty() || nvrtc_; }
  void check(const std::string& what, const std::string& src, bool ok, bool host = true,
             const std::vector<std::string>& nvrtc_options = {}) {
    if (host && !cxx_.empty()) {
      std::string log;
      int rc = host_compile(cxx_, src, "-fsyntax-only", &log);
      EXPECT_EQ(rc == 0, ok) << what << " (host compiler)\n" << src << log;
    }
    if (nvrtc_) {
      bool compiled = true;
      std::string log;
      std::vector<std::string> options = {"--gpu-architecture=compute_90", "--std=c++17",
                                          "-default-device"};
      options.insert(options.end(), nvrtc_options.begin(), nvrtc_options.end());
      try {
        alloy::cuda::nvrtc::compile(src, "unit.cu", headers_, options, /*cubin=*/false);
      } catch (const alloy::cuda::nvrtc::CompileFailure& e) {
        compiled = false;
        log = e.log();
      }
      EXPECT_EQ(compiled, ok) << what << " (NVRTC)\n" << src << log;
    }
  }

 private:
  std::string cxx_;
  bool nvrtc_;
  std::vector<alloy::cuda::nvrtc::Header> headers_;
};

// The parts are self-contained (core + the part), for the host compiler and NVRTC; a use
// compiled without its part fails (the checks can fail).
TEST(PreludeSelection, EachPartCompilesAlone) {
  UnitCompiler c;
  if (!c.any()) GTEST_SKIP() << "no host compiler and no NVRTC";
  const std::string core = "o[0] = exp(o[1]);\n";
  EXPECT_TRUE(select_prelude(core).needs.empty());
  c.check("core only", unit(prelude_defines(select_prelude(core)), core), true);
  for (const auto& [part, body] : part_uses()) {
    PreludeSelection s = select_prelude(body);
    EXPECT_TRUE(s.needs.count(part)) << part;
    c.check(part, unit(prelude_defines(s), body), true);
    s.needs.erase(part);
    c.check(part + " left out", unit(prelude_defines(s), body), false);
  }
  // Swizzles: the named ones are there, readable and writable; the others are not.
  const std::string swz = "float4 v = float4(o[0]);\nv.zyx = v.xyy;\no[0] = v.bgr[0] + v.xy[1];\n";
  PreludeSelection s = select_prelude(swz);
  EXPECT_EQ(s.swizzles, set_of({"xy", "xyy", "zyx"}));
  c.check("swizzles", unit(prelude_defines(s), swz), true);
  s.swizzles.erase("xyy");
  c.check("swizzle left out", unit(prelude_defines(s), swz), false);
  // Pasted vector type names: no swizzle member besides the ones named.
  const std::string pasted =
      "#define V(T) T##4 v##T = T##4(o[0]); v##T.zyx = v##T.xxy; o[1] = float(v##T.w);\n"
      "V(float)\nV(half)\n";
  s = select_prelude(pasted);
  EXPECT_FALSE(s.all_swizzles);
  c.check("pasting", unit(prelude_defines(s), pasted), true);
}

TEST(PreludeSelection, MathFunctionsAndWhatTheyCall) {
  EXPECT_EQ(select_prelude("y = clamp(x, 0, 1);").math, set_of({"clamp", "min", "max"}));
  EXPECT_EQ(select_prelude("y = metal::precise::distance(a, b);").math,
            set_of({"distance", "length", "sqrt", "dot"}));
  EXPECT_EQ(select_prelude("y = abs(x) + isnormal(x);").math,
            set_of({"abs", "fabs", "isnormal", "isfinite"}));
  // Parts bring what they call: simd_max calls max, simdgroup matrices dot and cross.
  EXPECT_EQ(select_prelude("y = simd_max(x);").math, set_of({"min", "max"}));
  EXPECT_EQ(select_prelude("float3x3 m;").math, set_of({"dot", "cross"}));
  // Every guarded function of math.h is known, and the other way round.
  std::string math_h;
  for (const auto& f : alloy::prelude::embedded_files())
    if (f.path == "metal/math.h") math_h = f.text;
  std::set<std::string> guarded;
  for (size_t p = 0; (p = math_h.find("defined(ALLOY_USE_", p)) != std::string::npos;) {
    p += 18;
    guarded.insert(math_h.substr(p, math_h.find(')', p) - p));
  }
  EXPECT_EQ(guarded, alloy::msl::prelude_math_functions());
}

// Each math function, used alone on float, half and vectors, compiles with what its name selects
// (in both math modes for those that differ). A left-out callee would be a deleted stand-in and
// fail, never reach the C library's function of that name.
TEST(PreludeSelection, EachMathFunctionCompilesAlone) {
  if (!alloy::cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not available";
  UnitCompiler c;
  const std::string one = "F(f) + F(h) + F(v).x";
  const std::string two = "F(f, f) + F(h, h) + F(v, v).x";
  const std::string three = "F(f, f, f) + F(h, h, h) + F(v, v, v).x";
  const std::map<std::string, std::string> uses = {
      {"ldexp", "ldexp(f, 2) + ldexp(h, 2) + ldexp(v, int2(2)).x"},
      {"ilogb", "ilogb(f) + ilogb(h)"},
      {"frexp", "frexp(f, e) + frexp(h, e) + frexp(v, e2).x"},
      {"modf", "modf(f, f) + modf(h, h) + modf(v, v).x"},
      {"sincos", "sincos(f, f) + sincos(h, h) + sincos(v, v).x"},
      {"isordered", "isordered(f, f) + isunordered(h, h)"},
      {"isunordered", "isunordered(f, f) + isunordered(h, h)"},
      {"dot", "dot(v, v) + dot(hv, hv)"},
      {"length", "length(v) + length(hv)"},
      {"length_squared", "length_squared(v) + length_squared(hv)"},
      {"normalize", "normalize(v).x + normalize(hv).x"},
      {"distance", "distance(v, v) + distance(hv, hv)"},
      {"distance_squared", "distance_squared(v, v) + distance_squared(hv, hv)"},
      {"cross", "cross(v3, v3).x"},
      {"reflect", "reflect(v, v).x"},
      {"faceforward", "faceforward(v, v, v).x"},
      {"refract", "refract(v, v, f).x"},
  };
  const std::set<std::string> two_args = {"atan2", "fmod", "copysign", "fdim", "fmin",
                                          "fmax",  "step", "pow",      "powr", "divide",
                                          "min",   "max",  "nextafter"};
  const std::set<std::string> three_args = {"fma",        "mix",   "fmin3", "fmax3", "fmedian3",
                                            "smoothstep", "clamp", "min3",  "max3",  "median3"};
  const std::set<std::string> modes = {"exp",    "exp2",     "exp10",     "log",    "log2",
                                       "log10",  "sqrt",     "rsqrt",     "sin",    "cos",
                                       "tan",    "pow",      "powr",      "divide", "sincos",
                                       "length", "distance", "normalize", "refract"};
  for (const auto& fn : alloy::msl::prelude_math_functions()) {
    std::string expr;
    if (auto u = uses.find(fn); u != uses.end())
      expr = u->second;
    else
      expr = three_args.count(fn) ? three : two_args.count(fn) ? two : one;
    for (size_t p; (p = expr.find('F')) != std::string::npos;) expr.replace(p, 1, fn);
    std::string body =
        "float f = o[0]; half h = half(o[1]); float2 v = float2(f); half2 hv = half2(h);\n"
        "float3 v3 = float3(f); int e; int2 e2;\no[2] = float(" +
        expr + ");\n";
    PreludeSelection s = select_prelude(body);
    EXPECT_TRUE(s.math.count(fn)) << fn;
    std::string src = unit(prelude_defines(s), body);
    c.check(fn, src, true, /*host=*/false);
    if (modes.count(fn))
      c.check(fn + " (fast)", src, true, /*host=*/false, {"-DALLOY_MATH_FAST", "-D__FAST_MATH__"});
  }
  // What clamp calls is needed: without min, the deleted stand-in fails (not ::min).
  c.check("clamp without min",
          unit("#define ALLOY_SELECT 1\n#define ALLOY_USE_clamp 1\n#define ALLOY_USE_max 1\n",
               "o[0] = clamp(o[1], 0.0f, 1.0f);\n"),
          false);
}

// The CPU prelude's half <-> float conversions as vectorised loops built for each x86 target the
// host can run: with F16C + AVX2 they are calls to the assembly vector variants of
// cpu/target.h (AVX-512: h2f 16 lanes, f2h 32 and 16; AVX2: h2f 8, f2h 16 and 8), otherwise the
// branch-free integer forms. Every half to float, and ties at every exponent, NaN payloads,
// infinities and random floats to half (and back), in chunks of every length 1..80 so that the
// loops also end in their narrower vector forms: bit-exact against alloy_portable.
TEST(PreludeCpuHalf, VectorVariantsExactOnEachTarget) {
#if defined(__x86_64__)
  const std::string cxx = host_cxx();
  if (cxx.empty()) GTEST_SKIP() << "no host compiler";
  const std::string driver = R"CPP(
#include "cpu/target.h"
#include "half_bits.h"
#include <stdio.h>
#include <stdlib.h>
    __attribute__((noinline)) void h2f_loop(const uint16_t* __restrict in, float* __restrict out,
                                            int n) {
      for (int i = 0; i < n; ++i) out[i] = alloy_target::f16_to_f32(in[i]);
    }
    __attribute__((noinline)) void f2h_loop(const float* __restrict in, uint16_t* __restrict out,
                                            int n) {
      for (int i = 0; i < n; ++i) out[i] = alloy_target::f32_to_f16(in[i]);
    }
    __attribute__((noinline)) void f2f_loop(const float* __restrict in, float* __restrict out, int n) {
      for (int i = 0; i < n; ++i) out[i] = alloy_target::f16_to_f32(alloy_target::f32_to_f16(in[i]));
    }
    int main() {
      static uint16_t h[65536], h2[1 << 18];
      static float f[65536], xs[1 << 18], r[1 << 18];
      int bad = 0;
      for (int i = 0; i < 65536; ++i) h[i] = (uint16_t)i;
      // chunks of every length 1..80, so loops end in every narrower vector form
      for (int b = 0, len = 1; b < 65536; b += len, len = len % 80 + 1)
        h2f_loop(h + b, f + b, b + len <= 65536 ? len : 65536 - b);
      for (int i = 0; i < 65536; ++i) {
        float w = alloy_portable::f16_bits_to_f32(h[i]);
        if (__builtin_memcmp(&w, &f[i], 4) && bad++ < 10) printf("h2f %04x\n", i);
      }
      static const uint32_t ms[] = {0u,      1u,      0xfffu,    0x1000u,   0x1001u,  0x2fffu,
                                    0x3000u, 0x3001u, 0x7fffffu, 0x400000u, 0x400001u};
      unsigned s = 12345;
      int n = 0;
      for (int e = 0; e < 256; ++e)  // every exponent: ties and neighbours of the 13 dropped bits
        for (uint32_t m : ms)
          for (uint32_t sg = 0; sg < 2; ++sg) {
            uint32_t u = sg << 31 | (uint32_t)e << 23 | m;
            __builtin_memcpy(&xs[n++], &u, 4);
          }
      while (n < (1 << 18)) {
        s = s * 1664525u + 1013904223u;
        uint32_t u = s ^ (s >> 7) * 2654435761u;
        __builtin_memcpy(&xs[n++], &u, 4);
      }
      for (int b = 0, len = 1; b < n; b += len, len = len % 80 + 1) {
        int l = b + len <= n ? len : n - b;
        f2h_loop(xs + b, h2 + b, l);
        f2f_loop(xs + b, r + b, l);
      }
      for (int i = 0; i < n; ++i) {
        uint16_t w = alloy_portable::f32_to_f16_bits(xs[i]);
        float wf = alloy_portable::f16_bits_to_f32(w);
        if (h2[i] != w && bad++ < 10) printf("f2h %a -> %04x want %04x\n", xs[i], h2[i], w);
        if (__builtin_memcmp(&wf, &r[i], 4) && bad++ < 10) printf("f2h2f %a\n", xs[i]);
      }
      printf(bad ? "bad %d\n" : "ok\n", bad);
      return bad != 0;
    }
  )CPP";
  __builtin_cpu_init();
  // F16C from CPUID (leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  std::vector<std::string> targets = {"-msse2"};
  if (__builtin_cpu_supports("avx") && f16c) targets.push_back("-mavx -mf16c");
  if (__builtin_cpu_supports("avx2") && f16c) targets.push_back("-mavx2 -mfma -mf16c");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && f16c)
    targets.push_back("-march=x86-64-v4 -mf16c");
  for (const std::string& t : targets) {
    const fs::path bin = prelude_dir() / "half_variants";
    std::string log;
    int rc = host_compile(cxx, driver,
                          "-O2 -fno-math-errno -fno-trapping-math -fvect-cost-model=dynamic " + t +
                              " -o " + bin.string(),
                          &log, "half_variants");
    ASSERT_EQ(rc, 0) << t << ":\n" << log;
    const fs::path out = prelude_dir() / "half_variants.run";
    rc = std::system((bin.string() + " > " + out.string() + " 2>&1").c_str());
    EXPECT_EQ(rc, 0) << t << ":\n" << read_file(out);
  }
#else
  GTEST_SKIP() << "x86 only";
#endif
}

}  // namespace
