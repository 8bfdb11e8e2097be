// Conformance: what MLX's metal_kernel prelude gives kernel bodies besides the Metal standard
// library: elem_to_loc (on real strided views, ensure_row_contiguous=false), ceildiv, Limits<T>.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

int size_of_shape(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return static_cast<int>(n);
}

// ---- elem_to_loc ------------------------------------------------------------------------------

// The MLX docs' strided pattern: element index -> location through the input's shape/strides.
constexpr const char* kElemToLocBody = R"MSL(
    uint elem = thread_position_in_grid.x;
    uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
    T tmp = inp[loc];
    out[elem] = tmp * T(2) + T(1);
)MSL";

void check_elem_to_loc(const char* name, const Array& view) {
  ASSERT_FALSE(view.is_row_contiguous()) << "the test needs a strided view";
  auto k =
      metal_kernel(name, {"inp"}, {"out"}, kElemToLocBody, "", /*ensure_row_contiguous=*/false);
  auto v = view.to_doubles();
  std::vector<double> ref(v.size());
  for (size_t i = 0; i < v.size(); ++i) ref[i] = v[i] * 2 + 1;
  int n = size_of_shape(view.shape());
  run_kernel(k, {view},
             make_call({view.shape()}, {float32}, {n, 1, 1}, {32, 1, 1}, {{"T", float32}}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

TEST(ConformanceMlxHelpers, ElemToLocSlicedView) {
  auto base = random_array({8, 30}, float32, -1, 1, 501, Device::cpu());
  // rows 1, 3, 5, 7 and columns 2, 5, ..., 29: strides (60, 3), offset 32.
  auto view = base.slice({{1, std::nullopt, 2}, {2, std::nullopt, 3}});
  check_elem_to_loc("mlx_elem_to_loc_slice", view);
}

TEST(ConformanceMlxHelpers, ElemToLocTransposed3D) {
  auto base = random_array({4, 6, 5}, float32, -1, 1, 502, Device::cpu());
  check_elem_to_loc("mlx_elem_to_loc_transpose", base.transpose({2, 0, 1}));
}

// The uint3 overload: x indexes the last axis, y the one before, z the rest.
TEST(ConformanceMlxHelpers, ElemToLocUint3) {
  auto base = random_array({3, 4, 5, 6}, float32, -1, 1, 503, Device::cpu());
  auto view = base.transpose({1, 3, 0, 2}).slice({{}, {std::nullopt, std::nullopt, 2}});
  ASSERT_FALSE(view.is_row_contiguous());
  const Shape& s = view.shape();  // (4, 3, 3, 5)
  auto k = metal_kernel("mlx_elem_to_loc_uint3", {"inp"}, {"out"}, R"MSL(
    uint3 pos = thread_position_in_grid;
    int64_t loc = elem_to_loc(pos, inp_shape, inp_strides, inp_ndim);
    uint idx = pos.x + threads_per_grid.x * (pos.y + threads_per_grid.y * pos.z);
    out[idx] = inp[loc];
  )MSL",
                        "", false);
  auto ref = view.to_doubles();
  int gx = static_cast<int>(s[3]), gy = static_cast<int>(s[2]), gz = static_cast<int>(s[0] * s[1]);
  run_kernel(k, {view}, make_call({s}, {float32}, {gx, gy, gz}, {4, 2, 2}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

// ---- ceildiv, Limits<T> ------------------------------------------------------------------------

TEST(ConformanceMlxHelpers, Ceildiv) {
  constexpr int64_t n = 256;
  auto k = metal_kernel("mlx_ceildiv", {"x", "d"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[2 * i] = uint(ceildiv(x[i], d[i]));
    out[2 * i + 1] = uint(ceildiv(int(x[i]), 32));
  )MSL");
  auto x = random_array({n}, uint32, 1, 1e6, 511, Device::cpu());
  auto d = random_array({n}, uint32, 1, 100, 512, Device::cpu());
  auto xv = x.to_vector<uint32_t>(), dv = d.to_vector<uint32_t>();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    ref.push_back((xv[i] + dv[i] - 1) / dv[i]);
    ref.push_back((xv[i] + 31) / 32);
  }
  run_kernel(k, {x, d}, make_call({{n, 2}}, {uint32}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

TEST(ConformanceMlxHelpers, LimitsValues) {
  constexpr int64_t n = 2, K = 13;
  auto k = metal_kernel("mlx_limits_values", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    device float* o = out + i * 13;
    float one = x[i] > -1e30f ? 1.0f : 0.0f;   // always 1
    o[0] = one * Limits<float>::max;
    o[1] = Limits<float>::min;
    o[2] = Limits<float>::finite_max;
    o[3] = Limits<float>::finite_min;
    o[4] = float(Limits<half>::finite_max);
    o[5] = float(Limits<half>::min);
    o[6] = float(Limits<bfloat16_t>::finite_max);
    o[7] = float(Limits<int>::max);
    o[8] = float(Limits<int>::min);
    o[9] = float(Limits<uint>::max);
    o[10] = float(Limits<uint8_t>::max);
    o[11] = Limits<bool>::max ? 1.0f : 0.0f;
    o[12] = float(Limits<int16_t>::min);
  )MSL");
  auto x = random_array({n}, float32, -1, 1, 521, Device::cpu());
  double inf = std::numeric_limits<double>::infinity();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    double row[K] = {inf,
                     -inf,
                     FLT_MAX,
                     -FLT_MAX,
                     65504,
                     -inf,
                     std::ldexp(2.0 - std::ldexp(1.0, -7), 127),
                     double(static_cast<float>(INT32_MAX)),
                     double(INT32_MIN),
                     double(static_cast<float>(UINT32_MAX)),
                     255,
                     1,
                     -32768};
    ref.insert(ref.end(), row, row + K);
  }
  run_kernel(k, {x}, make_call({{n, K}}, {float32}, {n, 1, 1}, {2, 1, 1}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

// Limits<T>::min as the start of a max-reduction over a dtype template argument.
TEST(ConformanceMlxHelpers, LimitsInTemplatedReduction) {
  constexpr int64_t rows = 64, cols = 9;
  auto k = metal_kernel("mlx_limits_reduction", {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    T m = Limits<T>::min;
    T lo = Limits<T>::max;
    for (int j = 0; j < 9; ++j) {
      m = max(m, x[i * 9 + j]);
      lo = min(lo, x[i * 9 + j]);
    }
    out[2 * i] = m;
    out[2 * i + 1] = lo;
  )MSL");
  for (Dtype T : {float16, bfloat16, float32, int32}) {
    SCOPED_TRACE(std::string(dtype_name(T)));
    auto x = random_array({rows, cols}, T, -1000, 1000, 531, Device::cpu());
    auto xv = x.to_doubles();
    std::vector<double> ref;
    for (int64_t i = 0; i < rows; ++i) {
      double m = -std::numeric_limits<double>::infinity(), lo = -m;
      for (int64_t j = 0; j < cols; ++j) {
        m = std::max(m, xv[i * cols + j]);
        lo = std::min(lo, xv[i * cols + j]);
      }
      ref.push_back(m);
      ref.push_back(lo);
    }
    run_kernel(k, {x}, make_call({{rows, 2}}, {T}, {rows, 1, 1}, {32, 1, 1}, {{"T", T}}),
               [&](auto& o) { expect_equal(o[0], ref); });
  }
}

}  // namespace
