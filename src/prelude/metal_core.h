// The core of the Metal standard library for Alloy's non-Metal targets (see README.md): the
// target layer, types, vectors; metal_stdlib.h adds the math functions and the optional parts.
// A CUDA translation includes this first, before the end of its directive prefix, so that
// NVRTC's automatic PCH of it is shared by kernels that differ only in their math functions
// (ALLOY_USE_<name>, defined after it; msl/prelude_select.h prelude_defines).
#pragma once

// Prelude selection. Parsing is most of a small kernel's NVRTC compile time, so a translated
// kernel defines ALLOY_SELECT and only the parts its source names (msl/prelude_select.cpp):
//   ALLOY_NEED_INTEGER  metal/integer.h     ALLOY_NEED_SIMD    metal/simd.h
//   ALLOY_NEED_ATOMIC   metal/atomic.h      ALLOY_NEED_MATRIX  metal/matrix.h
//   ALLOY_NEED_SYNC     metal/sync.h        ALLOY_NEED_MLX     metal/mlx.h
//   ALLOY_SWIZZLE_<xyzw spelling>: that swizzle member of the vectors (metal/vector.h)
//   ALLOY_USE_<name>: that math function (metal/math.h; the others are deleted stand-ins)
//   ALLOY_NEED_METAL_INTERNAL  metal/metal_internal.h (__metal_* builtins; brings SIMD)
//   ALLOY_NEED_ROBUST   robust.h (bounds-checked pointers; the translator's robust mode)
// The core is partly lazy too: ALLOY_NEED_LOWP declares half and bfloat (otherwise incomplete
// types: templates naming them still parse), ALLOY_NEED_PACKED the packed vectors,
// ALLOY_NEED_ENTRY_ARGS entry.h's binding templates for CUDA entries; the target layer's lanes
// and atomics come with the optional parts that use them (ALLOY_NEED_TARGET_SYNC).
// ALLOY_NEED_VECTOR: vector values (constructors, swizzles, operators; metal/vector.h), unless
// vectors are only attributes read through .x/.y/.z; always on the CPU and with everything that
// is written against whole vectors (optional parts, packed vectors, swizzles, entry.h's templates,
// robust mode). ALLOY_NEED_TRAITS: the type traits no core code uses (metal/traits.h), and
// ALLOY_NEED_LIMITS: numeric_limits (metal/types.h), when named; always on the CPU and with the
// optional parts.
// Without ALLOY_SELECT (tests, direct includes), everything.
#ifndef ALLOY_SELECT
#define ALLOY_MATH_ALL 1
#define ALLOY_NEED_INTEGER 1
#define ALLOY_NEED_ATOMIC 1
#define ALLOY_NEED_SYNC 1
#define ALLOY_NEED_SIMD 1
#define ALLOY_NEED_MATRIX 1
#define ALLOY_NEED_MLX 1
#define ALLOY_SWIZZLES_ALL 1
#define ALLOY_NEED_ROBUST 1
#define ALLOY_NEED_METAL_INTERNAL 1
#define ALLOY_NEED_LOWP 1
#define ALLOY_NEED_PACKED 1
#define ALLOY_NEED_VECTOR 1
#define ALLOY_NEED_TRAITS 1
#define ALLOY_NEED_LIMITS 1
#endif
#if defined(ALLOY_NEED_METAL_INTERNAL) && !defined(ALLOY_NEED_SIMD)
#define ALLOY_NEED_SIMD 1
#endif
// The optional headers are written against the whole core.
#if defined(ALLOY_NEED_INTEGER) || defined(ALLOY_NEED_ATOMIC) || defined(ALLOY_NEED_SYNC) || \
    defined(ALLOY_NEED_SIMD) || defined(ALLOY_NEED_MATRIX) || defined(ALLOY_NEED_MLX)
#ifndef ALLOY_NEED_LOWP
#define ALLOY_NEED_LOWP 1
#endif
#ifndef ALLOY_NEED_PACKED
#define ALLOY_NEED_PACKED 1
#endif
#ifndef ALLOY_NEED_TRAITS
#define ALLOY_NEED_TRAITS 1
#endif
#ifndef ALLOY_NEED_LIMITS
#define ALLOY_NEED_LIMITS 1
#endif
#endif
// The math functions that use numeric_limits (metal/math.h).
#if !defined(ALLOY_NEED_LIMITS) && \
    (defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fract) || defined(ALLOY_USE_isnormal))
#define ALLOY_NEED_LIMITS 1
#endif
#if !(defined(__CUDACC_RTC__) || defined(__CUDACC__))
#ifndef ALLOY_NEED_TRAITS
#define ALLOY_NEED_TRAITS 1
#endif
#ifndef ALLOY_NEED_LIMITS
#define ALLOY_NEED_LIMITS 1
#endif
#endif
#if !defined(ALLOY_NEED_VECTOR) &&                                                            \
    (!(defined(__CUDACC_RTC__) || defined(__CUDACC__)) || defined(ALLOY_NEED_PACKED) ||       \
     defined(ALLOY_NEED_ENTRY_ARGS) || defined(ALLOY_NEED_ROBUST) ||                          \
     defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLES_2) || defined(ALLOY_SWIZZLES_3) || \
     defined(ALLOY_SWIZZLES_4))
#define ALLOY_NEED_VECTOR 1
#endif
#if defined(ALLOY_NEED_ATOMIC) || defined(ALLOY_NEED_SYNC) || defined(ALLOY_NEED_SIMD) || \
    defined(ALLOY_NEED_MATRIX)
#define ALLOY_NEED_TARGET_SYNC 1
#endif

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include "cuda/target.h"
#else
#include "cpu/target.h"
#endif

// Order matters: each header uses the ones before it. The optional ones use only the core
// (traits, types, vector, math) and, for sync.h, atomic.h.
// clang-format off
#ifdef ALLOY_NEED_LOWP
#include "half_bits.h"
#endif
#include "metal/traits.h"
#include "metal/types.h"
#include "metal/vector.h"
#include "metal/math_base.h"
// clang-format on
