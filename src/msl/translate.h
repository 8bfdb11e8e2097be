// Metal source -> target C++ (DESIGN.md §3 step 2). Token level: qualifiers, attributes, kernel
// signatures and float literals are rewritten in place so line numbers are kept (a `#line`
// directive ties the output back to the Metal source for compiler diagnostics). Target
// differences come from one table per target (msl/target.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prelude/cuda/abi.h"

namespace alloy::msl {

enum class Target { cpu, cuda };

enum class ParamKind { buffer, threadgroup, attribute };

struct KernelParam {
  std::string name;
  ParamKind kind = ParamKind::buffer;
  int index = -1;         // [[buffer(n)]] / [[threadgroup(n)]]
  std::string attribute;  // for ParamKind::attribute: e.g. "thread_position_in_grid"
  std::string type;       // declared type with address spaces, e.g. "const device float*"
  bool is_pointer = false;
  bool is_reference = false;  // scalars passed as `constant T&`
  bool is_const = false;
};

struct KernelEntry {
  std::string host_name;  // name to look the kernel up by
  std::string function;   // C++ expression naming the instance in the translation
  std::string base_name;  // the function template / function name as written
  std::vector<KernelParam> params;
  int max_total_threads = 0;  // [[max_total_threads_per_threadgroup(n)]], 0 if none
  std::string written;        // the instance as written in the source, e.g. "f<float, 3>"
  // CUDA entries (prelude/cuda/abi.h): [[buffer(n)]] indices passed as `__restrict__` entry
  // parameters, in order, and threadgroups run per block along x (1: one).
  std::vector<int> param_buffers = {};
  int coarsen = 1;
  // CUDA entries: the layout of the entry's parameter block (prelude/cuda/abi.h), made by
  // alloy_cuda_layout from buffer-table entries (highest [[buffer(n)]] + 1), [[threadgroup(n)]]
  // offsets (highest n + 1), robust fields and inline bytes (ALLOY_CUDA_INLINE_BYTES when the
  // entry reads a small or block buffer, else 0). The entry declares it and the host packs it
  // (CompileEntry::cuda_block).
  alloy_cuda_param_layout cuda_block = alloy_cuda_layout(0, 0, false, 0);
  // CPU: the translation uses barriers or simd functions, so its groups run as fibers
  // (alloy_thread_<i>) and alloy_group_<i> is a stub that is never called.
  bool fibers = false;
  // CPU: the kernel's body was cut at its barriers/simd functions into work-item loops
  // (msl/regions.h); alloy_group_<i> runs a group without fibers. `sync_path` says which path a
  // kernel with barriers/simd functions took and why (ALLOY_TRACE_BUILD prints it).
  bool split = false;
  std::string sync_path = {};
  // CPU: indices into `params` of the device buffers that every thread writes exactly once, at
  // its own position thread_position_in_grid.x, and that the kernel reads or writes nowhere else
  // (stream_outputs in translate.cpp). In a 1D grid such an output is written by consecutive
  // threads consecutively, so the entry may stage it in a small buffer and stream it to memory
  // with non-temporal stores (msl/target.cpp, prelude/entry.h cpu_stream_copy).
  std::vector<size_t> stream_params = {};
};

struct TranslateOptions {
  Target target = Target::cpu;
  std::string label = "kernel";           // kernel name for error messages
  std::string filename = "kernel.metal";  // as reported by the compiler (#line)
  /// Robust mode: every device/constant pointer becomes a bounds-checked alloy_robust::ptr<T>.
  bool robust = false;
  /// The caller guarantees that no buffer a kernel writes aliases another of its buffers
  /// (metal_kernel: every output is a fresh allocation, inputs are const). CUDA entries then
  /// take device buffers as `__restrict__` parameters, and kernels whose threads share nothing
  /// (no barriers, simd functions or threadgroup memory) run several threadgroups per block.
  bool distinct_buffers = false;
  /// CPU kernels with barriers/simd functions: split them into work-item loops where the
  /// splitter can (automatic/split), or always run them as fibers. Default: ALLOY_CPU_SYNC.
  int cpu_sync = -1;  // -1: from the environment; else a msl::CpuSyncMode value
  /// [[buffer(n)]] indices of a few bytes each (small metal_kernel inputs) that a CUDA launch may
  /// carry in its parameter block or pass in device memory (cuda_small_buffer in prelude/entry.h).
  std::vector<int> small_buffers = {};
  /// [[buffer(n)]] indices always carried in the CUDA launch's parameter block (metal_kernel's
  /// shape/strides/ndim when they fit): read with parameter loads (cuda_block_buffer).
  std::vector<int> block_buffers = {};
  /// Reflection only (a library's kernel names and parameters): the source is read and checked
  /// as for a translation, but no entry points or prelude selection are generated
  /// (Translation::code is empty).
  bool reflect_only = false;
  /// False when the caller already expanded the kernel-declaring macros (msl::expand_kernel_macros)
  /// of the source: translate() then does not expand them again.
  bool expand_macros = true;
};

struct Translation {
  std::string code;                  // complete translation unit for the target compiler
  std::vector<KernelEntry> kernels;  // entry i is exported as alloy_group_<i>/alloy_thread_<i>
                                     // (CPU) or alloy_entry_<i> (CUDA)
  bool uses_sync = false;            // barriers / simd functions: the CPU runs the groups as fibers
  bool uses_simd = false;            // simd/quad functions (lanes are exchanged within simdgroups)
};

/// An output size no output reaches: streaming off.
inline constexpr uint64_t kCpuStreamNever = ~uint64_t{0};
/// ALLOY_CPU_STREAM (off | on | auto | a size in bytes), the one reader of it: nullopt for auto
/// (also when unset), else the smallest output in bytes to stream (0: on; kCpuStreamNever: off).
/// Throws std::invalid_argument for any other value.
std::optional<uint64_t> cpu_stream_setting();

/// CPU: whether translations give outputs that may be streamed a streamed loop
/// (KernelEntry::stream_params; its code costs the host compiler a second vector loop, ~50% of
/// an elementwise kernel's compile). ALLOY_CPU_STREAM: off -> no; on or a byte threshold -> yes;
/// unset or auto -> on x86-64 when the process may use at least 8 cores (the executor streams
/// nothing on fewer: backend/cpu/executor.h stream_min_bytes). Read at every translation.
bool cpu_stream_loops();

/// Translates a Metal source (a metal_kernel's generated text or a whole library).
/// Throws alloy::NotSupported for features Alloy does not run (textures, render functions...),
/// std::invalid_argument for kernel signatures it cannot read.
Translation translate(std::string_view msl, const TranslateOptions& options);

/// Names Metal's compute attributes that Alloy computes (the 20 names MLX scans for, plus quads).
const std::vector<std::string>& attribute_names();

}  // namespace alloy::msl
