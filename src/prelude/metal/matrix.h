// Metal matrices (<metal_matrix>): matrix<T, Cols, Rows> (float2x2 ... float4x4, half2x2 ...),
// stored as Cols column vectors, and simdgroup_matrix<T, 8, 8> (<metal_simdgroup_matrix>).
#pragma once

namespace metal {

// ---- matrix<T, C, R>: C columns of vec<T, R>; m[i] is column i ----

template <class T, int C, int R>
struct matrix {
  static_assert(C >= 2 && C <= 4 && R >= 2 && R <= 4, "matrices are 2x2 to 4x4");
  typedef T value_type;
  vec<T, R> columns[C];

  matrix() = default;
  // matrix(d): d on the diagonal, 0 elsewhere.
  ALLOY_FN explicit matrix(T d) {
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) columns[c][r] = c == r ? d : T(0);
  }
  // matrix(col0, col1, ...): one vector per column.
  template <
      class... V,
      enable_if_t<sizeof...(V) == C && (alloy_detail::is_vecish_c<V>::value() && ...), int> = 0>
  ALLOY_FN matrix(const V&... cols) {
    int c = 0;
    ((columns[c++] = vec<T, R>(cols)), ...);
  }
  // matrix(s00, s01, ...): C * R scalars, column by column.
  template <class... S, enable_if_t<sizeof...(S) == C * R &&
                                        (alloy_detail::is_scalar_arith_c<S>::value() && ...),
                                    int> = 0>
  ALLOY_FN matrix(S... s) {
    T v[C * R] = {static_cast<T>(s)...};
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) columns[c][r] = v[c * R + r];
  }
  template <class U>
  ALLOY_FN explicit matrix(const matrix<U, C, R>& o) {
    for (int c = 0; c < C; ++c) columns[c] = vec<T, R>(o.columns[c]);
  }

  ALLOY_FN vec<T, R>& operator[](int c) { return columns[c]; }
  ALLOY_FN const vec<T, R>& operator[](int c) const { return columns[c]; }

  ALLOY_FN matrix& operator+=(const matrix& o) {
    for (int c = 0; c < C; ++c) columns[c] += o.columns[c];
    return *this;
  }
  ALLOY_FN matrix& operator-=(const matrix& o) {
    for (int c = 0; c < C; ++c) columns[c] -= o.columns[c];
    return *this;
  }
  ALLOY_FN matrix& operator*=(T s) {
    for (int c = 0; c < C; ++c) columns[c] *= s;
    return *this;
  }
};

template <class T, int C, int R>
ALLOY_FN matrix<T, C, R> operator+(const matrix<T, C, R>& a, const matrix<T, C, R>& b) {
  matrix<T, C, R> m = a;
  return m += b;
}
template <class T, int C, int R>
ALLOY_FN matrix<T, C, R> operator-(const matrix<T, C, R>& a, const matrix<T, C, R>& b) {
  matrix<T, C, R> m = a;
  return m -= b;
}
template <class T, int C, int R>
ALLOY_FN matrix<T, C, R> operator-(const matrix<T, C, R>& a) {
  matrix<T, C, R> m;
  for (int c = 0; c < C; ++c) m.columns[c] = -a.columns[c];
  return m;
}
template <class T, int C, int R, class S,
          enable_if_t<alloy_detail::is_scalar_arith_c<S>::value(), int> = 0>
ALLOY_FN matrix<T, C, R> operator*(const matrix<T, C, R>& a, S s) {
  matrix<T, C, R> m = a;
  return m *= T(s);
}
template <class T, int C, int R, class S,
          enable_if_t<alloy_detail::is_scalar_arith_c<S>::value(), int> = 0>
ALLOY_FN matrix<T, C, R> operator*(S s, const matrix<T, C, R>& a) {
  return a * s;
}
// m * v: v has one component per column; the result one per row.
template <class T, int C, int R, class V,
          enable_if_t<alloy_detail::vec_n_c<V>::value() == C, int> = 0>
ALLOY_FN vec<T, R> operator*(const matrix<T, C, R>& m, const V& v) {
  vec<T, R> r = m.columns[0] * T(alloy_detail::comp(v, 0));
  for (int c = 1; c < C; ++c) r += m.columns[c] * T(alloy_detail::comp(v, c));
  return r;
}
// v * m: v has one component per row; the result one per column (dot with each column).
template <
    class T, int C, int R, class V,
    enable_if_t<alloy_detail::is_vecish_c<V>::value() && alloy_detail::vec_n_c<V>::value() == R,
                int> = 0>
ALLOY_FN vec<T, C> operator*(const V& v, const matrix<T, C, R>& m) {
  vec<T, C> r;
  for (int c = 0; c < C; ++c) r[c] = dot(vec<T, R>(v), m.columns[c]);
  return r;
}
template <class T, int K, int R, int C>
ALLOY_FN matrix<T, C, R> operator*(const matrix<T, K, R>& a, const matrix<T, C, K>& b) {
  matrix<T, C, R> m;
  for (int c = 0; c < C; ++c) m.columns[c] = a * b.columns[c];
  return m;
}
template <class T, int C, int R>
ALLOY_FN bool operator==(const matrix<T, C, R>& a, const matrix<T, C, R>& b) {
  for (int c = 0; c < C; ++c)
    if (!all(a.columns[c] == b.columns[c])) return false;
  return true;
}
template <class T, int C, int R>
ALLOY_FN bool operator!=(const matrix<T, C, R>& a, const matrix<T, C, R>& b) {
  return !(a == b);
}

template <class T, int C, int R>
ALLOY_FN matrix<T, R, C> transpose(const matrix<T, C, R>& m) {
  matrix<T, R, C> t;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) t.columns[r][c] = m.columns[c][r];
  return t;
}
template <class T>
ALLOY_FN T determinant(const matrix<T, 2, 2>& m) {
  return m[0][0] * m[1][1] - m[1][0] * m[0][1];
}
template <class T>
ALLOY_FN T determinant(const matrix<T, 3, 3>& m) {
  return dot(m[0], cross(m[1], m[2]));
}
template <class T>
ALLOY_FN T determinant(const matrix<T, 4, 4>& m) {
  // Laplace expansion along the first column.
  T d = T(0);
  for (int i = 0; i < 4; ++i) {
    matrix<T, 3, 3> minor;
    for (int c = 1; c < 4; ++c)
      for (int r = 0, k = 0; r < 4; ++r)
        if (r != i) minor[c - 1][k++] = m[c][r];
    T term = m[0][i] * determinant(minor);
    d = (i % 2) ? T(d - term) : T(d + term);
  }
  return d;
}

#define ALLOY_MATRIX_NAMES(T, name)  \
  typedef matrix<T, 2, 2> name##2x2; \
  typedef matrix<T, 2, 3> name##2x3; \
  typedef matrix<T, 2, 4> name##2x4; \
  typedef matrix<T, 3, 2> name##3x2; \
  typedef matrix<T, 3, 3> name##3x3; \
  typedef matrix<T, 3, 4> name##3x4; \
  typedef matrix<T, 4, 2> name##4x2; \
  typedef matrix<T, 4, 3> name##4x3; \
  typedef matrix<T, 4, 4> name##4x4;
ALLOY_MATRIX_NAMES(float, float)
ALLOY_MATRIX_NAMES(half, half)
#undef ALLOY_MATRIX_NAMES

// ---- simdgroup_matrix<T, 8, 8>: an 8x8 matrix spread over the 32 lanes of a simdgroup ----
//
// Each lane holds two horizontally adjacent elements, (row, col) and (row, col + 1), with Apple's
// layout (the one MLX's steel kernels use with thread_elements()): for lane l and q = l / 4,
// row = (q & 4) + (l / 2) % 4 and col = (q & 2) * 2 + (l % 2) * 2. Loads, stores and products are
// collective: every lane of the simdgroup must take part, as on Metal.

namespace alloy_detail {
ALLOY_FN uint32_t sg_row(uint32_t l) {
  return ((l / 4) & 4u) + (l / 2) % 4;
}
ALLOY_FN uint32_t sg_col(uint32_t l) {
  return ((l / 4) & 2u) * 2 + (l % 2) * 2;
}
// The lane holding element (row, col).
ALLOY_FN uint32_t sg_lane(uint32_t row, uint32_t col) {
  return ((col >> 1) & 1u) | ((row & 1u) << 1) | (((row >> 1) & 1u) << 2) |
         (((col >> 2) & 1u) << 3) | (((row >> 2) & 1u) << 4);
}
}  // namespace alloy_detail

template <class T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "simdgroup_matrix: only 8x8 is supported");
  vec<T, 2> alloy_e;  // this lane's two elements

  simdgroup_matrix() = default;
  // A diagonal matrix.
  ALLOY_FN explicit simdgroup_matrix(T d) {
    uint32_t l = alloy_target::lane_id();
    uint32_t r = alloy_detail::sg_row(l), c = alloy_detail::sg_col(l);
    alloy_e = vec<T, 2>(r == c ? d : T(0), r == c + 1 ? d : T(0));
  }
  ALLOY_FN vec<T, 2>& thread_elements() { return alloy_e; }
  ALLOY_FN const vec<T, 2>& thread_elements() const { return alloy_e; }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows>
ALLOY_FN simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.alloy_e = vec<T, 2>(value);
  return m;
}

// Element (row, col) of the matrix is src[(origin.y + row) * elements_per_row + origin.x + col]
// (with rows and columns swapped when transpose_matrix).
template <class T, class U, int Cols, int Rows>
ALLOY_FN void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, const U* src,
                             size_t elements_per_row = Cols, ulong2 matrix_origin = ulong2(0),
                             bool transpose_matrix = false) {
  uint32_t l = alloy_target::lane_id();
  uint32_t r = alloy_detail::sg_row(l), c = alloy_detail::sg_col(l);
  for (uint32_t j = 0; j < 2; ++j) {
    size_t row = transpose_matrix ? c + j : r, col = transpose_matrix ? r : c + j;
    d.alloy_e[j] =
        static_cast<T>(src[(matrix_origin.y + row) * elements_per_row + matrix_origin.x + col]);
  }
}
template <class T, class U, int Cols, int Rows>
ALLOY_FN void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& m, U* dst,
                              size_t elements_per_row = Cols, ulong2 matrix_origin = ulong2(0),
                              bool transpose_matrix = false) {
  uint32_t l = alloy_target::lane_id();
  uint32_t r = alloy_detail::sg_row(l), c = alloy_detail::sg_col(l);
  for (uint32_t j = 0; j < 2; ++j) {
    size_t row = transpose_matrix ? c + j : r, col = transpose_matrix ? r : c + j;
    dst[(matrix_origin.y + row) * elements_per_row + matrix_origin.x + col] =
        static_cast<U>(m.alloy_e[j]);
  }
}

// d = a * b + c. Each lane gathers its row of a (4 pairs) and its two columns of b (8 pairs)
// from the lanes holding them, then computes its two elements (in float for half/bfloat).
template <class T, class A, class B, class C, int N>
ALLOY_FN void simdgroup_multiply_accumulate(simdgroup_matrix<T, N, N>& d,
                                            const simdgroup_matrix<A, N, N>& a,
                                            const simdgroup_matrix<B, N, N>& b,
                                            const simdgroup_matrix<C, N, N>& c) {
  typedef alloy_detail::calc_t<alloy_detail::math_t<T>> F;
  uint32_t l = alloy_target::lane_id();
  uint32_t r = alloy_detail::sg_row(l), col = alloy_detail::sg_col(l);
  F acc0 = F(c.alloy_e[0]), acc1 = F(c.alloy_e[1]);
  vec<A, 2> arow[4];
  for (uint32_t p = 0; p < 4; ++p)
    arow[p] = alloy_target::shuffle(a.alloy_e, alloy_detail::sg_lane(r, 2 * p));
  for (uint32_t k = 0; k < 8; ++k) {
    vec<B, 2> bk = alloy_target::shuffle(b.alloy_e, alloy_detail::sg_lane(k, col));
    F ak = F(arow[k / 2][k % 2]);
    acc0 += ak * F(bk[0]);
    acc1 += ak * F(bk[1]);
  }
  d.alloy_e = vec<T, 2>(T(acc0), T(acc1));
}
template <class T, class A, class B, int N>
ALLOY_FN void simdgroup_multiply(simdgroup_matrix<T, N, N>& d, const simdgroup_matrix<A, N, N>& a,
                                 const simdgroup_matrix<B, N, N>& b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<T, N, N>(T(0)));
}

// a * b (Metal's simdgroup_matrix operator*): simdgroup_multiply into a new matrix.
template <class T, int N>
ALLOY_FN simdgroup_matrix<T, N, N> operator*(const simdgroup_matrix<T, N, N>& a,
                                             const simdgroup_matrix<T, N, N>& b) {
  simdgroup_matrix<T, N, N> d;
  simdgroup_multiply(d, a, b);
  return d;
}

}  // namespace metal
