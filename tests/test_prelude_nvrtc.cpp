// The Metal prelude compiled for the CUDA target by NVRTC (no GPU needed): one translation unit
// instantiates every function family for float, half, bfloat, integers and vectors inside a
// __global__ kernel, for compute_90/sm_90, in C++17 and C++20, safe and fast math. The same unit is
// also compiled as host code through the CPU target layer with the host compiler.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

// Last: the prelude redefines INFINITY, FLT_MAX... (used here for the host references).
#include "prelude/metal_stdlib.h"

namespace {

namespace fs = std::filesystem;

fs::path prelude_dir() {
  if (const char* env = std::getenv("ALLOY_SOURCE_DIR"); env && *env)
    return fs::path(env) / "src" / "prelude";
#ifdef ALLOY_SOURCE_DIR
  return fs::path(ALLOY_SOURCE_DIR) / "src" / "prelude";
#else
  return fs::path(__FILE__).parent_path().parent_path() / "src" / "prelude";
#endif
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The coverage unit. Kernels see the prelude as translated code does: inside namespace metal.
const char* kCoverage = R"ALLOY(
#include "metal_stdlib.h"
#if defined(ALLOY_TARGET_CUDA)
#define ALLOY_KERNEL extern "C" __global__
#else
#define ALLOY_KERNEL extern "C"
#endif

namespace metal {

template <class T>
ALLOY_FN T float_family(const T* p, uint i) {
  T x = p[i], y = p[i + 1], z = p[i + 2];
  T r = exp(x) + exp2(x) + exp10(x) + log(x) + log2(x) + log10(x) + pow(x, y) + powr(x, y) +
        sqrt(x) + rsqrt(x) + sin(x) + cos(x) + tan(x) + asin(x) + acos(x) + atan(x) +
        atan2(x, y) + sinh(x) + cosh(x) + tanh(x) + asinh(x) + acosh(x) + atanh(x);
  r += floor(x) + ceil(x) + round(x) + rint(x) + trunc(x) + fract(x) + fmod(x, y) + abs(x) +
       fabs(x) + fmin(x, y) + fmax(x, y) + min(x, y) + max(x, y) + clamp(x, y, z) +
       mix(x, y, z) + saturate(x) + sign(x) + step(x, y) + smoothstep(x, y, z) + fma(x, y, z) +
       copysign(x, y) + sinpi(x) + cospi(x) + tanpi(x) + fdim(x, y) + nextafter(x, y) +
       fmin3(x, y, z) + fmax3(x, y, z) + fmedian3(x, y, z) + divide(x, y) + log1p(x) + expm1(x);
  r += fast::exp(x) + fast::exp2(x) + fast::exp10(x) + fast::log(x) + fast::log2(x) +
       fast::log10(x) + fast::pow(x, y) + fast::powr(x, y) + fast::sqrt(x) + fast::rsqrt(x) +
       fast::sin(x) + fast::cos(x) + fast::tan(x) + fast::tanh(x) + fast::divide(x, y) +
       fast::max(x, y) + fast::clamp(x, y, z) + fast::fabs(x) + fast::floor(x);
  r += precise::exp(x) + precise::log(x) + precise::sqrt(x) + precise::rsqrt(x) +
       precise::tanh(x) + precise::divide(x, y) + precise::pow(x, y);
  r += max(x, 0) + min(x, 1) + clamp(x, 0, 1) + pow(x, 2) + x * 2 + 2 * x + x / 2 + (x - 1);
  r += T(numeric_limits<T>::infinity()) + numeric_limits<T>::max() + numeric_limits<T>::lowest() +
       numeric_limits<T>::epsilon() + numeric_limits<T>::min() + Limits<T>::finite_max +
       Limits<T>::min;
  return r;
}

template <class T>
ALLOY_FN T float_scalar_only(const T* p, uint i) {
  T x = p[i];
  T c;
  T s = sincos(x, c);
  T ip;
  T f = modf(x, ip);
  int e;
  T m = frexp(x, e);
  bool b = isnan(x) || isinf(x) || isfinite(x) || signbit(x) || isnormal(x);
  T q = select(x, c, b);
  T l = ldexp(x, 3) + T(ilogb(x)) + logb(x);
  return s + c + ip + f + m + T(e) + q + l + T(x > 0.5f) + T(x == 1) + (x < c ? x : c);
}

template <class V>
ALLOY_FN V vector_family(const V* p, uint i) {
  typedef typename V::value_type T;
  V a = p[i], b = p[i + 1];
  V r = a + b - a * b / (a + 1) + 2 * a + a * T(3);
  r += exp(a) + log(b) + sqrt(a) + rsqrt(b) + pow(a, b) + sin(a) + tanh(a) + floor(a) +
       fract(a) + min(a, b) + max(a, T(0)) + clamp(a, T(0), T(1)) + mix(a, b, T(0.5f)) +
       mix(a, b, a) + abs(a) + sign(a) + step(a, b) + smoothstep(a, b, a) + fma(a, b, a) +
       select(a, b, a < b) + saturate(a) + fast::exp(a) + precise::exp(b) + ldexp(a, 2);
  r += V(dot(a, b)) + V(length(a)) + V(distance(a, b)) + normalize(a);
  V c;
  r += sincos(a, c) + c;
  bool any_nan = any(isnan(a)) || all(isfinite(b)) || all(a == b) || any(a != b);
  r.x = r.y + T(any_nan);
  r[1] = r.x;
  r.xy = r.yx;
  r.xy += b.xy;
  return r;
}

template <class I>
ALLOY_FN I integer_family(const I* p, uint i) {
  I a = p[i], b = p[i + 1], c = p[i + 2];
  I r = I(clz(a) + ctz(b) + popcount(c) + reverse_bits(a) + rotate(a, b) + mulhi(a, b) +
          absdiff(a, b) + addsat(a, b) + subsat(a, b) + hadd(a, b) + rhadd(a, b) +
          extract_bits(a, 3u, 5u) + insert_bits(a, b, 2u, 4u) + madhi(a, b, c) + abs(a) +
          min(a, b) + max(a, b) + clamp(a, b, c) + min3(a, b, c) + max3(a, b, c) +
          median3(a, b, c));
  r = I(r + (a & b) + (a | c) + (a ^ b) + (a << 1) + (b >> 1) + numeric_limits<I>::max() +
        Limits<I>::min + as_type<I>(c));
  return r;
}

template <class I>
ALLOY_FN I integer24_family(const I* p, uint i) {
  return I(mul24(p[i], p[i + 1]) + mad24(p[i], p[i + 1], p[i + 2]) +
           madsat(p[i], p[i + 1], p[i + 2]));
}

template <class V>
ALLOY_FN V int_vector_family(const V* p, uint i) {
  V a = p[i], b = p[i + 1];
  V r = clz(a) + popcount(b) + rotate(a, b) + addsat(a, b) + hadd(a, b) + mulhi(a, b) +
        extract_bits(a, 1u, 3u) + insert_bits(a, b, 1u, 3u) + min(a, b) + max(a, b) + abs(a);
  r += (a & b) | (a ^ b) | (a << 1) | (b >> 1) | (a % (b | 1)) | ~a;
  return r;
}

template <class T>
ALLOY_FN T simd_family(T v) {
  T r = simd_sum(v) + simd_product(v) + simd_min(v) + simd_max(v) + simd_broadcast(v, 3) +
        simd_broadcast_first(v) + simd_shuffle(v, 5) + simd_shuffle_up(v, 1) +
        simd_shuffle_down(v, 2) + simd_shuffle_xor(v, 4) + simd_shuffle_rotate_up(v, 1) +
        simd_shuffle_rotate_down(v, 3) + simd_prefix_inclusive_sum(v) +
        simd_prefix_exclusive_sum(v) + simd_prefix_inclusive_product(v) +
        simd_prefix_exclusive_product(v) + simd_shuffle_and_fill_up(v, v, 2) +
        simd_shuffle_and_fill_down(v, v, 2, 8);
  return r;
}

template <class I>
ALLOY_FN I simd_int_family(I v) {
  return I(simd_and(v) + simd_or(v) + simd_xor(v) + simd_sum(v) + simd_max(v));
}

template <class T>
ALLOY_FN T atomic_family(atomic<T>* a, T v) {
  atomic_store_explicit(a, v, memory_order_relaxed);
  T r = atomic_load_explicit(a, memory_order_relaxed);
  r += atomic_fetch_add_explicit(a, v, memory_order_relaxed);
  r += atomic_fetch_sub_explicit(a, v, memory_order_relaxed);
  r += atomic_fetch_min_explicit(a, v, memory_order_relaxed);
  r += atomic_fetch_max_explicit(a, v, memory_order_relaxed);
  r += atomic_exchange_explicit(a, v, memory_order_relaxed);
  T expected = r;
  atomic_compare_exchange_weak_explicit(a, &expected, v, memory_order_relaxed,
                                        memory_order_relaxed);
  return r + expected;
}

template <class T>
ALLOY_FN T atomic_bits_family(atomic<T>* a, T v) {
  return T(atomic_fetch_and_explicit(a, v, memory_order_relaxed) +
           atomic_fetch_or_explicit(a, v, memory_order_relaxed) +
           atomic_fetch_xor_explicit(a, v, memory_order_relaxed));
}

template <class T>
ALLOY_FN T quad_family(T v) {
  return quad_sum(v) + quad_product(v) + quad_min(v) + quad_max(v) + quad_broadcast(v, 1) +
         quad_broadcast_first(v) + quad_shuffle(v, 2) + quad_shuffle_up(v, 1) +
         quad_shuffle_down(v, 1) + quad_shuffle_xor(v, 3) + quad_shuffle_rotate_up(v, 1) +
         quad_shuffle_rotate_down(v, 2) + quad_prefix_inclusive_sum(v) +
         quad_prefix_exclusive_sum(v) + quad_prefix_inclusive_product(v) +
         quad_prefix_exclusive_product(v);
}

template <class T>
ALLOY_FN T matrix_family(const T* p, T* out, uint i) {
  typedef vec<T, 2> V2;
  typedef vec<T, 3> V3;
  typedef vec<T, 4> V4;
  matrix<T, 2, 2> a(p[i], p[i + 1], p[i + 2], p[i + 3]);
  matrix<T, 3, 3> b{V3(p[i]), V3(p[i + 1]), V3(p[i + 2])};
  matrix<T, 4, 4> c(T(1));
  matrix<T, 2, 3> d{V3(p[i]), V3(p[i + 1])};
  matrix<T, 3, 2> e = transpose(d);
  V3 v = d * V2(p[i], p[i + 1]);
  V2 w = V3(1) * d;
  matrix<T, 2, 2> f = e * d + a * T(2) - a;
  V4 x = c * V4(p[i]);
  T r = determinant(a) + determinant(b) + determinant(c) + v.x + w.y + f[1][1] + x.w +
        T(a == f) + T(a != f);
  packed_vec<T, 3> pk = v;
  v = pk + pk;
  simdgroup_matrix<T, 8, 8> ma, mb, mc;
  simdgroup_load(ma, p, 8);
  simdgroup_load(mb, p, 8, ulong2(0, 1), true);
  simdgroup_multiply_accumulate(mc, ma, mb, make_filled_simdgroup_matrix<T, 8, 8>(T(1)));
  simdgroup_multiply(mc, mc, ma);
  simdgroup_store(mc, out, 8);
  return r + v.y + mc.thread_elements()[0] + simdgroup_matrix<T, 8, 8>(T(2)).thread_elements()[1];
}

ALLOY_FN float mlx_family(const int* shape, const int64_t* strides, const size_t* sstrides,
                          uint3 gid) {
  int64_t l = elem_to_loc(gid.x, shape, strides, 3) + elem_to_loc(gid, shape, strides, 3) +
              elem_to_loc<int>(gid.x, shape, strides, 3) + elem_to_loc_1(gid.x, strides[0]) +
              elem_to_loc_2(gid.xy, strides) + elem_to_loc_3(gid, strides) +
              elem_to_loc_nd<2>(gid.x, shape, strides) +
              int64_t(elem_to_loc<size_t>(gid.x, shape, sstrides, 3));
  long2 l2 = elem_to_loc_2_nd(gid, shape, strides, strides, 3);
  long3 l3 = elem_to_loc_3_nd(gid, shape, strides, strides, strides, 3);
  complex64_t z(1.0f, 2.0f), w = 3.0f;
  z = z * w + z / w - z;
  z += complex64_t(0, 1);
  float re = z;
  return float(l + l2.y + l3.z + ceildiv(l, 4)) + re + z.imag + float(z > w) +
         float(Limits<complex64_t>::max.real) + float(bfloat16_to_uint16(bfloat16_t(1.0f))) +
         float(uint16_to_bfloat16(0x3f80));
}

ALLOY_FN float4 vector_api(const float* p, uint i) {
  float4 a = ((const float4*)p)[i];
  float4 b(a.xy, a.zw);
  float3 c = float3(a.xy, 1.0f);
  float4 d = float4(1.0f, c);
  half4 h = half4(a);
  bfloat4 bf = bfloat4(h);
  int4 iv = int4(a);
  uint2 u = as_type<uint2>(a.xy);
  vec<float, 4> v = float4(iv) + float4(h) + float4(bf) + float4(u.x, u.y, 0, 1);
  b.wzyx = a;
  b.xy = b.yx;
  b.rg = a.ba;
  float2 e = a.xx + a.yy + a.zw.template alloy_swizzle<1, 0>() + b.xy.template alloy_swizzle<0>();
  bool4 m = a > b;
  char4 ch = char4(iv);
  short2 sh = short2(1, 2);
  ushort3 us = ushort3(1);
  long4 lv = long4(iv);
  ulong2 ul = ulong2(5);
  uchar4 uc = uchar4(3);
  return v + b + d + float4(c, 0) + float4(e, e) + select(a, b, m) + float4(ch) + float4(sh.x) +
         float4(us.z) + float4(lv) + float4(ul.x) + float4(uc) + float(all(m)) + float(any(m));
}

}  // namespace metal

namespace metal {
ALLOY_FN void coverage_body(float* f, half* h, bfloat16_t* b,
                                         int* i, unsigned* u, short* s, unsigned short* us,
                                         signed char* c, unsigned char* uc, long* l,
                                         unsigned long* ul, float4* f4, half4* h4,
                                         bfloat2* b2, int4* i4,
                                         uint2* u2, ushort4* us4,
                                         long2* l2, const int* shape,
                                         const int64_t* strides, const size_t* sstrides,
                                         unsigned tid) {
  ALLOY_THREADGROUP(float, [64], tg, 0);
  ALLOY_THREADGROUP(atomic_int, , tg_counter, 1);
  ALLOY_THREADGROUP(float4, [2][8], tg2, 2);
  tg[tid % 64] = f[tid];
  tg2[tid % 2][tid % 8] = f4[tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  simdgroup_barrier(mem_flags::mem_none);
  atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
  f[tid] = float_family(f, tid) + float_scalar_only(f, tid) + tg[(tid + 1) % 64];
  h[tid] = float_family(h, tid) + float_scalar_only(h, tid);
  b[tid] = float_family(b, tid) + float_scalar_only(b, tid);
  f4[tid] = vector_family(f4, tid) + vector_api(f, tid) + tg2[1][tid % 8];
  h4[tid] = vector_family(h4, tid);
  b2[tid] = vector_family(b2, tid);
#ifndef ALLOY_COVERAGE_MATH_ONLY
  i[tid] = integer_family(i, tid) + integer24_family(i, tid);
  u[tid] = integer_family(u, tid) + integer24_family(u, tid);
  s[tid] = integer_family(s, tid);
  us[tid] = integer_family(us, tid);
  c[tid] = integer_family(c, tid);
  uc[tid] = integer_family(uc, tid);
  l[tid] = integer_family(l, tid);
  ul[tid] = integer_family(ul, tid);
  i4[tid] = int_vector_family(i4, tid);
  u2[tid] = int_vector_family(u2, tid);
  us4[tid] = int_vector_family(us4, tid);
  f[tid] += simd_family(f[tid]) + float(simd_family(h[tid])) + float(simd_family(b[tid]));
  f[tid] += float(simd_family(i[tid]) + simd_family(u[tid]) + simd_int_family(i[tid]) +
                  simd_int_family(u[tid]) + simd_int_family(l[tid]) + simd_family(l[tid]) +
                  simd_family(ul[tid]));
  f4[tid] += simd_family(f4[tid]) + float4(simd_family(h4[tid])) + float4(simd_family(i4[tid]));
  l2[tid] = simd_shuffle_down(l2[tid], 1) + simd_shuffle(l2[tid], 0);
  f[tid] += quad_family(f[tid]) + float(quad_family(h[tid])) + float(quad_family(i[tid]) +
            quad_and(i[tid]) + quad_or(u[tid]) + quad_xor(i[tid])) + float(quad_all(f[tid] > 0)) +
            float(quad_any(f[tid] > 1)) + float(quad_is_first()) +
            float(uint16_t(quad_ballot(f[tid] > 0))) + float(quad_ballot(true).all()) +
            float(uint16_t(quad_active_threads_mask()));
  f4[tid] += quad_family(f4[tid]);
  f[tid] += matrix_family(f, f + 64, tid) + float(matrix_family(h, h + 64, tid));
  f[tid] += float(simd_all(f[tid] > 0) + simd_any(f[tid] > 1) + simd_is_first()) +
            float(uint64_t(simd_ballot(f[tid] > 0))) + float(simd_ballot(true).all()) +
            float(uint64_t(simd_active_threads_mask()));
  f[tid] += atomic_family((atomic_float*)f, 1.0f) + float(atomic_family((atomic_int*)i, 1)) +
            float(atomic_family((atomic_uint*)u, 1u)) +
            float(atomic_bits_family((atomic_int*)i, 1)) +
            float(atomic_bits_family((atomic_uint*)u, 1u)) +
            float(atomic_fetch_add_explicit(&tg_counter, 1, memory_order_relaxed)) +
            float(atomic_fetch_max_explicit((atomic_ulong*)ul, 1ul, memory_order_relaxed)) +
            float(atomic_fetch_min_explicit((atomic_long*)l, 1l, memory_order_relaxed)) +
            float(atomic_fetch_add_explicit((atomic_ulong*)ul, 1ul, memory_order_relaxed)) +
            float(atomic_fetch_add_explicit((atomic_long*)l, 1l, memory_order_relaxed)) +
            float(atomic_fetch_or_explicit((atomic_ulong*)ul, 1ul, memory_order_relaxed)) +
            float(atomic_fetch_and_explicit((atomic_long*)l, 1l, memory_order_relaxed));
#endif
  f[tid] += mlx_family(shape, strides, sstrides, uint3(tid, 1, 2)) + INFINITY + FLT_MAX +
            M_PI_F + float(HALF_MAX) + float(M_PI_H) + MAXFLOAT + FLT_EPSILON;
}
}  // namespace metal

ALLOY_KERNEL void alloy_prelude_coverage(float* f, metal::half* h, metal::bfloat16_t* b, int* i,
                                         unsigned* u, short* s, unsigned short* us,
                                         signed char* c, unsigned char* uc, long* l,
                                         unsigned long* ul, metal::float4* f4, metal::half4* h4,
                                         metal::bfloat2* b2, metal::int4* i4, metal::uint2* u2,
                                         metal::ushort4* us4, metal::long2* l2, const int* shape,
                                         const int64_t* strides, const size_t* sstrides,
                                         unsigned tid) {
  metal::coverage_body(f, h, b, i, u, s, us, c, uc, l, ul, f4, h4, b2, i4, u2, us4, l2, shape,
                       strides, sstrides, tid);
}
)ALLOY";

// ---- NVRTC through dlopen ----

typedef int nvrtcResult;
typedef struct _nvrtcProgram* nvrtcProgram;

struct Nvrtc {
  void* lib = nullptr;
  nvrtcResult (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                        const char* const*) = nullptr;
  nvrtcResult (*compile)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*log_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*log)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*ptx_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*ptx)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*destroy)(nvrtcProgram*) = nullptr;
  nvrtcResult (*cubin_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*cubin)(nvrtcProgram, char*) = nullptr;

  static Nvrtc* get() {
    static Nvrtc n = load();
    return n.lib ? &n : nullptr;
  }
  static Nvrtc load() {
    Nvrtc n;
    std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so"};
    for (const char* home : {static_cast<const char*>(std::getenv("CUDA_HOME")), "/usr/local/cuda"})
      if (home) {
        names.push_back(std::string(home) + "/lib64/libnvrtc.so.13");
        names.push_back(std::string(home) + "/lib64/libnvrtc.so");
      }
    for (const auto& name : names)
      if ((n.lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!n.lib) return n;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(n.lib, name));
      return fn != nullptr;
    };
    if (!(sym(n.create, "nvrtcCreateProgram") && sym(n.compile, "nvrtcCompileProgram") &&
          sym(n.log_size, "nvrtcGetProgramLogSize") && sym(n.log, "nvrtcGetProgramLog") &&
          sym(n.ptx_size, "nvrtcGetPTXSize") && sym(n.ptx, "nvrtcGetPTX") &&
          sym(n.destroy, "nvrtcDestroyProgram") && sym(n.cubin_size, "nvrtcGetCUBINSize") &&
          sym(n.cubin, "nvrtcGetCUBIN")))
      n.lib = nullptr;
    return n;
  }
};

struct CompileResult {
  bool ok;
  std::string log, ptx, cubin;
};

// Compiles `source` with every prelude header given to NVRTC in memory, as the CUDA JIT does.
CompileResult nvrtc_compile(Nvrtc& nv, const std::string& source,
                            const std::vector<std::string>& options) {
  std::vector<std::string> names, texts;
  fs::path root = prelude_dir();
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".h") continue;
    names.push_back(fs::relative(e.path(), root).generic_string());
    texts.push_back(read_file(e.path()));
  }
  std::vector<const char*> n, t, o;
  for (size_t k = 0; k < names.size(); ++k) {
    n.push_back(names[k].c_str());
    t.push_back(texts[k].c_str());
  }
  for (const auto& s : options) o.push_back(s.c_str());
  nvrtcProgram prog = nullptr;
  CompileResult r{false, "", "", ""};
  if (nv.create(&prog, source.c_str(), "coverage.cu", int(n.size()), t.data(), n.data()) != 0) {
    r.log = "nvrtcCreateProgram failed";
    return r;
  }
  r.ok = nv.compile(prog, int(o.size()), o.data()) == 0;
  size_t size = 0;
  nv.log_size(prog, &size);
  r.log.resize(size);
  if (size) nv.log(prog, r.log.data());
  if (r.ok) {
    nv.ptx_size(prog, &size);
    r.ptx.resize(size);
    nv.ptx(prog, r.ptx.data());
    if (nv.cubin_size(prog, &size) == 0 && size) {
      r.cubin.resize(size);
      nv.cubin(prog, r.cubin.data());
    }
  }
  nv.destroy(&prog);
  return r;
}

class PreludeNvrtc : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(prelude_dir() / "metal_stdlib.h"))
      GTEST_SKIP() << "prelude sources not found at " << prelude_dir();
    nv_ = Nvrtc::get();
    if (!nv_) GTEST_SKIP() << "NVRTC (libnvrtc.so) could not be loaded";
  }
  Nvrtc* nv_ = nullptr;
};

TEST_F(PreludeNvrtc, CoverageCompilesCxx17) {
  // PTX for compute_90 (no ptxas pass: half the time); the semantic kernels below go to cubin.
  CompileResult r = nvrtc_compile(*nv_, kCoverage, {"--gpu-architecture=compute_90", "-std=c++17"});
  ASSERT_TRUE(r.ok) << r.log;
  // The prelude's own primitives reached the PTX: f16 conversions, warp shuffles, atomics.
  EXPECT_NE(r.ptx.find("cvt.rn.f16.f32"), std::string::npos);
  EXPECT_NE(r.ptx.find("shfl.sync"), std::string::npos);
  EXPECT_NE(r.ptx.find("atom."), std::string::npos);
  EXPECT_NE(r.ptx.find("bar.sync"), std::string::npos);
}

TEST_F(PreludeNvrtc, CoverageCompilesCxx20FastMath) {
  CompileResult r = nvrtc_compile(
      *nv_, kCoverage,
      {"--gpu-architecture=compute_90", "-std=c++20", "-DALLOY_MATH_FAST", "-D__FAST_MATH__",
       "--use_fast_math", "-DALLOY_COVERAGE_MATH_ONLY"});  // the math paths differ
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_NE(r.ptx.find("ex2.approx"), std::string::npos);
}

TEST_F(PreludeNvrtc, CompileErrorsAreReported) {
  // The harness can fail: a kernel using an undeclared name does not compile.
  CompileResult r =
      nvrtc_compile(*nv_,
                    "#include \"metal_stdlib.h\"\nnamespace metal { ALLOY_FN float f(float x) { "
                    "return not_a_metal_function(x); } }\n",
                    {"--gpu-architecture=sm_90", "-std=c++17"});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.log.find("not_a_metal_function"), std::string::npos);
}

// The same unit through the CPU target layer, with the host compiler the CPU JIT would use.
TEST(PreludeCpuHost, CoverageCompilesWithHostCompiler) {
  if (!fs::exists(prelude_dir() / "metal_stdlib.h")) GTEST_SKIP() << "prelude sources not found";
  const char* cxx_env = std::getenv("ALLOY_CXX");
  std::string cxx = cxx_env && *cxx_env ? cxx_env : "c++";
  if (std::system((cxx + " --version > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "no host compiler (" << cxx << ")";
  fs::path dir = fs::temp_directory_path() / ("alloy_prelude_cov_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path src = dir / "coverage.cpp";
  std::ofstream(src) << kCoverage;
  for (const char* mode : {"", "-DALLOY_MATH_FAST -D__FAST_MATH__"}) {
    std::string cmd = cxx + " -std=c++20 -O0 -fsyntax-only -Wall -Werror -Wno-unused " + mode +
                      " -I" + prelude_dir().string() + " " + src.string() + " > " +
                      (dir / "log.txt").string() + " 2>&1";
    int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd << "\n" << read_file(dir / "log.txt");
  }
  fs::remove_all(dir);
}

// ---- Semantics on a GPU (CUDA driver through dlopen; skipped without one) ----

const char* kSemantics = R"ALLOY(
#include "metal_stdlib.h"
namespace metal {

// One thread per lane; lanes outside mask[warp] return first, leaving a partial simdgroup.
ALLOY_FN void simd_check(float* out, const uint* masks, uint tid) {
  uint lane = tid % 32, warp = tid / 32;
  if (!((masks[warp] >> lane) & 1u)) return;
  float v = 1.0f + 0.25f * float((lane * 7) % 13);
  float* o = out + tid * 24;
  o[0] = simd_sum(v);
  o[1] = simd_min(v);
  o[2] = simd_max(v);
  o[3] = simd_prefix_inclusive_sum(v);
  o[4] = simd_prefix_exclusive_sum(v);
  o[5] = simd_shuffle_down(v, 1);
  o[6] = simd_shuffle_up(v, 2);
  o[7] = simd_shuffle_xor(v, 1);
  o[8] = simd_broadcast_first(v);
  o[9] = simd_shuffle_rotate_down(v, 1);
  o[10] = float(simd_sum(half(v)));
  float4 s4 = simd_sum(float4(v, 1.0f, float(lane), 2.0f));
  o[11] = s4.x;
  o[12] = s4.y;
  o[13] = s4.z;
  o[14] = float(simd_sum(int(lane)));
  o[15] = float(simd_and(int(lane) | 0x100));
  o[16] = as_type<float>(uint(uint64_t(simd_ballot(v > 2.0f))));
  o[17] = float(simd_all(v > 0.0f)) + 2.0f * float(simd_any(v > 3.5f));
  o[18] = float(simd_is_first());
  o[19] = float(simd_prefix_inclusive_product(int(lane % 3 + 1)));
  o[20] = float(simd_prefix_exclusive_product(int(lane % 3 + 1)));
  long2 w = simd_shuffle(long2(lane, -long(lane)), 0);
  o[21] = float(w.x + w.y * 100);
  o[22] = simd_broadcast(v, 31 - clz(masks[warp]));
  o[23] = float(simd_sum(bfloat(v)));
}

ALLOY_FN void convert_check(uint* out, const float* in, uint tid) {
  out[tid] = as_type<uint>(float(half::from_bits(ushort(tid))));
  out[65536 + tid] = uint(half(in[tid]).alloy_bits) | (uint(bfloat(in[tid]).alloy_bits) << 16);
}

ALLOY_FN void math_check(float* out, const float* in, uint tid) {
  float x = in[tid];
  float* o = out + tid * 8;
  o[0] = precise::exp(x);
  o[1] = precise::log(fabs(x) + 1e-3f);
  o[2] = precise::sin(x);
  o[3] = fast::exp(x);
  o[4] = float(exp(half(x)));
  o[5] = precise::tanh(x);
  o[6] = precise::pow(fabs(x) + 0.5f, 1.7f);
  o[7] = precise::sqrt(fabs(x));
  if (tid == 0) {
    out[4096 * 8 + 0] = exp(-INFINITY) + fast::exp(-INFINITY) + precise::exp(-INFINITY) +
                        fast::exp2(-INFINITY) + float(exp(half(-INFINITY))) +
                        float(fast::exp(bfloat(-INFINITY))) + fast::exp(-FLT_MAX);
    out[4096 * 8 + 1] = float(isinf(exp(INFINITY))) + float(isnan(log(-1.0f))) +
                        float(max(NAN, 1.0f) == 1.0f) + float(min(2.0f, NAN) == 2.0f);
  }
}

ALLOY_FN void atomic_check(float* fsum, int* isum, uint* umax, float* fmin, int* per_group,
                           uint tid, uint lid, uint gid) {
  ALLOY_THREADGROUP(atomic_int, , counter, 0);
  if (lid == 0) atomic_store_explicit(&counter, 0, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit((atomic_float*)fsum, 1.0f, memory_order_relaxed);
  atomic_fetch_add_explicit((atomic_int*)isum, 2, memory_order_relaxed);
  atomic_fetch_max_explicit((atomic_uint*)umax, tid, memory_order_relaxed);
  atomic_fetch_min_explicit((atomic_float*)fmin, -float(tid), memory_order_relaxed);
  atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_none);  // still orders threadgroup memory
  if (lid == 0) per_group[gid] = atomic_load_explicit(&counter, memory_order_relaxed);
}

ALLOY_FN void tg_reduce(const float* in, float* out, uint tid, uint lid, uint gid) {
  ALLOY_THREADGROUP(float, [256], buf, 1);
  buf[lid] = in[tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = 128; s > 0; s >>= 1) {
    if (lid < s) buf[lid] += buf[lid + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (lid == 0) out[gid] = buf[0];
}

ALLOY_FN void quad_check(float* out, const uint* masks, uint tid) {
  uint lane = tid % 32, warp = tid / 32;
  if (!((masks[warp] >> lane) & 1u)) return;
  float v = float(lane + 1);
  float* o = out + tid * 6;
  o[0] = quad_sum(v);
  o[1] = quad_prefix_exclusive_sum(v);
  o[2] = quad_shuffle_down(v, 1);
  o[3] = quad_broadcast_first(v);
  o[4] = float(uint16_t(quad_ballot(lane % 2 == 0)));
  o[5] = quad_max(v);
}

// One simdgroup: d = a * transpose(b) + c with a read at an offset, then the same in half.
ALLOY_FN void sgmatrix_check(const float* a, const float* b, const float* c, float* d,
                             half* dh) {
  simdgroup_float8x8 ma, mb, mc, md;
  simdgroup_load(ma, a, 10, ulong2(1, 0));
  simdgroup_load(mb, b, 8, ulong2(0, 0), true);
  simdgroup_load(mc, c);
  simdgroup_multiply_accumulate(md, ma, mb, mc);
  simdgroup_store(md, d);
  simdgroup_half8x8 ha, hb, hd;
  simdgroup_load(ha, a, 10, ulong2(1, 0));
  simdgroup_load(hb, b, 8, ulong2(0, 0), true);
  simdgroup_multiply(hd, ha, hb);
  simdgroup_store(hd, dh);
}

}  // namespace metal

#define TID (blockIdx.x * blockDim.x + threadIdx.x)
extern "C" __global__ void k_quad(float* out, const unsigned* masks) {
  metal::quad_check(out, masks, TID);
}
extern "C" __global__ void k_sgmatrix(const float* a, const float* b, const float* c, float* d,
                                      metal::half* dh) {
  metal::sgmatrix_check(a, b, c, d, dh);
}
extern "C" __global__ void k_simd(float* out, const unsigned* masks) {
  metal::simd_check(out, masks, TID);
}
extern "C" __global__ void k_convert(unsigned* out, const float* in) {
  metal::convert_check(out, in, TID);
}
extern "C" __global__ void k_math(float* out, const float* in) { metal::math_check(out, in, TID); }
extern "C" __global__ void k_atomic(float* fsum, int* isum, unsigned* umax, float* fmin,
                                    int* per_group) {
  metal::atomic_check(fsum, isum, umax, fmin, per_group, TID, threadIdx.x, blockIdx.x);
}
extern "C" __global__ void k_tg_reduce(const float* in, float* out) {
  metal::tg_reduce(in, out, TID, threadIdx.x, blockIdx.x);
}
)ALLOY";

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef unsigned long long CUdeviceptr;

struct Cuda {
  void* lib = nullptr;
  CUresult (*init)(unsigned);
  CUresult (*device_count)(int*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_retain)(CUcontext*, CUdevice);
  CUresult (*set_current)(CUcontext);
  CUresult (*module_load)(CUmodule*, const void*);
  CUresult (*module_function)(CUfunction*, CUmodule, const char*);
  CUresult (*alloc)(CUdeviceptr*, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void*, size_t);
  CUresult (*dtoh)(void*, CUdeviceptr, size_t);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void*, void**, void**);
  CUresult (*sync)();
  CUmodule module = nullptr;

  // The first CUDA device, or nullptr (with the reason) when there is none.
  static Cuda* get(std::string* why) {
    static Cuda c;
    static std::string reason = c.load();
    *why = reason;
    return reason.empty() ? &c : nullptr;
  }
  std::string load() {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return "no CUDA driver (libcuda.so.1)";
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      ok = ok && fn;
    };
    sym(init, "cuInit");
    sym(device_count, "cuDeviceGetCount");
    sym(device_get, "cuDeviceGet");
    sym(primary_retain, "cuDevicePrimaryCtxRetain");
    sym(set_current, "cuCtxSetCurrent");
    sym(module_load, "cuModuleLoadData");
    sym(module_function, "cuModuleGetFunction");
    sym(alloc, "cuMemAlloc_v2");
    sym(free, "cuMemFree_v2");
    sym(htod, "cuMemcpyHtoD_v2");
    sym(dtoh, "cuMemcpyDtoH_v2");
    sym(launch, "cuLaunchKernel");
    sym(sync, "cuCtxSynchronize");
    if (!ok) return "incomplete CUDA driver";
    int n = 0;
    if (init(0) != 0 || device_count(&n) != 0 || n == 0) return "no CUDA device";
    CUdevice dev;
    CUcontext ctx;
    if (device_get(&dev, 0) || primary_retain(&ctx, dev) || set_current(ctx))
      return "cannot create a CUDA context";
    return "";
  }
};

class PreludeCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    cu_ = Cuda::get(&why);
    if (!cu_) GTEST_SKIP() << why;
    nv_ = Nvrtc::get();
    if (!nv_) GTEST_SKIP() << "NVRTC (libnvrtc.so) could not be loaded";
    if (!cu_->module) {
      CompileResult r = nvrtc_compile(*nv_, kSemantics, {"--gpu-architecture=sm_90", "-std=c++17"});
      ASSERT_TRUE(r.ok) << r.log;
      ASSERT_EQ(cu_->module_load(&cu_->module, r.cubin.empty() ? r.ptx.c_str() : r.cubin.data()),
                0);
    }
  }
  template <class T>
  CUdeviceptr upload(const std::vector<T>& v) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cu_->alloc(&p, v.size() * sizeof(T)), 0);
    EXPECT_EQ(cu_->htod(p, v.data(), v.size() * sizeof(T)), 0);
    buffers_.push_back(p);
    return p;
  }
  template <class T>
  std::vector<T> download(CUdeviceptr p, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cu_->dtoh(v.data(), p, n * sizeof(T)), 0);
    return v;
  }
  void run(const char* name, unsigned blocks, unsigned threads, std::vector<CUdeviceptr> args) {
    CUfunction f;
    ASSERT_EQ(cu_->module_function(&f, cu_->module, name), 0) << name;
    std::vector<void*> params;
    for (auto& a : args) params.push_back(&a);
    ASSERT_EQ(cu_->launch(f, blocks, 1, 1, threads, 1, 1, 0, nullptr, params.data(), nullptr), 0);
    ASSERT_EQ(cu_->sync(), 0) << name;
  }
  void TearDown() override {
    if (cu_)
      for (auto p : buffers_) cu_->free(p);
  }
  Cuda* cu_ = nullptr;
  Nvrtc* nv_ = nullptr;
  std::vector<CUdeviceptr> buffers_;
};

float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST_F(PreludeCuda, SimdFunctionsInPartialSimdgroups) {
  // Full, prefix (a partial threadgroup), scattered, and contiguous non-prefix live masks.
  std::vector<uint32_t> masks = {0xffffffffu, 0x000fffffu, 0x5a5a00f1u, 0x0ffffff8u, 0x1u};
  const int K = 24;
  std::vector<float> poison(masks.size() * 32 * K, NAN);
  CUdeviceptr out = upload(poison), m = upload(masks);
  run("k_simd", 1, unsigned(masks.size() * 32), {out, m});
  std::vector<float> o = download<float>(out, poison.size());
  for (size_t w = 0; w < masks.size(); ++w) {
    uint32_t live = masks[w];
    auto x = [](uint32_t l) { return 1.0f + 0.25f * float((l * 7) % 13); };
    float sum = 0, mn = INFINITY, mx = -INFINITY;
    int isum = 0, iand = 0x1ff;
    uint32_t ballot = 0, first = __builtin_ctz(live), top = 31 - __builtin_clz(live);
    for (uint32_t l = 0; l < 32; ++l)
      if ((live >> l) & 1) {
        sum += x(l);
        mn = std::min(mn, x(l));
        mx = std::max(mx, x(l));
        isum += int(l);
        iand &= int(l) | 0x100;
        if (x(l) > 2.0f) ballot |= 1u << l;
      }
    float incl = 0;
    int pincl = 1;
    for (uint32_t l = 0; l < 32; ++l) {
      const float* r = &o[(w * 32 + l) * K];
      if (!((live >> l) & 1)) {
        EXPECT_TRUE(std::isnan(r[0])) << "lane outside the mask wrote";
        continue;
      }
      SCOPED_TRACE("mask " + std::to_string(live) + " lane " + std::to_string(l));
      auto own_or = [&](uint32_t src) { return src < 32 && ((live >> src) & 1) ? x(src) : x(l); };
      EXPECT_EQ(r[0], sum);
      EXPECT_EQ(r[1], mn);
      EXPECT_EQ(r[2], mx);
      EXPECT_EQ(r[4], incl);
      incl += x(l);
      EXPECT_EQ(r[3], incl);
      EXPECT_EQ(r[5], own_or(l + 1));
      EXPECT_EQ(r[6], l >= 2 ? own_or(l - 2) : x(l));
      EXPECT_EQ(r[7], own_or(l ^ 1));
      EXPECT_EQ(r[8], x(first));
      EXPECT_EQ(r[9], own_or((l + 1) % (top + 1)));
      EXPECT_NEAR(r[10], sum, sum * 2e-3);
      EXPECT_EQ(r[11], sum);
      EXPECT_EQ(r[12], float(__builtin_popcount(live)));
      EXPECT_EQ(r[13], float(isum));
      EXPECT_EQ(r[14], float(isum));
      EXPECT_EQ(r[15], float(iand));
      EXPECT_EQ(as_uint(r[16]), ballot);
      EXPECT_EQ(r[17], 1.0f + 2.0f * float(mx > 3.5f));
      EXPECT_EQ(r[18], float(l == first));
      EXPECT_EQ(r[20], float(pincl));
      pincl *= int(l % 3 + 1);
      EXPECT_EQ(r[19], float(pincl));
      uint32_t src0 = (live & 1u) ? 0u : l;  // lane 0, or the caller's own value
      EXPECT_EQ(r[21], float(src0) - 100.0f * float(src0));
      EXPECT_EQ(r[22], x(top));
      EXPECT_NEAR(r[23], sum, sum * 1e-2);
    }
  }
}

TEST_F(PreludeCuda, HalfAndBfloatConversions) {
  std::vector<float> in(65536);
  std::mt19937 rng(21);
  for (auto& f : in) {
    f = std::ldexp(1.0f + float(rng() % 1000000) / 1e6f, int(rng() % 60) - 30);
    if (rng() & 1) f = -f;
  }
  in[0] = 65520.0f;
  in[1] = 65519.0f;
  in[2] = 2.9802322e-08f;  // half of the smallest subnormal half: ties to even (zero)
  in[3] = INFINITY;
  CUdeviceptr out = upload(std::vector<uint32_t>(2 * 65536, 0xffffffffu)), src = upload(in);
  run("k_convert", 256, 256, {out, src});
  std::vector<uint32_t> o = download<uint32_t>(out, 2 * 65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    float ref = alloy_portable::f16_bits_to_f32(uint16_t(b));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(as_float(o[b]))) << b;
    } else {
      ASSERT_EQ(o[b], as_uint(ref)) << b;
    }
  }
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(o[65536 + i] & 0xffffu, alloy_portable::f32_to_f16_bits(in[i])) << in[i];
    ASSERT_EQ(o[65536 + i] >> 16, alloy_portable::f32_to_bf16_bits(in[i])) << in[i];
  }
}

TEST_F(PreludeCuda, MathAccuracyAndSpecialValues) {
  std::vector<float> in(4096);
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> d(-20.0f, 20.0f);
  for (auto& f : in) f = d(rng);
  CUdeviceptr out = upload(std::vector<float>(4096 * 8 + 2, NAN)), src = upload(in);
  run("k_math", 16, 256, {out, src});
  std::vector<float> o = download<float>(out, 4096 * 8 + 2);
  auto ulps = [](float a, double r) {  // distance to r in units of float's ulp at r
    float rf = std::fabs(float(r));
    double ulp = double(std::nextafter(rf, INFINITY)) - double(rf);
    return std::fabs(double(a) - r) / std::max(ulp, 1e-45);
  };
  for (size_t i = 0; i < in.size(); ++i) {
    double x = in[i];
    const float* r = &o[i * 8];
    EXPECT_LE(ulps(r[0], std::exp(x)), 2) << x;
    EXPECT_LE(ulps(r[1], std::log(double(std::fabs(in[i]) + 1e-3f))), 2) << x;
    EXPECT_LE(std::fabs(r[2] - std::sin(x)), 2e-7) << x;
    EXPECT_LE(std::fabs(r[3] - std::exp(x)), 2e-6 * std::exp(x) + 1e-30) << x;  // fast
    if (std::fabs(x) < 11) {
      double hx = float(metal::half(in[i]));  // the kernel rounds x to half first
      EXPECT_LE(std::fabs(r[4] - std::exp(hx)), std::exp(hx) * 1e-3 + 1e-7) << x;
    }
    EXPECT_LE(std::fabs(r[5] - std::tanh(x)), 3e-7) << x;
    EXPECT_LE(ulps(r[6], std::pow(double(std::fabs(in[i]) + 0.5f), double(1.7f))), 4) << x;
    EXPECT_LE(ulps(r[7], std::sqrt(std::fabs(x))), 1) << x;
  }
  EXPECT_EQ(o[4096 * 8 + 0], 0.0f);  // exp(-inf) == 0 in every mode and type
  EXPECT_EQ(o[4096 * 8 + 1], 4.0f);
}

TEST_F(PreludeCuda, AtomicsAndThreadgroupMemory) {
  const unsigned blocks = 64, threads = 256, n = blocks * threads;
  CUdeviceptr fsum = upload(std::vector<float>{0.0f}), isum = upload(std::vector<int>{0}),
              umax = upload(std::vector<uint32_t>{0}), fmin = upload(std::vector<float>{1.0f}),
              per_group = upload(std::vector<int>(blocks, -1));
  run("k_atomic", blocks, threads, {fsum, isum, umax, fmin, per_group});
  EXPECT_EQ(download<float>(fsum, 1)[0], float(n));
  EXPECT_EQ(download<int>(isum, 1)[0], int(2 * n));
  EXPECT_EQ(download<uint32_t>(umax, 1)[0], n - 1);
  EXPECT_EQ(download<float>(fmin, 1)[0], -float(n - 1));
  for (int c : download<int>(per_group, blocks)) EXPECT_EQ(c, int(threads));
  std::vector<float> in(16 * 256);
  std::mt19937 rng(23);
  for (auto& f : in) f = float(rng() % 1000) / 8.0f;  // exact sums
  CUdeviceptr src = upload(in), out = upload(std::vector<float>(16, NAN));
  run("k_tg_reduce", 16, 256, {src, out});
  std::vector<float> r = download<float>(out, 16);
  for (int g = 0; g < 16; ++g) {
    float ref = 0;
    for (int t = 0; t < 256; ++t) ref += in[g * 256 + t];
    EXPECT_EQ(r[g], ref) << g;
  }
}

TEST_F(PreludeCuda, QuadFunctionsInPartialSimdgroups) {
  std::vector<uint32_t> masks = {0xffffffffu, 0x000fffffu, 0x5a5a00f1u};
  std::vector<float> poison(masks.size() * 32 * 6, NAN);
  CUdeviceptr out = upload(poison), m = upload(masks);
  run("k_quad", 1, unsigned(masks.size() * 32), {out, m});
  std::vector<float> o = download<float>(out, poison.size());
  for (size_t w = 0; w < masks.size(); ++w) {
    uint32_t live = masks[w];
    for (uint32_t l = 0; l < 32; ++l) {
      if (!((live >> l) & 1)) continue;
      const float* r = &o[(w * 32 + l) * 6];
      uint32_t base = l & ~3u;
      float sum = 0, ex = 0, mx = 0;
      int first = -1, ballot = 0;
      for (uint32_t k = base; k < base + 4; ++k)
        if ((live >> k) & 1) {
          sum += float(k + 1);
          mx = std::max(mx, float(k + 1));
          if (k < l) ex += float(k + 1);
          if (first < 0) first = int(k);
          if (k % 2 == 0) ballot |= 1 << (k - base);
        }
      bool down_live = (l & 3) < 3 && ((live >> (l + 1)) & 1);
      SCOPED_TRACE("mask " + std::to_string(live) + " lane " + std::to_string(l));
      EXPECT_EQ(r[0], sum);
      EXPECT_EQ(r[1], ex);
      EXPECT_EQ(r[2], down_live ? float(l + 2) : float(l + 1));
      EXPECT_EQ(r[3], float(first + 1));
      EXPECT_EQ(r[4], float(ballot));
      EXPECT_EQ(r[5], mx);
    }
  }
}

TEST_F(PreludeCuda, SimdgroupMatrixMultiply) {
  std::vector<float> a(8 * 10), b(64), c(64);
  std::mt19937 rng(32);
  for (auto& x : a) x = float(int(rng() % 17) - 8) / 4;
  for (auto& x : b) x = float(int(rng() % 17) - 8) / 4;
  for (auto& x : c) x = float(int(rng() % 17) - 8);
  CUdeviceptr da = upload(a), db = upload(b), dc = upload(c),
              dd = upload(std::vector<float>(64, NAN)),
              dh = upload(std::vector<uint16_t>(64, 0xffff));
  run("k_sgmatrix", 1, 32, {da, db, dc, dd, dh});
  std::vector<float> d = download<float>(dd, 64);
  std::vector<uint16_t> h = download<uint16_t>(dh, 64);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      double ab = 0;
      for (int k = 0; k < 8; ++k) ab += double(a[i * 10 + 1 + k]) * b[j * 8 + k];
      EXPECT_EQ(d[i * 8 + j], float(ab + c[i * 8 + j])) << i << " " << j;  // exact: quarters
      EXPECT_EQ(alloy_portable::f16_bits_to_f32(h[i * 8 + j]), float(ab)) << i << " " << j;
    }
}

}  // namespace
