// CPU target layer of the Metal prelude (see ../README.md): everything metal/*.h needs that
// differs between targets. Kernels run on host threads; a threadgroup is run by one worker, its
// threads either as a plain loop or as fibers (cpu/abi.h). SIMD-group exchanges and barriers go
// through the runtime's alloy_cpu_sync table.
#pragma once

#define ALLOY_TARGET_CPU 1
#define ALLOY_FN inline
// The loop-mode entry (msl/target.cpp) and its per-thread body: the kernel and what it calls
// inline into the thread loop, whatever their size, so the loop can be vectorised.
#define ALLOY_CPU_LOOP_ENTRY __attribute__((flatten))
#define ALLOY_CPU_INLINE_LAMBDA __attribute__((always_inline))

// 512-bit vectors wherever the host has AVX-512. g++'s tuning for Intel's AVX-512 cores
// (-march=native on Skylake-SP through Sapphire/Emerald Rapids: "avx256_optimal") vectorises with
// 256-bit registers only; a kernel's thread loop then does twice the instructions per thread. The
// bench's tiled matmul library (one 16x16 group: 16 FMAs per thread and tile step, the thread
// loop 16 lanes wide) took 6.4-6.8 us per group on EPYC-2 compiled with -mtune=sapphirerapids
// (ymm only) and 4.0 us with this pragma (zmm), as with AMD's own tuning (docs/performance.md,
// h-cpu16c). It comes before every header, so that every function of the translation unit has the
// same target options (inlining across differing ones fails); a translated kernel sets it again
// after the prelude (msl/target.cpp, kCpu), since a precompiled prelude does not carry it.
// Arithmetic is the same operations in wider registers; vectorised math calls go to libmvec's
// AVX-512 variants (same accuracy bounds, the ones AMD hosts already use).
// ALLOY_CPU_NATIVE_VECTOR_WIDTH keeps the compiler's choice.
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__) && \
    !defined(ALLOY_CPU_NATIVE_VECTOR_WIDTH)
#define ALLOY_CPU_WIDE_VECTORS 1
#pragma GCC target("prefer-vector-width=512")
#endif

// glibc's C <math.h>, not libstdc++'s C++ wrapper of it: the wrapper includes <cmath>, which cost
// g++ ~0.08 s per kernel compiled without the precompiled prelude and ~0.02 s with it (12 of that
// header's 33 MB). The prelude calls the C functions by their typed names (::sinf, ::sin) and
// needs none of <cmath>'s overloads. <cmath> undefines the C classification macros (metal:: has
// its own isnan, signbit...); so does this.
#define _GLIBCXX_INCLUDE_NEXT_C_HEADERS 1
#include <math.h>
#undef _GLIBCXX_INCLUDE_NEXT_C_HEADERS
#undef fpclassify
#undef isfinite
#undef isinf
#undef isnan
#undef isnormal
#undef signbit
#undef isgreater
#undef isgreaterequal
#undef isless
#undef islessequal
#undef islessgreater
#undef isunordered
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// Errors are std::logic_error / std::runtime_error. libstdc++'s throw helpers avoid parsing
// <stdexcept> (and <string>) in every kernel: about a third of the prelude's compile time.
#if __has_include(<bits/functexcept.h>)
#include <bits/functexcept.h>
#define ALLOY_THROW_LOGIC_ERROR(msg) std::__throw_logic_error(msg)
#define ALLOY_THROW_RUNTIME_ERROR(msg) std::__throw_runtime_error(msg)
#else
#include <stdexcept>
#define ALLOY_THROW_LOGIC_ERROR(msg) throw std::logic_error(msg)
#define ALLOY_THROW_RUNTIME_ERROR(msg) throw std::runtime_error(msg)
#endif

#include "abi.h"

// The group the current host thread runs. Set by the translator-generated entry points; the
// fibers of one group all run on the worker thread that owns it.
inline thread_local alloy_cpu_group* alloy_cpu_current_group = nullptr;

// threadgroup objects live in the group's arena; `slot` is unique per declaration in the source.
#define ALLOY_THREADGROUP(type, dims, name, slot)                   \
  typedef type alloy_tg_type_##slot dims;                           \
  alloy_tg_type_##slot& name = *static_cast<alloy_tg_type_##slot*>( \
      ::alloy_target::tg_slot(slot, sizeof(alloy_tg_type_##slot), alignof(alloy_tg_type_##slot)))

// ---- Vector math: glibc's libmvec ----
// Declaring the C library's float functions with `simd` tells g++ that libmvec has vector
// variants (_ZGVdN8v_expf, _ZGVeN16v_expf, ...), so a vectorised thread loop calls those on 8/16
// lanes instead of expf once per thread. glibc's math.h declares them itself only under
// -ffast-math; libmvec is within a few ulp (glibc's libm-test-ulps: 1-2 ulp for the float
// functions below), inside Metal's precise bounds, and handles special inputs (exp(-inf) == 0,
// NaN, inf, overflow) through the scalar function, so every math mode uses them. libm.so is a
// linker script that pulls in libmvec.so as needed. Other compilers/C libraries: scalar calls.
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__)
#define ALLOY_CPU_SIMD_DECL __attribute__((simd("notinbranch")))
extern "C" {
float expf(float) noexcept ALLOY_CPU_SIMD_DECL;
float logf(float) noexcept ALLOY_CPU_SIMD_DECL;
float sinf(float) noexcept ALLOY_CPU_SIMD_DECL;
float cosf(float) noexcept ALLOY_CPU_SIMD_DECL;
float powf(float, float) noexcept ALLOY_CPU_SIMD_DECL;
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)
float exp2f(float) noexcept ALLOY_CPU_SIMD_DECL;
float exp10f(float) noexcept ALLOY_CPU_SIMD_DECL;
float log2f(float) noexcept ALLOY_CPU_SIMD_DECL;
float log10f(float) noexcept ALLOY_CPU_SIMD_DECL;
float tanf(float) noexcept ALLOY_CPU_SIMD_DECL;
float asinf(float) noexcept ALLOY_CPU_SIMD_DECL;
float acosf(float) noexcept ALLOY_CPU_SIMD_DECL;
float atanf(float) noexcept ALLOY_CPU_SIMD_DECL;
float atan2f(float, float) noexcept ALLOY_CPU_SIMD_DECL;
float sinhf(float) noexcept ALLOY_CPU_SIMD_DECL;
float coshf(float) noexcept ALLOY_CPU_SIMD_DECL;
float tanhf(float) noexcept ALLOY_CPU_SIMD_DECL;
float asinhf(float) noexcept ALLOY_CPU_SIMD_DECL;
float acoshf(float) noexcept ALLOY_CPU_SIMD_DECL;
float atanhf(float) noexcept ALLOY_CPU_SIMD_DECL;
float cbrtf(float) noexcept ALLOY_CPU_SIMD_DECL;
#endif
}
#endif

namespace alloy_target {

ALLOY_FN void set_group(alloy_cpu_group* g) {
  alloy_cpu_current_group = g;
}
ALLOY_FN alloy_cpu_group* group() {
  return alloy_cpu_current_group;
}

ALLOY_FN void copy_bytes(void* dst, const void* src, size_t n) {
  memcpy(dst, src, n);
}

// ---- Half precision conversions (round to nearest even) ----

// Branch-free integer/select forms of alloy_portable's exact conversions (the same bits, NaN
// payloads included), so that a loop over a group's threads converts 8/16 lanes at once: g++ 12
// vectorises neither the F16C builtins nor _Float16 conversions without AVX512-FP16. (_Float16
// arithmetic is avoided anyway: with AVX512-FP16, g++ 13 turned float arithmetic between
// conversions into native half instructions and rounded a half division one ulp low.)
ALLOY_FN float f16_to_f32_select(uint16_t bits) {
  const uint32_t h = bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  const uint32_t normal = ((e + 112u) << 23) | (m << 13);
  // Subnormal (and zero): m * 2^-24 exactly, through an int -> float conversion (no subnormal
  // float operand, which costs a microcode assist on some CPUs).
  const uint32_t sub =
      __builtin_bit_cast(uint32_t, static_cast<float>(static_cast<int>(m)) * 0x1p-24f);
  const uint32_t special = 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u);  // inf; NaN made quiet
  const uint32_t mag = e == 0x1fu ? special : (e == 0 ? sub : normal);
  return __builtin_bit_cast(float, sign | mag);
}

ALLOY_FN uint16_t f32_to_f16_select(float x) {
  const uint32_t u = __builtin_bit_cast(uint32_t, x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t ax = u & 0x7fffffffu;
  const uint32_t special = ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : 0x7c00u;
  // Normal half: rebias the exponent and round the 13 dropped bits to nearest even.
  const uint32_t normal = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;
  // Subnormal half: adding 0.5 (whose ulp is 2^-24, the half subnormal step) rounds in hardware.
  const uint32_t sub =
      __builtin_bit_cast(uint32_t, __builtin_bit_cast(float, ax) + 0.5f) - 0x3f000000u;
  const uint32_t mag = ax >= 0x7f800000u   ? special
                       : ax >= 0x477ff000u ? 0x7c00u  // rounds past 65504
                       : ax >= 0x38800000u ? normal
                                           : sub;
  return static_cast<uint16_t>(sign | mag);
}

#if defined(__F16C__) && defined(__AVX2__) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__)
// With F16C: the conversion instructions, reached through functions declared `simd` whose vector
// variants (x86 vector function ABI names) are defined here, so a vectorised loop converts 8-32
// lanes per call with one instruction per 8/16 lanes. All of them are a few instructions of
// assembly, local to the translation unit: a C++ definition of the scalar function would make
// g++ emit vector variants of its own, and C++ definitions of the variants would cost every
// kernel their compilation. vcvtps2ph immediate 8: round to nearest even, no exceptions (not
// MXCSR's mode).
// - h2f: the half bits travel in the low 16 bits of a float-typed lane (float is the
//   characteristic type: 4/8/8/16 lanes for SSE/AVX/AVX2/AVX-512, in xmm/ymm/ymm/zmm);
//   vpackusdw/vpmovdw narrow lanes that hold values <= 0xffff.
// - f2h returns uint16_t, so its characteristic type is 16-bit: 8/8/16/32 lanes, the float
//   arguments in two registers where they do not fit one, the halves packed in one register.
//   A loop over halves (32 lanes per AVX-512 iteration) converts its results with one call
//   instead of two, and nothing is spilled across a second call (the vector ABI clobbers every
//   vector register, so the first result had to be stored and reloaded).
extern "C" float alloy_cpu_h2f(float) noexcept __attribute__((simd("notinbranch"), const));
extern "C" uint16_t alloy_cpu_f2h(float) noexcept __attribute__((simd("notinbranch"), const));
#define ALLOY_CPU_ASM_FN(name, body) \
  ".type " name ", @function\n" name ":\n" body "  ret\n.size " name ", .-" name "\n"
#if defined(__AVX512F__)
#define ALLOY_CPU_HALF_ASM_512                                                    \
  ALLOY_CPU_ASM_FN("_ZGVeN16v_alloy_cpu_h2f",                                     \
                   "  vpmovdw %zmm0, %ymm0\n  vcvtph2ps %ymm0, %zmm0\n")          \
  ALLOY_CPU_ASM_FN("_ZGVeN32v_alloy_cpu_f2h",                                     \
                   "  vcvtps2ph $8, %zmm0, %ymm0\n  vcvtps2ph $8, %zmm1, %ymm1\n" \
                   "  vinserti64x4 $1, %ymm1, %zmm0, %zmm0\n")
#else
#define ALLOY_CPU_HALF_ASM_512 ""
#endif
__asm__(".text\n" ALLOY_CPU_ASM_FN("alloy_cpu_h2f", "  vcvtph2ps %xmm0, %xmm0\n") ALLOY_CPU_ASM_FN(
    "alloy_cpu_f2h", "  vcvtps2ph $8, %xmm0, %xmm0\n  vpextrw $0, %xmm0, %eax\n")
            ALLOY_CPU_ASM_FN("_ZGVbN4v_alloy_cpu_h2f",
                             "  vpxor %xmm1, %xmm1, %xmm1\n  vpackusdw %xmm1, %xmm0, %xmm0\n"
                             "  vcvtph2ps %xmm0, %xmm0\n")
                ALLOY_CPU_ASM_FN("_ZGVbN8v_alloy_cpu_f2h",
                                 "  vcvtps2ph $8, %xmm0, %xmm0\n  vcvtps2ph $8, %xmm1, %xmm1\n"
                                 "  vpunpcklqdq %xmm1, %xmm0, %xmm0\n")
                    ALLOY_CPU_ASM_FN("_ZGVcN8v_alloy_cpu_h2f",
                                     "  vextracti128 $1, %ymm0, %xmm1\n"
                                     "  vpackusdw %xmm1, %xmm0, %xmm0\n"
                                     "  vcvtph2ps %xmm0, %ymm0\n")
                        ALLOY_CPU_ASM_FN("_ZGVcN8v_alloy_cpu_f2h", "  vcvtps2ph $8, %ymm0, %xmm0\n")
                            ALLOY_CPU_ASM_FN("_ZGVdN8v_alloy_cpu_h2f",
                                             "  vextracti128 $1, %ymm0, %xmm1\n"
                                             "  vpackusdw %xmm1, %xmm0, %xmm0\n"
                                             "  vcvtph2ps %xmm0, %ymm0\n")
                                ALLOY_CPU_ASM_FN("_ZGVdN16v_alloy_cpu_f2h",
                                                 "  vcvtps2ph $8, %ymm0, %xmm0\n"
                                                 "  vcvtps2ph $8, %ymm1, %xmm1\n"
                                                 "  vinserti128 $1, %xmm1, %ymm0, %ymm0\n")
                                    ALLOY_CPU_HALF_ASM_512);
#undef ALLOY_CPU_HALF_ASM_512
#undef ALLOY_CPU_ASM_FN

ALLOY_FN float f16_to_f32(uint16_t bits) {
  return alloy_cpu_h2f(__builtin_bit_cast(float, static_cast<uint32_t>(bits)));
}
ALLOY_FN uint16_t f32_to_f16(float x) {
  return alloy_cpu_f2h(x);
}
#else
ALLOY_FN float f16_to_f32(uint16_t bits) {
  return f16_to_f32_select(bits);
}
ALLOY_FN uint16_t f32_to_f16(float x) {
  return f32_to_f16_select(x);
}
#endif

// ---- Fast math: the host libm is both fast and correct enough; exp(-inf) == 0 holds ----

// exp(x) for float, inline so that a thread loop vectorises it without a call (Cephes' expf
// scheme, as SIMD libraries do): x = k ln2 + r with |r| <= ln2/2 (Cody-Waite, two-part ln2),
// a degree-6 polynomial for exp(r), then 2^k applied as two exact power-of-two products so that
// subnormal results round once and large ones overflow to inf. Within 2 ulp (Metal's precise
// bound is 4; CpuVectorLoops.MathWithinMetalPreciseBounds*); exp(-inf) == 0, exp(inf) == inf,
// NaN in NaN out.
ALLOY_FN float expf_inline(float x) {
  // Clamped as max/min (one instruction each; a NaN becomes -104 here and is restored at the
  // end): the nested selects of the same clamp cost five compares and blends per vector.
  float c = x > -104.0f ? x : -104.0f;
  c = c < 89.0f ? c : 89.0f;
  // k = round(c / ln2) by the 1.5 * 2^23 trick (no libm call, no SSE4.1 needed).
  float kf = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = c - kf * 0.693359375f;
  r = r - kf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int k = static_cast<int>(kf);
  int k1 = k >> 1, k2 = k - k1;  // each in [-76, 64]: 2^k1 and 2^k2 are normal floats
  y *= __builtin_bit_cast(float, static_cast<uint32_t>(k1 + 127) << 23);
  y *= __builtin_bit_cast(float, static_cast<uint32_t>(k2 + 127) << 23);
  return x != x ? x + x : y;
}
ALLOY_FN float precise_exp(float x) {
  return expf_inline(x);
}
ALLOY_FN float fast_exp(float x) {
  return expf_inline(x);
}
ALLOY_FN float fast_exp2(float x) {
  return ::exp2f(x);
}
// exp2(x * log2(10)) would lose up to ~2|x| ulp in the product; exp10f (libmvec lanes) does not.
ALLOY_FN float fast_exp10(float x) {
  return ::exp10f(x);
}
ALLOY_FN float fast_log(float x) {
  return ::logf(x);
}
ALLOY_FN float fast_log2(float x) {
  return ::log2f(x);
}
ALLOY_FN float fast_sin(float x) {
  return ::sinf(x);
}
ALLOY_FN float fast_cos(float x) {
  return ::cosf(x);
}
ALLOY_FN float fast_tan(float x) {
  return ::tanf(x);
}
ALLOY_FN float fast_pow(float x, float y) {
  return ::powf(x, y);
}
ALLOY_FN float fast_rsqrt(float x) {
  return 1.0f / ::sqrtf(x);
}
ALLOY_FN float fast_sqrt(float x) {
  return ::sqrtf(x);
}
ALLOY_FN float fast_divide(float x, float y) {
  return x / y;
}

// ---- Bit operations (x != 0 where the builtin requires it) ----

ALLOY_FN uint32_t clz32(uint32_t x) {
  return x ? __builtin_clz(x) : 32u;
}
ALLOY_FN uint32_t clz64(uint64_t x) {
  return x ? __builtin_clzll(x) : 64u;
}
ALLOY_FN uint32_t ctz32(uint32_t x) {
  return x ? __builtin_ctz(x) : 32u;
}
ALLOY_FN uint32_t ctz64(uint64_t x) {
  return x ? __builtin_ctzll(x) : 64u;
}
ALLOY_FN uint32_t popcount32(uint32_t x) {
  return __builtin_popcount(x);
}
ALLOY_FN uint32_t popcount64(uint64_t x) {
  return __builtin_popcountll(x);
}
ALLOY_FN uint32_t mulhi_u32(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
}
ALLOY_FN int32_t mulhi_s32(int32_t a, int32_t b) {
  return static_cast<int32_t>((static_cast<int64_t>(a) * b) >> 32);
}
ALLOY_FN uint64_t mulhi_u64(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
}
ALLOY_FN int64_t mulhi_s64(int64_t a, int64_t b) {
  return static_cast<int64_t>((static_cast<__int128>(a) * b) >> 64);
}
ALLOY_FN uint32_t reverse_bits32(uint32_t x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}

// ---- Lanes: 32-lane simdgroups emulated by the fiber runtime ----

[[noreturn]] inline void no_sync(const char* what) {
  char msg[256];
  snprintf(msg, sizeof msg,
           "alloy: %s called in loop mode (the kernel was not detected as using barriers/simd "
           "functions)",
           what);
  ALLOY_THROW_LOGIC_ERROR(msg);
}

ALLOY_FN alloy_cpu_group* sync_group(const char* what) {
  alloy_cpu_group* g = alloy_cpu_current_group;
  if (!g || !g->sync) no_sync(what);
  return g;
}

ALLOY_FN uint32_t lane_id() {
  return alloy_cpu_current_group->current & 31u;
}

}  // namespace alloy_target
#include "split.h"
namespace alloy_target {

// Every live lane's `v` into all[0..31] (lane-major); sets g->simd_live. Values larger than one
// exchange slot go through several exchanges.
template <class T>
ALLOY_FN void gather(const T& v, T* all) {
  if (alloy_split::state* s = alloy_split::active()) {
    s->gather(v, all);
    return;
  }
  alloy_cpu_group* g = sync_group("a simdgroup function");
  constexpr uint32_t kSlot = ALLOY_CPU_SIMD_SLOT_BYTES;
  if constexpr (sizeof(T) <= kSlot) {
    g->sync->simd_gather(g, &v, all, sizeof(T));
  } else {
    unsigned char chunk[32 * kSlot];
    const unsigned char* src = reinterpret_cast<const unsigned char*>(&v);
    for (uint32_t off = 0; off < sizeof(T); off += kSlot) {
      uint32_t n = sizeof(T) - off < kSlot ? sizeof(T) - off : kSlot;
      g->sync->simd_gather(g, src + off, chunk, n);
      for (uint32_t l = 0; l < 32; ++l)
        memcpy(reinterpret_cast<unsigned char*>(all + l) + off, chunk + l * n, n);
    }
  }
}

ALLOY_FN uint32_t live_mask() {
  unsigned char dummy[32];
  unsigned char mine = 0;
  gather(mine, dummy);
  return alloy_cpu_current_group->simd_live;
}

template <class T>
ALLOY_FN T shuffle(T v, uint32_t src) {
  if (alloy_split::state* s = alloy_split::active()) return s->shuffle(v, src);
  T all[32];
  gather(v, all);
  uint32_t live = alloy_cpu_current_group->simd_live;
  return (src < 32 && ((live >> src) & 1u)) ? all[src] : v;
}

template <class T, class Op>
ALLOY_FN T reduce(T v, Op op) {
  if (alloy_split::state* s = alloy_split::active()) return s->reduce(v, op);
  T all[32];
  gather(v, all);
  uint32_t live = alloy_cpu_current_group->simd_live;
  T acc = v;
  bool first = true;
  for (uint32_t l = 0; l < 32; ++l) {
    if (!((live >> l) & 1u)) continue;
    acc = first ? all[l] : op(acc, all[l]);
    first = false;
  }
  return acc;
}

template <class T, class Op>
ALLOY_FN T inclusive_scan(T v, Op op) {
  T all[32];
  gather(v, all);
  uint32_t live = alloy_cpu_current_group->simd_live;
  uint32_t me = lane_id();
  T acc = v;
  bool first = true;
  for (uint32_t l = 0; l <= me; ++l) {
    if (!((live >> l) & 1u)) continue;
    acc = first ? all[l] : op(acc, all[l]);
    first = false;
  }
  return acc;
}

ALLOY_FN uint64_t ballot(bool p) {
  bool all[32];
  gather(p, all);
  uint32_t live = alloy_cpu_current_group->simd_live;
  uint64_t r = 0;
  for (uint32_t l = 0; l < 32; ++l)
    if (((live >> l) & 1u) && all[l]) r |= uint64_t(1) << l;
  return r;
}

ALLOY_FN void threadgroup_barrier() {
  alloy_cpu_group* g = sync_group("threadgroup_barrier");
  g->sync->threadgroup_barrier(g);
}

ALLOY_FN void simdgroup_barrier() {
  alloy_cpu_group* g = sync_group("simdgroup_barrier");
  g->sync->simdgroup_barrier(g);
}

// ---- Threadgroup memory ----

inline void* tg_slot(int slot, uint64_t bytes, uint64_t align) {
  alloy_cpu_group* g = alloy_cpu_current_group;
  if (slot < 0 || slot >= ALLOY_CPU_MAX_TG_SLOTS)
    ALLOY_THROW_RUNTIME_ERROR("alloy: too many threadgroup declarations in one kernel");
  if (void* p = g->tg_slots[slot]) return p;
  if (align < 16) align = 16;
  uint64_t start = (g->tg_used + align - 1) & ~(align - 1);
  if (start + bytes > g->tg_capacity) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "alloy: threadgroup memory exceeds the per-group capacity (%llu > %llu bytes)",
             static_cast<unsigned long long>(start + bytes),
             static_cast<unsigned long long>(g->tg_capacity));
    ALLOY_THROW_RUNTIME_ERROR(msg);
  }
  g->tg_used = start + bytes;
  void* p = g->tg_arena + start;
  g->tg_slots[slot] = p;
  return p;
}

// ---- Atomics (relaxed; fences are separate) ----

template <class T>
ALLOY_FN T atomic_load(T* p) {
  T r;
  __atomic_load(p, &r, __ATOMIC_RELAXED);
  return r;
}
template <class T>
ALLOY_FN void atomic_store(T* p, T v) {
  __atomic_store(p, &v, __ATOMIC_RELAXED);
}
template <class T>
ALLOY_FN T atomic_exchange(T* p, T v) {
  T r;
  __atomic_exchange(p, &v, &r, __ATOMIC_RELAXED);
  return r;
}
// Weak in Metal; a strong CAS is a valid implementation of a weak one.
template <class T>
ALLOY_FN bool atomic_compare_exchange(T* p, T* expected, T desired) {
  return __atomic_compare_exchange(p, expected, &desired, false, __ATOMIC_RELAXED,
                                   __ATOMIC_RELAXED);
}

// Read-modify-write through a CAS loop, for types without a native instruction (float).
template <class T, class F>
ALLOY_FN T atomic_rmw_cas(T* p, F f) {
  T old = atomic_load(p);
  while (!atomic_compare_exchange(p, &old, f(old))) {
  }
  return old;
}

template <class T>
ALLOY_FN T atomic_fetch_add(T* p, T v) {
  if constexpr (static_cast<T>(0.5) != 0)  // floating point
    return atomic_rmw_cas(p, [v](T o) { return o + v; });
  else
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
template <class T>
ALLOY_FN T atomic_fetch_sub(T* p, T v) {
  if constexpr (static_cast<T>(0.5) != 0)
    return atomic_rmw_cas(p, [v](T o) { return o - v; });
  else
    return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);
}
template <class T>
ALLOY_FN T atomic_fetch_and(T* p, T v) {
  return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);
}
template <class T>
ALLOY_FN T atomic_fetch_or(T* p, T v) {
  return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}
template <class T>
ALLOY_FN T atomic_fetch_xor(T* p, T v) {
  return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);
}
// min/max: NaN operands are ignored for floats (fmin/fmax semantics).
template <class T>
ALLOY_FN T atomic_fetch_min(T* p, T v) {
  return atomic_rmw_cas(p, [v](T o) { return v < o || o != o ? v : o; });
}
template <class T>
ALLOY_FN T atomic_fetch_max(T* p, T v) {
  return atomic_rmw_cas(p, [v](T o) { return v > o || o != o ? v : o; });
}

ALLOY_FN void fence_device() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
ALLOY_FN void fence_threadgroup() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

}  // namespace alloy_target
