#include "msl/prelude_select.h"

#include <map>
#include <unordered_set>
#include <vector>

#include "msl/lexer.h"

namespace alloy::msl {
namespace {

// What names an optional part: every name it declares at namespace scope (functions, types,
// typedefs, enumerators, macros), as exact names or prefixes. tests/test_prelude_selection.cpp
// checks these against the headers. A name may select a part it does not need (that only costs
// compile time); a missing one would break kernels that use it.
struct Rule {
  const char* part;
  std::vector<std::string_view> names;
  std::vector<std::string_view> prefixes;
  std::vector<std::string_view> except;  // names with a prefix above that do not select the part
};

const std::vector<Rule>& rules() {
  static const std::vector<Rule>& r = *new std::vector<Rule>({
      {"INTEGER",
       {"clz", "ctz", "popcount", "reverse_bits", "rotate", "extract_bits", "insert_bits", "mulhi",
        "absdiff", "addsat", "subsat", "hadd", "rhadd", "madhi", "madsat", "mul24", "mad24"},
       {},
       {}},
      // atomic_thread_fence is in sync.h, which includes atomic.h.
      {"ATOMIC", {"atomic"}, {"atomic_", "memory_order", "thread_scope"}, {}},
      {"SYNC",
       {"threadgroup_barrier", "simdgroup_barrier", "atomic_thread_fence", "mem_flags"},
       {"mem_"},
       {}},
      {"SIMD", {}, {"simd_", "quad_"}, {}},
      // simdgroup_matrix and friends; simdgroup_barrier (sync.h) and the attribute
      // simdgroup_index_in_threadgroup share the prefix.
      {"MATRIX",
       {"matrix", "transpose", "determinant", "make_filled_simdgroup_matrix"},
       {"simdgroup_"},
       {"simdgroup_barrier", "simdgroup_index_in_threadgroup"}},
      {"MLX",
       {"bfloat16_to_uint16", "uint16_to_bfloat16", "complex64_t", "Limits", "ceildiv", "log1p",
        "expm1", "MTL_CONST", "METAL_FUNC", "MLX_MTL_PRAGMA_UNROLL"},
       {"elem_to_loc"},
       {}},
      // Metal compiler internals MLX's bf16_math.h calls (metal_internal.h brings simd.h).
      {"METAL_INTERNAL",
       {"__METAL_MAYBE_FAST_MATH__", "__METAL_FAST_MATH__", "__METAL_PRECISE_MATH__"},
       {"__metal_"},
       {}},
  });
  return r;
}

// metal/math.h: each function and the math functions its definition calls (which must come with
// it: a left-out function is a deleted stand-in, so a missing entry here fails to compile).
const std::map<std::string, std::vector<std::string>, std::less<>>& math_functions() {
  static const std::map<std::string, std::vector<std::string>, std::less<>>& m =
      *new std::map<std::string, std::vector<std::string>, std::less<>>([] {
        std::map<std::string, std::vector<std::string>, std::less<>> f;
        for (const char* n :
             {"floor",    "ceil",     "round",   "rint",     "trunc",      "fabs",      "asin",
              "acos",     "atan",     "sinh",    "cosh",     "tanh",       "asinh",     "acosh",
              "atanh",    "logb",     "cbrt",    "sinpi",    "cospi",      "tanpi",     "atan2",
              "fmod",     "copysign", "fdim",    "fmin",     "fmax",       "step",      "fma",
              "mix",      "fmin3",    "fmax3",   "fmedian3", "smoothstep", "sign",      "fract",
              "saturate", "ldexp",    "ilogb",   "frexp",    "modf",       "nextafter", "isnan",
              "isinf",    "isfinite", "signbit", "min",      "max",        "dot",       "cross",
              "exp",      "exp2",     "exp10",   "log",      "log2",       "log10",     "sqrt",
              "rsqrt",    "sin",      "cos",     "tan",      "pow",        "powr",      "divide"})
          f[n] = {};
        f["abs"] = {"fabs"};
        f["isnormal"] = {"isfinite", "fabs"};
        f["isordered"] = f["isunordered"] = {"isnan"};
        f["clamp"] = f["min3"] = f["max3"] = f["median3"] = {"min", "max"};
        f["length_squared"] = f["distance_squared"] = f["reflect"] = f["faceforward"] = {"dot"};
        f["sincos"] = {"sin", "cos"};
        f["length"] = {"sqrt", "dot"};
        f["distance"] = {"length", "sqrt", "dot"};
        f["normalize"] = {"rsqrt", "dot"};
        f["refract"] = {"dot", "sqrt"};
        return f;
      }());
  return m;
}

// Math functions the optional parts call.
const std::map<std::string, std::vector<std::string>, std::less<>>& part_math() {
  static const std::map<std::string, std::vector<std::string>, std::less<>>& m =
      *new std::map<std::string, std::vector<std::string>, std::less<>>({
          {"SIMD", {"min", "max"}},  // simd_min/simd_max, quad_min/quad_max
          {"MATRIX", {"dot", "cross"}},
          {"METAL_INTERNAL",
           {"acos",  "acosh",    "asin",  "asinh",     "atan",  "atanh", "ceil",  "cos",
            "cosh",  "cospi",    "exp",   "exp10",     "exp2",  "fabs",  "floor", "fract",
            "log",   "log10",    "log2",  "rint",      "round", "rsqrt", "sin",   "sinh",
            "sinpi", "sqrt",     "tan",   "tanh",      "tanpi", "trunc", "atan2", "divide",
            "fmax",  "fmin",     "fmod",  "nextafter", "pow",   "powr",  "fma",   "fmax3",
            "fmin3", "fmedian3", "ldexp", "frexp",     "min",   "max"}},
      });
  return m;
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

bool contains_ci(std::string_view s, std::string_view what) {
  for (size_t i = 0; i + what.size() <= s.size(); ++i) {
    size_t j = 0;
    while (j < what.size() && (s[i + j] | 0x20) == what[j]) ++j;
    if (j == what.size()) return true;
  }
  return false;
}

// The type traits of metal/traits.h that no core code uses (ALLOY_NEED_TRAITS), with their _t
// and _v forms.
bool is_traits_name(std::string_view id) {
  static const std::unordered_set<std::string_view>& names =
      *new std::unordered_set<std::string_view>({"_disjunction",
                                                 "_conjunction",
                                                 "remove_pointer",
                                                 "remove_pointer_t",
                                                 "remove_extent",
                                                 "remove_extent_t",
                                                 "add_const",
                                                 "add_const_t",
                                                 "add_pointer",
                                                 "add_pointer_t",
                                                 "decay",
                                                 "decay_t",
                                                 "is_const",
                                                 "is_const_v",
                                                 "is_reference",
                                                 "is_reference_v",
                                                 "is_array",
                                                 "is_array_v",
                                                 "is_scalar",
                                                 "is_scalar_v",
                                                 "is_unsigned",
                                                 "is_unsigned_v",
                                                 "is_class",
                                                 "is_class_v",
                                                 "is_enum",
                                                 "is_enum_v",
                                                 "is_base_of",
                                                 "is_base_of_v",
                                                 "is_trivially_copyable",
                                                 "is_trivially_copyable_v",
                                                 "make_signed",
                                                 "make_signed_t"});
  return names.count(id) != 0;
}

// The core pieces an identifier names (see PreludeSelection::core). Conservative: every name that
// holds "half", "bfloat" or "float16" (any case: half4, HALF_MAX, packed_bfloat2, float16_t,
// MAXHALF) or is a half constant (M_PI_H, HUGE_VALH) selects the 16-bit types; a Metal half
// literal (`1.0h`) is translated to `half(1.0f)`.
void add_core(std::string_view id, PreludeSelection* s) {
  if (contains_ci(id, "half") || contains_ci(id, "bfloat") || contains_ci(id, "float16") ||
      id == "HUGE_VALH" ||
      (starts_with(id, "M_") && id.size() > 4 && id.substr(id.size() - 2) == "_H"))
    s->core.insert("LOWP");
  if (starts_with(id, "packed_")) s->core.insert("PACKED");
  if (id == "arg" || id == "attr_to_param") s->core.insert("ENTRY_ARGS");
  if (is_traits_name(id)) s->core.insert("TRAITS");
  if (id == "numeric_limits") s->core.insert("LIMITS");
}

void add_math(const std::string& name, PreludeSelection* s) {
  if (!s->math.insert(name).second) return;
  for (const auto& dep : math_functions().at(name)) add_math(dep, s);
}

// float2x2 ... half4x4 (and bfloat, should a kernel name it): matrix typedefs.
bool is_matrix_name(std::string_view s) {
  for (std::string_view elem : {"float", "half", "bfloat"}) {
    if (s.size() != elem.size() + 3 || !starts_with(s, elem)) continue;
    std::string_view d = s.substr(elem.size());
    if (d[0] >= '2' && d[0] <= '4' && d[1] == 'x' && d[2] >= '2' && d[2] <= '4') return true;
  }
  return false;
}

// A 2- to 4-letter swizzle (xyzw or rgba letters, not mixed) as its xyzw spelling, or "".
std::string swizzle_name(std::string_view s) {
  if (s.size() < 2 || s.size() > 4) return "";
  static constexpr std::string_view kXyzw = "xyzw", kRgba = "rgba";
  std::string xyzw, from_rgba;
  for (char c : s) {
    auto i = kXyzw.find(c);
    if (i != std::string_view::npos) xyzw += c;
    auto j = kRgba.find(c);
    if (j != std::string_view::npos) from_rgba += kXyzw[j];
  }
  if (xyzw.size() == s.size()) return xyzw;
  if (from_rgba.size() == s.size()) return from_rgba;
  return "";
}

// `internal`: the name is qualified by one of the prelude's own namespaces (alloy_entry::,
// alloy_target::, ...), so it is no swizzle: the entry's `::alloy_entry::arg` is no `.arg`.
void add_identifier(std::string_view id, bool internal, PreludeSelection* s) {
  add_core(id, s);
  for (const auto& r : rules()) {
    bool hit = false;
    for (auto n : r.names) hit |= id == n;
    for (auto p : r.prefixes) hit |= starts_with(id, p);
    for (auto e : r.except) hit &= id != e;
    if (std::string_view(r.part) == "MATRIX") hit |= is_matrix_name(id);
    if (hit) s->needs.insert(r.part);
  }
  if (auto m = math_functions().find(id); m != math_functions().end()) add_math(m->first, s);
  if (internal) return;
  if (std::string sw = swizzle_name(id); !sw.empty()) s->swizzles.insert(sw);
}

void scan(std::string_view code, PreludeSelection* s);

bool is_swizzle_letter(char c) {
  return std::string_view("xyzwrgba").find(c) != std::string_view::npos;
}

// A #define that pastes tokens. Operands of `##` that are all literal make a known identifier;
// one that is a parameter makes an unknown one, which may name any part or math function, and
// any swizzle unless a literal operand has a letter no swizzle has (`T##2` is no swizzle).
void scan_pasting(std::string_view directive, PreludeSelection* s) {
  std::string text(directive);
  for (size_t p; (p = text.find("\\\n")) != std::string::npos;) text.replace(p, 2, " ");
  for (size_t p; (p = text.find("\\\r\n")) != std::string::npos;) text.replace(p, 3, " ");
  std::vector<Token> toks = lex(text);
  std::vector<size_t> sig;  // significant tokens
  for (size_t i = 0; i < toks.size(); ++i)
    if (!toks[i].trivia()) sig.push_back(i);
  if (sig.size() < 2 || !toks[sig[0]].is("define") || toks[sig[1]].kind != TokKind::ident) {
    s->all = true;  // `##` outside a #define body
    return;
  }
  std::set<std::string> params;
  size_t body = 2;
  if (sig.size() > 2 && sig[2] == sig[1] + 1 && toks[sig[2]].is("(")) {  // function-like
    for (body = 3; body < sig.size() && !toks[sig[body]].is(")"); ++body)
      params.insert(toks[sig[body]].is("...") ? "__VA_ARGS__" : toks[sig[body]].text);
    ++body;
  }
  for (size_t i = body; i < sig.size(); ++i) {
    if (!toks[sig[i]].is("##")) continue;
    if (i == body || i + 1 >= sig.size()) {
      s->all = true;  // ill-formed
      return;
    }
    // The chain a ## b ## c ...: operands at i - 1, i + 1, i + 3, ...
    std::vector<size_t> operands = {i - 1};
    for (; i < sig.size() && toks[sig[i]].is("##") && i + 1 < sig.size(); i += 2)
      operands.push_back(i + 1);
    --i;
    bool known = true, swizzle_possible = true;
    std::string pasted;
    for (size_t o : operands) {
      const Token& t = toks[sig[o]];
      if (t.kind == TokKind::ident && (params.count(t.text) || t.text == "__VA_OPT__")) {
        known = false;
        continue;
      }
      pasted += t.text;
      for (char c : t.text) swizzle_possible &= is_swizzle_letter(c);
    }
    if (known) {
      scan(pasted, s);  // one identifier (or a number, or nothing of ours)
      continue;
    }
    s->needs = prelude_parts();
    s->core = prelude_core_pieces();
    s->all_math = true;
    if (swizzle_possible) s->all_swizzles = true;
  }
}

void scan_tokens(const std::vector<Token>& toks, PreludeSelection* s) {
  std::string_view prev, prev2;  // the previous two significant tokens
  // Identifiers repeat (the generated entry names the kernel many times): look each up once.
  std::unordered_set<std::string> seen[2];
  for (const Token& t : toks) {
    if (t.trivia()) continue;
    if (t.kind == TokKind::ident) {
      bool internal = prev == "::" && starts_with(prev2, "alloy_");
      if (seen[internal].insert(t.text).second) add_identifier(t.text, internal, s);
    } else if (t.kind == TokKind::preproc) {
      std::string_view directive = std::string_view(t.text).substr(1);  // without its '#'
      if (t.text.find("##") != std::string::npos) scan_pasting(directive, s);
      if (s->all) return;
      scan(directive, s);
    }
    prev2 = prev;
    prev = t.text;
  }
}

void scan(std::string_view code, PreludeSelection* s) {
  scan_tokens(lex(code), s);
}

// Metal's vector type names: vec, float4, uint3, packed_half2, ...
bool is_vector_type_name(std::string_view id) {
  if (id == "vec") return true;
  if (starts_with(id, "packed_")) id.remove_prefix(7);
  if (id.size() < 2 || id.back() < '2' || id.back() > '4') return false;
  id.remove_suffix(1);
  for (std::string_view e : {"bool", "char", "uchar", "short", "ushort", "int", "uint", "long",
                             "ulong", "half", "bfloat", "float"})
    if (id == e) return true;
  return false;
}

// xyzw only: a CUDA translation declares such an attribute as a struct of x, y, z without vector
// values (prelude/entry.h: alloy_attr_<spelling>); `.r` keeps them.
bool is_component(const Token& t) {
  return t.kind == TokKind::ident && t.text.size() == 1 &&
         std::string_view("xyzw").find(t.text[0]) != std::string_view::npos;
}

// Whether vector values take part in `code` (PreludeSelection::core "VECTOR"): any vector type
// name or swizzle helper, except a declaration `T name` followed by `,` or `)` whose name is
// one of `component_params` (the vector-typed attribute parameters of the kernels), provided
// every other use of such a name reads one component (`name.x`; `s.name` and `ns::name` are
// other names). A vector value then never exists: the kernel only reads components of
// attributes, which `vec`'s storage alone gives. Directives count like code.
bool vector_values(const std::vector<Token>& toks, const std::set<std::string>& component_params) {
  std::vector<const Token*> sig;
  for (const Token& t : toks)
    if (!t.trivia()) sig.push_back(&t);
  auto at = [&](size_t i) -> const Token* { return i < sig.size() ? sig[i] : nullptr; };
  for (size_t i = 0; i < sig.size(); ++i) {
    const Token& t = *sig[i];
    if (t.kind == TokKind::preproc) {
      if (vector_values(lex(std::string_view(t.text).substr(1)), component_params)) return true;
      continue;
    }
    if (t.kind != TokKind::ident) continue;
    if (t.text == "alloy_swizzle") return true;
    // `alloy_attr_uint3`: the CUDA translation's declared type of a vector attribute.
    if (is_vector_type_name(t.text) ||
        (starts_with(t.text, "alloy_attr_") && is_vector_type_name(t.text.substr(11)))) {
      const Token *name = at(i + 1), *after = at(i + 2);
      if (name && name->kind == TokKind::ident && component_params.count(name->text) && after &&
          (after->is(",") || after->is(")"))) {
        ++i;  // the parameter's declaration
        continue;
      }
      return true;
    }
    if (!component_params.count(t.text)) continue;
    const Token* before = i ? sig[i - 1] : nullptr;
    if (before && (before->is(".") || before->is("->") || before->is("::"))) continue;
    const Token *dot = at(i + 1), *c = at(i + 2);
    if (!(dot && dot->is(".") && c && is_component(*c))) return true;
  }
  return false;
}

}  // namespace

PreludeSelection select_prelude(std::string_view code) {
  return select_prelude(code, {});
}

PreludeSelection select_prelude(std::string_view code,
                                const std::set<std::string>& component_params) {
  PreludeSelection s;
  const std::vector<Token> toks = lex(code);  // once for both passes
  scan_tokens(toks, &s);
  if (!s.all &&
      (!s.swizzles.empty() || s.all_swizzles || !s.needs.empty() || s.core.count("PACKED") ||
       s.core.count("ENTRY_ARGS") || vector_values(toks, component_params)))
    s.core.insert("VECTOR");
  if (s.all) {
    s.needs.clear();
    s.core.clear();
    s.swizzles.clear();
    s.math.clear();
    s.all_swizzles = s.all_math = false;
    return s;
  }
  if (s.all_swizzles) s.swizzles.clear();
  if (s.all_math) s.math.clear();
  for (const auto& part : s.needs) {
    if (auto m = part_math().find(part); m != part_math().end() && !s.all_math)
      for (const auto& f : m->second) add_math(f, &s);
  }
  return s;
}

std::string prelude_defines(const PreludeSelection& s) {
  if (s.all) return "";
  std::string out = "#define ALLOY_SELECT 1\n";
  for (const auto& n : s.needs) out += "#define ALLOY_NEED_" + n + " 1\n";
  for (const auto& n : s.core) out += "#define ALLOY_NEED_" + n + " 1\n";
  if (s.all_swizzles) out += "#define ALLOY_SWIZZLES_ALL 1\n";
  // ALLOY_SWIZZLES_<N>: some selected swizzle applies to N-component vectors (metal/vector.h
  // skips the other vectors' member lists).
  for (int n : {2, 3, 4}) {
    bool any = false;
    for (const auto& w : s.swizzles)
      any |= w.find_first_not_of(std::string_view("xyzw").substr(0, n)) == std::string::npos;
    if (any) out += "#define ALLOY_SWIZZLES_" + std::to_string(n) + " 1\n";
  }
  for (const auto& w : s.swizzles) out += "#define ALLOY_SWIZZLE_" + w + " 1\n";
  if (s.all_math) out += "#define ALLOY_MATH_ALL 1\n";
  for (const auto& f : s.math) out += "#define ALLOY_USE_" + f + " 1\n";
  return out;
}

SplitDefines prelude_defines_split(const PreludeSelection& s) {
  SplitDefines out;
  const std::string all = prelude_defines(s);
  for (size_t at = 0; at < all.size();) {
    size_t nl = all.find('\n', at);
    std::string_view line(all.data() + at, nl - at + 1);
    const bool math =
        line.starts_with("#define ALLOY_USE_") || line.starts_with("#define ALLOY_MATH_ALL ");
    (math ? out.math : out.core) += line;
    at = nl + 1;
  }
  // metal_core.h's derivation of ALLOY_NEED_LIMITS from the math functions that use
  // numeric_limits sees no ALLOY_USE_ here: the core part says it.
  if (!s.all && !s.core.count("LIMITS") &&
      (s.all_math || s.math.count("fract") || s.math.count("isnormal")))
    out.core += "#define ALLOY_NEED_LIMITS 1\n";
  return out;
}

std::string math_header_for(std::string_view source, std::string_view math_h) {
  const size_t core_end = source.find(kPreludeCoreEnd);
  if (core_end == std::string_view::npos) return "";
  // The selection: the #define lines after the core's end, up to the first other line.
  std::set<std::string, std::less<>> used;
  bool all = false;
  for (size_t at = core_end + kPreludeCoreEnd.size(); at < source.size();) {
    size_t nl = source.find('\n', at);
    if (nl == std::string_view::npos) nl = source.size();
    std::string_view line = source.substr(at, nl - at);
    at = nl + 1;
    if (line.empty() || line[0] != '#') break;
    constexpr std::string_view use = "#define ALLOY_USE_";
    if (line.starts_with(use) && line.ends_with(" 1"))
      used.emplace(line.substr(use.size(), line.size() - use.size() - 2));
    else if (line == "#define ALLOY_MATH_ALL 1")
      all = true;
  }
  // Without ALLOY_SELECT (before the core's end), metal_core.h defines ALLOY_MATH_ALL itself.
  if (source.substr(0, core_end).find("#define ALLOY_SELECT 1\n") == std::string_view::npos)
    all = true;
  std::string out;
  out.reserve(math_h.size());
  // Per open #if: whether it is a selection block (its directives dropped) and whether the lines
  // inside are kept.
  struct Open {
    bool selection;
    bool keep;
  };
  std::vector<Open> open;
  bool keep = true;
  for (size_t at = 0; at < math_h.size();) {
    size_t nl = math_h.find('\n', at);
    if (nl == std::string_view::npos) nl = math_h.size();
    std::string_view line = math_h.substr(at, nl - at);
    at = nl + 1;
    constexpr std::string_view on = "#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_";
    constexpr std::string_view off = "#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_";
    const bool is_on = line.starts_with(on), is_off = line.starts_with(off);
    if (is_on || is_off) {
      std::string_view name = line.substr((is_on ? on : off).size());
      if (!name.ends_with(")") || name.find_first_of(" ()|&!") != name.size() - 1) return "";
      name.remove_suffix(1);
      const bool selected = all || used.count(name);
      open.push_back({true, keep});
      keep = keep && (is_on ? selected : !selected);
      out += '\n';
      continue;
    }
    std::string_view directive = line.substr(std::min(line.find_first_not_of(" \t"), line.size()));
    if (directive.starts_with("#") && (directive.find("ALLOY_USE_") != std::string_view::npos ||
                                       directive.find("ALLOY_MATH_ALL") != std::string_view::npos))
      return "";  // a form not known here
    if (directive.starts_with("#if")) {
      open.push_back({false, keep});
    } else if (directive.starts_with("#el")) {
      if (open.empty() || open.back().selection) return "";
    } else if (directive.starts_with("#endif")) {
      if (open.empty()) return "";
      const Open o = open.back();
      open.pop_back();
      if (o.selection) {
        keep = o.keep;
        out += '\n';
        continue;
      }
    }
    if (keep) out += line;
    out += '\n';
  }
  if (!open.empty()) return "";
  return out;
}

const std::set<std::string>& prelude_parts() {
  static const std::set<std::string>& parts = *new std::set<std::string>([] {
    std::set<std::string> p;
    for (const auto& r : rules()) p.insert(r.part);
    return p;
  }());
  return parts;
}

const std::set<std::string>& prelude_core_pieces() {
  static const std::set<std::string>& pieces =
      *new std::set<std::string>({"ENTRY_ARGS", "LIMITS", "LOWP", "PACKED", "TRAITS", "VECTOR"});
  return pieces;
}

const std::set<std::string>& prelude_math_functions() {
  static const std::set<std::string>& names = *new std::set<std::string>([] {
    std::set<std::string> n;
    for (const auto& [name, deps] : math_functions()) n.insert(name);
    return n;
  }());
  return names;
}

}  // namespace alloy::msl
