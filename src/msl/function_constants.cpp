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
  std::map<std::string, bool> defined;  // constant name -> has a value
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
    std::string type;
    for (size_t w = 0; w + 1 < words.size(); ++w) {
      const std::string& x = t[words[w]].text;
      if (x == "constant" || x == "const" || x == "constexpr" || x == "static") continue;
      type += (type.empty() ? "" : " ") + x;
    }
    if (type.empty()) continue;
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
