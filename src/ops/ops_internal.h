// What the ops' own files share (not public).
#pragma once
#include <string>
#include <vector>

#include "alloy/ops.h"

namespace alloy::ops {

/// The elementwise op `op` (a functor of src/ops/functors.cpp) applied to `inputs`: promotion
/// checked, inputs moved to the op's device and broadcast (0-d inputs stay 0-d), a pending
/// Elementwise node returned.
Array apply_elementwise(const std::string& op, const std::vector<Array>& inputs, StreamOrDevice s);

// The placement rules of ops.cpp, for ops defined in other files (scan, indexing, random).
/// The device an op on `inputs` runs on (the given one, else its first input that is not 0-d).
Device resolve_device(const std::vector<Array>& inputs, StreamOrDevice s);
/// The stream an op on device `d` runs on (the given stream, else d's default).
Stream resolve_stream(Device d, const StreamOrDevice& s);
/// `a` on device `d` (small host scalars stay on the host for a GPU op).
Array to_op_device(const Array& a, Device d);
/// Rejects float64 on the GPU, and the GPU when none is available.
void check_op_dtype(Device d, Dtype t, const char* op);
/// Axes made non-negative, sorted, checked (std::invalid_argument naming `op`).
std::vector<int> normalize_op_axes(const Array& a, std::vector<int> axes, const char* op);

}  // namespace alloy::ops
