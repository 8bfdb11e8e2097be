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

}  // namespace alloy::ops
