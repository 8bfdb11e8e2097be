// Exporting functions of arrays (custom kernels included) to a file, and importing them, as MLX's
// mx.export_function / mx.import_function (docs/export.md).
//
//   alloy::export_function("f.alloy", [&](const alloy::Args& a) { return alloy::Args{g(a[0])}; },
//                          {x});
//   alloy::ImportOptions opts;
//   opts.trust_kernels = true;                // the file's kernels are compiled to native code
//   auto f = alloy::import_function("f.alloy", opts);
//   alloy::Array y = f({x})[0];
//
// Export traces the function (arrays are lazy: calling it builds the graph, nothing runs), so it
// works on a machine without a GPU. import_function reads Alloy's own files and MLX's `.mlxfn`
// files; the imported function runs on the default device (or ImportOptions::device), whatever
// device the file was traced on.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "alloy/array.h"

namespace alloy {

using Args = std::vector<Array>;
using Kwargs = std::map<std::string, Array>;

/// Traces `fn` on arrays shaped like `args` (their values are not read) and writes it to `path`.
/// `shapeless`: the imported function accepts inputs of other shapes (same dtypes and ranks);
/// kernels whose geometry and output shapes are expressions of their input shapes follow them.
/// Throws alloy::NotSupported when `fn` reads array values, std::invalid_argument for bad
/// arguments, std::runtime_error when the file cannot be written.
void export_function(const std::string& path, const std::function<Args(const Args&)>& fn,
                     const Args& args, bool shapeless = false);
void export_function(const std::string& path,
                     const std::function<Args(const Args&, const Kwargs&)>& fn, const Args& args,
                     const Kwargs& kwargs, bool shapeless = false);

/// Several traces of one function in one file (one per input signature), as MLX's exporter:
///   auto ex = alloy::exporter("f.alloy", fn);
///   ex({x4}); ex({x8});      // the file is complete after each call
class FunctionExporter {
 public:
  FunctionExporter(std::string path, std::function<Args(const Args&, const Kwargs&)> fn,
                   bool shapeless = false);
  void operator()(const Args& args, const Kwargs& kwargs = {});
  /// Free-form text stored in the file (shown by `alloy inspect`).
  void set_metadata(std::string metadata);

 private:
  struct State;
  std::shared_ptr<State> state_;
};
FunctionExporter exporter(const std::string& path,
                          std::function<Args(const Args&, const Kwargs&)> fn,
                          bool shapeless = false);

/// Import refused: the file holds kernels and ImportOptions gives no consent for them. The
/// message lists each kernel with its hash.
class UntrustedKernels : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ImportOptions {
  /// Compile and run every kernel of the file. Kernels are native code once compiled: only
  /// trust files whose kernels you would run yourself.
  bool trust_kernels = false;
  /// Or: the SHA-256 hashes (hex) of the kernels allowed (as `alloy inspect` lists them).
  std::set<std::string> allowed_kernels;
  /// Where the function runs (default: the default device).
  std::optional<Device> device;
};

/// One kernel of an exported function, as the file specifies it.
struct ExportedKernel {
  std::string name;
  std::string sha256;        // trust hash of the kernel's specification (docs/export.md)
  std::string metal_source;  // the MLX-identical Metal text at the traced shapes
};

class ImportedFunction {
 public:
  /// Runs the trace whose signature matches (number of inputs, keyword names, dtypes, ranks and,
  /// unless shapeless, shapes). Keyword arguments follow the positional ones, sorted by name.
  /// std::invalid_argument (listing the traces) when none matches.
  std::vector<Array> operator()(const Args& args, const Kwargs& kwargs = {}) const;
  std::vector<Array> operator()(const Kwargs& kwargs) const { return (*this)({}, kwargs); }

  /// "alloy" or "mlxfn".
  const std::string& format() const;
  bool shapeless() const;
  const std::vector<ExportedKernel>& kernels() const;
  /// A readable listing: traces (inputs, outputs, ops) and kernels with their hashes.
  std::string describe() const;

  struct Impl;

 private:
  friend ImportedFunction import_function(const std::string&, const ImportOptions&);
  friend std::string describe_exported_function(const std::string&);
  std::shared_ptr<const Impl> impl_;
};

/// Reads an exported function (Alloy's format or MLX's `.mlxfn`). Files holding kernels need
/// consent (ImportOptions::trust_kernels or allowed_kernels): otherwise alloy::NotSupported lists
/// the kernels and their hashes. Bad files raise std::invalid_argument saying what is wrong;
/// MLX primitives Alloy cannot map raise alloy::NotSupported naming them.
ImportedFunction import_function(const std::string& path, const ImportOptions& options = {});

/// describe() of a file, without consent (nothing is compiled).
std::string describe_exported_function(const std::string& path);

}  // namespace alloy
