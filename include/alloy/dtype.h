// Element types of Alloy arrays and their Metal (MLX) spellings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace alloy {

enum class Dtype : uint8_t {
  bool_,
  int8,
  int16,
  int32,
  int64,
  uint8,
  uint16,
  uint32,
  uint64,
  float16,
  bfloat16,
  float32,
  float64,  // CPU only: Metal has no double
  complex64,
};

inline constexpr Dtype bool_ = Dtype::bool_;
inline constexpr Dtype int8 = Dtype::int8;
inline constexpr Dtype int16 = Dtype::int16;
inline constexpr Dtype int32 = Dtype::int32;
inline constexpr Dtype int64 = Dtype::int64;
inline constexpr Dtype uint8 = Dtype::uint8;
inline constexpr Dtype uint16 = Dtype::uint16;
inline constexpr Dtype uint32 = Dtype::uint32;
inline constexpr Dtype uint64 = Dtype::uint64;
inline constexpr Dtype float16 = Dtype::float16;
inline constexpr Dtype bfloat16 = Dtype::bfloat16;
inline constexpr Dtype float32 = Dtype::float32;
inline constexpr Dtype float64 = Dtype::float64;
inline constexpr Dtype complex64 = Dtype::complex64;

/// Bytes per element.
size_t size_of(Dtype t);
/// Alloy/NumPy name: "float32", "bfloat16", "bool", ...
std::string_view dtype_name(Dtype t);
/// Type name in generated Metal source, as MLX writes it: "float", "float16_t", "bfloat16_t", ...
std::string_view msl_type_name(Dtype t);
/// Parses a dtype name ("float32", "f32", "half", ...); throws std::invalid_argument if unknown.
Dtype dtype_from_name(std::string_view name);

bool is_floating(Dtype t);
bool is_integral(Dtype t);  // includes bool
bool is_signed(Dtype t);

/// The value of float16 / bfloat16 bits, and float rounded (to nearest even) to those bits: the
/// conversions Alloy's kernels use, for code that reads or writes such elements itself.
float float16_to_float(uint16_t bits);
uint16_t float_to_float16(float value);
float bfloat16_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);

}  // namespace alloy
