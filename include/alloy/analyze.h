// Typed analysis of a kernel (`alloy translate --analyze`): Clang's AST of the kernel's CPU
// translation, after template substitution, for every kernel a source declares (template
// instantiations included). It reports
//  - the expressions where Metal's conversion rules matter (`?:`, compound assignment to
//    half/bfloat, binary operators mixing half/bfloat with float, int or literals): operand types,
//    the type the translation computes, Metal's type, and whether they agree;
//  - the barriers and simd functions each kernel reaches through its calls, with the user's lines.
// Only on request: nothing on the compile/launch path runs it. Provided by the `alloy_typed_lib`
// library (link it beside `alloy`); without Clang 14 at build time every call throws
// alloy::NotSupported ("not supported: typed analysis (Clang not found)").
#pragma once
#include <string>
#include <vector>

#include "alloy/kernel.h"
#include "alloy/library.h"

namespace alloy {

/// A place in the user's source: `line` is the line of the Metal text given to the compiler
/// (metal_kernel: the generated text; library: the user's own), `where` says it in the user's
/// terms ("body line 3", "header line 2", "line 7").
struct SourcePlace {
  int line = 0;
  int column = 0;  // in the user's line (1-based); 0 when it cannot be placed exactly
  std::string where;
};

/// An expression whose type Metal's conversion rules decide.
struct TypedExpression {
  SourcePlace place;
  std::string kind;  // "conditional", "binary", "comparison", "compound-assignment"
  std::string op;    // "?:", "*", "+=", "<", ...
  std::vector<std::string> operand_types;  // as written (Metal names: half, bfloat, float, int...)
  std::string result_type;                 // what the translation computes (Clang's type)
  std::string metal_type;                  // Metal's rule for these operands
  bool agrees = true;                      // result_type == metal_type
  std::string function;                    // the function (instance) holding it, e.g. "f<half>"
};

/// A call to a barrier or simd function reached from a kernel.
struct SyncCall {
  std::string name;      // threadgroup_barrier, simd_sum, quad_shuffle, ...
  bool barrier = false;  // threadgroup_barrier / simdgroup_barrier (else a simd/quad function)
  SourcePlace place;
  std::string function;  // the user function holding the call
};

struct KernelAnalysis {
  std::string kernel;                        // host name
  std::string function;                      // the instance analysed, e.g. "gemm<float, 32>"
  std::vector<TypedExpression> expressions;  // in the functions the kernel reaches
  std::vector<SyncCall> sync_calls;          // barriers and simd functions it reaches
  /// The token-level translator's view of the same kernel (the CPU backend's choice today): it
  /// runs threadgroups with barrier support (fibers or work-item loops), and why.
  bool token_sync = false;
  std::string token_sync_path;
  bool reaches_sync() const { return !sync_calls.empty(); }
};

struct Analysis {
  std::vector<KernelAnalysis> kernels;
  double parse_ms = 0;  // Clang's parse + semantic analysis of the translation
  /// A readable per-kernel report (what `alloy translate --analyze` prints).
  std::string report() const;
};

/// Whether this build has the typed front end (Clang found at build time).
bool typed_analysis_available();

/// Analyses the kernel the call `kernel(inputs, call)` compiles (dtypes, ranks and template
/// arguments matter, not values). Throws alloy::CompileError (user lines) when the source does
/// not compile, alloy::NotSupported without Clang, std::invalid_argument for bad arguments.
Analysis analyze(const MetalKernel& kernel, const std::vector<Array>& inputs,
                 const KernelCall& call);

/// The same for every kernel of a whole Metal library (headers and function constants applied as
/// compile_library applies them).
Analysis analyze_library(const std::string& source, const LibraryOptions& library);

}  // namespace alloy
