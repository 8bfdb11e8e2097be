// Metal vectors: vec<T, N> (N = 2, 3, 4) and the float4/int2/half3/... names. Layout as in Metal
// (alignment = size, 3-component vectors padded to 4), so `(device float4*)p` casts work.
// Components: .x .y .z .w, .r .g .b .a, [i], and every swizzle (.xy, .zyx, .wzyx, ...; the ones
// without repeated components are writable). Swizzles are proxy members of an anonymous union
// that alias the components; they convert to vec<T, K> and take part in every vector operation.
#pragma once

namespace metal {

template <class T, int N>
struct vec;

namespace alloy_detail {

template <class T, int N, int... I>
struct swizzle;

template <class X>
struct vec_traits {
  enum : bool { is_vec = false };
  enum : int { n = 1 };
  typedef X elem;
  typedef X type;
};
template <class T, int N>
struct vec_traits<vec<T, N>> {
  enum : bool { is_vec = true };
  enum : int { n = N };
  typedef T elem;
  typedef vec<T, N> type;
};
template <class T, int N, int... I>
struct vec_traits<swizzle<T, N, I...>> {
  enum : bool { is_vec = true };
  enum : int { n = sizeof...(I) };
  typedef T elem;
  typedef vec<T, sizeof...(I)> type;
};
template <class X>
struct is_vecish_c {
  ALLOY_FN static constexpr bool value() { return vec_traits<remove_cvref_t<X>>::is_vec; }
};
template <class X>
using vec_elem_t = typename vec_traits<remove_cvref_t<X>>::elem;
template <class X>
using vec_of_t = typename vec_traits<remove_cvref_t<X>>::type;
template <class X>
struct vec_n_c {
  ALLOY_FN static constexpr int value() { return vec_traits<remove_cvref_t<X>>::n; }
};

// Component i of a vector or swizzle; a scalar stands for all its components.
template <class X>
ALLOY_FN constexpr auto comp(const X& x, int i) {
  if constexpr (is_vecish_c<X>::value())
    return x.alloy_get(i);
  else
    return x;
}

template <class T, int N>
struct elems {
  T v[N];
};

template <class T, int N>
ALLOY_FN constexpr elems<T, N> splat(T s) {
  elems<T, N> r{};
  for (int i = 0; i < N; ++i) r.v[i] = s;
  return r;
}

// Vector values beyond their components (ALLOY_NEED_VECTOR, metal_stdlib.h): constructors,
// swizzles, operators and the vector forms of all/any/select. Without it `vec` has its
// components, `[i]`, copies and default construction only: what an attribute read through
// `.x`/`.y`/`.z` needs (prelude_select.cpp). Anything more fails to compile.
#ifdef ALLOY_NEED_VECTOR
template <class X>
ALLOY_FN constexpr int count_comps() {
  if constexpr (is_vecish_c<X>::value())
    return vec_n_c<X>::value();
  else if constexpr (is_scalar_arith_c<X>::value())
    return 1;
  else
    return 1000;  // not a vector constructor argument
}

template <class T, class A>
ALLOY_FN constexpr void flatten_one(T* out, int& k, const A& a) {
  if constexpr (is_vecish_c<A>::value()) {
    for (int i = 0; i < vec_n_c<A>::value(); ++i) out[k++] = static_cast<T>(a.alloy_get(i));
  } else {
    out[k++] = static_cast<T>(a);
  }
}

template <class T, int N, class... As>
ALLOY_FN constexpr elems<T, N> flatten(const As&... as) {
  elems<T, N> r{};
  int k = 0;
  (flatten_one<T>(r.v, k, as), ...);
  return r;
}

template <int... I>
ALLOY_FN constexpr bool distinct() {
  int idx[] = {I...};
  for (int a = 0; a < int(sizeof...(I)); ++a)
    for (int b = a + 1; b < int(sizeof...(I)); ++b)
      if (idx[a] == idx[b]) return false;
  return true;
}

// x.alloy_swizzle<J...>(): components J... of a vector, swizzle or packed vector, as a new
// vector (a scalar for one index). The translator rewrites swizzles of swizzles (`v.zw.yx`,
// `v.xy.x`) into it: swizzle members cannot themselves carry every swizzle member.
template <class T, class X, int... J>
ALLOY_FN auto sub_swizzle(const X& x) {
  if constexpr (sizeof...(J) == 1) {
    return x.alloy_get(J...);
  } else {
    vec<T, sizeof...(J)> r;
    int k = 0;
    ((r.alloy_e[k++] = x.alloy_get(J)), ...);
    return r;
  }
}

template <class T, int N, int... I>
struct swizzle {
  T alloy_e[N];  // the vector's components (this struct is a member of the vector's union)
  enum : int { K = sizeof...(I) };
  typedef vec<T, sizeof...(I)> vec_type;

  static ALLOY_FN constexpr int index(int k) {
    int idx[] = {I...};
    return idx[k];
  }
  ALLOY_FN constexpr T alloy_get(int k) const { return alloy_e[index(k)]; }
  ALLOY_FN T operator[](int k) const { return alloy_get(k); }
  template <int... J>
  ALLOY_FN auto alloy_swizzle() const {
    return sub_swizzle<T, swizzle, J...>(*this);
  }

  ALLOY_FN operator vec_type() const {
    vec_type r;
    for (int k = 0; k < K; ++k) r.alloy_e[k] = alloy_get(k);
    return r;
  }

  template <class V>
  ALLOY_FN swizzle& operator=(const V& v) {
    static_assert(distinct<I...>(), "swizzle with a repeated component is not assignable");
    static_assert(!is_vecish_c<V>::value() || vec_n_c<V>::value() == K,
                  "swizzle assignment: sizes differ");
    T tmp[K];
    for (int k = 0; k < K; ++k) tmp[k] = static_cast<T>(comp(v, k));  // reads before writes
    for (int k = 0; k < K; ++k) alloy_e[index(k)] = tmp[k];
    return *this;
  }
  ALLOY_FN swizzle& operator=(const swizzle& o) { return operator=<swizzle>(o); }

  template <class V>
  ALLOY_FN swizzle& operator+=(const V& v) {
    return *this = vec_type(*this) + v;
  }
  template <class V>
  ALLOY_FN swizzle& operator-=(const V& v) {
    return *this = vec_type(*this) - v;
  }
  template <class V>
  ALLOY_FN swizzle& operator*=(const V& v) {
    return *this = vec_type(*this) * v;
  }
  template <class V>
  ALLOY_FN swizzle& operator/=(const V& v) {
    return *this = vec_type(*this) / v;
  }
  template <class V>
  ALLOY_FN swizzle& operator%=(const V& v) {
    return *this = vec_type(*this) % v;
  }
  template <class V>
  ALLOY_FN swizzle& operator&=(const V& v) {
    return *this = vec_type(*this) & v;
  }
  template <class V>
  ALLOY_FN swizzle& operator|=(const V& v) {
    return *this = vec_type(*this) | v;
  }
  template <class V>
  ALLOY_FN swizzle& operator^=(const V& v) {
    return *this = vec_type(*this) ^ v;
  }
  template <class V>
  ALLOY_FN swizzle& operator<<=(const V& v) {
    return *this = vec_type(*this) << v;
  }
  template <class V>
  ALLOY_FN swizzle& operator>>=(const V& v) {
    return *this = vec_type(*this) >> v;
  }
};
#endif  // ALLOY_NEED_VECTOR

template <class T, int N>
struct vec_storage;

// The member lists below are generated: every 2-, 3- and 4-letter swizzle over the components,
// one declaration naming its xyzw and rgba spellings. Each swizzle member is a class template
// instance, and NVRTC pays for every one when a vector type is first used (~120 of them for
// uint3, ~25 ms): a translated kernel gets only the swizzles it names (ALLOY_SWIZZLE_<xyzw
// spelling>, defined by the translator; see metal_stdlib.h), everything else gets them all.
// Skipping the lists costs the preprocessor milliseconds too: each is inside ALLOY_SWIZZLES_<N>,
// which the translator defines when some selected swizzle applies to N-component vectors.
template <class T>
struct alignas(2 * sizeof(T)) vec_storage<T, 2> {
  union {
    T alloy_e[2];
    struct {
      T x, y;
    };
    struct {
      T r, g;
    };
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLES_2)
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xx)
    swizzle<T, 2, 0, 0> xx, rr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xy)
    swizzle<T, 2, 0, 1> xy, rg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yx)
    swizzle<T, 2, 1, 0> yx, gr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yy)
    swizzle<T, 2, 1, 1> yy, gg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxx)
    swizzle<T, 2, 0, 0, 0> xxx, rrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxy)
    swizzle<T, 2, 0, 0, 1> xxy, rrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyx)
    swizzle<T, 2, 0, 1, 0> xyx, rgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyy)
    swizzle<T, 2, 0, 1, 1> xyy, rgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxx)
    swizzle<T, 2, 1, 0, 0> yxx, grr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxy)
    swizzle<T, 2, 1, 0, 1> yxy, grg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyx)
    swizzle<T, 2, 1, 1, 0> yyx, ggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyy)
    swizzle<T, 2, 1, 1, 1> yyy, ggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxx)
    swizzle<T, 2, 0, 0, 0, 0> xxxx, rrrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxy)
    swizzle<T, 2, 0, 0, 0, 1> xxxy, rrrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyx)
    swizzle<T, 2, 0, 0, 1, 0> xxyx, rrgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyy)
    swizzle<T, 2, 0, 0, 1, 1> xxyy, rrgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxx)
    swizzle<T, 2, 0, 1, 0, 0> xyxx, rgrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxy)
    swizzle<T, 2, 0, 1, 0, 1> xyxy, rgrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyx)
    swizzle<T, 2, 0, 1, 1, 0> xyyx, rggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyy)
    swizzle<T, 2, 0, 1, 1, 1> xyyy, rggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxx)
    swizzle<T, 2, 1, 0, 0, 0> yxxx, grrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxy)
    swizzle<T, 2, 1, 0, 0, 1> yxxy, grrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyx)
    swizzle<T, 2, 1, 0, 1, 0> yxyx, grgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyy)
    swizzle<T, 2, 1, 0, 1, 1> yxyy, grgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxx)
    swizzle<T, 2, 1, 1, 0, 0> yyxx, ggrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxy)
    swizzle<T, 2, 1, 1, 0, 1> yyxy, ggrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyx)
    swizzle<T, 2, 1, 1, 1, 0> yyyx, gggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyy)
    swizzle<T, 2, 1, 1, 1, 1> yyyy, gggg;
#endif
#endif  // ALLOY_SWIZZLES_2
  };
  vec_storage() = default;
  ALLOY_FN constexpr vec_storage(const elems<T, 2>& a) : alloy_e{a.v[0], a.v[1]} {}
};

template <class T>
struct alignas(4 * sizeof(T)) vec_storage<T, 3> {
  union {
    T alloy_e[3];
    struct {
      T x, y, z;
    };
    struct {
      T r, g, b;
    };
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLES_3)
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xx)
    swizzle<T, 3, 0, 0> xx, rr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xy)
    swizzle<T, 3, 0, 1> xy, rg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xz)
    swizzle<T, 3, 0, 2> xz, rb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yx)
    swizzle<T, 3, 1, 0> yx, gr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yy)
    swizzle<T, 3, 1, 1> yy, gg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yz)
    swizzle<T, 3, 1, 2> yz, gb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zx)
    swizzle<T, 3, 2, 0> zx, br;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zy)
    swizzle<T, 3, 2, 1> zy, bg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zz)
    swizzle<T, 3, 2, 2> zz, bb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxx)
    swizzle<T, 3, 0, 0, 0> xxx, rrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxy)
    swizzle<T, 3, 0, 0, 1> xxy, rrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxz)
    swizzle<T, 3, 0, 0, 2> xxz, rrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyx)
    swizzle<T, 3, 0, 1, 0> xyx, rgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyy)
    swizzle<T, 3, 0, 1, 1> xyy, rgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyz)
    swizzle<T, 3, 0, 1, 2> xyz, rgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzx)
    swizzle<T, 3, 0, 2, 0> xzx, rbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzy)
    swizzle<T, 3, 0, 2, 1> xzy, rbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzz)
    swizzle<T, 3, 0, 2, 2> xzz, rbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxx)
    swizzle<T, 3, 1, 0, 0> yxx, grr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxy)
    swizzle<T, 3, 1, 0, 1> yxy, grg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxz)
    swizzle<T, 3, 1, 0, 2> yxz, grb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyx)
    swizzle<T, 3, 1, 1, 0> yyx, ggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyy)
    swizzle<T, 3, 1, 1, 1> yyy, ggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyz)
    swizzle<T, 3, 1, 1, 2> yyz, ggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzx)
    swizzle<T, 3, 1, 2, 0> yzx, gbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzy)
    swizzle<T, 3, 1, 2, 1> yzy, gbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzz)
    swizzle<T, 3, 1, 2, 2> yzz, gbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxx)
    swizzle<T, 3, 2, 0, 0> zxx, brr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxy)
    swizzle<T, 3, 2, 0, 1> zxy, brg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxz)
    swizzle<T, 3, 2, 0, 2> zxz, brb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyx)
    swizzle<T, 3, 2, 1, 0> zyx, bgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyy)
    swizzle<T, 3, 2, 1, 1> zyy, bgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyz)
    swizzle<T, 3, 2, 1, 2> zyz, bgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzx)
    swizzle<T, 3, 2, 2, 0> zzx, bbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzy)
    swizzle<T, 3, 2, 2, 1> zzy, bbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzz)
    swizzle<T, 3, 2, 2, 2> zzz, bbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxx)
    swizzle<T, 3, 0, 0, 0, 0> xxxx, rrrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxy)
    swizzle<T, 3, 0, 0, 0, 1> xxxy, rrrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxz)
    swizzle<T, 3, 0, 0, 0, 2> xxxz, rrrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyx)
    swizzle<T, 3, 0, 0, 1, 0> xxyx, rrgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyy)
    swizzle<T, 3, 0, 0, 1, 1> xxyy, rrgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyz)
    swizzle<T, 3, 0, 0, 1, 2> xxyz, rrgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxzx)
    swizzle<T, 3, 0, 0, 2, 0> xxzx, rrbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxzy)
    swizzle<T, 3, 0, 0, 2, 1> xxzy, rrbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxzz)
    swizzle<T, 3, 0, 0, 2, 2> xxzz, rrbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxx)
    swizzle<T, 3, 0, 1, 0, 0> xyxx, rgrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxy)
    swizzle<T, 3, 0, 1, 0, 1> xyxy, rgrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxz)
    swizzle<T, 3, 0, 1, 0, 2> xyxz, rgrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyx)
    swizzle<T, 3, 0, 1, 1, 0> xyyx, rggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyy)
    swizzle<T, 3, 0, 1, 1, 1> xyyy, rggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyz)
    swizzle<T, 3, 0, 1, 1, 2> xyyz, rggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyzx)
    swizzle<T, 3, 0, 1, 2, 0> xyzx, rgbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyzy)
    swizzle<T, 3, 0, 1, 2, 1> xyzy, rgbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyzz)
    swizzle<T, 3, 0, 1, 2, 2> xyzz, rgbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzxx)
    swizzle<T, 3, 0, 2, 0, 0> xzxx, rbrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzxy)
    swizzle<T, 3, 0, 2, 0, 1> xzxy, rbrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzxz)
    swizzle<T, 3, 0, 2, 0, 2> xzxz, rbrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzyx)
    swizzle<T, 3, 0, 2, 1, 0> xzyx, rbgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzyy)
    swizzle<T, 3, 0, 2, 1, 1> xzyy, rbgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzyz)
    swizzle<T, 3, 0, 2, 1, 2> xzyz, rbgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzzx)
    swizzle<T, 3, 0, 2, 2, 0> xzzx, rbbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzzy)
    swizzle<T, 3, 0, 2, 2, 1> xzzy, rbbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzzz)
    swizzle<T, 3, 0, 2, 2, 2> xzzz, rbbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxx)
    swizzle<T, 3, 1, 0, 0, 0> yxxx, grrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxy)
    swizzle<T, 3, 1, 0, 0, 1> yxxy, grrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxz)
    swizzle<T, 3, 1, 0, 0, 2> yxxz, grrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyx)
    swizzle<T, 3, 1, 0, 1, 0> yxyx, grgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyy)
    swizzle<T, 3, 1, 0, 1, 1> yxyy, grgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyz)
    swizzle<T, 3, 1, 0, 1, 2> yxyz, grgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxzx)
    swizzle<T, 3, 1, 0, 2, 0> yxzx, grbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxzy)
    swizzle<T, 3, 1, 0, 2, 1> yxzy, grbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxzz)
    swizzle<T, 3, 1, 0, 2, 2> yxzz, grbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxx)
    swizzle<T, 3, 1, 1, 0, 0> yyxx, ggrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxy)
    swizzle<T, 3, 1, 1, 0, 1> yyxy, ggrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxz)
    swizzle<T, 3, 1, 1, 0, 2> yyxz, ggrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyx)
    swizzle<T, 3, 1, 1, 1, 0> yyyx, gggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyy)
    swizzle<T, 3, 1, 1, 1, 1> yyyy, gggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyz)
    swizzle<T, 3, 1, 1, 1, 2> yyyz, gggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyzx)
    swizzle<T, 3, 1, 1, 2, 0> yyzx, ggbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyzy)
    swizzle<T, 3, 1, 1, 2, 1> yyzy, ggbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyzz)
    swizzle<T, 3, 1, 1, 2, 2> yyzz, ggbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzxx)
    swizzle<T, 3, 1, 2, 0, 0> yzxx, gbrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzxy)
    swizzle<T, 3, 1, 2, 0, 1> yzxy, gbrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzxz)
    swizzle<T, 3, 1, 2, 0, 2> yzxz, gbrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzyx)
    swizzle<T, 3, 1, 2, 1, 0> yzyx, gbgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzyy)
    swizzle<T, 3, 1, 2, 1, 1> yzyy, gbgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzyz)
    swizzle<T, 3, 1, 2, 1, 2> yzyz, gbgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzzx)
    swizzle<T, 3, 1, 2, 2, 0> yzzx, gbbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzzy)
    swizzle<T, 3, 1, 2, 2, 1> yzzy, gbbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzzz)
    swizzle<T, 3, 1, 2, 2, 2> yzzz, gbbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxxx)
    swizzle<T, 3, 2, 0, 0, 0> zxxx, brrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxxy)
    swizzle<T, 3, 2, 0, 0, 1> zxxy, brrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxxz)
    swizzle<T, 3, 2, 0, 0, 2> zxxz, brrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxyx)
    swizzle<T, 3, 2, 0, 1, 0> zxyx, brgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxyy)
    swizzle<T, 3, 2, 0, 1, 1> zxyy, brgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxyz)
    swizzle<T, 3, 2, 0, 1, 2> zxyz, brgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxzx)
    swizzle<T, 3, 2, 0, 2, 0> zxzx, brbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxzy)
    swizzle<T, 3, 2, 0, 2, 1> zxzy, brbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxzz)
    swizzle<T, 3, 2, 0, 2, 2> zxzz, brbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyxx)
    swizzle<T, 3, 2, 1, 0, 0> zyxx, bgrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyxy)
    swizzle<T, 3, 2, 1, 0, 1> zyxy, bgrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyxz)
    swizzle<T, 3, 2, 1, 0, 2> zyxz, bgrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyyx)
    swizzle<T, 3, 2, 1, 1, 0> zyyx, bggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyyy)
    swizzle<T, 3, 2, 1, 1, 1> zyyy, bggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyyz)
    swizzle<T, 3, 2, 1, 1, 2> zyyz, bggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyzx)
    swizzle<T, 3, 2, 1, 2, 0> zyzx, bgbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyzy)
    swizzle<T, 3, 2, 1, 2, 1> zyzy, bgbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyzz)
    swizzle<T, 3, 2, 1, 2, 2> zyzz, bgbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzxx)
    swizzle<T, 3, 2, 2, 0, 0> zzxx, bbrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzxy)
    swizzle<T, 3, 2, 2, 0, 1> zzxy, bbrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzxz)
    swizzle<T, 3, 2, 2, 0, 2> zzxz, bbrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzyx)
    swizzle<T, 3, 2, 2, 1, 0> zzyx, bbgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzyy)
    swizzle<T, 3, 2, 2, 1, 1> zzyy, bbgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzyz)
    swizzle<T, 3, 2, 2, 1, 2> zzyz, bbgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzzx)
    swizzle<T, 3, 2, 2, 2, 0> zzzx, bbbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzzy)
    swizzle<T, 3, 2, 2, 2, 1> zzzy, bbbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzzz)
    swizzle<T, 3, 2, 2, 2, 2> zzzz, bbbb;
#endif
#endif  // ALLOY_SWIZZLES_3
  };
  vec_storage() = default;
  ALLOY_FN constexpr vec_storage(const elems<T, 3>& a) : alloy_e{a.v[0], a.v[1], a.v[2]} {}
};

template <class T>
struct alignas(4 * sizeof(T)) vec_storage<T, 4> {
  union {
    T alloy_e[4];
    struct {
      T x, y, z, w;
    };
    struct {
      T r, g, b, a;
    };
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLES_4)
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xx)
    swizzle<T, 4, 0, 0> xx, rr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xy)
    swizzle<T, 4, 0, 1> xy, rg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xz)
    swizzle<T, 4, 0, 2> xz, rb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xw)
    swizzle<T, 4, 0, 3> xw, ra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yx)
    swizzle<T, 4, 1, 0> yx, gr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yy)
    swizzle<T, 4, 1, 1> yy, gg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yz)
    swizzle<T, 4, 1, 2> yz, gb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yw)
    swizzle<T, 4, 1, 3> yw, ga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zx)
    swizzle<T, 4, 2, 0> zx, br;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zy)
    swizzle<T, 4, 2, 1> zy, bg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zz)
    swizzle<T, 4, 2, 2> zz, bb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zw)
    swizzle<T, 4, 2, 3> zw, ba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wx)
    swizzle<T, 4, 3, 0> wx, ar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wy)
    swizzle<T, 4, 3, 1> wy, ag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wz)
    swizzle<T, 4, 3, 2> wz, ab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ww)
    swizzle<T, 4, 3, 3> ww, aa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxx)
    swizzle<T, 4, 0, 0, 0> xxx, rrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxy)
    swizzle<T, 4, 0, 0, 1> xxy, rrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxz)
    swizzle<T, 4, 0, 0, 2> xxz, rrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxw)
    swizzle<T, 4, 0, 0, 3> xxw, rra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyx)
    swizzle<T, 4, 0, 1, 0> xyx, rgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyy)
    swizzle<T, 4, 0, 1, 1> xyy, rgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyz)
    swizzle<T, 4, 0, 1, 2> xyz, rgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyw)
    swizzle<T, 4, 0, 1, 3> xyw, rga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzx)
    swizzle<T, 4, 0, 2, 0> xzx, rbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzy)
    swizzle<T, 4, 0, 2, 1> xzy, rbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzz)
    swizzle<T, 4, 0, 2, 2> xzz, rbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzw)
    swizzle<T, 4, 0, 2, 3> xzw, rba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwx)
    swizzle<T, 4, 0, 3, 0> xwx, rar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwy)
    swizzle<T, 4, 0, 3, 1> xwy, rag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwz)
    swizzle<T, 4, 0, 3, 2> xwz, rab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xww)
    swizzle<T, 4, 0, 3, 3> xww, raa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxx)
    swizzle<T, 4, 1, 0, 0> yxx, grr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxy)
    swizzle<T, 4, 1, 0, 1> yxy, grg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxz)
    swizzle<T, 4, 1, 0, 2> yxz, grb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxw)
    swizzle<T, 4, 1, 0, 3> yxw, gra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyx)
    swizzle<T, 4, 1, 1, 0> yyx, ggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyy)
    swizzle<T, 4, 1, 1, 1> yyy, ggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyz)
    swizzle<T, 4, 1, 1, 2> yyz, ggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyw)
    swizzle<T, 4, 1, 1, 3> yyw, gga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzx)
    swizzle<T, 4, 1, 2, 0> yzx, gbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzy)
    swizzle<T, 4, 1, 2, 1> yzy, gbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzz)
    swizzle<T, 4, 1, 2, 2> yzz, gbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzw)
    swizzle<T, 4, 1, 2, 3> yzw, gba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywx)
    swizzle<T, 4, 1, 3, 0> ywx, gar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywy)
    swizzle<T, 4, 1, 3, 1> ywy, gag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywz)
    swizzle<T, 4, 1, 3, 2> ywz, gab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yww)
    swizzle<T, 4, 1, 3, 3> yww, gaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxx)
    swizzle<T, 4, 2, 0, 0> zxx, brr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxy)
    swizzle<T, 4, 2, 0, 1> zxy, brg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxz)
    swizzle<T, 4, 2, 0, 2> zxz, brb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxw)
    swizzle<T, 4, 2, 0, 3> zxw, bra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyx)
    swizzle<T, 4, 2, 1, 0> zyx, bgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyy)
    swizzle<T, 4, 2, 1, 1> zyy, bgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyz)
    swizzle<T, 4, 2, 1, 2> zyz, bgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyw)
    swizzle<T, 4, 2, 1, 3> zyw, bga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzx)
    swizzle<T, 4, 2, 2, 0> zzx, bbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzy)
    swizzle<T, 4, 2, 2, 1> zzy, bbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzz)
    swizzle<T, 4, 2, 2, 2> zzz, bbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzw)
    swizzle<T, 4, 2, 2, 3> zzw, bba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwx)
    swizzle<T, 4, 2, 3, 0> zwx, bar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwy)
    swizzle<T, 4, 2, 3, 1> zwy, bag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwz)
    swizzle<T, 4, 2, 3, 2> zwz, bab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zww)
    swizzle<T, 4, 2, 3, 3> zww, baa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxx)
    swizzle<T, 4, 3, 0, 0> wxx, arr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxy)
    swizzle<T, 4, 3, 0, 1> wxy, arg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxz)
    swizzle<T, 4, 3, 0, 2> wxz, arb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxw)
    swizzle<T, 4, 3, 0, 3> wxw, ara;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyx)
    swizzle<T, 4, 3, 1, 0> wyx, agr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyy)
    swizzle<T, 4, 3, 1, 1> wyy, agg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyz)
    swizzle<T, 4, 3, 1, 2> wyz, agb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyw)
    swizzle<T, 4, 3, 1, 3> wyw, aga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzx)
    swizzle<T, 4, 3, 2, 0> wzx, abr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzy)
    swizzle<T, 4, 3, 2, 1> wzy, abg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzz)
    swizzle<T, 4, 3, 2, 2> wzz, abb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzw)
    swizzle<T, 4, 3, 2, 3> wzw, aba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwx)
    swizzle<T, 4, 3, 3, 0> wwx, aar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwy)
    swizzle<T, 4, 3, 3, 1> wwy, aag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwz)
    swizzle<T, 4, 3, 3, 2> wwz, aab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_www)
    swizzle<T, 4, 3, 3, 3> www, aaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxx)
    swizzle<T, 4, 0, 0, 0, 0> xxxx, rrrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxy)
    swizzle<T, 4, 0, 0, 0, 1> xxxy, rrrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxz)
    swizzle<T, 4, 0, 0, 0, 2> xxxz, rrrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxxw)
    swizzle<T, 4, 0, 0, 0, 3> xxxw, rrra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyx)
    swizzle<T, 4, 0, 0, 1, 0> xxyx, rrgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyy)
    swizzle<T, 4, 0, 0, 1, 1> xxyy, rrgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyz)
    swizzle<T, 4, 0, 0, 1, 2> xxyz, rrgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxyw)
    swizzle<T, 4, 0, 0, 1, 3> xxyw, rrga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxzx)
    swizzle<T, 4, 0, 0, 2, 0> xxzx, rrbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxzy)
    swizzle<T, 4, 0, 0, 2, 1> xxzy, rrbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxzz)
    swizzle<T, 4, 0, 0, 2, 2> xxzz, rrbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxzw)
    swizzle<T, 4, 0, 0, 2, 3> xxzw, rrba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxwx)
    swizzle<T, 4, 0, 0, 3, 0> xxwx, rrar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxwy)
    swizzle<T, 4, 0, 0, 3, 1> xxwy, rrag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxwz)
    swizzle<T, 4, 0, 0, 3, 2> xxwz, rrab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xxww)
    swizzle<T, 4, 0, 0, 3, 3> xxww, rraa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxx)
    swizzle<T, 4, 0, 1, 0, 0> xyxx, rgrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxy)
    swizzle<T, 4, 0, 1, 0, 1> xyxy, rgrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxz)
    swizzle<T, 4, 0, 1, 0, 2> xyxz, rgrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyxw)
    swizzle<T, 4, 0, 1, 0, 3> xyxw, rgra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyx)
    swizzle<T, 4, 0, 1, 1, 0> xyyx, rggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyy)
    swizzle<T, 4, 0, 1, 1, 1> xyyy, rggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyz)
    swizzle<T, 4, 0, 1, 1, 2> xyyz, rggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyyw)
    swizzle<T, 4, 0, 1, 1, 3> xyyw, rgga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyzx)
    swizzle<T, 4, 0, 1, 2, 0> xyzx, rgbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyzy)
    swizzle<T, 4, 0, 1, 2, 1> xyzy, rgbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyzz)
    swizzle<T, 4, 0, 1, 2, 2> xyzz, rgbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyzw)
    swizzle<T, 4, 0, 1, 2, 3> xyzw, rgba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xywx)
    swizzle<T, 4, 0, 1, 3, 0> xywx, rgar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xywy)
    swizzle<T, 4, 0, 1, 3, 1> xywy, rgag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xywz)
    swizzle<T, 4, 0, 1, 3, 2> xywz, rgab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xyww)
    swizzle<T, 4, 0, 1, 3, 3> xyww, rgaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzxx)
    swizzle<T, 4, 0, 2, 0, 0> xzxx, rbrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzxy)
    swizzle<T, 4, 0, 2, 0, 1> xzxy, rbrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzxz)
    swizzle<T, 4, 0, 2, 0, 2> xzxz, rbrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzxw)
    swizzle<T, 4, 0, 2, 0, 3> xzxw, rbra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzyx)
    swizzle<T, 4, 0, 2, 1, 0> xzyx, rbgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzyy)
    swizzle<T, 4, 0, 2, 1, 1> xzyy, rbgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzyz)
    swizzle<T, 4, 0, 2, 1, 2> xzyz, rbgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzyw)
    swizzle<T, 4, 0, 2, 1, 3> xzyw, rbga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzzx)
    swizzle<T, 4, 0, 2, 2, 0> xzzx, rbbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzzy)
    swizzle<T, 4, 0, 2, 2, 1> xzzy, rbbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzzz)
    swizzle<T, 4, 0, 2, 2, 2> xzzz, rbbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzzw)
    swizzle<T, 4, 0, 2, 2, 3> xzzw, rbba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzwx)
    swizzle<T, 4, 0, 2, 3, 0> xzwx, rbar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzwy)
    swizzle<T, 4, 0, 2, 3, 1> xzwy, rbag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzwz)
    swizzle<T, 4, 0, 2, 3, 2> xzwz, rbab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xzww)
    swizzle<T, 4, 0, 2, 3, 3> xzww, rbaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwxx)
    swizzle<T, 4, 0, 3, 0, 0> xwxx, rarr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwxy)
    swizzle<T, 4, 0, 3, 0, 1> xwxy, rarg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwxz)
    swizzle<T, 4, 0, 3, 0, 2> xwxz, rarb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwxw)
    swizzle<T, 4, 0, 3, 0, 3> xwxw, rara;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwyx)
    swizzle<T, 4, 0, 3, 1, 0> xwyx, ragr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwyy)
    swizzle<T, 4, 0, 3, 1, 1> xwyy, ragg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwyz)
    swizzle<T, 4, 0, 3, 1, 2> xwyz, ragb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwyw)
    swizzle<T, 4, 0, 3, 1, 3> xwyw, raga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwzx)
    swizzle<T, 4, 0, 3, 2, 0> xwzx, rabr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwzy)
    swizzle<T, 4, 0, 3, 2, 1> xwzy, rabg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwzz)
    swizzle<T, 4, 0, 3, 2, 2> xwzz, rabb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwzw)
    swizzle<T, 4, 0, 3, 2, 3> xwzw, raba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwwx)
    swizzle<T, 4, 0, 3, 3, 0> xwwx, raar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwwy)
    swizzle<T, 4, 0, 3, 3, 1> xwwy, raag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwwz)
    swizzle<T, 4, 0, 3, 3, 2> xwwz, raab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_xwww)
    swizzle<T, 4, 0, 3, 3, 3> xwww, raaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxx)
    swizzle<T, 4, 1, 0, 0, 0> yxxx, grrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxy)
    swizzle<T, 4, 1, 0, 0, 1> yxxy, grrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxz)
    swizzle<T, 4, 1, 0, 0, 2> yxxz, grrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxxw)
    swizzle<T, 4, 1, 0, 0, 3> yxxw, grra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyx)
    swizzle<T, 4, 1, 0, 1, 0> yxyx, grgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyy)
    swizzle<T, 4, 1, 0, 1, 1> yxyy, grgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyz)
    swizzle<T, 4, 1, 0, 1, 2> yxyz, grgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxyw)
    swizzle<T, 4, 1, 0, 1, 3> yxyw, grga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxzx)
    swizzle<T, 4, 1, 0, 2, 0> yxzx, grbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxzy)
    swizzle<T, 4, 1, 0, 2, 1> yxzy, grbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxzz)
    swizzle<T, 4, 1, 0, 2, 2> yxzz, grbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxzw)
    swizzle<T, 4, 1, 0, 2, 3> yxzw, grba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxwx)
    swizzle<T, 4, 1, 0, 3, 0> yxwx, grar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxwy)
    swizzle<T, 4, 1, 0, 3, 1> yxwy, grag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxwz)
    swizzle<T, 4, 1, 0, 3, 2> yxwz, grab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yxww)
    swizzle<T, 4, 1, 0, 3, 3> yxww, graa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxx)
    swizzle<T, 4, 1, 1, 0, 0> yyxx, ggrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxy)
    swizzle<T, 4, 1, 1, 0, 1> yyxy, ggrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxz)
    swizzle<T, 4, 1, 1, 0, 2> yyxz, ggrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyxw)
    swizzle<T, 4, 1, 1, 0, 3> yyxw, ggra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyx)
    swizzle<T, 4, 1, 1, 1, 0> yyyx, gggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyy)
    swizzle<T, 4, 1, 1, 1, 1> yyyy, gggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyz)
    swizzle<T, 4, 1, 1, 1, 2> yyyz, gggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyyw)
    swizzle<T, 4, 1, 1, 1, 3> yyyw, ggga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyzx)
    swizzle<T, 4, 1, 1, 2, 0> yyzx, ggbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyzy)
    swizzle<T, 4, 1, 1, 2, 1> yyzy, ggbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyzz)
    swizzle<T, 4, 1, 1, 2, 2> yyzz, ggbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyzw)
    swizzle<T, 4, 1, 1, 2, 3> yyzw, ggba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yywx)
    swizzle<T, 4, 1, 1, 3, 0> yywx, ggar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yywy)
    swizzle<T, 4, 1, 1, 3, 1> yywy, ggag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yywz)
    swizzle<T, 4, 1, 1, 3, 2> yywz, ggab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yyww)
    swizzle<T, 4, 1, 1, 3, 3> yyww, ggaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzxx)
    swizzle<T, 4, 1, 2, 0, 0> yzxx, gbrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzxy)
    swizzle<T, 4, 1, 2, 0, 1> yzxy, gbrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzxz)
    swizzle<T, 4, 1, 2, 0, 2> yzxz, gbrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzxw)
    swizzle<T, 4, 1, 2, 0, 3> yzxw, gbra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzyx)
    swizzle<T, 4, 1, 2, 1, 0> yzyx, gbgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzyy)
    swizzle<T, 4, 1, 2, 1, 1> yzyy, gbgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzyz)
    swizzle<T, 4, 1, 2, 1, 2> yzyz, gbgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzyw)
    swizzle<T, 4, 1, 2, 1, 3> yzyw, gbga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzzx)
    swizzle<T, 4, 1, 2, 2, 0> yzzx, gbbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzzy)
    swizzle<T, 4, 1, 2, 2, 1> yzzy, gbbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzzz)
    swizzle<T, 4, 1, 2, 2, 2> yzzz, gbbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzzw)
    swizzle<T, 4, 1, 2, 2, 3> yzzw, gbba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzwx)
    swizzle<T, 4, 1, 2, 3, 0> yzwx, gbar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzwy)
    swizzle<T, 4, 1, 2, 3, 1> yzwy, gbag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzwz)
    swizzle<T, 4, 1, 2, 3, 2> yzwz, gbab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_yzww)
    swizzle<T, 4, 1, 2, 3, 3> yzww, gbaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywxx)
    swizzle<T, 4, 1, 3, 0, 0> ywxx, garr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywxy)
    swizzle<T, 4, 1, 3, 0, 1> ywxy, garg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywxz)
    swizzle<T, 4, 1, 3, 0, 2> ywxz, garb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywxw)
    swizzle<T, 4, 1, 3, 0, 3> ywxw, gara;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywyx)
    swizzle<T, 4, 1, 3, 1, 0> ywyx, gagr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywyy)
    swizzle<T, 4, 1, 3, 1, 1> ywyy, gagg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywyz)
    swizzle<T, 4, 1, 3, 1, 2> ywyz, gagb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywyw)
    swizzle<T, 4, 1, 3, 1, 3> ywyw, gaga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywzx)
    swizzle<T, 4, 1, 3, 2, 0> ywzx, gabr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywzy)
    swizzle<T, 4, 1, 3, 2, 1> ywzy, gabg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywzz)
    swizzle<T, 4, 1, 3, 2, 2> ywzz, gabb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywzw)
    swizzle<T, 4, 1, 3, 2, 3> ywzw, gaba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywwx)
    swizzle<T, 4, 1, 3, 3, 0> ywwx, gaar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywwy)
    swizzle<T, 4, 1, 3, 3, 1> ywwy, gaag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywwz)
    swizzle<T, 4, 1, 3, 3, 2> ywwz, gaab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_ywww)
    swizzle<T, 4, 1, 3, 3, 3> ywww, gaaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxxx)
    swizzle<T, 4, 2, 0, 0, 0> zxxx, brrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxxy)
    swizzle<T, 4, 2, 0, 0, 1> zxxy, brrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxxz)
    swizzle<T, 4, 2, 0, 0, 2> zxxz, brrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxxw)
    swizzle<T, 4, 2, 0, 0, 3> zxxw, brra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxyx)
    swizzle<T, 4, 2, 0, 1, 0> zxyx, brgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxyy)
    swizzle<T, 4, 2, 0, 1, 1> zxyy, brgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxyz)
    swizzle<T, 4, 2, 0, 1, 2> zxyz, brgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxyw)
    swizzle<T, 4, 2, 0, 1, 3> zxyw, brga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxzx)
    swizzle<T, 4, 2, 0, 2, 0> zxzx, brbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxzy)
    swizzle<T, 4, 2, 0, 2, 1> zxzy, brbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxzz)
    swizzle<T, 4, 2, 0, 2, 2> zxzz, brbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxzw)
    swizzle<T, 4, 2, 0, 2, 3> zxzw, brba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxwx)
    swizzle<T, 4, 2, 0, 3, 0> zxwx, brar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxwy)
    swizzle<T, 4, 2, 0, 3, 1> zxwy, brag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxwz)
    swizzle<T, 4, 2, 0, 3, 2> zxwz, brab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zxww)
    swizzle<T, 4, 2, 0, 3, 3> zxww, braa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyxx)
    swizzle<T, 4, 2, 1, 0, 0> zyxx, bgrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyxy)
    swizzle<T, 4, 2, 1, 0, 1> zyxy, bgrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyxz)
    swizzle<T, 4, 2, 1, 0, 2> zyxz, bgrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyxw)
    swizzle<T, 4, 2, 1, 0, 3> zyxw, bgra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyyx)
    swizzle<T, 4, 2, 1, 1, 0> zyyx, bggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyyy)
    swizzle<T, 4, 2, 1, 1, 1> zyyy, bggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyyz)
    swizzle<T, 4, 2, 1, 1, 2> zyyz, bggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyyw)
    swizzle<T, 4, 2, 1, 1, 3> zyyw, bgga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyzx)
    swizzle<T, 4, 2, 1, 2, 0> zyzx, bgbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyzy)
    swizzle<T, 4, 2, 1, 2, 1> zyzy, bgbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyzz)
    swizzle<T, 4, 2, 1, 2, 2> zyzz, bgbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyzw)
    swizzle<T, 4, 2, 1, 2, 3> zyzw, bgba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zywx)
    swizzle<T, 4, 2, 1, 3, 0> zywx, bgar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zywy)
    swizzle<T, 4, 2, 1, 3, 1> zywy, bgag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zywz)
    swizzle<T, 4, 2, 1, 3, 2> zywz, bgab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zyww)
    swizzle<T, 4, 2, 1, 3, 3> zyww, bgaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzxx)
    swizzle<T, 4, 2, 2, 0, 0> zzxx, bbrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzxy)
    swizzle<T, 4, 2, 2, 0, 1> zzxy, bbrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzxz)
    swizzle<T, 4, 2, 2, 0, 2> zzxz, bbrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzxw)
    swizzle<T, 4, 2, 2, 0, 3> zzxw, bbra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzyx)
    swizzle<T, 4, 2, 2, 1, 0> zzyx, bbgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzyy)
    swizzle<T, 4, 2, 2, 1, 1> zzyy, bbgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzyz)
    swizzle<T, 4, 2, 2, 1, 2> zzyz, bbgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzyw)
    swizzle<T, 4, 2, 2, 1, 3> zzyw, bbga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzzx)
    swizzle<T, 4, 2, 2, 2, 0> zzzx, bbbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzzy)
    swizzle<T, 4, 2, 2, 2, 1> zzzy, bbbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzzz)
    swizzle<T, 4, 2, 2, 2, 2> zzzz, bbbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzzw)
    swizzle<T, 4, 2, 2, 2, 3> zzzw, bbba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzwx)
    swizzle<T, 4, 2, 2, 3, 0> zzwx, bbar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzwy)
    swizzle<T, 4, 2, 2, 3, 1> zzwy, bbag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzwz)
    swizzle<T, 4, 2, 2, 3, 2> zzwz, bbab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zzww)
    swizzle<T, 4, 2, 2, 3, 3> zzww, bbaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwxx)
    swizzle<T, 4, 2, 3, 0, 0> zwxx, barr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwxy)
    swizzle<T, 4, 2, 3, 0, 1> zwxy, barg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwxz)
    swizzle<T, 4, 2, 3, 0, 2> zwxz, barb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwxw)
    swizzle<T, 4, 2, 3, 0, 3> zwxw, bara;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwyx)
    swizzle<T, 4, 2, 3, 1, 0> zwyx, bagr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwyy)
    swizzle<T, 4, 2, 3, 1, 1> zwyy, bagg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwyz)
    swizzle<T, 4, 2, 3, 1, 2> zwyz, bagb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwyw)
    swizzle<T, 4, 2, 3, 1, 3> zwyw, baga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwzx)
    swizzle<T, 4, 2, 3, 2, 0> zwzx, babr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwzy)
    swizzle<T, 4, 2, 3, 2, 1> zwzy, babg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwzz)
    swizzle<T, 4, 2, 3, 2, 2> zwzz, babb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwzw)
    swizzle<T, 4, 2, 3, 2, 3> zwzw, baba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwwx)
    swizzle<T, 4, 2, 3, 3, 0> zwwx, baar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwwy)
    swizzle<T, 4, 2, 3, 3, 1> zwwy, baag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwwz)
    swizzle<T, 4, 2, 3, 3, 2> zwwz, baab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_zwww)
    swizzle<T, 4, 2, 3, 3, 3> zwww, baaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxxx)
    swizzle<T, 4, 3, 0, 0, 0> wxxx, arrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxxy)
    swizzle<T, 4, 3, 0, 0, 1> wxxy, arrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxxz)
    swizzle<T, 4, 3, 0, 0, 2> wxxz, arrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxxw)
    swizzle<T, 4, 3, 0, 0, 3> wxxw, arra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxyx)
    swizzle<T, 4, 3, 0, 1, 0> wxyx, argr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxyy)
    swizzle<T, 4, 3, 0, 1, 1> wxyy, argg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxyz)
    swizzle<T, 4, 3, 0, 1, 2> wxyz, argb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxyw)
    swizzle<T, 4, 3, 0, 1, 3> wxyw, arga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxzx)
    swizzle<T, 4, 3, 0, 2, 0> wxzx, arbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxzy)
    swizzle<T, 4, 3, 0, 2, 1> wxzy, arbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxzz)
    swizzle<T, 4, 3, 0, 2, 2> wxzz, arbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxzw)
    swizzle<T, 4, 3, 0, 2, 3> wxzw, arba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxwx)
    swizzle<T, 4, 3, 0, 3, 0> wxwx, arar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxwy)
    swizzle<T, 4, 3, 0, 3, 1> wxwy, arag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxwz)
    swizzle<T, 4, 3, 0, 3, 2> wxwz, arab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wxww)
    swizzle<T, 4, 3, 0, 3, 3> wxww, araa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyxx)
    swizzle<T, 4, 3, 1, 0, 0> wyxx, agrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyxy)
    swizzle<T, 4, 3, 1, 0, 1> wyxy, agrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyxz)
    swizzle<T, 4, 3, 1, 0, 2> wyxz, agrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyxw)
    swizzle<T, 4, 3, 1, 0, 3> wyxw, agra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyyx)
    swizzle<T, 4, 3, 1, 1, 0> wyyx, aggr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyyy)
    swizzle<T, 4, 3, 1, 1, 1> wyyy, aggg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyyz)
    swizzle<T, 4, 3, 1, 1, 2> wyyz, aggb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyyw)
    swizzle<T, 4, 3, 1, 1, 3> wyyw, agga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyzx)
    swizzle<T, 4, 3, 1, 2, 0> wyzx, agbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyzy)
    swizzle<T, 4, 3, 1, 2, 1> wyzy, agbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyzz)
    swizzle<T, 4, 3, 1, 2, 2> wyzz, agbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyzw)
    swizzle<T, 4, 3, 1, 2, 3> wyzw, agba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wywx)
    swizzle<T, 4, 3, 1, 3, 0> wywx, agar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wywy)
    swizzle<T, 4, 3, 1, 3, 1> wywy, agag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wywz)
    swizzle<T, 4, 3, 1, 3, 2> wywz, agab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wyww)
    swizzle<T, 4, 3, 1, 3, 3> wyww, agaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzxx)
    swizzle<T, 4, 3, 2, 0, 0> wzxx, abrr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzxy)
    swizzle<T, 4, 3, 2, 0, 1> wzxy, abrg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzxz)
    swizzle<T, 4, 3, 2, 0, 2> wzxz, abrb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzxw)
    swizzle<T, 4, 3, 2, 0, 3> wzxw, abra;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzyx)
    swizzle<T, 4, 3, 2, 1, 0> wzyx, abgr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzyy)
    swizzle<T, 4, 3, 2, 1, 1> wzyy, abgg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzyz)
    swizzle<T, 4, 3, 2, 1, 2> wzyz, abgb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzyw)
    swizzle<T, 4, 3, 2, 1, 3> wzyw, abga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzzx)
    swizzle<T, 4, 3, 2, 2, 0> wzzx, abbr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzzy)
    swizzle<T, 4, 3, 2, 2, 1> wzzy, abbg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzzz)
    swizzle<T, 4, 3, 2, 2, 2> wzzz, abbb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzzw)
    swizzle<T, 4, 3, 2, 2, 3> wzzw, abba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzwx)
    swizzle<T, 4, 3, 2, 3, 0> wzwx, abar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzwy)
    swizzle<T, 4, 3, 2, 3, 1> wzwy, abag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzwz)
    swizzle<T, 4, 3, 2, 3, 2> wzwz, abab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wzww)
    swizzle<T, 4, 3, 2, 3, 3> wzww, abaa;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwxx)
    swizzle<T, 4, 3, 3, 0, 0> wwxx, aarr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwxy)
    swizzle<T, 4, 3, 3, 0, 1> wwxy, aarg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwxz)
    swizzle<T, 4, 3, 3, 0, 2> wwxz, aarb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwxw)
    swizzle<T, 4, 3, 3, 0, 3> wwxw, aara;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwyx)
    swizzle<T, 4, 3, 3, 1, 0> wwyx, aagr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwyy)
    swizzle<T, 4, 3, 3, 1, 1> wwyy, aagg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwyz)
    swizzle<T, 4, 3, 3, 1, 2> wwyz, aagb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwyw)
    swizzle<T, 4, 3, 3, 1, 3> wwyw, aaga;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwzx)
    swizzle<T, 4, 3, 3, 2, 0> wwzx, aabr;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwzy)
    swizzle<T, 4, 3, 3, 2, 1> wwzy, aabg;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwzz)
    swizzle<T, 4, 3, 3, 2, 2> wwzz, aabb;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwzw)
    swizzle<T, 4, 3, 3, 2, 3> wwzw, aaba;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwwx)
    swizzle<T, 4, 3, 3, 3, 0> wwwx, aaar;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwwy)
    swizzle<T, 4, 3, 3, 3, 1> wwwy, aaag;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwwz)
    swizzle<T, 4, 3, 3, 3, 2> wwwz, aaab;
#endif
#if defined(ALLOY_SWIZZLES_ALL) || defined(ALLOY_SWIZZLE_wwww)
    swizzle<T, 4, 3, 3, 3, 3> wwww, aaaa;
#endif
#endif  // ALLOY_SWIZZLES_4
  };
  vec_storage() = default;
  ALLOY_FN constexpr vec_storage(const elems<T, 4>& a) : alloy_e{a.v[0], a.v[1], a.v[2], a.v[3]} {}
};

template <class T, int N, class V>
ALLOY_FN constexpr elems<T, N> convert(const V& o) {
  elems<T, N> r{};
  for (int i = 0; i < N; ++i) r.v[i] = static_cast<T>(o.alloy_get(i));
  return r;
}

}  // namespace alloy_detail

template <class T, int N>
struct vec : alloy_detail::vec_storage<T, N> {
  static_assert(N >= 2 && N <= 4, "Metal vectors have 2, 3 or 4 components");
  typedef T value_type;
  enum : int { alloy_n = N };
  typedef alloy_detail::vec_storage<T, N> alloy_base;

  vec() = default;
  vec(const vec&) = default;
  // The union's swizzle members have their own assignment, so this one is written out.
  ALLOY_FN vec& operator=(const vec& o) {
    for (int i = 0; i < N; ++i) this->alloy_e[i] = o.alloy_e[i];
    return *this;
  }

#ifdef ALLOY_NEED_VECTOR
  // float4(x): every component x (also the implicit scalar-to-vector conversion).
  template <class U, enable_if_t<alloy_detail::is_scalar_arith_c<U>::value(), int> = 0>
  ALLOY_FN constexpr vec(U s) : alloy_base(alloy_detail::splat<T, N>(static_cast<T>(s))) {}
  // float4(a, b, c, d), float4(v.xy, w.zw), float3(v2, s), ...: components in order.
  template <class A0, class A1, class... As,
            enable_if_t<alloy_detail::count_comps<A0>() + alloy_detail::count_comps<A1>() +
                                (0 + ... + alloy_detail::count_comps<As>()) ==
                            N,
                        int> = 0>
  ALLOY_FN constexpr vec(const A0& a0, const A1& a1, const As&... as)
      : alloy_base(alloy_detail::flatten<T, N>(a0, a1, as...)) {}
  // `uint4 ks = {a, b, c}`: fewer scalars than components; Metal sets the others to 0.
  template <class... S, enable_if_t<(sizeof...(S) >= 2 && sizeof...(S) < N) &&
                                        (alloy_detail::is_scalar_arith_c<S>::value() && ...),
                                    int> = 0>
  ALLOY_FN constexpr vec(const S&... s) : alloy_base(alloy_detail::splat<T, N>(T(0))) {
    const T given[] = {static_cast<T>(s)...};
    for (int i = 0; i < int(sizeof...(S)); ++i) this->alloy_e[i] = given[i];
  }
  // float4(int4), static_cast<half2>(float2), short2(i4.xy): element-wise conversion.
  template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value() &&
                                     alloy_detail::vec_n_c<V>::value() == N &&
                                     !is_same<alloy_detail::vec_elem_t<V>, T>::value,
                                 int> = 0>
  ALLOY_FN constexpr explicit vec(const V& o) : alloy_base(alloy_detail::convert<T, N>(o)) {}

#endif  // ALLOY_NEED_VECTOR
  ALLOY_FN constexpr T alloy_get(int i) const { return this->alloy_e[i]; }
  ALLOY_FN T& operator[](int i) { return this->alloy_e[i]; }
  ALLOY_FN constexpr const T& operator[](int i) const { return this->alloy_e[i]; }
#ifdef ALLOY_NEED_VECTOR
  template <int... J>
  ALLOY_FN auto alloy_swizzle() const {
    return alloy_detail::sub_swizzle<T, vec, J...>(*this);
  }

  template <class V>
  ALLOY_FN vec& operator+=(const V& v) {
    return *this = vec(*this + v);
  }
  template <class V>
  ALLOY_FN vec& operator-=(const V& v) {
    return *this = vec(*this - v);
  }
  template <class V>
  ALLOY_FN vec& operator*=(const V& v) {
    return *this = vec(*this * v);
  }
  template <class V>
  ALLOY_FN vec& operator/=(const V& v) {
    return *this = vec(*this / v);
  }
  template <class V>
  ALLOY_FN vec& operator%=(const V& v) {
    return *this = vec(*this % v);
  }
  template <class V>
  ALLOY_FN vec& operator&=(const V& v) {
    return *this = vec(*this & v);
  }
  template <class V>
  ALLOY_FN vec& operator|=(const V& v) {
    return *this = vec(*this | v);
  }
  template <class V>
  ALLOY_FN vec& operator^=(const V& v) {
    return *this = vec(*this ^ v);
  }
  template <class V>
  ALLOY_FN vec& operator<<=(const V& v) {
    return *this = vec(*this << v);
  }
  template <class V>
  ALLOY_FN vec& operator>>=(const V& v) {
    return *this = vec(*this >> v);
  }
  ALLOY_FN vec& operator++() { return *this += T(1); }
  ALLOY_FN vec& operator--() { return *this -= T(1); }
  ALLOY_FN vec operator++(int) {
    vec r = *this;
    *this += T(1);
    return r;
  }
  ALLOY_FN vec operator--(int) {
    vec r = *this;
    *this -= T(1);
    return r;
  }
#endif  // ALLOY_NEED_VECTOR
};

// ---- Element-wise operators ----

namespace alloy_detail {
template <class X>
struct is_vec_operand_c {
  ALLOY_FN static constexpr bool value() {
    return is_vecish_c<X>::value() || is_scalar_arith_c<X>::value();
  }
};

template <class A, class B>
ALLOY_FN constexpr bool vec_operands_ok() {
  if constexpr (!(is_vecish_c<A>::value() || is_vecish_c<B>::value()) ||
                !is_vec_operand_c<A>::value() || !is_vec_operand_c<B>::value())
    return false;
  else if constexpr (is_vecish_c<A>::value() && is_vecish_c<B>::value())
    return vec_n_c<A>::value() == vec_n_c<B>::value();
  else
    return true;
}

// Vector with scalar: the scalar is converted to the element type (Metal/OpenCL rule). Two
// vectors: their common element type.
template <class A, class B, bool = vec_operands_ok<A, B>()>
struct vec_arith {};
template <class A, class B>
struct vec_arith<A, B, true> {
  typedef conditional_t<is_vecish_c<A>::value() && is_vecish_c<B>::value(),
                        promote2_t<vec_elem_t<A>, vec_elem_t<B>>,
                        conditional_t<is_vecish_c<A>::value(), vec_elem_t<A>, vec_elem_t<B>>>
      elem;
  enum : int { n = is_vecish_c<A>::value() ? vec_n_c<A>::value() : vec_n_c<B>::value() };
  typedef vec<elem, n> type;
  typedef vec<bool, n> bool_type;
};
template <class A, class B>
using vec_arith_t = typename vec_arith<A, B>::type;
template <class A, class B>
using vec_cmp_t = typename vec_arith<A, B>::bool_type;
template <class V>
using vec_unary_t = enable_if_t<is_vecish_c<V>::value(), vec_of_t<V>>;
template <class V>
using vec_bool_t = enable_if_t<is_vecish_c<V>::value(), vec<bool, vec_n_c<V>::value()>>;
}  // namespace alloy_detail

#ifdef ALLOY_NEED_VECTOR
#define ALLOY_VEC_BINOP(op)                                                           \
  template <class A, class B, class R = alloy_detail::vec_arith_t<A, B>>              \
  ALLOY_FN R operator op(const A& a, const B& b) {                                    \
    typedef typename R::value_type E;                                                 \
    R r;                                                                              \
    for (int i = 0; i < R::alloy_n; ++i)                                              \
      r.alloy_e[i] = static_cast<E>(static_cast<E>(alloy_detail::comp(a, i))          \
                                        op static_cast<E>(alloy_detail::comp(b, i))); \
    return r;                                                                         \
  }
ALLOY_VEC_BINOP(+)
ALLOY_VEC_BINOP(-)
ALLOY_VEC_BINOP(*)
ALLOY_VEC_BINOP(/)
ALLOY_VEC_BINOP(%)
ALLOY_VEC_BINOP(&)
ALLOY_VEC_BINOP(|)
ALLOY_VEC_BINOP(^)
ALLOY_VEC_BINOP(<<)
ALLOY_VEC_BINOP(>>)
#undef ALLOY_VEC_BINOP

#define ALLOY_VEC_CMP(op)                                                                       \
  template <class A, class B, class R = alloy_detail::vec_cmp_t<A, B>>                          \
  ALLOY_FN R operator op(const A& a, const B& b) {                                              \
    typedef typename alloy_detail::vec_arith<A, B>::elem E;                                     \
    R r;                                                                                        \
    for (int i = 0; i < R::alloy_n; ++i)                                                        \
      r.alloy_e[i] =                                                                            \
          static_cast<E>(alloy_detail::comp(a, i)) op static_cast<E>(alloy_detail::comp(b, i)); \
    return r;                                                                                   \
  }
ALLOY_VEC_CMP(==)
ALLOY_VEC_CMP(!=)
ALLOY_VEC_CMP(<)
ALLOY_VEC_CMP(<=)
ALLOY_VEC_CMP(>)
ALLOY_VEC_CMP(>=)
ALLOY_VEC_CMP(&&)
ALLOY_VEC_CMP(||)
#undef ALLOY_VEC_CMP

template <class V, class R = alloy_detail::vec_unary_t<V>>
ALLOY_FN R operator-(const V& v) {
  R r;
  for (int i = 0; i < R::alloy_n; ++i)
    r.alloy_e[i] = static_cast<typename R::value_type>(-v.alloy_get(i));
  return r;
}
template <class V, class R = alloy_detail::vec_unary_t<V>>
ALLOY_FN R operator+(const V& v) {
  return R(v);
}
template <class V, class R = alloy_detail::vec_unary_t<V>>
ALLOY_FN R operator~(const V& v) {
  R r;
  for (int i = 0; i < R::alloy_n; ++i)
    r.alloy_e[i] = static_cast<typename R::value_type>(~v.alloy_get(i));
  return r;
}
template <class V, class R = alloy_detail::vec_bool_t<V>>
ALLOY_FN R operator!(const V& v) {
  R r;
  for (int i = 0; i < R::alloy_n; ++i) r.alloy_e[i] = !v.alloy_get(i);
  return r;
}

#endif  // ALLOY_NEED_VECTOR

// ---- Relational functions on vectors (all, any, select) ----

ALLOY_FN constexpr bool all(bool b) {
  return b;
}
ALLOY_FN constexpr bool any(bool b) {
  return b;
}
#ifdef ALLOY_NEED_VECTOR
template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0>
ALLOY_FN bool all(const V& v) {
  for (int i = 0; i < alloy_detail::vec_n_c<V>::value(); ++i)
    if (!v.alloy_get(i)) return false;
  return true;
}
template <class V, enable_if_t<alloy_detail::is_vecish_c<V>::value(), int> = 0>
ALLOY_FN bool any(const V& v) {
  for (int i = 0; i < alloy_detail::vec_n_c<V>::value(); ++i)
    if (v.alloy_get(i)) return true;
  return false;
}
#endif  // ALLOY_NEED_VECTOR
// select(a, b, c): c ? b : a, per component.
template <class T,
          enable_if_t<alloy_detail::is_scalar_arith_c<T>::value() || is_pointer_v<T>, int> = 0>
ALLOY_FN T select(T a, T b, bool c) {
  return c ? b : a;
}
#ifdef ALLOY_NEED_VECTOR
template <
    class A, class B, class C,
    enable_if_t<alloy_detail::is_vecish_c<A>::value() && alloy_detail::is_vecish_c<C>::value(),
                int> = 0>
ALLOY_FN alloy_detail::vec_of_t<A> select(const A& a, const B& b, const C& c) {
  alloy_detail::vec_of_t<A> r;
  for (int i = 0; i < alloy_detail::vec_n_c<A>::value(); ++i)
    r.alloy_e[i] = alloy_detail::comp(c, i)
                       ? static_cast<alloy_detail::vec_elem_t<A>>(alloy_detail::comp(b, i))
                       : a.alloy_get(i);
  return r;
}

#endif  // ALLOY_NEED_VECTOR

// ---- Packed vectors: packed_float3 etc., N elements with no padding (alignment of T) ----

template <class T, int N>
struct packed_vec;
// Defined only when a translation names a packed type (ALLOY_NEED_PACKED, metal_stdlib.h).
#ifdef ALLOY_NEED_PACKED
namespace alloy_detail {
template <class T, int N>
struct packed_storage;
template <class T>
struct packed_storage<T, 2> {
  union {
    T alloy_e[2];
    struct {
      T x, y;
    };
    struct {
      T r, g;
    };
  };
};
template <class T>
struct packed_storage<T, 3> {
  union {
    T alloy_e[3];
    struct {
      T x, y, z;
    };
    struct {
      T r, g, b;
    };
  };
};
template <class T>
struct packed_storage<T, 4> {
  union {
    T alloy_e[4];
    struct {
      T x, y, z, w;
    };
    struct {
      T r, g, b, a;
    };
  };
};
template <class T, int N>
struct vec_traits<packed_vec<T, N>> {
  enum : bool { is_vec = true };
  enum : int { n = N };
  typedef T elem;
  typedef vec<T, N> type;
};
}  // namespace alloy_detail

// Converts to and from vec<T, N> implicitly (Metal: packed and aligned vectors assign both
// ways); every vector operator and function accepts it and returns aligned vectors.
template <class T, int N>
struct packed_vec : alloy_detail::packed_storage<T, N> {
  typedef T value_type;
  enum : int { alloy_n = N };
  packed_vec() = default;
  template <class U, enable_if_t<alloy_detail::is_scalar_arith_c<U>::value(), int> = 0>
  ALLOY_FN packed_vec(U s) {
    for (int i = 0; i < N; ++i) this->alloy_e[i] = static_cast<T>(s);
  }
  template <class A0, class A1, class... As,
            enable_if_t<alloy_detail::count_comps<A0>() + alloy_detail::count_comps<A1>() +
                                (0 + ... + alloy_detail::count_comps<As>()) ==
                            N,
                        int> = 0>
  ALLOY_FN packed_vec(const A0& a0, const A1& a1, const As&... as) {
    *this = vec<T, N>(a0, a1, as...);
  }
  ALLOY_FN packed_vec(const vec<T, N>& v) {
    for (int i = 0; i < N; ++i) this->alloy_e[i] = v.alloy_e[i];
  }
  ALLOY_FN operator vec<T, N>() const {
    vec<T, N> r;
    for (int i = 0; i < N; ++i) r.alloy_e[i] = this->alloy_e[i];
    return r;
  }
  ALLOY_FN T alloy_get(int i) const { return this->alloy_e[i]; }
  ALLOY_FN T& operator[](int i) { return this->alloy_e[i]; }
  ALLOY_FN const T& operator[](int i) const { return this->alloy_e[i]; }
  template <int... J>
  ALLOY_FN auto alloy_swizzle() const {
    return alloy_detail::sub_swizzle<T, packed_vec, J...>(*this);
  }
  template <class V>
  ALLOY_FN packed_vec& operator+=(const V& v) {
    return *this = vec<T, N>(*this + v);
  }
  template <class V>
  ALLOY_FN packed_vec& operator-=(const V& v) {
    return *this = vec<T, N>(*this - v);
  }
  template <class V>
  ALLOY_FN packed_vec& operator*=(const V& v) {
    return *this = vec<T, N>(*this * v);
  }
  template <class V>
  ALLOY_FN packed_vec& operator/=(const V& v) {
    return *this = vec<T, N>(*this / v);
  }
};
#endif  // ALLOY_NEED_PACKED

#ifdef ALLOY_NEED_VECTOR
// as_type of a swizzle reinterprets the vector it reads.
template <class To, class T, int N, int... I>
ALLOY_FN To as_type(const alloy_detail::swizzle<T, N, I...>& s) {
  return as_type<To>(vec<T, sizeof...(I)>(s));
}

#endif  // ALLOY_NEED_VECTOR

// ---- Names ----

#define ALLOY_VEC_NAMES(T, name)             \
  typedef vec<T, 2> name##2;                 \
  typedef vec<T, 3> name##3;                 \
  typedef vec<T, 4> name##4;                 \
  typedef packed_vec<T, 2> packed_##name##2; \
  typedef packed_vec<T, 3> packed_##name##3; \
  typedef packed_vec<T, 4> packed_##name##4;
ALLOY_VEC_NAMES(bool, bool)
ALLOY_VEC_NAMES(char, char)
ALLOY_VEC_NAMES(unsigned char, uchar)
ALLOY_VEC_NAMES(short, short)
ALLOY_VEC_NAMES(unsigned short, ushort)
ALLOY_VEC_NAMES(int, int)
ALLOY_VEC_NAMES(unsigned int, uint)
ALLOY_VEC_NAMES(long, long)
ALLOY_VEC_NAMES(unsigned long, ulong)
ALLOY_VEC_NAMES(half, half)
ALLOY_VEC_NAMES(bfloat, bfloat)
ALLOY_VEC_NAMES(float, float)
#undef ALLOY_VEC_NAMES

}  // namespace metal
