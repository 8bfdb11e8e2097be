// Whole Metal libraries (include/alloy/library.h) inside: reading the source (kernel-declaring
// macros, dtype placeholders, where each kernel is), reflection of the kernels' parameters,
// per-target builds that set aside the kernels that cannot compile (so that the others still run
// and those fall back to their reference), and the LibraryKernelOp primitive of the graph.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alloy/library.h"
#include "core/primitive.h"
#include "msl/lexer.h"

namespace alloy::kernel {

/// Where one kernel function is in the token stream of a (macro-expanded) library source.
struct KernelRegion {
  std::string name;                          // the function's name
  std::vector<std::string> template_params;  // template parameter names ({} if none)
  size_t begin = 0;                          // first token of the declaration (template/attrs)
  size_t body_open = 0, body_close = 0;      // its body's `{` and `}`
  int first_line = 0, body_first_line = 0, last_line = 0;
  struct Instantiation {
    size_t begin = 0, end = 0;  // `template ... ;` tokens [begin, end]
    std::string host_name;
  };
  std::vector<Instantiation> instantiations;  // explicit instantiations of this function
};

/// Finds the kernel functions (`[[kernel]]` or `kernel`, with a body) and their explicit
/// instantiations.
std::vector<KernelRegion> find_kernel_regions(const std::vector<msl::Token>& toks);

/// A Metal element type read as a dtype: "float" -> float32, "half4" -> float16 x4,
/// "atomic<uint>" / "atomic_uint" -> uint32, "packed_float3" -> float32 x3, "bfloat" -> bfloat16.
/// dtype is empty for anything else (structs, template parameters).
struct MetalType {
  std::optional<Dtype> dtype;
  int lanes = 1;
};
MetalType parse_metal_type(std::string_view element_type);

/// Compiles the kernels of `lib` with NVRTC for `arch` (e.g. "sm_90"), no GPU needed: the
/// variant where each dtype placeholder is given by `placeholders` (default float32); only the
/// kernels named in `kernels` (host names) when it is not empty, as a lazy first call compiles
/// them. Returns "" when it compiled, or why it could not be tried (NVRTC not found); throws
/// alloy::CompileError.
std::string compile_library_cubin(const Library& lib, const std::string& arch,
                                  const std::map<std::string, Dtype>& placeholders = {},
                                  const std::vector<std::string>& kernels = {});

/// The text of the unit that compiles the kernels `kernels` (host names; every kernel when
/// empty) of `lib`'s float32-placeholder variant: the library's expanded source with the other
/// kernels blanked (lines kept), as a kernel's first call compiles it. Throws
/// std::invalid_argument for an unknown name.
std::string library_unit_source(const Library& lib, const std::vector<std::string>& kernels);

/// What a library compiled so far (every target): compilations (units) and the kernels they held.
struct LibraryStats {
  uint64_t units = 0;
  uint64_t kernels = 0;
};
LibraryStats library_stats(const Library& lib);

/// What a library computes, independent of where it came from: its source with includes expanded
/// and function constants applied, its dtype placeholders and math mode (and its name, for
/// messages). Export stores it; load_library rebuilds the library from it.
struct LibrarySpec {
  std::string name;
  std::string source;
  std::map<std::string, std::string> template_dtypes;
  std::string math_mode = "safe";
};

/// The library's content key (XXH3-128 hex of everything but the name): the key of the
/// process-wide library registry, which LibraryKernel primitives name in their state.
std::string library_key(const LibrarySpec& spec);
/// Reads (and registers) a library from its spec; compiles nothing. Kernels the reader sets
/// aside stay in it (their calls raise the reason), as it has no references.
Library load_library(const LibrarySpec& spec);
/// The spec of a library, or of the library of a LibraryKernel primitive.
LibrarySpec library_spec(const Library& lib);
LibrarySpec library_spec(const Primitive& p);
/// True for a library kernel call (its inputs must be row-contiguous, as the call makes them).
bool is_library_kernel(const Primitive& p);

}  // namespace alloy::kernel
