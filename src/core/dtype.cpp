#include "alloy/dtype.h"

#include <array>
#include <stdexcept>
#include <string>

#include "core/half_convert.h"
#include "core/hot.h"

namespace alloy {
namespace {
struct DtypeInfo {
  Dtype dtype;
  size_t size;
  std::string_view name;
  std::string_view msl;  // MLX's get_type_string spelling
};
constexpr std::array<DtypeInfo, 14> kInfo{{
    {Dtype::bool_, 1, "bool", "bool"},
    {Dtype::int8, 1, "int8", "int8_t"},
    {Dtype::int16, 2, "int16", "int16_t"},
    {Dtype::int32, 4, "int32", "int32_t"},
    {Dtype::int64, 8, "int64", "int64_t"},
    {Dtype::uint8, 1, "uint8", "uint8_t"},
    {Dtype::uint16, 2, "uint16", "uint16_t"},
    {Dtype::uint32, 4, "uint32", "uint32_t"},
    {Dtype::uint64, 8, "uint64", "uint64_t"},
    {Dtype::float16, 2, "float16", "float16_t"},
    {Dtype::bfloat16, 2, "bfloat16", "bfloat16_t"},
    {Dtype::float32, 4, "float32", "float"},
    {Dtype::float64, 8, "float64", "double"},
    {Dtype::complex64, 8, "complex64", "complex64_t"},
}};
const DtypeInfo& info(Dtype t) {
  auto i = static_cast<size_t>(t);
  if (i >= kInfo.size()) throw std::invalid_argument("invalid dtype");
  return kInfo[i];
}
}  // namespace

ALLOY_HOT size_t size_of(Dtype t) {
  return info(t).size;
}
std::string_view dtype_name(Dtype t) {
  return info(t).name;
}
std::string_view msl_type_name(Dtype t) {
  return info(t).msl;
}

Dtype dtype_from_name(std::string_view name) {
  for (auto& i : kInfo)
    if (i.name == name || i.msl == name) return i.dtype;
  struct Alias {
    std::string_view alias;
    Dtype dtype;
  };
  static constexpr Alias kAliases[] = {
      {"half", Dtype::float16},  {"f16", Dtype::float16}, {"bfloat", Dtype::bfloat16},
      {"bf16", Dtype::bfloat16}, {"f32", Dtype::float32}, {"f64", Dtype::float64},
      {"int", Dtype::int32},     {"uint", Dtype::uint32}, {"long", Dtype::int64},
      {"ulong", Dtype::uint64},  {"short", Dtype::int16}, {"ushort", Dtype::uint16},
      {"char", Dtype::int8},     {"uchar", Dtype::uint8}, {"bool_", Dtype::bool_},
  };
  for (auto& a : kAliases)
    if (a.alias == name) return a.dtype;
  throw std::invalid_argument("unknown dtype '" + std::string(name) + "'");
}

bool is_floating(Dtype t) {
  return t == Dtype::float16 || t == Dtype::bfloat16 || t == Dtype::float32 ||
         t == Dtype::float64 || t == Dtype::complex64;
}
bool is_integral(Dtype t) {
  return !is_floating(t);
}
bool is_signed(Dtype t) {
  switch (t) {
    case Dtype::bool_:
    case Dtype::uint8:
    case Dtype::uint16:
    case Dtype::uint32:
    case Dtype::uint64:
      return false;
    default:
      return true;
  }
}

float float16_to_float(uint16_t bits) {
  return detail::f16_to_f32(bits);
}
uint16_t float_to_float16(float value) {
  return detail::f32_to_f16(value);
}
float bfloat16_to_float(uint16_t bits) {
  return detail::bf16_to_f32(bits);
}
uint16_t float_to_bfloat16(float value) {
  return detail::f32_to_bf16(value);
}

}  // namespace alloy
