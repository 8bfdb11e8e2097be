// The Metal source that MLX's mx.fast.metal_kernel builds around a kernel body: header, template
// declaration, `[[kernel]]` signature (inputs, their shape/strides/ndim, outputs, attributes), the
// body, and the explicit `[[host_name]]` instantiation. Byte-identical to MLX's generator (see
// docs/mlx-signature.md for the rules and the MLX version they match).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "alloy/kernel.h"

namespace alloy::msl {

/// What the signature needs to know about one input array. ndim == 0: a scalar (passed by `&`).
struct SignatureInput {
  std::string name;  // empty: taken from KernelSpec::input_names
  Dtype dtype;
  int ndim;
  int64_t size;
};

enum class BindingKind { input, input_shape, input_strides, input_ndim, output };

/// One `[[buffer(i)]]` slot: what it holds and which input/output it belongs to.
struct Binding {
  BindingKind kind;
  int index;
  // An input of fewer than 8 elements (`constant` in the signature, scalars by reference): few
  // enough bytes to travel in a GPU launch's parameter block.
  bool small = false;
};

struct GeneratedSource {
  std::string kernel_name;        // the instantiated [[host_name]] (what a Metal backend looks up)
  std::string template_name;      // the C++ name of the (template) function; MLX uses kernel_name
  std::string source;             // the full MSL text MLX would compile (and print with verbose)
  std::vector<Binding> bindings;  // bindings[i] is what goes in [[buffer(i)]]
  std::vector<std::string> attributes;  // attribute parameter names emitted, in order
};

/// Validates and generates. Throws std::invalid_argument with MLX's messages where MLX checks
/// (no outputs, `inputs`/`output_dtypes` size mismatches) and MLX-styled ones for calls whose
/// source MLX would fail to compile (duplicate or clashing names, invalid identifiers, negative
/// int template arguments, MLX's broken signature for several outputs without attributes).
GeneratedSource write_kernel_source(const KernelSpec& spec,
                                    const std::vector<SignatureInput>& inputs,
                                    const std::vector<Dtype>& output_dtypes,
                                    const TemplateArgs& template_args);

/// What MLX prints for `verbose=True`: "Generated source code for `<name>`:\n```\n<source>\n```\n"
/// (`name` is the name given to metal_kernel, not the mangled kernel name).
std::string verbose_listing(std::string_view name, std::string_view source);

/// A Metal attribute that MLX adds as a kernel parameter when the body mentions its name.
struct MetalAttribute {
  std::string_view name;  // also the attribute: `uint3 grid_size [[grid_size]]`
  std::string_view type;  // "uint" or "uint3"
};

/// MLX's 20 attributes, in the order they are emitted (alphabetical).
std::span<const MetalAttribute> metal_attributes();

}  // namespace alloy::msl
