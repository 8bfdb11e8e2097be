// The Metal prelude headers, embedded in the library at build time (cmake/embed_prelude.cmake).
// This header is NOT part of the prelude itself; the JIT writes the embedded files to disk (CPU)
// or hands them to NVRTC as in-memory headers (CUDA).
#pragma once
#include <string_view>
#include <vector>

namespace alloy::prelude {
struct EmbeddedFile {
  std::string_view path;  // relative to src/prelude, e.g. "metal_stdlib.h"; NUL-terminated
  std::string_view text;  // NUL-terminated (a string literal)
};
const std::vector<EmbeddedFile>& embedded_files();
/// A hash of every embedded file's path and text, computed at build time (hex).
std::string_view embedded_hash();
}  // namespace alloy::prelude
