// Host-side float16/bfloat16 <-> float conversion for array creation and readback: the prelude's
// own conversions (src/prelude/half_bits.h), so host and kernels round the same way (to nearest
// even).
#pragma once
#include <cstdint>

#include "prelude/half_bits.h"

namespace alloy::detail {

inline float f16_to_f32(uint16_t h) {
  return alloy_portable::f16_bits_to_f32(h);
}
inline uint16_t f32_to_f16(float f) {
  return alloy_portable::f32_to_f16_bits(f);
}
inline float bf16_to_f32(uint16_t b) {
  return alloy_portable::bf16_bits_to_f32(b);
}
inline uint16_t f32_to_bf16(float f) {
  return alloy_portable::f32_to_bf16_bits(f);
}

}  // namespace alloy::detail
