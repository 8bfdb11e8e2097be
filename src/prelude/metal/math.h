// Metal math (<metal_math>, <metal_common>, <metal_geometric>, <metal_relational>).
//
// metal::precise:: is IEEE-accurate (the C library's float functions), metal::fast:: uses the
// target's fast approximations; unqualified metal:: names are precise unless ALLOY_MATH_FAST is
// defined (Metal's fast-math compile option). Both give exp(-INFINITY) == 0.
//
// Every function takes float, half, bfloat (computed in float, rounded once), double (computed in
// double: CPU float64 ops use these functors too), integers (as float) and vectors of those.
// Mixed scalar arguments follow Metal's promotion (half with int -> half, half with float ->
// float), so templates instantiated with half keep compiling where literals are ints or floats.
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
using math_t = typename math_type<enable_if_t<is_scalar_arith<T>, remove_cv_t<T>>>::type;
template <class A, class B>
using math2_t = typename math_type<
    enable_if_t<is_scalar_arith<A> && is_scalar_arith<B>, promote2_t<A, B>>>::type;
template <class A, class B, class C>
using math3_t =
    typename math_type<enable_if_t<is_scalar_arith<A> && is_scalar_arith<B> && is_scalar_arith<C>,
                                   promote2_t<promote2_t<A, B>, C>>>::type;

template <class V>
using vmath_t = vec<typename math_type<vec_elem_t<enable_if_t<is_vecish<V>, V>>>::type, vec_n<V>>;
template <class A, class B>
using vmath2_t = vec<typename math_type<typename vec_arith<A, B>::elem>::type, vec_arith<A, B>::n>;
template <class A, class B, class C>
using vmath3_t = vmath2_t<typename vec_arith<A, B>::type, C>;

// The compute type: double for double, float otherwise.
template <class R>
using calc_t = conditional_t<is_same_v<R, double>, double, float>;

// Bit tests that stay valid under -ffast-math (which lets compilers assume no NaN/inf).
template <class T>
ALLOY_FN constexpr bool bits_isnan(T x) {
  if constexpr (is_lowp<T>)
    return (x.alloy_bits & 0x7fffu) > (is_same_v<T, half> ? 0x7c00u : 0x7f80u);
  else if constexpr (is_same_v<T, double>)
    return (__builtin_bit_cast(uint64_t, x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  else if constexpr (is_same_v<T, float>)
    return (__builtin_bit_cast(uint32_t, x) & 0x7fffffffu) > 0x7f800000u;
  else
    return false;
}
template <class T>
ALLOY_FN constexpr bool bits_isinf(T x) {
  if constexpr (is_lowp<T>)
    return (x.alloy_bits & 0x7fffu) == (is_same_v<T, half> ? 0x7c00u : 0x7f80u);
  else if constexpr (is_same_v<T, double>)
    return (__builtin_bit_cast(uint64_t, x) & 0x7fffffffffffffffull) == 0x7ff0000000000000ull;
  else if constexpr (is_same_v<T, float>)
    return (__builtin_bit_cast(uint32_t, x) & 0x7fffffffu) == 0x7f800000u;
  else
    return false;
}
template <class T>
ALLOY_FN constexpr bool bits_signbit(T x) {
  if constexpr (is_lowp<T>)
    return (x.alloy_bits & 0x8000u) != 0;
  else if constexpr (is_same_v<T, double>)
    return (__builtin_bit_cast(uint64_t, x) >> 63) != 0;
  else if constexpr (is_same_v<T, float>)
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
#define ALLOY_VEC_MAP1(name)                                                        \
  template <class V>                                                                \
  ALLOY_FN alloy_detail::vmath_t<V> name(const V& v) {                              \
    alloy_detail::vmath_t<V> r;                                                     \
    for (int i = 0; i < alloy_detail::vec_n<V>; ++i) r[i] = (name)(v.alloy_get(i)); \
    return r;                                                                       \
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

// name(x): `fexpr` on float x, `dexpr` on double x.
#define ALLOY_MATH1(name, fexpr, dexpr)         \
  template <class T>                            \
  ALLOY_FN alloy_detail::math_t<T> name(T x_) { \
    typedef alloy_detail::math_t<T> R;          \
    if constexpr (is_same_v<R, double>) {       \
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
    if constexpr (is_same_v<R, double>) {                              \
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
    if constexpr (is_same_v<R, double>) {                                                       \
      double x = static_cast<double>(x_), y = static_cast<double>(y_),                          \
             z = static_cast<double>(z_);                                                       \
      return dexpr;                                                                             \
    } else {                                                                                    \
      float x = static_cast<float>(x_), y = static_cast<float>(y_), z = static_cast<float>(z_); \
      return R(fexpr);                                                                          \
    }                                                                                           \
  }                                                                                             \
  ALLOY_VEC_MAP3(name)

// ---- Functions with the same definition in precise and fast modes ----

ALLOY_MATH1(floor, ::floorf(x), ::floor(x))
ALLOY_MATH1(ceil, ::ceilf(x), ::ceil(x))
ALLOY_MATH1(round, ::roundf(x), ::round(x))  // halfway cases away from zero
ALLOY_MATH1(rint, ::rintf(x), ::rint(x))     // halfway cases to even
ALLOY_MATH1(trunc, ::truncf(x), ::trunc(x))
ALLOY_MATH1(fabs, ::fabsf(x), ::fabs(x))
ALLOY_MATH1(asin, ::asinf(x), ::asin(x))
ALLOY_MATH1(acos, ::acosf(x), ::acos(x))
ALLOY_MATH1(atan, ::atanf(x), ::atan(x))
ALLOY_MATH1(sinh, ::sinhf(x), ::sinh(x))
ALLOY_MATH1(cosh, ::coshf(x), ::cosh(x))
ALLOY_MATH1(tanh, ::tanhf(x), ::tanh(x))
ALLOY_MATH1(asinh, ::asinhf(x), ::asinh(x))
ALLOY_MATH1(acosh, ::acoshf(x), ::acosh(x))
ALLOY_MATH1(atanh, ::atanhf(x), ::atanh(x))
ALLOY_MATH1(logb, ::logbf(x), ::logb(x))
ALLOY_MATH1(cbrt, ::cbrtf(x), ::cbrt(x))
// sinpi(x) = sin(pi x), cospi, tanpi: exact range reduction (|r| <= 1/4 after symmetries), so
// results are exact at integers and half-integers and accurate near the zeros.
ALLOY_MATH1(sinpi, alloy_detail::sinpi_c(x), alloy_detail::sinpi_c(x))
ALLOY_MATH1(cospi, alloy_detail::cospi_c(x), alloy_detail::cospi_c(x))
ALLOY_MATH1(tanpi, alloy_detail::sinpi_c(x) / alloy_detail::cospi_c(x),
            alloy_detail::sinpi_c(x) / alloy_detail::cospi_c(x))
ALLOY_MATH2(atan2, ::atan2f(x, y), ::atan2(x, y))
ALLOY_MATH2(fmod, ::fmodf(x, y), ::fmod(x, y))
ALLOY_MATH2(copysign, ::copysignf(x, y), ::copysign(x, y))
ALLOY_MATH2(fdim, ::fdimf(x, y), ::fdim(x, y))
ALLOY_MATH2(fmin, alloy_detail::fmin_c(x, y), alloy_detail::fmin_c(x, y))
ALLOY_MATH2(fmax, alloy_detail::fmax_c(x, y), alloy_detail::fmax_c(x, y))
ALLOY_MATH2(step, x <= y ? 1.0f : 0.0f, x <= y ? 1.0 : 0.0)  // step(edge, x): 0 if x < edge
ALLOY_MATH3(fma, ::fmaf(x, y, z), ::fma(x, y, z))
ALLOY_MATH3(mix, x + (y - x) * z, x + (y - x) * z)
ALLOY_MATH3(fmin3, alloy_detail::fmin_c(alloy_detail::fmin_c(x, y), z),
            alloy_detail::fmin_c(alloy_detail::fmin_c(x, y), z))
ALLOY_MATH3(fmax3, alloy_detail::fmax_c(alloy_detail::fmax_c(x, y), z),
            alloy_detail::fmax_c(alloy_detail::fmax_c(x, y), z))
ALLOY_MATH3(fmedian3,
            alloy_detail::fmax_c(alloy_detail::fmin_c(x, y),
                                 alloy_detail::fmin_c(alloy_detail::fmax_c(x, y), z)),
            alloy_detail::fmax_c(alloy_detail::fmin_c(x, y),
                                 alloy_detail::fmin_c(alloy_detail::fmax_c(x, y), z)))
ALLOY_MATH3(
    smoothstep,
    alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0f), 1.0f) *
        alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0f), 1.0f) *
        (3.0f - 2.0f * alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0f), 1.0f)),
    alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0), 1.0) *
        alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0), 1.0) *
        (3.0 - 2.0 * alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0), 1.0)))

// sign(x): 1, -1, or x itself for +-0, 0 for NaN.
ALLOY_MATH1(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x == 0.0f ? x : 0.0f)),
            x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : (x == 0.0 ? x : 0.0)))

// fract(x) = x - floor(x), kept below 1 in the result type.
template <class T>
ALLOY_FN alloy_detail::math_t<T> fract(T x_) {
  typedef alloy_detail::math_t<T> R;
  typedef alloy_detail::calc_t<R> C;
  C x = static_cast<C>(x_);
  C below_one = C(1) - static_cast<C>(numeric_limits<R>::epsilon()) / C(2);
  C f = x - (is_same_v<C, double> ? C(::floor(x)) : C(::floorf(float(x))));
  return R(alloy_detail::fmin_c(f, below_one));
}
ALLOY_VEC_MAP1(fract)

// saturate(x) = clamp(x, 0, 1)
ALLOY_MATH1(saturate, alloy_detail::fmin_c(alloy_detail::fmax_c(x, 0.0f), 1.0f),
            alloy_detail::fmin_c(alloy_detail::fmax_c(x, 0.0), 1.0))

// ldexp(x, k) and ilogb: integer second argument / result.
template <class T>
ALLOY_FN alloy_detail::math_t<T> ldexp(T x, int k) {
  typedef alloy_detail::math_t<T> R;
  if constexpr (is_same_v<R, double>)
    return ::ldexp(double(x), k);
  else
    return R(::ldexpf(static_cast<float>(x), k));
}
template <class V, class K>
ALLOY_FN alloy_detail::vmath_t<V> ldexp(const V& v, const K& k) {
  alloy_detail::vmath_t<V> r;
  for (int i = 0; i < r.alloy_n; ++i) r[i] = ldexp(v.alloy_get(i), int(alloy_detail::comp(k, i)));
  return r;
}
template <class T>
ALLOY_FN enable_if_t<alloy_detail::is_scalar_arith<T>, int> ilogb(T x) {
  if constexpr (is_same_v<T, double>)
    return ::ilogb(x);
  else
    return ::ilogbf(static_cast<float>(x));
}

// frexp(x, exp) -> mantissa in [0.5, 1); modf(x, ip) -> fractional part. Out-parameters are
// `thread T&` in Metal (references after translation); pointers are accepted too.
template <class T>
ALLOY_FN alloy_detail::math_t<T> frexp(T x, int& e) {
  typedef alloy_detail::math_t<T> R;
  if constexpr (is_same_v<R, double>)
    return ::frexp(double(x), &e);
  else
    return R(::frexpf(static_cast<float>(x), &e));
}
template <class T>
ALLOY_FN alloy_detail::math_t<T> frexp(T x, int* e) {
  return frexp(x, *e);
}
template <class V, class I, enable_if_t<alloy_detail::is_vecish<V>, int> = 0>
ALLOY_FN alloy_detail::vmath_t<V> frexp(const V& v, I& e) {
  alloy_detail::vmath_t<V> r;
  for (int i = 0; i < r.alloy_n; ++i) {
    int ei;
    r[i] = frexp(v.alloy_get(i), ei);
    e[i] = ei;
  }
  return r;
}
template <class T>
ALLOY_FN alloy_detail::math_t<T> modf(T x, alloy_detail::math_t<T>& ip) {
  typedef alloy_detail::math_t<T> R;
  if constexpr (is_same_v<R, double>) {
    return ::modf(double(x), &ip);
  } else {
    float i;
    R f = R(::modff(static_cast<float>(x), &i));
    ip = R(i);
    return f;
  }
}
template <class T>
ALLOY_FN alloy_detail::math_t<T> modf(T x, alloy_detail::math_t<T>* ip) {
  return modf(x, *ip);
}
template <class V, enable_if_t<alloy_detail::is_vecish<V>, int> = 0>
ALLOY_FN alloy_detail::vmath_t<V> modf(const V& v, alloy_detail::vmath_t<V>& ip) {
  alloy_detail::vmath_t<V> r;
  for (int i = 0; i < r.alloy_n; ++i) r[i] = modf(v.alloy_get(i), ip[i]);
  return r;
}

// nextafter: half and bfloat step in their own units.
template <class A, class B>
ALLOY_FN alloy_detail::math2_t<A, B> nextafter(A x_, B y_) {
  typedef alloy_detail::math2_t<A, B> R;
  if constexpr (is_same_v<R, double>) {
    return ::nextafter(double(x_), double(y_));
  } else if constexpr (is_same_v<R, float>) {
    return ::nextafterf(static_cast<float>(x_), static_cast<float>(y_));
  } else {
    R x = R(x_), y = R(y_);
    if (alloy_detail::bits_isnan(x) || alloy_detail::bits_isnan(y)) return R(NAN);
    if (float(x) == float(y)) return y;
    if ((x.alloy_bits & 0x7fffu) == 0)
      return R::from_bits(static_cast<uint16_t>((y.alloy_bits & 0x8000u) | 1u));
    bool up = (float(y) > float(x)) == !alloy_detail::bits_signbit(x);
    return R::from_bits(static_cast<uint16_t>(up ? x.alloy_bits + 1 : x.alloy_bits - 1));
  }
}
ALLOY_VEC_MAP2(nextafter)

// ---- Relational ----

template <class T, enable_if_t<alloy_detail::is_scalar_arith<T>, int> = 0>
ALLOY_FN constexpr bool isnan(T x) {
  return alloy_detail::bits_isnan(x);
}
template <class T, enable_if_t<alloy_detail::is_scalar_arith<T>, int> = 0>
ALLOY_FN constexpr bool isinf(T x) {
  return alloy_detail::bits_isinf(x);
}
template <class T, enable_if_t<alloy_detail::is_scalar_arith<T>, int> = 0>
ALLOY_FN constexpr bool isfinite(T x) {
  return !alloy_detail::bits_isnan(x) && !alloy_detail::bits_isinf(x);
}
template <class T, enable_if_t<alloy_detail::is_scalar_arith<T>, int> = 0>
ALLOY_FN constexpr bool signbit(T x) {
  return alloy_detail::bits_signbit(x);
}
template <class T, enable_if_t<alloy_detail::is_scalar_arith<T>, int> = 0>
ALLOY_FN constexpr bool isnormal(T x) {
  return isfinite(x) && x != T(0) &&
         !(static_cast<alloy_detail::calc_t<alloy_detail::math_t<T>>>(fabs(x)) <
           static_cast<alloy_detail::calc_t<alloy_detail::math_t<T>>>(
               numeric_limits<alloy_detail::math_t<T>>::min()));
}
template <
    class A, class B,
    enable_if_t<alloy_detail::is_scalar_arith<A> && alloy_detail::is_scalar_arith<B>, int> = 0>
ALLOY_FN constexpr bool isordered(A x, B y) {
  return !isnan(x) && !isnan(y);
}
template <
    class A, class B,
    enable_if_t<alloy_detail::is_scalar_arith<A> && alloy_detail::is_scalar_arith<B>, int> = 0>
ALLOY_FN constexpr bool isunordered(A x, B y) {
  return isnan(x) || isnan(y);
}
#define ALLOY_VEC_PRED1(name)                                                 \
  template <class V, class R = alloy_detail::vec_bool_t<V>>                   \
  ALLOY_FN R name(const V& v) {                                               \
    R r;                                                                      \
    for (int i = 0; i < R::alloy_n; ++i) r.alloy_e[i] = name(v.alloy_get(i)); \
    return r;                                                                 \
  }
ALLOY_VEC_PRED1(isnan)
ALLOY_VEC_PRED1(isinf)
ALLOY_VEC_PRED1(isfinite)
ALLOY_VEC_PRED1(signbit)
ALLOY_VEC_PRED1(isnormal)
#undef ALLOY_VEC_PRED1

// ---- abs, min, max, clamp (integers too), min3/max3/median3 ----

template <class T, enable_if_t<alloy_detail::is_scalar_arith<T>, int> = 0>
ALLOY_FN constexpr T abs(T x) {
  if constexpr (is_floating_point_v<T>) {
    return fabs(x);
  } else if constexpr (is_signed_v<T>) {
    typedef make_unsigned_t<T> U;
    return x < 0 ? T(U(0) - U(x)) : x;  // abs(INT_MIN) wraps instead of overflowing
  } else {
    return x;
  }
}
template <class V, class R = alloy_detail::vec_unary_t<V>>
ALLOY_FN R abs(const V& v) {
  R r;
  for (int i = 0; i < R::alloy_n; ++i) r.alloy_e[i] = abs(v.alloy_get(i));
  return r;
}

// Floats: NaN operands are ignored (fmin/fmax). Integers: exact.
template <
    class A, class B, class R = alloy_detail::promote2_t<A, B>,
    enable_if_t<alloy_detail::is_scalar_arith<A> && alloy_detail::is_scalar_arith<B>, int> = 0>
ALLOY_FN constexpr R min(A a, B b) {
  if constexpr (is_floating_point_v<R>) {
    typedef alloy_detail::calc_t<R> C;
    return R(alloy_detail::fmin_c(static_cast<C>(a), static_cast<C>(b)));
  } else {
    return R(a) < R(b) ? R(a) : R(b);
  }
}
template <
    class A, class B, class R = alloy_detail::promote2_t<A, B>,
    enable_if_t<alloy_detail::is_scalar_arith<A> && alloy_detail::is_scalar_arith<B>, int> = 0>
ALLOY_FN constexpr R max(A a, B b) {
  if constexpr (is_floating_point_v<R>) {
    typedef alloy_detail::calc_t<R> C;
    return R(alloy_detail::fmax_c(static_cast<C>(a), static_cast<C>(b)));
  } else {
    return R(a) > R(b) ? R(a) : R(b);
  }
}
template <class X, class L, class H,
          class R = alloy_detail::promote2_t<alloy_detail::promote2_t<X, L>, H>,
          enable_if_t<alloy_detail::is_scalar_arith<X> && alloy_detail::is_scalar_arith<L> &&
                          alloy_detail::is_scalar_arith<H>,
                      int> = 0>
ALLOY_FN constexpr R clamp(X x, L lo, H hi) {
  return min(max(R(x), R(lo)), R(hi));
}
template <class A, class B, class C, enable_if_t<alloy_detail::is_scalar_arith<A>, int> = 0>
ALLOY_FN constexpr auto min3(A a, B b, C c) {
  return min(min(a, b), c);
}
template <class A, class B, class C, enable_if_t<alloy_detail::is_scalar_arith<A>, int> = 0>
ALLOY_FN constexpr auto max3(A a, B b, C c) {
  return max(max(a, b), c);
}
template <class A, class B, class C, enable_if_t<alloy_detail::is_scalar_arith<A>, int> = 0>
ALLOY_FN constexpr auto median3(A a, B b, C c) {
  return max(min(a, b), min(max(a, b), c));
}

// Vector forms keep the vector's element type (scalars broadcast).
#define ALLOY_VEC_KEEP2(name)                                            \
  template <class A, class B, class R = alloy_detail::vec_arith_t<A, B>> \
  ALLOY_FN R name(const A& a, const B& b) {                              \
    R r;                                                                 \
    for (int i = 0; i < R::alloy_n; ++i)                                 \
      r.alloy_e[i] = static_cast<typename R::value_type>(                \
          name(alloy_detail::comp(a, i), alloy_detail::comp(b, i)));     \
    return r;                                                            \
  }
#define ALLOY_VEC_KEEP3(name)                                                                  \
  template <class A, class B, class C,                                                         \
            class R = alloy_detail::vec_arith_t<alloy_detail::vec_arith_t<A, B>, C>>           \
  ALLOY_FN R name(const A& a, const B& b, const C& c) {                                        \
    R r;                                                                                       \
    for (int i = 0; i < R::alloy_n; ++i)                                                       \
      r.alloy_e[i] = static_cast<typename R::value_type>(                                      \
          name(alloy_detail::comp(a, i), alloy_detail::comp(b, i), alloy_detail::comp(c, i))); \
    return r;                                                                                  \
  }
ALLOY_VEC_KEEP2(min)
ALLOY_VEC_KEEP2(max)
ALLOY_VEC_KEEP3(clamp)
ALLOY_VEC_KEEP3(min3)
ALLOY_VEC_KEEP3(max3)
ALLOY_VEC_KEEP3(median3)

// ---- Geometric (vectors) ----

template <class A, class B, class V = alloy_detail::vmath2_t<A, B>,
          enable_if_t<alloy_detail::is_vecish<A> && alloy_detail::is_vecish<B>, int> = 0>
ALLOY_FN typename V::value_type dot(const A& a, const B& b) {
  typedef typename V::value_type R;
  typedef alloy_detail::calc_t<R> C;
  C s = 0;
  for (int i = 0; i < V::alloy_n; ++i)
    s += static_cast<C>(alloy_detail::comp(a, i)) * static_cast<C>(alloy_detail::comp(b, i));
  return R(s);
}
template <class V, enable_if_t<alloy_detail::is_vecish<V>, int> = 0>
ALLOY_FN typename alloy_detail::vmath_t<V>::value_type length_squared(const V& v) {
  return dot(v, v);
}
template <class A, class B, class V = alloy_detail::vmath2_t<A, B>,
          enable_if_t<alloy_detail::is_vecish<A> && alloy_detail::is_vecish<B>, int> = 0>
ALLOY_FN typename V::value_type distance_squared(const A& a, const B& b) {
  V d = V(a) - V(b);
  return dot(d, d);
}
template <class A, class B, class V = alloy_detail::vmath2_t<A, B>,
          enable_if_t<alloy_detail::is_vecish<A> && alloy_detail::is_vecish<B>, int> = 0>
ALLOY_FN V cross(const A& a_, const B& b_) {
  static_assert(V::alloy_n == 3, "cross takes 3-component vectors");
  V a = V(a_), b = V(b_);
  return V(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
template <class I, class N, class V = alloy_detail::vmath2_t<I, N>>
ALLOY_FN V reflect(const I& i, const N& n) {
  V vi = V(i), vn = V(n);
  return vi - vn * (dot(vn, vi) * 2);
}
template <class A, class B, class C, class V = alloy_detail::vmath2_t<A, B>>
ALLOY_FN V faceforward(const A& n, const B& i, const C& nref) {
  return dot(nref, i) < 0 ? V(n) : -V(n);
}

// ---- Functions whose precise and fast forms differ ----

namespace precise {
ALLOY_MATH1(exp, ::expf(x), ::exp(x))
ALLOY_MATH1(exp2, ::exp2f(x), ::exp2(x))
ALLOY_MATH1(exp10, ::exp10f(x), ::exp10(x))
ALLOY_MATH1(log, ::logf(x), ::log(x))
ALLOY_MATH1(log2, ::log2f(x), ::log2(x))
ALLOY_MATH1(log10, ::log10f(x), ::log10(x))
ALLOY_MATH1(sqrt, ::sqrtf(x), ::sqrt(x))
ALLOY_MATH1(rsqrt, 1.0f / ::sqrtf(x), 1.0 / ::sqrt(x))
ALLOY_MATH1(sin, ::sinf(x), ::sin(x))
ALLOY_MATH1(cos, ::cosf(x), ::cos(x))
ALLOY_MATH1(tan, ::tanf(x), ::tan(x))
ALLOY_MATH2(pow, ::powf(x, y), ::pow(x, y))
// powr: x >= 0 only (NaN for x < 0), as Metal defines it.
ALLOY_MATH2(powr, x < 0.0f ? NAN : ::powf(x, y), x < 0.0 ? double(NAN) : ::pow(x, y))
ALLOY_MATH2(divide, x / y, x / y)
}  // namespace precise

namespace fast {
ALLOY_MATH1(exp, alloy_target::fast_exp(x), ::exp(x))
ALLOY_MATH1(exp2, alloy_target::fast_exp2(x), ::exp2(x))
ALLOY_MATH1(exp10, alloy_target::fast_exp2(x * 3.32192809488736234787f), ::exp10(x))
ALLOY_MATH1(log, alloy_target::fast_log(x), ::log(x))
ALLOY_MATH1(log2, alloy_target::fast_log2(x), ::log2(x))
ALLOY_MATH1(log10, alloy_target::fast_log2(x) * 0.301029995663981195214f, ::log10(x))
ALLOY_MATH1(sqrt, alloy_target::fast_sqrt(x), ::sqrt(x))
ALLOY_MATH1(rsqrt, alloy_target::fast_rsqrt(x), 1.0 / ::sqrt(x))
ALLOY_MATH1(sin, alloy_target::fast_sin(x), ::sin(x))
ALLOY_MATH1(cos, alloy_target::fast_cos(x), ::cos(x))
ALLOY_MATH1(tan, alloy_target::fast_tan(x), ::tan(x))
ALLOY_MATH2(pow, alloy_target::fast_pow(x, y), ::pow(x, y))
ALLOY_MATH2(powr, x < 0.0f ? NAN : alloy_target::fast_exp2(y * alloy_target::fast_log2(x)),
            x < 0.0 ? double(NAN) : ::pow(x, y))
ALLOY_MATH2(divide, alloy_target::fast_divide(x, y), x / y)
}  // namespace fast

#define ALLOY_MODE_FUNCS(ns)                                                                \
  namespace ns {                                                                            \
  template <class T>                                                                        \
  ALLOY_FN alloy_detail::math_t<T> sincos(T x, alloy_detail::math_t<T>& c) {                \
    c = (cos)(x);                                                                           \
    return (sin)(x);                                                                        \
  }                                                                                         \
  template <class T>                                                                        \
  ALLOY_FN alloy_detail::math_t<T> sincos(T x, alloy_detail::math_t<T>* c) {                \
    *c = (cos)(x);                                                                          \
    return (sin)(x);                                                                        \
  }                                                                                         \
  template <class V, enable_if_t<alloy_detail::is_vecish<V>, int> = 0>                      \
  ALLOY_FN alloy_detail::vmath_t<V> sincos(const V& x, alloy_detail::vmath_t<V>& c) {       \
    c = (cos)(x);                                                                           \
    return (sin)(x);                                                                        \
  }                                                                                         \
  template <class V, enable_if_t<alloy_detail::is_vecish<V>, int> = 0>                      \
  ALLOY_FN typename alloy_detail::vmath_t<V>::value_type length(const V& v) {               \
    return (sqrt)(dot(v, v));                                                               \
  }                                                                                         \
  template <class A, class B, class V = alloy_detail::vmath2_t<A, B>,                       \
            enable_if_t<alloy_detail::is_vecish<A> && alloy_detail::is_vecish<B>, int> = 0> \
  ALLOY_FN typename V::value_type distance(const A& a, const B& b) {                        \
    return (length)(V(a) - V(b));                                                           \
  }                                                                                         \
  template <class V, enable_if_t<alloy_detail::is_vecish<V>, int> = 0>                      \
  ALLOY_FN alloy_detail::vmath_t<V> normalize(const V& v) {                                 \
    alloy_detail::vmath_t<V> x = v;                                                         \
    return x * (rsqrt)(dot(x, x));                                                          \
  }                                                                                         \
  template <class I, class N, class E, class V = alloy_detail::vmath2_t<I, N>>              \
  ALLOY_FN V refract(const I& i, const N& n, E eta) {                                       \
    V vi = V(i), vn = V(n);                                                                 \
    auto d = dot(vn, vi);                                                                   \
    auto k = 1 - eta * eta * (1 - d * d);                                                   \
    if (k < 0) return V(0);                                                                 \
    return vi * eta - vn * (eta * d + (sqrt)(k));                                           \
  }                                                                                         \
  using metal::abs;                                                                         \
  using metal::acos;                                                                        \
  using metal::acosh;                                                                       \
  using metal::asin;                                                                        \
  using metal::asinh;                                                                       \
  using metal::atan;                                                                        \
  using metal::atan2;                                                                       \
  using metal::atanh;                                                                       \
  using metal::cbrt;                                                                        \
  using metal::ceil;                                                                        \
  using metal::clamp;                                                                       \
  using metal::copysign;                                                                    \
  using metal::cosh;                                                                        \
  using metal::cospi;                                                                       \
  using metal::cross;                                                                       \
  using metal::dot;                                                                         \
  using metal::fabs;                                                                        \
  using metal::fdim;                                                                        \
  using metal::floor;                                                                       \
  using metal::fma;                                                                         \
  using metal::fmax;                                                                        \
  using metal::fmax3;                                                                       \
  using metal::fmedian3;                                                                    \
  using metal::fmin;                                                                        \
  using metal::fmin3;                                                                       \
  using metal::fmod;                                                                        \
  using metal::fract;                                                                       \
  using metal::frexp;                                                                       \
  using metal::ilogb;                                                                       \
  using metal::isfinite;                                                                    \
  using metal::isinf;                                                                       \
  using metal::isnan;                                                                       \
  using metal::ldexp;                                                                       \
  using metal::logb;                                                                        \
  using metal::max;                                                                         \
  using metal::max3;                                                                        \
  using metal::median3;                                                                     \
  using metal::min;                                                                         \
  using metal::min3;                                                                        \
  using metal::mix;                                                                         \
  using metal::modf;                                                                        \
  using metal::nextafter;                                                                   \
  using metal::rint;                                                                        \
  using metal::round;                                                                       \
  using metal::saturate;                                                                    \
  using metal::sign;                                                                        \
  using metal::signbit;                                                                     \
  using metal::sinh;                                                                        \
  using metal::sinpi;                                                                       \
  using metal::smoothstep;                                                                  \
  using metal::step;                                                                        \
  using metal::tanh;                                                                        \
  using metal::tanpi;                                                                       \
  using metal::trunc;                                                                       \
  }
ALLOY_MODE_FUNCS(precise)
ALLOY_MODE_FUNCS(fast)
#undef ALLOY_MODE_FUNCS

// Unqualified metal:: names: Metal's default math mode.
#ifdef ALLOY_MATH_FAST
#define ALLOY_MATH_MODE fast
#else
#define ALLOY_MATH_MODE precise
#endif
using ALLOY_MATH_MODE::cos;
using ALLOY_MATH_MODE::distance;
using ALLOY_MATH_MODE::divide;
using ALLOY_MATH_MODE::exp;
using ALLOY_MATH_MODE::exp10;
using ALLOY_MATH_MODE::exp2;
using ALLOY_MATH_MODE::length;
using ALLOY_MATH_MODE::log;
using ALLOY_MATH_MODE::log10;
using ALLOY_MATH_MODE::log2;
using ALLOY_MATH_MODE::normalize;
using ALLOY_MATH_MODE::pow;
using ALLOY_MATH_MODE::powr;
using ALLOY_MATH_MODE::refract;
using ALLOY_MATH_MODE::rsqrt;
using ALLOY_MATH_MODE::sin;
using ALLOY_MATH_MODE::sincos;
using ALLOY_MATH_MODE::sqrt;
using ALLOY_MATH_MODE::tan;
#undef ALLOY_MATH_MODE

}  // namespace metal
