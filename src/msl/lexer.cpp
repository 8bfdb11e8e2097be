#include "msl/lexer.h"

#include <cctype>

namespace alloy::msl {
namespace {
bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Longest-match punctuators (C++ subset MSL uses).
constexpr std::string_view kPuncts[] = {"<<=", ">>=", "...", "->*", "::", "->", "++", "--", "<<",
                                        ">>",  "<=",  ">=",  "==",  "!=", "&&", "||", "+=", "-=",
                                        "*=",  "/=",  "%=",  "&=",  "|=", "^=", "##"};
}  // namespace

std::vector<Token> lex(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0, n = s.size();
  int line = 1;
  bool line_start = true;   // only whitespace since the last newline
  out.reserve(n / 4 + 16);  // typical sources: ~2 tokens per 8 characters, spaces included
  auto emit = [&](TokKind k, size_t begin, size_t end) {
    std::string_view text = s.substr(begin, end - begin);
    out.push_back({k, std::string(text), line});
    for (char c : text)
      if (c == '\n') ++line;
  };
  while (i < n) {
    char c = s[i];
    size_t b = i;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ||
                       s[i] == '\f' || s[i] == '\v')) {
        if (s[i] == '\n') line_start = true;
        ++i;
      }
      emit(TokKind::space, b, i);
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      emit(TokKind::comment, b, i);
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) ++i;
      i = i + 1 < n ? i + 2 : n;
      emit(TokKind::comment, b, i);
      continue;
    }
    if (c == '#' && line_start) {
      // Directive up to an unescaped newline (the newline stays whitespace).
      while (i < n && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\n')
          ++i;
        else if (s[i] == '\\' && i + 2 < n && s[i + 1] == '\r' && s[i + 2] == '\n')
          i += 2;
        ++i;
      }
      emit(TokKind::preproc, b, i);
      continue;
    }
    line_start = false;
    if (ident_start(c)) {
      while (i < n && ident_char(s[i])) ++i;
      emit(TokKind::ident, b, i);
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < n && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      // pp-number: digits, letters, '.', and exponent signs.
      while (i < n) {
        char d = s[i];
        if (ident_char(d) || d == '.' || d == '\'') {
          ++i;
        } else if ((d == '+' || d == '-') &&
                   (s[i - 1] == 'e' || s[i - 1] == 'E' || s[i - 1] == 'p' || s[i - 1] == 'P')) {
          ++i;
        } else {
          break;
        }
      }
      emit(TokKind::number, b, i);
      continue;
    }
    if (c == '"' || c == '\'') {
      ++i;
      while (i < n && s[i] != c && s[i] != '\n') i += (s[i] == '\\' && i + 1 < n) ? 2 : 1;
      if (i < n && s[i] == c) ++i;
      emit(c == '"' ? TokKind::string : TokKind::character, b, i);
      continue;
    }
    size_t len = 1;
    for (auto p : kPuncts)
      if (p[0] == c && s.substr(i, p.size()) == p) {
        len = p.size();
        break;
      }
    i += len;
    emit(TokKind::punct, b, i);
  }
  return out;
}

}  // namespace alloy::msl
