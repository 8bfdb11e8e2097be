#include "msl/function_constants.h"

#include <fmt/format.h>

#include <set>
#include <stdexcept>

#include "msl/lexer.h"

namespace alloy::msl {
namespace {

std::string spell(const FunctionConstantValue& v) {
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return fmt::format("{:.17g}", std::get<double>(v));
}

std::string newlines_of(const std::vector<Token>& t, size_t b, size_t e) {
  std::string nl;
  for (size_t i = b; i <= e; ++i)
    for (char c : t[i].text)
      if (c == '\n') nl += '\n';
  return nl;
}

bool truthy(const FunctionConstantValue& v) {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (auto* i = std::get_if<int64_t>(&v)) return *i != 0;
  return std::get<double>(v) != 0.0;
}

// A kernel parameter whose attribute list holds `function_constant(c)` (`const device T* bias
// [[buffer(2), function_constant(has_bias)]]`): when c is true the attribute is dropped (the
// parameter is an ordinary one); otherwise the parameter is removed from the list (with one
// comma; newlines kept) and declared at the top of the body instead, a null pointer (or a
// reference through one), so that the body, whose uses Metal requires to be guarded by c, still
// compiles. Metal's argument table then has no entry for it, as on Metal.
void rewrite_conditional_parameters(std::vector<Token>& t,
                                    const std::map<std::string, bool>& constants) {
  auto next = [&](size_t i) {
    while (i < t.size() && t[i].trivia()) ++i;
    return i;
  };
  auto blank = [&](size_t j) {
    std::string nl;
    for (char c : t[j].text)
      if (c == '\n') nl += '\n';
    t[j].text = nl;
    t[j].kind = TokKind::space;
  };
  std::map<size_t, std::string> body_decls;  // `{` token -> declarations to insert after it
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    if (!(t[i].is("[") && t[i + 1].is("["))) continue;
    // The attribute list [[ ... ]] and a function_constant(c) item in it.
    size_t close = i + 2, fc = 0;
    int depth = 0;
    for (; close + 1 < t.size(); ++close) {
      if (t[close].is("(")) ++depth;
      if (t[close].is(")")) --depth;
      if (depth == 0 && t[close].is("]") && t[close + 1].is("]")) break;
      if (depth == 0 && t[close].is("function_constant")) fc = close;
    }
    if (close + 1 >= t.size() || !fc) continue;
    size_t lp = next(fc + 1), nm = next(lp + 1), rp = next(nm + 1);
    if (rp >= close || !t[lp].is("(") || t[nm].kind != TokKind::ident || !t[rp].is(")")) continue;
    size_t after = next(close + 2);
    if (after >= t.size() || !(t[after].is(",") || t[after].is(")"))) continue;  // not a parameter
    auto it = constants.find(t[nm].text);
    bool present = it != constants.end() && it->second;
    if (present) {
      // Drop `function_constant(c)` and the comma that separates it from its neighbour.
      size_t b = fc, e = rp;
      size_t prev = fc;
      while (prev > i + 2 && t[prev - 1].trivia()) --prev;
      if (prev > i + 2 && t[prev - 1].is(",")) {
        b = prev - 1;
      } else {
        size_t n2 = next(rp + 1);
        if (n2 < close && t[n2].is(",")) e = n2;
      }
      for (size_t j = b; j <= e; ++j) blank(j);
      i = close + 1;
      continue;
    }
    // The parameter's first token: after the `,` or `(` that opens it.
    size_t start = i;
    depth = 0;
    while (start > 0) {
      const auto& p = t[start - 1];
      if (p.is(")") || p.is("]") || p.is(">")) ++depth;
      if (p.is("(") || p.is("[") || p.is("<")) {
        if (depth == 0) break;
        --depth;
      }
      if (depth == 0 && p.is(",")) break;
      --start;
    }
    if (start == 0) continue;
    start = next(start);
    std::vector<size_t> words;
    for (size_t j = start; j < i; ++j)
      if (!t[j].trivia()) words.push_back(j);
    if (words.size() < 2 || t[words.back()].kind != TokKind::ident) continue;
    std::string name = t[words.back()].text, type;
    for (size_t w = 0; w + 1 < words.size(); ++w)
      type += (type.empty() || t[words[w]].is("*") || t[words[w]].is("&") ? "" : " ") +
              t[words[w]].text;
    // The `)` closing the parameter list and the body's `{`.
    size_t rparen = after;
    depth = 0;
    for (; rparen < t.size(); ++rparen) {
      if (t[rparen].is("(")) ++depth;
      if (t[rparen].is(")")) {
        if (depth == 0) break;
        --depth;
      }
    }
    size_t brace = next(rparen + 1);
    if (brace >= t.size() || !t[brace].is("{")) continue;
    std::string decl;
    if (!type.empty() && type.back() == '&') {
      std::string base = type.substr(0, type.size() - 1);
      decl = fmt::format(" {} {} = *static_cast<{}*>(nullptr);", type, name, base);
    } else if (!type.empty() && type.back() == '*') {
      decl = fmt::format(" {} {} = nullptr;", type, name);
    } else {
      decl = fmt::format(" {} {} = {{}};", type, name);
    }
    body_decls[brace] += decl;
    // Remove the parameter with one comma: the one before it when it is the last parameter.
    size_t b = start, e = close + 1;
    if (t[after].is(",")) {
      e = after;
    } else {
      size_t prev = start;
      while (prev > 0 && t[prev - 1].trivia()) --prev;
      if (prev > 0 && t[prev - 1].is(",")) b = prev - 1;
    }
    for (size_t j = b; j <= e; ++j) blank(j);
    i = e;
  }
  for (auto& [brace, decls] : body_decls) t[brace].text += decls;
}

}  // namespace

std::string apply_function_constants(std::string_view source, const FunctionConstants& values,
                                     const std::string& label) {
  if (source.find("function_constant") == std::string_view::npos) {
    if (!values.by_index.empty() || !values.by_name.empty())
      throw std::invalid_argument(
          fmt::format("[library] function_constants: '{}' declares no function constant", label));
    return std::string(source);
  }
  auto t = lex(source);
  auto next = [&](size_t i) {
    while (i < t.size() && t[i].trivia()) ++i;
    return i;
  };
  std::map<std::string, bool> defined;    // constant name -> has a value
  std::map<std::string, bool> constants;  // constant name -> given a true (nonzero) value
  std::set<int> used_index, declared_index;
  std::set<std::string> used_name;
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    // [[function_constant(n)]] on a program-scope declaration.
    if (!(t[i].is("[") && t[i + 1].is("["))) continue;
    size_t f = next(i + 2);
    if (f >= t.size() || !t[f].is("function_constant")) continue;
    size_t lp = next(f + 1), num = next(lp + 1), rp = next(num + 1);
    if (rp >= t.size() || !t[lp].is("(") || t[num].kind != TokKind::number || !t[rp].is(")"))
      continue;
    size_t c1 = next(rp + 1), c2 = next(c1 + 1), semi = next(c2 + 1);
    if (semi >= t.size() || !t[c1].is("]") || !t[c2].is("]") || !t[semi].is(";")) continue;
    // Declaration start: after the previous ';', '{', '}' or directive.
    size_t start = i;
    while (start > 0) {
      const auto& p = t[start - 1];
      if (p.is(";") || p.is("{") || p.is("}") || p.kind == TokKind::preproc) break;
      --start;
    }
    start = next(start);
    std::vector<size_t> words;  // significant tokens before the attribute
    for (size_t j = start; j < i; ++j)
      if (!t[j].trivia()) words.push_back(j);
    if (words.size() < 2 || t[words.back()].kind != TokKind::ident) continue;
    std::string name = t[words.back()].text;
    // The type is the word before the name (a function constant is a scalar or vector type:
    // bool, int, uint, half, float2...); the words before it are qualifiers, possibly through a
    // macro (MLX's `STEEL_CONST bool inv_ [[function_constant(0)]];`, STEEL_CONST being
    // `static constant constexpr const`).
    std::string type = t[words[words.size() - 2]].text;
    if (type.empty() || type == "constant" || type == "const" || type == "constexpr" ||
        type == "static")
      continue;
    int index = std::stoi(t[num].text, nullptr, 0);
    declared_index.insert(index);
    const FunctionConstantValue* v = nullptr;
    if (auto it = values.by_name.find(name); it != values.by_name.end()) {
      v = &it->second;
      used_name.insert(name);
    } else if (auto it2 = values.by_index.find(index); it2 != values.by_index.end()) {
      v = &it2->second;
      used_index.insert(index);
    }
    defined[name] = v != nullptr;
    constants[name] = v && truthy(*v);
    std::string text =
        fmt::format("constexpr {} {} = {}({});", type, name, type, v ? spell(*v) : std::string());
    std::string nl = newlines_of(t, start, semi);
    for (size_t j = start; j <= semi; ++j) {
      t[j].text = "";
      t[j].kind = TokKind::space;
    }
    t[start].text = text + nl;
    i = semi;
  }
  for (auto& [idx, v] : values.by_index)
    if (!used_index.count(idx) && !declared_index.count(idx))
      throw std::invalid_argument(fmt::format(
          "[library] function_constants: no constant of '{}' has index {}", label, idx));
  for (auto& [n, v] : values.by_name)
    if (!used_name.count(n))
      throw std::invalid_argument(fmt::format(
          "[library] function_constants: '{}' declares no function constant '{}'", label, n));
  // Parameters declared with `[[buffer(n), function_constant(c)]]` exist only when c is true
  // (Metal drops them from the function otherwise; their uses are guarded by c).
  rewrite_conditional_parameters(t, constants);
  // is_function_constant_defined(name) -> true / false.
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].is("is_function_constant_defined")) continue;
    size_t lp = next(i + 1), nm = next(lp + 1), rp = next(nm + 1);
    if (rp >= t.size() || !t[lp].is("(") || !t[rp].is(")")) continue;
    auto it = defined.find(t[nm].text);
    bool d = it != defined.end() && it->second;
    for (size_t j = i; j <= rp; ++j) {
      t[j].text = newlines_of(t, j, j);
      t[j].kind = TokKind::space;
    }
    t[i].text = d ? "true" : "false";
    t[i].kind = TokKind::ident;
  }
  std::string out;
  for (auto& x : t) out += x.text;
  return out;
}

}  // namespace alloy::msl
