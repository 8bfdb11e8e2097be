#include "msl/prelude_select.h"

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
  static const std::vector<Rule> r = {
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
  };
  return r;
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
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

// `qualified`: the name follows `::`, so it names no member (the entry's `::alloy_entry::arg`
// is no swizzle `.arg`).
void add_identifier(std::string_view id, bool qualified, PreludeSelection* s) {
  for (const auto& r : rules()) {
    bool hit = false;
    for (auto n : r.names) hit |= id == n;
    for (auto p : r.prefixes) hit |= starts_with(id, p);
    for (auto e : r.except) hit &= id != e;
    if (std::string_view(r.part) == "MATRIX") hit |= is_matrix_name(id);
    if (hit) s->needs.insert(r.part);
  }
  if (qualified) return;
  if (std::string sw = swizzle_name(id); !sw.empty()) s->swizzles.insert(sw);
}

void scan(std::string_view code, PreludeSelection* s) {
  bool after_scope = false;  // the previous significant token is `::`
  for (const Token& t : lex(code)) {
    if (t.trivia()) continue;
    if (t.kind == TokKind::ident) {
      add_identifier(t.text, after_scope, s);
    } else if (t.kind == TokKind::preproc) {
      // Token pasting can make any name: no selection.
      if (t.text.find("##") != std::string::npos) {
        s->all = true;
        return;
      }
      scan(std::string_view(t.text).substr(1), s);  // the directive without its '#'
      if (s->all) return;
    }
    after_scope = t.is("::");
  }
}

}  // namespace

PreludeSelection select_prelude(std::string_view code) {
  PreludeSelection s;
  scan(code, &s);
  if (s.all) {
    s.needs.clear();
    s.swizzles.clear();
  }
  return s;
}

std::string prelude_defines(const PreludeSelection& s) {
  if (s.all) return "";
  std::string out = "#define ALLOY_SELECT 1\n";
  for (const auto& n : s.needs) out += "#define ALLOY_NEED_" + n + " 1\n";
  for (const auto& w : s.swizzles) out += "#define ALLOY_SWIZZLE_" + w + " 1\n";
  return out;
}

const std::set<std::string>& prelude_parts() {
  static const std::set<std::string> parts = [] {
    std::set<std::string> p;
    for (const auto& r : rules()) p.insert(r.part);
    return p;
  }();
  return parts;
}

}  // namespace alloy::msl
