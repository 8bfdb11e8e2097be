// Metal function constants (`constant T name [[function_constant(n)]];`), given when a library is
// compiled, as MTLFunctionConstantValues gives them to newFunctionWithName:constantValues:.
// Each declaration becomes a `constexpr` of the given value (so `if (name)` folds as on Metal) and
// `is_function_constant_defined(name)` becomes true/false. Text level, lines kept; the values are
// part of the translated text, hence of the compile cache key.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>

namespace alloy::msl {

using FunctionConstantValue = std::variant<bool, int64_t, double>;

struct FunctionConstants {
  std::map<int, FunctionConstantValue> by_index;         // function_constant(n)
  std::map<std::string, FunctionConstantValue> by_name;  // the constant's name
};

/// Rewrites the function-constant declarations of `source`. A constant given neither by index
/// nor by name is undefined: is_function_constant_defined gives false and its value is T().
/// Throws std::invalid_argument for a value given to no declared constant (names the library).
std::string apply_function_constants(std::string_view source, const FunctionConstants& values,
                                     const std::string& label);

}  // namespace alloy::msl
