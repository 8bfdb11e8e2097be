// The Metal standard library for Alloy's non-Metal targets (see README.md). Translated kernels
// include this, then place the user's header and kernel inside `namespace metal { ... }`.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include "cuda/target.h"
#else
#include "cpu/target.h"
#endif

// Order matters: each header uses the ones before it.
// clang-format off
#include "half_bits.h"
#include "metal/traits.h"
#include "metal/types.h"
#include "metal/vector.h"
#include "metal/math.h"
#include "metal/integer.h"
#include "metal/atomic.h"
#include "metal/sync.h"
#include "metal/simd.h"
#include "metal/matrix.h"
#include "metal/mlx.h"
// clang-format on
