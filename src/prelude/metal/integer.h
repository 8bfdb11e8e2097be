// Metal integer functions (<metal_integer>): clz ctz popcount extract_bits insert_bits mulhi
// rotate reverse_bits absdiff addsat subsat hadd rhadd madhi madsat mad24 mul24, on every integer
// type and on integer vectors. Results have the argument type, as in Metal.
#pragma once

namespace metal {

namespace alloy_detail {
template <class T>
using int_t =
    enable_if_t<is_integral_v<T> && !is_same<remove_cv_t<T>, bool>::value, remove_cv_t<T>>;
template <class T>
struct width_c {
  ALLOY_FN static constexpr int value() { return int(sizeof(T) * 8); }
};
template <class T>
ALLOY_FN constexpr make_unsigned_t<T> low_mask(uint32_t bits) {
  typedef make_unsigned_t<T> U;
  return bits >= uint32_t(width_c<T>::value()) ? U(~U(0)) : U((U(1) << bits) - U(1));
}
}  // namespace alloy_detail

template <class T>
ALLOY_FN alloy_detail::int_t<T> clz(T x) {
  typedef make_unsigned_t<T> U;
  if constexpr (sizeof(T) <= 4)
    return T(alloy_target::clz32(uint32_t(U(x))) - (32 - alloy_detail::width_c<T>::value()));
  else
    return T(alloy_target::clz64(uint64_t(U(x))));
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> ctz(T x) {
  typedef make_unsigned_t<T> U;
  if constexpr (sizeof(T) <= 4) {
    uint32_t c = alloy_target::ctz32(uint32_t(U(x)));
    return T(c > uint32_t(alloy_detail::width_c<T>::value()) ? alloy_detail::width_c<T>::value()
                                                             : c);
  } else {
    return T(alloy_target::ctz64(uint64_t(U(x))));
  }
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> popcount(T x) {
  typedef make_unsigned_t<T> U;
  if constexpr (sizeof(T) <= 4)
    return T(alloy_target::popcount32(uint32_t(U(x))));
  else
    return T(alloy_target::popcount64(uint64_t(U(x))));
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> reverse_bits(T x) {
  typedef make_unsigned_t<T> U;
  if constexpr (sizeof(T) <= 4) {
    return T(U(alloy_target::reverse_bits32(uint32_t(U(x))) >>
               (32 - alloy_detail::width_c<T>::value())));
  } else {
    uint64_t u = uint64_t(x);
    return T((uint64_t(alloy_target::reverse_bits32(uint32_t(u))) << 32) |
             alloy_target::reverse_bits32(uint32_t(u >> 32)));
  }
}
// rotate(v, i): left by i modulo the width.
template <class T, class I>
ALLOY_FN alloy_detail::int_t<T> rotate(T v, I i) {
  typedef make_unsigned_t<T> U;
  constexpr int w = alloy_detail::width_c<T>::value();
  uint32_t s = uint32_t(make_unsigned_t<I>(i)) % uint32_t(w);
  U u = U(v);
  return T(U(U(u << s) | U(u >> ((w - s) % w))));
}
// extract_bits: bits [offset, offset + bits), sign-extended for signed types; 0 when bits == 0.
template <class T>
ALLOY_FN alloy_detail::int_t<T> extract_bits(T x, uint32_t offset, uint32_t bits) {
  typedef make_unsigned_t<T> U;
  if (bits == 0) return T(0);
  U r = U(U(x) >> offset) & alloy_detail::low_mask<T>(bits);
  if constexpr (is_signed_v<T>) {
    if (bits < uint32_t(alloy_detail::width_c<T>::value()) && ((r >> (bits - 1)) & 1u))
      r |= U(~alloy_detail::low_mask<T>(bits));
  }
  return T(r);
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> insert_bits(T base, T insert, uint32_t offset, uint32_t bits) {
  typedef make_unsigned_t<T> U;
  if (bits == 0) return base;
  U mask = U(alloy_detail::low_mask<T>(bits) << offset);
  return T(U((U(base) & U(~mask)) | (U(U(insert) << offset) & mask)));
}
// mulhi: high half of the full product.
template <class T>
ALLOY_FN alloy_detail::int_t<T> mulhi(T a, T b) {
  if constexpr (sizeof(T) < 4) {
    return T((int32_t(a) * int32_t(b)) >> alloy_detail::width_c<T>::value());
  } else if constexpr (sizeof(T) == 4) {
    if constexpr (is_signed_v<T>)
      return T(alloy_target::mulhi_s32(int32_t(a), int32_t(b)));
    else
      return T(alloy_target::mulhi_u32(uint32_t(a), uint32_t(b)));
  } else {
    if constexpr (is_signed_v<T>)
      return T(alloy_target::mulhi_s64(int64_t(a), int64_t(b)));
    else
      return T(alloy_target::mulhi_u64(uint64_t(a), uint64_t(b)));
  }
}
// absdiff: |a - b| without overflow (wraps into T for results above T's max).
template <class T>
ALLOY_FN alloy_detail::int_t<T> absdiff(T a, T b) {
  typedef make_unsigned_t<T> U;
  return T(a > b ? U(U(a) - U(b)) : U(U(b) - U(a)));
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> addsat(T a, T b) {
  typedef make_unsigned_t<T> U;
  U r = U(U(a) + U(b));
  if constexpr (is_signed_v<T>) {
    // Overflow iff a and b have the same sign and r's sign differs.
    if (((U(a) ^ r) & (U(b) ^ r)) >> (alloy_detail::width_c<T>::value() - 1))
      return a < 0 ? numeric_limits<T>::min() : numeric_limits<T>::max();
    return T(r);
  } else {
    return r < U(a) ? numeric_limits<T>::max() : T(r);
  }
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> subsat(T a, T b) {
  typedef make_unsigned_t<T> U;
  U r = U(U(a) - U(b));
  if constexpr (is_signed_v<T>) {
    // Overflow iff a and b have different signs and r's sign differs from a's.
    if (((U(a) ^ U(b)) & (U(a) ^ r)) >> (alloy_detail::width_c<T>::value() - 1))
      return a < 0 ? numeric_limits<T>::min() : numeric_limits<T>::max();
    return T(r);
  } else {
    return U(a) < U(b) ? T(0) : T(r);
  }
}
// hadd = (a + b) >> 1 and rhadd = (a + b + 1) >> 1, without intermediate overflow.
template <class T>
ALLOY_FN alloy_detail::int_t<T> hadd(T a, T b) {
  return T((a >> 1) + (b >> 1) + (a & b & 1));
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> rhadd(T a, T b) {
  return T((a >> 1) + (b >> 1) + ((a | b) & 1));
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> madhi(T a, T b, T c) {
  return T(mulhi(a, b) + c);
}
template <class T>
ALLOY_FN alloy_detail::int_t<T> madsat(T a, T b, T c) {
  static_assert(sizeof(T) <= 4, "madsat: 64-bit operands are not supported");
  typedef conditional_t<is_signed_v<T>, int64_t, uint64_t> W;
  W r = W(a) * W(b);
  if constexpr (is_signed_v<T>) {
    r += W(c);
    if (r > W(numeric_limits<T>::max())) return numeric_limits<T>::max();
    if (r < W(numeric_limits<T>::min())) return numeric_limits<T>::min();
    return T(r);
  } else {
    if (r > W(numeric_limits<T>::max())) return numeric_limits<T>::max();
    return addsat(T(r), c);
  }
}
// mul24/mad24: operands are 24-bit values (sign-extended for int); others are undefined in Metal.
template <class T>
ALLOY_FN enable_if_t<sizeof(T) == 4, alloy_detail::int_t<T>> mul24(T a, T b) {
  if constexpr (is_signed_v<T>)
    return T(uint32_t(extract_bits(a, 0, 24)) * uint32_t(extract_bits(b, 0, 24)));
  else
    return T((a & 0xffffffu) * (b & 0xffffffu));
}
template <class T>
ALLOY_FN enable_if_t<sizeof(T) == 4, alloy_detail::int_t<T>> mad24(T a, T b, T c) {
  return T(uint32_t(mul24(a, b)) + uint32_t(c));
}

// Vector forms.
#define ALLOY_INT_VEC1(name)                                                  \
  template <class V, class R = alloy_detail::vec_unary_t<V>>                  \
  ALLOY_FN R name(const V& v) {                                               \
    R r;                                                                      \
    for (int i = 0; i < R::alloy_n; ++i) r.alloy_e[i] = name(v.alloy_get(i)); \
    return r;                                                                 \
  }
#define ALLOY_INT_VEC2(name)                                                         \
  template <class A, class B, class R = alloy_detail::vec_arith_t<A, B>>             \
  ALLOY_FN R name(const A& a, const B& b) {                                          \
    typedef typename R::value_type E;                                                \
    R r;                                                                             \
    for (int i = 0; i < R::alloy_n; ++i)                                             \
      r.alloy_e[i] = name(E(alloy_detail::comp(a, i)), E(alloy_detail::comp(b, i))); \
    return r;                                                                        \
  }
#define ALLOY_INT_VEC3(name)                                                         \
  template <class A, class B, class C,                                               \
            class R = alloy_detail::vec_arith_t<alloy_detail::vec_arith_t<A, B>, C>> \
  ALLOY_FN R name(const A& a, const B& b, const C& c) {                              \
    typedef typename R::value_type E;                                                \
    R r;                                                                             \
    for (int i = 0; i < R::alloy_n; ++i)                                             \
      r.alloy_e[i] = name(E(alloy_detail::comp(a, i)), E(alloy_detail::comp(b, i)),  \
                          E(alloy_detail::comp(c, i)));                              \
    return r;                                                                        \
  }
ALLOY_INT_VEC1(clz)
ALLOY_INT_VEC1(ctz)
ALLOY_INT_VEC1(popcount)
ALLOY_INT_VEC1(reverse_bits)
ALLOY_INT_VEC2(rotate)
ALLOY_INT_VEC2(mulhi)
ALLOY_INT_VEC2(absdiff)
ALLOY_INT_VEC2(addsat)
ALLOY_INT_VEC2(subsat)
ALLOY_INT_VEC2(hadd)
ALLOY_INT_VEC2(rhadd)
ALLOY_INT_VEC2(mul24)
ALLOY_INT_VEC3(madhi)
ALLOY_INT_VEC3(madsat)
ALLOY_INT_VEC3(mad24)
#undef ALLOY_INT_VEC1
#undef ALLOY_INT_VEC2
#undef ALLOY_INT_VEC3

template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0>
ALLOY_FN alloy_detail::vec_of_t<V> extract_bits(const V& x, uint32_t offset, uint32_t bits) {
  alloy_detail::vec_of_t<V> r;
  for (int i = 0; i < r.alloy_n; ++i) r.alloy_e[i] = extract_bits(x.alloy_get(i), offset, bits);
  return r;
}
template <class V, class W, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0>
ALLOY_FN alloy_detail::vec_of_t<V> insert_bits(const V& base, const W& insert, uint32_t offset,
                                               uint32_t bits) {
  alloy_detail::vec_of_t<V> r;
  for (int i = 0; i < r.alloy_n; ++i)
    r.alloy_e[i] =
        insert_bits(base.alloy_get(i), alloy_detail::vec_elem_t<V>(alloy_detail::comp(insert, i)),
                    offset, bits);
  return r;
}

}  // namespace metal
