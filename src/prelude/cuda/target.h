// CUDA target layer of the Metal prelude (see ../README.md), compiled by NVRTC: no system headers.
// A Metal threadgroup is a CUDA block and a simdgroup a warp (both formed from the linear thread
// index, x fastest). The live lanes of a simdgroup are __activemask(): lanes past the grid's edge
// have returned, and lanes in divergent branches are not active, as on Metal.
#pragma once

#define ALLOY_TARGET_CUDA 1
#define ALLOY_FN __device__ __forceinline__

typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;  // LP64, as on the host: int64_t and long are the same type
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef decltype(sizeof(0)) size_t;
typedef decltype((int*)0 - (int*)0) ptrdiff_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;

#define ALLOY_THREADGROUP(type, dims, name, slot) __shared__ type name dims

namespace alloy_target {

// ---- threadgroup declarations (the translator's CUDA form, src/msl/target.cpp) ----
// `threadgroup T a[N];` becomes a reference to tg_storage<T[N], end, slot>(), where `end` is the
// object's end in the kernel's threadgroup frame (declaration order, 16-byte granules), a
// constant of the instantiation. Objects ending within Metal's 32 KiB are __shared__ variables.
// Past it (MLX instantiates kernels declaring more than Metal allows, e.g. its float32 attention
// with head dimension 256: 53,760 bytes), CUDA's 48 KiB limit on static shared memory would
// reject the kernel: they sit in the block's dynamic shared memory instead, `end` bytes below its
// top (threadgroup parameters start at its bottom). A module holding such an object defines
// tg_large<1>; the backend then launches its functions with all the dynamic shared memory the
// device allows (src/backend/cuda/launch.cpp), and a block that got less stops (__trap).
#define ALLOY_TG_STATIC_MAX 32768u
template <class T>
ALLOY_FN constexpr unsigned tg_end(unsigned prev) {
  return (prev + static_cast<unsigned>(sizeof(T)) + 15u) / 16u * 16u;
}
template <int N>
__device__ int tg_large = 0;
template <class T, unsigned End, int Slot>
ALLOY_FN T& tg_storage() {
  if constexpr (End <= ALLOY_TG_STATIC_MAX) {
    __shared__ T storage;
    return storage;
  } else {
    extern __shared__ __align__(16) unsigned char alloy_dyn_smem[];
    unsigned size;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
    if (End > size) __trap();
    // tg_large<1> named through End: a non-dependent name would be instantiated with the
    // template's definition, so every module would define it (and launch with all the dynamic
    // shared memory the device allows: one block per multiprocessor).
    asm volatile("" ::"l"(&tg_large<static_cast<int>(End > ALLOY_TG_STATIC_MAX)>));
    return *reinterpret_cast<T*>(alloy_dyn_smem + (size - End));
  }
}

ALLOY_FN void copy_bytes(void* dst, const void* src, size_t n) {
  memcpy(dst, src, n);
}

// ---- Half precision conversions (round to nearest even) ----

ALLOY_FN float f16_to_f32(uint16_t bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}
ALLOY_FN uint16_t f32_to_f16(float x) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}

// ---- Fast math: hardware approximations (ex2.approx(-inf) == +0, so fast_exp(-inf) == 0) ----

ALLOY_FN float fast_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// exp10 as exp2 of x * log2(10): the product's rounding gives up to ~2|x| ulp, Metal's fast bound.
ALLOY_FN float fast_exp10(float x) {
  return fast_exp2(x * 3.32192809488736234787f);
}
ALLOY_FN float fast_exp(float x) {
  return __expf(x);
}
ALLOY_FN float precise_exp(float x) {
  return ::expf(x);
}
ALLOY_FN float fast_log(float x) {
  return __logf(x);
}
ALLOY_FN float fast_log2(float x) {
  return __log2f(x);
}
ALLOY_FN float fast_sin(float x) {
  return __sinf(x);
}
ALLOY_FN float fast_cos(float x) {
  return __cosf(x);
}
ALLOY_FN float fast_tan(float x) {
  return __tanf(x);
}
ALLOY_FN float fast_pow(float x, float y) {
  return __powf(x, y);
}
ALLOY_FN float fast_rsqrt(float x) {
  return ::rsqrtf(x);
}
ALLOY_FN float fast_sqrt(float x) {
  return __fsqrt_rn(x);
}
ALLOY_FN float fast_divide(float x, float y) {
  return __fdividef(x, y);
}

// ---- Bit operations ----

ALLOY_FN uint32_t clz32(uint32_t x) {
  return __clz(static_cast<int>(x));
}
ALLOY_FN uint32_t clz64(uint64_t x) {
  return __clzll(static_cast<long long>(x));
}
ALLOY_FN uint32_t ctz32(uint32_t x) {
  return x ? __ffs(static_cast<int>(x)) - 1 : 32u;
}
ALLOY_FN uint32_t ctz64(uint64_t x) {
  return x ? __ffsll(static_cast<long long>(x)) - 1 : 64u;
}
ALLOY_FN uint32_t popcount32(uint32_t x) {
  return __popc(x);
}
ALLOY_FN uint32_t popcount64(uint64_t x) {
  return __popcll(x);
}
ALLOY_FN uint32_t mulhi_u32(uint32_t a, uint32_t b) {
  return __umulhi(a, b);
}
ALLOY_FN int32_t mulhi_s32(int32_t a, int32_t b) {
  return __mulhi(a, b);
}
ALLOY_FN uint64_t mulhi_u64(uint64_t a, uint64_t b) {
  return __umul64hi(a, b);
}
ALLOY_FN int64_t mulhi_s64(int64_t a, int64_t b) {
  return __mul64hi(a, b);
}
ALLOY_FN uint32_t reverse_bits32(uint32_t x) {
  return __brev(x);
}

// Lanes and atomics: only for the optional headers that use them (metal_stdlib.h).
#ifdef ALLOY_NEED_TARGET_SYNC
// ---- Lanes ----

ALLOY_FN uint32_t lane_id() {
  uint32_t l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}
ALLOY_FN uint32_t live_mask() {
  return __activemask();
}

// Values of any size travel as 32-bit words.
template <class T>
struct words {
  static constexpr int n = (sizeof(T) + 3) / 4;
  uint32_t w[n];
};
template <class T>
ALLOY_FN words<T> to_words(const T& v) {
  words<T> r;
  if constexpr (sizeof(T) % 4 != 0) r.w[words<T>::n - 1] = 0;
  memcpy(r.w, &v, sizeof(T));
  return r;
}
template <class T>
ALLOY_FN T from_words(const words<T>& w) {
  T v;
  memcpy(&v, w.w, sizeof(T));
  return v;
}
template <class T>
ALLOY_FN T shfl_idx(uint32_t mask, const T& v, uint32_t src) {
  words<T> w = to_words(v);
#pragma unroll
  for (int i = 0; i < words<T>::n; ++i) w.w[i] = __shfl_sync(mask, w.w[i], src);
  return from_words<T>(w);
}
template <class T>
ALLOY_FN T shfl_xor(uint32_t mask, const T& v, uint32_t m) {
  words<T> w = to_words(v);
#pragma unroll
  for (int i = 0; i < words<T>::n; ++i) w.w[i] = __shfl_xor_sync(mask, w.w[i], m);
  return from_words<T>(w);
}
template <class T>
ALLOY_FN T shfl_down(uint32_t mask, const T& v, uint32_t d) {
  words<T> w = to_words(v);
#pragma unroll
  for (int i = 0; i < words<T>::n; ++i) w.w[i] = __shfl_down_sync(mask, w.w[i], d);
  return from_words<T>(w);
}
template <class T>
ALLOY_FN T shfl_up(uint32_t mask, const T& v, uint32_t d) {
  words<T> w = to_words(v);
#pragma unroll
  for (int i = 0; i < words<T>::n; ++i) w.w[i] = __shfl_up_sync(mask, w.w[i], d);
  return from_words<T>(w);
}

// Live lanes contiguous ([a, b)): the usual tree algorithms work on that range.
ALLOY_FN bool contiguous(uint32_t mask) {
  uint32_t m = mask >> (__ffs(static_cast<int>(mask)) - 1);
  return (m & (m + 1)) == 0;
}

template <class T>
ALLOY_FN T shuffle(T v, uint32_t src) {
  uint32_t mask = __activemask();
  T r = shfl_idx(mask, v, src & 31u);
  return (src < 32 && ((mask >> src) & 1u)) ? r : v;
}

// Partial simdgroups take these out-of-line paths (keeping the full-warp path small).
// Live lanes contiguous, [first, end): a tree over that range; lane i accumulates [i, i + 2d)
// from lane i + d, so the first live lane ends with the whole fold, in lane order.
template <class T, class Op>
__device__ __noinline__ T reduce_contiguous(T v, Op op, uint32_t mask) {
  uint32_t lane = lane_id();
  uint32_t first = __ffs(static_cast<int>(mask)) - 1;
  uint32_t end = 32 - __clz(static_cast<int>(mask));
  for (uint32_t d = 1; d < 32; d <<= 1) {
    T o = shfl_down(mask, v, d);
    if (lane + d < end) v = op(v, o);
  }
  return shfl_idx(mask, v, first);
}
// Any other mask: every lane reads each live lane's value in order.
template <class T, class Op>
__device__ __noinline__ T reduce_any(T v, Op op, uint32_t mask) {
  T acc = v;
  bool have = false;
  for (uint32_t m = mask; m; m &= m - 1) {
    uint32_t l = __ffs(static_cast<int>(m)) - 1;
    T x = shfl_idx(mask, v, l);
    acc = have ? op(acc, x) : x;
    have = true;
  }
  return acc;
}

// op folded over the live lanes in lane order (tree-shaped); every lane gets the same result.
template <class T, class Op>
ALLOY_FN T reduce(T v, Op op) {
  uint32_t mask = __activemask();
  if (mask != 0xffffffffu)
    return contiguous(mask) ? reduce_contiguous(v, op, mask) : reduce_any(v, op, mask);
#pragma unroll
  for (uint32_t d = 16; d >= 1; d >>= 1) {
    T o = shfl_xor(mask, v, d);
    // Both lanes of a pair compute op(lower, upper): same value, lane order kept. Where the
    // operands commute exactly (IEEE + and *, integer and bitwise ops), either order is that.
    if constexpr (Op::commutative)
      v = op(v, o);
    else
      v = (lane_id() & d) ? op(o, v) : op(v, o);
  }
  return v;
}

template <class T, class Op>
__device__ __noinline__ T inclusive_scan_any(T v, Op op, uint32_t mask) {
  uint32_t lane = lane_id();
  T acc = v;
  bool have = false;
  for (uint32_t m = mask; m; m &= m - 1) {
    uint32_t l = __ffs(static_cast<int>(m)) - 1;
    T x = shfl_idx(mask, v, l);
    if (l <= lane) {
      acc = have ? op(acc, x) : x;
      have = true;
    }
  }
  return acc;
}

// Prefix over the live lanes in lane order (Hillis-Steele over a contiguous range).
template <class T, class Op>
ALLOY_FN T inclusive_scan(T v, Op op) {
  uint32_t mask = __activemask();
  if (!contiguous(mask)) return inclusive_scan_any(v, op, mask);
  uint32_t lane = lane_id();
  uint32_t first = __ffs(static_cast<int>(mask)) - 1;
#pragma unroll
  for (uint32_t d = 1; d < 32; d <<= 1) {
    T o = shfl_up(mask, v, d);
    if (lane >= first + d) v = op(o, v);
  }
  return v;
}

ALLOY_FN uint64_t ballot(bool p) {
  return __ballot_sync(__activemask(), p);
}

// Barriers also order memory (Metal kernels sometimes pass mem_none and still exchange data).
ALLOY_FN void threadgroup_barrier() {
  __syncthreads();
}
ALLOY_FN void simdgroup_barrier() {
  __syncwarp(__activemask());
}

// ---- Atomics (relaxed) ----

template <class T>
ALLOY_FN T atomic_load(T* p) {
  return *static_cast<volatile T*>(p);
}
template <class T>
ALLOY_FN void atomic_store(T* p, T v) {
  *static_cast<volatile T*>(p) = v;
}

// Native 32/64-bit integer spellings of T for atomicCAS / atomicExch.
template <int Bytes>
struct cas_word;
template <>
struct cas_word<4> {
  typedef unsigned int type;
};
template <>
struct cas_word<8> {
  typedef unsigned long long type;
};

template <class T>
ALLOY_FN T atomic_exchange(T* p, T v) {
  typedef typename cas_word<sizeof(T)>::type W;
  W r = atomicExch(reinterpret_cast<W*>(p), __builtin_bit_cast(W, v));
  return __builtin_bit_cast(T, r);
}
template <class T>
ALLOY_FN bool atomic_compare_exchange(T* p, T* expected, T desired) {
  typedef typename cas_word<sizeof(T)>::type W;
  W e = __builtin_bit_cast(W, *expected);
  W old = atomicCAS(reinterpret_cast<W*>(p), e, __builtin_bit_cast(W, desired));
  if (old == e) return true;
  *expected = __builtin_bit_cast(T, old);
  return false;
}
template <class T, class F>
ALLOY_FN T atomic_rmw_cas(T* p, F f) {
  T old = atomic_load(p);
  while (!atomic_compare_exchange(p, &old, f(old))) {
  }
  return old;
}

// Maps int64_t/uint64_t (long) onto the long long overloads CUDA provides.
template <class T>
struct native {
  typedef T type;
};
template <>
struct native<long> {
  typedef long long type;
};
template <>
struct native<unsigned long> {
  typedef unsigned long long type;
};
#define ALLOY_CUDA_NATIVE(T, p) reinterpret_cast<typename native<T>::type*>(p)
#define ALLOY_CUDA_NATIVE_V(T, v) static_cast<typename native<T>::type>(v)

template <class T>
ALLOY_FN T atomic_fetch_add(T* p, T v) {
  return atomicAdd(ALLOY_CUDA_NATIVE(T, p), ALLOY_CUDA_NATIVE_V(T, v));
}
template <>
ALLOY_FN long atomic_fetch_add<long>(long* p, long v) {
  return static_cast<long>(
      atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v)));
}
template <class T>
ALLOY_FN T atomic_fetch_sub(T* p, T v) {
  if constexpr (static_cast<T>(0.5) != 0)  // floating point
    return atomicAdd(p, -v);
  else
    return atomic_fetch_add(p, static_cast<T>(T(0) - v));
}
template <class T>
ALLOY_FN T atomic_fetch_and(T* p, T v) {
  return atomicAnd(ALLOY_CUDA_NATIVE(T, p), ALLOY_CUDA_NATIVE_V(T, v));
}
template <class T>
ALLOY_FN T atomic_fetch_or(T* p, T v) {
  return atomicOr(ALLOY_CUDA_NATIVE(T, p), ALLOY_CUDA_NATIVE_V(T, v));
}
template <class T>
ALLOY_FN T atomic_fetch_xor(T* p, T v) {
  return atomicXor(ALLOY_CUDA_NATIVE(T, p), ALLOY_CUDA_NATIVE_V(T, v));
}
// min/max: native for integers; floats through CAS, ignoring NaN operands (fmin/fmax).
template <class T>
ALLOY_FN T atomic_fetch_min(T* p, T v) {
  if constexpr (static_cast<T>(0.5) != 0)
    return atomic_rmw_cas(p, [v](T o) { return v < o || o != o ? v : o; });
  else
    return atomicMin(ALLOY_CUDA_NATIVE(T, p), ALLOY_CUDA_NATIVE_V(T, v));
}
template <class T>
ALLOY_FN T atomic_fetch_max(T* p, T v) {
  if constexpr (static_cast<T>(0.5) != 0)
    return atomic_rmw_cas(p, [v](T o) { return v > o || o != o ? v : o; });
  else
    return atomicMax(ALLOY_CUDA_NATIVE(T, p), ALLOY_CUDA_NATIVE_V(T, v));
}
#undef ALLOY_CUDA_NATIVE
#undef ALLOY_CUDA_NATIVE_V

ALLOY_FN void fence_device() {
  __threadfence();
}
ALLOY_FN void fence_threadgroup() {
  __threadfence_block();
}

#endif  // ALLOY_NEED_TARGET_SYNC

}  // namespace alloy_target

// Clang's bit builtins, which Metal code may call (MLX's fft.h and hadamard.h compute constexpr
// sizes with __builtin_ctz): NVRTC has none of them in device code. constexpr loops, so that they
// fold in constant expressions as on Metal; at run time the compiler sees through them.
namespace alloy_builtin {
__host__ __device__ constexpr int ctz(unsigned long long x, int bits) {
  int n = 0;
  while (n < bits && !((x >> n) & 1ull)) ++n;
  return n;
}
__host__ __device__ constexpr int clz(unsigned long long x, int bits) {
  int n = 0;
  while (n < bits && !((x >> (bits - 1 - n)) & 1ull)) ++n;
  return n;
}
__host__ __device__ constexpr int popcount(unsigned long long x) {
  int n = 0;
  for (; x; x &= x - 1) ++n;
  return n;
}
}  // namespace alloy_builtin
#define __builtin_ctz(x) (::alloy_builtin::ctz(static_cast<unsigned int>(x), 32))
#define __builtin_ctzl(x) (::alloy_builtin::ctz(static_cast<unsigned long>(x), 64))
#define __builtin_ctzll(x) (::alloy_builtin::ctz(static_cast<unsigned long long>(x), 64))
#define __builtin_clz(x) (::alloy_builtin::clz(static_cast<unsigned int>(x), 32))
#define __builtin_clzl(x) (::alloy_builtin::clz(static_cast<unsigned long>(x), 64))
#define __builtin_clzll(x) (::alloy_builtin::clz(static_cast<unsigned long long>(x), 64))
#define __builtin_popcount(x) (::alloy_builtin::popcount(static_cast<unsigned int>(x)))
#define __builtin_popcountl(x) (::alloy_builtin::popcount(static_cast<unsigned long>(x)))
#define __builtin_popcountll(x) (::alloy_builtin::popcount(static_cast<unsigned long long>(x)))
