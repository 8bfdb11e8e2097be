// Metal compiler internals that MLX's headers call directly: bf16_math.h defines bfloat16_t math
// and simd functions as `__metal_<fn>(static_cast<float>(x), __METAL_MAYBE_FAST_MATH__)`, and
// the NAX headers read `__metal_get_thread_index_in_simdgroup(ushort())`. Each is the prelude's
// function of that name; the math mode argument is accepted and ignored (the kernel's math mode,
// ALLOY_MATH_FAST, already chose precise or fast functions for unqualified names).
#pragma once

#define __METAL_MAYBE_FAST_MATH__ 0
#define __METAL_FAST_MATH__ 0
#define __METAL_PRECISE_MATH__ 0

namespace metal {

#define ALLOY_METAL_BUILTIN1(fn)          \
  template <class T, class... Mode>       \
  ALLOY_FN T __metal_##fn(T x, Mode...) { \
    return T(fn(x));                      \
  }
#define ALLOY_METAL_BUILTIN2(fn)               \
  template <class T, class... Mode>            \
  ALLOY_FN T __metal_##fn(T x, T y, Mode...) { \
    return T(fn(x, y));                        \
  }
#define ALLOY_METAL_BUILTIN3(fn)                    \
  template <class T, class... Mode>                 \
  ALLOY_FN T __metal_##fn(T x, T y, T z, Mode...) { \
    return T(fn(x, y, z));                          \
  }
ALLOY_METAL_BUILTIN1(acos)
ALLOY_METAL_BUILTIN1(acosh)
ALLOY_METAL_BUILTIN1(asin)
ALLOY_METAL_BUILTIN1(asinh)
ALLOY_METAL_BUILTIN1(atan)
ALLOY_METAL_BUILTIN1(atanh)
ALLOY_METAL_BUILTIN1(ceil)
ALLOY_METAL_BUILTIN1(cos)
ALLOY_METAL_BUILTIN1(cosh)
ALLOY_METAL_BUILTIN1(cospi)
ALLOY_METAL_BUILTIN1(exp)
ALLOY_METAL_BUILTIN1(exp10)
ALLOY_METAL_BUILTIN1(exp2)
ALLOY_METAL_BUILTIN1(fabs)
ALLOY_METAL_BUILTIN1(floor)
ALLOY_METAL_BUILTIN1(fract)
ALLOY_METAL_BUILTIN1(log)
ALLOY_METAL_BUILTIN1(log10)
ALLOY_METAL_BUILTIN1(log2)
ALLOY_METAL_BUILTIN1(rint)
ALLOY_METAL_BUILTIN1(round)
ALLOY_METAL_BUILTIN1(rsqrt)
ALLOY_METAL_BUILTIN1(sin)
ALLOY_METAL_BUILTIN1(sinh)
ALLOY_METAL_BUILTIN1(sinpi)
ALLOY_METAL_BUILTIN1(sqrt)
ALLOY_METAL_BUILTIN1(tan)
ALLOY_METAL_BUILTIN1(tanh)
ALLOY_METAL_BUILTIN1(tanpi)
ALLOY_METAL_BUILTIN1(trunc)
ALLOY_METAL_BUILTIN2(atan2)
ALLOY_METAL_BUILTIN2(divide)
ALLOY_METAL_BUILTIN2(fmax)
ALLOY_METAL_BUILTIN2(fmin)
ALLOY_METAL_BUILTIN2(fmod)
ALLOY_METAL_BUILTIN2(nextafter)
ALLOY_METAL_BUILTIN2(pow)
ALLOY_METAL_BUILTIN2(powr)
ALLOY_METAL_BUILTIN3(fma)
ALLOY_METAL_BUILTIN3(fmax3)
ALLOY_METAL_BUILTIN3(fmin3)
ALLOY_METAL_BUILTIN3(fmedian3)
#undef ALLOY_METAL_BUILTIN1
#undef ALLOY_METAL_BUILTIN2
#undef ALLOY_METAL_BUILTIN3

template <class T, class... Mode>
ALLOY_FN T __metal_ldexp(T x, int k, Mode...) {
  return T(ldexp(x, k));
}
template <class T>
ALLOY_FN T __metal_frexp(T x, int* e) {
  return T(frexp(x, *e));
}

// simd functions (simd.h) on the compute type.
#define ALLOY_METAL_SIMD0(fn)    \
  template <class T>             \
  ALLOY_FN T __metal_##fn(T x) { \
    return T(fn(x));             \
  }
#define ALLOY_METAL_SIMD1(fn)                 \
  template <class T>                          \
  ALLOY_FN T __metal_##fn(T x, ushort lane) { \
    return T(fn(x, lane));                    \
  }
ALLOY_METAL_SIMD0(simd_max)
ALLOY_METAL_SIMD0(simd_min)
ALLOY_METAL_SIMD0(simd_product)
ALLOY_METAL_SIMD0(simd_sum)
ALLOY_METAL_SIMD0(simd_prefix_exclusive_product)
ALLOY_METAL_SIMD0(simd_prefix_exclusive_sum)
ALLOY_METAL_SIMD0(simd_prefix_inclusive_product)
ALLOY_METAL_SIMD0(simd_prefix_inclusive_sum)
ALLOY_METAL_SIMD1(simd_broadcast)
ALLOY_METAL_SIMD1(simd_shuffle)
ALLOY_METAL_SIMD1(simd_shuffle_down)
ALLOY_METAL_SIMD1(simd_shuffle_up)
ALLOY_METAL_SIMD1(simd_shuffle_xor)
ALLOY_METAL_SIMD1(simd_shuffle_rotate_down)
ALLOY_METAL_SIMD1(simd_shuffle_rotate_up)
#undef ALLOY_METAL_SIMD0
#undef ALLOY_METAL_SIMD1
// On a floating value: the xor of its bits (bf16_math.h instantiates it for float).
template <class T>
ALLOY_FN T __metal_simd_xor(T x) {
  if constexpr (is_floating_point_v<T> && sizeof(T) == 4)
    return as_type<T>(simd_xor(as_type<uint>(x)));
  else
    return simd_xor(x);
}
template <class T>
ALLOY_FN T __metal_simd_shuffle_and_fill_down(T x, T fill, ushort delta, ushort modulo) {
  return T(simd_shuffle_and_fill_down(x, fill, delta, modulo));
}
template <class T>
ALLOY_FN T __metal_simd_shuffle_and_fill_up(T x, T fill, ushort delta, ushort modulo) {
  return T(simd_shuffle_and_fill_up(x, fill, delta, modulo));
}
template <class T>
ALLOY_FN T __metal_get_simdgroup_size(T) {
  return T(32);
}
template <class T>
ALLOY_FN T __metal_get_thread_index_in_simdgroup(T) {
  return T(alloy_target::lane_id());
}

}  // namespace metal
