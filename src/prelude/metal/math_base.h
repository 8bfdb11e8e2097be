// The framework of Metal math (math.h): the compute types, the bit tests and the macros that
// define each function. Part of the prelude's core (metal_core.h), which a CUDA translation
// includes before the end of its directive prefix (NVRTC's automatic PCH covers it); the
// functions, selected per kernel (ALLOY_USE_<name>), are in math.h.
#pragma once

namespace metal {

namespace alloy_detail {
template <class T>
struct math_type {
  typedef float type;  // integers
};
template <>
struct math_type<double> {
  typedef double type;
};
template <>
struct math_type<half> {
  typedef half type;
};
template <>
struct math_type<bfloat> {
  typedef bfloat type;
};
template <class T>
using math_t = typename math_type<enable_if_t<is_scalar_arith_c<T>::value(), remove_cv_t<T>>>::type;
template <class A, class B>
using math2_t =
    typename math_type<enable_if_t<is_scalar_arith_c<A>::value() && is_scalar_arith_c<B>::value(),
                                   promote2_t<A, B>>>::type;
template <class A, class B, class C>
using math3_t =
    typename math_type<enable_if_t<is_scalar_arith_c<A>::value() && is_scalar_arith_c<B>::value() &&
                                       is_scalar_arith_c<C>::value(),
                                   promote2_t<promote2_t<A, B>, C>>>::type;

template <class V>
using vmath_t = vec<typename math_type<vec_elem_t<enable_if_t<is_vecish_c<V>::value(), V>>>::type,
                    vec_n_c<V>::value()>;
template <class A, class B>
using vmath2_t = vec<typename math_type<typename vec_arith<A, B>::elem>::type, vec_arith<A, B>::n>;
template <class A, class B, class C>
using vmath3_t = vmath2_t<typename vec_arith<A, B>::type, C>;

// The compute type: double for double, float otherwise.
template <class R>
using calc_t = conditional_t<is_same<R, double>::value, double, float>;

// Bit tests that stay valid under -ffast-math (which lets compilers assume no NaN/inf).
template <class T>
ALLOY_FN constexpr bool bits_isnan(T x) {
  if constexpr (is_lowp_c<T>::value())
    return (x.alloy_bits & 0x7fffu) > (is_same<T, half>::value ? 0x7c00u : 0x7f80u);
  else if constexpr (is_same<T, double>::value)
    return (__builtin_bit_cast(uint64_t, x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  else if constexpr (is_same<T, float>::value)
    return (__builtin_bit_cast(uint32_t, x) & 0x7fffffffu) > 0x7f800000u;
  else
    return false;
}
template <class T>
ALLOY_FN constexpr bool bits_isinf(T x) {
  if constexpr (is_lowp_c<T>::value())
    return (x.alloy_bits & 0x7fffu) == (is_same<T, half>::value ? 0x7c00u : 0x7f80u);
  else if constexpr (is_same<T, double>::value)
    return (__builtin_bit_cast(uint64_t, x) & 0x7fffffffffffffffull) == 0x7ff0000000000000ull;
  else if constexpr (is_same<T, float>::value)
    return (__builtin_bit_cast(uint32_t, x) & 0x7fffffffu) == 0x7f800000u;
  else
    return false;
}
template <class T>
ALLOY_FN constexpr bool bits_signbit(T x) {
  if constexpr (is_lowp_c<T>::value())
    return (x.alloy_bits & 0x8000u) != 0;
  else if constexpr (is_same<T, double>::value)
    return (__builtin_bit_cast(uint64_t, x) >> 63) != 0;
  else if constexpr (is_same<T, float>::value)
    return (__builtin_bit_cast(uint32_t, x) >> 31) != 0;
  else
    return x < 0;
}
ALLOY_FN float sin_c(float x) {
  return ::sinf(x);
}
ALLOY_FN double sin_c(double x) {
  return ::sin(x);
}
ALLOY_FN float cos_c(float x) {
  return ::cosf(x);
}
ALLOY_FN double cos_c(double x) {
  return ::cos(x);
}
ALLOY_FN float remainder_c(float x, float y) {
  return ::remainderf(x, y);
}
ALLOY_FN double remainder_c(double x, double y) {
  return ::remainder(x, y);
}
template <class C>
ALLOY_FN C sinpi_c(C x) {
  const C pi = C(3.14159265358979323846);
  C r = remainder_c(x, C(2));    // [-1, 1], exact
  if (r > C(0.5)) r = C(1) - r;  // sin(pi (1 - r)) = sin(pi r); exact subtractions
  if (r < C(-0.5)) r = C(-1) - r;
  if (r > C(0.25)) return cos_c(pi * (C(0.5) - r));
  if (r < C(-0.25)) return -cos_c(pi * (C(0.5) + r));
  return r == 0 ? x * C(0) : sin_c(pi * r);
}
template <class C>
ALLOY_FN C cospi_c(C x) {
  const C pi = C(3.14159265358979323846);
  C a = remainder_c(x < 0 ? -x : x, C(2));
  a = a < 0 ? -a : a;  // cos(pi x) = cos(pi a), a in [0, 1]
  if (a <= C(0.25)) return cos_c(pi * a);
  if (a < C(0.75)) return sin_c(pi * (C(0.5) - a));
  return -cos_c(pi * (C(1) - a));
}
// fmin/fmax semantics: a NaN operand is ignored.
template <class C>
ALLOY_FN C fmin_c(C a, C b) {
  return (b != b || a <= b) ? a : b;
}
template <class C>
ALLOY_FN C fmax_c(C a, C b) {
  return (b != b || a >= b) ? a : b;
}
}  // namespace alloy_detail

// Applies a scalar function to each component (vectors and swizzles; scalars broadcast). Calls
// are written (name)(...) where they must not find other namespaces' overloads through ADL:
// metal:: holds using-declarations of the precise:: functions, and half is a metal:: class.
// Without vector values (ALLOY_NEED_VECTOR, metal_stdlib.h) no call has a vector argument, and
// the vector forms, which a scalar call would only fail to deduce, are left out.
#ifndef ALLOY_NEED_VECTOR
#define ALLOY_VEC_MAP1(name)
#define ALLOY_VEC_MAP2(name)
#define ALLOY_VEC_MAP3(name)
#else
#define ALLOY_VEC_MAP1(name)                                                                   \
  template <class V>                                                                           \
  ALLOY_FN alloy_detail::vmath_t<V> name(const V& v) {                                         \
    alloy_detail::vmath_t<V> r;                                                                \
    for (int i = 0; i < alloy_detail::vec_n_c<V>::value(); ++i) r[i] = (name)(v.alloy_get(i)); \
    return r;                                                                                  \
  }
#define ALLOY_VEC_MAP2(name)                                             \
  template <class A, class B>                                            \
  ALLOY_FN alloy_detail::vmath2_t<A, B> name(const A& a, const B& b) {   \
    alloy_detail::vmath2_t<A, B> r;                                      \
    for (int i = 0; i < r.alloy_n; ++i)                                  \
      r[i] = (name)(alloy_detail::comp(a, i), alloy_detail::comp(b, i)); \
    return r;                                                            \
  }
#define ALLOY_VEC_MAP3(name)                                                                       \
  template <class A, class B, class C>                                                             \
  ALLOY_FN alloy_detail::vmath3_t<A, B, C> name(const A& a, const B& b, const C& c) {              \
    alloy_detail::vmath3_t<A, B, C> r;                                                             \
    for (int i = 0; i < r.alloy_n; ++i)                                                            \
      r[i] = (name)(alloy_detail::comp(a, i), alloy_detail::comp(b, i), alloy_detail::comp(c, i)); \
    return r;                                                                                      \
  }
#endif  // ALLOY_NEED_VECTOR

// name(x): `fexpr` on float x, `dexpr` on double x.
#define ALLOY_MATH1(name, fexpr, dexpr)         \
  template <class T>                            \
  ALLOY_FN alloy_detail::math_t<T> name(T x_) { \
    typedef alloy_detail::math_t<T> R;          \
    if constexpr (is_same<R, double>::value) {  \
      double x = x_;                            \
      return dexpr;                             \
    } else {                                    \
      float x = static_cast<float>(x_);         \
      return R(fexpr);                          \
    }                                           \
  }                                             \
  ALLOY_VEC_MAP1(name)
#define ALLOY_MATH2(name, fexpr, dexpr)                                \
  template <class A, class B>                                          \
  ALLOY_FN alloy_detail::math2_t<A, B> name(A x_, B y_) {              \
    typedef alloy_detail::math2_t<A, B> R;                             \
    if constexpr (is_same<R, double>::value) {                         \
      double x = static_cast<double>(x_), y = static_cast<double>(y_); \
      return dexpr;                                                    \
    } else {                                                           \
      float x = static_cast<float>(x_), y = static_cast<float>(y_);    \
      return R(fexpr);                                                 \
    }                                                                  \
  }                                                                    \
  ALLOY_VEC_MAP2(name)
#define ALLOY_MATH3(name, fexpr, dexpr)                                                         \
  template <class A, class B, class C>                                                          \
  ALLOY_FN alloy_detail::math3_t<A, B, C> name(A x_, B y_, C z_) {                              \
    typedef alloy_detail::math3_t<A, B, C> R;                                                   \
    if constexpr (is_same<R, double>::value) {                                                  \
      double x = static_cast<double>(x_), y = static_cast<double>(y_),                          \
             z = static_cast<double>(z_);                                                       \
      return dexpr;                                                                             \
    } else {                                                                                    \
      float x = static_cast<float>(x_), y = static_cast<float>(y_), z = static_cast<float>(z_); \
      return R(fexpr);                                                                          \
    }                                                                                           \
  }                                                                                             \
  ALLOY_VEC_MAP3(name)

}  // namespace metal
