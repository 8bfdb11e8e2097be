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
// After metal/math_base.h (metal_core.h includes it).

namespace metal {

// Prelude selection (metal_stdlib.h): a translated kernel gets only the math functions its
// source names (ALLOY_USE_<name>, with what they call; msl/prelude_select.cpp). A function left
// out is a stand-in, so an unqualified call cannot silently reach the C library's or CUDA's
// function of the same name (it fails to compile instead): a declaration in metal:: hides the
// global one, and its parameter, a reference to an incomplete type, binds to no argument. The
// stand-ins are the declarators of one declaration (one template each cost NVRTC ~1 ms).
namespace alloy_detail {
struct absent_fn;
}  // namespace alloy_detail
#define ALLOY_MATH_ABSENT(name) , name(alloy_detail::absent_fn&)
ALLOY_FN void alloy_math_absent(alloy_detail::absent_fn&)
// clang-format off
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_floor)
ALLOY_MATH_ABSENT(floor)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_ceil)
ALLOY_MATH_ABSENT(ceil)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_round)
ALLOY_MATH_ABSENT(round)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_rint)
ALLOY_MATH_ABSENT(rint)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_trunc)
ALLOY_MATH_ABSENT(trunc)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fabs)
ALLOY_MATH_ABSENT(fabs)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_asin)
ALLOY_MATH_ABSENT(asin)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_acos)
ALLOY_MATH_ABSENT(acos)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_atan)
ALLOY_MATH_ABSENT(atan)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_sinh)
ALLOY_MATH_ABSENT(sinh)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_cosh)
ALLOY_MATH_ABSENT(cosh)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_tanh)
ALLOY_MATH_ABSENT(tanh)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_asinh)
ALLOY_MATH_ABSENT(asinh)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_acosh)
ALLOY_MATH_ABSENT(acosh)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_atanh)
ALLOY_MATH_ABSENT(atanh)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_logb)
ALLOY_MATH_ABSENT(logb)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_cbrt)
ALLOY_MATH_ABSENT(cbrt)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_sinpi)
ALLOY_MATH_ABSENT(sinpi)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_cospi)
ALLOY_MATH_ABSENT(cospi)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_tanpi)
ALLOY_MATH_ABSENT(tanpi)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_atan2)
ALLOY_MATH_ABSENT(atan2)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fmod)
ALLOY_MATH_ABSENT(fmod)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_copysign)
ALLOY_MATH_ABSENT(copysign)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fdim)
ALLOY_MATH_ABSENT(fdim)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fmin)
ALLOY_MATH_ABSENT(fmin)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fmax)
ALLOY_MATH_ABSENT(fmax)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_step)
ALLOY_MATH_ABSENT(step)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fma)
ALLOY_MATH_ABSENT(fma)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_mix)
ALLOY_MATH_ABSENT(mix)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fmin3)
ALLOY_MATH_ABSENT(fmin3)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fmax3)
ALLOY_MATH_ABSENT(fmax3)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fmedian3)
ALLOY_MATH_ABSENT(fmedian3)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_smoothstep)
ALLOY_MATH_ABSENT(smoothstep)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_sign)
ALLOY_MATH_ABSENT(sign)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_fract)
ALLOY_MATH_ABSENT(fract)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_saturate)
ALLOY_MATH_ABSENT(saturate)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_ldexp)
ALLOY_MATH_ABSENT(ldexp)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_ilogb)
ALLOY_MATH_ABSENT(ilogb)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_frexp)
ALLOY_MATH_ABSENT(frexp)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_modf)
ALLOY_MATH_ABSENT(modf)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_nextafter)
ALLOY_MATH_ABSENT(nextafter)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_isnan)
ALLOY_MATH_ABSENT(isnan)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_isinf)
ALLOY_MATH_ABSENT(isinf)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_isfinite)
ALLOY_MATH_ABSENT(isfinite)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_signbit)
ALLOY_MATH_ABSENT(signbit)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_isnormal)
ALLOY_MATH_ABSENT(isnormal)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_isordered)
ALLOY_MATH_ABSENT(isordered)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_isunordered)
ALLOY_MATH_ABSENT(isunordered)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_abs)
ALLOY_MATH_ABSENT(abs)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_min)
ALLOY_MATH_ABSENT(min)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_max)
ALLOY_MATH_ABSENT(max)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_clamp)
ALLOY_MATH_ABSENT(clamp)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_min3)
ALLOY_MATH_ABSENT(min3)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_max3)
ALLOY_MATH_ABSENT(max3)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_median3)
ALLOY_MATH_ABSENT(median3)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_dot)
ALLOY_MATH_ABSENT(dot)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_length_squared)
ALLOY_MATH_ABSENT(length_squared)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_distance_squared)
ALLOY_MATH_ABSENT(distance_squared)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_cross)
ALLOY_MATH_ABSENT(cross)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_reflect)
ALLOY_MATH_ABSENT(reflect)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_faceforward)
ALLOY_MATH_ABSENT(faceforward)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_exp)
ALLOY_MATH_ABSENT(exp)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_exp2)
ALLOY_MATH_ABSENT(exp2)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_exp10)
ALLOY_MATH_ABSENT(exp10)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_log)
ALLOY_MATH_ABSENT(log)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_log2)
ALLOY_MATH_ABSENT(log2)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_log10)
ALLOY_MATH_ABSENT(log10)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_sqrt)
ALLOY_MATH_ABSENT(sqrt)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_rsqrt)
ALLOY_MATH_ABSENT(rsqrt)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_sin)
ALLOY_MATH_ABSENT(sin)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_cos)
ALLOY_MATH_ABSENT(cos)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_tan)
ALLOY_MATH_ABSENT(tan)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_pow)
ALLOY_MATH_ABSENT(pow)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_powr)
ALLOY_MATH_ABSENT(powr)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_divide)
ALLOY_MATH_ABSENT(divide)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_sincos)
ALLOY_MATH_ABSENT(sincos)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_length)
ALLOY_MATH_ABSENT(length)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_distance)
ALLOY_MATH_ABSENT(distance)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_normalize)
ALLOY_MATH_ABSENT(normalize)
#endif
#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_refract)
ALLOY_MATH_ABSENT(refract)
#endif
;
// clang-format on
#undef ALLOY_MATH_ABSENT

// ---- Functions with the same definition in precise and fast modes ----

#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_floor)
ALLOY_MATH1(floor, ::floorf(x), ::floor(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_ceil)
ALLOY_MATH1(ceil, ::ceilf(x), ::ceil(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_round)
ALLOY_MATH1(round, ::roundf(x), ::round(x))  // halfway cases away from zero
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_rint)
ALLOY_MATH1(rint, ::rintf(x), ::rint(x))  // halfway cases to even
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_trunc)
ALLOY_MATH1(trunc, ::truncf(x), ::trunc(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fabs)
ALLOY_MATH1(fabs, ::fabsf(x), ::fabs(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_asin)
ALLOY_MATH1(asin, ::asinf(x), ::asin(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_acos)
ALLOY_MATH1(acos, ::acosf(x), ::acos(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_atan)
ALLOY_MATH1(atan, ::atanf(x), ::atan(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sinh)
ALLOY_MATH1(sinh, ::sinhf(x), ::sinh(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cosh)
ALLOY_MATH1(cosh, ::coshf(x), ::cosh(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_tanh)
ALLOY_MATH1(tanh, ::tanhf(x), ::tanh(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_asinh)
ALLOY_MATH1(asinh, ::asinhf(x), ::asinh(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_acosh)
ALLOY_MATH1(acosh, ::acoshf(x), ::acosh(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_atanh)
ALLOY_MATH1(atanh, ::atanhf(x), ::atanh(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_logb)
ALLOY_MATH1(logb, ::logbf(x), ::logb(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cbrt)
ALLOY_MATH1(cbrt, ::cbrtf(x), ::cbrt(x))
#endif
// sinpi(x) = sin(pi x), cospi, tanpi: exact range reduction (|r| <= 1/4 after symmetries), so
// results are exact at integers and half-integers and accurate near the zeros.
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sinpi)
ALLOY_MATH1(sinpi, alloy_detail::sinpi_c(x), alloy_detail::sinpi_c(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cospi)
ALLOY_MATH1(cospi, alloy_detail::cospi_c(x), alloy_detail::cospi_c(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_tanpi)
ALLOY_MATH1(tanpi, alloy_detail::sinpi_c(x) / alloy_detail::cospi_c(x),
            alloy_detail::sinpi_c(x) / alloy_detail::cospi_c(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_atan2)
ALLOY_MATH2(atan2, ::atan2f(x, y), ::atan2(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmod)
ALLOY_MATH2(fmod, ::fmodf(x, y), ::fmod(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_copysign)
ALLOY_MATH2(copysign, ::copysignf(x, y), ::copysign(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fdim)
ALLOY_MATH2(fdim, ::fdimf(x, y), ::fdim(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmin)
ALLOY_MATH2(fmin, alloy_detail::fmin_c(x, y), alloy_detail::fmin_c(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmax)
ALLOY_MATH2(fmax, alloy_detail::fmax_c(x, y), alloy_detail::fmax_c(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_step)
ALLOY_MATH2(step, x <= y ? 1.0f : 0.0f, x <= y ? 1.0 : 0.0)  // step(edge, x): 0 if x < edge
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fma)
ALLOY_MATH3(fma, ::fmaf(x, y, z), ::fma(x, y, z))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_mix)
ALLOY_MATH3(mix, x + (y - x) * z, x + (y - x) * z)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmin3)
ALLOY_MATH3(fmin3, alloy_detail::fmin_c(alloy_detail::fmin_c(x, y), z),
            alloy_detail::fmin_c(alloy_detail::fmin_c(x, y), z))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmax3)
ALLOY_MATH3(fmax3, alloy_detail::fmax_c(alloy_detail::fmax_c(x, y), z),
            alloy_detail::fmax_c(alloy_detail::fmax_c(x, y), z))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmedian3)
ALLOY_MATH3(fmedian3,
            alloy_detail::fmax_c(alloy_detail::fmin_c(x, y),
                                 alloy_detail::fmin_c(alloy_detail::fmax_c(x, y), z)),
            alloy_detail::fmax_c(alloy_detail::fmin_c(x, y),
                                 alloy_detail::fmin_c(alloy_detail::fmax_c(x, y), z)))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_smoothstep)
ALLOY_MATH3(
    smoothstep,
    alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0f), 1.0f) *
        alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0f), 1.0f) *
        (3.0f - 2.0f * alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0f), 1.0f)),
    alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0), 1.0) *
        alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0), 1.0) *
        (3.0 - 2.0 * alloy_detail::fmin_c(alloy_detail::fmax_c((z - x) / (y - x), 0.0), 1.0)))
#endif

// sign(x): 1, -1, or x itself for +-0, 0 for NaN.
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sign)
ALLOY_MATH1(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x == 0.0f ? x : 0.0f)),
            x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : (x == 0.0 ? x : 0.0)))
#endif

// fract(x) = x - floor(x), kept below 1 in the result type.
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fract)
template <class T>
ALLOY_FN alloy_detail::math_t<T> fract(T x_) {
  typedef alloy_detail::math_t<T> R;
  typedef alloy_detail::calc_t<R> C;
  C x = static_cast<C>(x_);
  C below_one = C(1) - static_cast<C>(numeric_limits<R>::epsilon()) / C(2);
  C f = x - (is_same<C, double>::value ? C(::floor(x)) : C(::floorf(float(x))));
  return R(alloy_detail::fmin_c(f, below_one));
}
ALLOY_VEC_MAP1(fract)
#endif

// saturate(x) = clamp(x, 0, 1)
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_saturate)
ALLOY_MATH1(saturate, alloy_detail::fmin_c(alloy_detail::fmax_c(x, 0.0f), 1.0f),
            alloy_detail::fmin_c(alloy_detail::fmax_c(x, 0.0), 1.0))
#endif

// ldexp(x, k) and ilogb: integer second argument / result.
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_ldexp)
template <class T>
ALLOY_FN alloy_detail::math_t<T> ldexp(T x, int k) {
  typedef alloy_detail::math_t<T> R;
  if constexpr (is_same<R, double>::value)
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
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_ilogb)
template <class T>
ALLOY_FN enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> ilogb(T x) {
  if constexpr (is_same<T, double>::value)
    return ::ilogb(x);
  else
    return ::ilogbf(static_cast<float>(x));
}
#endif

// frexp(x, exp) -> mantissa in [0.5, 1); modf(x, ip) -> fractional part. Out-parameters are
// `thread T&` in Metal (references after translation); pointers are accepted too.
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_frexp)
template <class T>
ALLOY_FN alloy_detail::math_t<T> frexp(T x, int& e) {
  typedef alloy_detail::math_t<T> R;
  if constexpr (is_same<R, double>::value)
    return ::frexp(double(x), &e);
  else
    return R(::frexpf(static_cast<float>(x), &e));
}
template <class T>
ALLOY_FN alloy_detail::math_t<T> frexp(T x, int* e) {
  return frexp(x, *e);
}
template <class V, class I, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0>
ALLOY_FN alloy_detail::vmath_t<V> frexp(const V& v, I& e) {
  alloy_detail::vmath_t<V> r;
  for (int i = 0; i < r.alloy_n; ++i) {
    int ei;
    r[i] = frexp(v.alloy_get(i), ei);
    e[i] = ei;
  }
  return r;
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_modf)
template <class T>
ALLOY_FN alloy_detail::math_t<T> modf(T x, alloy_detail::math_t<T>& ip) {
  typedef alloy_detail::math_t<T> R;
  if constexpr (is_same<R, double>::value) {
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
template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0>
ALLOY_FN alloy_detail::vmath_t<V> modf(const V& v, alloy_detail::vmath_t<V>& ip) {
  alloy_detail::vmath_t<V> r;
  for (int i = 0; i < r.alloy_n; ++i) r[i] = modf(v.alloy_get(i), ip[i]);
  return r;
}
#endif

// nextafter: half and bfloat step in their own units.
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_nextafter)
template <class A, class B>
ALLOY_FN alloy_detail::math2_t<A, B> nextafter(A x_, B y_) {
  typedef alloy_detail::math2_t<A, B> R;
  if constexpr (is_same<R, double>::value) {
    return ::nextafter(double(x_), double(y_));
  } else if constexpr (is_same<R, float>::value) {
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
#endif

// ---- Relational ----

#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isnan)
template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0>
ALLOY_FN constexpr bool isnan(T x) {
  return alloy_detail::bits_isnan(x);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isinf)
template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0>
ALLOY_FN constexpr bool isinf(T x) {
  return alloy_detail::bits_isinf(x);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isfinite)
template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0>
ALLOY_FN constexpr bool isfinite(T x) {
  return !alloy_detail::bits_isnan(x) && !alloy_detail::bits_isinf(x);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_signbit)
template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0>
ALLOY_FN constexpr bool signbit(T x) {
  return alloy_detail::bits_signbit(x);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isnormal)
template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0>
ALLOY_FN constexpr bool isnormal(T x) {
  return isfinite(x) && x != T(0) &&
         !(static_cast<alloy_detail::calc_t<alloy_detail::math_t<T>>>(fabs(x)) <
           static_cast<alloy_detail::calc_t<alloy_detail::math_t<T>>>(
               numeric_limits<alloy_detail::math_t<T>>::min()));
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isordered)
template <class A, class B,
          enable_if_t<alloy_detail::is_scalar_arith_c<A>::value() &&
                          alloy_detail::is_scalar_arith_c<B>::value(),
                      int> = 0>
ALLOY_FN constexpr bool isordered(A x, B y) {
  return !isnan(x) && !isnan(y);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isunordered)
template <class A, class B,
          enable_if_t<alloy_detail::is_scalar_arith_c<A>::value() &&
                          alloy_detail::is_scalar_arith_c<B>::value(),
                      int> = 0>
ALLOY_FN constexpr bool isunordered(A x, B y) {
  return isnan(x) || isnan(y);
}
#endif
#define ALLOY_VEC_PRED1(name)                                                 \
  template <class V, class R = alloy_detail::vec_bool_t<V>>                   \
  ALLOY_FN R name(const V& v) {                                               \
    R r;                                                                      \
    for (int i = 0; i < R::alloy_n; ++i) r.alloy_e[i] = name(v.alloy_get(i)); \
    return r;                                                                 \
  }
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isnan)
ALLOY_VEC_PRED1(isnan)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isinf)
ALLOY_VEC_PRED1(isinf)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isfinite)
ALLOY_VEC_PRED1(isfinite)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_signbit)
ALLOY_VEC_PRED1(signbit)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isnormal)
ALLOY_VEC_PRED1(isnormal)
#endif
#undef ALLOY_VEC_PRED1

// ---- abs, min, max, clamp (integers too), min3/max3/median3 ----

#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_abs)
template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0>
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
#endif

// Floats: NaN operands are ignored (fmin/fmax). Integers: exact.
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_min)
template <class A, class B, class R = alloy_detail::promote2_t<A, B>,
          enable_if_t<alloy_detail::is_scalar_arith_c<A>::value() &&
                          alloy_detail::is_scalar_arith_c<B>::value(),
                      int> = 0>
ALLOY_FN constexpr R min(A a, B b) {
  if constexpr (is_floating_point_v<R>) {
    typedef alloy_detail::calc_t<R> C;
    return R(alloy_detail::fmin_c(static_cast<C>(a), static_cast<C>(b)));
  } else {
    return R(a) < R(b) ? R(a) : R(b);
  }
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_max)
template <class A, class B, class R = alloy_detail::promote2_t<A, B>,
          enable_if_t<alloy_detail::is_scalar_arith_c<A>::value() &&
                          alloy_detail::is_scalar_arith_c<B>::value(),
                      int> = 0>
ALLOY_FN constexpr R max(A a, B b) {
  if constexpr (is_floating_point_v<R>) {
    typedef alloy_detail::calc_t<R> C;
    return R(alloy_detail::fmax_c(static_cast<C>(a), static_cast<C>(b)));
  } else {
    return R(a) > R(b) ? R(a) : R(b);
  }
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_clamp)
template <class X, class L, class H,
          class R = alloy_detail::promote2_t<alloy_detail::promote2_t<X, L>, H>,
          enable_if_t<alloy_detail::is_scalar_arith_c<X>::value() &&
                          alloy_detail::is_scalar_arith_c<L>::value() &&
                          alloy_detail::is_scalar_arith_c<H>::value(),
                      int> = 0>
ALLOY_FN constexpr R clamp(X x, L lo, H hi) {
  return min(max(R(x), R(lo)), R(hi));
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_min3)
template <class A, class B, class C,
          enable_if_t<alloy_detail::is_scalar_arith_c<A>::value(), int> = 0>
ALLOY_FN constexpr auto min3(A a, B b, C c) {
  return min(min(a, b), c);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_max3)
template <class A, class B, class C,
          enable_if_t<alloy_detail::is_scalar_arith_c<A>::value(), int> = 0>
ALLOY_FN constexpr auto max3(A a, B b, C c) {
  return max(max(a, b), c);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_median3)
template <class A, class B, class C,
          enable_if_t<alloy_detail::is_scalar_arith_c<A>::value(), int> = 0>
ALLOY_FN constexpr auto median3(A a, B b, C c) {
  return max(min(a, b), min(max(a, b), c));
}
#endif

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
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_min)
ALLOY_VEC_KEEP2(min)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_max)
ALLOY_VEC_KEEP2(max)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_clamp)
ALLOY_VEC_KEEP3(clamp)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_min3)
ALLOY_VEC_KEEP3(min3)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_max3)
ALLOY_VEC_KEEP3(max3)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_median3)
ALLOY_VEC_KEEP3(median3)
#endif

// ---- Geometric (vectors) ----

#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_dot)
template <
    class A, class B, class V = alloy_detail::vmath2_t<A, B>,
    enable_if_t<alloy_detail::is_vecish_c<A>::value() && alloy_detail::is_vecish_c<B>::value(),
                int> = 0>
ALLOY_FN typename V::value_type dot(const A& a, const B& b) {
  typedef typename V::value_type R;
  typedef alloy_detail::calc_t<R> C;
  C s = 0;
  for (int i = 0; i < V::alloy_n; ++i)
    s += static_cast<C>(alloy_detail::comp(a, i)) * static_cast<C>(alloy_detail::comp(b, i));
  return R(s);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_length_squared)
template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0>
ALLOY_FN typename alloy_detail::vmath_t<V>::value_type length_squared(const V& v) {
  return dot(v, v);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_distance_squared)
template <
    class A, class B, class V = alloy_detail::vmath2_t<A, B>,
    enable_if_t<alloy_detail::is_vecish_c<A>::value() && alloy_detail::is_vecish_c<B>::value(),
                int> = 0>
ALLOY_FN typename V::value_type distance_squared(const A& a, const B& b) {
  V d = V(a) - V(b);
  return dot(d, d);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cross)
template <
    class A, class B, class V = alloy_detail::vmath2_t<A, B>,
    enable_if_t<alloy_detail::is_vecish_c<A>::value() && alloy_detail::is_vecish_c<B>::value(),
                int> = 0>
ALLOY_FN V cross(const A& a_, const B& b_) {
  static_assert(V::alloy_n == 3, "cross takes 3-component vectors");
  V a = V(a_), b = V(b_);
  return V(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_reflect)
template <class I, class N, class V = alloy_detail::vmath2_t<I, N>>
ALLOY_FN V reflect(const I& i, const N& n) {
  V vi = V(i), vn = V(n);
  return vi - vn * (dot(vn, vi) * 2);
}
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_faceforward)
template <class A, class B, class C, class V = alloy_detail::vmath2_t<A, B>>
ALLOY_FN V faceforward(const A& n, const B& i, const C& nref) {
  return dot(nref, i) < 0 ? V(n) : -V(n);
}
#endif

// ---- Functions whose precise and fast forms differ ----

namespace precise {
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp)
ALLOY_MATH1(exp, alloy_target::precise_exp(x), ::exp(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp2)
ALLOY_MATH1(exp2, ::exp2f(x), ::exp2(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp10)
ALLOY_MATH1(exp10, ::exp10f(x), ::exp10(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log)
ALLOY_MATH1(log, ::logf(x), ::log(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log2)
ALLOY_MATH1(log2, ::log2f(x), ::log2(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log10)
ALLOY_MATH1(log10, ::log10f(x), ::log10(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sqrt)
ALLOY_MATH1(sqrt, ::sqrtf(x), ::sqrt(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_rsqrt)
ALLOY_MATH1(rsqrt, 1.0f / ::sqrtf(x), 1.0 / ::sqrt(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sin)
ALLOY_MATH1(sin, ::sinf(x), ::sin(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cos)
ALLOY_MATH1(cos, ::cosf(x), ::cos(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_tan)
ALLOY_MATH1(tan, ::tanf(x), ::tan(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_pow)
ALLOY_MATH2(pow, ::powf(x, y), ::pow(x, y))
#endif
// powr: x >= 0 only (NaN for x < 0), as Metal defines it.
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_powr)
ALLOY_MATH2(powr, x < 0.0f ? NAN : ::powf(x, y), x < 0.0 ? double(NAN) : ::pow(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_divide)
ALLOY_MATH2(divide, x / y, x / y)
#endif
}  // namespace precise

namespace fast {
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp)
ALLOY_MATH1(exp, alloy_target::fast_exp(x), ::exp(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp2)
ALLOY_MATH1(exp2, alloy_target::fast_exp2(x), ::exp2(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp10)
ALLOY_MATH1(exp10, alloy_target::fast_exp10(x), ::exp10(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log)
ALLOY_MATH1(log, alloy_target::fast_log(x), ::log(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log2)
ALLOY_MATH1(log2, alloy_target::fast_log2(x), ::log2(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log10)
ALLOY_MATH1(log10, alloy_target::fast_log2(x) * 0.301029995663981195214f, ::log10(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sqrt)
ALLOY_MATH1(sqrt, alloy_target::fast_sqrt(x), ::sqrt(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_rsqrt)
ALLOY_MATH1(rsqrt, alloy_target::fast_rsqrt(x), 1.0 / ::sqrt(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sin)
ALLOY_MATH1(sin, alloy_target::fast_sin(x), ::sin(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cos)
ALLOY_MATH1(cos, alloy_target::fast_cos(x), ::cos(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_tan)
ALLOY_MATH1(tan, alloy_target::fast_tan(x), ::tan(x))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_pow)
ALLOY_MATH2(pow, alloy_target::fast_pow(x, y), ::pow(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_powr)
ALLOY_MATH2(powr, x < 0.0f ? NAN : alloy_target::fast_exp2(y * alloy_target::fast_log2(x)),
            x < 0.0 ? double(NAN) : ::pow(x, y))
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_divide)
ALLOY_MATH2(divide, alloy_target::fast_divide(x, y), x / y)
#endif
}  // namespace fast

// sincos, length, distance, normalize, refract in precise:: and fast:: (each uses its
// namespace's sqrt/rsqrt/sin/cos).
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sincos)
#define ALLOY_MODE_SINCOS(ns)                                                         \
  namespace ns {                                                                      \
  template <class T>                                                                  \
  ALLOY_FN alloy_detail::math_t<T> sincos(T x, alloy_detail::math_t<T>& c) {          \
    c = (cos)(x);                                                                     \
    return (sin)(x);                                                                  \
  }                                                                                   \
  template <class T>                                                                  \
  ALLOY_FN alloy_detail::math_t<T> sincos(T x, alloy_detail::math_t<T>* c) {          \
    *c = (cos)(x);                                                                    \
    return (sin)(x);                                                                  \
  }                                                                                   \
  template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0>     \
  ALLOY_FN alloy_detail::vmath_t<V> sincos(const V& x, alloy_detail::vmath_t<V>& c) { \
    c = (cos)(x);                                                                     \
    return (sin)(x);                                                                  \
  }                                                                                   \
  }
ALLOY_MODE_SINCOS(precise)
ALLOY_MODE_SINCOS(fast)
#undef ALLOY_MODE_SINCOS
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_length)
#define ALLOY_MODE_LENGTH(ns)                                                     \
  namespace ns {                                                                  \
  template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0> \
  ALLOY_FN typename alloy_detail::vmath_t<V>::value_type length(const V& v) {     \
    return (sqrt)(dot(v, v));                                                     \
  }                                                                               \
  }
ALLOY_MODE_LENGTH(precise)
ALLOY_MODE_LENGTH(fast)
#undef ALLOY_MODE_LENGTH
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_distance)
#define ALLOY_MODE_DISTANCE(ns)                                                                   \
  namespace ns {                                                                                  \
  template <                                                                                      \
      class A, class B, class V = alloy_detail::vmath2_t<A, B>,                                   \
      enable_if_t<alloy_detail::is_vecish_c<A>::value() && alloy_detail::is_vecish_c<B>::value(), \
                  int> = 0>                                                                       \
  ALLOY_FN typename V::value_type distance(const A& a, const B& b) {                              \
    return (length)(V(a) - V(b));                                                                 \
  }                                                                                               \
  }
ALLOY_MODE_DISTANCE(precise)
ALLOY_MODE_DISTANCE(fast)
#undef ALLOY_MODE_DISTANCE
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_normalize)
#define ALLOY_MODE_NORMALIZE(ns)                                                  \
  namespace ns {                                                                  \
  template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0> \
  ALLOY_FN alloy_detail::vmath_t<V> normalize(const V& v) {                       \
    alloy_detail::vmath_t<V> x = v;                                               \
    return x * (rsqrt)(dot(x, x));                                                \
  }                                                                               \
  }
ALLOY_MODE_NORMALIZE(precise)
ALLOY_MODE_NORMALIZE(fast)
#undef ALLOY_MODE_NORMALIZE
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_refract)
#define ALLOY_MODE_REFRACT(ns)                                                 \
  namespace ns {                                                               \
  template <class I, class N, class E, class V = alloy_detail::vmath2_t<I, N>> \
  ALLOY_FN V refract(const I& i, const N& n, E eta) {                          \
    V vi = V(i), vn = V(n);                                                    \
    auto d = dot(vn, vi);                                                      \
    auto k = 1 - eta * eta * (1 - d * d);                                      \
    if (k < 0) return V(0);                                                    \
    return vi * eta - vn * (eta * d + (sqrt)(k));                              \
  }                                                                            \
  }
ALLOY_MODE_REFRACT(precise)
ALLOY_MODE_REFRACT(fast)
#undef ALLOY_MODE_REFRACT
#endif

// The functions that do not differ, under their precise:: and fast:: names too.
#define ALLOY_MODE_USING(name) \
  namespace precise {          \
  using metal::name;           \
  }                            \
  namespace fast {             \
  using metal::name;           \
  }
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_abs)
ALLOY_MODE_USING(abs)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_acos)
ALLOY_MODE_USING(acos)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_acosh)
ALLOY_MODE_USING(acosh)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_asin)
ALLOY_MODE_USING(asin)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_asinh)
ALLOY_MODE_USING(asinh)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_atan)
ALLOY_MODE_USING(atan)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_atan2)
ALLOY_MODE_USING(atan2)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_atanh)
ALLOY_MODE_USING(atanh)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cbrt)
ALLOY_MODE_USING(cbrt)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_ceil)
ALLOY_MODE_USING(ceil)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_clamp)
ALLOY_MODE_USING(clamp)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_copysign)
ALLOY_MODE_USING(copysign)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cosh)
ALLOY_MODE_USING(cosh)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cospi)
ALLOY_MODE_USING(cospi)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cross)
ALLOY_MODE_USING(cross)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_dot)
ALLOY_MODE_USING(dot)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fabs)
ALLOY_MODE_USING(fabs)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fdim)
ALLOY_MODE_USING(fdim)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_floor)
ALLOY_MODE_USING(floor)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fma)
ALLOY_MODE_USING(fma)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmax)
ALLOY_MODE_USING(fmax)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmax3)
ALLOY_MODE_USING(fmax3)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmedian3)
ALLOY_MODE_USING(fmedian3)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmin)
ALLOY_MODE_USING(fmin)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmin3)
ALLOY_MODE_USING(fmin3)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fmod)
ALLOY_MODE_USING(fmod)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_fract)
ALLOY_MODE_USING(fract)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_frexp)
ALLOY_MODE_USING(frexp)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_ilogb)
ALLOY_MODE_USING(ilogb)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isfinite)
ALLOY_MODE_USING(isfinite)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isinf)
ALLOY_MODE_USING(isinf)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_isnan)
ALLOY_MODE_USING(isnan)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_ldexp)
ALLOY_MODE_USING(ldexp)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_logb)
ALLOY_MODE_USING(logb)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_max)
ALLOY_MODE_USING(max)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_max3)
ALLOY_MODE_USING(max3)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_median3)
ALLOY_MODE_USING(median3)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_min)
ALLOY_MODE_USING(min)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_min3)
ALLOY_MODE_USING(min3)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_mix)
ALLOY_MODE_USING(mix)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_modf)
ALLOY_MODE_USING(modf)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_nextafter)
ALLOY_MODE_USING(nextafter)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_rint)
ALLOY_MODE_USING(rint)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_round)
ALLOY_MODE_USING(round)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_saturate)
ALLOY_MODE_USING(saturate)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sign)
ALLOY_MODE_USING(sign)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_signbit)
ALLOY_MODE_USING(signbit)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sinh)
ALLOY_MODE_USING(sinh)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sinpi)
ALLOY_MODE_USING(sinpi)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_smoothstep)
ALLOY_MODE_USING(smoothstep)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_step)
ALLOY_MODE_USING(step)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_tanh)
ALLOY_MODE_USING(tanh)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_tanpi)
ALLOY_MODE_USING(tanpi)
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_trunc)
ALLOY_MODE_USING(trunc)
#endif
#undef ALLOY_MODE_USING

// Unqualified metal:: names: Metal's default math mode.
#ifdef ALLOY_MATH_FAST
#define ALLOY_MATH_MODE fast
#else
#define ALLOY_MATH_MODE precise
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_cos)
using ALLOY_MATH_MODE::cos;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_distance)
using ALLOY_MATH_MODE::distance;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_divide)
using ALLOY_MATH_MODE::divide;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp)
using ALLOY_MATH_MODE::exp;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp10)
using ALLOY_MATH_MODE::exp10;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_exp2)
using ALLOY_MATH_MODE::exp2;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_length)
using ALLOY_MATH_MODE::length;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log)
using ALLOY_MATH_MODE::log;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log10)
using ALLOY_MATH_MODE::log10;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_log2)
using ALLOY_MATH_MODE::log2;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_normalize)
using ALLOY_MATH_MODE::normalize;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_pow)
using ALLOY_MATH_MODE::pow;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_powr)
using ALLOY_MATH_MODE::powr;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_refract)
using ALLOY_MATH_MODE::refract;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_rsqrt)
using ALLOY_MATH_MODE::rsqrt;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sin)
using ALLOY_MATH_MODE::sin;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sincos)
using ALLOY_MATH_MODE::sincos;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_sqrt)
using ALLOY_MATH_MODE::sqrt;
#endif
#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_tan)
using ALLOY_MATH_MODE::tan;
#endif
#undef ALLOY_MATH_MODE

}  // namespace metal
