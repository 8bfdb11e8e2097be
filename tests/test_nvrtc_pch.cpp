// NVRTC's automatic precompiled header for translated kernels (nvrtc::auto_pch_options,
// src/backend/cuda/jit.cpp; docs/performance.md, item 1, h-cudafirst3): the image is the same
// with and without it, whether the PCH is made or reused and whatever other selections made PCHs
// before; the options follow the policy (NVRTC 12.8+, a limit of distinct directive prefixes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/tiered.h"
#include "conformance/harness.h"
#include "core/backend.h"
#include "core/prelude_files.h"
#include "kernel/custom_kernel.h"
#include "kernel/program.h"
#include "msl/prelude_select.h"
#include "nvrtc_pch_folders.h"

namespace {

using namespace alloy;

bool nvrtc_has_pch() {
  if (!cuda::nvrtc::available()) return false;
  auto v = cuda::nvrtc::version();
  return v.major > 12 || (v.major == 12 && v.minor >= 8);
}

std::vector<cuda::nvrtc::Header> prelude_headers() {
  std::vector<cuda::nvrtc::Header> h;
  for (const auto& f : prelude::embedded_files()) h.push_back({f.path.data(), f.text.data()});
  return h;
}

struct Kernel {
  const char* name;
  const char* source;
};

// Different selections (each its own directive prefix, so its own PCH).
const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel> k = {
      {"expsin", "uint i = thread_position_in_grid.x;\nout[i] = exp(sin(inp[i]));\n"},
      {"expcos", "uint i = thread_position_in_grid.x;\nout[i] = exp(cos(inp[i]));\n"},
      {"vec",
       "uint2 p = uint2(thread_position_in_grid.xy);\nfloat4 v = float4(inp[p.x]);\n"
       "v = v * float4(1, 2, 3, 4) + 0.5f;\nout[p.x] = dot(v, float4(1.0f));\n"},
      {"clamp", "uint i = thread_position_in_grid.x;\nout[i] = clamp(inp[i], -0.5f, 0.5f);\n"},
  };
  return k;
}

cuda::KernelSource source_of(const Kernel& kernel, bool quick) {
  const int n = 1 << 20;
  auto k = metal_kernel(kernel.name, {"inp"}, {"out"}, kernel.source);
  Array x =
      Array::from_doubles(conformance::random_values(n, -2, 2, 11), {n}, float32, Device::cpu());
  KernelCall c;
  c.output_shapes = {{n}};
  c.output_dtypes = {float32};
  c.grid = {n, 1, 1};
  c.threadgroup = {256, 1, 1};
  kernel::SourceMap map;
  msl::Translation tr = kernel::call_gpu_translation(k, {x}, c, &map);
  CompileRequest r = kernel::compile_request(tr, map, "safe");
  auto q = cuda::quick_kernel_source(r);
  return quick && q ? *q : cuda::kernel_source(r);
}

std::vector<std::string> options_of(const cuda::KernelSource& k, bool pch) {
  std::vector<std::string> o = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device"};
  o.insert(o.end(), k.options.begin(), k.options.end());
  if (pch)
    o.insert(o.end(),
             {std::string(cuda::nvrtc::kAutoPch), "--pch-messages=false", "-diag-suppress=20283"});
  return o;
}

// Each kernel's cubin and PTX (quick and full compiles): without the PCH options, then with them
// twice (the first makes the kernel's PCH, the second uses it), then, after every other kernel
// made its own PCH, once more: the same bytes every time.
TEST(NvrtcPch, SameImageWithAndWithoutThePch) {
  if (!nvrtc_has_pch()) GTEST_SKIP() << "NVRTC 12.8+ not found";
  const auto headers = prelude_headers();
  for (bool cubin : {true, false}) {
    for (bool quick : {true, false}) {
      std::vector<std::string> plain;
      for (const Kernel& k : kernels()) {
        cuda::KernelSource s = source_of(k, quick);
        std::string name = std::string(k.name) + (quick ? " quick" : " full");
        std::string want = cuda::nvrtc::compile_in_process(s.source, "kernel.cu", headers,
                                                           options_of(s, false), cubin);
        ASSERT_FALSE(want.empty()) << name;
        for (int i = 0; i < 2; ++i)
          EXPECT_EQ(cuda::nvrtc::compile_in_process(s.source, "kernel.cu", headers,
                                                    options_of(s, true), cubin),
                    want)
              << name << (cubin ? " cubin" : " PTX") << ", compile " << i << " with --pch";
        plain.push_back(std::move(want));
      }
      for (size_t i = 0; i < kernels().size(); ++i) {
        cuda::KernelSource s = source_of(kernels()[i], quick);
        EXPECT_EQ(cuda::nvrtc::compile_in_process(s.source, "kernel.cu", headers,
                                                  options_of(s, true), cubin),
                  plain[i])
            << kernels()[i].name << " again, after the other kernels' PCHs";
      }
    }
  }
}

// A PCH made for one selection is not used for another: exp(cos) compiles after exp(sin)'s PCH
// (cos is a deleted stand-in in exp(sin)'s prelude, so a wrong reuse fails to compile), and a
// kernel whose selection lacks a function it calls still fails with the PCH options.
TEST(NvrtcPch, ASelectionNeverUsesAnotherSelectionsPch) {
  if (!nvrtc_has_pch()) GTEST_SKIP() << "NVRTC 12.8+ not found";
  const auto headers = prelude_headers();
  cuda::KernelSource sin_k = source_of(kernels()[0], true), cos_k = source_of(kernels()[1], true);
  ASSERT_NE(cos_k.source.find("#define ALLOY_USE_cos 1"), std::string::npos) << cos_k.source;
  EXPECT_NO_THROW(cuda::nvrtc::compile_in_process(sin_k.source, "kernel.cu", headers,
                                                  options_of(sin_k, true), true));
  EXPECT_NO_THROW(cuda::nvrtc::compile_in_process(cos_k.source, "kernel.cu", headers,
                                                  options_of(cos_k, true), true));
  // exp(sin)'s directive prefix with a body that calls cos: the stand-in, a compile error.
  std::string wrong = sin_k.source;
  size_t at = wrong.find("exp(sin(");
  ASSERT_NE(at, std::string::npos);
  wrong.replace(at, 8, "exp(cos(");
  EXPECT_THROW(
      cuda::nvrtc::compile_in_process(wrong, "kernel.cu", headers, options_of(sin_k, true), true),
      cuda::nvrtc::CompileFailure);
}

// A CUDA translation's directive prefix is the prelude's core, ended by msl::kPreludeCoreEnd: the
// same text for kernels that differ only in their math functions (their #defines follow it), so
// NVRTC's automatic PCH of the core serves all of them; a kernel with vector values has another.
TEST(NvrtcPch, SelectionsShareTheCoresPrefix) {
  std::vector<std::string> cores, selections;
  for (const Kernel& k : kernels()) {
    for (bool quick : {true, false}) {
      const std::string src = source_of(k, quick).source;
      const size_t end = src.find(msl::kPreludeCoreEnd);
      ASSERT_NE(end, std::string::npos) << src.substr(0, 400);
      // Only directives before it.
      for (size_t at = 0; at < end; at = src.find('\n', at) + 1)
        EXPECT_EQ(src[at], '#') << k.name << ": " << src.substr(at, src.find('\n', at) - at);
      const size_t math = end + msl::kPreludeCoreEnd.size();
      const size_t stdlib = src.find("#include \"metal_stdlib.h\"\n", math);
      ASSERT_NE(stdlib, std::string::npos);
      if (!quick) continue;
      cores.push_back(src.substr(0, end));
      selections.push_back(src.substr(math, stdlib - math));
    }
  }
  // expsin, expcos, clamp: one core, three math selections; vec: another core.
  EXPECT_EQ(cores[0], cores[1]);
  EXPECT_EQ(cores[0], cores[3]);
  EXPECT_NE(cores[0], cores[2]);
  EXPECT_EQ(selections[0], "#define ALLOY_USE_exp 1\n#define ALLOY_USE_sin 1\n");
  EXPECT_EQ(selections[1], "#define ALLOY_USE_cos 1\n#define ALLOY_USE_exp 1\n");
  EXPECT_NE(selections[3].find("#define ALLOY_USE_clamp 1\n"), std::string::npos);
}

// nvrtc::auto_pch on translations, in the order a process compiles them: nothing at the first
// compile; the core's PCH at the core's second (another selection); a third selection loads it;
// a selection's second compile makes its own PCH from the core's (the text with the core's end
// moved after metal_stdlib.h), its third loads that. Every image is the one compiled without any
// PCH option; a kernel whose selection lacks the function it calls still fails.
TEST(NvrtcPch, CorePchThenASelectionsPchSameImages) {
  if (!nvrtc_has_pch()) GTEST_SKIP() << "NVRTC 12.8+ not found";
  if (const char* v = std::getenv("ALLOY_NVRTC_PCH"); v && std::string(v) == "0")
    GTEST_SKIP() << "ALLOY_NVRTC_PCH=0";
  const auto headers = prelude_headers();
  const cuda::KernelSource sin_k = source_of(kernels()[0], true),
                           cos_k = source_of(kernels()[1], true),
                           clamp_k = source_of(kernels()[3], true);
  // An option of this test only (an unused macro: the same image), so that the prefixes are new.
  static int run = 0;
  const std::string mark =
      "-DALLOY_TEST_CORE_PCH_" + std::to_string(::getpid()) + "_" + std::to_string(run++);
  auto options = [&](const cuda::KernelSource& k) {
    auto o = options_of(k, false);
    o.push_back(mark);
    return o;
  };
  std::vector<std::string> want;
  for (const auto* k : {&sin_k, &cos_k, &clamp_k})
    want.push_back(
        cuda::nvrtc::compile_in_process(k->source, "kernel.cu", headers, options(*k), true));
  size_t files_before = 0;
  for (const auto& f : nvrtc_pch_folders(::getpid()))
    for (const auto& e : std::filesystem::directory_iterator(f))
      files_before += e.is_regular_file();
  struct Step {
    int kernel;
    bool pch;    // options given
    bool whole;  // the text with the core's end moved
    const char* what;
  };
  const std::vector<Step> steps = {
      {0, false, false, "exp(sin): the core's first compile"},
      {1, true, false, "exp(cos): the core's second compile makes its PCH"},
      {2, true, false, "clamp: a new selection loads the core's PCH"},
      {0, true, true, "exp(sin) again: its own PCH, made from the core's"},
      {0, true, true, "exp(sin) a third time: loads its own"},
      {1, true, true, "exp(cos) again: its own PCH"},
      {2, true, true, "clamp again: its own PCH"},
      {1, true, true, "exp(cos) a third time"},
  };
  const cuda::KernelSource* ks[] = {&sin_k, &cos_k, &clamp_k};
  std::string sin_whole;
  for (const Step& st : steps) {
    const cuda::KernelSource& k = *ks[st.kernel];
    auto opts = options(k);
    cuda::nvrtc::AutoPch p = cuda::nvrtc::auto_pch(k.source, opts);
    // A process that ran other tests first (one process for the whole suite) may reach its PCH
    // limit partway: then no new PCH is made (no options, or the core's without the whole text).
    if ((st.pch && p.options.empty()) || (st.whole && p.source.empty() && !p.options.empty()))
      GTEST_SKIP() << "this process used up its PCH prefixes before this test";
    EXPECT_EQ(!p.options.empty(), st.pch) << st.what;
    EXPECT_EQ(!p.source.empty(), st.whole) << st.what;
    if (!p.source.empty()) {
      // The same text with the core's end after the math functions' #defines and metal_stdlib.h.
      const size_t end = k.source.find(msl::kPreludeCoreEnd);
      std::string back = p.source;
      back.erase(back.find(msl::kPreludeCoreEnd), msl::kPreludeCoreEnd.size());
      back.insert(end, msl::kPreludeCoreEnd);
      EXPECT_EQ(back, k.source) << st.what;
      EXPECT_GT(p.source.find(msl::kPreludeCoreEnd), p.source.find("#include \"metal_stdlib.h\""));
      if (st.kernel == 0) sin_whole = p.source;
    }
    opts.insert(opts.end(), p.options.begin(), p.options.end());
    EXPECT_EQ(cuda::nvrtc::compile_in_process(p.source.empty() ? k.source : p.source, "kernel.cu",
                                              headers, opts, true),
              want[st.kernel])
        << st.what;
  }
  // exp(sin)'s whole prefix (its PCH) with a body that calls cos: the stand-in, a compile error.
  ASSERT_FALSE(sin_whole.empty());
  size_t at = sin_whole.find("exp(sin(");
  ASSERT_NE(at, std::string::npos);
  sin_whole.replace(at, 8, "exp(cos(");
  auto opts = options(sin_k);
  auto p = cuda::nvrtc::auto_pch(sin_k.source, opts);
  opts.insert(opts.end(), p.options.begin(), p.options.end());
  EXPECT_THROW(cuda::nvrtc::compile_in_process(sin_whole, "kernel.cu", headers, opts, true),
               cuda::nvrtc::CompileFailure);
  // NVRTC saved the core's PCH and three selections' (where its folder is found).
  size_t files_after = 0;
  auto folders = nvrtc_pch_folders(::getpid());
  for (const auto& f : folders)
    for (const auto& e : std::filesystem::directory_iterator(f)) files_after += e.is_regular_file();
  if (!folders.empty()) {
    EXPECT_GE(files_after, files_before + 4);
  }
}

// metal/math.h with a translation's math selection evaluated (msl::math_header_for, what
// cuda::compile passes NVRTC): the same cubin and PTX as the header itself, for kernels calling
// math functions of every kind (scalar, vector, precise::/fast::, relational, ones using
// numeric_limits), quick and full; the same number of lines; "" for other sources.
TEST(NvrtcPch, MathHeaderForASelectionSameImage) {
  if (!cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  const auto headers = prelude_headers();
  std::string_view math_h;
  for (const auto& h : headers)
    if (std::string_view(h.name) == "metal/math.h") math_h = h.text;
  ASSERT_FALSE(math_h.empty());
  EXPECT_EQ(msl::math_header_for("#define ALLOY_USE_exp 1\nint x;\n", math_h), "");
  std::vector<Kernel> ks = kernels();
  ks.push_back({"mixed",
                "uint i = thread_position_in_grid.x;\nfloat x = inp[i];\n"
                "out[i] = fract(x) + smoothstep(0.0f, 1.0f, x) + (isnan(x) ? 1.0f : 0.0f) +\n"
                "    fmax(x, 0.5f) + precise::sqrt(fabs(x)) + fast::exp(x) + atan2(x, 2.0f);\n"});
  ks.push_back({"vecmath",
                "uint i = thread_position_in_grid.x;\nfloat3 v = float3(inp[i], 1.0f, 2.0f);\n"
                "out[i] = length(normalize(v)) + dot(clamp(v, 0.0f, 1.0f), float3(1.0f)) +\n"
                "    select(0.0f, 1.0f, all(v > 0.0f)) + min(v.x, v.y);\n"});
  for (const Kernel& k : ks) {
    for (bool quick : {true, false}) {
      cuda::KernelSource s = source_of(k, quick);
      std::string name = std::string(k.name) + (quick ? " quick" : " full");
      std::string trimmed = msl::math_header_for(s.source, math_h);
      ASSERT_FALSE(trimmed.empty()) << name;
      EXPECT_LT(trimmed.size(), math_h.size() / 2) << name;  // most functions left out
      EXPECT_EQ(trimmed.find("defined(ALLOY_USE_"), std::string::npos) << name;
      EXPECT_EQ(std::count(trimmed.begin(), trimmed.end(), '\n'),
                std::count(math_h.begin(), math_h.end(), '\n'))
          << name;
      auto with = headers;
      for (auto& h : with)
        if (std::string_view(h.name) == "metal/math.h") h.text = trimmed.c_str();
      for (bool cubin : {true, false}) {
        std::string want = cuda::nvrtc::compile_in_process(s.source, "kernel.cu", headers,
                                                           options_of(s, false), cubin);
        EXPECT_EQ(cuda::nvrtc::compile_in_process(s.source, "kernel.cu", with, options_of(s, false),
                                                  cubin),
                  want)
            << name << (cubin ? " cubin" : " PTX");
      }
    }
  }
}

// The options: for NVRTC 12.8+, per distinct directive prefix and option set from its second
// compile on (the first makes no PCH), up to the limit (16 unless ALLOY_NVRTC_PCH says
// otherwise); a prefix given them keeps getting them.
TEST(NvrtcPch, OptionsFromAPrefixsSecondCompileUpToTheLimit) {
  if (!cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  if (!nvrtc_has_pch()) {
    for (int i = 0; i < 2; ++i)
      EXPECT_TRUE(cuda::nvrtc::auto_pch_options("#define A 1\nint x;\n", {}).empty());
    return;
  }
  if (const char* v = std::getenv("ALLOY_NVRTC_PCH"); v && std::string(v) == "0") {
    for (int i = 0; i < 2; ++i)
      EXPECT_TRUE(cuda::nvrtc::auto_pch_options("#define A 1\nint x;\n", {}).empty());
    return;
  }
  const std::vector<std::string> opts = {"--gpu-architecture=sm_90", "-DTEST_PCH_POLICY"};
  const std::string first = "#define ALLOY_TEST_PREFIX_first 1\n#include \"x.h\"\n";
  EXPECT_TRUE(cuda::nvrtc::auto_pch_options(first + "int a;\n", opts).empty())
      << "a prefix's first compile";
  // The same directives with another body (another kernel of the same selection): the same
  // prefix, at its second compile.
  auto o = cuda::nvrtc::auto_pch_options(first + "int b;\n  // another\n", opts);
  if (o.empty()) GTEST_SKIP() << "this process used up its PCH prefixes before this test";
  EXPECT_EQ(o.at(0), cuda::nvrtc::kAutoPch);
  EXPECT_EQ(cuda::nvrtc::auto_pch_options(first + "int c;\n", opts), o);
  // New prefixes, each compiled twice, until the limit: then none for new ones, still for the
  // first.
  size_t given = 0;
  bool refused = false;
  for (int i = 0; i < 4200; ++i) {
    std::string s = "#define ALLOY_TEST_PREFIX_" + std::to_string(i) + " 1\nint a;\n";
    EXPECT_TRUE(cuda::nvrtc::auto_pch_options(s, opts).empty()) << "prefix " << i << ", first";
    bool got = !cuda::nvrtc::auto_pch_options(s, opts).empty();
    if (refused) {
      EXPECT_FALSE(got) << "prefix " << i << " after the limit";
    } else if (got) {
      ++given;
    } else {
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
  EXPECT_LT(given, 4096u);
  EXPECT_EQ(cuda::nvrtc::auto_pch_options(first + "int d;\n", opts), o);
  // Other options (say, the full compile's): another prefix, refused now at its second compile.
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(
        cuda::nvrtc::auto_pch_options(first + "int a;\n", {"--gpu-architecture=sm_90"}).empty());
}

// NVRTC's PCH folder removed under it (a forked child that exits runs NVRTC's clean-up of the
// folder it shares with its parent; NVRTC then fails with "invalid PCH directory"): a compile
// with the PCH options still gives the same image (compiled again without them), and the process
// asks for no more PCHs. Runs last here: it turns the PCH off for the rest of the process.
TEST(NvrtcPch, AFolderRemovedUnderNvrtcFallsBackWithoutThePch) {
  if (!nvrtc_has_pch()) GTEST_SKIP() << "NVRTC 12.8+ not found";
  const auto headers = prelude_headers();
  cuda::KernelSource s = source_of(kernels()[3], true);
  std::string want =
      cuda::nvrtc::compile_in_process(s.source, "kernel.cu", headers, options_of(s, false), true);
  for (int i = 0; i < 2; ++i)  // makes the PCH, then uses it
    ASSERT_EQ(
        cuda::nvrtc::compile_in_process(s.source, "kernel.cu", headers, options_of(s, true), true),
        want);
  auto folders = nvrtc_pch_folders(::getpid());
  if (folders.empty()) GTEST_SKIP() << "NVRTC's PCH folder is not where this test looks";
  for (const auto& f : folders) std::filesystem::remove_all(f);
  EXPECT_EQ(
      cuda::nvrtc::compile_in_process(s.source, "kernel.cu", headers, options_of(s, true), true),
      want);
  const std::string prefix = "#define ALLOY_TEST_PREFIX_after_failure 1\nint a;\n";
  EXPECT_TRUE(cuda::nvrtc::auto_pch_failed());
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(cuda::nvrtc::auto_pch_options(prefix, {"--gpu-architecture=sm_90"}).empty())
        << "compile " << i << " after the PCH failed";
}

}  // namespace
