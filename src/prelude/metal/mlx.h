// What MLX's kernel prelude (mlx/backend/metal/kernels/utils.h and the headers it includes) gives
// mx.fast.metal_kernel bodies, with MLX's semantics: float16_t / bfloat16_t, complex64_t,
// Limits<T>, elem_to_loc and friends, ceildiv, log1p, MTL_CONST. MLX declares these at global
// scope after `using namespace metal;`; translated kernels live inside namespace metal, so they
// are declared there. A source that defines one of them itself (MLX's own utils.h does) gets its
// own: the translator defines ALLOY_USER_<name> and the prelude's is left out.
#pragma once

#define MTL_CONST
#define METAL_FUNC ALLOY_FN
#if defined(ALLOY_TARGET_CUDA)
#define MLX_MTL_PRAGMA_UNROLL _Pragma("unroll")
#else
#define MLX_MTL_PRAGMA_UNROLL _Pragma("GCC unroll 16")
#endif

namespace metal {

#ifndef ALLOY_USER_bfloat16_to_uint16
ALLOY_FN uint16_t bfloat16_to_uint16(bfloat16_t x) {
  return x.alloy_bits;
}

#endif
#ifndef ALLOY_USER_uint16_to_bfloat16
ALLOY_FN bfloat16_t uint16_to_bfloat16(uint16_t x) {
  return bfloat16_t::from_bits(x);
}

#endif

// ---- complex64_t ----

#ifndef ALLOY_USER_complex64_t
// Unlike MLX's, the default constructor leaves the value uninitialized: the type must be trivial
// to be a threadgroup (CUDA __shared__) object. Write `complex64_t z = 0;` or `complex64_t z{}`
// (both zero).
struct complex64_t {
  float real;
  float imag;

  complex64_t() = default;
  ALLOY_FN constexpr complex64_t(float re, float im) : real(re), imag(im) {}
  template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0>
  ALLOY_FN constexpr complex64_t(T x) : real(static_cast<float>(x)), imag(0) {}
  // Conversion to a real type keeps the real part (as MLX's).
  template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0>
  ALLOY_FN constexpr operator T() const {
    return static_cast<T>(real);
  }

  ALLOY_FN complex64_t& operator+=(complex64_t o) {
    real += o.real;
    imag += o.imag;
    return *this;
  }
  ALLOY_FN complex64_t& operator-=(complex64_t o) {
    real -= o.real;
    imag -= o.imag;
    return *this;
  }
  ALLOY_FN complex64_t& operator*=(complex64_t o);
  ALLOY_FN complex64_t& operator/=(complex64_t o);
};

ALLOY_FN constexpr complex64_t operator-(complex64_t x) {
  return {-x.real, -x.imag};
}
ALLOY_FN constexpr complex64_t operator+(complex64_t a, complex64_t b) {
  return {a.real + b.real, a.imag + b.imag};
}
ALLOY_FN constexpr complex64_t operator-(complex64_t a, complex64_t b) {
  return {a.real - b.real, a.imag - b.imag};
}
ALLOY_FN constexpr complex64_t operator*(complex64_t a, complex64_t b) {
  return {a.real * b.real - a.imag * b.imag, a.real * b.imag + a.imag * b.real};
}
ALLOY_FN constexpr complex64_t operator/(complex64_t a, complex64_t b) {
  float d = b.real * b.real + b.imag * b.imag;
  return {(a.real * b.real + a.imag * b.imag) / d, (a.imag * b.real - a.real * b.imag) / d};
}
// complex with a real scalar (exact-match templates: otherwise both the converting constructor
// and the conversion to a real type apply, and `z + 2.0f` is ambiguous).
#define ALLOY_COMPLEX_MIXED(op)                                                         \
  template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0> \
  ALLOY_FN constexpr complex64_t operator op(complex64_t a, T b) {                      \
    return a op complex64_t(b);                                                         \
  }                                                                                     \
  template <class T, enable_if_t<alloy_detail::is_scalar_arith_c<T>::value(), int> = 0> \
  ALLOY_FN constexpr complex64_t operator op(T a, complex64_t b) {                      \
    return complex64_t(a) op b;                                                         \
  }
ALLOY_COMPLEX_MIXED(+)
ALLOY_COMPLEX_MIXED(-)
ALLOY_COMPLEX_MIXED(*)
ALLOY_COMPLEX_MIXED(/)
#undef ALLOY_COMPLEX_MIXED

// Remainder of each part, with the divisor's sign (MLX's floored modulo).
ALLOY_FN complex64_t operator%(complex64_t a, complex64_t b) {
  float re = a.real - b.real * static_cast<float>(static_cast<int64_t>(a.real / b.real));
  float im = a.imag - b.imag * static_cast<float>(static_cast<int64_t>(a.imag / b.imag));
  if (re != 0 && ((re < 0) != (b.real < 0))) re += b.real;
  if (im != 0 && ((im < 0) != (b.imag < 0))) im += b.imag;
  return {re, im};
}
// Ordering: lexicographic on (real, imag), as MLX.
ALLOY_FN constexpr bool operator==(complex64_t a, complex64_t b) {
  return a.real == b.real && a.imag == b.imag;
}
ALLOY_FN constexpr bool operator!=(complex64_t a, complex64_t b) {
  return !(a == b);
}
ALLOY_FN constexpr bool operator>(complex64_t a, complex64_t b) {
  return a.real > b.real || (a.real == b.real && a.imag > b.imag);
}
ALLOY_FN constexpr bool operator>=(complex64_t a, complex64_t b) {
  return a.real > b.real || (a.real == b.real && a.imag >= b.imag);
}
ALLOY_FN constexpr bool operator<(complex64_t a, complex64_t b) {
  return b > a;
}
ALLOY_FN constexpr bool operator<=(complex64_t a, complex64_t b) {
  return b >= a;
}
ALLOY_FN complex64_t& complex64_t::operator*=(complex64_t o) {
  return *this = *this * o;
}
ALLOY_FN complex64_t& complex64_t::operator/=(complex64_t o) {
  return *this = *this / o;
}

#endif  // ALLOY_USER_complex64_t

// ---- Limits<T>: max/min are the infinities for floating types, finite_* the largest finite ----

#ifndef ALLOY_USER_Limits
template <class T, bool = is_floating_point_v<T>>
struct Limits {
  static constexpr T max = numeric_limits<T>::max();
  static constexpr T min = numeric_limits<T>::min();
  static constexpr T finite_max = numeric_limits<T>::max();
  static constexpr T finite_min = numeric_limits<T>::min();
};
template <class T>
struct Limits<T, true> {
  static constexpr T max = numeric_limits<T>::infinity();
  static constexpr T min = -numeric_limits<T>::infinity();
  static constexpr T finite_max = numeric_limits<T>::max();
  static constexpr T finite_min = -numeric_limits<T>::max();
};
template <>
struct Limits<bool, false> {
  static constexpr bool max = true;
  static constexpr bool min = false;
};
#ifndef ALLOY_USER_complex64_t
template <>
struct Limits<complex64_t, false> {
  static constexpr complex64_t max =
      complex64_t(numeric_limits<float>::infinity(), numeric_limits<float>::infinity());
  static constexpr complex64_t min =
      complex64_t(-numeric_limits<float>::infinity(), -numeric_limits<float>::infinity());
};
#endif
#endif  // ALLOY_USER_Limits

// ---- Index helpers: element index -> strided offset (row-major shape, last dim fastest) ----

// elem_to_loc<IdxT>(elem, shape, strides, ndim)
#ifndef ALLOY_USER_elem_to_loc
template <class IdxT = int64_t, class E, class S, enable_if_t<is_integral_v<E>, int> = 0>
ALLOY_FN IdxT elem_to_loc(E elem_, const int* shape, const S* strides, int ndim) {
  IdxT elem = IdxT(elem_);
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % shape[i]) * IdxT(strides[i]);
    elem /= shape[i];
  }
  return loc;
}
#endif
// Grid-position form: elem.x / elem.y index the last two dims, elem.z the flattened rest.
#ifndef ALLOY_USER_elem_to_loc
template <class IdxT = int64_t, class S>
ALLOY_FN IdxT elem_to_loc(uint3 elem, const int* shape, const S* strides, int ndim) {
  IdxT loc = elem.x * IdxT(strides[ndim - 1]) + elem.y * IdxT(strides[ndim - 2]);
  for (int d = ndim - 3; d >= 0; --d) {
    loc += (elem.z % shape[d]) * IdxT(strides[d]);
    elem.z /= shape[d];
  }
  return loc;
}
#endif
#ifndef ALLOY_USER_elem_to_loc_1
template <class IdxT = int64_t, class S>
ALLOY_FN IdxT elem_to_loc_1(uint elem, const S& stride) {
  return elem * IdxT(stride);
}
#endif
#ifndef ALLOY_USER_elem_to_loc_2
template <class IdxT = int64_t, class S>
ALLOY_FN IdxT elem_to_loc_2(uint2 elem, const S strides[2]) {
  return elem.x * IdxT(strides[1]) + elem.y * IdxT(strides[0]);
}
#endif
#ifndef ALLOY_USER_elem_to_loc_3
template <class IdxT = int64_t, class S>
ALLOY_FN IdxT elem_to_loc_3(uint3 elem, const S strides[3]) {
  return elem.x * IdxT(strides[2]) + elem.y * IdxT(strides[1]) + elem.z * IdxT(strides[0]);
}
#endif
#ifndef ALLOY_USER_elem_to_loc_2_nd
template <class IdxT = int64_t, class S>
ALLOY_FN vec<IdxT, 2> elem_to_loc_2_nd(uint3 elem, const int* shape, const S* a_strides,
                                       const S* b_strides, int ndim) {
  vec<IdxT, 2> loc = {
      IdxT(elem.x * IdxT(a_strides[ndim - 1]) + IdxT(elem.y) * IdxT(a_strides[ndim - 2])),
      IdxT(elem.x * IdxT(b_strides[ndim - 1]) + IdxT(elem.y) * IdxT(b_strides[ndim - 2]))};
  for (int d = ndim - 3; d >= 0; --d) {
    uint l = elem.z % shape[d];
    loc.x += l * IdxT(a_strides[d]);
    loc.y += l * IdxT(b_strides[d]);
    elem.z /= shape[d];
  }
  return loc;
}
#endif
#ifndef ALLOY_USER_elem_to_loc_3_nd
template <class IdxT = int64_t, class S>
ALLOY_FN vec<IdxT, 3> elem_to_loc_3_nd(uint3 elem, const int* shape, const S* a_strides,
                                       const S* b_strides, const S* c_strides, int ndim) {
  vec<IdxT, 3> loc = {
      IdxT(elem.x * IdxT(a_strides[ndim - 1])) + IdxT(elem.y * IdxT(a_strides[ndim - 2])),
      IdxT(elem.x * IdxT(b_strides[ndim - 1])) + IdxT(elem.y * IdxT(b_strides[ndim - 2])),
      IdxT(elem.x * IdxT(c_strides[ndim - 1])) + IdxT(elem.y * IdxT(c_strides[ndim - 2]))};
  for (int d = ndim - 3; d >= 0; --d) {
    uint l = elem.z % shape[d];
    loc.x += l * IdxT(a_strides[d]);
    loc.y += l * IdxT(b_strides[d]);
    loc.z += l * IdxT(c_strides[d]);
    elem.z /= shape[d];
  }
  return loc;
}
#endif
// Fixed-rank forms.
#ifndef ALLOY_USER_elem_to_loc_nd
template <int NDIM, class S>
ALLOY_FN S elem_to_loc_nd(uint elem, const int* shape, const S* strides) {
  S loc = (elem % shape[NDIM - 1]) * strides[NDIM - 1];
  for (int d = NDIM - 2; d >= 0; --d) {
    elem /= shape[d + 1];
    loc += (elem % shape[d]) * strides[d];
  }
  return loc;
}
#endif
#ifndef ALLOY_USER_elem_to_loc_nd
template <int NDIM, class S>
ALLOY_FN S elem_to_loc_nd(uint3 elem, const int* shape, const S* strides) {
  S loc = elem.x * strides[NDIM - 1] + elem.y * strides[NDIM - 2];
  for (int d = NDIM - 3; d >= 0; --d) {
    loc += (elem.z % shape[d]) * strides[d];
    elem.z /= shape[d];
  }
  return loc;
}
#endif

#ifndef ALLOY_USER_ceildiv
template <class T, class U>
ALLOY_FN constexpr T ceildiv(T n, U m) {
  return (n + m - 1) / m;
}
#endif

// log1p (MLX provides it; Metal has none).
#ifndef ALLOY_USER_log1p
ALLOY_MATH1(log1p, ::log1pf(x), ::log1p(x))
#else
// The source defines log1p (MLX's utils.h: for float, bfloat16_t and complex64_t). Metal promotes
// a half argument to float; here half converts to each of those alike (ambiguous), so a half
// overload forwards to the float one. The translator defines it after the source's code.
template <class H, enable_if_t<is_same<H, half>::value, int> = 0>
ALLOY_FN float log1p(H x);
#endif
#ifndef ALLOY_USER_expm1
ALLOY_MATH1(expm1, ::expm1f(x), ::expm1(x))
#endif

}  // namespace metal
