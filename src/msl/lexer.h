// A token-level lexer for Metal Shading Language (a C++14 dialect). It keeps every character:
// concatenating the token texts gives back the input, so the translator can rewrite tokens in
// place and keep line numbers (the basis of the source map for compiler diagnostics).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace alloy::msl {

enum class TokKind { ident, number, string, character, punct, space, comment, preproc };

struct Token {
  TokKind kind;
  std::string text;
  int line;  // 1-based line of the token's first character

  bool is(std::string_view s) const { return text == s && kind != TokKind::string; }
  bool trivia() const { return kind == TokKind::space || kind == TokKind::comment; }
};

/// Splits `source` into tokens. Preprocessor directives are one token each (with continuation
/// lines). Never throws for malformed input: unknown characters become one-character punctuation.
std::vector<Token> lex(std::string_view source);

}  // namespace alloy::msl
