// The Metal prelude headers, embedded in the library at build time (cmake/embed_prelude.cmake).
// This header is NOT part of the prelude itself; the JIT writes the embedded files to disk (CPU)
// or hands them to NVRTC as in-memory headers (CUDA).
#pragma once
#include <string>
#include <vector>

namespace alloy::prelude {
struct EmbeddedFile {
  std::string path;  // relative to src/prelude, e.g. "metal_stdlib.h" or "cpu/target.h"
  std::string text;
};
const std::vector<EmbeddedFile>& embedded_files();
}  // namespace alloy::prelude
