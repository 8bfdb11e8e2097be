#include "msl/macros.h"

#include <fmt/format.h>

#include <cctype>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "msl/lexer.h"

namespace alloy::msl {
namespace {

struct Macro {
  std::string name;
  std::vector<std::string> params;  // without "..."
  bool variadic = false;
  std::vector<Token> body;
  int line = 0;
};

// Lexes a fragment that does not start a line: a leading `#` is the stringizing operator, not a
// directive (the lexer only reads directives at the start of a line).
std::vector<Token> lex_fragment(std::string_view text) {
  auto toks = lex("$ " + std::string(text));
  toks.erase(toks.begin(), toks.begin() + 2);  // "$" and the space
  return toks;
}

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Parses `#define NAME(params) body` (function-like macros only); false for anything else.
bool parse_define(const Token& t, Macro& m) {
  std::string s;
  for (size_t i = 0; i < t.text.size(); ++i) {  // splice continuation lines
    if (t.text[i] == '\\' && i + 1 < t.text.size() && t.text[i + 1] == '\n') {
      s += ' ';
      ++i;
    } else if (t.text[i] == '\\' && i + 2 < t.text.size() && t.text[i + 1] == '\r' &&
               t.text[i + 2] == '\n') {
      s += ' ';
      i += 2;
    } else {
      s += t.text[i];
    }
  }
  size_t p = s.find_first_not_of(" \t", 1);
  if (p == std::string::npos || s.compare(p, 6, "define") != 0) return false;
  p = s.find_first_not_of(" \t", p + 6);
  if (p == std::string::npos) return false;
  size_t q = p;
  while (q < s.size() && is_ident_char(s[q])) ++q;
  if (q == p || q >= s.size() || s[q] != '(') return false;  // object-like macro
  m.name = s.substr(p, q - p);
  size_t close = s.find(')', q);
  if (close == std::string::npos) return false;
  std::string plist = s.substr(q + 1, close - q - 1);
  size_t b = 0;
  while (b <= plist.size()) {
    size_t e = plist.find(',', b);
    if (e == std::string::npos) e = plist.size();
    std::string param = plist.substr(b, e - b);
    size_t f = param.find_first_not_of(" \t"), l = param.find_last_not_of(" \t");
    param = f == std::string::npos ? "" : param.substr(f, l - f + 1);
    if (param == "...") {
      m.variadic = true;
    } else if (!param.empty()) {
      m.params.push_back(param);
    }
    b = e + 1;
  }
  m.body = lex_fragment(s.substr(close + 1));
  m.line = t.line;
  return true;
}

bool body_declares_kernel(const Macro& m, const std::set<std::string>& kernel_macros) {
  for (auto& t : m.body) {
    if (t.kind != TokKind::ident) continue;
    if (t.text == "host_name" || t.text == "kernel" || kernel_macros.count(t.text)) return true;
  }
  return false;
}

std::string newlines_of(const std::string& text) {
  std::string nl;
  for (char c : text)
    if (c == '\n') nl += '\n';
  return nl;
}

class Expander {
 public:
  explicit Expander(const std::map<std::string, Macro>& macros) : macros_(macros) {}

  // Expands the kernel-macro invocations in toks[b, e); the text of everything else is kept.
  std::string expand(const std::vector<Token>& toks, size_t b, size_t e,
                     std::set<std::string>& disabled, int depth) {
    std::string out;
    for (size_t i = b; i < e; ++i) {
      size_t close = 0;
      std::string expansion;
      if (try_invocation(toks, i, e, disabled, depth, expansion, close)) {
        out += expansion;
        i = close;
      } else {
        out += toks[i].text;
      }
    }
    return out;
  }

  // When toks[i] starts an invocation of a kernel macro: its expansion (fully rescanned) and the
  // index of its closing parenthesis.
  bool try_invocation(const std::vector<Token>& toks, size_t i, size_t e,
                      std::set<std::string>& disabled, int depth, std::string& expansion,
                      size_t& close) {
    const Token& t = toks[i];
    if (t.kind != TokKind::ident) return false;
    auto it = macros_.find(t.text);
    if (it == macros_.end() || disabled.count(t.text)) return false;
    size_t open = i + 1;
    while (open < e && toks[open].trivia()) ++open;
    if (open >= e || !toks[open].is("(")) return false;
    const Macro& m = it->second;
    if (depth > 64)
      throw std::invalid_argument(
          fmt::format("macro '{}' (line {}) expands recursively too deep", m.name, t.line));
    // Arguments: token ranges split at top-level commas.
    std::vector<std::pair<size_t, size_t>> args;
    int level = 0;
    size_t start = open + 1;
    close = std::string::npos;
    for (size_t j = open; j < e; ++j) {
      if (toks[j].kind != TokKind::punct) continue;
      if (toks[j].is("(") || toks[j].is("[") || toks[j].is("{")) {
        ++level;
      } else if (toks[j].is(")") || toks[j].is("]") || toks[j].is("}")) {
        if (--level == 0) {
          args.push_back({start, j});
          close = j;
          break;
        }
      } else if (toks[j].is(",") && level == 1) {
        args.push_back({start, j});
        start = j + 1;
      }
    }
    if (close == std::string::npos)
      throw std::invalid_argument(fmt::format(
          "unbalanced parentheses in the invocation of macro '{}' (line {})", m.name, t.line));
    for (auto& [ab, ae] : args) {  // arguments are trimmed of surrounding whitespace
      while (ab < ae && toks[ab].trivia()) ++ab;
      while (ae > ab && toks[ae - 1].trivia()) --ae;
    }
    size_t nparams = m.params.size();
    bool empty_call = args.size() == 1 && is_blank(toks, args[0].first, args[0].second);
    if (nparams == 0 && !m.variadic && empty_call) args.clear();
    if (m.variadic ? args.size() < nparams : args.size() != nparams)
      throw std::invalid_argument(
          fmt::format("macro '{}' (line {}) takes {}{} argument(s), {} given", m.name, t.line,
                      m.variadic ? "at least " : "", nparams, args.size()));
    // Raw argument ranges per parameter name (__VA_ARGS__: the rest, commas included).
    std::map<std::string, std::pair<size_t, size_t>> bound;
    for (size_t a = 0; a < nparams; ++a) bound[m.params[a]] = args[a];
    if (m.variadic) {
      if (args.size() > nparams)
        bound["__VA_ARGS__"] = {args[nparams].first, args.back().second};
      else
        bound["__VA_ARGS__"] = {close, close};
    }
    std::string substituted = substitute(m, toks, bound, disabled, depth);
    // Rescan the result with this macro disabled (C: a macro never expands inside itself).
    disabled.insert(m.name);
    auto again = lex_fragment(substituted);
    expansion = expand(again, 0, again.size(), disabled, depth + 1);
    disabled.erase(m.name);
    return true;
  }

 private:
  const std::map<std::string, Macro>& macros_;

  static bool is_blank(const std::vector<Token>& toks, size_t b, size_t e) {
    for (size_t i = b; i < e; ++i)
      if (!toks[i].trivia()) return false;
    return true;
  }

  // The argument's spelling with whitespace (and comments) collapsed, trimmed.
  static std::string raw_text(const std::vector<Token>& toks, std::pair<size_t, size_t> r) {
    std::string s;
    bool space = false;
    for (size_t i = r.first; i < r.second; ++i) {
      if (toks[i].trivia()) {
        space = !s.empty();
        continue;
      }
      if (space) s += ' ';
      space = false;
      s += toks[i].text;
    }
    return s;
  }

  // `#param`: a string literal of the argument's spelling.
  static std::string stringize(const std::vector<Token>& toks, std::pair<size_t, size_t> r) {
    std::string s = "\"";
    bool space = false;
    for (size_t i = r.first; i < r.second; ++i) {
      const Token& t = toks[i];
      if (t.trivia()) {
        space = s.size() > 1;
        continue;
      }
      if (space) s += ' ';
      space = false;
      if (t.kind == TokKind::string || t.kind == TokKind::character) {
        for (char c : t.text) {
          if (c == '"' || c == '\\') s += '\\';
          s += c;
        }
      } else {
        s += t.text;
      }
    }
    return s + "\"";
  }

  std::string substitute(const Macro& m, const std::vector<Token>& toks,
                         const std::map<std::string, std::pair<size_t, size_t>>& bound,
                         std::set<std::string>& disabled, int depth) {
    const auto& body = m.body;
    auto next_sig = [&](size_t i) {
      ++i;
      while (i < body.size() && body[i].trivia()) ++i;
      return i;
    };
    auto param_of = [&](size_t i) -> const std::pair<size_t, size_t>* {
      if (i >= body.size() || body[i].kind != TokKind::ident) return nullptr;
      auto it = bound.find(body[i].text);
      return it == bound.end() ? nullptr : &it->second;
    };
    std::vector<std::string> pieces;  // one per emitted token ("" = dropped)
    std::vector<bool> trivia;
    auto emit = [&](std::string s, bool is_trivia) {
      pieces.push_back(std::move(s));
      trivia.push_back(is_trivia);
    };
    for (size_t i = 0; i < body.size(); ++i) {
      const Token& t = body[i];
      if (t.is("#") && t.kind == TokKind::punct) {
        size_t j = next_sig(i);
        if (auto* r = param_of(j)) {
          emit(stringize(toks, *r), false);
          i = j;
          continue;
        }
      }
      if (t.is("##")) {
        while (!pieces.empty() && trivia.back()) {
          pieces.pop_back();
          trivia.pop_back();
        }
        size_t j = next_sig(i);
        if (j >= body.size()) break;
        std::string rhs = param_of(j) ? raw_text(toks, *param_of(j)) : body[j].text;
        if (pieces.empty())
          emit(rhs, false);
        else
          pieces.back() += rhs;
        i = j;
        continue;
      }
      if (auto* r = param_of(i)) {
        size_t j = next_sig(i);
        bool pasted = j < body.size() && body[j].is("##");
        if (pasted)
          emit(raw_text(toks, *r), false);
        else
          emit(expand(toks, r->first, r->second, disabled, depth + 1), false);
        continue;
      }
      emit(t.text, t.trivia());
    }
    std::string s;
    for (auto& p : pieces) s += p;
    return s;
  }
};

// One line: adjacent string literals merged (C++ concatenates them anyway; the translator reads
// `[[host_name("...")]]` as one literal), newlines of multi-line arguments turned into spaces.
std::string one_line(const std::string& text) {
  auto toks = lex_fragment(text);
  std::string out;
  bool space = false, last_string = false;
  for (auto& t : toks) {
    if (t.trivia()) {
      space = !out.empty();
      continue;
    }
    bool is_string = t.kind == TokKind::string && t.text.size() >= 2 && t.text.front() == '"';
    if (is_string && last_string) {
      out.pop_back();  // the closing quote of the previous literal
      out += t.text.substr(1);
      space = false;
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += t.text;
    last_string = is_string;
  }
  return out;
}

}  // namespace

std::string expand_kernel_macros(std::string_view source) {
  auto toks = lex(source);
  std::map<std::string, Macro> all;
  std::map<std::string, size_t> define_at;
  for (size_t i = 0; i < toks.size(); ++i) {
    if (toks[i].kind != TokKind::preproc) continue;
    Macro m;
    if (parse_define(toks[i], m)) {
      define_at[m.name] = i;
      all[m.name] = std::move(m);
    }
  }
  if (all.empty()) return std::string(source);
  // Kernel macros: those whose body declares a kernel, closed over macros calling them.
  std::set<std::string> kernel_names;
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& [name, m] : all)
      if (!kernel_names.count(name) && body_declares_kernel(m, kernel_names)) {
        kernel_names.insert(name);
        changed = true;
      }
  }
  if (kernel_names.empty()) return std::string(source);
  std::map<std::string, Macro> kernel_macros;
  for (auto& n : kernel_names) kernel_macros[n] = all[n];

  // Their #define and #undef lines go away (their invocations are expanded here).
  for (auto& n : kernel_names) {
    Token& d = toks[define_at[n]];
    d.text = newlines_of(d.text);
    d.kind = TokKind::space;
  }
  for (auto& t : toks) {
    if (t.kind != TokKind::preproc) continue;
    size_t p = t.text.find_first_not_of(" \t", 1);
    if (p == std::string::npos || t.text.compare(p, 5, "undef") != 0) continue;
    size_t q = t.text.find_first_not_of(" \t", p + 5);
    if (q == std::string::npos) continue;
    size_t r = q;
    while (r < t.text.size() && is_ident_char(t.text[r])) ++r;
    if (kernel_names.count(t.text.substr(q, r - q))) {
      t.text = newlines_of(t.text);
      t.kind = TokKind::space;
    }
  }

  Expander ex(kernel_macros);
  std::string out;
  out.reserve(source.size() * 2);
  for (size_t i = 0; i < toks.size(); ++i) {
    std::set<std::string> disabled;
    std::string expansion;
    size_t close = 0;
    if (toks[i].kind == TokKind::ident &&
        ex.try_invocation(toks, i, toks.size(), disabled, 0, expansion, close)) {
      std::string spanned;
      for (size_t j = i; j <= close; ++j) spanned += toks[j].text;
      out += one_line(expansion);
      out += newlines_of(spanned);
      i = close;
    } else {
      out += toks[i].text;
    }
  }
  return out;
}

}  // namespace alloy::msl
