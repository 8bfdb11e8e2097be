// Kernels inside exported functions: their trust hash, the description export files carry, and
// the recovery of a metal_kernel specification from the Metal text MLX stores in `.mlxfn` files.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "alloy/kernel.h"
#include "kernel/custom_kernel.h"
#include "kernel/library.h"

namespace alloy::transforms {

/// SHA-256 (hex) of a kernel's specification: name, input and output names, body, header, math
/// mode and flags, each length-prefixed (docs/export.md). The same kernel has the same hash
/// whether it comes from an Alloy file or an MLX file.
std::string kernel_sha256(const KernelSpec& spec);

/// SHA-256 (hex) of a library's specification (name, resolved source, math mode, dtype
/// placeholders, each length-prefixed): the trust hash of a library in an export file.
std::string library_sha256(const kernel::LibrarySpec& spec);

/// A CustomKernel call, described for files and listings.
struct KernelCallInfo {
  std::vector<Dtype> output_dtypes;
  TemplateArgs template_args;
  std::vector<std::string> grid, threadgroup, output_shapes;  // expression text
};
/// Reads the call part of a CustomKernel's state. Throws std::invalid_argument for bad state.
KernelCallInfo kernel_call_info(const PrimitiveState& state);

/// True when a CustomKernel's grid, threadgroup and output shapes are all numbers (not
/// expressions of its input shapes): then they cannot follow inputs of other shapes.
bool kernel_geometry_is_constant(const PrimitiveState& state);

/// What MLX's generated text says about a kernel call.
struct RecoveredKernel {
  KernelSpec spec;
  TemplateArgs template_args;
};
/// Splits MLX's generated Metal text (header, template declaration, signature, body,
/// instantiation; docs/mlx-signature.md) back into a specification for a call with these input
/// dtypes/ranks/sizes and output dtypes, and checks that regenerating the text from it gives the
/// same bytes. Throws alloy::NotSupported (naming the kernel) when the text is not one MLX's
/// metal_kernel writes.
RecoveredKernel recover_mlx_kernel(const std::string& kernel_name, const std::string& text,
                                   const std::vector<Dtype>& input_dtypes,
                                   const std::vector<Shape>& input_shapes,
                                   const std::vector<Dtype>& output_dtypes,
                                   bool ensure_row_contiguous, const std::string& math_mode);

}  // namespace alloy::transforms
