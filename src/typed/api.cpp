// alloy/analyze.h over the kernel layer: the CPU translation of a call or a library (kernel
// bodies as written: fibers, no work-item-loop splitting), analysed by typed/clang_ast.cpp, with
// the token-level translator's per-kernel choice beside it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "alloy/analyze.h"
#include "kernel/custom_kernel.h"
#include "kernel/program.h"
#include "msl/function_constants.h"
#include "msl/includes.h"
#include "msl/regions.h"
#include "typed/typed.h"

namespace alloy {
namespace {

constexpr const char* kFilename = "kernel.metal";  // as kernel/program.cpp names the Metal text

Analysis analyze_source(const kernel::SourceMap& map, const kernel::BindOptions& bind) {
  if (!typed::available())
    throw NotSupported(map.label, "not supported: typed analysis (Clang not found)");
  msl::TranslateOptions o = kernel::translate_options(map, msl::Target::cpu, bind);
  o.filename = kFilename;
  // The token-level choice as the CPU backend makes it (default ALLOY_CPU_SYNC)...
  msl::Translation token = msl::translate(map.msl, o);
  // ...and the bodies as written for the analysis.
  o.cpu_sync = static_cast<int>(msl::CpuSyncMode::fibers);
  msl::Translation tr = msl::translate(map.msl, o);
  Analysis a = typed::analyze_translation(tr, map, kFilename);
  for (size_t i = 0; i < a.kernels.size() && i < token.kernels.size(); ++i) {
    const msl::KernelEntry& e = token.kernels[i];
    a.kernels[i].token_sync = e.fibers || e.split;
    a.kernels[i].token_sync_path = !a.kernels[i].token_sync
                                       ? "loop (no barrier or simd function seen)"
                                   : e.sync_path.empty() ? (e.split ? "split" : "fibers")
                                                         : e.sync_path;
  }
  return a;
}

std::string place(const SourcePlace& p) {
  return p.column > 0 ? fmt::format("{}:{}", p.where, p.column) : p.where;
}

}  // namespace

bool typed_analysis_available() {
  return typed::available();
}

Analysis analyze(const MetalKernel& k, const std::vector<Array>& inputs, const KernelCall& call) {
  auto gen = kernel::call_generated_source(k, inputs, call);
  kernel::SourceMap map = kernel::call_source_map(k.spec(), gen.source);
  return analyze_source(map, kernel::call_bind_options(gen, false));
}

Analysis analyze_library(const std::string& source, const LibraryOptions& library) {
  kernel::SourceMap map;
  map.label = library.name;
  msl::FunctionConstants constants{
      {library.function_constants.begin(), library.function_constants.end()},
      {library.named_function_constants.begin(), library.named_function_constants.end()}};
  map.msl = msl::apply_function_constants(
      msl::expand_includes(source, {library.headers, library.include_dirs, library.name}),
      constants, library.name);
  map.user_text = true;
  kernel::BindOptions bind;
  bind.robust = library.robust;
  return analyze_source(map, bind);
}

std::string Analysis::report() const {
#ifdef ALLOY_CLANG_VERSION
  const char* clang = "Clang " ALLOY_CLANG_VERSION;
#else
  const char* clang = "Clang";
#endif
  std::string s = fmt::format("typed analysis ({}, {:.0f} ms parse)\n", clang, parse_ms);
  for (const KernelAnalysis& k : kernels) {
    s += fmt::format("kernel {} ({})\n", k.kernel, k.function);
    int barriers = 0, simd = 0;
    for (const SyncCall& c : k.sync_calls) (c.barrier ? barriers : simd) += 1;
    s += fmt::format("  reaches {} barrier call(s), {} simd call(s); token scan: {}\n", barriers,
                     simd, k.token_sync_path);
    for (const SyncCall& c : k.sync_calls)
      s += fmt::format("    {} {} at {} in {}\n", c.barrier ? "barrier" : "simd", c.name,
                       place(c.place), c.function);
    s += fmt::format("  {} typed expression(s) where Metal's conversions apply\n",
                     k.expressions.size());
    for (const TypedExpression& e : k.expressions) {
      s += fmt::format("    {} {} '{}' ({}) -> {}", place(e.place), e.kind, e.op,
                       fmt::join(e.operand_types, ", "), e.result_type);
      if (e.metal_type.empty())
        s += " [no Metal rule here]";
      else if (e.agrees)
        s += " [Metal: " + e.metal_type + ", agrees]";
      else
        s += " [MISMATCH: Metal gives " + e.metal_type + "]";
      s += " in " + e.function + "\n";
    }
  }
  return s;
}

}  // namespace alloy
