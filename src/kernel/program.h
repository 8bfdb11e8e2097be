// A Metal source compiled for one target: translation (msl/translate), compilation (CPU JIT or
// NVRTC, both through the content-addressed cache), and the kernels it exports. Shared by
// metal_kernel (one kernel per program) and whole libraries.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "msl/translate.h"

namespace alloy::kernel {

/// Where the lines of a Metal text came from, to point compiler errors at the user's own lines.
struct SourceMap {
  std::string label;  // kernel (or library) name for messages
  std::string msl;    // the Metal text that is compiled
  // metal_kernel: the user's header and body inside the generated text (0 lines: absent).
  int header_first = 0, header_lines = 0;
  int body_first = 0, body_lines = 0;
  bool user_text = false;  // a whole library: lines are the user's own

  /// "body line 3", "header line 2", "line 7", or "generated signature line 4".
  std::string describe(int msl_line) const;
  /// The text of a line of `msl` (1-based), or "".
  std::string line_text(int msl_line) const;
};

/// How the runtime binds a program's buffers (msl::TranslateOptions has the meaning of each).
struct BindOptions {
  bool robust = false;
  bool distinct_buffers = false;        // metal_kernel: outputs never alias anything
  std::vector<int> small_buffers = {};  // metal_kernel: small inputs (launch block or device)
  std::vector<int> block_buffers = {};  // metal_kernel: shape/strides/ndim (launch block)
};

/// Math modes as in MLX's compile_options: "safe" (IEEE, default), "relaxed", "fast".
void check_math_mode(const std::string& mode);

struct CompiledKernel {
  msl::KernelEntry entry;
  const void* function = nullptr;  // the backend's function (LaunchDesc::function)
};

class Program {
 public:
  /// Translates and compiles (or fetches from the caches). Throws alloy::CompileError with the
  /// user's lines, alloy::NotSupported, or std::invalid_argument.
  static std::shared_ptr<Program> build(const SourceMap& source, msl::Target target,
                                        const std::string& math_mode, const BindOptions& bind = {});

  const std::vector<CompiledKernel>& kernels() const { return kernels_; }
  /// The kernel exported under `host_name`, or nullptr.
  const CompiledKernel* find(std::string_view host_name) const;
  /// Barriers / simd functions are used: the CPU runs threadgroups as fibers.
  bool uses_sync() const { return uses_sync_; }
  /// simd/quad functions are used (lanes exchange values within a simdgroup).
  bool uses_simd() const { return uses_simd_; }
  msl::Target target() const { return target_; }
  /// The translated target source (for `alloy translate` and debugging).
  const std::string& translated() const { return translated_; }

 private:
  msl::Target target_ = msl::Target::cpu;
  std::vector<CompiledKernel> kernels_;
  bool uses_sync_ = false;
  bool uses_simd_ = false;
  std::string translated_;
  std::shared_ptr<void> module_;  // keeps the loaded code alive
};

/// What the backend compiles for `tr` (code, entries, math mode).
CompileRequest compile_request(const msl::Translation& tr, const SourceMap& source,
                               const std::string& math_mode);

/// NVRTC-compiles `tr` to a cubin for `arch` (e.g. "sm_90") without needing a GPU. Throws
/// alloy::CompileError (user lines).
std::vector<char> compile_cubin(const msl::Translation& tr, const std::string& math_mode,
                                const SourceMap& source, const std::string& arch);

/// NVRTC's PTX for `tr` on `arch` (for `alloy translate --target ptx`: what the generated code
/// compiles to). Throws alloy::CompileError (user lines).
std::string compile_ptx(const msl::Translation& tr, const std::string& math_mode,
                        const SourceMap& source, const std::string& arch);

/// Translation only (no compiler): what `alloy translate --target cpu|cuda` prints.
std::string translate_only(const SourceMap& source, msl::Target target,
                           const BindOptions& bind = {});

/// The translator's options for `source` on `target` with `bind`.
msl::TranslateOptions translate_options(const SourceMap& source, msl::Target target,
                                        const BindOptions& bind);

/// Rewrites a compiler log (g++/clang `file:line:col: error: ...`, NVRTC `file(line): error: ...`)
/// to the user's lines; returns the message for alloy::CompileError.
std::string map_compile_log(const SourceMap& source, const std::string& log,
                            const std::string& filename);

}  // namespace alloy::kernel
