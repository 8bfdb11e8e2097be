// Exact float <-> half / bfloat bit conversions (round to nearest even), usable in constant
// expressions. Part of the prelude (metal_stdlib.h includes it before metal/types.h) and also used
// by the host side of the library (src/core/half_convert.h), so both round the same way.
#pragma once

#if defined(ALLOY_FN)
#define ALLOY_HALF_BITS_FN ALLOY_FN
#else
#include <stdint.h>
#define ALLOY_HALF_BITS_FN inline
#endif

// ---- Exact bit conversions (round to nearest even), usable in constant expressions ----
namespace alloy_portable {

ALLOY_HALF_BITS_FN constexpr uint16_t f32_to_f16_bits(float f) {
  uint32_t x = __builtin_bit_cast(uint32_t, f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)  // inf, NaN (kept quiet, top payload bits kept)
    return static_cast<uint16_t>(sign |
                                 (ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : 0x7c00u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (ax >= 0x38800000u) {  // normal half: rebias the exponent, round the 13 dropped bits
    ax += 0xc8000fffu + ((ax >> 13) & 1u);
    return static_cast<uint16_t>(sign | (ax >> 13));
  }
  // Subnormal half: adding 0.5 (ulp 2^-24 = the half subnormal step) rounds in hardware.
  float t = __builtin_bit_cast(float, ax) + 0.5f;
  return static_cast<uint16_t>(sign | (__builtin_bit_cast(uint32_t, t) - 0x3f000000u));
}

ALLOY_HALF_BITS_FN constexpr float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f)  // inf; NaNs come out quiet, as from the hardware conversions
    return __builtin_bit_cast(float, sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u));
  if (e == 0) {
    float v = static_cast<float>(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  return __builtin_bit_cast(float, sign | ((e + 112u) << 23) | (m << 13));
}

ALLOY_HALF_BITS_FN constexpr uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = __builtin_bit_cast(uint32_t, f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

ALLOY_HALF_BITS_FN constexpr float bf16_bits_to_f32(uint16_t b) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(b) << 16);
}

}  // namespace alloy_portable
