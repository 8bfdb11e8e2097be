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
  static constexpr bool is_vec = false;
  static constexpr int n = 1;
  typedef X elem;
  typedef X type;
};
template <class T, int N>
struct vec_traits<vec<T, N>> {
  static constexpr bool is_vec = true;
  static constexpr int n = N;
  typedef T elem;
  typedef vec<T, N> type;
};
template <class T, int N, int... I>
struct vec_traits<swizzle<T, N, I...>> {
  static constexpr bool is_vec = true;
  static constexpr int n = sizeof...(I);
  typedef T elem;
  typedef vec<T, sizeof...(I)> type;
};
template <class X>
inline constexpr bool is_vecish = vec_traits<remove_cvref_t<X>>::is_vec;
template <class X>
using vec_elem_t = typename vec_traits<remove_cvref_t<X>>::elem;
template <class X>
using vec_of_t = typename vec_traits<remove_cvref_t<X>>::type;
template <class X>
inline constexpr int vec_n = vec_traits<remove_cvref_t<X>>::n;

// Component i of a vector or swizzle; a scalar stands for all its components.
template <class X>
ALLOY_FN constexpr auto comp(const X& x, int i) {
  if constexpr (is_vecish<X>)
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

template <class X>
ALLOY_FN constexpr int count_comps() {
  if constexpr (is_vecish<X>)
    return vec_n<X>;
  else if constexpr (is_scalar_arith<X>)
    return 1;
  else
    return 1000;  // not a vector constructor argument
}

template <class T, class A>
ALLOY_FN constexpr void flatten_one(T* out, int& k, const A& a) {
  if constexpr (is_vecish<A>) {
    for (int i = 0; i < vec_n<A>; ++i) out[k++] = static_cast<T>(a.alloy_get(i));
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
  static constexpr int K = sizeof...(I);
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
    static_assert(!is_vecish<V> || vec_n<V> == K, "swizzle assignment: sizes differ");
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

template <class T, int N>
struct vec_storage;

// The member lists below are generated: every 2-, 3- and 4-letter swizzle over the components,
// one declaration naming its xyzw and rgba spellings.
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
    swizzle<T, 2, 0, 0> xx, rr;
    swizzle<T, 2, 0, 1> xy, rg;
    swizzle<T, 2, 1, 0> yx, gr;
    swizzle<T, 2, 1, 1> yy, gg;
    swizzle<T, 2, 0, 0, 0> xxx, rrr;
    swizzle<T, 2, 0, 0, 1> xxy, rrg;
    swizzle<T, 2, 0, 1, 0> xyx, rgr;
    swizzle<T, 2, 0, 1, 1> xyy, rgg;
    swizzle<T, 2, 1, 0, 0> yxx, grr;
    swizzle<T, 2, 1, 0, 1> yxy, grg;
    swizzle<T, 2, 1, 1, 0> yyx, ggr;
    swizzle<T, 2, 1, 1, 1> yyy, ggg;
    swizzle<T, 2, 0, 0, 0, 0> xxxx, rrrr;
    swizzle<T, 2, 0, 0, 0, 1> xxxy, rrrg;
    swizzle<T, 2, 0, 0, 1, 0> xxyx, rrgr;
    swizzle<T, 2, 0, 0, 1, 1> xxyy, rrgg;
    swizzle<T, 2, 0, 1, 0, 0> xyxx, rgrr;
    swizzle<T, 2, 0, 1, 0, 1> xyxy, rgrg;
    swizzle<T, 2, 0, 1, 1, 0> xyyx, rggr;
    swizzle<T, 2, 0, 1, 1, 1> xyyy, rggg;
    swizzle<T, 2, 1, 0, 0, 0> yxxx, grrr;
    swizzle<T, 2, 1, 0, 0, 1> yxxy, grrg;
    swizzle<T, 2, 1, 0, 1, 0> yxyx, grgr;
    swizzle<T, 2, 1, 0, 1, 1> yxyy, grgg;
    swizzle<T, 2, 1, 1, 0, 0> yyxx, ggrr;
    swizzle<T, 2, 1, 1, 0, 1> yyxy, ggrg;
    swizzle<T, 2, 1, 1, 1, 0> yyyx, gggr;
    swizzle<T, 2, 1, 1, 1, 1> yyyy, gggg;
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
    swizzle<T, 3, 0, 0> xx, rr;
    swizzle<T, 3, 0, 1> xy, rg;
    swizzle<T, 3, 0, 2> xz, rb;
    swizzle<T, 3, 1, 0> yx, gr;
    swizzle<T, 3, 1, 1> yy, gg;
    swizzle<T, 3, 1, 2> yz, gb;
    swizzle<T, 3, 2, 0> zx, br;
    swizzle<T, 3, 2, 1> zy, bg;
    swizzle<T, 3, 2, 2> zz, bb;
    swizzle<T, 3, 0, 0, 0> xxx, rrr;
    swizzle<T, 3, 0, 0, 1> xxy, rrg;
    swizzle<T, 3, 0, 0, 2> xxz, rrb;
    swizzle<T, 3, 0, 1, 0> xyx, rgr;
    swizzle<T, 3, 0, 1, 1> xyy, rgg;
    swizzle<T, 3, 0, 1, 2> xyz, rgb;
    swizzle<T, 3, 0, 2, 0> xzx, rbr;
    swizzle<T, 3, 0, 2, 1> xzy, rbg;
    swizzle<T, 3, 0, 2, 2> xzz, rbb;
    swizzle<T, 3, 1, 0, 0> yxx, grr;
    swizzle<T, 3, 1, 0, 1> yxy, grg;
    swizzle<T, 3, 1, 0, 2> yxz, grb;
    swizzle<T, 3, 1, 1, 0> yyx, ggr;
    swizzle<T, 3, 1, 1, 1> yyy, ggg;
    swizzle<T, 3, 1, 1, 2> yyz, ggb;
    swizzle<T, 3, 1, 2, 0> yzx, gbr;
    swizzle<T, 3, 1, 2, 1> yzy, gbg;
    swizzle<T, 3, 1, 2, 2> yzz, gbb;
    swizzle<T, 3, 2, 0, 0> zxx, brr;
    swizzle<T, 3, 2, 0, 1> zxy, brg;
    swizzle<T, 3, 2, 0, 2> zxz, brb;
    swizzle<T, 3, 2, 1, 0> zyx, bgr;
    swizzle<T, 3, 2, 1, 1> zyy, bgg;
    swizzle<T, 3, 2, 1, 2> zyz, bgb;
    swizzle<T, 3, 2, 2, 0> zzx, bbr;
    swizzle<T, 3, 2, 2, 1> zzy, bbg;
    swizzle<T, 3, 2, 2, 2> zzz, bbb;
    swizzle<T, 3, 0, 0, 0, 0> xxxx, rrrr;
    swizzle<T, 3, 0, 0, 0, 1> xxxy, rrrg;
    swizzle<T, 3, 0, 0, 0, 2> xxxz, rrrb;
    swizzle<T, 3, 0, 0, 1, 0> xxyx, rrgr;
    swizzle<T, 3, 0, 0, 1, 1> xxyy, rrgg;
    swizzle<T, 3, 0, 0, 1, 2> xxyz, rrgb;
    swizzle<T, 3, 0, 0, 2, 0> xxzx, rrbr;
    swizzle<T, 3, 0, 0, 2, 1> xxzy, rrbg;
    swizzle<T, 3, 0, 0, 2, 2> xxzz, rrbb;
    swizzle<T, 3, 0, 1, 0, 0> xyxx, rgrr;
    swizzle<T, 3, 0, 1, 0, 1> xyxy, rgrg;
    swizzle<T, 3, 0, 1, 0, 2> xyxz, rgrb;
    swizzle<T, 3, 0, 1, 1, 0> xyyx, rggr;
    swizzle<T, 3, 0, 1, 1, 1> xyyy, rggg;
    swizzle<T, 3, 0, 1, 1, 2> xyyz, rggb;
    swizzle<T, 3, 0, 1, 2, 0> xyzx, rgbr;
    swizzle<T, 3, 0, 1, 2, 1> xyzy, rgbg;
    swizzle<T, 3, 0, 1, 2, 2> xyzz, rgbb;
    swizzle<T, 3, 0, 2, 0, 0> xzxx, rbrr;
    swizzle<T, 3, 0, 2, 0, 1> xzxy, rbrg;
    swizzle<T, 3, 0, 2, 0, 2> xzxz, rbrb;
    swizzle<T, 3, 0, 2, 1, 0> xzyx, rbgr;
    swizzle<T, 3, 0, 2, 1, 1> xzyy, rbgg;
    swizzle<T, 3, 0, 2, 1, 2> xzyz, rbgb;
    swizzle<T, 3, 0, 2, 2, 0> xzzx, rbbr;
    swizzle<T, 3, 0, 2, 2, 1> xzzy, rbbg;
    swizzle<T, 3, 0, 2, 2, 2> xzzz, rbbb;
    swizzle<T, 3, 1, 0, 0, 0> yxxx, grrr;
    swizzle<T, 3, 1, 0, 0, 1> yxxy, grrg;
    swizzle<T, 3, 1, 0, 0, 2> yxxz, grrb;
    swizzle<T, 3, 1, 0, 1, 0> yxyx, grgr;
    swizzle<T, 3, 1, 0, 1, 1> yxyy, grgg;
    swizzle<T, 3, 1, 0, 1, 2> yxyz, grgb;
    swizzle<T, 3, 1, 0, 2, 0> yxzx, grbr;
    swizzle<T, 3, 1, 0, 2, 1> yxzy, grbg;
    swizzle<T, 3, 1, 0, 2, 2> yxzz, grbb;
    swizzle<T, 3, 1, 1, 0, 0> yyxx, ggrr;
    swizzle<T, 3, 1, 1, 0, 1> yyxy, ggrg;
    swizzle<T, 3, 1, 1, 0, 2> yyxz, ggrb;
    swizzle<T, 3, 1, 1, 1, 0> yyyx, gggr;
    swizzle<T, 3, 1, 1, 1, 1> yyyy, gggg;
    swizzle<T, 3, 1, 1, 1, 2> yyyz, gggb;
    swizzle<T, 3, 1, 1, 2, 0> yyzx, ggbr;
    swizzle<T, 3, 1, 1, 2, 1> yyzy, ggbg;
    swizzle<T, 3, 1, 1, 2, 2> yyzz, ggbb;
    swizzle<T, 3, 1, 2, 0, 0> yzxx, gbrr;
    swizzle<T, 3, 1, 2, 0, 1> yzxy, gbrg;
    swizzle<T, 3, 1, 2, 0, 2> yzxz, gbrb;
    swizzle<T, 3, 1, 2, 1, 0> yzyx, gbgr;
    swizzle<T, 3, 1, 2, 1, 1> yzyy, gbgg;
    swizzle<T, 3, 1, 2, 1, 2> yzyz, gbgb;
    swizzle<T, 3, 1, 2, 2, 0> yzzx, gbbr;
    swizzle<T, 3, 1, 2, 2, 1> yzzy, gbbg;
    swizzle<T, 3, 1, 2, 2, 2> yzzz, gbbb;
    swizzle<T, 3, 2, 0, 0, 0> zxxx, brrr;
    swizzle<T, 3, 2, 0, 0, 1> zxxy, brrg;
    swizzle<T, 3, 2, 0, 0, 2> zxxz, brrb;
    swizzle<T, 3, 2, 0, 1, 0> zxyx, brgr;
    swizzle<T, 3, 2, 0, 1, 1> zxyy, brgg;
    swizzle<T, 3, 2, 0, 1, 2> zxyz, brgb;
    swizzle<T, 3, 2, 0, 2, 0> zxzx, brbr;
    swizzle<T, 3, 2, 0, 2, 1> zxzy, brbg;
    swizzle<T, 3, 2, 0, 2, 2> zxzz, brbb;
    swizzle<T, 3, 2, 1, 0, 0> zyxx, bgrr;
    swizzle<T, 3, 2, 1, 0, 1> zyxy, bgrg;
    swizzle<T, 3, 2, 1, 0, 2> zyxz, bgrb;
    swizzle<T, 3, 2, 1, 1, 0> zyyx, bggr;
    swizzle<T, 3, 2, 1, 1, 1> zyyy, bggg;
    swizzle<T, 3, 2, 1, 1, 2> zyyz, bggb;
    swizzle<T, 3, 2, 1, 2, 0> zyzx, bgbr;
    swizzle<T, 3, 2, 1, 2, 1> zyzy, bgbg;
    swizzle<T, 3, 2, 1, 2, 2> zyzz, bgbb;
    swizzle<T, 3, 2, 2, 0, 0> zzxx, bbrr;
    swizzle<T, 3, 2, 2, 0, 1> zzxy, bbrg;
    swizzle<T, 3, 2, 2, 0, 2> zzxz, bbrb;
    swizzle<T, 3, 2, 2, 1, 0> zzyx, bbgr;
    swizzle<T, 3, 2, 2, 1, 1> zzyy, bbgg;
    swizzle<T, 3, 2, 2, 1, 2> zzyz, bbgb;
    swizzle<T, 3, 2, 2, 2, 0> zzzx, bbbr;
    swizzle<T, 3, 2, 2, 2, 1> zzzy, bbbg;
    swizzle<T, 3, 2, 2, 2, 2> zzzz, bbbb;
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
    swizzle<T, 4, 0, 0> xx, rr;
    swizzle<T, 4, 0, 1> xy, rg;
    swizzle<T, 4, 0, 2> xz, rb;
    swizzle<T, 4, 0, 3> xw, ra;
    swizzle<T, 4, 1, 0> yx, gr;
    swizzle<T, 4, 1, 1> yy, gg;
    swizzle<T, 4, 1, 2> yz, gb;
    swizzle<T, 4, 1, 3> yw, ga;
    swizzle<T, 4, 2, 0> zx, br;
    swizzle<T, 4, 2, 1> zy, bg;
    swizzle<T, 4, 2, 2> zz, bb;
    swizzle<T, 4, 2, 3> zw, ba;
    swizzle<T, 4, 3, 0> wx, ar;
    swizzle<T, 4, 3, 1> wy, ag;
    swizzle<T, 4, 3, 2> wz, ab;
    swizzle<T, 4, 3, 3> ww, aa;
    swizzle<T, 4, 0, 0, 0> xxx, rrr;
    swizzle<T, 4, 0, 0, 1> xxy, rrg;
    swizzle<T, 4, 0, 0, 2> xxz, rrb;
    swizzle<T, 4, 0, 0, 3> xxw, rra;
    swizzle<T, 4, 0, 1, 0> xyx, rgr;
    swizzle<T, 4, 0, 1, 1> xyy, rgg;
    swizzle<T, 4, 0, 1, 2> xyz, rgb;
    swizzle<T, 4, 0, 1, 3> xyw, rga;
    swizzle<T, 4, 0, 2, 0> xzx, rbr;
    swizzle<T, 4, 0, 2, 1> xzy, rbg;
    swizzle<T, 4, 0, 2, 2> xzz, rbb;
    swizzle<T, 4, 0, 2, 3> xzw, rba;
    swizzle<T, 4, 0, 3, 0> xwx, rar;
    swizzle<T, 4, 0, 3, 1> xwy, rag;
    swizzle<T, 4, 0, 3, 2> xwz, rab;
    swizzle<T, 4, 0, 3, 3> xww, raa;
    swizzle<T, 4, 1, 0, 0> yxx, grr;
    swizzle<T, 4, 1, 0, 1> yxy, grg;
    swizzle<T, 4, 1, 0, 2> yxz, grb;
    swizzle<T, 4, 1, 0, 3> yxw, gra;
    swizzle<T, 4, 1, 1, 0> yyx, ggr;
    swizzle<T, 4, 1, 1, 1> yyy, ggg;
    swizzle<T, 4, 1, 1, 2> yyz, ggb;
    swizzle<T, 4, 1, 1, 3> yyw, gga;
    swizzle<T, 4, 1, 2, 0> yzx, gbr;
    swizzle<T, 4, 1, 2, 1> yzy, gbg;
    swizzle<T, 4, 1, 2, 2> yzz, gbb;
    swizzle<T, 4, 1, 2, 3> yzw, gba;
    swizzle<T, 4, 1, 3, 0> ywx, gar;
    swizzle<T, 4, 1, 3, 1> ywy, gag;
    swizzle<T, 4, 1, 3, 2> ywz, gab;
    swizzle<T, 4, 1, 3, 3> yww, gaa;
    swizzle<T, 4, 2, 0, 0> zxx, brr;
    swizzle<T, 4, 2, 0, 1> zxy, brg;
    swizzle<T, 4, 2, 0, 2> zxz, brb;
    swizzle<T, 4, 2, 0, 3> zxw, bra;
    swizzle<T, 4, 2, 1, 0> zyx, bgr;
    swizzle<T, 4, 2, 1, 1> zyy, bgg;
    swizzle<T, 4, 2, 1, 2> zyz, bgb;
    swizzle<T, 4, 2, 1, 3> zyw, bga;
    swizzle<T, 4, 2, 2, 0> zzx, bbr;
    swizzle<T, 4, 2, 2, 1> zzy, bbg;
    swizzle<T, 4, 2, 2, 2> zzz, bbb;
    swizzle<T, 4, 2, 2, 3> zzw, bba;
    swizzle<T, 4, 2, 3, 0> zwx, bar;
    swizzle<T, 4, 2, 3, 1> zwy, bag;
    swizzle<T, 4, 2, 3, 2> zwz, bab;
    swizzle<T, 4, 2, 3, 3> zww, baa;
    swizzle<T, 4, 3, 0, 0> wxx, arr;
    swizzle<T, 4, 3, 0, 1> wxy, arg;
    swizzle<T, 4, 3, 0, 2> wxz, arb;
    swizzle<T, 4, 3, 0, 3> wxw, ara;
    swizzle<T, 4, 3, 1, 0> wyx, agr;
    swizzle<T, 4, 3, 1, 1> wyy, agg;
    swizzle<T, 4, 3, 1, 2> wyz, agb;
    swizzle<T, 4, 3, 1, 3> wyw, aga;
    swizzle<T, 4, 3, 2, 0> wzx, abr;
    swizzle<T, 4, 3, 2, 1> wzy, abg;
    swizzle<T, 4, 3, 2, 2> wzz, abb;
    swizzle<T, 4, 3, 2, 3> wzw, aba;
    swizzle<T, 4, 3, 3, 0> wwx, aar;
    swizzle<T, 4, 3, 3, 1> wwy, aag;
    swizzle<T, 4, 3, 3, 2> wwz, aab;
    swizzle<T, 4, 3, 3, 3> www, aaa;
    swizzle<T, 4, 0, 0, 0, 0> xxxx, rrrr;
    swizzle<T, 4, 0, 0, 0, 1> xxxy, rrrg;
    swizzle<T, 4, 0, 0, 0, 2> xxxz, rrrb;
    swizzle<T, 4, 0, 0, 0, 3> xxxw, rrra;
    swizzle<T, 4, 0, 0, 1, 0> xxyx, rrgr;
    swizzle<T, 4, 0, 0, 1, 1> xxyy, rrgg;
    swizzle<T, 4, 0, 0, 1, 2> xxyz, rrgb;
    swizzle<T, 4, 0, 0, 1, 3> xxyw, rrga;
    swizzle<T, 4, 0, 0, 2, 0> xxzx, rrbr;
    swizzle<T, 4, 0, 0, 2, 1> xxzy, rrbg;
    swizzle<T, 4, 0, 0, 2, 2> xxzz, rrbb;
    swizzle<T, 4, 0, 0, 2, 3> xxzw, rrba;
    swizzle<T, 4, 0, 0, 3, 0> xxwx, rrar;
    swizzle<T, 4, 0, 0, 3, 1> xxwy, rrag;
    swizzle<T, 4, 0, 0, 3, 2> xxwz, rrab;
    swizzle<T, 4, 0, 0, 3, 3> xxww, rraa;
    swizzle<T, 4, 0, 1, 0, 0> xyxx, rgrr;
    swizzle<T, 4, 0, 1, 0, 1> xyxy, rgrg;
    swizzle<T, 4, 0, 1, 0, 2> xyxz, rgrb;
    swizzle<T, 4, 0, 1, 0, 3> xyxw, rgra;
    swizzle<T, 4, 0, 1, 1, 0> xyyx, rggr;
    swizzle<T, 4, 0, 1, 1, 1> xyyy, rggg;
    swizzle<T, 4, 0, 1, 1, 2> xyyz, rggb;
    swizzle<T, 4, 0, 1, 1, 3> xyyw, rgga;
    swizzle<T, 4, 0, 1, 2, 0> xyzx, rgbr;
    swizzle<T, 4, 0, 1, 2, 1> xyzy, rgbg;
    swizzle<T, 4, 0, 1, 2, 2> xyzz, rgbb;
    swizzle<T, 4, 0, 1, 2, 3> xyzw, rgba;
    swizzle<T, 4, 0, 1, 3, 0> xywx, rgar;
    swizzle<T, 4, 0, 1, 3, 1> xywy, rgag;
    swizzle<T, 4, 0, 1, 3, 2> xywz, rgab;
    swizzle<T, 4, 0, 1, 3, 3> xyww, rgaa;
    swizzle<T, 4, 0, 2, 0, 0> xzxx, rbrr;
    swizzle<T, 4, 0, 2, 0, 1> xzxy, rbrg;
    swizzle<T, 4, 0, 2, 0, 2> xzxz, rbrb;
    swizzle<T, 4, 0, 2, 0, 3> xzxw, rbra;
    swizzle<T, 4, 0, 2, 1, 0> xzyx, rbgr;
    swizzle<T, 4, 0, 2, 1, 1> xzyy, rbgg;
    swizzle<T, 4, 0, 2, 1, 2> xzyz, rbgb;
    swizzle<T, 4, 0, 2, 1, 3> xzyw, rbga;
    swizzle<T, 4, 0, 2, 2, 0> xzzx, rbbr;
    swizzle<T, 4, 0, 2, 2, 1> xzzy, rbbg;
    swizzle<T, 4, 0, 2, 2, 2> xzzz, rbbb;
    swizzle<T, 4, 0, 2, 2, 3> xzzw, rbba;
    swizzle<T, 4, 0, 2, 3, 0> xzwx, rbar;
    swizzle<T, 4, 0, 2, 3, 1> xzwy, rbag;
    swizzle<T, 4, 0, 2, 3, 2> xzwz, rbab;
    swizzle<T, 4, 0, 2, 3, 3> xzww, rbaa;
    swizzle<T, 4, 0, 3, 0, 0> xwxx, rarr;
    swizzle<T, 4, 0, 3, 0, 1> xwxy, rarg;
    swizzle<T, 4, 0, 3, 0, 2> xwxz, rarb;
    swizzle<T, 4, 0, 3, 0, 3> xwxw, rara;
    swizzle<T, 4, 0, 3, 1, 0> xwyx, ragr;
    swizzle<T, 4, 0, 3, 1, 1> xwyy, ragg;
    swizzle<T, 4, 0, 3, 1, 2> xwyz, ragb;
    swizzle<T, 4, 0, 3, 1, 3> xwyw, raga;
    swizzle<T, 4, 0, 3, 2, 0> xwzx, rabr;
    swizzle<T, 4, 0, 3, 2, 1> xwzy, rabg;
    swizzle<T, 4, 0, 3, 2, 2> xwzz, rabb;
    swizzle<T, 4, 0, 3, 2, 3> xwzw, raba;
    swizzle<T, 4, 0, 3, 3, 0> xwwx, raar;
    swizzle<T, 4, 0, 3, 3, 1> xwwy, raag;
    swizzle<T, 4, 0, 3, 3, 2> xwwz, raab;
    swizzle<T, 4, 0, 3, 3, 3> xwww, raaa;
    swizzle<T, 4, 1, 0, 0, 0> yxxx, grrr;
    swizzle<T, 4, 1, 0, 0, 1> yxxy, grrg;
    swizzle<T, 4, 1, 0, 0, 2> yxxz, grrb;
    swizzle<T, 4, 1, 0, 0, 3> yxxw, grra;
    swizzle<T, 4, 1, 0, 1, 0> yxyx, grgr;
    swizzle<T, 4, 1, 0, 1, 1> yxyy, grgg;
    swizzle<T, 4, 1, 0, 1, 2> yxyz, grgb;
    swizzle<T, 4, 1, 0, 1, 3> yxyw, grga;
    swizzle<T, 4, 1, 0, 2, 0> yxzx, grbr;
    swizzle<T, 4, 1, 0, 2, 1> yxzy, grbg;
    swizzle<T, 4, 1, 0, 2, 2> yxzz, grbb;
    swizzle<T, 4, 1, 0, 2, 3> yxzw, grba;
    swizzle<T, 4, 1, 0, 3, 0> yxwx, grar;
    swizzle<T, 4, 1, 0, 3, 1> yxwy, grag;
    swizzle<T, 4, 1, 0, 3, 2> yxwz, grab;
    swizzle<T, 4, 1, 0, 3, 3> yxww, graa;
    swizzle<T, 4, 1, 1, 0, 0> yyxx, ggrr;
    swizzle<T, 4, 1, 1, 0, 1> yyxy, ggrg;
    swizzle<T, 4, 1, 1, 0, 2> yyxz, ggrb;
    swizzle<T, 4, 1, 1, 0, 3> yyxw, ggra;
    swizzle<T, 4, 1, 1, 1, 0> yyyx, gggr;
    swizzle<T, 4, 1, 1, 1, 1> yyyy, gggg;
    swizzle<T, 4, 1, 1, 1, 2> yyyz, gggb;
    swizzle<T, 4, 1, 1, 1, 3> yyyw, ggga;
    swizzle<T, 4, 1, 1, 2, 0> yyzx, ggbr;
    swizzle<T, 4, 1, 1, 2, 1> yyzy, ggbg;
    swizzle<T, 4, 1, 1, 2, 2> yyzz, ggbb;
    swizzle<T, 4, 1, 1, 2, 3> yyzw, ggba;
    swizzle<T, 4, 1, 1, 3, 0> yywx, ggar;
    swizzle<T, 4, 1, 1, 3, 1> yywy, ggag;
    swizzle<T, 4, 1, 1, 3, 2> yywz, ggab;
    swizzle<T, 4, 1, 1, 3, 3> yyww, ggaa;
    swizzle<T, 4, 1, 2, 0, 0> yzxx, gbrr;
    swizzle<T, 4, 1, 2, 0, 1> yzxy, gbrg;
    swizzle<T, 4, 1, 2, 0, 2> yzxz, gbrb;
    swizzle<T, 4, 1, 2, 0, 3> yzxw, gbra;
    swizzle<T, 4, 1, 2, 1, 0> yzyx, gbgr;
    swizzle<T, 4, 1, 2, 1, 1> yzyy, gbgg;
    swizzle<T, 4, 1, 2, 1, 2> yzyz, gbgb;
    swizzle<T, 4, 1, 2, 1, 3> yzyw, gbga;
    swizzle<T, 4, 1, 2, 2, 0> yzzx, gbbr;
    swizzle<T, 4, 1, 2, 2, 1> yzzy, gbbg;
    swizzle<T, 4, 1, 2, 2, 2> yzzz, gbbb;
    swizzle<T, 4, 1, 2, 2, 3> yzzw, gbba;
    swizzle<T, 4, 1, 2, 3, 0> yzwx, gbar;
    swizzle<T, 4, 1, 2, 3, 1> yzwy, gbag;
    swizzle<T, 4, 1, 2, 3, 2> yzwz, gbab;
    swizzle<T, 4, 1, 2, 3, 3> yzww, gbaa;
    swizzle<T, 4, 1, 3, 0, 0> ywxx, garr;
    swizzle<T, 4, 1, 3, 0, 1> ywxy, garg;
    swizzle<T, 4, 1, 3, 0, 2> ywxz, garb;
    swizzle<T, 4, 1, 3, 0, 3> ywxw, gara;
    swizzle<T, 4, 1, 3, 1, 0> ywyx, gagr;
    swizzle<T, 4, 1, 3, 1, 1> ywyy, gagg;
    swizzle<T, 4, 1, 3, 1, 2> ywyz, gagb;
    swizzle<T, 4, 1, 3, 1, 3> ywyw, gaga;
    swizzle<T, 4, 1, 3, 2, 0> ywzx, gabr;
    swizzle<T, 4, 1, 3, 2, 1> ywzy, gabg;
    swizzle<T, 4, 1, 3, 2, 2> ywzz, gabb;
    swizzle<T, 4, 1, 3, 2, 3> ywzw, gaba;
    swizzle<T, 4, 1, 3, 3, 0> ywwx, gaar;
    swizzle<T, 4, 1, 3, 3, 1> ywwy, gaag;
    swizzle<T, 4, 1, 3, 3, 2> ywwz, gaab;
    swizzle<T, 4, 1, 3, 3, 3> ywww, gaaa;
    swizzle<T, 4, 2, 0, 0, 0> zxxx, brrr;
    swizzle<T, 4, 2, 0, 0, 1> zxxy, brrg;
    swizzle<T, 4, 2, 0, 0, 2> zxxz, brrb;
    swizzle<T, 4, 2, 0, 0, 3> zxxw, brra;
    swizzle<T, 4, 2, 0, 1, 0> zxyx, brgr;
    swizzle<T, 4, 2, 0, 1, 1> zxyy, brgg;
    swizzle<T, 4, 2, 0, 1, 2> zxyz, brgb;
    swizzle<T, 4, 2, 0, 1, 3> zxyw, brga;
    swizzle<T, 4, 2, 0, 2, 0> zxzx, brbr;
    swizzle<T, 4, 2, 0, 2, 1> zxzy, brbg;
    swizzle<T, 4, 2, 0, 2, 2> zxzz, brbb;
    swizzle<T, 4, 2, 0, 2, 3> zxzw, brba;
    swizzle<T, 4, 2, 0, 3, 0> zxwx, brar;
    swizzle<T, 4, 2, 0, 3, 1> zxwy, brag;
    swizzle<T, 4, 2, 0, 3, 2> zxwz, brab;
    swizzle<T, 4, 2, 0, 3, 3> zxww, braa;
    swizzle<T, 4, 2, 1, 0, 0> zyxx, bgrr;
    swizzle<T, 4, 2, 1, 0, 1> zyxy, bgrg;
    swizzle<T, 4, 2, 1, 0, 2> zyxz, bgrb;
    swizzle<T, 4, 2, 1, 0, 3> zyxw, bgra;
    swizzle<T, 4, 2, 1, 1, 0> zyyx, bggr;
    swizzle<T, 4, 2, 1, 1, 1> zyyy, bggg;
    swizzle<T, 4, 2, 1, 1, 2> zyyz, bggb;
    swizzle<T, 4, 2, 1, 1, 3> zyyw, bgga;
    swizzle<T, 4, 2, 1, 2, 0> zyzx, bgbr;
    swizzle<T, 4, 2, 1, 2, 1> zyzy, bgbg;
    swizzle<T, 4, 2, 1, 2, 2> zyzz, bgbb;
    swizzle<T, 4, 2, 1, 2, 3> zyzw, bgba;
    swizzle<T, 4, 2, 1, 3, 0> zywx, bgar;
    swizzle<T, 4, 2, 1, 3, 1> zywy, bgag;
    swizzle<T, 4, 2, 1, 3, 2> zywz, bgab;
    swizzle<T, 4, 2, 1, 3, 3> zyww, bgaa;
    swizzle<T, 4, 2, 2, 0, 0> zzxx, bbrr;
    swizzle<T, 4, 2, 2, 0, 1> zzxy, bbrg;
    swizzle<T, 4, 2, 2, 0, 2> zzxz, bbrb;
    swizzle<T, 4, 2, 2, 0, 3> zzxw, bbra;
    swizzle<T, 4, 2, 2, 1, 0> zzyx, bbgr;
    swizzle<T, 4, 2, 2, 1, 1> zzyy, bbgg;
    swizzle<T, 4, 2, 2, 1, 2> zzyz, bbgb;
    swizzle<T, 4, 2, 2, 1, 3> zzyw, bbga;
    swizzle<T, 4, 2, 2, 2, 0> zzzx, bbbr;
    swizzle<T, 4, 2, 2, 2, 1> zzzy, bbbg;
    swizzle<T, 4, 2, 2, 2, 2> zzzz, bbbb;
    swizzle<T, 4, 2, 2, 2, 3> zzzw, bbba;
    swizzle<T, 4, 2, 2, 3, 0> zzwx, bbar;
    swizzle<T, 4, 2, 2, 3, 1> zzwy, bbag;
    swizzle<T, 4, 2, 2, 3, 2> zzwz, bbab;
    swizzle<T, 4, 2, 2, 3, 3> zzww, bbaa;
    swizzle<T, 4, 2, 3, 0, 0> zwxx, barr;
    swizzle<T, 4, 2, 3, 0, 1> zwxy, barg;
    swizzle<T, 4, 2, 3, 0, 2> zwxz, barb;
    swizzle<T, 4, 2, 3, 0, 3> zwxw, bara;
    swizzle<T, 4, 2, 3, 1, 0> zwyx, bagr;
    swizzle<T, 4, 2, 3, 1, 1> zwyy, bagg;
    swizzle<T, 4, 2, 3, 1, 2> zwyz, bagb;
    swizzle<T, 4, 2, 3, 1, 3> zwyw, baga;
    swizzle<T, 4, 2, 3, 2, 0> zwzx, babr;
    swizzle<T, 4, 2, 3, 2, 1> zwzy, babg;
    swizzle<T, 4, 2, 3, 2, 2> zwzz, babb;
    swizzle<T, 4, 2, 3, 2, 3> zwzw, baba;
    swizzle<T, 4, 2, 3, 3, 0> zwwx, baar;
    swizzle<T, 4, 2, 3, 3, 1> zwwy, baag;
    swizzle<T, 4, 2, 3, 3, 2> zwwz, baab;
    swizzle<T, 4, 2, 3, 3, 3> zwww, baaa;
    swizzle<T, 4, 3, 0, 0, 0> wxxx, arrr;
    swizzle<T, 4, 3, 0, 0, 1> wxxy, arrg;
    swizzle<T, 4, 3, 0, 0, 2> wxxz, arrb;
    swizzle<T, 4, 3, 0, 0, 3> wxxw, arra;
    swizzle<T, 4, 3, 0, 1, 0> wxyx, argr;
    swizzle<T, 4, 3, 0, 1, 1> wxyy, argg;
    swizzle<T, 4, 3, 0, 1, 2> wxyz, argb;
    swizzle<T, 4, 3, 0, 1, 3> wxyw, arga;
    swizzle<T, 4, 3, 0, 2, 0> wxzx, arbr;
    swizzle<T, 4, 3, 0, 2, 1> wxzy, arbg;
    swizzle<T, 4, 3, 0, 2, 2> wxzz, arbb;
    swizzle<T, 4, 3, 0, 2, 3> wxzw, arba;
    swizzle<T, 4, 3, 0, 3, 0> wxwx, arar;
    swizzle<T, 4, 3, 0, 3, 1> wxwy, arag;
    swizzle<T, 4, 3, 0, 3, 2> wxwz, arab;
    swizzle<T, 4, 3, 0, 3, 3> wxww, araa;
    swizzle<T, 4, 3, 1, 0, 0> wyxx, agrr;
    swizzle<T, 4, 3, 1, 0, 1> wyxy, agrg;
    swizzle<T, 4, 3, 1, 0, 2> wyxz, agrb;
    swizzle<T, 4, 3, 1, 0, 3> wyxw, agra;
    swizzle<T, 4, 3, 1, 1, 0> wyyx, aggr;
    swizzle<T, 4, 3, 1, 1, 1> wyyy, aggg;
    swizzle<T, 4, 3, 1, 1, 2> wyyz, aggb;
    swizzle<T, 4, 3, 1, 1, 3> wyyw, agga;
    swizzle<T, 4, 3, 1, 2, 0> wyzx, agbr;
    swizzle<T, 4, 3, 1, 2, 1> wyzy, agbg;
    swizzle<T, 4, 3, 1, 2, 2> wyzz, agbb;
    swizzle<T, 4, 3, 1, 2, 3> wyzw, agba;
    swizzle<T, 4, 3, 1, 3, 0> wywx, agar;
    swizzle<T, 4, 3, 1, 3, 1> wywy, agag;
    swizzle<T, 4, 3, 1, 3, 2> wywz, agab;
    swizzle<T, 4, 3, 1, 3, 3> wyww, agaa;
    swizzle<T, 4, 3, 2, 0, 0> wzxx, abrr;
    swizzle<T, 4, 3, 2, 0, 1> wzxy, abrg;
    swizzle<T, 4, 3, 2, 0, 2> wzxz, abrb;
    swizzle<T, 4, 3, 2, 0, 3> wzxw, abra;
    swizzle<T, 4, 3, 2, 1, 0> wzyx, abgr;
    swizzle<T, 4, 3, 2, 1, 1> wzyy, abgg;
    swizzle<T, 4, 3, 2, 1, 2> wzyz, abgb;
    swizzle<T, 4, 3, 2, 1, 3> wzyw, abga;
    swizzle<T, 4, 3, 2, 2, 0> wzzx, abbr;
    swizzle<T, 4, 3, 2, 2, 1> wzzy, abbg;
    swizzle<T, 4, 3, 2, 2, 2> wzzz, abbb;
    swizzle<T, 4, 3, 2, 2, 3> wzzw, abba;
    swizzle<T, 4, 3, 2, 3, 0> wzwx, abar;
    swizzle<T, 4, 3, 2, 3, 1> wzwy, abag;
    swizzle<T, 4, 3, 2, 3, 2> wzwz, abab;
    swizzle<T, 4, 3, 2, 3, 3> wzww, abaa;
    swizzle<T, 4, 3, 3, 0, 0> wwxx, aarr;
    swizzle<T, 4, 3, 3, 0, 1> wwxy, aarg;
    swizzle<T, 4, 3, 3, 0, 2> wwxz, aarb;
    swizzle<T, 4, 3, 3, 0, 3> wwxw, aara;
    swizzle<T, 4, 3, 3, 1, 0> wwyx, aagr;
    swizzle<T, 4, 3, 3, 1, 1> wwyy, aagg;
    swizzle<T, 4, 3, 3, 1, 2> wwyz, aagb;
    swizzle<T, 4, 3, 3, 1, 3> wwyw, aaga;
    swizzle<T, 4, 3, 3, 2, 0> wwzx, aabr;
    swizzle<T, 4, 3, 3, 2, 1> wwzy, aabg;
    swizzle<T, 4, 3, 3, 2, 2> wwzz, aabb;
    swizzle<T, 4, 3, 3, 2, 3> wwzw, aaba;
    swizzle<T, 4, 3, 3, 3, 0> wwwx, aaar;
    swizzle<T, 4, 3, 3, 3, 1> wwwy, aaag;
    swizzle<T, 4, 3, 3, 3, 2> wwwz, aaab;
    swizzle<T, 4, 3, 3, 3, 3> wwww, aaaa;
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
  static constexpr int alloy_n = N;
  typedef alloy_detail::vec_storage<T, N> alloy_base;

  vec() = default;
  vec(const vec&) = default;
  // The union's swizzle members have their own assignment, so this one is written out.
  ALLOY_FN vec& operator=(const vec& o) {
    for (int i = 0; i < N; ++i) this->alloy_e[i] = o.alloy_e[i];
    return *this;
  }

  // float4(x): every component x (also the implicit scalar-to-vector conversion).
  template <class U, enable_if_t<alloy_detail::is_scalar_arith<U>, int> = 0>
  ALLOY_FN constexpr vec(U s) : alloy_base(alloy_detail::splat<T, N>(static_cast<T>(s))) {}
  // float4(a, b, c, d), float4(v.xy, w.zw), float3(v2, s), ...: components in order.
  template <class A0, class A1, class... As,
            enable_if_t<alloy_detail::count_comps<A0>() + alloy_detail::count_comps<A1>() +
                                (0 + ... + alloy_detail::count_comps<As>()) ==
                            N,
                        int> = 0>
  ALLOY_FN constexpr vec(const A0& a0, const A1& a1, const As&... as)
      : alloy_base(alloy_detail::flatten<T, N>(a0, a1, as...)) {}
  // float4(int4), static_cast<half2>(float2), short2(i4.xy): element-wise conversion.
  template <class V, enable_if_t<alloy_detail::is_vecish<V> && alloy_detail::vec_n<V> == N &&
                                     !is_same_v<alloy_detail::vec_elem_t<V>, T>,
                                 int> = 0>
  ALLOY_FN constexpr explicit vec(const V& o) : alloy_base(alloy_detail::convert<T, N>(o)) {}

  ALLOY_FN constexpr T alloy_get(int i) const { return this->alloy_e[i]; }
  ALLOY_FN T& operator[](int i) { return this->alloy_e[i]; }
  ALLOY_FN constexpr const T& operator[](int i) const { return this->alloy_e[i]; }
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
};

// ---- Element-wise operators ----

namespace alloy_detail {
template <class X>
inline constexpr bool is_vec_operand = is_vecish<X> || is_scalar_arith<X>;

template <class A, class B>
ALLOY_FN constexpr bool vec_operands_ok() {
  if constexpr (!(is_vecish<A> || is_vecish<B>) || !is_vec_operand<A> || !is_vec_operand<B>)
    return false;
  else if constexpr (is_vecish<A> && is_vecish<B>)
    return vec_n<A> == vec_n<B>;
  else
    return true;
}

// Vector with scalar: the scalar is converted to the element type (Metal/OpenCL rule). Two
// vectors: their common element type.
template <class A, class B, bool = vec_operands_ok<A, B>()>
struct vec_arith {};
template <class A, class B>
struct vec_arith<A, B, true> {
  typedef conditional_t<is_vecish<A> && is_vecish<B>, promote2_t<vec_elem_t<A>, vec_elem_t<B>>,
                        conditional_t<is_vecish<A>, vec_elem_t<A>, vec_elem_t<B>>>
      elem;
  static constexpr int n = is_vecish<A> ? vec_n<A> : vec_n<B>;
  typedef vec<elem, n> type;
  typedef vec<bool, n> bool_type;
};
template <class A, class B>
using vec_arith_t = typename vec_arith<A, B>::type;
template <class A, class B>
using vec_cmp_t = typename vec_arith<A, B>::bool_type;
template <class V>
using vec_unary_t = enable_if_t<is_vecish<V>, vec_of_t<V>>;
template <class V>
using vec_bool_t = enable_if_t<is_vecish<V>, vec<bool, vec_n<V>>>;
}  // namespace alloy_detail

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

// ---- Relational functions on vectors (all, any, select) ----

ALLOY_FN constexpr bool all(bool b) {
  return b;
}
ALLOY_FN constexpr bool any(bool b) {
  return b;
}
template <class V, enable_if_t<alloy_detail::is_vecish<V>, int> = 0>
ALLOY_FN bool all(const V& v) {
  for (int i = 0; i < alloy_detail::vec_n<V>; ++i)
    if (!v.alloy_get(i)) return false;
  return true;
}
template <class V, enable_if_t<alloy_detail::is_vecish<V>, int> = 0>
ALLOY_FN bool any(const V& v) {
  for (int i = 0; i < alloy_detail::vec_n<V>; ++i)
    if (v.alloy_get(i)) return true;
  return false;
}
// select(a, b, c): c ? b : a, per component.
template <class T, enable_if_t<alloy_detail::is_scalar_arith<T> || is_pointer_v<T>, int> = 0>
ALLOY_FN T select(T a, T b, bool c) {
  return c ? b : a;
}
template <class A, class B, class C,
          enable_if_t<alloy_detail::is_vecish<A> && alloy_detail::is_vecish<C>, int> = 0>
ALLOY_FN alloy_detail::vec_of_t<A> select(const A& a, const B& b, const C& c) {
  alloy_detail::vec_of_t<A> r;
  for (int i = 0; i < alloy_detail::vec_n<A>; ++i)
    r.alloy_e[i] = alloy_detail::comp(c, i)
                       ? static_cast<alloy_detail::vec_elem_t<A>>(alloy_detail::comp(b, i))
                       : a.alloy_get(i);
  return r;
}

// ---- Packed vectors: packed_float3 etc., N elements with no padding (alignment of T) ----

template <class T, int N>
struct packed_vec;
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
  static constexpr bool is_vec = true;
  static constexpr int n = N;
  typedef T elem;
  typedef vec<T, N> type;
};
}  // namespace alloy_detail

// Converts to and from vec<T, N> implicitly (Metal: packed and aligned vectors assign both
// ways); every vector operator and function accepts it and returns aligned vectors.
template <class T, int N>
struct packed_vec : alloy_detail::packed_storage<T, N> {
  typedef T value_type;
  static constexpr int alloy_n = N;
  packed_vec() = default;
  template <class U, enable_if_t<alloy_detail::is_scalar_arith<U>, int> = 0>
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

// as_type of a swizzle reinterprets the vector it reads.
template <class To, class T, int N, int... I>
ALLOY_FN To as_type(const alloy_detail::swizzle<T, N, I...>& s) {
  return as_type<To>(vec<T, sizeof...(I)>(s));
}

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
