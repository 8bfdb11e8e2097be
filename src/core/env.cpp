#include "core/env.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <stdexcept>

namespace alloy::env {

std::optional<std::string> text(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

bool flag(const char* name, bool fallback) {
  std::optional<std::string> v = text(name);
  if (!v) return fallback;
  std::string s = *v;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  throw std::invalid_argument(
      fmt::format("{}={}: expected 1, true, on or yes, or 0, false, off or no", name, *v));
}

std::optional<uint64_t> count(const char* name, std::string_view expected, uint64_t max) {
  std::optional<std::string> v = text(name);
  if (!v) return std::nullopt;
  uint64_t n = 0;
  const char* end = v->data() + v->size();
  auto [p, ec] = std::from_chars(v->data(), end, n);
  if (ec != std::errc() || p != end || n > max)
    throw std::invalid_argument(fmt::format("{}={}: expected {}", name, *v, expected));
  return n;
}

std::optional<size_t> choice(const char* name, std::initializer_list<std::string_view> choices) {
  std::optional<std::string> v = text(name);
  if (!v) return std::nullopt;
  size_t i = 0;
  std::string list;
  for (std::string_view c : choices) {
    if (*v == c) return i;
    list += fmt::format("{}{}", i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", "), c);
    ++i;
  }
  throw std::invalid_argument(fmt::format("{}={}: expected {}", name, *v, list));
}

}  // namespace alloy::env
