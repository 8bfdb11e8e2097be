#include "msl/translate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

#include "alloy/errors.h"
#include "core/env.h"
#include "msl/lexer.h"
#include "msl/macros.h"
#include "msl/prelude_select.h"
#include "msl/regions.h"
#include "msl/target.h"

namespace alloy::msl {

const std::vector<std::string>& attribute_names() {
  static const std::vector<std::string>& names = *new std::vector<std::string>({
      "dispatch_quadgroups_per_threadgroup",
      "dispatch_simdgroups_per_threadgroup",
      "dispatch_threads_per_threadgroup",
      "grid_origin",
      "grid_size",
      "quadgroup_index_in_threadgroup",
      "quadgroups_per_threadgroup",
      "simdgroup_index_in_threadgroup",
      "simdgroups_per_threadgroup",
      "thread_execution_width",
      "thread_index_in_quadgroup",
      "thread_index_in_simdgroup",
      "thread_index_in_threadgroup",
      "thread_position_in_grid",
      "thread_position_in_threadgroup",
      "threadgroup_position_in_grid",
      "threadgroups_per_grid",
      "threads_per_grid",
      "threads_per_simdgroup",
      "threads_per_threadgroup",
  });
  return names;
}

namespace {

// Identifiers that name Metal features Alloy does not run: reject them with a clear message
// rather than letting the target compiler fail obscurely (or worse, miscompile).
const std::map<std::string, std::string, std::less<>>& unsupported_idents() {
  static const std::map<std::string, std::string, std::less<>>& m =
      *new std::map<std::string, std::string, std::less<>>({
          {"texture1d", "textures"},
          {"texture1d_array", "textures"},
          {"texture2d", "textures"},
          {"texture2d_array", "textures"},
          {"texture2d_ms", "textures"},
          {"texture3d", "textures"},
          {"texturecube", "textures"},
          {"texturecube_array", "textures"},
          {"texture_buffer", "textures"},
          {"depth2d", "depth textures"},
          {"depth2d_array", "depth textures"},
          {"depthcube", "depth textures"},
          {"sampler", "samplers"},
          {"imageblock", "imageblocks"},
          {"threadgroup_imageblock", "imageblocks"},
          {"render_grid", "render functions"},
          {"intersection_function_table", "ray tracing"},
          {"visible_function_table", "function tables"},
          {"acceleration_structure", "ray tracing"},
          {"command_buffer", "indirect command buffers"},
          {"indirect_command_buffer", "indirect command buffers"},
      });
  return m;
}

const std::set<std::string, std::less<>>& unsupported_attributes() {
  static const std::set<std::string, std::less<>>& s = *new std::set<std::string, std::less<>>(
      {"vertex", "fragment", "stage_in", "texture", "sampler", "color", "position", "visible",
       "intersection", "object", "mesh", "payload", "raster_order_group",
       "render_target_array_index", "vertex_id", "instance_id"});
  return s;
}

constexpr const char* kKernelPrefix = "alloy_kernel_";

// `uint3`, `const ushort2`, ...: an attribute's declared type is one of Metal's vector spellings
// (which the CUDA entry binds with alloy_entry::attr_vec, components only).
bool vector_attribute(std::string_view t) {
  if (t.substr(0, 6) == "const ") t.remove_prefix(6);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  if (t.size() < 2 || t.back() < '2' || t.back() > '4') return false;
  t.remove_suffix(1);
  return t == "uint" || t == "ushort" || t == "int" || t == "short";
}

// The 2- and 3-component ones, which the CUDA translation declares as alloy_attr_<spelling>.
bool cuda_attribute_vector(std::string_view t) {
  if (!vector_attribute(t)) return false;
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  return t.back() == '2' || t.back() == '3';
}

bool is_sync_ident(std::string_view s) {
  return s == "threadgroup_barrier" || s == "simdgroup_barrier" || s.starts_with("simd_") ||
         s.starts_with("quad_") ||
         (s.starts_with("simdgroup_") && s != "simdgroup_index_in_threadgroup" &&
          s != "simdgroups_per_threadgroup");
}

class Translator {
 public:
  Translator(std::string_view src, const TranslateOptions& opt)
      : opt_(opt), traits_(target_traits(opt.target)), toks_(lex(src)) {}

  Translation run() {
    check_comments();
    check_unsupported();
    rewrite_preprocessor();
    collect_attributes_and_kernels();
    flatten_metal_namespace();
    find_address_space_specializations();
    find_address_space_overloads();
    rewrite_qualifiers();
    merge_address_space_specializations();
    merge_address_space_overloads();
    rewrite_literals();
    rewrite_nested_swizzles();
    rewrite_conditionals();
    detect_sync();
    return finish();
  }

 private:
  const TranslateOptions& opt_;
  const TargetTraits& traits_;
  std::vector<Token> toks_;
  Translation out_;
  struct Instantiation {
    std::string host_name, function;
    // Written with its parameter list (`template [[host_name("x")]] [[kernel]] void f(const
    // device float* a [[buffer(0)]], ...);`): each parameter's type, attributes and name left out.
    std::vector<std::string> param_types = {};
  };
  std::vector<Instantiation> insts_;
  struct KernelDecl {
    std::string name;
    bool is_template = false;
    std::vector<std::string> template_params;  // names, in order
    std::vector<bool> template_param_is_type;  // `typename` / `class` parameters
    std::string host_name;
    std::vector<KernelParam> params;
    int max_threads = 0;
    size_t params_close = 0, body_open = 0, body_close = 0;  // token indices
  };
  std::vector<KernelDecl> decls_;
  int tg_slot_ = 0;
  std::vector<std::pair<int, size_t>> tg_decls_;  // (slot, token) of each threadgroup declaration

  // The nearest earlier threadgroup declaration still in scope at token i (its scope not closed
  // since), -1 when none: the declaration that i's threadgroup frame offset follows.
  int visible_tg_slot(size_t i) const {
    for (size_t d = tg_decls_.size(); d-- > 0;) {
      int depth = 0;
      bool closed = false;
      for (size_t j = tg_decls_[d].second; j < i && !closed; ++j) {
        if (toks_[j].kind != TokKind::punct) continue;
        if (toks_[j].is("{")) ++depth;
        if (toks_[j].is("}")) closed = --depth < 0;
      }
      if (!closed) return tg_decls_[d].first;
    }
    return -1;
  }

  [[noreturn]] void not_supported(const std::string& what, int line) {
    throw NotSupported(opt_.label, fmt::format("not supported: {} (kernel '{}', Metal source line "
                                               "{}); Alloy runs compute kernels only",
                                               what, opt_.label, line));
  }
  [[noreturn]] void bad(const std::string& what, int line) {
    throw std::invalid_argument(
        fmt::format("[metal_kernel] {} (kernel '{}', line {})", what, opt_.label, line));
  }

  // Index of the next non-trivia token at or after i (toks_.size() if none).
  size_t next(size_t i) const {
    while (i < toks_.size() && toks_[i].trivia()) ++i;
    return i;
  }
  size_t prev(size_t i) const {  // previous significant token before i, or npos
    while (i > 0) {
      --i;
      if (!toks_[i].trivia()) return i;
    }
    return std::string::npos;
  }
  // Blanks a token but keeps its newlines, so line numbers stay put.
  void blank(size_t i) {
    std::string nl;
    for (char c : toks_[i].text)
      if (c == '\n') nl += '\n';
    toks_[i].text = nl.empty() ? "" : nl;
    toks_[i].kind = TokKind::space;
  }
  void blank_range(size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) blank(i);
  }
  // Index of the bracket matching the opener at i, scanning forward.
  size_t match(size_t i, std::string_view open, std::string_view close) const {
    int depth = 0;
    for (size_t j = i; j < toks_.size(); ++j) {
      if (toks_[j].kind != TokKind::punct) continue;
      if (toks_[j].text == open)
        ++depth;
      else if (toks_[j].text == close && --depth == 0)
        return j;
    }
    return std::string::npos;
  }
  bool is_attr_open(size_t i) const {
    return i + 1 < toks_.size() && toks_[i].is("[") && toks_[i + 1].is("[");
  }
  // For an attribute opening at i ("[["), returns the index of its final "]".
  size_t attr_close(size_t i) const {
    size_t j = match(i + 1, "[", "]");
    if (j == std::string::npos || j + 1 >= toks_.size() || !toks_[j + 1].is("]"))
      return std::string::npos;
    return j + 1;
  }
  // Like attr_close, but an attribute without its "]]" is an error (never read past the tokens).
  size_t attr_close_checked(size_t i) {
    size_t c = attr_close(i);
    if (c == std::string::npos) bad("unterminated [[attribute]] (missing ']]')", toks_[i].line);
    return c;
  }
  // The integer in the parentheses of attribute `a` (e.g. "buffer(3)"), within [lo, hi].
  int attr_int(const std::string& a, int lo, int hi, int line) {
    auto l = a.find('('), r = a.rfind(')');
    if (l == std::string::npos || r == std::string::npos || r < l)
      bad("[[" + a + "]] needs an integer in parentheses", line);
    std::string digits = a.substr(l + 1, r - l - 1);
    std::erase(digits, ' ');
    long long v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || v < lo ||
        v > hi) {
      std::string shown = a;  // as written, without the token separators
      std::erase(shown, ' ');
      bad(fmt::format("[[{}]] needs an integer between {} and {}", shown, lo, hi), line);
    }
    return static_cast<int>(v);
  }
  // An unterminated /* comment swallows the rest of the source: say so rather than report that
  // no kernel was found.
  void check_comments() {
    for (auto& t : toks_)
      if (t.kind == TokKind::comment && t.text.starts_with("/*") &&
          (t.text.size() < 4 || !t.text.ends_with("*/")))
        bad("unterminated /* comment", t.line);
  }
  std::string text_of(size_t b, size_t e) const {
    std::string s;
    for (size_t i = b; i < e; ++i) s += toks_[i].text;
    return s;
  }
  std::string compact(size_t b, size_t e) const {  // significant tokens joined by single spaces
    std::string s;
    for (size_t i = b; i < e; ++i) {
      if (toks_[i].trivia()) continue;
      if (!s.empty()) s += ' ';
      s += toks_[i].text;
    }
    return s;
  }

  void check_unsupported() {
    for (size_t i = 0; i < toks_.size(); ++i) {
      auto& t = toks_[i];
      if (t.kind != TokKind::ident) continue;
      auto it = unsupported_idents().find(t.text);
      if (it != unsupported_idents().end())
        not_supported(it->second + " ('" + t.text + "')", t.line);
      if ((t.text == "vertex" || t.text == "fragment")) {
        size_t n = next(i + 1);
        // `vertex float4 f(...)` / `fragment half4 f(...)`: render stage functions.
        if (n < toks_.size() && toks_[n].kind == TokKind::ident)
          not_supported(t.text + " functions", t.line);
      }
    }
  }

  void rewrite_preprocessor() {
    for (auto& t : toks_) {
      if (t.kind != TokKind::preproc) continue;
      std::string d = t.text.substr(1);
      size_t p = d.find_first_not_of(" \t");
      d = p == std::string::npos ? "" : d.substr(p);
      if (d.starts_with("define")) {
        if (!opt_.robust) t.text = "#" + define_qualifiers(t.text.substr(1));
        continue;
      }
      if (d.starts_with("include")) {
        if (d.find("MetalPerformancePrimitives") != std::string::npos)
          not_supported("MetalPerformancePrimitives ('#" + d + "')", t.line);
        if (d.find("<metal_") != std::string::npos || d.find("\"metal_") != std::string::npos) {
          t.text = "";  // the prelude provides the Metal standard library
          continue;
        }
        not_supported("#include of '" + d.substr(7) + "' (only Metal standard headers)", t.line);
      }
      if (d.starts_with("pragma")) {
        std::string rest = d.substr(6);
        bool unroll = rest.find("unroll") != std::string::npos;
        if (rest.find("METAL") != std::string::npos) {
          t.text = "";
        } else if (unroll) {
          // `#pragma unroll [N]` and `#pragma clang loop unroll(full|enable|disable|count(N))`.
          std::string count;
          auto c = rest.find("count(");
          if (c != std::string::npos)
            count = rest.substr(c + 6, rest.find(')', c) - c - 6);
          else {
            auto u = rest.find("unroll");
            std::string tail = rest.substr(u + 6);
            size_t q = tail.find_first_of("0123456789");
            if (q != std::string::npos && tail.find('(') == std::string::npos)
              count = tail.substr(q, tail.find_first_not_of("0123456789", q) - q);
          }
          bool disable = rest.find("disable") != std::string::npos;
          t.text = traits_.unroll_pragma(disable ? "1" : count);
        }
      }
    }
  }

  // Address spaces in a macro's replacement list (`#define MTL_CONST static constant constexpr
  // const`, as MLX's headers write): the same rules as in code, applied to the macro's tokens.
  // `threadgroup` is erased when a `*` or `&` follows it in the macro (a pointer or reference
  // type); a threadgroup object declared by a macro is left to the compiler's error.
  static std::string define_qualifiers(const std::string& directive) {
    auto toks = lex(directive);
    size_t i = 0;
    auto skip = [&] {
      while (i < toks.size() && toks[i].trivia()) ++i;
    };
    skip();
    if (i < toks.size() && toks[i].is("define")) ++i;
    skip();
    if (i < toks.size() && toks[i].kind == TokKind::ident) ++i;  // the macro's name
    if (i < toks.size() && toks[i].is("("))                      // its parameters
      while (i < toks.size() && !toks[i].is(")")) ++i;
    bool has_const = false;
    for (size_t j = i; j < toks.size(); ++j)
      if (toks[j].is("const") || toks[j].is("constexpr")) has_const = true;
    for (size_t j = i; j < toks.size(); ++j) {
      auto& t = toks[j];
      if (t.kind != TokKind::ident) continue;
      if (t.text == "device" || t.text == "thread") {
        t.text = "";
      } else if (t.text == "constant") {
        t.text = has_const ? "" : "const";
      } else if (t.text == "threadgroup") {
        for (size_t k = j + 1; k < toks.size(); ++k)
          if (toks[k].is("*") || toks[k].is("&")) {
            t.text = "";
            break;
          }
      }
    }
    std::string out;
    for (auto& t : toks) out += t.text;
    return out;
  }

  // The user's code already is inside `namespace metal` (so unqualified Metal names find the
  // prelude); a header reopening `namespace metal { ... }` (or `namespace metal::x {`) at program
  // scope would make a nested `metal::metal`, where `metal::bool_constant` is not found. Such a
  // namespace is dissolved into the enclosing one.
  void flatten_metal_namespace() {
    int depth = 0;
    for (size_t i = 0; i < toks_.size(); ++i) {
      if (toks_[i].is("{")) ++depth;
      if (toks_[i].is("}")) --depth;
      if (depth != 0 || !toks_[i].is("namespace")) continue;
      size_t m = next(i + 1);
      if (m >= toks_.size() || !toks_[m].is("metal")) continue;
      size_t o = next(m + 1);
      if (o < toks_.size() && toks_[o].is("::")) {  // namespace metal::x {  ->  namespace x {
        blank(m);
        blank(o);
        continue;
      }
      if (o >= toks_.size() || !toks_[o].is("{")) continue;
      size_t c = match(o, "{", "}");
      if (c == std::string::npos) bad("unbalanced braces in namespace metal", toks_[i].line);
      blank(i);
      blank(m);
      blank(o);
      blank(c);
    }
  }

  // Partial specialisations on address space (`elem<device T*>`, `elem<thread T*>`, as MLX's
  // pointer_element): the targets have one address space, so after the qualifiers are erased the
  // specialisations coincide. Identical ones are merged (the first is kept); ones that still
  // differ in their body cannot be represented and are reported.
  struct AsSpecialization {
    size_t begin, name, args_open, args_close, end;
  };
  std::vector<AsSpecialization> as_specs_;

  size_t match_angle(size_t i) const {  // '<' at i -> its '>' ('>>' closes two)
    int depth = 0;
    for (size_t j = i; j < toks_.size(); ++j) {
      const auto& t = toks_[j];
      if (t.kind != TokKind::punct) continue;
      if (t.text == "<") ++depth;
      if (t.text == ">") --depth;
      if (t.text == ">>") depth -= 2;
      if (depth <= 0 && (t.text == ">" || t.text == ">>"))
        return depth == 0 ? j : std::string::npos;
      if (t.text == ";" || t.text == "{" || t.text == "}") return std::string::npos;
    }
    return std::string::npos;
  }

  void find_address_space_specializations() {
    for (size_t i = 0; i < toks_.size(); ++i) {
      if (!toks_[i].is("template")) continue;
      size_t lt = next(i + 1);
      if (lt >= toks_.size() || !toks_[lt].is("<")) continue;
      size_t gt = match_angle(lt);
      if (gt == std::string::npos) continue;
      size_t kw = next(gt + 1);
      if (kw >= toks_.size() || !(toks_[kw].is("struct") || toks_[kw].is("class"))) continue;
      size_t nm = next(kw + 1);
      if (nm >= toks_.size() || toks_[nm].kind != TokKind::ident) continue;
      size_t ao = next(nm + 1);
      if (ao >= toks_.size() || !toks_[ao].is("<")) continue;
      size_t ac = match_angle(ao);
      if (ac == std::string::npos) continue;
      bool qualified = false;
      for (size_t j = ao; j < ac; ++j)
        if (toks_[j].is("device") || toks_[j].is("thread") || toks_[j].is("constant") ||
            toks_[j].is("threadgroup"))
          qualified = true;
      if (!qualified) continue;
      size_t e = ac;
      while (e < toks_.size() && !toks_[e].is(";") && !toks_[e].is("{")) ++e;
      if (e < toks_.size() && toks_[e].is("{")) {
        e = match(e, "{", "}");
        if (e == std::string::npos) continue;
        e = next(e + 1);
        if (e >= toks_.size() || !toks_[e].is(";")) continue;
      }
      if (e >= toks_.size()) continue;
      as_specs_.push_back({i, nm, ao, ac, e});
      i = e;
    }
  }

  // Functions overloaded on address space: member functions qualified by one (`complex_t()
  // threadgroup : ...`, `operator U() const device`) and functions whose parameters differ only
  // in address space (`operator+=(threadgroup complex_t<T>&, ...)` / `(device complex_t<T>&,
  // ...)`), as MLX's headers write them. The targets have one address space: the qualifier after
  // the parameter list is erased, and a definition that then repeats an earlier one of the same
  // scope is dropped (Metal would have picked one of these identical-bodied overloads).
  struct FunctionDecl {
    size_t scope, begin, head_end, end;  // head = [begin, head_end): up to the body / ';'
    bool address_space;
  };
  std::vector<FunctionDecl> functions_;

  static bool is_address_space(const Token& t) {
    return t.kind == TokKind::ident && (t.text == "device" || t.text == "thread" ||
                                        t.text == "threadgroup" || t.text == "constant");
  }

  void find_address_space_overloads() {
    struct Scope {
      size_t open;
      bool code, klass;
    };
    std::vector<Scope> scopes;
    size_t npos = std::string::npos;
    for (size_t i = 0; i < toks_.size(); ++i) {
      const auto& t = toks_[i];
      if (t.is("{")) {
        bool code = !scopes.empty() && scopes.back().code;
        size_t p = prev(i);
        if (!code && p != npos) {
          const auto& q = toks_[p];
          code = q.is(")") || q.is("=") || q.is("const") || q.is("noexcept") || q.is("override") ||
                 q.is("final") || q.is("mutable") || q.is(",") || q.is("(") || q.is("return") ||
                 is_address_space(q);
        }
        bool klass = false;
        for (size_t b = p; !code && b != npos; b = prev(b)) {
          const auto& q = toks_[b];
          if (q.is(";") || q.is("{") || q.is("}") || q.is(")") || q.is("namespace") ||
              q.kind == TokKind::preproc)
            break;
          if (q.is("struct") || q.is("class") || q.is("union")) {
            klass = true;
            break;
          }
        }
        scopes.push_back({i, code, klass});
        continue;
      }
      // `template <>` inside a class: an explicit specialisation of a member function template
      // (C++17 allows it, as Metal and NVRTC do; g++ does not). It becomes a plain overload, which
      // overload resolution prefers for the same arguments.
      if (t.is("template") && !scopes.empty() && scopes.back().klass) {
        size_t lt = next(i + 1), gt = lt < toks_.size() ? next(lt + 1) : npos;
        if (gt < toks_.size() && toks_[lt].is("<") && toks_[gt].is(">")) {
          bool function = false;
          for (size_t k = next(gt + 1); k < toks_.size(); k = next(k + 1)) {
            if (toks_[k].is("struct") || toks_[k].is("class") || toks_[k].is("union") ||
                toks_[k].is(";") || toks_[k].is("{"))
              break;
            if (toks_[k].is("(")) {
              function = true;
              break;
            }
          }
          if (function) {
            blank(i);
            blank(lt);
            blank(gt);
          }
        }
        continue;
      }
      if (t.is("}")) {
        if (!scopes.empty()) scopes.pop_back();
        continue;
      }
      if (!t.is("(") || (!scopes.empty() && scopes.back().code)) continue;
      size_t close = match(i, "(", ")");
      if (close == npos) continue;
      // Qualifiers after the parameter list; address spaces among them are erased.
      size_t j = next(close + 1);
      bool qualified = false;
      std::vector<size_t> spaces;
      while (j < toks_.size() &&
             (toks_[j].is("const") || toks_[j].is("volatile") || toks_[j].is("noexcept") ||
              toks_[j].is("&") || toks_[j].is("&&") || is_address_space(toks_[j]))) {
        if (is_address_space(toks_[j])) spaces.push_back(j);
        j = next(j + 1);
      }
      if (j >= toks_.size()) continue;
      bool body = toks_[j].is("{") || toks_[j].is(":");
      if (!body && !toks_[j].is(";")) {
        i = close;
        continue;
      }
      // The declaration's start: after the previous ';', '{', '}', directive or access label.
      size_t b = i;
      while (b > 0) {
        const auto& q = toks_[b - 1];
        if (q.is(";") || q.is("{") || q.is("}") || q.kind == TokKind::preproc) break;
        if (q.is(":")) {
          size_t a = prev(b - 1);
          if (a != npos &&
              (toks_[a].is("public") || toks_[a].is("private") || toks_[a].is("protected")))
            break;
        }
        --b;
      }
      b = next(b);
      for (size_t k = b; k < i && !qualified; ++k) qualified = is_address_space(toks_[k]);
      for (size_t k = i; k < close && !qualified; ++k) qualified = is_address_space(toks_[k]);
      qualified = qualified || !spaces.empty();
      for (size_t sp : spaces) blank(sp);
      size_t end = j;
      if (body) {
        size_t o = j;
        int depth = 0;
        while (o < toks_.size() && !(depth == 0 && toks_[o].is("{"))) {
          if (toks_[o].is("(")) ++depth;
          if (toks_[o].is(")")) --depth;
          if (toks_[o].is(";")) break;
          ++o;
        }
        if (o >= toks_.size() || !toks_[o].is("{")) {
          i = close;
          continue;
        }
        end = match(o, "{", "}");
        if (end == npos) continue;
        size_t semi = next(end + 1);
        if (semi < toks_.size() && toks_[semi].is(";")) end = semi;
      }
      functions_.push_back({scopes.empty() ? npos : scopes.back().open, b, j, end, qualified});
      i = body ? end : j;
    }
  }

  void merge_address_space_overloads() {
    std::set<std::pair<size_t, std::string>> seen;
    for (auto& f : functions_) {
      // Declarations only (`;`) never conflict; definitions are compared.
      if (toks_[f.head_end].is(";")) continue;
      auto key = std::make_pair(f.scope, compact(f.begin, f.head_end));
      if (seen.insert(key).second || !f.address_space) continue;
      blank_range(f.begin, f.end + 1);
    }
  }

  void merge_address_space_specializations() {
    std::map<std::string, std::string> seen;  // name + arguments (as translated) -> rest
    for (auto& s : as_specs_) {
      std::string key = toks_[s.name].text + compact(s.args_open, s.args_close + 1);
      std::string rest = compact(s.args_close + 1, s.end + 1);
      auto [it, fresh] = seen.emplace(key, rest);
      if (fresh) continue;
      if (it->second != rest)
        not_supported("specialisations of '" + toks_[s.name].text +
                          "' that differ only in address space and define different members "
                          "(CPU and CUDA have one address space)",
                      toks_[s.begin].line);
      blank_range(s.begin, s.end + 1);
    }
  }

  // Reads a kernel parameter list (tokens b..e exclusive, without the parentheses).
  std::vector<KernelParam> parse_params(size_t b, size_t e, const std::string& fname) {
    std::vector<KernelParam> params;
    std::vector<std::pair<size_t, size_t>> pieces;
    int depth = 0;
    size_t start = b;
    for (size_t i = b; i < e; ++i) {
      auto& t = toks_[i];
      if (t.kind != TokKind::punct) continue;
      if (t.text == "(" || t.text == "[" || t.text == "<" || t.text == "{")
        ++depth;
      else if (t.text == ")" || t.text == "]" || t.text == ">" || t.text == "}")
        --depth;
      else if (t.text == ">>")
        depth -= 2;
      else if (t.text == "," && depth == 0) {
        pieces.push_back({start, i});
        start = i + 1;
      }
    }
    if (next(start) < e) pieces.push_back({start, e});
    for (auto [pb, pe] : pieces) {
      KernelParam p;
      size_t name_end = pe;
      std::vector<std::string> attrs;
      for (size_t i = pb; i < pe; ++i) {
        if (is_attr_open(i)) {
          size_t c = attr_close(i);
          if (c == std::string::npos || c >= pe)
            bad("unterminated attribute in parameter list of '" + fname + "'", toks_[i].line);
          attrs.push_back(compact(i + 2, c - 1));
          if (name_end == pe) name_end = i;
          i = c;
        }
      }
      size_t ni = prev(name_end);
      // An array parameter (`constant const int64_t a_strides[2]`) is a pointer, as in C++.
      bool array = false;
      while (ni != std::string::npos && ni > pb && toks_[ni].is("]")) {
        int depth = 0;
        size_t q = ni;
        for (; q > pb; --q) {
          if (toks_[q].is("]")) ++depth;
          if (toks_[q].is("[") && --depth == 0) break;
        }
        ni = prev(q);
        array = true;
      }
      if (ni == std::string::npos || ni < pb || toks_[ni].kind != TokKind::ident)
        bad("cannot read a parameter of kernel '" + fname + "'", toks_[pb].line);
      p.name = toks_[ni].text;
      p.type = compact(pb, ni) + (array ? "*" : "");
      p.is_pointer = array;
      for (size_t i = pb; i < ni; ++i) {
        if (toks_[i].is("*")) p.is_pointer = true;
        if (toks_[i].is("&")) p.is_reference = true;
        if (toks_[i].is("const") || toks_[i].is("constant")) p.is_const = true;
      }
      bool is_tg = p.type.find("threadgroup") != std::string::npos;
      bool assigned = false;
      for (auto& a : attrs) {
        std::string head = a.substr(0, a.find_first_of(" ("));
        if (unsupported_attributes().count(head))
          not_supported("[[" + a + "]] parameters", toks_[pb].line);
        if (head == "buffer") {
          // Metal's argument table has 31 entries; Alloy's launch tables hold 48 (MLX's
          // signature for many inputs goes past 30), the CUDA one being the smaller.
          p.kind = ParamKind::buffer;
          p.index = attr_int(a, 0, 47, toks_[pb].line);
          assigned = true;
        } else if (head == "threadgroup") {
          // Metal: threadgroup memory indices 0-7 (as the runtimes' tables).
          p.kind = ParamKind::threadgroup;
          p.index = attr_int(a, 0, 7, toks_[pb].line);
          assigned = true;
        } else if (std::find(attribute_names().begin(), attribute_names().end(), head) !=
                   attribute_names().end()) {
          p.kind = ParamKind::attribute;
          p.attribute = head;
          assigned = true;
        }
      }
      if (!assigned) {
        if (is_tg)
          not_supported("threadgroup parameter '" + p.name + "' without [[threadgroup(n)]]",
                        toks_[pb].line);
        p.kind = ParamKind::buffer;
        p.index = -1;
      }
      if (p.kind == ParamKind::attribute && traits_.name == "cuda" && cuda_attribute_vector(p.type))
        // CUDA: `uint3 gid` -> `alloy_attr_uint3 gid`, Metal's vector or a plain struct of the
        // components by the selection (prelude/entry.h); the entry binds it to match
        // (msl/target.cpp: cuda_attribute).
        for (size_t q = pb; q < ni; ++q)
          if (toks_[q].kind == TokKind::ident && vector_attribute(toks_[q].text)) {
            toks_[q].text = "alloy_attr_" + toks_[q].text;
            break;
          }
      if (p.kind == ParamKind::buffer && !p.is_pointer && !p.is_reference)
        bad("kernel parameter '" + p.name +
                "' must be a pointer or a reference (device T*, constant T&)",
            toks_[pb].line);
      params.push_back(std::move(p));
    }
    // Two parameters bound to one index would alias each other (Metal rejects it too).
    std::set<int> used;
    std::map<int, std::string> tg_used;
    for (auto& p : params) {
      if (p.kind == ParamKind::buffer && p.index >= 0 && !used.insert(p.index).second)
        bad(fmt::format("two parameters of kernel '{}' are bound to [[buffer({})]] (the second is "
                        "'{}'); each buffer index may be used once",
                        fname, p.index, p.name),
            toks_[b].line);
      if (p.kind == ParamKind::threadgroup && !tg_used.emplace(p.index, p.name).second)
        bad(fmt::format("two parameters of kernel '{}' are bound to [[threadgroup({})]] ('{}' and "
                        "'{}'); each threadgroup index may be used once",
                        fname, p.index, tg_used[p.index], p.name),
            toks_[b].line);
    }
    // Metal assigns buffer indices in order to buffer parameters without [[buffer(n)]].
    int nexti = 0;
    for (auto& p : params)
      if (p.kind == ParamKind::buffer && p.index < 0) {
        while (used.count(nexti)) ++nexti;
        p.index = nexti;
        used.insert(nexti);
      }
    return params;
  }

  // The type of each parameter of the parameter list opening at `lp` (attributes and the
  // parameter's name left out), as compact text.
  std::vector<std::string> instance_param_types(size_t lp) const {
    std::vector<std::string> types;
    size_t rp = match(lp, "(", ")");
    if (rp == std::string::npos) return types;
    size_t start = lp + 1;
    int depth = 0;
    for (size_t j = lp + 1; j <= rp; ++j) {
      const auto& x = toks_[j];
      if (j < rp && (x.is("(") || x.is("<") || x.is("["))) ++depth;
      if (j < rp && (x.is(")") || x.is(">") || x.is("]"))) --depth;
      if (j < rp && x.is(">>")) depth -= 2;
      if (j == rp || (depth == 0 && x.is(","))) {
        std::string type;
        size_t name = std::string::npos;
        for (size_t q = start; q < j; ++q) {
          if (is_attr_open(q)) {
            size_t c = attr_close(q);
            if (c == std::string::npos || c >= j) break;
            q = c;
            continue;
          }
          if (toks_[q].trivia()) continue;
          if (toks_[q].kind == TokKind::ident) name = q;
        }
        for (size_t q = start; q < j; ++q) {
          if (is_attr_open(q)) {
            size_t c = attr_close(q);
            if (c == std::string::npos || c >= j) break;
            q = c;
            continue;
          }
          if (toks_[q].trivia() || q == name) continue;
          type += (type.empty() ? "" : " ") + toks_[q].text;
        }
        if (!type.empty()) types.push_back(type);
        start = j + 1;
      }
    }
    return types;
  }

  // `template [[host_name("x")]] [[kernel]] void f(const device float* in, ...);` names no
  // template arguments: C++ deduces them from the parameter types, as here: each declared
  // parameter type is matched against the instance's, binding the template parameters
  // (`const device T*` / `const device float*`: T = float; `MLXConvParams<N>*` /
  // `MLXConvParams<2>*`: N = 2). Returns `f<args...>`, or `f` when a parameter stays unbound.
  static std::string deduce_template_args(const KernelDecl& d, const Instantiation& inst,
                                          const std::string& name) {
    auto split = [](const std::string& s) {
      std::vector<std::string> out;
      for (size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (std::isspace(c)) {
          ++i;
        } else if (std::isalnum(c) || c == '_') {
          size_t j = i;
          while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_'))
            ++j;
          out.push_back(s.substr(i, j - i));
          i = j;
        } else {
          out.push_back(std::string(1, s[i]));
          ++i;
        }
      }
      return out;
    };
    std::map<std::string, std::vector<std::string>> bound;
    auto is_param = [&](const std::string& w) {
      return std::find(d.template_params.begin(), d.template_params.end(), w) !=
             d.template_params.end();
    };
    size_t n = std::min(d.params.size(), inst.param_types.size());
    for (size_t p = 0; p < n; ++p) {
      auto a = split(d.params[p].type), b = split(inst.param_types[p]);
      size_t i = 0, j = 0;
      while (i < a.size() && j < b.size()) {
        if (is_param(a[i]) && !bound.count(a[i])) {
          // Bind to b's tokens up to the token that follows a[i] in a (at bracket depth 0).
          std::vector<std::string> v;
          int depth = 0;
          for (; j < b.size(); ++j) {
            if (depth == 0 && i + 1 < a.size() && b[j] == a[i + 1]) break;
            if (b[j] == "<" || b[j] == "(" || b[j] == "[") ++depth;
            if (b[j] == ">" || b[j] == ")" || b[j] == "]") --depth;
            v.push_back(b[j]);
          }
          bound[a[i]] = v;
          ++i;
        } else if (is_param(a[i])) {
          for (auto& w : bound[a[i]]) {
            if (j >= b.size() || b[j] != w) break;
            ++j;
          }
          ++i;
        } else if (a[i] == b[j]) {
          ++i;
          ++j;
        } else {
          break;
        }
      }
    }
    std::string args;
    for (auto& tp : d.template_params) {
      auto it = bound.find(tp);
      if (it == bound.end() || it->second.empty()) return name;
      std::string v;
      for (auto& w : it->second) {
        bool word = !w.empty() && (std::isalnum(static_cast<unsigned char>(w[0])) || w[0] == '_');
        bool prev_word =
            !v.empty() && (std::isalnum(static_cast<unsigned char>(v.back())) || v.back() == '_');
        v += (word && prev_word ? " " : "") + w;
      }
      args += (args.empty() ? "" : ", ") + v;
    }
    return name + "<" + args + ">";
  }

  // Finds kernel functions and explicit instantiations; blanks all [[attributes]].
  void collect_attributes_and_kernels() {
    for (size_t i = 0; i < toks_.size(); ++i) {
      auto& t = toks_[i];
      // Explicit instantiation: `template [[host_name("x")]] [[kernel]] decltype(f<T>) f<T>;`
      if (t.is("template")) {
        size_t n = next(i + 1);
        if (n < toks_.size() && !toks_[n].is("<")) {
          size_t semi = n;
          while (semi < toks_.size() && !toks_[semi].is(";")) ++semi;
          if (semi >= toks_.size()) bad("unterminated explicit instantiation", t.line);
          std::string host;
          std::vector<std::string> param_types;
          bool kernel = false;
          size_t body_start = n;
          // The instantiation's own attributes lead; those of its parameters (an instantiation
          // written with the full parameter list) are not its.
          for (size_t j = n; j < semi && is_attr_open(j); j = next(j)) {
            size_t c = attr_close_checked(j);
            if (c > semi) bad("unterminated [[attribute]] (missing ']]')", toks_[j].line);
            std::string a = compact(j + 2, c - 1);
            if (a.starts_with("host_name")) {
              auto q1 = a.find('"'), q2 = a.rfind('"');
              if (q1 != std::string::npos && q2 > q1) host = a.substr(q1 + 1, q2 - q1 - 1);
            }
            if (a == "kernel") kernel = true;
            j = c + 1;
            body_start = j;
          }
          if (kernel || !host.empty()) {
            // The instance is what follows `decltype(...)`.
            size_t d = next(body_start);
            std::string fn;
            if (d < semi && toks_[d].is("decltype")) {
              size_t po = next(d + 1);
              size_t pc = match(po, "(", ")");
              if (pc == std::string::npos || pc > semi)
                bad("unbalanced parentheses in an explicit instantiation", t.line);
              fn = compact(pc + 1, semi);
            } else {
              // `void f<T, 4>(params...)`: the declarator before the parameter list.
              size_t lp = body_start;
              int angle = 0;
              for (; lp < semi; ++lp) {
                if (toks_[lp].is("<")) ++angle;
                if (toks_[lp].is(">")) --angle;
                if (toks_[lp].is(">>")) angle -= 2;
                if (angle <= 0 && toks_[lp].is("(")) break;
              }
              size_t name = prev(lp);
              if (name != std::string::npos && name > body_start &&
                  (toks_[name].is(">") || toks_[name].is(">>"))) {
                int depth = 0;
                for (size_t k = name + 1; k-- > body_start;) {
                  if (toks_[k].is(">")) ++depth;
                  if (toks_[k].is(">>")) depth += 2;
                  if (toks_[k].is("<")) --depth;
                  if (depth == 0) {
                    name = prev(k);
                    break;
                  }
                }
              }
              fn = lp < semi && name != std::string::npos && name >= body_start
                       ? compact(name, lp)
                       : compact(body_start, semi);
              if (lp < semi) param_types = instance_param_types(lp);
            }
            if (host.empty()) host = fn.substr(0, fn.find('<'));
            insts_.push_back({host, fn, param_types});
            blank_range(i, semi + 1);
            i = semi;
          }
          continue;
        }
      }
      bool kernel_kw = t.is("kernel") && t.kind == TokKind::ident;
      bool kernel_attr = false;
      std::string host_attr;
      int max_threads = 0;
      if (is_attr_open(i)) {
        size_t c = attr_close(i);
        if (c == std::string::npos) bad("unterminated [[attribute]]", t.line);
        std::string a = compact(i + 2, c - 1);
        std::string head = a.substr(0, a.find_first_of(" ("));
        if (head == "kernel") kernel_attr = true;
        if (head == "vertex" || head == "fragment" || head == "mesh" || head == "object" ||
            head == "visible" || head == "intersection")
          not_supported("[[" + head + "]] functions", t.line);
        if (head == "function_constant")
          not_supported("function constants ([[function_constant(n)]])", t.line);
        blank_range(i, c + 1);
        if (!kernel_attr) {
          i = c;
          continue;
        }
        i = c;
      } else if (kernel_kw) {
        blank(i);
      } else {
        continue;
      }
      // A kernel: [attributes] void name [attributes] ( params ) ...
      size_t j = next(i + 1);
      while (j < toks_.size()) {  // more attributes before the return type
        if (is_attr_open(j)) {
          size_t c = attr_close_checked(j);
          std::string a = compact(j + 2, c - 1);
          if (a.starts_with("max_total_threads_per_threadgroup"))
            max_threads = attr_int(a, 1, 1024, toks_[j].line);
          if (a.starts_with("host_name")) {
            auto q1 = a.find('"'), q2 = a.rfind('"');
            if (q1 == std::string::npos || q2 <= q1)
              bad("[[" + a + "]] needs a quoted name", toks_[j].line);
            host_attr = a.substr(q1 + 1, q2 - q1 - 1);
          }
          blank_range(j, c + 1);
          j = next(c + 1);
        } else if (toks_[j].is("kernel")) {
          blank(j);
          j = next(j + 1);
        } else {
          break;
        }
      }
      if (j >= toks_.size() || !toks_[j].is("void")) bad("a kernel must return void", t.line);
      size_t nm = next(j + 1);
      if (nm >= toks_.size() || toks_[nm].kind != TokKind::ident)
        bad("cannot read kernel name", t.line);
      KernelDecl k;
      k.name = toks_[nm].text;
      // Kernel functions cannot be called from Metal code, so renaming them is invisible; it keeps
      // a kernel named like a prelude function (`transpose`, `dot`) from being ambiguous.
      toks_[nm].text = kKernelPrefix + k.name;
      k.host_name = host_attr;
      k.max_threads = max_threads;
      size_t po = next(nm + 1);
      while (po < toks_.size() && is_attr_open(po)) {
        size_t c = attr_close_checked(po);
        blank_range(po, c + 1);
        po = next(c + 1);
      }
      if (po >= toks_.size() || !toks_[po].is("("))
        bad("cannot read parameters of kernel '" + k.name + "'", t.line);
      size_t pc = match(po, "(", ")");
      if (pc == std::string::npos) bad("unbalanced parentheses in kernel '" + k.name + "'", t.line);
      k.params = parse_params(po + 1, pc, k.name);
      k.params_close = pc;
      {
        size_t bo = next(pc + 1);
        while (bo < toks_.size() && is_attr_open(bo)) bo = next(attr_close_checked(bo) + 1);
        if (bo < toks_.size() && toks_[bo].is("{")) {
          k.body_open = bo;
          k.body_close = match(bo, "{", "}");
          if (k.body_close == std::string::npos) k.body_open = 0;
        }
      }
      // Is it a template? Look back from the kernel marker for `template <...>`.
      size_t b = prev(i);
      while (b != std::string::npos && toks_[b].kind == TokKind::space) b = prev(b);
      if (b != std::string::npos && (toks_[b].is(">") || toks_[b].is(">>"))) {
        // walk back to the matching '<' and check for `template`
        int depth = 0;
        size_t q = b;
        for (;; --q) {
          if (toks_[q].is(">"))
            ++depth;
          else if (toks_[q].is(">>"))
            depth += 2;
          else if (toks_[q].is("<") && --depth == 0)
            break;
          if (q == 0) break;
        }
        size_t tq = prev(q);
        if (tq != std::string::npos && toks_[tq].is("template")) {
          k.is_template = true;
          // Parameter names: the last identifier of each `,`-separated piece, before any `=`.
          int depth = 0;
          std::string last;
          bool in_default = false, first = true;
          for (size_t r = q + 1; r <= b; ++r) {
            const auto& x = toks_[r];
            bool end = r == b;
            if (!end && (x.is("<") || x.is("(") || x.is("["))) ++depth;
            if (!end && (x.is(">") || x.is(")") || x.is("]"))) --depth;
            if (!end && x.is(">>")) depth -= 2;
            if (end || (depth == 0 && x.is(","))) {
              k.template_params.push_back(last);
              if (k.template_param_is_type.size() < k.template_params.size())
                k.template_param_is_type.push_back(false);
              last.clear();
              in_default = false;
              first = true;
            } else if (depth == 0 && x.is("=")) {
              in_default = true;
            } else if (depth == 0 && !in_default && x.kind == TokKind::ident) {
              if (first) k.template_param_is_type.push_back(x.is("typename") || x.is("class"));
              first = false;
              last = x.text;
            }
          }
        }
      }
      // Blank the attributes inside the parameter list.
      for (size_t q = po; q < pc; ++q)
        if (is_attr_open(q)) {
          size_t c = attr_close_checked(q);
          blank_range(q, c + 1);
          q = c;
        }
      decls_.push_back(std::move(k));
      i = pc;
    }
    // Remaining attributes anywhere (e.g. on helper functions or variables) are dropped.
    for (size_t i = 0; i < toks_.size(); ++i)
      if (is_attr_open(i)) {
        size_t c = attr_close_checked(i);
        std::string a = compact(i + 2, c - 1);
        std::string head = a.substr(0, a.find_first_of(" ("));
        if (unsupported_attributes().count(head)) not_supported("[[" + a + "]]", toks_[i].line);
        blank_range(i, c + 1);
      }
    // Entries: template kernels through their instantiations, plain kernels directly.
    for (auto& d : decls_) {
      if (d.is_template) {
        for (auto& inst : insts_) {
          std::string base = inst.function.substr(0, inst.function.find('<'));
          while (!base.empty() && base.back() == ' ') base.pop_back();
          if (base != d.name) continue;
          // Overloaded kernel templates sharing the name (MLX's block_masked_gemm): an
          // instantiation belongs to one whose template parameters can take its arguments.
          if (overloads(d.name) > 1 && !takes_template_args(d, inst.function)) continue;
          std::string written = inst.function.substr(inst.function.find_first_not_of(' '));
          if (written.find('<') == std::string::npos && !inst.param_types.empty())
            written = deduce_template_args(d, inst, written);
          out_.kernels.push_back({inst.host_name,
                                  kKernelPrefix + written,
                                  d.name,
                                  d.params,
                                  d.max_threads,
                                  written,
                                  {},
                                  1});
        }
      } else {
        out_.kernels.push_back({d.host_name.empty() ? d.name : d.host_name,
                                kKernelPrefix + d.name,
                                d.name,
                                d.params,
                                d.max_threads,
                                d.name,
                                {},
                                1});
      }
    }
  }

  size_t overloads(const std::string& name) const {
    size_t n = 0;
    for (auto& d : decls_) n += d.is_template && d.name == name;
    return n;
  }
  // Template arguments written in `f<a, b<c, d>, (e > 1)>` ({a, b<c, d>, (e > 1)}).
  static std::vector<std::string> template_args(const std::string& f) {
    std::vector<std::string> args;
    size_t open = f.find('<');
    if (open == std::string::npos) return args;
    std::string cur;
    int angle = 0, paren = 0;
    for (size_t i = open + 1; i < f.size(); ++i) {
      char c = f[i];
      if (c == '(' || c == '[' || c == '{') ++paren;
      if (c == ')' || c == ']' || c == '}') --paren;
      if (paren == 0 && c == '<') ++angle;
      if (paren == 0 && c == '>' && angle-- == 0) break;
      if (paren == 0 && angle == 0 && c == ',') {
        args.push_back(cur);
        cur.clear();
        continue;
      }
      if (c != ' ' || !cur.empty()) cur += c;
    }
    args.push_back(cur);
    return args;
  }
  // Whether kernel template d can take the explicit instantiation's written arguments: no more
  // of them than parameters, and none that is plainly a value (a number, true, false) for a
  // type parameter, or plainly a type (a scalar type name) for a value parameter.
  static bool takes_template_args(const KernelDecl& d, const std::string& f) {
    static const std::set<std::string, std::less<>>& types =
        *new std::set<std::string, std::less<>>(
            {"bool",    "char",     "uchar",      "short",     "ushort",      "int",
             "uint",    "long",     "ulong",      "half",      "bfloat",      "float",
             "int8_t",  "uint8_t",  "int16_t",    "uint16_t",  "int32_t",     "uint32_t",
             "int64_t", "uint64_t", "bfloat16_t", "float16_t", "complex64_t", "float32_t"});
    auto args = template_args(f);
    if (args.size() > d.template_params.size()) return false;
    for (size_t i = 0; i < args.size() && i < d.template_param_is_type.size(); ++i) {
      std::string a = args[i];
      while (!a.empty() && a.back() == ' ') a.pop_back();
      bool value = !a.empty() && (std::isdigit(static_cast<unsigned char>(a[0])) || a[0] == '-' ||
                                  a == "true" || a == "false");
      bool type = types.count(a) > 0;
      if (d.template_param_is_type[i] ? value : type) return false;
    }
    return true;
  }

  // True when the declaration containing token i already says const/constexpr.
  bool decl_has_const(size_t i) const {
    for (size_t j = i; j-- > 0;) {
      auto& t = toks_[j];
      if (t.is(";") || t.is("{") || t.is("}") || t.is("(") || t.is(",") ||
          t.kind == TokKind::preproc)
        break;
      if (t.is("const") || t.is("constexpr")) return true;
    }
    for (size_t j = i + 1; j < toks_.size(); ++j) {
      auto& t = toks_[j];
      if (t.is(";") || t.is("=") || t.is("(") || t.is(")") || t.is(",") || t.is("{") || t.is("*") ||
          t.is("&"))
        break;
      if (t.is("const") || t.is("constexpr")) return true;
    }
    return false;
  }

  void rewrite_qualifiers() {
    int depth = 0;  // brace depth: 0 = program scope
    for (size_t i = 0; i < toks_.size(); ++i) {
      auto& t = toks_[i];
      if (t.is("{")) ++depth;
      if (t.is("}")) --depth;
      if (t.kind != TokKind::ident) continue;
      if (opt_.robust && (t.text == "device" || t.text == "constant") && rewrite_robust_pointer(i))
        continue;
      if (t.text == "coherent") {  // `coherent(system) device T*`: memory coherence scope
        size_t o = next(i + 1);
        if (o < toks_.size() && toks_[o].is("(")) {
          size_t c = match(o, "(", ")");
          if (c != std::string::npos) {
            blank_range(i, c + 1);
            continue;
          }
        }
      }
      if (t.text == "device" || t.text == "thread") {
        blank(i);
      } else if (t.text == "constant") {
        if (decl_has_const(i))
          blank(i);
        else
          t.text = "const";
      } else if (t.text == "threadgroup") {
        rewrite_threadgroup(i);
      }
    }
  }

  // Robust mode: `[const] device T*` / `constant T*` -> alloy_robust::ptr<[const] T>, a pointer
  // that knows its buffer's extent. Returns false when the qualifier is not on a pointer type.
  bool rewrite_robust_pointer(size_t i) {
    size_t star = std::string::npos;
    int depth = 0;
    for (size_t j = i + 1; j < toks_.size(); ++j) {
      auto& t = toks_[j];
      if (t.is("<")) ++depth;
      if (t.is(">")) --depth;
      if (t.is(">>")) depth -= 2;
      if (depth < 0) return false;
      if (depth == 0 && t.is("*")) {
        star = j;
        break;
      }
      if (t.is(";") || t.is(",") || t.is(")") || t.is("(") || t.is("=") || t.is("&") || t.is("{") ||
          t.is("[") || t.is("&&"))
        return false;
    }
    if (star == std::string::npos) return false;
    size_t start = i;
    for (size_t j = prev(i);
         j != std::string::npos && (toks_[j].is("const") || toks_[j].is("volatile")); j = prev(j))
      start = j;
    std::string pointee;
    bool has_const = false;
    for (size_t j = start; j < star; ++j) {
      if (toks_[j].trivia() || j == i || toks_[j].is("device") || toks_[j].is("constant")) continue;
      if (toks_[j].is("const")) has_const = true;
      pointee += (pointee.empty() ? "" : " ") + toks_[j].text;
    }
    if (toks_[i].is("constant") && !has_const) pointee = "const " + pointee;
    blank_range(start, star + 1);
    toks_[start].text = "::alloy_robust::ptr<" + pointee + "> " + toks_[start].text;
    return true;
  }

  // `threadgroup T name[N]...;` declares group-shared storage; `threadgroup T*` / `threadgroup T&`
  // are just pointer types whose qualifier the target does not need.
  void rewrite_threadgroup(size_t i) {
    size_t end = i + 1;
    bool pointer = false;
    int depth = 0;
    for (; end < toks_.size(); ++end) {
      auto& t = toks_[end];
      if (t.is("<") || t.is("(") || t.is("[")) ++depth;
      if (t.is(">") || t.is("]")) --depth;
      if (t.is(")")) {
        if (depth == 0) break;
        --depth;
      }
      if (depth == 0 && (t.is("*") || t.is("&"))) pointer = true;
      if (depth <= 0 && (t.is(";") || t.is("=") || t.is("{") || t.is(","))) break;
    }
    if (pointer || end >= toks_.size() || toks_[end].is(")") || toks_[end].is("{")) {
      blank(i);
      return;
    }
    if (toks_[end].is("=")) {
      // Metal does not initialise threadgroup memory ("cannot be initialized"), yet its compiler
      // accepts a zero initialiser (`threadgroup float buf[32] = {0};`, as MLX's layer_norm
      // writes, then fills the buffer itself): a zero initialiser is dropped, others are errors.
      size_t semi = end;
      bool zero = true;
      while (semi < toks_.size() && !toks_[semi].is(";")) {
        const auto& t = toks_[semi];
        if (!t.trivia() && !t.is("=") && !t.is("{") && !t.is("}") && !t.is("0") && !t.is("0.0f") &&
            !t.is("0.0") && !t.is("0.f"))
          zero = false;
        ++semi;
      }
      if (!zero || semi >= toks_.size())
        bad("threadgroup variables cannot have initializers", toks_[i].line);
      blank_range(end, semi);
    }
    // Declarators up to ';' (several allowed: `threadgroup float a[4], b[8];`).
    size_t semi = end;
    while (semi < toks_.size() && !toks_[semi].is(";")) ++semi;
    // Type = tokens up to the first declarator's name.
    std::vector<std::pair<size_t, size_t>> decls;
    size_t s = i + 1;
    for (size_t j = i + 1; j <= semi; ++j)
      if (j == semi || (toks_[j].is(",") && j >= end)) {
        decls.push_back({s, j});
        s = j + 1;
      }
    // First declarator includes the type: split at the name (last ident before '[' or end).
    auto split_name = [&](size_t b, size_t e) -> std::pair<size_t, size_t> {
      size_t br = e;
      for (size_t j = b; j < e; ++j)
        if (toks_[j].is("[")) {
          br = j;
          break;
        }
      size_t nm = prev(br);
      return {nm, br};
    };
    auto [nm0, br0] = split_name(decls[0].first, decls[0].second);
    if (nm0 == std::string::npos || toks_[nm0].kind != TokKind::ident)
      bad("cannot read a threadgroup declaration", toks_[i].line);
    std::string type = compact(i + 1, nm0);
    std::string code;
    int prev_slot = visible_tg_slot(i);
    for (size_t d = 0; d < decls.size(); ++d) {
      auto [b, e] = decls[d];
      auto [nm, br] = d == 0 ? std::pair{nm0, br0} : split_name(b, e);
      std::string dims = compact(br, e);
      code += traits_.threadgroup_decl(type, toks_[nm].text, dims, tg_slot_, prev_slot);
      code += ' ';
      prev_slot = tg_slot_++;
    }
    tg_decls_.push_back({prev_slot, i});
    for (size_t j = i; j <= semi && j < toks_.size(); ++j) blank(j);
    toks_[i].text = code + toks_[i].text;
  }

  void rewrite_literals() {
    for (auto& t : toks_) {
      if (t.kind != TokKind::number) continue;
      const std::string& s = t.text;
      bool hex = s.size() > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
      bool is_float = hex ? s.find_first_of("pP") != std::string::npos
                          : s.find_first_of(".eE") != std::string::npos;
      if (!is_float) continue;
      char last = s.back();
      if (last == 'f' || last == 'F') continue;
      if (last == 'h' || last == 'H') {  // half literal
        t.text = "half(" + s.substr(0, s.size() - 1) + "f)";
        continue;
      }
      if (last == 'l' || last == 'L') {
        t.text = s.substr(0, s.size() - 1) + "f";
        continue;
      }
      // MSL has no double: an unsuffixed floating literal is a float.
      t.text = s + "f";
    }
  }

  // Component index of a swizzle letter, or -1. A name is a swizzle when all its letters come from
  // one set (xyzw or rgba).
  static int swizzle_index(char c, bool rgba) {
    const char* set = rgba ? "rgba" : "xyzw";
    for (int k = 0; k < 4; ++k)
      if (set[k] == c) return k;
    return -1;
  }
  static bool swizzle_indices(std::string_view name, std::string* out) {
    if (name.empty() || name.size() > 4) return false;
    for (bool rgba : {false, true}) {
      std::string idx;
      for (char c : name) {
        int k = swizzle_index(c, rgba);
        if (k < 0) break;
        idx += (idx.empty() ? "" : ",") + std::to_string(k);
      }
      if (idx.size() == name.size() * 2 - 1) {
        *out = idx;
        return true;
      }
    }
    return false;
  }

  // A swizzle of a swizzle (`v.zw.yx`, `v.xy.x`) is a swizzle of the vector value Metal makes of
  // the first one; the prelude spells that `.template alloy_swizzle<1, 0>()`.
  void rewrite_nested_swizzles() {
    bool after_swizzle = false;  // the previous member access was a multi-letter swizzle
    for (size_t i = 0; i + 1 < toks_.size(); ++i) {
      if (!toks_[i].is(".")) {
        if (!toks_[i].trivia()) after_swizzle = false;
        continue;
      }
      size_t n = next(i + 1);
      if (n >= toks_.size() || toks_[n].kind != TokKind::ident) continue;
      std::string idx;
      bool swz = swizzle_indices(toks_[n].text, &idx);
      if (swz && after_swizzle) {
        // Not a call or an assignment target of the rewritten form: only reads are supported.
        toks_[n].text = "template alloy_swizzle<" + idx + ">()";
      }
      after_swizzle =
          swz && toks_[n].text.size() >= 2 && toks_[n].text.find('<') == std::string::npos
              ? true
              : (swz && after_swizzle);
      i = n;
    }
  }

  // `c ? a : b` mixing half/bfloat with another arithmetic type is ambiguous in C++ (the 16-bit
  // types convert both ways); Metal applies the usual arithmetic conversions. Each operand is cast
  // to metal::alloy_detail::cond_t<decltype((self)), decltype((other))>: the Metal common type for
  // such a pair, an identity cast otherwise (same type and value category). The target compiler
  // does the typing, for every template instantiation. Operands are copied into the unevaluated
  // decltype without newlines, so lines are kept. A conditional whose operands the token scan
  // cannot delimit for sure (an unmatched '>' that may close a template argument list, a lambda,
  // a directive) is left as written.
  void rewrite_conditionals() {
    std::vector<std::string> before(toks_.size()), after(toks_.size());
    // Significant tokens of [b, e) with what earlier (inner) rewrites inserted, on one line. The
    // copy is unevaluated (decltype): the condition of each conditional inside it becomes `true`,
    // as a conditional's type does not depend on its condition. g++ 12 stops with an internal
    // compiler error on a conditional inside decltype whose condition divides by a template
    // parameter (`decltype((K / BN >= 8 ? 8 : 4))`, MLX's steel conv loaders).
    auto operand = [&](size_t b, size_t e) {
      std::vector<size_t> condition_end(e - b, 0);  // by a condition's first token: its '?'
      for (size_t i = b; i < e; ++i) {
        if (toks_[i].kind != TokKind::punct || !toks_[i].is("?")) continue;
        size_t c = condition_start(i, b);
        if (c != std::string::npos && next(c) < i) condition_end[c - b] = i;
      }
      std::string s;
      for (size_t i = b; i < e; ++i) {
        if (condition_end[i - b] != 0) {
          if (!s.empty()) s += ' ';
          s += "true";
          i = condition_end[i - b] - 1;  // an outer condition covers the inner ones
          continue;
        }
        if (toks_[i].trivia()) continue;
        if (!s.empty()) s += ' ';
        s += before[i] + toks_[i].text + after[i];
      }
      return s;
    };
    bool any = false;
    // From the last '?' back: conditionals nested in an operand are rewritten before it.
    for (size_t q = toks_.size(); q-- > 0;) {
      if (!toks_[q].is("?") || toks_[q].kind != TokKind::punct) continue;
      size_t colon = operand_end(q + 1, true);
      if (colon == std::string::npos || !toks_[colon].is(":")) continue;
      size_t end = operand_end(colon + 1, false);
      if (end == std::string::npos) continue;
      size_t last = prev(end);
      if (last == std::string::npos || last <= colon || next(q + 1) >= colon) continue;
      std::string a = operand(q + 1, colon), b = operand(colon + 1, end);
      auto cast = [](const std::string& self, const std::string& other) {
        // cond_ft's only comma is inside parentheses: the ?: may be a macro's argument.
        return " static_cast< ::metal::alloy_detail::cond_ft<void( "
               "::metal::alloy_detail::cond_tag<decltype((" +
               self + "))>*, ::metal::alloy_detail::cond_tag<decltype((" + other + "))>*)>>(";
      };
      after[q] = cast(a, b) + after[q];
      before[colon] += ")";
      after[colon] = cast(b, a) + after[colon];
      after[last] += ")";
      any = true;
    }
    if (!any) return;
    for (size_t i = 0; i < toks_.size(); ++i) toks_[i].text = before[i] + toks_[i].text + after[i];
  }
  // First token of the condition of the conditional whose '?' is at q, scanning back no further
  // than b: after the nearest unmatched bracket, ',', '?', ':', ';' or assignment; npos when a
  // directive is in the way.
  size_t condition_start(size_t q, size_t b) const {
    static const std::set<std::string, std::less<>>& stops =
        *new std::set<std::string, std::less<>>({",", "?", ":", ";", "=", "+=", "-=", "*=", "/=",
                                                 "%=", "&=", "|=", "^=", "<<=", ">>="});
    int depth = 0;
    for (size_t i = q; i-- > b;) {
      const auto& t = toks_[i];
      if (t.kind == TokKind::preproc) return std::string::npos;
      if (t.kind != TokKind::punct) continue;
      const std::string& x = t.text;
      if (x == ")" || x == "]" || x == "}") {
        ++depth;
      } else if (x == "(" || x == "[" || x == "{") {
        if (depth == 0) return i + 1;
        --depth;
      } else if (depth == 0 && stops.count(x)) {
        return i + 1;
      }
    }
    return b;
  }
  // End of a conditional operand starting at token b: for the middle operand (middle = true) the
  // index of its ':' ; for the last one the index of the first token after it. npos when unsure.
  size_t operand_end(size_t b, bool middle) const {
    int depth = 0, nested = 0, angle = 0;
    for (size_t i = b; i < toks_.size(); ++i) {
      const auto& t = toks_[i];
      if (t.kind == TokKind::preproc) return std::string::npos;
      if (t.kind != TokKind::punct) continue;
      const std::string& x = t.text;
      if (x == "(" || x == "[" || x == "{") {
        if (x == "[") {  // a lambda introducer: [&], [=], []
          size_t n = next(i + 1);
          if (n < toks_.size() && (toks_[n].is("&") || toks_[n].is("=") || toks_[n].is("]")))
            return std::string::npos;
        }
        ++depth;
        continue;
      }
      if (x == ")" || x == "]" || x == "}") {
        if (depth == 0) return middle ? std::string::npos : i;
        --depth;
        continue;
      }
      if (depth > 0) continue;
      if (x == "?") {
        ++nested;
      } else if (x == ":") {
        if (nested > 0)
          --nested;
        else
          return i;  // the middle operand's end, or the end of a nested last operand
      } else if (x == ";") {
        return middle ? std::string::npos : i;  // an unclosed '<' was a comparison
      } else if (x == ",") {
        // Inside an unclosed '<' the comma may separate template arguments: unsure.
        return middle || angle > 0 ? std::string::npos : i;
      } else if (middle) {
        continue;  // the middle operand ends at its ':', whatever its '<' and '>' are
      } else if (x == "<") {
        ++angle;  // a template argument list or a comparison
      } else if (x == ">" || x == ">>") {
        angle -= x == ">" ? 1 : 2;
        if (angle < 0) return std::string::npos;  // may close an enclosing template argument list
      }
    }
    return std::string::npos;
  }

  void detect_sync() {
    for (auto& t : toks_)
      if (t.kind == TokKind::ident && is_sync_ident(t.text)) {
        out_.uses_sync = true;
        if (t.text != "threadgroup_barrier") out_.uses_simd = true;
      }
  }

  // CUDA entries of kernels whose buffers never alias (TranslateOptions::distinct_buffers) take
  // them as restrict parameters; those whose threads share nothing run 4 groups per block.
  void plan_cuda_entry(KernelEntry& k) const {
    if (opt_.target != Target::cuda) return;
    k.cuda_block = cuda_block_of(k, opt_);
    if (!opt_.distinct_buffers || opt_.robust) return;
    bool shares = out_.uses_sync || tg_slot_ > 0;
    for (auto& p : k.params) {
      if (p.kind == ParamKind::threadgroup) shares = true;
      if (p.kind != ParamKind::buffer) continue;
      auto in = [&](const std::vector<int>& v) {
        return std::find(v.begin(), v.end(), p.index) != v.end();
      };
      if (!in(opt_.small_buffers) && !in(opt_.block_buffers)) k.param_buffers.push_back(p.index);
    }
    k.coarsen = shares ? 1 : 4;
  }

  // MLX's helpers that the prelude provides (metal/mlx.h) and that a source may define itself
  // (MLX's own utils.h does): the user's definition wins, the prelude's is left out
  // (ALLOY_USER_<name>).
  std::string user_helper_defines() const {
    static const std::set<std::string, std::less<>>& helpers =
        *new std::set<std::string, std::less<>>(
            {"bfloat16_to_uint16", "uint16_to_bfloat16", "complex64_t", "Limits", "elem_to_loc",
             "elem_to_loc_1", "elem_to_loc_2", "elem_to_loc_3", "elem_to_loc_2_nd",
             "elem_to_loc_3_nd", "elem_to_loc_nd", "ceildiv", "log1p", "expm1"});
    std::set<std::string> defined;
    for (size_t i = 0; i < toks_.size(); ++i) {
      const auto& t = toks_[i];
      if (t.kind != TokKind::ident || !helpers.count(t.text) || defined.count(t.text)) continue;
      size_t p = prev(i), n = next(i + 1);
      bool def = false;
      if (p != std::string::npos && (toks_[p].is("struct") || toks_[p].is("class")))
        def = true;
      else if (p != std::string::npos && toks_[p].is("using") && n < toks_.size() &&
               toks_[n].is("="))
        def = true;
      else if (n < toks_.size() && toks_[n].is(";")) {  // typedef ... name;
        size_t b = i;
        while (b > 0 && !toks_[b - 1].is(";") && !toks_[b - 1].is("{") && !toks_[b - 1].is("}") &&
               toks_[b - 1].kind != TokKind::preproc)
          --b;
        b = next(b);
        def = b < i && toks_[b].is("typedef");
      } else if (n < toks_.size() && toks_[n].is("(") && p != std::string::npos &&
                 !toks_[p].is(".") && !toks_[p].is("->") && !toks_[p].is("::")) {
        size_t c = match(n, "(", ")");
        size_t b = c == std::string::npos ? c : next(c + 1);
        while (b < toks_.size() && (toks_[b].is("const") || toks_[b].is("noexcept")))
          b = next(b + 1);
        def = b < toks_.size() && toks_[b].is("{");
      }
      if (def) defined.insert(t.text);
    }
    std::string out;
    for (auto& d : defined) out += "#define ALLOY_USER_" + d + " 1\n";
    return out;
  }

  // kernel base name -> (split, why) for CPU kernels with barriers/simd functions.
  std::map<std::string, std::pair<bool, std::string>> split_;

  // CPU: cut the bodies of barrier/simd kernels into work-item loops where possible
  // (msl/regions.h); the rest run as fibers. Runs on the translated tokens, before the text is
  // joined; a split body replaces the original in place (same lines).
  void plan_cpu_split() {
    if (opt_.target != Target::cpu || !out_.uses_sync) return;
    CpuSyncMode mode =
        opt_.cpu_sync < 0 ? cpu_sync_mode() : static_cast<CpuSyncMode>(opt_.cpu_sync);
    // Barriers/simd functions outside kernel bodies (helpers): the splitter sees only bodies.
    std::vector<bool> in_body(toks_.size(), false);
    for (auto& d : decls_)
      if (d.body_open)
        for (size_t i = d.body_open; i <= d.body_close; ++i) in_body[i] = true;
    bool outside = false;
    for (size_t i = 0; i < toks_.size(); ++i)
      if (!in_body[i] && toks_[i].kind == TokKind::ident && is_sync_ident(toks_[i].text) &&
          toks_[i].text != "simd_vote" && toks_[i].text != "quad_vote")
        outside = true;
    std::set<std::string> names;
    for (auto& d : decls_) {
      if (!d.body_open) continue;
      bool sync = false;
      for (size_t i = d.body_open; i <= d.body_close; ++i)
        if (toks_[i].kind == TokKind::ident && is_sync_ident(toks_[i].text)) sync = true;
      if (!names.insert(d.name).second) {
        split_[d.name] = {false, "fibers: several kernels share the name"};
        continue;
      }
      if (mode == CpuSyncMode::fibers) {
        split_[d.name] = {false, "fibers: ALLOY_CPU_SYNC=fibers"};
        continue;
      }
      if (opt_.robust) {
        split_[d.name] = {false, "fibers: robust mode"};
        continue;
      }
      if (outside) {
        split_[d.name] = {false,
                          "fibers: a function other than the kernel uses barriers/simd "
                          "functions"};
        continue;
      }
      if (d.body_open + 1 >= d.body_close) continue;
      std::string body;
      for (size_t i = d.body_open + 1; i < d.body_close; ++i) body += toks_[i].text;
      std::vector<std::string> pp;  // macros defined outside the body (regions.h)
      for (const auto& t : toks_)
        if (t.kind == TokKind::preproc) pp.push_back(t.text);
      SplitBody r = split_kernel_body(body, d.params, pp);
      if (!r.ok) {
        split_[d.name] = {false, "fibers: " + r.reason};
        continue;
      }
      split_[d.name] = {true, sync ? "split into work-item loops" : "split (no barrier in body)"};
      for (size_t i = d.body_open + 1; i < d.body_close; ++i) {  // r.body keeps the newlines
        toks_[i].text.clear();
        toks_[i].kind = TokKind::space;
      }
      toks_[d.body_open + 1].text = r.body;
      toks_[d.body_open + 1].kind = TokKind::ident;
      size_t pc = d.params_close;
      size_t po = prev(pc);
      bool empty = po != std::string::npos && toks_[po].is("(");
      toks_[pc].text = std::string(empty ? "" : ", ") +
                       "const alloy_cpu_launch* alloy_L, alloy_cpu_group* alloy_g)";
    }
  }

  // CPU: the names of kernel d's outputs that may be streamed (KernelEntry::stream_params). The
  // proof is on tokens and conservative: the body has no return, goto or preprocessor line; the
  // grid position is a `uint` attribute (or `.x` of a uint2/uint3 one) or a local copied from it
  // at statement level, and neither is assigned, incremented, has its address taken or is passed
  // alone to a function (which could take it by reference); the output's only occurrence is the
  // statement `out[index] = ...;` at the top level of the body (not inside a condition or a
  // loop), so every thread of the grid writes its own element exactly once and nothing reads it.
  std::vector<std::string> stream_outputs(const KernelDecl& d) const {
    if (opt_.target != Target::cpu || out_.uses_sync || opt_.robust || !d.body_open ||
        !cpu_stream_loops())
      return {};
    std::vector<const Token*> t;
    for (size_t i = d.body_open + 1; i < d.body_close; ++i) {
      const Token& k = toks_[i];
      if (k.trivia()) continue;
      if (k.kind == TokKind::preproc || k.is("return") || k.is("goto") || k.is("asm") ||
          k.is("__asm__"))
        return {};
      t.push_back(&k);
    }
    auto is = [&](size_t j, std::string_view s) { return j < t.size() && t[j]->is(s); };
    static const std::set<std::string>& kAssign = *new std::set<std::string>(
        {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"});
    static const std::set<std::string>& kOperand =
        *new std::set<std::string>({"[", "]",  "(",  ")",  ",",  "+", "-", "*", "/", "%",  "<",
                                    ">", "<=", ">=", "==", "!=", "?", ":", ";", "=", "&&", "||"});
    // A read of the value that ends at token j (inclusive), starting at token b: an operand of
    // arithmetic, a comparison or an index, not an lvalue nor a lone call argument.
    auto plain_read = [&](size_t b, size_t j) {
      if (b == 0 || j + 1 >= t.size()) return false;
      const Token &p = *t[b - 1], &n = *t[j + 1];
      if (kAssign.count(n.text) || p.is("++") || p.is("--") || p.is("&") || p.is(".") ||
          p.is("->") || p.is("::"))
        return false;
      if (!kOperand.count(p.text) || !kOperand.count(n.text)) return false;
      if ((p.is("(") || p.is(",")) && (n.is(")") || n.is(",")))
        return false;  // maybe a reference argument
      return true;
    };
    const KernelParam* gp = nullptr;
    for (const auto& p : d.params)
      if (p.kind == ParamKind::attribute && p.attribute == "thread_position_in_grid") gp = &p;
    if (!gp) return {};
    const bool vec = gp->type == "uint2" || gp->type == "uint3";
    if (!vec && gp->type != "uint") return {};
    // Tokens [j, j + n) that name the grid position's x, n = 0: none. Every use of the
    // attribute must be a plain read of a component (or of itself, when scalar).
    auto grid_x = [&](size_t j) -> size_t {
      if (!t[j]->is(gp->name)) return 0;
      if (!vec) return 1;
      return is(j + 1, ".") && is(j + 2, "x") ? 3 : 0;
    };
    for (size_t j = 0; j < t.size(); ++j) {
      if (!t[j]->is(gp->name)) continue;
      size_t e = vec ? j + 2 : j;
      if (vec && !(is(j + 1, ".") && j + 2 < t.size() && t[j + 2]->kind == TokKind::ident))
        return {};
      if (!plain_read(j, e)) return {};
    }
    // Locals holding the grid position: `[const] uint|unsigned|auto NAME = <grid x>;` at the
    // body's top level, each used only in plain reads afterwards.
    std::set<std::string> alias;
    int depth = 0, parens = 0;
    std::vector<int> depth_at(t.size()), parens_at(t.size());
    for (size_t j = 0; j < t.size(); ++j) {
      depth_at[j] = depth;
      parens_at[j] = parens;
      if (t[j]->is("{")) ++depth;
      if (t[j]->is("}")) --depth;
      if (t[j]->is("(")) ++parens;
      if (t[j]->is(")")) --parens;
    }
    auto statement_start = [&](size_t j) {
      return depth_at[j] == 0 && parens_at[j] == 0 &&
             (j == 0 || t[j - 1]->is(";") || t[j - 1]->is("{") || t[j - 1]->is("}"));
    };
    for (size_t j = 0; j + 4 < t.size(); ++j) {
      if (!statement_start(j)) continue;
      size_t k = j;
      if (t[k]->is("const")) ++k;
      if (!(is(k, "uint") || is(k, "unsigned") || is(k, "auto"))) continue;
      ++k;
      if (k + 2 >= t.size() || t[k]->kind != TokKind::ident || !is(k + 1, "=")) continue;
      size_t n = grid_x(k + 2);
      if (n && is(k + 2 + n, ";")) alias.insert(t[k]->text);
    }
    for (size_t j = 0; j < t.size(); ++j) {
      if (t[j]->kind != TokKind::ident || !alias.count(t[j]->text)) continue;
      const bool decl =
          j >= 1 && (t[j - 1]->is("uint") || t[j - 1]->is("unsigned") || t[j - 1]->is("auto")) &&
          is(j + 1, "=") &&
          (statement_start(j - 1) || (j >= 2 && t[j - 2]->is("const") && statement_start(j - 2)));
      if (decl) continue;
      if (!plain_read(j, j)) alias.erase(t[j]->text);
    }
    // Declared twice (another scope): not an alias.
    for (auto it = alias.begin(); it != alias.end();) {
      int decls = 0;
      for (size_t j = 1; j < t.size(); ++j)
        if (t[j]->is(*it) && t[j - 1]->kind == TokKind::ident) ++decls;
      it = decls == 1 ? std::next(it) : alias.erase(it);
    }
    auto index_len = [&](size_t j) -> size_t {
      if (j >= t.size()) return 0;
      if (size_t n = grid_x(j)) return n;
      return alias.count(t[j]->text) ? 1 : 0;
    };
    std::vector<std::string> names;
    for (const auto& p : d.params) {
      if (p.kind != ParamKind::buffer || !p.is_pointer || p.is_const ||
          p.type.find("device") == std::string::npos)
        continue;
      size_t uses = 0, at = 0;
      for (size_t j = 0; j < t.size(); ++j)
        if (t[j]->is(p.name)) ++uses, at = j;
      if (uses != 1 || !statement_start(at) || !is(at + 1, "[")) continue;
      size_t n = index_len(at + 2);
      if (n && is(at + 2 + n, "]") && is(at + 3 + n, "=")) names.push_back(p.name);
    }
    // A macro outside the body could name an output: none may.
    for (const auto& k : toks_)
      if (k.kind == TokKind::preproc)
        names.erase(std::remove_if(names.begin(), names.end(),
                                   [&](const std::string& nm) {
                                     return k.text.find(nm) != std::string::npos;
                                   }),
                    names.end());
    return names;
  }

  Translation finish() {
    if (opt_.reflect_only) {
      for (auto& k : out_.kernels) k.fibers = out_.uses_sync;
      return std::move(out_);
    }
    // Before the split rewrites bodies (stream_outputs skips translations with sync anyway).
    std::map<std::string, std::vector<std::string>> streamed;
    for (const auto& d : decls_) streamed[d.name] = stream_outputs(d);
    plan_cpu_split();
    std::string body;
    for (auto& t : toks_) body += t.text;
    std::string code = traits_.preamble;
    code += "namespace metal {\n";
    code += fmt::format("#line 1 \"{}\"\n", opt_.filename);
    code += body;
    code += "\n";
    code += "#line 100000 \"alloy-generated-entry\"\n";
    std::string user_helpers = user_helper_defines();
    if (user_helpers.find("ALLOY_USER_log1p ") != std::string::npos)
      // metal/mlx.h declares it: a half argument goes to the source's own log1p(float), as
      // Metal's promotion half -> float picks it (defined here, where that one is visible).
      code +=
          "template <class H, enable_if_t<is_same<H, half>::value, int>>\n"
          "ALLOY_FN float log1p(H x) { return log1p(static_cast<float>(x)); }\n";
    for (size_t k = 0; k < out_.kernels.size(); ++k) {
      plan_cuda_entry(out_.kernels[k]);
      out_.kernels[k].fibers = out_.uses_sync;
      auto d = split_.find(out_.kernels[k].base_name);
      if (d != split_.end()) {
        out_.kernels[k].split = d->second.first;
        out_.kernels[k].fibers = out_.uses_sync && !d->second.first;
        out_.kernels[k].sync_path = d->second.second;
      }
      if (auto st = streamed.find(out_.kernels[k].base_name); st != streamed.end()) {
        auto& ps = out_.kernels[k].params;
        for (size_t j = 0; j < ps.size(); ++j)
          if (std::find(st->second.begin(), st->second.end(), ps[j].name) != st->second.end())
            out_.kernels[k].stream_params.push_back(j);
      }
      code += traits_.entry(out_.kernels[k], k, opt_);
    }
    code += "}  // namespace metal\n";
    // Only the prelude parts the source names (they are most of the compile time). Vector-typed
    // attributes read only through components need no vector values (prelude_select.h).
    std::set<std::string> component_params;
    for (const auto& k : out_.kernels)
      for (const auto& p : k.params)
        if (p.kind == ParamKind::attribute && vector_attribute(p.type))
          component_params.insert(p.name);
    // Every entry's quick form reads CUDA's ids directly: its quick compile needs no thread_ids.
    bool grid_ids = traits_.name == "cuda" && !opt_.robust && !out_.kernels.empty();
    for (const auto& k : out_.kernels) grid_ids &= cuda_quick_grid_ids(k);
    const PreludeSelection selection = select_prelude(code, component_params);
    const std::string entry_defines =
        std::string(opt_.robust ? "#define ALLOY_NEED_ROBUST 1\n" : "") +
        (grid_ids ? "#define ALLOY_ENTRY_GRID_IDS 1\n" : "");
    if (traits_.name == "cuda") {
      // The prelude's core (metal_core.h, entry.h) first, ended by a declaration, then the math
      // functions: NVRTC's automatic PCH of the core is then shared by kernels that differ in
      // their math functions (msl::kPreludeCoreEnd; backend/cuda/nvrtc.h auto_pch).
      SplitDefines d = prelude_defines_split(selection);
      code.replace(0, traits_.preamble.size(), "#include \"metal_stdlib.h\"\n");
      out_.code = d.core + entry_defines + "#include \"metal_core.h\"\n#include \"entry.h\"\n" +
                  std::string(kPreludeCoreEnd) + user_helpers + d.math + code;
    } else {
      out_.code = user_helpers + prelude_defines(selection) + entry_defines + code;
    }
    return std::move(out_);
  }
};

}  // namespace

std::optional<uint64_t> cpu_stream_setting() {
  const std::optional<std::string> v = env::text("ALLOY_CPU_STREAM");
  if (!v || *v == "auto") return std::nullopt;
  if (*v == "off") return kCpuStreamNever;
  if (*v == "on") return uint64_t{0};
  return *env::count("ALLOY_CPU_STREAM", "off, on, auto or a size in bytes");
}

bool cpu_stream_loops() {
  if (const std::optional<uint64_t> s = cpu_stream_setting()) return *s != kCpuStreamNever;
#if defined(__x86_64__)
  static const bool enough_cores = [] {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set) >= 8;
#endif
    return std::thread::hardware_concurrency() >= 8;
  }();
  return enough_cores;
#else
  return false;
#endif
}

Translation translate(std::string_view msl, const TranslateOptions& options) {
  // MLX-style `instantiate_kernel(...)` macros declare kernels: expand them first (lines kept).
  if (!options.expand_macros) return Translator(msl, options).run();
  std::string source = expand_kernel_macros(msl);
  return Translator(source, options).run();
}

}  // namespace alloy::msl
