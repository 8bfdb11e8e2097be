// Metal's <metal_type_traits> subset, as_type, and the constant macros of <metal_math> and
// <metal_integer> (INFINITY, FLT_MAX, M_PI_F, INT_MAX, ...). Written without the C++ standard
// library so that the same code compiles under NVRTC.
#pragma once

namespace metal {

// Type traits that no core code uses are declared only when a translation names them
// (ALLOY_NEED_TRAITS, metal_stdlib.h; msl/prelude_select.cpp lists them): _disjunction,
// _conjunction, remove_pointer, remove_extent, add_const, add_pointer, decay, is_const,
// is_reference, is_array, is_scalar, is_unsigned, is_class, is_enum, is_base_of,
// is_trivially_copyable, make_signed (and their _t/_v forms).

struct half;
struct bfloat;

template <class T, T v>
struct integral_constant {
  static constexpr T value = v;
  typedef T value_type;
  typedef integral_constant type;
  ALLOY_FN constexpr operator T() const { return v; }
  ALLOY_FN constexpr T operator()() const { return v; }
};
template <bool b>
using bool_constant = integral_constant<bool, b>;
typedef bool_constant<true> true_type;
typedef bool_constant<false> false_type;

template <class A, class B>
struct is_same : false_type {};
template <class A>
struct is_same<A, A> : true_type {};
template <class A, class B>
inline constexpr bool is_same_v = is_same<A, B>::value;

template <bool c, class A, class B>
struct alloy_select_type {
  typedef A type;
};
template <class A, class B>
struct alloy_select_type<false, A, B> {
  typedef B type;
};
#ifdef ALLOY_NEED_TRAITS
// Metal's internal _disjunction / _conjunction (MLX's atomic.h uses them under
// `#pragma METAL internals`): the first B::value that decides, as std::disjunction.
template <class... B>
struct _disjunction : false_type {};
template <class B, class... R>
struct _disjunction<B, R...> : alloy_select_type<bool(B::value), B, _disjunction<R...>>::type {};
template <class... B>
struct _conjunction : true_type {};
template <class B, class... R>
struct _conjunction<B, R...> : alloy_select_type<!bool(B::value), B, _conjunction<R...>>::type {};
#endif

template <bool c, class T = void>
struct enable_if {};
template <class T>
struct enable_if<true, T> {
  typedef T type;
};
template <bool c, class T = void>
using enable_if_t = typename enable_if<c, T>::type;

template <bool c, class A, class B>
struct conditional {
  typedef A type;
};
template <class A, class B>
struct conditional<false, A, B> {
  typedef B type;
};
template <bool c, class A, class B>
using conditional_t = typename conditional<c, A, B>::type;

template <class T>
struct type_identity {
  typedef T type;
};
template <class T>
struct remove_const : type_identity<T> {};
template <class T>
struct remove_const<const T> : type_identity<T> {};
template <class T>
struct remove_volatile : type_identity<T> {};
template <class T>
struct remove_volatile<volatile T> : type_identity<T> {};
template <class T>
struct remove_cv : remove_const<typename remove_volatile<T>::type> {};
template <class T>
struct remove_reference : type_identity<T> {};
template <class T>
struct remove_reference<T&> : type_identity<T> {};
template <class T>
struct remove_reference<T&&> : type_identity<T> {};
#ifdef ALLOY_NEED_TRAITS
template <class T>
struct remove_pointer : type_identity<T> {};
template <class T>
struct remove_pointer<T*> : type_identity<T> {};
template <class T>
struct remove_pointer<T* const> : type_identity<T> {};
#endif
template <class T>
struct remove_cvref : remove_cv<typename remove_reference<T>::type> {};
#ifdef ALLOY_NEED_TRAITS
template <class T>
struct remove_extent : type_identity<T> {};
template <class T>
struct remove_extent<T[]> : type_identity<T> {};
template <class T, int N>
struct remove_extent<T[N]> : type_identity<T> {};
#endif
template <class T>
using remove_const_t = typename remove_const<T>::type;
template <class T>
using remove_volatile_t = typename remove_volatile<T>::type;
template <class T>
using remove_cv_t = typename remove_cv<T>::type;
template <class T>
using remove_reference_t = typename remove_reference<T>::type;
#ifdef ALLOY_NEED_TRAITS
template <class T>
using remove_pointer_t = typename remove_pointer<T>::type;
#endif
template <class T>
using remove_cvref_t = typename remove_cvref<T>::type;
#ifdef ALLOY_NEED_TRAITS
template <class T>
using remove_extent_t = typename remove_extent<T>::type;
#endif
#ifdef ALLOY_NEED_TRAITS
template <class T>
struct add_const : type_identity<const T> {};
template <class T>
using add_const_t = const T;
template <class T>
struct add_pointer : type_identity<remove_reference_t<T>*> {};
template <class T>
using add_pointer_t = remove_reference_t<T>*;
template <class T>
struct decay : type_identity<remove_cvref_t<T>> {};
template <class T, int N>
struct decay<T[N]> : type_identity<T*> {};
template <class T>
using decay_t = typename decay<T>::type;
#endif

template <class T>
ALLOY_FN T&& declval() noexcept;

#ifdef ALLOY_NEED_TRAITS
template <class T>
struct is_const : false_type {};
template <class T>
struct is_const<const T> : true_type {};
template <class T>
inline constexpr bool is_const_v = is_const<T>::value;
#endif
template <class T>
struct is_void : is_same<remove_cv_t<T>, void> {};
template <class T>
inline constexpr bool is_void_v = is_void<T>::value;
template <class T>
struct is_pointer : false_type {};
template <class T>
struct is_pointer<T*> : true_type {};
template <class T>
struct is_pointer<T* const> : true_type {};
template <class T>
inline constexpr bool is_pointer_v = is_pointer<T>::value;
#ifdef ALLOY_NEED_TRAITS
template <class T>
struct is_reference : false_type {};
template <class T>
struct is_reference<T&> : true_type {};
template <class T>
struct is_reference<T&&> : true_type {};
template <class T>
inline constexpr bool is_reference_v = is_reference<T>::value;
template <class T>
struct is_array : false_type {};
template <class T>
struct is_array<T[]> : true_type {};
template <class T, int N>
struct is_array<T[N]> : true_type {};
template <class T>
inline constexpr bool is_array_v = is_array<T>::value;
#endif

namespace alloy_traits {
template <class T>
struct integral : false_type {};
#define ALLOY_INTEGRAL(T) \
  template <>             \
  struct integral<T> : true_type {};
ALLOY_INTEGRAL(bool)
ALLOY_INTEGRAL(char)
ALLOY_INTEGRAL(signed char)
ALLOY_INTEGRAL(unsigned char)
ALLOY_INTEGRAL(short)
ALLOY_INTEGRAL(unsigned short)
ALLOY_INTEGRAL(int)
ALLOY_INTEGRAL(unsigned int)
ALLOY_INTEGRAL(long)
ALLOY_INTEGRAL(unsigned long)
ALLOY_INTEGRAL(long long)
ALLOY_INTEGRAL(unsigned long long)
#undef ALLOY_INTEGRAL
template <class T>
struct floating : false_type {};
template <>
struct floating<float> : true_type {};
template <>
struct floating<double> : true_type {};
template <>
struct floating<half> : true_type {};
template <>
struct floating<bfloat> : true_type {};
}  // namespace alloy_traits

template <class T>
struct is_integral : alloy_traits::integral<remove_cv_t<T>> {};
template <class T>
inline constexpr bool is_integral_v = is_integral<T>::value;
// half and bfloat are floating-point types in Metal.
template <class T>
struct is_floating_point : alloy_traits::floating<remove_cv_t<T>> {};
template <class T>
inline constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T>
struct is_arithmetic : bool_constant<is_integral_v<T> || is_floating_point_v<T>> {};
template <class T>
inline constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
#ifdef ALLOY_NEED_TRAITS
template <class T>
struct is_scalar : bool_constant<is_arithmetic_v<T> || is_pointer_v<T>> {};
template <class T>
inline constexpr bool is_scalar_v = is_scalar<T>::value;
#endif
namespace alloy_traits {
template <class T, bool = is_integral_v<T>>
struct signed_int : false_type {};
template <class T>
struct signed_int<T, true> : bool_constant<(T(-1) < T(0))> {};
}  // namespace alloy_traits
template <class T>
struct is_signed
    : bool_constant<is_floating_point_v<T> || alloy_traits::signed_int<remove_cv_t<T>>::value> {};
template <class T>
inline constexpr bool is_signed_v = is_signed<T>::value;
#ifdef ALLOY_NEED_TRAITS
template <class T>
struct is_unsigned : bool_constant<is_integral_v<T> && !is_signed_v<T>> {};
template <class T>
inline constexpr bool is_unsigned_v = is_unsigned<T>::value;

template <class T>
struct is_class : bool_constant<__is_class(T)> {};
template <class T>
inline constexpr bool is_class_v = is_class<T>::value;
template <class T>
struct is_enum : bool_constant<__is_enum(T)> {};
template <class T>
inline constexpr bool is_enum_v = is_enum<T>::value;
template <class B, class D>
struct is_base_of : bool_constant<__is_base_of(B, D)> {};
template <class B, class D>
inline constexpr bool is_base_of_v = is_base_of<B, D>::value;
template <class T>
struct is_trivially_copyable : bool_constant<__is_trivially_copyable(T)> {};
template <class T>
inline constexpr bool is_trivially_copyable_v = is_trivially_copyable<T>::value;
#endif

namespace alloy_traits {
template <class T>
ALLOY_FN void accept(T);
template <class F, class T, class = void>
struct convertible : false_type {};
template <class F, class T>
struct convertible<F, T, decltype(accept<T>(declval<F>()))> : true_type {};
template <class F>
struct convertible<F, void, void> : is_void<F> {};
}  // namespace alloy_traits
template <class F, class T>
struct is_convertible : alloy_traits::convertible<F, T> {};
template <class F, class T>
inline constexpr bool is_convertible_v = is_convertible<F, T>::value;

namespace alloy_traits {
template <int Bytes>
struct ints;
template <>
struct ints<1> {
  typedef signed char s;
  typedef unsigned char u;
};
template <>
struct ints<2> {
  typedef short s;
  typedef unsigned short u;
};
template <>
struct ints<4> {
  typedef int s;
  typedef unsigned int u;
};
template <>
struct ints<8> {
  typedef long s;
  typedef unsigned long u;
};
}  // namespace alloy_traits
template <class T>
struct make_unsigned : type_identity<typename alloy_traits::ints<sizeof(T)>::u> {};
template <class T>
using make_unsigned_t = typename make_unsigned<T>::type;
#ifdef ALLOY_NEED_TRAITS
template <class T>
struct make_signed : type_identity<typename alloy_traits::ints<sizeof(T)>::s> {};
template <class T>
using make_signed_t = typename make_signed<T>::type;
#endif

// Address-space traits: address spaces are erased in translated code, so removing one (or
// asking for a type without one) leaves the type as it is.
template <class T>
struct remove_addrspace : type_identity<T> {};
template <class T>
using remove_addrspace_t = typename remove_addrspace<T>::type;

// as_type<T>(x): bit reinterpretation between types of the same size (scalars and vectors).
template <class To, class From>
ALLOY_FN constexpr To as_type(const From& x) {
  static_assert(sizeof(To) == sizeof(From), "as_type: source and destination sizes differ");
  if constexpr (__is_trivially_copyable(To) && __is_trivially_copyable(From)) {
    return __builtin_bit_cast(To, x);
  } else {
    To r;
    alloy_target::copy_bytes(&r, &x, sizeof(To));
    return r;
  }
}

}  // namespace metal

// ---- Constants: Metal defines these as float (no double in MSL). Host headers may have defined
// some of them (as double or with other spellings): redefine.

#undef INFINITY
#define INFINITY (__builtin_bit_cast(float, 0x7f800000u))
#undef NAN
#define NAN (__builtin_bit_cast(float, 0x7fc00000u))
#undef HUGE_VALF
#define HUGE_VALF INFINITY
#undef MAXFLOAT
#define MAXFLOAT 0x1.fffffep+127f
#undef FLT_MAX
#define FLT_MAX 0x1.fffffep+127f
#undef FLT_MIN
#define FLT_MIN 0x1p-126f
#undef FLT_EPSILON
#define FLT_EPSILON 0x1p-23f
#undef FLT_DIG
#define FLT_DIG 6
#undef FLT_MANT_DIG
#define FLT_MANT_DIG 24
#undef FLT_MAX_10_EXP
#define FLT_MAX_10_EXP 38
#undef FLT_MAX_EXP
#define FLT_MAX_EXP 128
#undef FLT_MIN_10_EXP
#define FLT_MIN_10_EXP (-37)
#undef FLT_MIN_EXP
#define FLT_MIN_EXP (-125)
#undef FLT_RADIX
#define FLT_RADIX 2

#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f

#undef CHAR_BIT
#define CHAR_BIT 8
#undef SCHAR_MAX
#define SCHAR_MAX 127
#undef SCHAR_MIN
#define SCHAR_MIN (-128)
#undef UCHAR_MAX
#define UCHAR_MAX 255
#undef CHAR_MAX
#define CHAR_MAX SCHAR_MAX
#undef CHAR_MIN
#define CHAR_MIN SCHAR_MIN
#undef SHRT_MAX
#define SHRT_MAX 32767
#undef SHRT_MIN
#define SHRT_MIN (-32768)
#undef USHRT_MAX
#define USHRT_MAX 65535
#undef INT_MAX
#define INT_MAX 2147483647
#undef INT_MIN
#define INT_MIN (-2147483647 - 1)
#undef UINT_MAX
#define UINT_MAX 4294967295u
#undef LONG_MAX
#define LONG_MAX 9223372036854775807l
#undef LONG_MIN
#define LONG_MIN (-9223372036854775807l - 1)
#undef ULONG_MAX
#define ULONG_MAX 18446744073709551615ul
