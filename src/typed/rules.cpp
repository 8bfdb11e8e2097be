// Metal's conversion rules for the typed analysis, and placing a translated token on the user's
// line. Independent of Clang (built and tested without it too).
#include <fmt/format.h>

#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "typed/typed.h"

namespace alloy::typed {
namespace {

struct Scalar {
  int rank = -1;  // integers: conversion rank; floating types: 100+
  int bits = 0;
  bool is_signed = false;
  bool floating = false;
};

// Metal's scalar types as the analysis names them (Clang types are printed with these names).
const std::map<std::string, Scalar>& scalars() {
  static const std::map<std::string, Scalar> m = {
      {"bool", {0, 1, false, false}},    {"char", {1, 8, true, false}},
      {"uchar", {1, 8, false, false}},   {"short", {2, 16, true, false}},
      {"ushort", {2, 16, false, false}}, {"int", {3, 32, true, false}},
      {"uint", {3, 32, false, false}},   {"long", {4, 64, true, false}},
      {"ulong", {4, 64, false, false}},  {"half", {100, 16, true, true}},
      {"bfloat", {100, 16, true, true}}, {"float", {101, 32, true, true}},
      {"double", {101, 32, true, true}},  // Metal has no double: an unsuffixed literal is float
  };
  return m;
}

bool lowp(const std::string& t) {
  return t == "half" || t == "bfloat";
}

std::string unsigned_of(const std::string& t) {
  return t == "char" ? "uchar" : t == "short" ? "ushort" : t == "int" ? "uint" : "ulong";
}

// C++'s usual arithmetic conversions (Metal's for every pair without half/bfloat).
std::string usual(const std::string& a, const std::string& b) {
  const Scalar& x = scalars().at(a);
  const Scalar& y = scalars().at(b);
  if (x.floating || y.floating) return "float";
  auto promote = [](const std::string& t) { return scalars().at(t).rank < 3 ? "int" : t; };
  std::string p = promote(a), q = promote(b);
  if (p == q) return p;
  const Scalar& s = scalars().at(p);
  const Scalar& t = scalars().at(q);
  if (s.is_signed == t.is_signed) return s.rank >= t.rank ? p : q;
  const std::string& u = s.is_signed ? q : p;  // the unsigned one
  const std::string& i = s.is_signed ? p : q;
  if (scalars().at(u).rank >= scalars().at(i).rank) return u;
  if (scalars().at(i).bits > scalars().at(u).bits) return i;
  return unsigned_of(i);
}

bool op_char(char c) {
  return std::string_view("+-*/%<>=!&|^?:~").find(c) != std::string_view::npos;
}
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Positions where `token` occurs as a whole token (an operator run equal to it, or a whole word).
std::vector<size_t> occurrences(const std::string& s, const std::vector<bool>& skip,
                                const std::string& token) {
  std::vector<size_t> r;
  bool word = !token.empty() && ident_char(token[0]);
  for (size_t i = 0; i < s.size();) {
    if (skip.size() > i && skip[i]) {
      ++i;
      continue;
    }
    if (word) {
      if (ident_char(s[i])) {
        size_t j = i;
        while (j < s.size() && ident_char(s[j])) ++j;
        if (s.compare(i, j - i, token) == 0) r.push_back(i);
        i = j;
      } else {
        ++i;
      }
      continue;
    }
    if (ident_char(s[i])) {
      // Skip a number whole (1e-3 holds a '-').
      size_t j = i;
      bool number = std::isdigit(static_cast<unsigned char>(s[i]));
      while (j < s.size() && (ident_char(s[j]) || (number && s[j] == '.') ||
                              (number && (s[j] == '-' || s[j] == '+') && j > i &&
                               std::string_view("eEpP").find(s[j - 1]) != std::string_view::npos)))
        ++j;
      i = j;
      continue;
    }
    if (op_char(s[i])) {
      size_t j = i;
      while (j < s.size() && op_char(s[j]) && !(skip.size() > j && skip[j])) ++j;
      // A run such as ")?-" or "<-": the token may be a prefix of the run ("?" before a unary
      // minus); a run is matched at its start only.
      std::string run = s.substr(i, j - i);
      if (run == token || (run.size() > token.size() && run.compare(0, token.size(), token) == 0 &&
                           (run[token.size()] == '-' || run[token.size()] == '+' ||
                            run[token.size()] == '!' || run[token.size()] == '~') &&
                           token.back() != run[token.size()]))
        r.push_back(i);
      i = j;
      continue;
    }
    ++i;
  }
  return r;
}

// The translator's `static_cast< ::metal::alloy_detail::cond_t<decltype((a)), decltype((b))>>(`
// insertions in a translated line.
std::vector<bool> inserted(const std::string& s) {
  std::vector<bool> skip(s.size(), false);
  const std::string prefix = " static_cast< ::metal::alloy_detail::cond_t<decltype((";
  for (size_t p = s.find(prefix); p != std::string::npos; p = s.find(prefix, p + 1)) {
    size_t i = p + prefix.size();
    int depth = 2, closed = 0;
    for (; i < s.size() && closed < 2; ++i) {
      if (s[i] == '(') ++depth;
      if (s[i] == ')' && --depth == 0) {
        ++closed;
        if (closed == 1) {
          size_t q = s.find("decltype((", i);
          if (q == std::string::npos) break;
          i = q + 9;
          depth = 2;
        }
      }
    }
    size_t end = s.compare(i, 3, ">>(") == 0 ? i + 3 : i;
    for (size_t k = p; k < end && k < s.size(); ++k) skip[k] = true;
  }
  return skip;
}

}  // namespace

std::string metal_result_type(const std::string& kind, const std::string& a, const std::string& b) {
  if (!scalars().count(a) || !scalars().count(b)) return "";
  if (kind == "comparison") return "bool";
  std::string ma = a == "double" ? "float" : a, mb = b == "double" ? "float" : b;
  if (kind == "compound-assignment") return ma;  // computed in the common type, stored as the lhs
  if (ma == mb) return ma;
  if (lowp(ma) || lowp(mb)) {
    if (lowp(ma) && lowp(mb)) return "float";  // half with bfloat
    const std::string& l = lowp(ma) ? ma : mb;
    const std::string& o = lowp(ma) ? mb : ma;
    return scalars().at(o).floating ? o : l;  // with float -> float; with an integer -> the 16-bit
  }
  return usual(ma, mb);
}

int user_column(const std::string& translated_line, int column, const std::string& user_line,
                const std::string& token) {
  if (column <= 0 || token.empty()) return 0;
  std::vector<bool> skip = inserted(translated_line);
  std::vector<size_t> t = occurrences(translated_line, skip, token);
  std::vector<size_t> u = occurrences(user_line, {}, token);
  if (t.size() != u.size()) return 0;
  for (size_t n = 0; n < t.size(); ++n)
    if (t[n] == static_cast<size_t>(column - 1)) return static_cast<int>(u[n]) + 1;
  return 0;
}

}  // namespace alloy::typed
