// Metal scalar types: uchar/ushort/uint/ulong, half and bfloat (16-bit storage structs computing in
// float), Metal's promotion rules for them, and numeric_limits.
#pragma once

// The exact bit conversions (alloy_portable::) are in half_bits.h (included with ALLOY_NEED_LOWP).

namespace metal {

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;

namespace alloy_detail {
#ifdef ALLOY_NEED_LOWP
ALLOY_FN constexpr uint16_t f32_to_f16(float x) {
  if (__builtin_is_constant_evaluated()) return alloy_portable::f32_to_f16_bits(x);
  return alloy_target::f32_to_f16(x);
}
ALLOY_FN constexpr float f16_to_f32(uint16_t b) {
  if (__builtin_is_constant_evaluated()) return alloy_portable::f16_bits_to_f32(b);
  return alloy_target::f16_to_f32(b);
}
#endif
template <class T>
struct is_builtin_arith_c {
  ALLOY_FN static constexpr bool value() {
    return alloy_traits::integral<remove_cv_t<T>>::value || is_same<remove_cv_t<T>, float>::value ||
           is_same<remove_cv_t<T>, double>::value;
  }
};
struct bits_tag {};
// A class (not half/bfloat themselves) with a conversion to an arithmetic type, e.g. MLX's
// `_NoMask` (gemv_masked.h), which has only `operator bool()`: Metal's `half(m)` converts
// through it; C++ finds no half constructor for it, so half and bfloat take one explicitly.
template <class T>
struct converts_to_float_c {
  ALLOY_FN static constexpr bool value() {
    return __is_class(T) && !is_same<remove_cv_t<T>, half>::value &&
           !is_same<remove_cv_t<T>, bfloat>::value && is_convertible<T, float>::value;
  }
};
}  // namespace alloy_detail

// Declared only when a translation names them (ALLOY_NEED_LOWP, metal_stdlib.h); otherwise
// incomplete, which the templates below that name them do not mind.
#ifndef ALLOY_NEED_LOWP
struct half;
struct bfloat;
#else
// IEEE binary16. Arithmetic is done in float and rounded back, which gives the correctly rounded
// half result for + - * / (float has more than 2*11+2 significand bits).
struct half {
  uint16_t alloy_bits;

  half() = default;
  ALLOY_FN constexpr half(alloy_detail::bits_tag, uint16_t b) : alloy_bits(b) {}
  template <class T, enable_if_t<alloy_detail::is_builtin_arith_c<T>::value(), int> = 0>
  ALLOY_FN constexpr half(T v) : alloy_bits(alloy_detail::f32_to_f16(static_cast<float>(v))) {}
  ALLOY_FN constexpr half(bfloat b);
  template <class T, enable_if_t<alloy_detail::converts_to_float_c<T>::value(), int> = 0>
  ALLOY_FN constexpr explicit half(const T& v) : half(static_cast<float>(v)) {}
  // `h = m` of such a class (MLX's steel_gemm_masked.h assigns a mask element to a half scale):
  // Metal converts through the class's conversion, then to half.
  template <class T, enable_if_t<alloy_detail::converts_to_float_c<T>::value(), int> = 0>
  ALLOY_FN constexpr half& operator=(const T& v) {
    return *this = half(static_cast<float>(v));
  }
  ALLOY_FN constexpr operator float() const { return alloy_detail::f16_to_f32(alloy_bits); }

  static ALLOY_FN constexpr half from_bits(uint16_t b) { return half(alloy_detail::bits_tag{}, b); }

  template <class T>
  ALLOY_FN half& operator+=(const T& v) {
    return *this = half(*this + v);
  }
  template <class T>
  ALLOY_FN half& operator-=(const T& v) {
    return *this = half(*this - v);
  }
  template <class T>
  ALLOY_FN half& operator*=(const T& v) {
    return *this = half(*this * v);
  }
  template <class T>
  ALLOY_FN half& operator/=(const T& v) {
    return *this = half(*this / v);
  }
  // x + 1 computed in float and rounded once, as `*this += 1` would; written without the
  // operator templates, whose instantiation here (every kernel) costs NVRTC milliseconds.
  ALLOY_FN half& operator++() { return *this = half(float(*this) + 1.0f); }
  ALLOY_FN half& operator--() { return *this = half(float(*this) - 1.0f); }
  ALLOY_FN half operator++(int) {
    half r = *this;
    ++*this;
    return r;
  }
  ALLOY_FN half operator--(int) {
    half r = *this;
    --*this;
    return r;
  }
};

// bfloat16: float's exponent, 8 significand bits. Metal allows fewer implicit conversions to
// bfloat than we do; accepting more keeps templates written for half working.
struct bfloat {
  uint16_t alloy_bits;

  bfloat() = default;
  ALLOY_FN constexpr bfloat(alloy_detail::bits_tag, uint16_t b) : alloy_bits(b) {}
  template <class T, enable_if_t<alloy_detail::is_builtin_arith_c<T>::value(), int> = 0>
  ALLOY_FN constexpr bfloat(T v)
      : alloy_bits(alloy_portable::f32_to_bf16_bits(static_cast<float>(v))) {}
  ALLOY_FN constexpr bfloat(half h) : alloy_bits(alloy_portable::f32_to_bf16_bits(float(h))) {}
  template <class T, enable_if_t<alloy_detail::converts_to_float_c<T>::value(), int> = 0>
  ALLOY_FN constexpr explicit bfloat(const T& v) : bfloat(static_cast<float>(v)) {}
  template <class T, enable_if_t<alloy_detail::converts_to_float_c<T>::value(), int> = 0>
  ALLOY_FN constexpr bfloat& operator=(const T& v) {
    return *this = bfloat(static_cast<float>(v));
  }
  ALLOY_FN constexpr operator float() const { return alloy_portable::bf16_bits_to_f32(alloy_bits); }

  static ALLOY_FN constexpr bfloat from_bits(uint16_t b) {
    return bfloat(alloy_detail::bits_tag{}, b);
  }

  template <class T>
  ALLOY_FN bfloat& operator+=(const T& v) {
    return *this = bfloat(*this + v);
  }
  template <class T>
  ALLOY_FN bfloat& operator-=(const T& v) {
    return *this = bfloat(*this - v);
  }
  template <class T>
  ALLOY_FN bfloat& operator*=(const T& v) {
    return *this = bfloat(*this * v);
  }
  template <class T>
  ALLOY_FN bfloat& operator/=(const T& v) {
    return *this = bfloat(*this / v);
  }
  // As half's: no operator template instantiated at namespace scope.
  ALLOY_FN bfloat& operator++() { return *this = bfloat(float(*this) + 1.0f); }
  ALLOY_FN bfloat& operator--() { return *this = bfloat(float(*this) - 1.0f); }
  ALLOY_FN bfloat operator++(int) {
    bfloat r = *this;
    ++*this;
    return r;
  }
  ALLOY_FN bfloat operator--(int) {
    bfloat r = *this;
    --*this;
    return r;
  }
};

ALLOY_FN constexpr half::half(bfloat b) : alloy_bits(alloy_detail::f32_to_f16(float(b))) {}

#endif  // ALLOY_NEED_LOWP

typedef bfloat bfloat16_t;
typedef half float16_t;

namespace alloy_detail {
template <class T>
struct is_lowp_c {
  ALLOY_FN static constexpr bool value() {
    return is_same<remove_cv_t<T>, half>::value || is_same<remove_cv_t<T>, bfloat>::value;
  }
};
template <class T>
struct is_scalar_arith_c {
  ALLOY_FN static constexpr bool value() {
    return is_builtin_arith_c<T>::value() || is_lowp_c<T>::value();
  }
};

// Result of a binary operation with at least one half/bfloat operand (Metal's rules):
// same type -> that type; with an integer -> the 16-bit type; with float/double -> float/double;
// half with bfloat -> float.
template <class A, class B, bool = is_lowp_c<A>::value(), bool = is_lowp_c<B>::value()>
struct lowp_promote {};
template <class A, class B>
struct lowp_promote<A, B, true, true> {
  typedef conditional_t<is_same<remove_cv_t<A>, remove_cv_t<B>>::value, remove_cv_t<A>, float> type;
};
template <class A, class B>
struct lowp_promote<A, B, true, false> {
  typedef conditional_t<is_integral_v<B>, remove_cv_t<A>, remove_cv_t<B>> type;
};
template <class A, class B>
struct lowp_promote<A, B, false, true> {
  typedef conditional_t<is_integral_v<A>, remove_cv_t<B>, remove_cv_t<A>> type;
};
template <class A, class B>
using lowp_binop_t = enable_if_t<(is_lowp_c<A>::value() || is_lowp_c<B>::value()) &&
                                     is_scalar_arith_c<A>::value() && is_scalar_arith_c<B>::value(),
                                 typename lowp_promote<A, B>::type>;
template <class A, class B>
using lowp_compute_t =
    conditional_t<is_same<A, double>::value || is_same<B, double>::value, double, float>;
template <class A, class B>
using lowp_cmp_t = enable_if_t<(is_lowp_c<A>::value() || is_lowp_c<B>::value()) &&
                                   is_scalar_arith_c<A>::value() && is_scalar_arith_c<B>::value(),
                               bool>;

// Common type of two scalars for min/max/clamp/...: C++'s usual arithmetic conversions, except
// that same-typed operands keep their type (Metal has no integer promotion to int there) and
// half/bfloat follow lowp_promote.
template <class A, class B>
struct promote2_kind_c {
  ALLOY_FN static constexpr int value() {
    return !(is_scalar_arith_c<A>::value() && is_scalar_arith_c<B>::value()) ? 0
           : is_same<A, B>::value                                            ? 1
           : (is_lowp_c<A>::value() || is_lowp_c<B>::value())                ? 2
                                                                             : 3;
  }
};
template <class A, class B, int = promote2_kind_c<A, B>::value()>
struct promote2 {};  // not two scalars: no type (SFINAE)
template <class A, class B>
struct promote2<A, B, 1> {
  typedef A type;
};
template <class A, class B>
struct promote2<A, B, 2> : lowp_promote<A, B> {};
template <class A, class B>
struct promote2<A, B, 3> {
  typedef decltype(declval<A>() + declval<B>()) type;
};
template <class A, class B>
using promote2_t = typename promote2<remove_cv_t<A>, remove_cv_t<B>>::type;

// Operand type of `c ? a : b` (the translator casts each operand to cond_t<decltype((self)),
// decltype((other))>). half and bfloat convert to and from every arithmetic type, so C++ finds
// `c ? h : 1.0f` ambiguous; Metal applies the usual arithmetic conversions (float here). Two
// different scalar types, one of them half/bfloat, become their Metal common type; anything else
// keeps its exact type and value category (the cast is then an identity).
template <class Self, class Other,
          int = promote2_kind_c<remove_cvref_t<Self>, remove_cvref_t<Other>>::value()>
struct cond_operand {
  typedef Self type;
};
template <class Self, class Other>
struct cond_operand<Self, Other, 2> : lowp_promote<remove_cvref_t<Self>, remove_cvref_t<Other>> {};
template <class Self, class Other>
using cond_t = typename cond_operand<Self, Other>::type;
// cond_t written so that a ?: inside a macro argument stays one argument (the translator's form):
// cond_ft<void(cond_tag<decltype((self))>*, cond_tag<decltype((other))>*)>, its only comma inside
// parentheses (MLX's fft.h passes `rader ? rader_2_steps_ : radix_2_steps_` to a macro).
template <class T>
struct cond_tag;
template <class F>
struct cond_pair;
template <class Self, class Other>
struct cond_pair<void(cond_tag<Self>*, cond_tag<Other>*)> {
  typedef cond_t<Self, Other> type;
};
template <class F>
using cond_ft = typename cond_pair<F>::type;
}  // namespace alloy_detail

// Mixed operators with half or bfloat: only when they are declared (ALLOY_NEED_LOWP).
#ifdef ALLOY_NEED_LOWP
#define ALLOY_LOWP_BINOP(op)                                                         \
  template <class A, class B>                                                        \
  ALLOY_FN constexpr alloy_detail::lowp_binop_t<A, B> operator op(A a, B b) {        \
    typedef alloy_detail::lowp_compute_t<A, B> C;                                    \
    return alloy_detail::lowp_binop_t<A, B>(static_cast<C>(a) op static_cast<C>(b)); \
  }
ALLOY_LOWP_BINOP(+)
ALLOY_LOWP_BINOP(-)
ALLOY_LOWP_BINOP(*)
ALLOY_LOWP_BINOP(/)
#undef ALLOY_LOWP_BINOP

#define ALLOY_LOWP_CMP(op)                                                  \
  template <class A, class B>                                               \
  ALLOY_FN constexpr alloy_detail::lowp_cmp_t<A, B> operator op(A a, B b) { \
    typedef alloy_detail::lowp_compute_t<A, B> C;                           \
    return static_cast<C>(a) op static_cast<C>(b);                          \
  }
ALLOY_LOWP_CMP(==)
ALLOY_LOWP_CMP(!=)
ALLOY_LOWP_CMP(<)
ALLOY_LOWP_CMP(<=)
ALLOY_LOWP_CMP(>)
ALLOY_LOWP_CMP(>=)
#undef ALLOY_LOWP_CMP

// Negation flips the sign bit (exact, also for NaN and zero).
ALLOY_FN constexpr half operator-(half x) {
  return half::from_bits(x.alloy_bits ^ 0x8000u);
}
ALLOY_FN constexpr bfloat operator-(bfloat x) {
  return bfloat::from_bits(x.alloy_bits ^ 0x8000u);
}
ALLOY_FN constexpr half operator+(half x) {
  return x;
}
ALLOY_FN constexpr bfloat operator+(bfloat x) {
  return x;
}
#endif  // ALLOY_NEED_LOWP

// ---- numeric_limits ----
//
// numeric_limits<T> takes its members from a base chosen by limits_of<T>; naming a base in a
// typedef does not instantiate it, so a kernel pays (in compile time) only for the limits it uses.
// Declared only when a translation names numeric_limits (ALLOY_NEED_LIMITS, metal_stdlib.h): no
// core code uses it, and parsing it costs a small kernel's NVRTC compile about a millisecond.
#ifdef ALLOY_NEED_LIMITS

namespace alloy_detail {
template <class T>
struct int_limits {
  typedef make_unsigned_t<T> U;
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = T(-1) < T(0);
  static constexpr bool is_integer = true;
  static constexpr bool is_exact = true;
  static constexpr bool has_infinity = false;
  static constexpr bool has_quiet_NaN = false;
  static constexpr int radix = 2;
  static constexpr int digits = int(sizeof(T) * 8) - (is_signed ? 1 : 0);
  static constexpr int digits10 = digits * 301 / 1000;
  ALLOY_FN static constexpr T max() { return T(is_signed ? U(~U(0)) >> 1 : U(~U(0))); }
  ALLOY_FN static constexpr T min() { return is_signed ? T(-max() - 1) : T(0); }
  ALLOY_FN static constexpr T lowest() { return min(); }
  ALLOY_FN static constexpr T epsilon() { return T(0); }
  ALLOY_FN static constexpr T round_error() { return T(0); }
  ALLOY_FN static constexpr T infinity() { return T(0); }
  ALLOY_FN static constexpr T quiet_NaN() { return T(0); }
  ALLOY_FN static constexpr T signaling_NaN() { return T(0); }
  ALLOY_FN static constexpr T denorm_min() { return T(0); }
};
// bool: the limits of unsigned char (its storage), with one digit and max() == true.
template <class U>
struct bool_limits : int_limits<U> {
  static constexpr int digits = 1;
  ALLOY_FN static constexpr bool max() { return true; }
  ALLOY_FN static constexpr bool min() { return false; }
  ALLOY_FN static constexpr bool lowest() { return false; }
};

// Floating-point limits from bit patterns: T::from_bits or __builtin_bit_cast.
template <class T, class Bits, int Digits, int MaxExp, Bits Max, Bits Min, Bits Eps, Bits Inf,
          Bits QNaN, Bits SNaN, Bits Denorm>
struct float_limits {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr bool has_denorm = true;
  static constexpr int radix = 2;
  static constexpr int digits = Digits;
  static constexpr int max_exponent = MaxExp;
  static constexpr int min_exponent = 3 - MaxExp;
  ALLOY_FN static constexpr T make(Bits b) {
    if constexpr (alloy_detail::is_lowp_c<T>::value())
      return T::from_bits(b);
    else
      return __builtin_bit_cast(T, b);
  }
  ALLOY_FN static constexpr T max() { return make(Max); }
  ALLOY_FN static constexpr T min() { return make(Min); }
  ALLOY_FN static constexpr T lowest() { return make(Max | (Bits(1) << (sizeof(Bits) * 8 - 1))); }
  ALLOY_FN static constexpr T epsilon() { return make(Eps); }
  ALLOY_FN static constexpr T round_error() { return T(0.5f); }
  ALLOY_FN static constexpr T infinity() { return make(Inf); }
  ALLOY_FN static constexpr T quiet_NaN() { return make(QNaN); }
  ALLOY_FN static constexpr T signaling_NaN() { return make(SNaN); }
  ALLOY_FN static constexpr T denorm_min() { return make(Denorm); }
};

struct no_limits {
  enum : bool { is_specialized = false };
};
template <class T>
struct limits_of {
  typedef no_limits type;
};
#define ALLOY_INT_LIMITS(T)     \
  template <>                   \
  struct limits_of<T> {         \
    typedef int_limits<T> type; \
  };
ALLOY_INT_LIMITS(char)
ALLOY_INT_LIMITS(signed char)
ALLOY_INT_LIMITS(unsigned char)
ALLOY_INT_LIMITS(short)
ALLOY_INT_LIMITS(unsigned short)
ALLOY_INT_LIMITS(int)
ALLOY_INT_LIMITS(unsigned int)
ALLOY_INT_LIMITS(long)
ALLOY_INT_LIMITS(unsigned long)
ALLOY_INT_LIMITS(long long)
ALLOY_INT_LIMITS(unsigned long long)
#undef ALLOY_INT_LIMITS
template <>
struct limits_of<bool> {
  typedef bool_limits<unsigned char> type;
};
template <>
struct limits_of<float> {
  typedef float_limits<float, uint32_t, 24, 128, 0x7f7fffffu, 0x00800000u, 0x34000000u, 0x7f800000u,
                       0x7fc00000u, 0x7fa00000u, 1u>
      type;
};
template <>
struct limits_of<double> {
  typedef float_limits<double, uint64_t, 53, 1024, 0x7fefffffffffffffull, 0x0010000000000000ull,
                       0x3cb0000000000000ull, 0x7ff0000000000000ull, 0x7ff8000000000000ull,
                       0x7ff4000000000000ull, 1ull>
      type;
};
template <>
struct limits_of<half> {
  typedef float_limits<half, uint16_t, 11, 16, 0x7bff, 0x0400, 0x1400, 0x7c00, 0x7e00, 0x7d00, 1>
      type;
};
template <>
struct limits_of<bfloat> {
  typedef float_limits<bfloat, uint16_t, 8, 128, 0x7f7f, 0x0080, 0x3c00, 0x7f80, 0x7fc0, 0x7fa0, 1>
      type;
};
}  // namespace alloy_detail

template <class T>
struct numeric_limits : alloy_detail::limits_of<T>::type {};
template <class T>
struct numeric_limits<const T> : numeric_limits<T> {};
#endif  // ALLOY_NEED_LIMITS

// metal::uniform<T>: a value that is the same in every thread (a hint to Metal's compiler); here
// just the value, converting to and from T.
template <class T>
struct uniform {
  T alloy_value;
  uniform() = default;
  ALLOY_FN constexpr uniform(T v) : alloy_value(v) {}
  ALLOY_FN constexpr operator T() const { return alloy_value; }
};
template <class T>
ALLOY_FN constexpr uniform<T> make_uniform(T v) {
  return uniform<T>(v);
}

// metal::array<T, N> (Metal's <metal_array>): a fixed-size aggregate, `array<int, 2> a = {1, 2}`.
template <class T, size_t N>
struct array {
  T alloy_elems[N];
  ALLOY_FN constexpr size_t size() const { return N; }
  ALLOY_FN constexpr bool empty() const { return N == 0; }
  ALLOY_FN constexpr T& operator[](size_t i) { return alloy_elems[i]; }
  ALLOY_FN constexpr const T& operator[](size_t i) const { return alloy_elems[i]; }
  ALLOY_FN constexpr T& front() { return alloy_elems[0]; }
  ALLOY_FN constexpr const T& front() const { return alloy_elems[0]; }
  ALLOY_FN constexpr T& back() { return alloy_elems[N - 1]; }
  ALLOY_FN constexpr const T& back() const { return alloy_elems[N - 1]; }
  ALLOY_FN constexpr T* data() { return alloy_elems; }
  ALLOY_FN constexpr const T* data() const { return alloy_elems; }
  ALLOY_FN constexpr T* begin() { return alloy_elems; }
  ALLOY_FN constexpr const T* begin() const { return alloy_elems; }
  ALLOY_FN constexpr T* end() { return alloy_elems + N; }
  ALLOY_FN constexpr const T* end() const { return alloy_elems + N; }
};

}  // namespace metal

#define HALF_MAX (::metal::half::from_bits(0x7bff))
#define HALF_MIN (::metal::half::from_bits(0x0400))
#define HALF_EPSILON (::metal::half::from_bits(0x1400))
#define HALF_DIG 3
#define HALF_MANT_DIG 11
#define HALF_MAX_10_EXP 4
#define HALF_MAX_EXP 16
#define HALF_MIN_10_EXP (-4)
#define HALF_MIN_EXP (-13)
#define HALF_RADIX 2
#define MAXHALF HALF_MAX
#define HUGE_VALH (::metal::half::from_bits(0x7c00))
#define M_E_H (::metal::half(M_E_F))
#define M_LOG2E_H (::metal::half(M_LOG2E_F))
#define M_LOG10E_H (::metal::half(M_LOG10E_F))
#define M_LN2_H (::metal::half(M_LN2_F))
#define M_LN10_H (::metal::half(M_LN10_F))
#define M_PI_H (::metal::half(M_PI_F))
#define M_PI_2_H (::metal::half(M_PI_2_F))
#define M_PI_4_H (::metal::half(M_PI_4_F))
#define M_1_PI_H (::metal::half(M_1_PI_F))
#define M_2_PI_H (::metal::half(M_2_PI_F))
#define M_2_SQRTPI_H (::metal::half(M_2_SQRTPI_F))
#define M_SQRT2_H (::metal::half(M_SQRT2_F))
#define M_SQRT1_2_H (::metal::half(M_SQRT1_2_F))
