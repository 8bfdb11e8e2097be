// The ALLOY_* environment variables, read with one grammar (docs/architecture.md, "Environment
// variables"): an unset or empty variable means its default; a malformed value is an error
// (std::invalid_argument naming the variable and what it accepts), never silently the default.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace alloy::env {

/// The variable's text; nullopt when it is unset or empty.
std::optional<std::string> text(const char* name);

/// A switch: 1/true/on/yes or 0/false/off/no, in any case; `fallback` when unset or empty.
bool flag(const char* name, bool fallback);

/// A decimal count from 0 to `max`; nullopt when unset or empty. `expected` says what the
/// variable holds, for the error ("a time in microseconds").
std::optional<uint64_t> count(const char* name, std::string_view expected,
                              uint64_t max = std::numeric_limits<uint64_t>::max());

/// One of `choices` (as written): its index; nullopt when unset or empty.
std::optional<size_t> choice(const char* name, std::initializer_list<std::string_view> choices);

}  // namespace alloy::env
