// Conformance: valid Metal that a token-level translation alone gets wrong (issue 10's
// reproducers): `?:` mixing half/bfloat with float or int (Metal's usual arithmetic conversions),
// address-space words inside macros, a header reopening `namespace metal`, partial
// specialisations on address space, and negative int template arguments (MLX 0.32.4's naming).
#include <cmath>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// `c ? a : b` with a half/bfloat and a float, double literal or int operand: Metal converts both to
// the common type (float; with an int the 16-bit type); nested and template-dependent forms too.
TEST(ConformanceFrontEnd, ConditionalMixesHalfBfloatAndFloat) {
  constexpr int64_t n = 96, K = 6;
  auto k = metal_kernel("fe_conditional", {"a", "b"}, {"o"}, R"MSL(
    uint i = thread_position_in_grid.x;
    T v = a[i];
    float r = (i % 2 == 0) ? v : -1e30f;           // T and float: float
    T m = (i % 3 == 0) ? a[i] : -1e30;              // T and a double literal (float in Metal)
    T q = i % 5 == 0 ? v : 2;                       // T and int: T
    float w = (i % 2) ? 0.5f : (i % 3 == 0 ? v : -v);  // nested
    float hb = (i % 4 < 2) ? b[i] : v;              // half and T (bfloat: float)
    const device T* p = (i % 7 == 0) ? a + i : nullptr;  // pointers keep their type
    float x = p ? float(*p) : 0.0f;
    device float* out = o + i * 6;
    out[0] = r; out[1] = m; out[2] = q; out[3] = w; out[4] = hb; out[5] = x;
  )MSL");
  for (Dtype t : {float32, float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(t));
    auto a = random_array({n}, t, -4, 4, 17, Device::cpu());
    auto b = random_array({n}, float16, -4, 4, 18, Device::cpu());
    auto av = a.to_doubles(), bv = b.to_doubles();
    std::vector<double> ref;
    for (int64_t i = 0; i < n; ++i) {
      double v = av[i];
      double row[K] = {i % 2 == 0 ? v : f32(-1e30), i % 3 == 0 ? v : round_to(t, f32(-1e30)),
                       i % 5 == 0 ? v : 2.0,        i % 2 ? 0.5 : (i % 3 == 0 ? v : -v),
                       i % 4 < 2 ? bv[i] : v,       i % 7 == 0 ? v : 0.0};
      ref.insert(ref.end(), row, row + K);
    }
    run_kernel(k, {a, b}, make_call({{n * K}}, {float32}, {n, 1, 1}, {32, 1, 1}, {{"T", t}}),
               [&](auto& o) { expect_equal(o[0], ref); });
  }
}

// The same kernel shape without the pointer line, for every T (float, half, bfloat).
TEST(ConformanceFrontEnd, ConditionalConversionsEveryType) {
  constexpr int64_t n = 64, K = 4;
  auto k = metal_kernel("fe_conditional_types", {"a"}, {"o"}, R"MSL(
    uint i = thread_position_in_grid.x;
    T v = a[i];
    float r = (i % 2 == 0) ? v : -1e30f;
    T m = (i % 3 == 0) ? a[i] : -1e30;
    T q = i % 5 == 0 ? v : 2;
    T s = v;
    s += (i % 2) ? 1.5f : v;                        // compound assignment from a conditional
    device float* out = o + i * 4;
    out[0] = r; out[1] = m; out[2] = q; out[3] = s;
  )MSL");
  for (Dtype t : {float32, float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(t));
    auto a = random_array({n}, t, -4, 4, 21, Device::cpu());
    auto av = a.to_doubles();
    std::vector<double> ref;
    for (int64_t i = 0; i < n; ++i) {
      double v = av[i];
      // s = T(float(v) + (i odd ? 1.5 : v)), rounded once to T (sums are exact in float).
      double s = round_to(t, v + (i % 2 ? 1.5 : v));
      double row[K] = {i % 2 == 0 ? v : f32(-1e30), i % 3 == 0 ? v : round_to(t, f32(-1e30)),
                       i % 5 == 0 ? v : 2.0, s};
      ref.insert(ref.end(), row, row + K);
    }
    run_kernel(k, {a}, make_call({{n * K}}, {float32}, {n, 1, 1}, {32, 1, 1}, {{"T", t}}),
               [&](auto& o) { expect_equal(o[0], ref); });
  }
}

// `#define MY_CONST static constant constexpr const` (MLX's MTL_CONST) and a macro spelling a
// device pointer type.
TEST(ConformanceFrontEnd, AddressSpaceWordsInMacros) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("fe_macro_address_space", {"a"}, {"o"}, R"MSL(
    uint i = thread_position_in_grid.x;
    o[i] = get(a, i) * Tile::n + kBias;
  )MSL",
                        R"MSL(#define MY_CONST static constant constexpr const
#define DEVICE_PTR(T) device T*
#define TG_PTR(T) threadgroup T*
struct Tile { MY_CONST int n = 4; };
MY_CONST float kBias = 0.25f;
inline float get(const DEVICE_PTR(float) p, uint i) { return p[i]; }
inline float unused(TG_PTR(float) p) { return p[0]; }
)MSL");
  auto a = random_array({n}, float32, -2, 2, 31, Device::cpu());
  auto av = a.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = f32(av[i] * 4 + 0.25);
  run_kernel(k, {a}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref); });
}

// A header reopening `namespace metal` adds to Metal's namespace (not to a nested metal::metal).
TEST(ConformanceFrontEnd, ReopenNamespaceMetal) {
  constexpr int64_t n = 32;
  auto k = metal_kernel("fe_namespace_metal", {"a"}, {"o"}, R"MSL(
    uint i = thread_position_in_grid.x;
    o[i] = a[i] * (metal::is_four<T>::value ? 2.0f : 3.0f) + (is_four<int>::value ? 1.0f : 0.0f);
  )MSL",
                        R"MSL(#include <metal_stdlib>
namespace metal {
template <typename T> struct is_four : metal::bool_constant<sizeof(T) == 4> {};
}
using namespace metal;
)MSL");
  for (Dtype t : {float32, float16}) {
    SCOPED_TRACE(dtype_name(t));
    auto a = random_array({n}, t, -2, 2, 41, Device::cpu());
    auto av = a.to_doubles();
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = f32(av[i] * (t == float32 ? 2 : 3) + 1);
    run_kernel(k, {a}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}, {{"T", t}}),
               [&](auto& o) { expect_equal(o[0], ref); });
  }
}

// `elem<device T*>`, `elem<thread T*>`, `elem<threadgroup T*>` (as MLX's pointer_element).
TEST(ConformanceFrontEnd, SpecialisationOnAddressSpace) {
  constexpr int64_t n = 32;
  auto k = metal_kernel("fe_address_space_spec", {"a"}, {"o"}, R"MSL(
    uint i = thread_position_in_grid.x;
    threadgroup float tg[32];
    typename elem<decltype(a)>::type v = a[i];
    thread float t = v * 2.0f;
    thread float* tp = &t;
    threadgroup float* gp = tg;
    gp[i % 32] = 1.0f;
    typename elem<decltype(tp)>::type w = *tp;
    o[i] = w + float(sizeof(typename elem<decltype(gp)>::type));
  )MSL",
                        R"MSL(template <typename P> struct elem;
template <typename T> struct elem<device T*> { using type = metal::remove_cv_t<T>; };
template <typename T> struct elem<thread T*> { using type = metal::remove_cv_t<T>; };
template <typename T> struct elem<threadgroup T*> { using type = metal::remove_cv_t<T>; };
)MSL");
  auto a = random_array({n}, float32, -2, 2, 51, Device::cpu());
  auto av = a.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = f32(f32(av[i] * 2) + 4);
  run_kernel(k, {a}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}),
             [&](auto& o) { expect_equal(o[0], ref); });
}

// Specialisations that differ only in address space but define different members cannot be
// represented on targets with one address space: a clear error, not a wrong pick.
TEST(ConformanceFrontEnd, SpecialisationOnAddressSpaceDifferentBodiesIsReported) {
  auto k = metal_kernel("fe_address_space_spec_bad", {"a"}, {"o"}, R"MSL(
    uint i = thread_position_in_grid.x;
    o[i] = a[i] * space<decltype(a)>::value;
  )MSL",
                        R"MSL(template <typename P> struct space;
template <typename T> struct space<device T*> { static constexpr int value = 1; };
template <typename T> struct space<thread T*> { static constexpr int value = 2; };
)MSL");
  auto a = random_array({8}, float32, -2, 2, 52, Device::cpu());
  try {
    auto o = k({a}, make_call({{8}}, {float32}, {8, 1, 1}, {8, 1, 1}));
    o[0].eval();
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("differ only in address space"), std::string::npos)
        << e.what();
  }
}

// ("N", -3) as MLX 0.32.4 accepts it (the kernel name spells the '-' as '_').
TEST(ConformanceFrontEnd, NegativeIntTemplateArgument) {
  constexpr int64_t n = 64;
  auto k = metal_kernel("fe_negative_template", {"a"}, {"o"}, R"MSL(
    uint i = thread_position_in_grid.x;
    o[i] = a[i] * N + M;
  )MSL");
  auto a = random_array({n}, float32, -2, 2, 61, Device::cpu());
  auto av = a.to_doubles();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = f32(f32(av[i] * -3) + -7);
  // a * N + M may be contracted into an fma (as Metal may): float32 tolerance.
  run_kernel(k, {a}, make_call({{n}}, {float32}, {n, 1, 1}, {32, 1, 1}, {{"N", -3}, {"M", -7}}),
             [&](auto& o) { expect_close(o[0], ref); });
}

}  // namespace
