// Internals of export/import shared by the two file formats, the CLI and the fuzz target.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "alloy/export.h"
#include "alloy/library.h"
#include "transforms/trace.h"

namespace alloy {

struct ImportedFunction::Impl {
  struct Entry {
    transforms::Trace trace;
    std::vector<std::string> kwarg_names;  // sorted; the last inputs of the trace
    std::vector<Array> constants;          // on `device`, made at import
  };
  std::string format;    // "alloy" | "mlxfn"
  std::string producer;  // "alloy 0.1.0", "mlx 0.32.4"
  std::string metadata;
  bool shapeless = false;
  std::vector<Entry> entries;
  std::vector<ExportedKernel> kernels;  // every CustomKernel and library of the entries
  std::vector<Library> libraries;       // read from the file (their kernels' ops name them)
  Device device;                        // where calls run
};

namespace transforms {

/// Reads a file's bytes in either format (told apart by Alloy's file identifier). Verifies
/// everything and rebuilds the primitives; compiles nothing and checks no consent. Throws
/// std::invalid_argument for bad files, alloy::NotSupported for what Alloy cannot run.
std::shared_ptr<ImportedFunction::Impl> load_exported(const uint8_t* data, size_t size);

/// Alloy's format (src/transforms/export.cpp) and MLX's (src/transforms/mlxfn.cpp).
std::shared_ptr<ImportedFunction::Impl> load_alloy_file(const uint8_t* data, size_t size);
std::shared_ptr<ImportedFunction::Impl> load_mlxfn_file(const uint8_t* data, size_t size);
bool has_alloy_identifier(const uint8_t* data, size_t size);

/// Fills impl.kernels from the CustomKernel ops of its entries.
void collect_kernels(ImportedFunction::Impl& impl);

/// The MLX primitives the .mlxfn reader maps (docs/export.md), sorted.
std::vector<std::string> mlx_mapped_primitives();

}  // namespace transforms
}  // namespace alloy
