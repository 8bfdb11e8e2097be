// The Metal standard library for Alloy's non-Metal targets (see README.md). Translated kernels
// include this, then place the user's header and kernel inside `namespace metal { ... }`.
// The selection macros are described in metal_core.h (the part every kernel includes first).
#pragma once

#include "metal_core.h"

// Order matters: each header uses the ones before it (metal_core.h's first).
// clang-format off
#include "metal/math.h"
#ifdef ALLOY_NEED_INTEGER
#include "metal/integer.h"
#endif
#if defined(ALLOY_NEED_ATOMIC) || defined(ALLOY_NEED_SYNC)
#include "metal/atomic.h"
#endif
#ifdef ALLOY_NEED_SYNC
#include "metal/sync.h"
#endif
#ifdef ALLOY_NEED_SIMD
#include "metal/simd.h"
#endif
#ifdef ALLOY_NEED_MATRIX
#include "metal/matrix.h"
#endif
#ifdef ALLOY_NEED_MLX
#include "metal/mlx.h"
#endif
#ifdef ALLOY_NEED_METAL_INTERNAL
#include "metal/metal_internal.h"
#endif
// clang-format on
