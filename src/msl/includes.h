// `#include "..."` / `#include <...>` of user headers in Metal sources (libraries compiled with
// headers= / include_dirs=). Expanded textually before translation; each included text is framed
// by `#line` directives so compiler diagnostics name the header and its line.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace alloy::msl {

struct IncludeOptions {
  /// In-memory headers by the name used in `#include` (looked up first).
  std::map<std::string, std::string> headers;
  /// Folders searched in order (then the including header's own folder for "..." includes).
  std::vector<std::string> include_dirs;
  std::string label = "library";  // for error messages
};

/// Replaces each `#include` of a header found in `options` by its (recursively expanded) text.
/// Metal's own headers (`<metal_stdlib>`, `<metal_simdgroup>`...) are kept (the prelude provides
/// them); `#pragma once` and include guards work. Throws alloy::NotSupported for
/// MetalPerformancePrimitives and alloy::CompileError for a header that cannot be found.
std::string expand_includes(std::string_view source, const IncludeOptions& options);

}  // namespace alloy::msl
