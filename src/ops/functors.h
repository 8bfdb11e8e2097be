// The built-in elementwise ops as Metal functors, each written once (src/ops/functors.cpp) and
// registered with one table line: its Alloy/MLX op name, MLX's primitive name, its arity, its
// registration family (which dtypes it takes and in which type it computes) and the Metal text of
// its functor. The generated kernels (src/ops/elementwise.cpp) instantiate a functor for the
// dtypes of a call through the same machinery as user kernels (metal_kernel specs, the variant
// cache, the translator and the CPU/NVRTC JITs), so the same text would serve a Metal backend.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "alloy/dtype.h"

namespace alloy::ops {

/// Registration families (PyTorch's REGISTER_*_OP groups), i.e. the dtype rules of an op.
enum class Family {
  /// Any numeric dtype, result in the (promoted) input dtype; half/bfloat computed in float
  /// ("opmath"): abs, negative, add, maximum (NaN-propagating), remainder, power...
  arith,
  /// Floating-point math: float16/bfloat16/float32/float64 keep their dtype (half/bfloat
  /// computed in float); integers and bool give float32 (integer-to-float math: arctan2 on ints
  /// is float): exp, log, sin, divide, arctan2, erf, erfinv...
  float_math,
  /// Floating-point dtypes computed by the functor; integers and bool returned unchanged (the op
  /// needs no kernel for them): floor, ceil, round.
  float_or_identity,
  /// Integers and bool only (bitwise ops); floats are rejected.
  integer_only,
  /// Comparisons: promoted inputs, bool result.
  compare,
  /// Logical ops: inputs read as bool, bool result.
  logical,
  /// Parts of complex64 values (real, imag: float32; conjugate: complex64); the ops return real
  /// inputs themselves (real, conjugate) or zeros (imag) without a kernel, as MLX.
  complex_part,
};

struct OpInfo {
  const char* op;         // "exp": the op's name (ops.h, the functor `exp_functor`)
  const char* primitive;  // "Exp": MLX's primitive name (the registry name)
  int arity;
  Family family;
  bool bool_ok;  // whether bool inputs are accepted (numpy rejects e.g. negative(bool))
  /// Whether complex64 inputs are accepted (MLX's set): the functor then has a complex64_t
  /// overload (complex64 is a pair of floats, MLX's `complex64_t`), chosen by overload
  /// resolution or enable_if on `alloy_is_complex`.
  bool complex_ok;
  const char* metal;  // the functor's Metal source
  /// Other ops whose functors this one calls (space-separated), placed before it.
  const char* needs = nullptr;
};

/// The table entry of `op`; throws std::invalid_argument for an unknown op.
const OpInfo& op_info(std::string_view op);
/// Every registered op.
const std::vector<OpInfo>& all_ops();
/// Metal text shared by the functors (helpers they call), placed before them.
std::string_view functor_helpers();

}  // namespace alloy::ops
