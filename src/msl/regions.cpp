#include "msl/regions.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "core/env.h"
#include "msl/lexer.h"

namespace alloy::msl {

CpuSyncMode cpu_sync_mode() {
  switch (env::choice("ALLOY_CPU_SYNC", {"auto", "fibers", "split"}).value_or(0)) {
    case 1:
      return CpuSyncMode::fibers;
    case 2:
      return CpuSyncMode::split;
    default:
      return CpuSyncMode::automatic;
  }
}

namespace {

constexpr size_t npos = std::string::npos;

struct Cannot {
  std::string why;
};

bool is_barrier_name(std::string_view s) {
  return s == "threadgroup_barrier" || s == "simdgroup_barrier";
}
bool is_sync_name(std::string_view s) {
  return is_barrier_name(s) || s.starts_with("simd_") || s.starts_with("quad_") ||
         (s.starts_with("simdgroup_") && s != "simdgroup_index_in_threadgroup" &&
          s != "simdgroups_per_threadgroup");
}
bool is_simd_type(std::string_view s) {
  return s == "simd_vote" || s == "quad_vote";
}

// Attributes whose value is the same for every thread of a group.
bool uniform_attribute(std::string_view a) {
  return a == "threadgroup_position_in_grid" || a == "threads_per_threadgroup" ||
         a == "threads_per_grid" || a == "grid_size" || a == "grid_origin" ||
         a == "dispatch_threads_per_threadgroup" || a == "threadgroups_per_grid" ||
         a == "simdgroups_per_threadgroup" || a == "dispatch_simdgroups_per_threadgroup" ||
         a == "threads_per_simdgroup" || a == "thread_execution_width" ||
         a == "quadgroups_per_threadgroup" || a == "dispatch_quadgroups_per_threadgroup";
}

const std::set<std::string, std::less<>>& keywords() {
  static const std::set<std::string, std::less<>>& k = *new std::set<std::string, std::less<>>(
      {"return",   "if",       "else",      "for",      "while",         "do",
       "switch",   "case",     "default",   "break",    "continue",      "goto",
       "sizeof",   "const",    "constexpr", "static",   "static_cast",   "reinterpret_cast",
       "true",     "false",    "typedef",   "using",    "static_assert", "template",
       "typename", "decltype", "auto",      "volatile", "const_cast",    "nullptr",
       "struct",   "class",    "new",       "delete",   "throw",         "alignof"});
  return k;
}

bool assign_op(std::string_view s) {
  return s == "=" || s == "+=" || s == "-=" || s == "*=" || s == "/=" || s == "%=" || s == "&=" ||
         s == "|=" || s == "^=" || s == "<<=" || s == ">>=" || s == "++" || s == "--";
}

struct Item {
  enum Kind { plain, preproc, barrier, simd, if_, for_, block, empty } kind = plain;
  size_t b = 0, s = 0, e = 0;  // range [b, e); s = first significant token
  bool sync = false, has_barrier = false;
  // if_: condition [cb, ce); for_: header [cb, ce) (inside the parentheses)
  size_t cb = 0, ce = 0;
  size_t body_b = 0;  // for_/if_: first token of the controlled statement
  std::vector<Item> then_, else_;
  size_t else_tok = npos;
};

class Splitter {
 public:
  Splitter(std::string_view body, const std::vector<KernelParam>& params,
           const std::vector<std::string>& preprocessor_lines)
      : toks_(lex(body)), params_(params) {
    // Macros of the source (its header, a library's file scope) may assign names the statements
    // do not show (`#define ADD(v) acc += v`): a region using one stores every value back.
    // An #include other than Metal's own headers may define more: then every region does.
    for (const std::string& line : preprocessor_lines) {
      size_t i = line.find_first_not_of(" \t#");
      if (i == npos) continue;
      std::string_view rest = std::string_view(line).substr(i);
      if (rest.starts_with("include")) {
        if (rest.find("<metal_") == npos) macros_all_ = true;
        continue;
      }
      if (!rest.starts_with("define")) continue;
      size_t b = line.find_first_not_of(" \t", i + 6);
      size_t e = b;
      while (e < line.size() &&
             (std::isalnum(static_cast<unsigned char>(line[e])) || line[e] == '_'))
        ++e;
      if (b != npos && e > b) macros_.insert(line.substr(b, e - b));
    }
  }

  SplitBody run() {
    SplitBody r;
    try {
      prepare();
      auto items = parse_seq(0, toks_.size());
      for (const Item& it : items)
        if ((it.kind == Item::plain && !it.sync) || it.kind == Item::simd)
          top_stmts_[it.s] = {it.e, it.kind == Item::simd};
      out_ += "::alloy_split::state alloy_S(alloy_L, alloy_g);";
      scopes_.push_back({});
      for (auto& p : params_) {
        if (!assigned_params_.count(p.name)) continue;
        int slot = slot_++;
        out_ += fmt::format(
            "using alloy_T{0} = ::alloy_split::remove_cv<decltype({1})>::type; alloy_T{0}* "
            "alloy_h{0} = alloy_S.storage<alloy_T{0}>({0}); alloy_S.fill(alloy_h{0}, {1});",
            slot, p.name);
        scopes_.back().push_back({p.name, slot, {}, {}});
      }
      emit_seq(items, "nullptr", false);
      close_region();
      r.ok = true;
      r.body = out_;
    } catch (const Cannot& c) {
      r.ok = false;
      r.reason = c.why;
    }
    return r;
  }

 private:
  std::vector<Token> toks_;
  const std::vector<KernelParam>& params_;
  std::set<std::string, std::less<>> varying_attrs_, assigned_params_, const_buffers_, locals_,
      uniform_;
  // A value later regions read: in per-thread storage (slot), or, for a declaration each region
  // can recompute from thread attributes and uniform values (remat: its declaration), declared
  // again in every region that reads it. Recomputing keeps indices affine in the thread loop
  // (contiguous vector accesses) where a stored value would be a gather.
  struct Hoisted {
    std::string name;
    int slot;
    std::string remat;
    std::set<std::string> deps;
  };
  std::set<std::string, std::less<>> remat_names_;
  std::set<size_t> decl_pos_;  // tokens that declare a name (prepare's superset)
  static constexpr size_t kMaxVersionedSubscripts = 16;
  std::set<std::string, std::less<>> constexpr_names_;  // `constexpr T name = ...` in the body
  bool flat_text_ = false;                              // region_text on one line
  std::set<std::string, std::less<>> array_names_;      // local arrays declared so far
  std::set<std::string, std::less<>> macros_;           // macro names of the source
  bool macros_all_ = false;                             // an #include that may define more
  bool macro_used_ = false;                             // a macro of the source in the body
  // The first token of each group-level loop whose body runs as regions (a loop around
  // barriers or simd functions, an interchanged loop), outermost first: a value a region inside
  // one writes may be read in the next iteration by code before the region (read_later).
  std::vector<size_t> loop_starts_;
  // The plain and simd statements directly in the kernel body's braces (first token -> end, and
  // whether it calls simd functions): each runs once per thread that reaches it (overwritten).
  std::map<size_t, std::pair<size_t, bool>> top_stmts_;
  int loop_id_ = 0;
  std::vector<std::vector<Hoisted>> scopes_;
  std::string out_;
  int slot_ = 0, region_id_ = 0, pred_id_ = 0, simd_id_ = 0;

  // The open region.
  struct Region {
    bool open = false;
    std::string mask = "nullptr";
    std::string pre;    // group-level code placed before the region
    std::string head;   // consume code
    std::string probe;  // head's declarations, for the probe
    std::string stmts;
    std::string tail;                // publish / predicate code
    std::vector<std::string> decls;  // declaration statements (probe)
    std::vector<std::string> declared;
    std::map<std::string, std::pair<std::string, std::set<std::string>>>
        remat;         // name -> (decl, idents)
    size_t last = 0;   // last token index covered
    size_t lo = npos;  // first token index of the code it runs (region_idents)
    // The statement whose simd folds this region publishes (their operands are read here) or
    // consumes (the statement's assignment runs here), by its first token.
    size_t publishes = npos, consumes = npos;
    // The statements it runs ([s, e) of each add_stmt / add_simd), and whether it runs other
    // generated code (trip counts, predicates, interchanged loops' variables, directives).
    std::vector<std::pair<size_t, size_t>> items;
    bool other = false;
    bool has_return = false;
    std::set<std::string> idents;
    std::set<std::string> written;  // names the region may change (writes())
    // Typed per-thread values the region stores for a reduction after it: (slot, type
    // expression for the probe).
    std::vector<std::pair<int, std::string>> extra;
    // Versioning (close_region, cpu_region_v): the statements again on one line, the region's
    // first token, the thread-dependent subscripts of buffer accesses whose value at a row's
    // first thread is checked. Only regions made of plain statements are versioned.
    bool versionable = true;
    size_t first = npos;
    std::string fast;
    std::vector<std::string> far;
  } rg_;

  [[noreturn]] void cannot(const std::string& why) const { throw Cannot{why}; }

  size_t next(size_t i, size_t e) const {
    while (i < e && toks_[i].trivia()) ++i;
    return i;
  }
  size_t prev(size_t i) const {
    while (i > 0) {
      --i;
      if (!toks_[i].trivia()) return i;
    }
    return npos;
  }
  size_t match(size_t i, size_t e) const {
    std::string_view open = toks_[i].text;
    std::string_view close = open == "(" ? ")" : open == "[" ? "]" : "}";
    int depth = 0;
    for (size_t j = i; j < e; ++j) {
      if (toks_[j].kind != TokKind::punct) continue;
      if (toks_[j].text == open)
        ++depth;
      else if (toks_[j].text == close && --depth == 0)
        return j;
    }
    cannot("unbalanced brackets");
  }
  std::string text(size_t b, size_t e) const {
    std::string s;
    for (size_t i = b; i < e; ++i) s += toks_[i].text;
    return s;
  }
  // Text on one line (copies placed elsewhere keep the original's newlines where they were).
  std::string flat(size_t b, size_t e) const {
    std::string s;
    for (size_t i = b; i < e; ++i) {
      if (toks_[i].kind == TokKind::preproc) cannot("a preprocessor line inside a statement");
      if (toks_[i].kind == TokKind::comment) {
        s += ' ';
        continue;
      }
      for (char c : toks_[i].text) s += c == '\n' ? ' ' : c;
    }
    return s;
  }
  static std::string newlines(const std::string& s) {
    std::string n;
    for (char c : s)
      if (c == '\n') n += '\n';
    return n;
  }

  // `a OP b * name` / `return b & name`: `*`/`&` at p is a binary operator, not part of a
  // declarator, when the word before it follows an operator (`q + h * Dk;` does not declare
  // Dk). Only this pattern is excluded from the declared-name superset.
  bool product_operand(size_t p) const {
    if (!(toks_[p].is("*") || toks_[p].is("&"))) return false;
    size_t w = prev(p);
    if (w == npos) return false;
    // `... ) * name` / `... ] * name` / `2 * name`: a product, unless the parenthesis closes a
    // decltype/typeof (`decltype(x)* p`).
    if (toks_[w].kind == TokKind::number || toks_[w].is("]")) return true;
    if (toks_[w].is(")")) {
      int depth = 0;
      for (size_t j = w + 1; j-- > 0;) {
        if (toks_[j].is(")")) ++depth;
        if (toks_[j].is("(") && --depth == 0) {
          size_t f = prev(j);
          return f != npos &&
                 !(toks_[f].is("decltype") || toks_[f].is("__typeof__") || toks_[f].is("typeof"));
        }
      }
      return false;
    }
    if (toks_[w].kind != TokKind::ident || keywords().count(toks_[w].text)) return false;
    size_t c = prev(w);
    if (c == npos) return false;
    if (toks_[c].kind == TokKind::ident) return toks_[c].is("return") || toks_[c].is("case");
    if (toks_[c].kind != TokKind::punct) return false;
    static const std::set<std::string>& kOps = *new std::set<std::string>(
        {"=",  "+",  "-",  "*",  "/",  "%",  "<",   ">",   "!",  "~",  "?",  "^",
         "|",  "&",  "==", "!=", "<=", ">=", "&&",  "||",  "+=", "-=", "*=", "/=",
         "%=", "&=", "|=", "^=", "<<", ">>", "<<=", ">>=", "[",  ".",  "->"});
    return kOps.count(toks_[c].text) > 0;
  }

  void prepare() {
    for (size_t i = 0; i < toks_.size(); ++i) {
      if (!toks_[i].is("constexpr")) continue;
      for (size_t j = next(i + 1, toks_.size()); j < toks_.size(); j = next(j + 1, toks_.size())) {
        if (toks_[j].is(";") || toks_[j].is("{")) break;
        size_t n = next(j + 1, toks_.size());
        if (toks_[j].kind == TokKind::ident && n < toks_.size() && toks_[n].is("=")) {
          constexpr_names_.insert(toks_[j].text);
          break;
        }
      }
    }
    for (auto& p : params_) {
      if (p.kind == ParamKind::attribute && !uniform_attribute(p.attribute))
        varying_attrs_.insert(p.name);
      if (p.kind == ParamKind::buffer && p.is_const) const_buffers_.insert(p.name);
    }
    for (size_t i = 0; i < toks_.size(); ++i) {
      const auto& t = toks_[i];
      if (t.kind == TokKind::preproc && t.text.find("define") != npos)
        cannot("a #define inside the kernel body");
      if (t.kind != TokKind::ident) continue;
      if (t.text == "goto") cannot("goto");
      if (t.text.starts_with("simdgroup_") && !is_barrier_name(t.text) && is_sync_name(t.text))
        cannot("simdgroup matrix functions");
      size_t p = prev(i);
      size_t n = next(i + 1, toks_.size());
      // Declared names (a superset: `X name` where X ends a type).
      if (p != npos && n < toks_.size() &&
          (toks_[p].kind == TokKind::ident || toks_[p].is(">") || toks_[p].is("*") ||
           toks_[p].is("&")) &&
          !keywords().count(toks_[p].text) &&
          (toks_[n].is("=") || toks_[n].is(";") || toks_[n].is(",") || toks_[n].is("[") ||
           toks_[n].is("(") || toks_[n].is("{") || toks_[n].is(":") || toks_[n].is(")")) &&
          !product_operand(p)) {
        locals_.insert(t.text);
        decl_pos_.insert(i);
        // The other declarators of the same declaration (`int H = a, W = b, C = c;`): the
        // name after each comma at the declaration's own nesting level, up to its `;`.
        int depth = 0;
        for (size_t j = n; j < toks_.size(); ++j) {
          const Token& u = toks_[j];
          if (u.is("(") || u.is("[") || u.is("{")) ++depth;
          if (u.is(")") || u.is("]") || u.is("}")) {
            if (--depth < 0) break;
          }
          if (depth == 0 && u.is(";")) break;
          if (depth != 0 || !u.is(",")) continue;
          size_t d = next(j + 1, toks_.size());
          while (d < toks_.size() && (toks_[d].is("*") || toks_[d].is("&")))
            d = next(d + 1, toks_.size());
          if (d < toks_.size() && toks_[d].kind == TokKind::ident) {
            locals_.insert(toks_[d].text);
            decl_pos_.insert(d);
          }
        }
      }
      if (toks_[p == npos ? 0 : p].is("auto") || (p != npos && toks_[p].is("auto"))) {
        locals_.insert(t.text);
        decl_pos_.insert(i);
      }
    }
    for (const Token& t : toks_)
      if (t.kind == TokKind::ident && macros_.count(t.text)) macro_used_ = true;
    for (auto& prm : params_) {
      if (assign_count(prm.name) == 0) continue;
      if (prm.kind == ParamKind::attribute) cannot("an attribute parameter is assigned");
      assigned_params_.insert(prm.name);
    }
  }

  // Occurrences of `name` that may modify it.
  int assign_count(const std::string& name, size_t b = 0, size_t e = npos) const {
    int c = 0;
    e = std::min(e, toks_.size());
    for (size_t i = b; i < e; ++i) {
      if (toks_[i].kind != TokKind::ident || toks_[i].text != name) continue;
      size_t p = prev(i);
      if (p != npos && (toks_[p].is(".") || toks_[p].is("->") || toks_[p].is("::"))) continue;
      size_t n = next(i + 1, toks_.size());
      while (n < toks_.size() && toks_[n].is(".")) {  // a member: v.x = ...
        size_t m = next(n + 1, toks_.size());
        n = m < toks_.size() ? next(m + 1, toks_.size()) : m;
      }
      bool mod = (n < toks_.size() && assign_op(toks_[n].text)) ||
                 (p != npos && (toks_[p].is("++") || toks_[p].is("--") || toks_[p].is("&")));
      if (mod) ++c;
    }
    return c;
  }

  // Whether code from token `from` on may change `name` in a way assign_count() does not see:
  // passed as a whole argument to a function that may take it by reference (a user function
  // `void f(thread float& a)`; Metal's by-value functions and constructors excepted), an
  // element assigned (`v[0] = ...`, a vector; not for a `pointer`), or a macro of the source used
  // (it may assign anything).
  bool changed_otherwise(const std::string& name, size_t from, bool pointer) const {
    static const std::set<std::string_view>& kByValue = *new std::set<std::string_view>(
        {"max",   "min",    "fmax",   "fmin",   "clamp", "abs",   "fabs",   "exp",    "exp2",
         "log",   "log2",   "sqrt",   "rsqrt",  "pow",   "powr",  "select", "mix",    "fma",
         "float", "float2", "float3", "float4", "half",  "half2", "half3",  "half4",  "int",
         "int2",  "int3",   "int4",   "uint",   "uint2", "uint3", "uint4",  "bool",   "sin",
         "cos",   "tanh",   "floor",  "ceil",   "round", "dot",   "length", "as_type"});
    for (size_t i = from; i < toks_.size(); ++i) {
      if (toks_[i].kind != TokKind::ident) continue;
      if (macros_.count(toks_[i].text)) return true;
      if (toks_[i].text != name) continue;
      size_t p = prev(i), n = next(i + 1, toks_.size());
      if (p == npos || n >= toks_.size()) continue;
      if (toks_[p].is(".") || toks_[p].is("->") || toks_[p].is("::")) continue;
      if (toks_[n].is("[")) {
        if (pointer) continue;  // `p[i] = ...` changes what p points to
        size_t c = match(n, toks_.size());
        size_t a = c < toks_.size() ? next(c + 1, toks_.size()) : c;
        if (a < toks_.size() && assign_op(toks_[a].text)) return true;
        continue;
      }
      if (!(toks_[p].is("(") || toks_[p].is(",")) || !(toks_[n].is(")") || toks_[n].is(",")))
        continue;
      // The call whose argument it is: the name before the enclosing '('.
      size_t open = p;
      int depth = 0;
      for (size_t j = i; j-- > 0;) {
        if (toks_[j].is(")") || toks_[j].is("]")) ++depth;
        if (toks_[j].is("(") || toks_[j].is("[")) {
          if (depth == 0) {
            open = j;
            break;
          }
          --depth;
        }
        if (j == 0) open = npos;
      }
      if (open == npos || !toks_[open].is("(")) continue;  // an initializer list, a subscript
      size_t callee = prev(open);
      if (callee == npos) continue;
      const Token& c = toks_[callee];
      if (c.kind != TokKind::ident) {
        if (c.is(">")) return true;  // a template's call
        continue;                    // a parenthesised expression
      }
      if (!kByValue.count(c.text) && !is_sync_name(c.text)) return true;
    }
    return false;
  }

  // Whether declaration statement `it` declares `name` as a pointer (a `*` before the name).
  bool declares_pointer(const Item& it, const std::string& name) const {
    bool star = false;
    for (size_t i = it.s; i < it.e; ++i) {
      if (toks_[i].is("*")) star = true;
      if (toks_[i].kind == TokKind::ident && toks_[i].text == name) return star;
      if (toks_[i].is(",")) star = false;
    }
    return false;
  }

  bool is_uniform_name(const std::string& s) const {
    if (uniform_.count(s)) return true;
    if (locals_.count(s) || varying_attrs_.count(s) || assigned_params_.count(s)) return false;
    if (is_sync_name(s) || s.starts_with("atomic_") || s.starts_with("alloy_")) return false;
    return true;
  }

  // A threadgroup-uniform expression: no thread-dependent name, no memory read except through a
  // const buffer parameter, no side effect.
  bool uniform(size_t b, size_t e) const {
    for (size_t i = b; i < e; ++i) {
      const auto& t = toks_[i];
      if (t.trivia()) continue;
      if (t.kind == TokKind::preproc) return false;
      if (t.kind == TokKind::ident) {
        size_t p = prev(i);
        if (p != npos && p >= b && (toks_[p].is(".") || toks_[p].is("->"))) continue;
        if (keywords().count(t.text) && t.text != "auto") continue;
        if (!is_uniform_name(t.text)) return false;
        continue;
      }
      if (t.kind != TokKind::punct) continue;
      if (assign_op(t.text) || t.is("->")) return false;
      if (t.is("[")) {
        size_t p = prev(i);
        if (p == npos || p < b || !const_buffers_.count(toks_[p].text)) return false;
      }
      if (t.is("*")) {
        size_t p = prev(i);
        if (p == npos || p < b ||
            !(toks_[p].kind == TokKind::ident || toks_[p].kind == TokKind::number ||
              toks_[p].is(")") || toks_[p].is("]")))
          return false;  // a dereference
      }
    }
    return true;
  }

  bool has_sync(size_t b, size_t e, bool* barrier = nullptr) const {
    bool any = false;
    for (size_t i = b; i < e; ++i)
      if (toks_[i].kind == TokKind::ident && is_sync_name(toks_[i].text) &&
          !is_simd_type(toks_[i].text)) {
        any = true;
        if (barrier && toks_[i].text == "threadgroup_barrier") *barrier = true;
      }
    return any;
  }

  // ---- parsing ----
  std::vector<Item> parse_seq(size_t b, size_t e) {
    std::vector<Item> v;
    size_t i = b;
    while (i < e) {
      size_t s = next(i, e);
      if (s >= e) {
        Item it;
        it.kind = Item::empty;
        it.b = i;
        it.s = it.e = e;
        v.push_back(it);
        break;
      }
      v.push_back(parse_stmt(i, e));
      i = v.back().e;
    }
    return v;
  }

  size_t stmt_end(size_t s, size_t e) {  // index after the ';' ending a simple statement
    for (size_t j = s; j < e; ++j) {
      if (toks_[j].is("(") || toks_[j].is("[") || toks_[j].is("{")) {
        j = match(j, e);
        continue;
      }
      if (toks_[j].is(";")) return j + 1;
    }
    cannot("a statement without ';'");
  }

  Item parse_stmt(size_t b, size_t e) {
    Item it;
    it.b = b;
    size_t s = next(b, e);
    it.s = s;
    const Token& t = toks_[s];
    if (t.kind == TokKind::preproc) {
      it.kind = Item::preproc;
      it.e = s + 1;
    } else if (t.is("{")) {
      size_t m = match(s, e);
      it.kind = Item::block;
      it.then_ = parse_seq(s + 1, m);
      it.e = m + 1;
    } else if (t.is("if") || t.is("for") || t.is("while") || t.is("switch")) {
      size_t po = next(s + 1, e);
      if (po >= e || !toks_[po].is("(")) cannot("cannot read a control statement");
      size_t pc = match(po, e);
      it.cb = po + 1;
      it.ce = pc;
      it.body_b = pc + 1;
      Item body = parse_stmt(pc + 1, e);
      it.e = body.e;
      it.then_ = body.kind == Item::block ? body.then_ : std::vector<Item>{body};
      if (t.is("if")) {
        it.kind = Item::if_;
        size_t el = next(it.e, e);
        if (el < e && toks_[el].is("else")) {
          it.else_tok = el;
          Item eb = parse_stmt(el + 1, e);
          it.else_ = eb.kind == Item::block ? eb.then_ : std::vector<Item>{eb};
          it.e = eb.e;
        }
      } else if (t.is("for")) {
        it.kind = Item::for_;
      } else {
        it.kind = Item::plain;  // while / switch: never split inside
      }
    } else if (t.is("do")) {
      Item body = parse_stmt(s + 1, e);
      size_t w = next(body.e, e);
      if (w >= e || !toks_[w].is("while")) cannot("cannot read a do-while loop");
      it.kind = Item::plain;
      it.e = stmt_end(w, e);
    } else if (t.is(";")) {
      it.kind = Item::empty;
      it.e = s + 1;
    } else {
      it.kind = Item::plain;
      it.e = stmt_end(s, e);
    }
    it.sync = has_sync(it.s, it.e, &it.has_barrier);
    if (it.kind == Item::plain && it.sync) {
      size_t f = it.s;
      if (toks_[f].is("metal")) f = next(next(f + 1, it.e) + 1, it.e);
      if (toks_[f].kind == TokKind::ident && is_barrier_name(toks_[f].text)) {
        size_t po = next(f + 1, it.e);
        if (po < it.e && toks_[po].is("(")) {
          size_t pc = match(po, it.e);
          size_t sc = next(pc + 1, it.e);
          if (sc < it.e && toks_[sc].is(";") && !has_sync(po, pc)) it.kind = Item::barrier;
        }
      }
      if (it.kind == Item::plain && !it.has_barrier && !toks_[it.s].is("while") &&
          !toks_[it.s].is("switch") && !toks_[it.s].is("do"))
        it.kind = Item::simd;
    }
    return it;
  }

  // ---- declarations ----
  struct Decl {
    std::vector<std::string> names;
    bool reference = false, init = false, array = false, group = false;
  };
  // Reads a simple declaration statement [s, e) (e after ';'); names empty if it is not one.
  Decl read_decl(size_t s, size_t e) const {
    Decl d;
    size_t i = s;
    const Token& f = toks_[i];
    if (f.kind != TokKind::ident) return d;
    if (f.is("typedef") || f.is("using") || f.is("static_assert") || f.is("constexpr") ||
        f.text.starts_with("alloy_tg_t")) {
      d.group = true;
      return d;
    }
    if (keywords().count(f.text) && !f.is("const") && !f.is("auto")) return d;
    // type: [const] ident(::ident)* [<...>] {* & const}
    bool saw_type = false;
    while (i < e) {
      i = next(i, e);
      const Token& t = toks_[i];
      if (t.is("const") || t.is("volatile")) {
        ++i;
        continue;
      }
      if (t.is("constexpr") || t.is("static")) {
        d.group = t.is("constexpr");
        if (d.group) return d;
        return Decl{};
      }
      if (!saw_type) {
        if (t.kind != TokKind::ident) return Decl{};
        saw_type = true;
        ++i;
        size_t n = next(i, e);
        while (n < e && (toks_[n].is("::") || toks_[n].is("<"))) {
          if (toks_[n].is("::")) {
            i = next(n + 1, e) + 1;
          } else {
            int depth = 0;
            size_t j = n;
            for (; j < e; ++j) {
              if (toks_[j].is("<")) ++depth;
              if (toks_[j].is(">")) --depth;
              if (toks_[j].is(">>")) depth -= 2;
              if (toks_[j].is(";") || toks_[j].is("{")) return Decl{};
              if (depth <= 0) break;
            }
            i = j + 1;
          }
          n = next(i, e);
        }
        continue;
      }
      if (t.is("*") || t.is("&") || t.is("&&")) {
        if (!t.is("*")) d.reference = true;
        ++i;
        continue;
      }
      break;
    }
    // declarators
    size_t j = next(i, e);
    while (j < e) {
      // A later "declarator" that does not read as one: the comma was inside the initialiser
      // (template arguments), so the names so far are all.
      bool later = !d.names.empty();
      if (toks_[j].kind != TokKind::ident || keywords().count(toks_[j].text))
        return later ? d : Decl{};
      size_t n = next(j + 1, e);
      if (n >= e) return later ? d : Decl{};
      if (!(toks_[n].is("=") || toks_[n].is(";") || toks_[n].is(",") || toks_[n].is("[") ||
            toks_[n].is("{") || toks_[n].is("(")))
        return later ? d : Decl{};
      d.names.push_back(toks_[j].text);
      if (toks_[n].is("[")) d.array = true;
      // skip to the next top-level ',' or ';'
      size_t k = n;
      for (; k < e; ++k) {
        if (toks_[k].is("=") || toks_[k].is("{") || toks_[k].is("(")) d.init = true;
        if (toks_[k].is("(") || toks_[k].is("[") || toks_[k].is("{")) {
          k = match(k, e);
          continue;
        }
        if (toks_[k].is(",") || toks_[k].is(";")) break;
      }
      if (k >= e || toks_[k].is(";")) break;
      j = next(k + 1, e);
      // `*`/`&` of a later declarator
      while (j < e && (toks_[j].is("*") || toks_[j].is("&"))) {
        if (toks_[j].is("&")) d.reference = true;
        j = next(j + 1, e);
      }
    }
    return d;
  }

  static bool scalar_type_name(std::string_view s) {
    static const std::set<std::string, std::less<>>& k = *new std::set<std::string, std::less<>>(
        {"uint",    "int",      "ushort",  "short",    "uchar",    "char",     "ulong",
         "long",    "size_t",   "uint8_t", "int8_t",   "uint16_t", "int16_t",  "uint32_t",
         "int32_t", "uint64_t", "int64_t", "unsigned", "signed",   "ptrdiff_t"});
    return k.count(s) > 0;
  }
  static bool cast_name(std::string_view s) {
    return scalar_type_name(s) || s == "float" || s == "half" || s == "bool";
  }

  // [b, e) is free of side effects and memory reads other than const buffer subscripts, calls
  // only conversions, and every name in it is in `ok` (a test per name). Division by a
  // non-literal is refused when `div_literal` (an expression evaluated for more threads than
  // before must not trap).
  template <class Ok>
  bool pure(size_t b, size_t e, Ok ok, bool div_literal, std::set<std::string>* names) const {
    for (size_t i = b; i < e; ++i) {
      const auto& t = toks_[i];
      if (t.trivia()) continue;
      if (t.kind == TokKind::preproc) return false;
      if (t.kind == TokKind::ident) {
        size_t p = prev(i);
        if (p != npos && p >= b && toks_[p].is(".")) continue;
        size_t n = next(i + 1, e);
        if (n < e && toks_[n].is("(")) {
          if (!cast_name(t.text)) return false;
          continue;
        }
        if (t.text == "true" || t.text == "false" || cast_name(t.text)) continue;
        if (keywords().count(t.text)) return false;
        if (!ok(t.text)) return false;
        if (names) names->insert(t.text);
        continue;
      }
      if (t.kind != TokKind::punct) continue;
      if (assign_op(t.text) || t.is("->") || t.is(",") || t.is("{") || t.is(";")) return false;
      if (t.is("[")) {
        size_t p = prev(i);
        if (p == npos || p < b || !const_buffers_.count(toks_[p].text)) return false;
      }
      if (t.is("*")) {
        size_t p = prev(i);
        if (p == npos || p < b ||
            !(toks_[p].kind == TokKind::ident || toks_[p].kind == TokKind::number ||
              toks_[p].is(")") || toks_[p].is("]")))
          return false;
      }
      if (div_literal && (t.is("/") || t.is("%"))) {
        size_t n = next(i + 1, e);
        if (n >= e || toks_[n].kind != TokKind::number) return false;
      }
    }
    return true;
  }

  // A declaration each region can recompute: one scalar or pointer name, never assigned again,
  // initialised from uniform values, thread attributes and other such names by arithmetic.
  bool remat_decl(const Item& it, const Decl& d, std::set<std::string>& deps) const {
    if (d.names.size() != 1 || d.reference || d.array || !d.init) return false;
    const std::string& name = d.names[0];
    if (assign_count(name) != 1 || changed_otherwise(name, it.e, declares_pointer(it, name)))
      return false;
    size_t i = it.s;
    while (i < it.e && !(toks_[i].kind == TokKind::ident && toks_[i].text == name)) ++i;
    i = next(i + 1, it.e);
    if (i >= it.e || !toks_[i].is("=")) return false;
    for (size_t j = it.s; j < i; ++j)  // no storage class or qualifier other than const
      if (toks_[j].is("static") || toks_[j].is("volatile") || toks_[j].is("threadgroup"))
        return false;
    return pure(
        i + 1, it.e - 1,
        [&](const std::string& n) {
          if (n == name) return false;
          return uniform_.count(n) || varying_attrs_.count(n) || remat_names_.count(n) ||
                 (!locals_.count(n) && is_uniform_name(n));
        },
        true, &deps);
  }

  // ---- emission ----
  std::vector<Hoisted> in_scope() const {
    std::vector<Hoisted> v;
    for (auto& s : scopes_) v.insert(v.end(), s.begin(), s.end());
    return v;
  }
  bool used_after(const std::string& name, size_t from) const {
    for (size_t i = from; i < toks_.size(); ++i)
      if (toks_[i].kind == TokKind::ident && toks_[i].text == name) return true;
    return false;
  }
  // Whether code that runs after a region whose last token is `last` may read the value the
  // region leaves in per-thread value `name` (close_region stores it back only then). Code after
  // `last` reads it only by naming it (matched by name: a shadowing declaration counts as a
  // read); inside a group-level loop whose body holds regions, the next iteration runs the
  // code from the outermost such loop's start again. A macro of the source may read any name
  // without naming it, and an unknown #include may define such macros: with either, every
  // value is read later.
  bool read_later(const std::string& name, const Region& r) const {
    if (macros_all_ || macro_used_) return true;
    if (!loop_starts_.empty()) return used_after(name, loop_starts_.front());
    return !overwritten(name, r.last, r.publishes);
  }
  // Outside loops of regions: whether the value `name` holds at token `from` is never read, i.e.
  // the next token naming it is the start of a statement directly in the kernel body (run by
  // every thread that gets there, once) that assigns it with `=` and whose right-hand side does
  // not name it, or no later token names it. Names inside the operands of simd folds
  // (`x = simd_sum(x);`) do not count where `folded` is that statement's first token: those
  // operands were read by the region that published them (simd_exchange), the statement's
  // assignment runs in the next.
  bool overwritten(const std::string& name, size_t from, size_t folded) const {
    for (size_t i = from; i < toks_.size(); ++i) {
      if (toks_[i].kind != TokKind::ident || toks_[i].text != name) continue;
      auto st = top_stmts_.find(i);
      if (st == top_stmts_.end()) return false;
      const size_t e = st->second.first;
      const size_t a = next(i + 1, e);
      if (a >= e || !toks_[a].is("=")) return false;
      // The simd calls of the right-hand side, and whether each is a one-operand fold (then
      // simd_exchange reads the operands before the statement's region; any other simd call is
      // evaluated again where the statement runs).
      std::vector<std::pair<size_t, size_t>> calls;
      bool folds = st->second.second && folded == i;
      for (size_t j = a + 1; j < e; ++j) {
        if (toks_[j].kind != TokKind::ident || !is_sync_name(toks_[j].text) ||
            is_simd_type(toks_[j].text))
          continue;
        const size_t po = next(j + 1, e);
        if (po >= e || !toks_[po].is("(")) return false;
        const size_t pc = match(po, e);
        if (!fold_op(toks_[j].text)) folds = false;
        for (size_t k = po + 1; k < pc; ++k) {
          if (toks_[k].is("(") || toks_[k].is("[") || toks_[k].is("{")) {
            k = match(k, pc);
            continue;
          }
          if (toks_[k].is(",")) folds = false;
        }
        calls.push_back({po, pc});
        j = pc;
      }
      for (size_t j = a + 1; j < e; ++j) {
        if (toks_[j].kind != TokKind::ident || toks_[j].text != name) continue;
        bool operand = false;
        for (auto& c : calls) operand = operand || (j > c.first && j < c.second);
        if (!(operand && folds)) return false;
      }
      return true;
    }
    return true;
  }
  void idents(size_t b, size_t e, std::set<std::string>& out) const {
    for (size_t i = b; i < e; ++i)
      if (toks_[i].kind == TokKind::ident) out.insert(toks_[i].text);
  }
  // The names of [b, e) the statements may change, conservatively: a name counts as only read
  // where the token after it is one of a few operators or closing tokens that cannot make it an
  // lvalue being written (`x;`, `x)`, `x]`, `x + ...`, `x < ...`), and the token before it is
  // no `++`/`--`, `&`, `(`/`,` (an argument: a reference parameter), `.`/`->`/`::`, or `?`/`:`.
  // Any `&` or `&&` in the range (a reference or pointer bound to a name, a lambda capturing by
  // reference) makes every name of the range count as changed. A hoisted name the region does
  // not change is not stored back to its per-thread array at the region's end (a store per
  // thread and per interchanged loop step otherwise: close_region).
  void writes(size_t b, size_t e, std::set<std::string>& out) const {
    static const std::set<std::string_view>& kReadNext = *new std::set<std::string_view>(
        {";", ")", "]", "+", "-", "*", "/", "%", "<", ">", "<=", ">=", "==", "!=", "||", "^", "|"});
    static const std::set<std::string_view>& kWritePrev =
        *new std::set<std::string_view>({"++", "--", "&", "(", ",", ".", "->", "::", "?", ":"});
    bool any_ref = false;
    for (size_t i = b; i < e; ++i)
      if (toks_[i].kind == TokKind::punct && (toks_[i].text == "&" || toks_[i].text == "&&"))
        any_ref = true;
    for (size_t i = b; i < e; ++i) {
      if (toks_[i].kind != TokKind::ident) continue;
      // A macro of the source may read and change any name: "*" (close_region loads and stores
      // every value in scope); an unknown #include may define macros: "+" (every value the
      // region names is stored back).
      if (macros_.count(toks_[i].text)) out.insert("*");
      if (macros_all_) out.insert("+");
      size_t n = next(i + 1, e), p = prev(i);
      bool read =
          !any_ref && n < e && toks_[n].kind == TokKind::punct && kReadNext.count(toks_[n].text) &&
          !(p != npos && toks_[p].kind == TokKind::punct && kWritePrev.count(toks_[p].text));
      if (!read) out.insert(toks_[i].text);
    }
  }
  // idents() of a range of the open region's code, and the names it may change.
  void region_idents(size_t b, size_t e) {
    rg_.lo = std::min(rg_.lo, b);
    idents(b, e, rg_.idents);
    writes(b, e, rg_.written);
  }

  void open_region(const std::string& mask) {
    if (rg_.open) return;
    rg_ = Region{};
    rg_.open = true;
    rg_.mask = mask;
  }

  // `return;` -> the thread ends (split regions skip it from then on).
  // A name whose value the host compiler knows: a constexpr of the body, or a name that is
  // neither a kernel parameter nor a local nor a thread attribute (a template parameter or a
  // program-scope constant).
  bool compile_time_name(const std::string& n) const {
    if (constexpr_names_.count(n)) return true;
    if (locals_.count(n) || varying_attrs_.count(n) || !is_uniform_name(n)) return false;
    for (auto& p : params_)
      if (p.name == n) return false;
    return true;
  }
  // `for (T v = A; v OP B; ++v / v++ / v += C)` with A, B, C made of literals and compile-time
  // names: a trip count g++ knows.
  bool constant_trip_for(size_t f, size_t e) const {
    size_t po = next(f + 1, e);
    if (po >= e || !toks_[po].is("(")) return false;
    std::vector<size_t> semis;
    size_t pc = npos;
    int depth = 0;
    for (size_t j = po; j < e; ++j) {
      if (toks_[j].is("(")) ++depth;
      if (toks_[j].is(")") && --depth == 0) {
        pc = j;
        break;
      }
      if (depth == 1 && toks_[j].is(";")) semis.push_back(j);
    }
    if (pc == npos || semis.size() != 2) return false;
    size_t eq = po + 1;
    while (eq < semis[0] && !toks_[eq].is("=")) ++eq;
    size_t v = prev(eq);
    if (eq >= semis[0] || v == npos || v <= po || toks_[v].kind != TokKind::ident) return false;
    const std::string& var = toks_[v].text;
    for (size_t j = po + 1; j < pc; ++j) {
      const Token& t = toks_[j];
      if (t.trivia() || j == v || t.kind == TokKind::number) continue;
      if (t.kind == TokKind::ident) {
        if (t.text == var || (j < eq && scalar_type_name(t.text)) || compile_time_name(t.text))
          continue;
        return false;
      }
      if (t.kind != TokKind::punct || t.is("[") || t.is("->") || t.is(".") || t.is("(") ||
          t.is(")") || t.is(","))
        return false;
    }
    return true;
  }

  // The top-level semicolons of a `for` header (it.cb .. it.ce): two in a well-formed one.
  std::vector<size_t> header_semicolons(const Item& it) const {
    std::vector<size_t> semis;
    for (size_t j = it.cb; j < it.ce; ++j) {
      if (toks_[j].is("(") || toks_[j].is("[") || toks_[j].is("{")) {
        j = match(j, it.ce);
        continue;
      }
      if (toks_[j].is(";")) semis.push_back(j);
    }
    return semis;
  }

  // A non-negative integer literal below 2^31 (decimal, hex or octal, with u/U/l/L suffixes).
  static bool int_literal(const Token& t, long long& v) {
    if (t.kind != TokKind::number || t.text.empty() ||
        !std::isdigit(static_cast<unsigned char>(t.text[0])))
      return false;
    char* end = nullptr;
    errno = 0;
    unsigned long long u = std::strtoull(t.text.c_str(), &end, 0);
    for (const char* p = end; *p; ++p)
      if (!std::strchr("uUlL", *p)) return false;  // a float literal, or digits strtoull left
    if (errno != 0 || u > 0x7fffffffull) return false;
    v = static_cast<long long>(u);
    return true;
  }
  // `for (T v = A; v < B; ++v)` (also `v++`, `v += C`, `<=`, `!=`) with integer literals A, B,
  // C (C > 0) and at most kMaxUnrolledTrips iterations, and no other loop in its body: such a
  // loop stays inside its region, where it is unrolled completely (region_text), instead of
  // being interchanged into one region per iteration. Unrolled, the region's thread loop is
  // innermost and vectorises across threads, with the body's values in registers; one region
  // per iteration pays the region's loop and the per-thread copies of its values every
  // iteration (a tiled matmul's `for (j = 0; j < 16; ++j) acc += as[y][j] * bs[j][x];`).
  static constexpr long long kMaxUnrolledTrips = 16;
  bool small_constant_loop(const Item& it) const {
    std::vector<size_t> semis = header_semicolons(it);
    if (semis.size() != 2) return false;
    std::vector<size_t> init, cond, inc;
    for (size_t j = it.cb; j < semis[0]; ++j)
      if (!toks_[j].trivia()) init.push_back(j);
    for (size_t j = semis[0] + 1; j < semis[1]; ++j)
      if (!toks_[j].trivia()) cond.push_back(j);
    for (size_t j = semis[1] + 1; j < it.ce; ++j)
      if (!toks_[j].trivia()) inc.push_back(j);
    // init: [type words...] v = A
    if (init.size() < 3 || !toks_[init[init.size() - 2]].is("=")) return false;
    const Token& vt = toks_[init[init.size() - 3]];
    if (vt.kind != TokKind::ident) return false;
    if (init.size() == 3) return false;  // no declaration: the variable outlives the loop
    for (size_t k = 0; k + 3 < init.size(); ++k)
      if (!scalar_type_name(toks_[init[k]].text) && !toks_[init[k]].is("unsigned") &&
          !toks_[init[k]].is("signed") && !toks_[init[k]].is("const"))
        return false;
    long long a = 0, b = 0, c = 1;
    if (!int_literal(toks_[init.back()], a)) return false;
    // cond: v < B, v <= B, v != B
    if (cond.size() != 3 || toks_[cond[0]].text != vt.text || !int_literal(toks_[cond[2]], b))
      return false;
    const Token& op = toks_[cond[1]];
    if (!op.is("<") && !op.is("<=") && !op.is("!=")) return false;
    // inc: ++v, v++, v += C
    const std::string& v = vt.text;
    const bool inc_ok =
        (inc.size() == 2 && ((toks_[inc[0]].is("++") && toks_[inc[1]].text == v) ||
                             (toks_[inc[0]].text == v && toks_[inc[1]].is("++")))) ||
        (inc.size() == 3 && toks_[inc[0]].text == v && toks_[inc[1]].is("+=") &&
         int_literal(toks_[inc[2]], c) && c > 0);
    if (!inc_ok) return false;
    long long end = op.is("<=") ? b + 1 : b;
    if (op.is("!=") && (end < a || (end - a) % c != 0)) return false;
    long long trips = end > a ? (end - a + c - 1) / c : 0;
    if (trips > kMaxUnrolledTrips) return false;
    if (assign_count(v, it.body_b, it.e) != 0) return false;
    for (size_t j = it.body_b; j < it.e; ++j)
      if (toks_[j].is("for") || toks_[j].is("while") || toks_[j].is("do") || toks_[j].is("goto"))
        return false;
    return true;
  }

  std::string region_text(size_t b, size_t e, int id) {
    std::string s;
    for (size_t i = b; i < e; ++i) {
      // Loops with a known trip count left inside a region (e.g. over a per-thread array) are
      // unrolled, so that the region's thread loop is the innermost loop and vectorises across
      // threads; g++ -O2 does not unroll them where that grows the code.
      if (toks_[i].is("for") && constant_trip_for(i, e)) s += "_Pragma(\"GCC unroll 16\") ";
      if (toks_[i].kind == TokKind::ident && toks_[i].text == "return") {
        size_t n = next(i + 1, e);
        if (n >= e || !toks_[n].is(";")) cannot("return with a value");
        s += fmt::format("{{ alloy_S.kill(alloy_t.lid); goto alloy_dead{}; }}", id);
        rg_.has_return = true;
        if (!flat_text_) s += newlines(text(i + 1, n + 1));
        i = n;
        continue;
      }
      if (flat_text_) {
        if (toks_[i].kind == TokKind::preproc) cannot("a preprocessor line inside a statement");
        if (toks_[i].kind == TokKind::comment) {
          s += ' ';
          continue;
        }
        for (char c : toks_[i].text) s += c == '\n' ? ' ' : c;
        continue;
      }
      s += toks_[i].text;
    }
    return s;
  }

  void check_jumps(size_t b, size_t e) const {
    if (!jumps_stay(b, e)) cannot("break/continue across a barrier or simd function");
  }
  // No break/continue in [b, e) leaves it (each is inside a loop or switch of the range).
  bool jumps_stay(size_t b, size_t e) const {
    // break/continue not inside a loop or switch of the same region would leave the region.
    std::vector<int> depth_stack;
    int loops = 0;
    std::vector<std::pair<size_t, int>> ends;  // (token index where a loop body ends, loops)
    for (size_t i = b; i < e; ++i) {
      while (!ends.empty() && i >= ends.back().first) {
        --loops;
        ends.pop_back();
      }
      const Token& t = toks_[i];
      if (t.is("for") || t.is("while") || t.is("switch") || t.is("do")) {
        // body extent: conservatively the rest of the enclosing statement
        size_t end = e;
        size_t po = next(i + 1, e);
        if (!t.is("do") && po < e && toks_[po].is("(")) {
          size_t pc = match(po, e);
          size_t bb = next(pc + 1, e);
          if (bb < e && toks_[bb].is("{")) end = match(bb, e) + 1;
          if (t.is("while")) {
            size_t pp = prev(i);
            if (pp != npos && toks_[pp].is("}")) end = i;  // the `while` of a do-while
          }
        } else if (t.is("do")) {
          size_t bb = next(i + 1, e);
          if (bb < e && toks_[bb].is("{")) end = match(bb, e) + 1;
        }
        ++loops;
        ends.push_back({end, loops});
      }
      if ((t.is("break") || t.is("continue")) && loops == 0) return false;
    }
    return true;
  }

  void add_stmt(const Item& it, const std::string& mask) {
    open_region(mask);
    check_jumps(it.s, it.e);
    Decl d = read_decl(it.s, it.e);
    if (!d.names.empty()) {
      if (d.reference) {
        for (auto& n : d.names)
          if (used_after(n, it.e)) cannot("a reference variable used across a barrier");
      }
      rg_.decls.push_back(flat(it.s, it.e));
      for (auto& n : d.names) rg_.declared.push_back(n);
      if (d.array) array_names_.insert(d.names.begin(), d.names.end());
      std::set<std::string> deps;
      if (remat_decl(it, d, deps)) {
        rg_.remat[d.names[0]] = {flat(it.s, it.e), deps};
        remat_names_.insert(d.names[0]);
      }
    }
    if (rg_.first == npos) rg_.first = it.b;
    if (rg_.versionable) version_stmt(it);
    rg_.items.push_back({it.s, it.e});
    rg_.stmts += region_text(it.b, it.e, region_id_);
    region_idents(it.b, it.e);
    rg_.last = it.e;
  }

  // Versioned regions (2026-11-29): a buffer subscript such as `a[gid.y * K + t + lid.x]` is
  // 32-bit unsigned arithmetic that may wrap, so g++ cannot tell that consecutive threads read
  // consecutive elements and loads them one by one. For each subscript of a buffer parameter in
  // [it.s, it.e) that depends on the thread and that the region's header can evaluate (pure,
  // names visible where the region starts: thread attributes, recomputed declarations of earlier
  // regions, uniform names and parameters; no subscript, shift or call inside), its check goes
  // to rg_.far (index_far of the subscript, index_part of each term of a top-level sum); the
  // statement also goes, on one line, to rg_.fast. close_region emits both copies.
  void version_stmt(const Item& it) {
    for (size_t i = it.s; i < it.e; ++i)
      if (toks_[i].kind == TokKind::preproc) {
        rg_.versionable = false;
        return;
      }
    bool saved = flat_text_;
    flat_text_ = true;
    rg_.fast += region_text(it.b, it.e, region_id_);
    flat_text_ = saved;
    auto scope = in_scope();
    for (size_t i = it.s; i < it.e; ++i) {
      if (!toks_[i].is("[") || rg_.far.size() >= kMaxVersionedSubscripts) continue;
      size_t p = prev(i);
      if (p == npos || toks_[p].kind != TokKind::ident) continue;
      bool buffer = false;
      for (auto& prm : params_)
        if (prm.kind == ParamKind::buffer && prm.is_pointer && prm.name == toks_[p].text)
          buffer = true;
      size_t pp = prev(p);
      if (!buffer || (pp != npos && (toks_[pp].is(".") || toks_[pp].is("->")))) continue;
      size_t close = match(i, it.e);
      bool simple = true, thread = false;
      for (size_t j = i + 1; j < close; ++j)
        if (toks_[j].is("[") || toks_[j].is("<<") || toks_[j].is(">>") || toks_[j].is("?"))
          simple = false;
      auto visible = [&](const std::string& n) {
        for (size_t j = rg_.first; j < i; ++j)
          if (toks_[j].kind == TokKind::ident && toks_[j].text == n && decl_pos_.count(j))
            return false;  // declared inside the region: not visible in its header
        if (varying_attrs_.count(n)) {
          thread = true;
          return true;
        }
        if (assigned_params_.count(n)) return false;
        for (size_t k = scope.size(); k-- > 0;)
          if (scope[k].name == n) {
            if (scope[k].slot >= 0) return false;  // a stored per-thread value
            thread = true;
            return true;
          }
        if (uniform_.count(n)) return true;
        return !locals_.count(n) && is_uniform_name(n);
      };
      if (simple && pure(i + 1, close, visible, true, nullptr) && thread) {
        auto add = [&](const std::string& c) {
          if (std::find(rg_.far.begin(), rg_.far.end(), c) == rg_.far.end()) rg_.far.push_back(c);
        };
        add(fmt::format("::alloy_split::index_far({})", flat(i + 1, close)));
        // Each term of a top-level sum, where nothing binds looser than `+` at that level.
        std::vector<size_t> plus;
        bool sum = true;
        int depth = 0;
        for (size_t j = i + 1; j < close; ++j) {
          const Token& t = toks_[j];
          if (t.is("(") || t.is("[")) ++depth;
          if (t.is(")") || t.is("]")) --depth;
          if (depth != 0 || t.kind != TokKind::punct) continue;
          if (t.is("+"))
            plus.push_back(j);
          else if (!(t.is("*") || t.is("/") || t.is("%") || t.is(".") || t.is(")") || t.is("]")))
            sum = false;
        }
        if (sum && !plus.empty()) {
          plus.push_back(close);
          size_t from = i + 1;
          for (size_t j : plus) {
            if (next(from, j) < j) add(fmt::format("::alloy_split::index_part({})", flat(from, j)));
            from = j + 1;
          }
        }
      }
      i = close;
    }
  }

  // Whether [b, e) is `P.x` or `P` for an attribute parameter P that is the thread's position in
  // its threadgroup (a scalar parameter is the x component).
  bool local_x(size_t b, size_t e) const {
    b = next(b, e);
    if (b >= e || toks_[b].kind != TokKind::ident) return false;
    const KernelParam* p = nullptr;
    for (auto& prm : params_)
      if (prm.kind == ParamKind::attribute && prm.name == toks_[b].text &&
          prm.attribute == "thread_position_in_threadgroup")
        p = &prm;
    if (!p) return false;
    size_t d = next(b + 1, e);
    if (d >= e) return p->type.find_first_of("234") == npos;
    if (!toks_[d].is(".")) return false;
    size_t m = next(d + 1, e);
    return m < e && toks_[m].is("x") && next(m + 1, e) >= e;
  }
  // A region whose statements only compute values for a last `if (X == 0) ...` (X: the thread's
  // x position in its group, or a name declared once as it), that stores nothing back and runs
  // no other generated code: only the first thread of each x row can have an effect (the
  // `if (lane == 0) out[row] = sum;` after a simd_sum). Every other statement is `N = E;` or
  // `T N = E;` with E free of side effects (pure), or the consumed assignment of simd folds
  // (`N = simd_sum(...);`). close_region runs it for those threads alone (cpu_region_x0).
  bool first_x_region(const Region& r, const std::string& out) const {
    if (r.other || r.items.empty() || !out.empty() || !r.tail.empty() || !r.extra.empty() ||
        r.has_return || r.head.find("alloy_S.") != npos)
      return false;
    // Assigned names must be the thread's own: declared in the region, or a per-thread value (a
    // kernel parameter, a threadgroup variable or anything else may be memory other threads
    // see).
    std::set<std::string> own(r.declared.begin(), r.declared.end());
    for (auto& h : in_scope())
      if (h.slot >= 0 && !assigned_params_.count(h.name)) own.insert(h.name);
    for (size_t k = 0; k + 1 < r.items.size(); ++k) {
      auto [b, e] = r.items[k];
      if (e <= b || !toks_[e - 1].is(";")) return false;
      size_t eq = b;
      while (eq < e && !toks_[eq].is("=")) ++eq;
      if (eq >= e) return false;
      Decl d = read_decl(b, e);
      if (!d.names.empty()) {
        if (d.names.size() != 1 || d.reference || d.array || d.group) return false;
        for (size_t j = b; j < eq; ++j)
          if (toks_[j].is("static") || toks_[j].is("threadgroup") ||
              toks_[j].text.starts_with("alloy_tg"))
            return false;
      } else {
        size_t n = next(b, e);
        if (toks_[n].kind != TokKind::ident || next(n + 1, e) != eq || !own.count(toks_[n].text))
          return false;
      }
      if (b == r.consumes) {
        size_t f = next(eq + 1, e);
        if (f < e && toks_[f].is("metal")) f = next(next(f + 1, e) + 1, e);
        if (f >= e || !fold_op(toks_[f].text)) return false;
        size_t po = next(f + 1, e);
        if (po >= e || !toks_[po].is("(") || next(match(po, e) + 1, e) != e - 1) return false;
        continue;
      }
      if (!pure(
              eq + 1, e - 1, [](const std::string&) { return true; }, false, nullptr))
        return false;
    }
    auto [b, e] = r.items.back();
    if (!toks_[b].is("if")) return false;
    size_t po = next(b + 1, e);
    if (po >= e || !toks_[po].is("(")) return false;
    size_t pc = match(po, e);
    for (size_t j = pc + 1; j < e; ++j)
      if (toks_[j].is("else")) return false;
    size_t op = po + 1;
    while (op < pc && !toks_[op].is("==")) ++op;
    size_t z = next(op + 1, pc);
    if (op >= pc || z >= pc || next(z + 1, pc) < pc || toks_[z].kind != TokKind::number ||
        std::strtoull(toks_[z].text.c_str(), nullptr, 0) != 0 ||
        toks_[z].text.find_first_of(".eEpP") != npos)
      return false;
    if (local_x(po + 1, op)) return true;
    // A name declared once, as `T X = P.x;`, and never changed.
    size_t x = next(po + 1, op);
    if (x >= op || toks_[x].kind != TokKind::ident || next(x + 1, op) != op ||
        !remat_names_.count(toks_[x].text))
      return false;
    const std::string& name = toks_[x].text;
    size_t decl = npos;
    for (size_t p : decl_pos_)
      if (toks_[p].text == name) {
        if (decl != npos) return false;
        decl = p;
      }
    if (decl == npos) return false;
    size_t deq = next(decl + 1, toks_.size());
    if (deq >= toks_.size() || !toks_[deq].is("=")) return false;
    size_t end = deq + 1;
    while (end < toks_.size() && !toks_[end].is(";")) ++end;
    return end < toks_.size() && local_x(deq + 1, end);
  }

  void close_region() {
    if (!rg_.open) return;
    Region r = std::move(rg_);
    rg_ = Region{};
    int id = region_id_++;
    std::string code = r.pre;
    // Hoist what this region declares and later code reads (recomputed declarations need no
    // storage).
    std::vector<std::pair<std::string, int>> hoist;
    std::vector<Hoisted> remats;
    // A recomputed declaration needs what it reads: names of this region it depends on are
    // hoisted with it.
    std::set<std::string> needed;
    for (size_t k = r.declared.size(); k-- > 0;) {
      const std::string& n = r.declared[k];
      if (!needed.count(n) && !used_after(n, r.last)) continue;
      needed.insert(n);
      auto rm = r.remat.find(n);
      if (rm != r.remat.end()) needed.insert(rm->second.second.begin(), rm->second.second.end());
    }
    for (auto& n : r.declared) {
      if (!needed.count(n)) continue;
      auto rm = r.remat.find(n);
      if (rm != r.remat.end())
        remats.push_back({n, -1, rm->second.first, rm->second.second});
      else
        hoist.push_back({n, slot_++});
    }
    auto scope = in_scope();
    // Names the region reads, with what the recomputed declarations among them read.
    std::set<std::string> used = r.idents;
    if (r.written.count("*"))  // a macro: it may use any value in scope
      for (auto& h : in_scope()) used.insert(h.name);
    for (size_t k = scope.size(); k-- > 0;)
      if (scope[k].slot < 0 && used.count(scope[k].name))
        used.insert(scope[k].deps.begin(), scope[k].deps.end());
    if (!hoist.empty() || !r.extra.empty()) {
      std::string rebind, tags;
      std::set<std::string> hoisted_names;
      for (auto& h : scope) {
        if (!hoisted_names.insert(h.name).second) continue;
        if (h.slot < 0)
          rebind += h.remat + " ";
        else
          rebind += fmt::format("auto& {} = alloy_h{}[0]; ", h.name, h.slot);
      }
      for (size_t k = 0; k < hoist.size(); ++k)
        tags += fmt::format("{}decltype({})", k ? ", " : "", hoist[k].first);
      for (size_t k = 0; k < r.extra.size(); ++k)
        tags += fmt::format("{}{}", hoist.empty() && k == 0 ? "" : ", ", r.extra[k].second);
      std::string decls;
      for (auto& d : r.decls) decls += d + " ";
      code += fmt::format(
          "using alloy_P{} = decltype([&] {{ {} {{ {} {} return ::alloy_split::types<{}>{{}}; }} "
          "}}());",
          id, rebind, r.probe, decls, tags);
      for (size_t k = 0; k < hoist.size(); ++k) {
        int s = hoist[k].second;
        code += fmt::format(
            "using alloy_T{0} = ::alloy_split::elem_t<alloy_P{1}, {2}>; alloy_T{0}* alloy_h{0} = "
            "alloy_S.storage<alloy_T{0}>({0});",
            s, id, k);
      }
      for (size_t k = 0; k < r.extra.size(); ++k)
        code += fmt::format(
            "using alloy_T{0} = ::alloy_split::elem_t<alloy_P{1}, {2}>; alloy_T{0}* alloy_h{0} = "
            "alloy_S.storage<alloy_T{0}>({0});",
            r.extra[k].first, id, hoist.size() + k);
    }
    std::string attrs;
    for (auto& p : params_)
      if (p.kind == ParamKind::attribute && varying_attrs_.count(p.name) && used.count(p.name))
        attrs +=
            fmt::format("{}{} {} = alloy_t.{}();", p.type.find("const") == npos ? "const " : "",
                        p.type, p.name, p.attribute);
    std::string in, out;
    for (auto& h : scope) {
      if (!used.count(h.name)) continue;
      if (h.slot < 0) {
        in += h.remat;
        continue;
      }
      // Not loaded where the region overwrites it before reading it (`acc = simd_sum(acc);`
      // consumed); earlier regions then did not store it either (read_later).
      if (!macros_all_ && !macro_used_ && loop_starts_.empty() && r.lo != npos &&
          overwritten(h.name, r.lo, r.consumes))
        in += fmt::format("alloy_T{0} {1};", h.slot, h.name);
      else
        in += fmt::format("alloy_T{0} {1}; ::alloy_split::copy({1}, alloy_h{0}[alloy_t.li]);",
                          h.slot, h.name);
      if ((r.written.count(h.name) || r.written.count("*") || r.written.count("+") ||
           array_names_.count(h.name)) &&
          read_later(h.name, r))
        out += fmt::format("::alloy_split::copy(alloy_h{0}[alloy_t.li], {1});", h.slot, h.name);
    }
    for (auto& h : hoist)
      if (read_later(h.first, r))
        out += fmt::format("::alloy_split::copy(alloy_h{0}[alloy_t.li], {1});", h.second, h.first);
    // The statements keep their newlines; everything generated stays on their lines.
    std::string tail = fmt::format("{}{} }}", r.tail, out);
    if (r.has_return) tail += fmt::format(" return; alloy_dead{}:; ", id);
    tail += "});";
    if (first_x_region(r, out)) {
      code += fmt::format(
          "::alloy_entry::cpu_region_x0(alloy_S, {}, [&](const ::alloy_entry::thread_ids& "
          "alloy_t) ALLOY_CPU_INLINE_LAMBDA {{ {}{} {{ {}",
          r.mask, attrs, in, r.head);
    } else if (r.versionable && !r.far.empty() && r.head.empty() && r.tail.empty()) {
      // Versioned (version_stmt, alloy_entry::cpu_region_v): the check, the copy run where it
      // holds (on one line), then the region as it was.
      std::string far = "false";
      for (auto& f : r.far) far += " | " + f;
      code += fmt::format(
          "::alloy_entry::cpu_region_v(alloy_S, {0}, [&](const ::alloy_entry::thread_ids& "
          "alloy_t) ALLOY_CPU_INLINE_LAMBDA -> bool {{ {1}{2} return {3}; }}, [&](const "
          "::alloy_entry::thread_ids& alloy_t) ALLOY_CPU_INLINE_LAMBDA {{ {1}{2} {{ {4}{5} }}{6} "
          "}}, [&](const ::alloy_entry::thread_ids& alloy_t) ALLOY_CPU_INLINE_LAMBDA {{ {1}{2} {{ ",
          r.mask, attrs, in, far, r.fast, out,
          r.has_return ? fmt::format(" return; alloy_dead{}:; ", id) : "");
    } else {
      code += fmt::format(
          "::alloy_entry::cpu_region(alloy_S, {}, [&](const ::alloy_entry::thread_ids& alloy_t) "
          "ALLOY_CPU_INLINE_LAMBDA {{ {}{} {{ {}",
          r.mask, attrs, in, r.head);
    }
    out_ += code + r.stmts + tail;
    for (auto& h : remats) scopes_.back().push_back(h);
    for (auto& h : hoist) scopes_.back().push_back({h.first, h.second, {}, {}});
  }

  // The simd calls of statement [s, e): (name begin, close paren) pairs, top level only.
  std::vector<std::pair<size_t, size_t>> simd_calls(size_t s, size_t e) {
    std::vector<std::pair<size_t, size_t>> calls;
    for (size_t i = s; i < e; ++i) {
      const Token& t = toks_[i];
      if (t.is("?") || t.is("&&") || t.is("||"))
        cannot("a simd function in a conditionally evaluated expression");
      if (t.is("++") || t.is("--")) cannot("side effects in a statement with simd functions");
      if (t.kind != TokKind::ident || !is_sync_name(t.text) || is_simd_type(t.text)) continue;
      size_t b = i;
      size_t p = prev(i);
      if (p != npos && p >= s && toks_[p].is("::")) {
        size_t q = prev(p);
        if (q != npos && q >= s && toks_[q].is("metal")) b = q;
      }
      size_t po = next(i + 1, e);
      if (po >= e || !toks_[po].is("(")) cannot("a simd function used other than by a call");
      size_t pc = match(po, e);
      if (has_sync(po, pc)) cannot("nested simd functions");
      calls.push_back({b, pc});
      i = pc;
    }
    return calls;
  }

  // The simd calls of [s, e) published at the end of the current region, a simd round, and a
  // new region whose head consumes them into alloy_r<id>_<k>. Returns the id.
  // simd_sum(x)-like calls (one operand, a fold over the active lanes): the region stores the
  // operand in a typed per-thread array, the group folds each simdgroup once, the next region
  // reads the result - plain loads and stores the host compiler can vectorise.
  static const char* fold_op(std::string_view name) {
    if (name == "simd_sum") return "op_sum";
    if (name == "simd_product") return "op_product";
    if (name == "simd_min") return "op_min";
    if (name == "simd_max") return "op_max";
    if (name == "simd_and") return "op_and";
    if (name == "simd_or") return "op_or";
    if (name == "simd_xor") return "op_xor";
    return nullptr;
  }
  // The called name and the operand range of a one-operand call, or nullptr.
  const char* fold_call(const std::pair<size_t, size_t>& c, size_t& ab, size_t& ae) const {
    size_t i = c.first;
    if (toks_[i].is("metal")) i = next(next(i + 1, c.second) + 1, c.second);
    const char* op = fold_op(toks_[i].text);
    if (!op) return nullptr;
    size_t po = next(i + 1, c.second);
    for (size_t j = po + 1; j < c.second; ++j) {
      if (toks_[j].is("(") || toks_[j].is("[") || toks_[j].is("{")) {
        j = match(j, c.second);
        continue;
      }
      if (toks_[j].is(",")) return nullptr;
    }
    ab = po + 1;
    ae = c.second;
    return op;
  }

  int simd_exchange(const std::vector<std::pair<size_t, size_t>>& calls, size_t s,
                    const std::string& mask) {
    int id = simd_id_++;
    bool folds = true;
    for (auto& c : calls) {
      size_t ab = 0, ae = 0;
      if (!fold_call(c, ab, ae)) folds = false;
    }
    if (folds) {
      open_region(mask);
      rg_.publishes = s;
      std::vector<int> lanes, results;
      std::vector<const char*> ops;
      for (auto& c : calls) {
        size_t ab = 0, ae = 0;
        ops.push_back(fold_call(c, ab, ae));
        int sl = slot_++;
        lanes.push_back(sl);
        results.push_back(slot_++);
        std::string call = flat(c.first, c.second + 1), arg = flat(ab, ae);
        rg_.extra.push_back({sl, "decltype(" + call + ")"});
        rg_.tail += fmt::format("alloy_h{0}[alloy_t.li] = alloy_T{0}({1});", sl, arg);
        region_idents(c.first, c.second + 1);
      }
      rg_.last = std::max(rg_.last, s);
      close_region();
      for (size_t k = 0; k < calls.size(); ++k)
        out_ += fmt::format(
            "alloy_T{0}* alloy_h{1} = alloy_S.storage<alloy_T{0}>({1}); "
            "alloy_S.fold(alloy_h{0}, alloy_h{1}, ::metal::alloy_detail::{2}{{}}, {3});",
            lanes[k], results[k], ops[k], mask);
      open_region(mask);
      rg_.consumes = s;
      std::string head, probe;
      for (size_t k = 0; k < calls.size(); ++k) {
        head += fmt::format("auto alloy_r{}_{} = alloy_h{}[alloy_t.li]; ", id, k, results[k]);
        probe += fmt::format("auto alloy_r{}_{} = alloy_h{}[0]; ", id, k, results[k]);
      }
      rg_.head = head;
      rg_.probe = probe;
      for (auto& c : calls) region_idents(c.first, c.second + 1);
      return id;
    }
    open_region(mask);
    std::string pub = "alloy_S.publish(alloy_t.lid); ";
    for (auto& c : calls) pub += "(void)(" + flat(c.first, c.second + 1) + "); ";
    pub += "alloy_S.lane_done(); ";
    rg_.tail += pub;
    for (auto& c : calls) region_idents(c.first, c.second + 1);
    rg_.last = std::max(rg_.last, s);  // the consume pass reads the arguments again
    close_region();
    out_ += fmt::format("alloy_S.simd_round({});", mask);
    open_region(mask);
    std::string head = "alloy_S.consume(alloy_t.lid); ", probe;
    for (size_t k = 0; k < calls.size(); ++k) {
      std::string decl =
          fmt::format("auto alloy_r{}_{} = {}; ", id, k, flat(calls[k].first, calls[k].second + 1));
      head += decl;
      probe += decl;
    }
    head += "alloy_S.lane_done(); ";
    rg_.head = head;
    rg_.probe = probe;
    for (auto& c : calls) region_idents(c.first, c.second + 1);
    return id;
  }
  // [b, e) on one line with each simd call replaced by its consumed result.
  std::string replaced_flat(size_t b, size_t e, const std::vector<std::pair<size_t, size_t>>& calls,
                            int id) const {
    std::string dt;
    size_t j = b;
    for (size_t k = 0; k < calls.size(); ++k) {
      dt += flat(j, calls[k].first) + fmt::format("alloy_r{}_{}", id, k);
      j = calls[k].second + 1;
    }
    return dt + flat(j, e);
  }

  void add_simd(const Item& it, const std::string& mask) {
    auto calls = simd_calls(it.s, it.e);
    if (calls.empty()) cannot("a simd function the splitter cannot place");
    int id = simd_exchange(calls, it.s, mask);
    // The statement with each call replaced by its result (the calls' newlines stay).
    std::string s = text(it.b, it.s);
    size_t i = it.s;
    for (size_t k = 0; k < calls.size(); ++k) {
      s += region_text(i, calls[k].first, region_id_);
      s += fmt::format("alloy_r{}_{}", id, k) + newlines(text(calls[k].first, calls[k].second + 1));
      i = calls[k].second + 1;
    }
    s += region_text(i, it.e, region_id_);
    check_jumps(it.s, it.e);
    Decl d = read_decl(it.s, it.e);
    if (!d.names.empty()) {
      if (d.reference) cannot("a reference initialised by a simd function");
      rg_.decls.push_back(replaced_flat(it.s, it.e, calls, id));
      for (auto& n : d.names) rg_.declared.push_back(n);
    }
    rg_.items.push_back({it.s, it.e});
    rg_.stmts += s;
    rg_.versionable = false;
    region_idents(it.b, it.e);
    rg_.last = it.e;
  }

  bool group_decl(const Item& it) {
    Decl d = read_decl(it.s, it.e);
    if (d.group) return true;
    if (d.names.empty() || d.reference || d.array || !d.init) return false;
    for (auto& n : d.names)
      if (assign_count(n) > 1 || changed_otherwise(n, it.e, declares_pointer(it, n))) return false;
    // initialisers: everything after the first declarator name
    size_t i = it.s;
    while (i < it.e && !(toks_[i].kind == TokKind::ident && toks_[i].text == d.names[0])) ++i;
    i = next(i + 1, it.e);
    if (i >= it.e || !toks_[i].is("=")) return false;
    if (!uniform(i + 1, it.e - 1)) return false;
    return true;
  }

  // A loop without barriers or simd functions inside a region, run with the loop outermost: a
  // group-level loop around a region per iteration, so the host compiler vectorises the
  // thread loop (contiguous across threads where each thread strides, e.g.
  // `for (uint i = lid; i < n; i += tpg)`). Threads between two barriers may run in any
  // interleaving, so the order change keeps Metal's semantics. Two forms:
  // - a threadgroup-uniform header (as the loops around barriers): the header itself;
  // - `for (T v = start; cond; v += step)` (or ++v) with an integer T, a uniform step, and a
  //   start and condition that are pure and read nothing the body changes: each thread's trip
  //   count comes from running the header alone, the group loops to the largest, iteration k
  //   gives v = start + k * step (exact: integer arithmetic wraps the same way), and threads
  //   whose trip count is reached are masked out.
  // Returns false (nothing emitted) where neither applies.
  bool interchange(const Item& it, const std::string& mask, bool pred) {
    std::vector<size_t> semis = header_semicolons(it);
    if (semis.size() != 2) return false;
    size_t ib = next(it.cb, semis[0]);
    if (ib >= semis[0]) return false;
    Decl d = read_decl(ib, semis[0] + 1);
    if (d.names.size() != 1 || d.reference || d.array || d.group) return false;
    const std::string v = d.names[0];
    size_t vi = ib;
    while (vi < semis[0] && !(toks_[vi].kind == TokKind::ident && toks_[vi].text == v)) ++vi;
    size_t eq = next(vi + 1, semis[0]);
    if (eq >= semis[0] || !toks_[eq].is("=")) return false;
    if (!jumps_stay(it.body_b, it.e)) return false;
    // A per-thread array the body uses would be copied in and out of its storage in every
    // iteration: such loops stay inside their region (as written).
    for (size_t j = it.body_b; j < it.e; ++j)
      if (toks_[j].kind == TokKind::ident && array_names_.count(toks_[j].text)) return false;
    if (assign_count(v, it.body_b, it.e) != 0) return false;
    auto untouched = [&](const std::string& n) {
      return n == v || assign_count(n, it.body_b, it.e) == 0;
    };
    // Increment: ++v, v++, v += step.
    size_t a = next(semis[1] + 1, it.ce);
    std::string step;
    size_t sb = 0, se = 0;
    if (a < it.ce && (toks_[a].is("++")) && next(a + 1, it.ce) < it.ce &&
        toks_[next(a + 1, it.ce)].text == v && next(next(a + 1, it.ce) + 1, it.ce) >= it.ce) {
      step = "1";
    } else if (a < it.ce && toks_[a].text == v) {
      size_t o = next(a + 1, it.ce);
      if (o < it.ce && toks_[o].is("++") && next(o + 1, it.ce) >= it.ce) {
        step = "1";
      } else if (o < it.ce && toks_[o].is("+=")) {
        sb = o + 1;
        se = it.ce;
        if (!uniform(sb, se) || next(sb, se) >= se) return false;
        step = flat(sb, se);
      } else {
        return false;
      }
    } else {
      return false;
    }
    bool vary = !uniform(eq + 1, semis[0]);
    if (!vary) {
      bool was = uniform_.count(v) > 0;
      uniform_.insert(v);
      vary = !uniform(semis[0] + 1, semis[1]);
      if (!was) uniform_.erase(v);
    }
    if (!vary) {
      // Uniform header: the loop runs at group level as written. Not where the variable
      // shadows a per-thread value (the regions would declare that one over it).
      for (auto& h : in_scope())
        if (h.name == v) return false;
      close_region();
      out_ += text(it.b, it.body_b) + "{";
      bool was = uniform_.count(v) > 0;
      uniform_.insert(v);
      scopes_.push_back({});
      loop_starts_.push_back(it.b);
      emit_seq(it.then_, mask, pred);
      close_region();
      loop_starts_.pop_back();
      scopes_.pop_back();
      if (!was) uniform_.erase(v);
      out_ += "}";
      return true;
    }
    // Thread-dependent start or condition.
    for (size_t j = ib; j < vi; ++j) {
      if (toks_[j].trivia()) continue;
      if (toks_[j].kind != TokKind::ident || !scalar_type_name(toks_[j].text)) return false;
    }
    std::string type = flat(ib, vi);
    auto readable = [&](const std::string& n) { return untouched(n); };
    if (!pure(eq + 1, semis[0], readable, false, nullptr)) return false;
    if (!pure(semis[0] + 1, semis[1], readable, false, nullptr)) return false;
    int n = loop_id_++;
    int tslot = slot_++, mslot = slot_++;
    // The trip count: a closed form for `v < end` / `v <= end`, else the header run alone.
    std::string count = fmt::format(
        "[&]() ALLOY_CPU_INLINE_LAMBDA -> uint32_t {{ uint32_t alloy_c = 0; for ({}) ++alloy_c; "
        "return alloy_c; }}",
        flat(it.cb, it.ce));
    std::string trip = count + "()";
    bool group_trip = false;  // uniform end: closed forms at group level over stored starts
    std::string end_text, le = "false";
    size_t c0 = next(semis[0] + 1, semis[1]);
    if (c0 < semis[1] && toks_[c0].text == v) {
      size_t c1 = next(c0 + 1, semis[1]);
      if (c1 < semis[1] && (toks_[c1].is("<") || toks_[c1].is("<=")) &&
          next(c1 + 1, semis[1]) < semis[1]) {
        end_text = flat(c1 + 1, semis[1]);
        le = toks_[c1].is("<=") ? "true" : "false";
        trip = fmt::format("::alloy_split::trip_lt<{}>({}, ({}), {}, {}, {})", type,
                           flat(eq + 1, semis[0]), end_text, step, le, count);
        group_trip = uniform(c1 + 1, semis[1]);
      }
    }
    int xslot = group_trip ? slot_++ : -1;
    open_region(mask);
    rg_.pre += fmt::format("uint32_t* alloy_trip{0} = alloy_S.storage<uint32_t>({1});", n, tslot);
    if (group_trip) {
      rg_.pre += fmt::format("{0}* alloy_x{1} = alloy_S.storage<{0}>({2});", type, n, xslot);
      rg_.other = true;
      rg_.stmts += fmt::format("alloy_x{}[alloy_t.li] = static_cast<{}>({});", n, type,
                               flat(eq + 1, semis[0]));
    } else {
      rg_.other = true;
      rg_.stmts += fmt::format("alloy_trip{}[alloy_t.li] = {};", n, trip);
    }
    rg_.last = std::max(rg_.last, it.b);  // it reads the header: later code (read_later)
    rg_.stmts += newlines(text(it.b, it.body_b));
    rg_.versionable = false;
    region_idents(it.cb, it.ce);
    close_region();
    if (group_trip) {
      out_ += fmt::format(
          "if (!::alloy_split::trips_lt(alloy_x{0}, ({1}), {2}, {3}, alloy_trip{0}, alloy_S.n, "
          "alloy_S.alive, {4})) {{",
          n, end_text, step, le, mask);
      open_region(mask);
      rg_.other = true;
      rg_.stmts += fmt::format("alloy_trip{}[alloy_t.li] = {}();", n, count);
      rg_.last = std::max(rg_.last, it.b);
      rg_.versionable = false;
      region_idents(it.cb, it.ce);
      close_region();
      out_ += "}";
    }
    // Interchanged where k * step stays small (so g++ sees `lid + k * step` as contiguous), else
    // the loop as written, inside one region.
    out_ += fmt::format(
        "uint32_t alloy_klo{0}, alloy_khi{0}; alloy_S.trip_range(alloy_trip{0}, {1}, alloy_klo{0}, "
        "alloy_khi{0}); if (::alloy_split::small_steps(alloy_khi{0}, {3})) {{ "
        "unsigned char* alloy_km{0} = alloy_S.storage<unsigned char>({2}); "
        "for (uint32_t alloy_k{0} = 0; alloy_k{0} < alloy_khi{0}; ++alloy_k{0}) {{ "
        "const unsigned char* alloy_kmask{0} = alloy_k{0} < alloy_klo{0} ? {1} : "
        "alloy_S.trip_mask(alloy_km{0}, alloy_trip{0}, alloy_k{0}, {1});",
        n, mask, mslot, step);
    std::string kmask = fmt::format("alloy_kmask{}", n);
    scopes_.push_back({});
    loop_starts_.push_back(it.b);
    open_region(kmask);
    std::string decl = fmt::format("{0} {1} = ::alloy_split::advance<{0}>({2}, {3}, alloy_k{4});",
                                   type, v, flat(eq + 1, semis[0]), step, n);
    rg_.other = true;
    rg_.stmts += decl;
    rg_.versionable = false;
    rg_.decls.push_back(decl);
    rg_.declared.push_back(v);
    std::set<std::string> deps;
    idents(eq + 1, semis[0], deps);
    if (sb) idents(sb, se, deps);
    rg_.idents.insert(deps.begin(), deps.end());
    writes(eq + 1, semis[0], rg_.written);
    if (sb) writes(sb, se, rg_.written);
    rg_.remat[v] = {decl, deps};
    rg_.last = it.body_b;
    emit_seq(it.then_, kmask, pred);
    close_region();
    loop_starts_.pop_back();
    scopes_.pop_back();
    out_ += "}} else {";
    flat_text_ = true;  // the loop's lines are counted by the interchanged form already
    add_stmt(it, mask);
    flat_text_ = false;
    close_region();
    out_ += "}";
    return true;
  }

  void emit_seq(const std::vector<Item>& items, const std::string& mask, bool pred) {
    for (const Item& it : items) {
      switch (it.kind) {
        case Item::empty:
        case Item::preproc:
          if (rg_.open) {
            if (it.kind == Item::preproc) rg_.other = true;
            rg_.stmts += text(it.b, it.e);
            // The fast copy of a versioned region leaves out `#line` and `#pragma` lines (it is
            // on one line); any other directive (`#if`) would change what it runs.
            std::string d = text(it.s, it.e);
            size_t w = d.find_first_not_of(" \t#");
            if (it.kind == Item::preproc &&
                (w == npos || !(d.compare(w, 4, "line") == 0 || d.compare(w, 6, "pragma") == 0)))
              rg_.versionable = false;
          } else {
            out_ += text(it.b, it.e);
          }
          break;
        case Item::plain:
          if (!it.sync && group_decl(it)) {
            std::string t = text(it.b, it.e);
            if (rg_.open) {
              rg_.pre += flat(it.b, it.e);
              rg_.stmts += newlines(t);
            } else {
              out_ += t;
            }
            Decl d = read_decl(it.s, it.e);
            for (auto& n : d.names) uniform_.insert(n);
            break;
          }
          if (it.sync) cannot("a barrier or simd function inside a loop or switch it cannot split");
          add_stmt(it, mask);
          break;
        case Item::barrier:
          if (pred && toks_[next(it.s, it.e)].text.find("threadgroup_barrier") != npos)
            cannot("threadgroup_barrier under thread-dependent control flow");
          close_region();
          out_ += newlines(text(it.b, it.e));
          break;
        case Item::simd:
          add_simd(it, mask);
          break;
        case Item::block:
          if (!it.sync) {
            add_stmt(it, mask);
            break;
          }
          close_region();
          out_ += text(it.b, it.s) + "{";
          scopes_.push_back({});
          emit_seq(it.then_, mask, pred);
          close_region();
          scopes_.pop_back();
          out_ += "}";
          break;
        case Item::for_: {
          if (!it.sync) {
            if (small_constant_loop(it) || !interchange(it, mask, pred)) add_stmt(it, mask);
            break;
          }
          // for (init; cond; inc) with a threadgroup-uniform header and loop variable.
          std::vector<size_t> semis = header_semicolons(it);
          if (semis.size() != 2) cannot("a range-for loop around a barrier or simd function");
          std::vector<std::string> vars;
          size_t ib = next(it.cb, semis[0]);
          if (ib < semis[0]) {
            Decl d = read_decl(ib, semis[0] + 1);
            if (d.names.empty() || d.reference)
              cannot(
                  "a loop around a barrier/simd function "
                  "whose initialisation is not a declaration");
            vars = d.names;
            size_t i = ib;
            while (i < semis[0] && toks_[i].text != d.names[0]) ++i;
            i = next(i + 1, semis[0]);
            if (i < semis[0] && toks_[i].is("=")) ++i;
            if (!uniform(i, semis[0]))
              cannot(
                  "a loop around a barrier/simd function whose "
                  "start is not threadgroup-uniform");
          }
          for (auto& v : vars) uniform_.insert(v);
          bool ok = uniform(semis[0] + 1, semis[1]);
          // increment: assignments to the loop variables with uniform right-hand sides
          for (size_t j = semis[1] + 1; j < it.ce && ok; ++j) {
            const Token& t = toks_[j];
            if (t.trivia() || t.is(",")) continue;
            if (t.kind == TokKind::ident &&
                std::find(vars.begin(), vars.end(), t.text) != vars.end())
              continue;
            if (t.is("++") || t.is("--")) continue;
            if (assign_op(t.text)) {
              size_t k = j + 1;
              while (k < it.ce && !toks_[k].is(",")) ++k;
              ok = uniform(j + 1, k);
              j = k - 1;
              continue;
            }
            ok = false;
          }
          if (ok)
            for (auto& v : vars) {
              // modified only in the header
              int c = 0;
              for (size_t j = it.body_b; j < it.e; ++j)
                if (toks_[j].kind == TokKind::ident && toks_[j].text == v) {
                  size_t n = next(j + 1, it.e), p = prev(j);
                  if ((n < it.e && assign_op(toks_[n].text)) ||
                      (p != npos && (toks_[p].is("++") || toks_[p].is("--") || toks_[p].is("&"))))
                    ++c;
                }
              if (c) ok = false;
            }
          if (!ok) {
            for (auto& v : vars) uniform_.erase(v);
            cannot(
                "a barrier or simd function inside a loop whose bounds are not "
                "threadgroup-uniform");
          }
          close_region();
          out_ += text(it.b, it.body_b) + "{";
          scopes_.push_back({});
          loop_starts_.push_back(it.b);
          emit_seq(it.then_, mask, pred);
          close_region();
          loop_starts_.pop_back();
          scopes_.pop_back();
          out_ += "}";
          break;
        }
        case Item::if_: {
          if (!it.sync) {
            add_stmt(it, mask);
            break;
          }
          if (!pred && uniform(it.cb, it.ce)) {
            close_region();
            out_ += text(it.b, it.body_b) + "{";
            scopes_.push_back({});
            emit_seq(it.then_, mask, pred);
            close_region();
            scopes_.pop_back();
            out_ += "}";
            if (it.else_tok != npos) {
              out_ += " else {";
              scopes_.push_back({});
              emit_seq(it.else_, mask, pred);
              close_region();
              scopes_.pop_back();
              out_ += "}";
            }
            break;
          }
          bool tb = false;
          has_sync(it.s, it.e, &tb);
          if (tb) cannot("threadgroup_barrier under thread-dependent control flow");
          // Predicated: the condition goes to per-thread flags, each branch runs masked.
          int p = pred_id_++;
          int s1 = slot_++, s2 = slot_++;
          std::string cond = flat(it.cb, it.ce);
          if (has_sync(it.cb, it.ce)) {  // `if (simd_is_first())`: exchange first
            auto calls = simd_calls(it.cb, it.ce);
            int id = simd_exchange(calls, it.s, mask);
            cond = replaced_flat(it.cb, it.ce, calls, id);
          }
          open_region(mask);
          rg_.pre += fmt::format(
              "unsigned char* alloy_p{0} = alloy_S.flags({1}); unsigned char* alloy_q{0} = "
              "alloy_S.flags({2});",
              p, s1, s2);
          rg_.tail += fmt::format(
              "{{ const bool alloy_c = ({1}); alloy_p{0}[alloy_t.li] = alloy_c; "
              "alloy_q{0}[alloy_t.li] = !alloy_c; }}",
              p, cond);
          rg_.other = true;
          rg_.stmts += newlines(text(it.b, it.body_b));
          region_idents(it.cb, it.ce);
          rg_.last = std::max(rg_.last, it.ce);
          close_region();
          scopes_.push_back({});
          emit_seq(it.then_, fmt::format("alloy_p{}", p), true);
          close_region();
          scopes_.pop_back();
          if (it.else_tok != npos) {
            scopes_.push_back({});
            out_ += newlines(text(it.else_tok, it.else_tok + 1));
            emit_seq(it.else_, fmt::format("alloy_q{}", p), true);
            close_region();
            scopes_.pop_back();
          }
          break;
        }
      }
    }
  }
};

}  // namespace

SplitBody split_kernel_body(std::string_view body, const std::vector<KernelParam>& params,
                            const std::vector<std::string>& preprocessor_lines) {
  return Splitter(body, params, preprocessor_lines).run();
}

}  // namespace alloy::msl
