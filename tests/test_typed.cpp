// The typed front end (include/alloy/analyze.h, src/typed): Clang's AST of a kernel's CPU
// translation. Metal's conversion rules checked over the conformance kernels of
// tests/conformance/test_types.cpp and test_front_end.cpp (read from the test sources, so they are
// the very kernels the conformance suite runs), barrier/simd reach compared with the token-level
// scan the CPU backend uses over test_simd.cpp and test_threadgroup.cpp, errors at user lines, and
// the CLI's `translate --analyze`.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/analyze.h"
#include "typed/typed.h"

namespace {
using namespace alloy;

#define REQUIRE_CLANG()            \
  if (!typed_analysis_available()) \
  GTEST_SKIP() << "typed analysis: Clang 14 not found at build time"

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A raw string literal R"TAG(...)TAG" starting at `at`; returns its text and sets `end`.
std::string raw_string(const std::string& s, size_t at, size_t* end) {
  size_t open = s.find('(', at);
  std::string tag = s.substr(at + 2, open - at - 2);
  size_t close = s.find(")" + tag + "\"", open);
  *end = close + tag.size() + 2;
  return s.substr(open + 1, close - open - 1);
}

// The body of `metal_kernel("name", {...}, {...}, [std::string(CONST) +] R"MSL(...)MSL"
// [, R"MSL(header)MSL"])` in a conformance source (with the named constant's raw string in front
// where it is prepended); the header, if any, in `*header`.
std::string conformance_body(const std::string& file, const std::string& name,
                             std::string* header = nullptr) {
  std::string s = read_text(std::string(ALLOY_SOURCE_DIR) + "/tests/conformance/" + file);
  size_t at = s.find("metal_kernel(\"" + name + "\"");
  EXPECT_NE(at, std::string::npos) << name << " not found in " << file;
  if (at == std::string::npos) return "";
  size_t raw = s.find("R\"", at);
  std::string between = s.substr(at, raw - at);
  std::string prefix;
  size_t sc = between.find("std::string(");
  if (sc != std::string::npos) {
    size_t e = between.find(')', sc);
    std::string constant = between.substr(sc + 12, e - sc - 12);
    size_t def = s.find(constant + " = R\"");
    EXPECT_NE(def, std::string::npos) << constant;
    size_t unused = 0;
    prefix = raw_string(s, s.find("R\"", def), &unused);
  }
  size_t end = 0;
  std::string body = prefix + raw_string(s, raw, &end);
  size_t next = s.find_first_not_of(" \n", end);
  if (header && next != std::string::npos && s[next] == ',') {
    size_t h = s.find_first_not_of(" \n", next + 1);
    if (s.compare(h, 2, "R\"") == 0) *header = raw_string(s, h, &end);
  }
  return body;
}

struct CorpusKernel {
  std::string file, name;
  std::vector<std::string> inputs, outputs;
  std::vector<Dtype> input_dtypes, output_dtypes;
  TemplateArgs targs = {};
  std::vector<Shape> input_shapes = {};
};

Analysis analyze_corpus(const CorpusKernel& c) {
  std::string header;
  std::string body = conformance_body(c.file, c.name, &header);
  auto k = metal_kernel(c.name, c.inputs, c.outputs, body, header);
  std::vector<Array> inputs;
  for (size_t i = 0; i < c.input_dtypes.size(); ++i)
    inputs.push_back(zeros(i < c.input_shapes.size() ? c.input_shapes[i] : Shape{64},
                           c.input_dtypes[i], Device::cpu()));
  KernelCall call;
  call.output_dtypes = c.output_dtypes;
  for (size_t i = 0; i < c.output_dtypes.size(); ++i) call.output_shapes.push_back({64});
  call.grid = {64, 1, 1};
  call.threadgroup = {32, 1, 1};
  call.template_args = c.targs;
  return analyze(k, inputs, call);
}

// Every kernel of tests/conformance/test_types.cpp (inputs and outputs as the tests call them).
std::vector<CorpusKernel> types_corpus() {
  const char* f = "test_types.cpp";
  return {
      {f, "types_int_scalars", {"x"}, {"out"}, {int32}, {int64}},
      {f, "types_long_int64", {"x"}, {"out", "uout"}, {int32}, {int64, uint64}},
      {f, "types_bool", {"x"}, {"flags", "code"}, {float32}, {bool_, int32}},
      {f, "types_half_arith", {"a", "b"}, {"out", "lost"}, {float16, float16}, {float16, float16}},
      {f,
       "types_promotion_static",
       {"a", "b", "c"},
       {"out"},
       {float16, float32, bfloat16},
       {float32}},
      {f, "types_half_float_promo", {"a", "b"}, {"out"}, {float16, float32}, {float32}},
      {f,
       "types_bfloat_arith",
       {"a", "b"},
       {"out", "lost"},
       {bfloat16, bfloat16},
       {bfloat16, bfloat16}},
      {f,
       "types_complex64",
       {"x", "y"},
       {"out", "parts"},
       {complex64, complex64},
       {complex64, float32}},
      {f, "types_as_type", {"x"}, {"bits", "neg"}, {float32}, {uint32, float32}},
      {f, "types_static_cast", {"x"}, {"iout", "fout"}, {float32}, {int32, float32}},
      {f, "types_numeric_limits", {"x"}, {"f", "l"}, {float32}, {float32, int64}},
      {f, "types_float_constants", {"x"}, {"out"}, {float32}, {float32}},
      {f, "types_more_constants", {"x"}, {"out"}, {float32}, {float32}},
      {f, "types_is_same", {"x"}, {"out"}, {float16}, {float32}, {{"T", float16}}},
      {f, "types_traits", {"x"}, {"out"}, {float16}, {float32}, {{"T", float16}}},
      {f, "types_float_literals", {"x"}, {"out"}, {float32}, {float32}},
  };
}

// "where op (operands) -> result" of each typed expression, for exact comparisons.
std::vector<std::string> summary(const KernelAnalysis& k) {
  std::vector<std::string> r;
  for (const TypedExpression& e : k.expressions) {
    std::string ops;
    for (const std::string& t : e.operand_types) ops += (ops.empty() ? "" : ",") + t;
    r.push_back(e.place.where + " " + e.op + " (" + ops + ") -> " + e.result_type);
  }
  return r;
}

// ---- Metal's rules and placing tokens (no Clang needed) ----------------------------------------

TEST(TypedFrontEnd, MetalConversionRules) {
  using typed::metal_result_type;
  EXPECT_EQ(metal_result_type("binary", "half", "float"), "float");
  EXPECT_EQ(metal_result_type("binary", "float", "half"), "float");
  EXPECT_EQ(metal_result_type("binary", "half", "int"), "half");
  EXPECT_EQ(metal_result_type("binary", "uint", "bfloat"), "bfloat");
  EXPECT_EQ(metal_result_type("binary", "bfloat", "float"), "float");
  EXPECT_EQ(metal_result_type("binary", "half", "bfloat"), "float");
  EXPECT_EQ(metal_result_type("binary", "half", "double"), "float");  // unsuffixed literal
  EXPECT_EQ(metal_result_type("conditional", "bfloat", "float"), "float");
  EXPECT_EQ(metal_result_type("conditional", "half", "bool"), "half");
  EXPECT_EQ(metal_result_type("conditional", "int", "uint"), "uint");
  EXPECT_EQ(metal_result_type("conditional", "short", "ushort"), "int");
  EXPECT_EQ(metal_result_type("conditional", "long", "uint"), "long");
  EXPECT_EQ(metal_result_type("conditional", "int", "ulong"), "ulong");
  EXPECT_EQ(metal_result_type("comparison", "half", "float"), "bool");
  EXPECT_EQ(metal_result_type("compound-assignment", "half", "float"), "half");
  EXPECT_EQ(metal_result_type("compound-assignment", "bfloat", "int"), "bfloat");
  EXPECT_EQ(metal_result_type("binary", "half", "float4"), "");  // vectors: not covered
}

TEST(TypedFrontEnd, UserColumnSkipsTranslatorInsertions) {
  using typed::user_column;
  std::string user = "  float r = (i % 2 == 0) ? v : -1e30f; x = y ? 1 : 2;";
  std::string tr =
      "  float r = (i % 2 == 0) ? static_cast< ::metal::alloy_detail::cond_t<decltype((v)), "
      "decltype((-1e30f))>>( v ): static_cast< ::metal::alloy_detail::cond_t<decltype((-1e30f)), "
      "decltype((v))>>( -1e30f); x = y ? 1 : 2;";
  size_t q2 = tr.rfind('?');
  EXPECT_EQ(user_column(tr, static_cast<int>(tr.find('?')) + 1, user, "?"),
            static_cast<int>(user.find('?')) + 1);
  EXPECT_EQ(user_column(tr, static_cast<int>(q2) + 1, user, "?"),
            static_cast<int>(user.rfind('?')) + 1);
  // `1e-3` holds a '-' that is no operator.
  EXPECT_EQ(user_column("a = 1e-3f - h;", 11, "a = 1e-3 - h;", "-"), 10);
  EXPECT_EQ(user_column("a = b - c;", 3, "a = b - c - d;", "-"), 0);  // lines differ: unknown
}

// The report states each expression's verdict: a mismatch names Metal's type.
TEST(TypedFrontEnd, ReportNamesMismatches) {
  Analysis a;
  KernelAnalysis k;
  k.kernel = "kern";
  k.function = "kern<half>";
  k.token_sync_path = "loop (no barrier or simd function seen)";
  auto expression = [](int line, int column, std::string op, std::string result, bool agrees) {
    TypedExpression e;
    e.place.line = line;
    e.place.column = column;
    e.place.where = "body line " + std::to_string(line);
    e.kind = "binary";
    e.op = std::move(op);
    e.operand_types = {"half", "int"};
    e.result_type = std::move(result);
    e.metal_type = "half";
    e.agrees = agrees;
    e.function = "kern<half>";
    return e;
  };
  k.expressions.push_back(expression(3, 12, "*", "half", true));
  k.expressions.push_back(expression(4, 9, "+", "float", false));
  SyncCall c;
  c.name = "simd_sum";
  c.place.line = 5;
  c.place.column = 7;
  c.place.where = "body line 5";
  c.function = "kern<half>";
  k.sync_calls.push_back(c);
  a.kernels = {k};
  std::string r = a.report();
  EXPECT_NE(r.find("body line 3:12 binary '*' (half, int) -> half [Metal: half, agrees]"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("body line 4:9 binary '+' (half, int) -> float [MISMATCH: Metal gives half]"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("simd simd_sum at body line 5:7 in kern<half>"), std::string::npos) << r;
}

// ---- (a) typed expressions over the conformance kernels -----------------------------------------

// Every kernel of tests/conformance/test_types.cpp: whatever mixed expression the analysis finds
// has Metal's type, and no kernel reaches a barrier or simd function (the token scan agrees).
// For ConformanceTypes.PromotionTypes / HalfFloatPromotionValues / HalfArithmetic /
// BfloatArithmetic: exactly the mixed expressions, with the Metal result types their
// static_asserts and references state.
TEST(TypedFrontEnd, ConformanceTypesConversions) {
  REQUIRE_CLANG();
  std::map<std::string, std::vector<std::string>> expected = {
      {"types_promotion_static",
       {"body line 6 * (half,float) -> float", "body line 7 - (float,half) -> float",
        "body line 9 + (half,int) -> half", "body line 10 * (half,float) -> float",
        "body line 12 * (bfloat,float) -> float"}},
      {"types_half_float_promo",
       {"body line 5 * (half,float) -> float", "body line 5 - (float,half) -> float",
        "body line 5 * (half,float) -> float"}},
      {"types_half_arith",
       {"body line 9 += (half,half) -> half", "body line 10 *= (half,half) -> half"}},
      {"types_bfloat_arith", {}},
  };
  int expressions = 0, checked = 0;
  for (const CorpusKernel& c : types_corpus()) {
    SCOPED_TRACE(c.name);
    Analysis a = analyze_corpus(c);
    ASSERT_EQ(a.kernels.size(), 1u);
    if (expected.count(c.name)) {
      EXPECT_EQ(summary(a.kernels[0]), expected[c.name]) << a.report();
      ++checked;
    }
    for (const TypedExpression& e : a.kernels[0].expressions) {
      EXPECT_TRUE(e.agrees) << a.report();
      EXPECT_GT(e.place.column, 0) << e.place.where << " " << e.op;
      ++expressions;
    }
    EXPECT_FALSE(a.kernels[0].reaches_sync()) << a.report();
    EXPECT_FALSE(a.kernels[0].token_sync) << a.report();
  }
  EXPECT_EQ(checked, 4);
  EXPECT_GE(expressions, 10);
}

// Issue 10's reproducer 1 (ConformanceFrontEnd.ConditionalMixesHalfBfloatAndFloat) for every T:
// each conditional's Metal type, per template instantiation.
TEST(TypedFrontEnd, ConditionalsPerInstantiation) {
  REQUIRE_CLANG();
  std::string body = conformance_body("test_front_end.cpp", "fe_conditional");
  auto k = metal_kernel("fe_conditional", {"a", "b"}, {"o"}, body);
  for (auto [t, name] : {std::pair{float16, "half"}, std::pair{bfloat16, "bfloat"}}) {
    std::string tn = name;
    SCOPED_TRACE(tn);
    KernelCall call;
    call.output_shapes = {{64}};
    call.output_dtypes = {float32};
    call.grid = {64, 1, 1};
    call.threadgroup = {32, 1, 1};
    call.template_args = {{"T", t}};
    Analysis a =
        analyze(k, {zeros({64}, t, Device::cpu()), zeros({64}, float16, Device::cpu())}, call);
    ASSERT_EQ(a.kernels.size(), 1u);
    std::vector<std::string> want = {
        "body line 4 ?: (" + tn + ",float) -> float",
        "body line 5 ?: (" + tn + ",float) -> float",  // -1e30: an unsuffixed literal is float
        "body line 6 ?: (" + tn + ",int) -> " + tn,
        "body line 7 ?: (float," + tn + ") -> float",
    };
    // `i % 3 == 0 ? v : -v` has one type; the half/T conditional: half with half is no mix.
    if (tn == "bfloat") want.push_back("body line 8 ?: (half,bfloat) -> float");
    EXPECT_EQ(summary(a.kernels[0]), want) << a.report();
    for (const TypedExpression& e : a.kernels[0].expressions) EXPECT_TRUE(e.agrees) << a.report();
  }
}

// ---- (b) barriers and simd functions reached, against the token scan ---------------------------

std::vector<CorpusKernel> sync_corpus() {
  const char* s = "test_simd.cpp";
  const char* t = "test_threadgroup.cpp";
  return {
      {s, "simd_partial_3d", {"x"}, {"out"}, {float32}, {float32}},
      {s, "simd_float_reductions", {"x"}, {"out"}, {float32}, {float32}},
      {s, "simd_int_reductions", {"x", "u"}, {"out"}, {int32, uint32}, {int64}},
      {s, "simd_votes_broadcasts", {"x"}, {"out", "ballot"}, {float32}, {float32, uint64}},
      {s, "simd_shuffles", {"x"}, {"out"}, {float32}, {float32}},
      {s, "simd_vectors", {"x", "ix"}, {"out"}, {float32, int32}, {float32}},
      {s, "simd_prefix", {"x", "ix"}, {"out", "iout"}, {float32, int32}, {float32, int32}},
      {s, "simd_after_return", {"x"}, {"out"}, {float32}, {float32}},
      {s, "simd_shuffle_64", {"x"}, {"u", "s", "b"}, {uint32}, {uint64, int64, int32}},
      {s, "simd_typed", {"x"}, {"out"}, {bfloat16}, {float32}, {{"T", bfloat16}}},
      {s, "simd_half_sum", {"x"}, {"out"}, {float16}, {float16}},
      {t, "tg_barrier_mem_device", {"x"}, {"stage", "out"}, {float32}, {float32, float32}},
      {t, "tg_simdgroup_barrier", {"x"}, {"out"}, {float32}, {float32}},
      {t, "tg_several_2d", {"x"}, {"out"}, {float32}, {float32}, {}, {{8, 8}}},
      {t, "tg_scalar_struct", {"x"}, {"out"}, {float32}, {float32}},
      {t, "tg_pointer_helpers", {"x"}, {"out"}, {float32}, {float32}},
      {t,
       "tg_fence_last_group",
       {"x"},
       {"sums", "counter", "total"},
       {float32},
       {float32, uint32, float32}},
  };
}

// Per kernel: the typed reach (calls followed through helpers) and the token scan (which kernels
// the CPU runs with barrier support) agree on every conformance barrier/simd kernel; each call
// found is on a user line that names it.
TEST(TypedFrontEnd, ReachAgreesWithTokenScanOnConformanceKernels) {
  REQUIRE_CLANG();
  int with_sync = 0;
  for (const CorpusKernel& c : sync_corpus()) {
    SCOPED_TRACE(c.name);
    Analysis a = analyze_corpus(c);
    ASSERT_EQ(a.kernels.size(), 1u);
    const KernelAnalysis& k = a.kernels[0];
    // Single-kernel sources: the token scan's per-translation answer is this kernel's.
    EXPECT_EQ(k.reaches_sync(), k.token_sync) << a.report();
    with_sync += k.reaches_sync();
    if (c.name == "tg_pointer_helpers") {  // barriers in a header function template it calls
      int in_helper = 0;
      for (const SyncCall& s : k.sync_calls) in_helper += s.function == "block_sum<float>";
      EXPECT_EQ(in_helper, 3) << a.report();
    }
    for (const SyncCall& s : k.sync_calls) {
      EXPECT_TRUE(s.place.where.starts_with("body line") ||
                  s.place.where.starts_with("header line"))
          << a.report();
      EXPECT_GT(s.place.column, 0) << s.name;
    }
  }
  // Every kernel of this corpus uses barriers or simd functions.
  EXPECT_EQ(with_sync, static_cast<int>(sync_corpus().size()));
}

// A library: reach through a helper, per kernel (the token scan answers per translation: every
// kernel of a source with a barrier anywhere runs with barrier support - the one difference),
// and typed expressions per template instantiation.
TEST(TypedFrontEnd, LibraryReachPerKernelAndInstantiations) {
  REQUIRE_CLANG();
  const char* src = R"MSL(#include <metal_stdlib>
using namespace metal;
float helper(float x) {
  return simd_sum(x) + simd_shuffle_down(x, 1u);
}
template <typename T>
kernel void scale(device T* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  T v = o[i];
  o[i] = v * 2 + (i % 2 ? v : 1.5f);
}
template [[host_name("scale_half")]] [[kernel]] decltype(scale<half>) scale<half>;
template [[host_name("scale_float")]] [[kernel]] decltype(scale<float>) scale<float>;
kernel void reduce(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  o[i] = helper(o[i]);
  threadgroup_barrier(mem_flags::mem_device);
}
)MSL";
  LibraryOptions opt;
  opt.name = "typed_lib";
  Analysis a = analyze_library(src, opt);
  ASSERT_EQ(a.kernels.size(), 3u) << a.report();
  std::map<std::string, const KernelAnalysis*> by;
  for (auto& k : a.kernels) by[k.kernel] = &k;
  ASSERT_TRUE(by.count("scale_half") && by.count("scale_float") && by.count("reduce"));
  const KernelAnalysis& r = *by["reduce"];
  ASSERT_EQ(r.sync_calls.size(), 3u) << a.report();
  EXPECT_EQ(r.sync_calls[0].name, "simd_sum");  // in source order
  EXPECT_EQ(r.sync_calls[0].place.where, "line 4");
  EXPECT_EQ(r.sync_calls[0].place.column, 10);
  EXPECT_EQ(r.sync_calls[0].function, "helper");
  EXPECT_EQ(r.sync_calls[1].name, "simd_shuffle_down");
  EXPECT_EQ(r.sync_calls[2].name, "threadgroup_barrier");
  EXPECT_TRUE(r.sync_calls[2].barrier);
  EXPECT_EQ(r.sync_calls[2].place.where, "line 15");
  // The difference: scale_* reach nothing, the token scan gives them barrier support too.
  EXPECT_FALSE(by["scale_half"]->reaches_sync());
  EXPECT_FALSE(by["scale_float"]->reaches_sync());
  EXPECT_TRUE(by["scale_half"]->token_sync);
  EXPECT_TRUE(r.token_sync);
  EXPECT_EQ(
      summary(*by["scale_half"]),
      (std::vector<std::string>{"line 9 * (half,int) -> half", "line 9 + (half,float) -> float",
                                "line 9 ?: (half,float) -> float"}))
      << a.report();
  EXPECT_EQ(by["scale_half"]->function, "scale<half>");
  EXPECT_EQ(by["scale_float"]->function, "scale<float>");
  EXPECT_TRUE(summary(*by["scale_float"]).empty()) << a.report();
}

// ---- errors, CLI, cold path
// ----------------------------------------------------------------------

TEST(TypedFrontEnd, ErrorsPointAtUserLines) {
  REQUIRE_CLANG();
  auto k = metal_kernel("typed_bad", {"a"}, {"o"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float v = a[i];
    o[i] = v + not_declared_here;
  )MSL");
  KernelCall call;
  call.output_shapes = {{8}};
  call.output_dtypes = {float32};
  call.grid = {8, 1, 1};
  call.threadgroup = {8, 1, 1};
  try {
    analyze(k, {zeros({8}, float32, Device::cpu())}, call);
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("body line 4"), std::string::npos) << what;
    EXPECT_NE(what.find("not_declared_here"), std::string::npos) << what;
    EXPECT_EQ(what.find("alloy-typed"), std::string::npos) << what;  // no internal file names
  }
}

TEST(TypedFrontEnd, WithoutClangSaysNotSupported) {
  if (typed_analysis_available()) GTEST_SKIP() << "this build has Clang";
  LibraryOptions opt;
  EXPECT_THROW(analyze_library("kernel void f(device float* o [[buffer(0)]]) {}", opt),
               NotSupported);
}

#ifdef ALLOY_CLI_PATH
TEST(TypedFrontEnd, CliTranslateAnalyze) {
  REQUIRE_CLANG();
  std::string dir = ::testing::TempDir();
  std::string lib = dir + "/typed_cli.metal";
  std::ofstream(lib) << "#include <metal_stdlib>\nusing namespace metal;\n"
                        "kernel void k(device half* o [[buffer(0)]], uint i "
                        "[[thread_position_in_grid]]) {\n"
                        "  half h = o[i];\n"
                        "  o[i] = i % 2 ? h : 0.5f;\n"
                        "  simdgroup_barrier(mem_flags::mem_none);\n"
                        "}\n";
  std::string cmd = std::string(ALLOY_CLI_PATH) + " translate --analyze --library " + lib;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("barrier simdgroup_barrier at line 6:3"), std::string::npos) << out;
  EXPECT_NE(out.find("line 5:16 conditional '?:' (half, float) -> float [Metal: float, agrees]"),
            std::string::npos)
      << out;
}
#endif

}  // namespace
