// The typed front end's internals (include/alloy/analyze.h is the API): Clang's AST over a CPU
// translation (msl::translate with fibers, so kernel bodies are as written), with places mapped
// back to the Metal text through the translation's `#line` directive and the SourceMap.
#pragma once
#include <string>

#include "alloy/analyze.h"
#include "kernel/program.h"
#include "msl/translate.h"

namespace alloy::typed {

/// Whether Clang was found at build time (ALLOY_HAVE_CLANG).
bool available();

/// Parses `tr.code` with Clang in process (the prelude from the embedded files, no subprocess)
/// and analyses every entry of `tr`. `filename` is the name the translation's `#line` gives the
/// Metal text. Throws alloy::CompileError (user lines) when Clang rejects the translation,
/// alloy::NotSupported without Clang.
Analysis analyze_translation(const msl::Translation& tr, const kernel::SourceMap& map,
                             const std::string& filename);

/// Metal's type for `op` applied to operands of Metal types `a` and `b` ("" when the rules here
/// do not cover the pair, e.g. vectors). kind: "conditional", "binary", "comparison",
/// "compound-assignment".
std::string metal_result_type(const std::string& kind, const std::string& a, const std::string& b);

/// The column (1-based) in `user_line` of the token at `column` of `translated_line`: the n-th
/// occurrence of `token` there is the n-th in the user's line, once the translator's insertions
/// (the `cond_t` casts of conditionals) are skipped. 0 when the lines do not match up.
int user_column(const std::string& translated_line, int column, const std::string& user_line,
                const std::string& token);

}  // namespace alloy::typed
