// compile_library: whole Metal libraries called by name (torch.mps.compile_shader on Alloy).
//
// Reading: kernel-declaring macros are expanded (msl/macros), then the source is translated once
// for reflection (kernel names, parameters). A kernel whose body uses something Alloy does not
// support, or does not compile for a target, is set aside by blanking its body (line numbers
// kept) and rebuilding, so the library's other kernels still run and that one falls back to its
// reference. Calls bind arguments to parameters in declaration order, check dtypes, and return
// pending outputs of a LibraryKernelOp: the new contents of the writable buffers (copy-on-write).
#include "kernel/library.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "alloy/errors.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "core/primitive.h"
#include "core/trace.h"
#include "kernel/compile_pool.h"
#include "kernel/launch.h"
#include "kernel/limits.h"
#include "kernel/program.h"
#include "kernel/reference.h"
#include "kernel/robust_reports.h"
#include "msl/function_constants.h"
#include "msl/includes.h"
#include "msl/macros.h"
#include "msl/translate.h"

namespace alloy {

namespace kernel {
namespace {

using msl::Token;
using msl::TokKind;
constexpr size_t npos = std::string::npos;

// ---- token helpers ---------------------------------------------------------------------------

size_t next_sig(const std::vector<Token>& t, size_t i) {
  while (i < t.size() && (t[i].trivia() || t[i].kind == TokKind::preproc)) ++i;
  return i;
}
size_t prev_sig(const std::vector<Token>& t, size_t i) {
  while (i > 0) {
    --i;
    if (!t[i].trivia()) return i;
  }
  return npos;
}
size_t match_fwd(const std::vector<Token>& t, size_t i, std::string_view open,
                 std::string_view close) {
  int depth = 0;
  for (size_t j = i; j < t.size(); ++j) {
    if (t[j].kind != TokKind::punct) continue;
    if (t[j].text == open)
      ++depth;
    else if (t[j].text == close && --depth == 0)
      return j;
  }
  return npos;
}
bool attr_open(const std::vector<Token>& t, size_t i) {
  return i + 1 < t.size() && t[i].is("[") && t[i + 1].is("[");
}
// Index of the last "]" of the attribute opening at i, or npos.
size_t attr_end(const std::vector<Token>& t, size_t i) {
  size_t j = match_fwd(t, i + 1, "[", "]");
  if (j == npos || j + 1 >= t.size() || !t[j + 1].is("]")) return npos;
  return j + 1;
}
std::string compact(const std::vector<Token>& t, size_t b, size_t e) {
  std::string s;
  for (size_t i = b; i < e && i < t.size(); ++i) {
    if (t[i].trivia()) continue;
    if (!s.empty()) s += ' ';
    s += t[i].text;
  }
  return s;
}
// The first attribute of a compacted attribute list ("kernel , max_total_... ( 64 )" -> "kernel").
std::string attr_head(const std::string& a) {
  return a.substr(0, a.find_first_of(" (,"));
}
std::string quoted_name(const std::string& s) {
  auto q1 = s.find('"'), q2 = s.rfind('"');
  return q1 != npos && q2 > q1 ? s.substr(q1 + 1, q2 - q1 - 1) : "";
}

// Names of a template parameter list (tokens b..e, without the angle brackets).
std::vector<std::string> template_param_names(const std::vector<Token>& t, size_t b, size_t e) {
  std::vector<std::string> names;
  int depth = 0;
  std::string last;
  bool in_default = false;
  for (size_t i = b; i <= e; ++i) {
    bool end = i == e || (depth == 0 && t[i].is(","));
    if (end) {
      if (!last.empty()) names.push_back(last);
      last.clear();
      in_default = false;
      continue;
    }
    const Token& k = t[i];
    if (k.is("<") || k.is("("))
      ++depth;
    else if (k.is(">") || k.is(")"))
      --depth;
    else if (k.is(">>"))
      depth -= 2;
    else if (depth == 0 && k.is("="))
      in_default = true;
    else if (depth == 0 && !in_default && k.kind == TokKind::ident)
      last = k.text;
  }
  return names;
}

}  // namespace

std::vector<KernelRegion> find_kernel_regions(const std::vector<Token>& t) {
  std::vector<KernelRegion> regions;
  std::vector<std::pair<std::string, KernelRegion::Instantiation>> insts;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].trivia() || t[i].kind == TokKind::preproc) continue;
    // Explicit instantiation: `template [[host_name("x")]] [[kernel]] decltype(f<T>) f<T>;`
    if (t[i].is("template")) {
      size_t n = next_sig(t, i + 1);
      if (n < t.size() && !t[n].is("<")) {
        size_t semi = n;
        while (semi < t.size() && !t[semi].is(";")) ++semi;
        if (semi >= t.size()) break;
        std::string host, fn;
        bool is_kernel = false;
        size_t after_decltype = n;
        for (size_t j = n; j < semi; ++j) {
          if (attr_open(t, j)) {
            size_t e = attr_end(t, j);
            if (e == npos || e > semi) break;
            std::string a = compact(t, j + 2, e - 1);
            if (a.starts_with("host_name")) host = quoted_name(a);
            if (attr_head(a) == "kernel") is_kernel = true;
            j = e;
            after_decltype = e + 1;
          } else if (t[j].is("decltype")) {
            size_t po = next_sig(t, j + 1);
            size_t pc = match_fwd(t, po, "(", ")");
            if (pc != npos && pc < semi) after_decltype = pc + 1;
            break;
          } else if (!t[j].trivia()) {
            break;  // `void f<T>(params...)`: the parameters' attributes are not the instance's
          }
        }
        for (size_t j = after_decltype; j < semi; ++j) {
          if (t[j].is("<") || t[j].is("(")) break;
          if (t[j].kind == TokKind::ident) fn = t[j].text;
        }
        if ((is_kernel || !host.empty()) && !fn.empty())
          insts.push_back({fn, {i, semi, host.empty() ? fn : host}});
        i = semi;
        continue;
      }
    }
    bool marker = false;
    size_t after = i;
    if (attr_open(t, i)) {
      size_t e = attr_end(t, i);
      if (e == npos) continue;
      // `[[kernel]]`, or `[[kernel, max_total_threads_per_threadgroup(n)]]` (MLX's steel and
      // winograd kernels): the list's first attribute.
      marker = attr_head(compact(t, i + 2, e - 1)) == "kernel";
      after = e;
      if (!marker) {
        i = e;
        continue;
      }
    } else if (t[i].kind == TokKind::ident && t[i].text == "kernel") {
      marker = true;
    }
    if (!marker) continue;
    // [attributes] void name [attributes] ( params ) [attributes] { body }
    size_t j = next_sig(t, after + 1);
    while (j < t.size()) {
      if (attr_open(t, j)) {
        size_t e = attr_end(t, j);
        if (e == npos) break;
        j = next_sig(t, e + 1);
      } else if (t[j].is("kernel")) {
        j = next_sig(t, j + 1);
      } else {
        break;
      }
    }
    if (j >= t.size() || !t[j].is("void")) continue;
    size_t nm = next_sig(t, j + 1);
    if (nm >= t.size() || t[nm].kind != TokKind::ident) continue;
    size_t po = next_sig(t, nm + 1);
    while (po < t.size() && attr_open(t, po)) {
      size_t e = attr_end(t, po);
      if (e == npos) break;
      po = next_sig(t, e + 1);
    }
    if (po >= t.size() || !t[po].is("(")) continue;
    size_t pc = match_fwd(t, po, "(", ")");
    if (pc == npos) continue;
    size_t b = next_sig(t, pc + 1);
    while (b < t.size() && attr_open(t, b)) {
      size_t e = attr_end(t, b);
      if (e == npos) break;
      b = next_sig(t, e + 1);
    }
    if (b >= t.size() || !t[b].is("{")) {  // a declaration without a body
      i = pc;
      continue;
    }
    size_t bc = match_fwd(t, b, "{", "}");
    if (bc == npos) break;
    KernelRegion r;
    r.name = t[nm].text;
    r.body_open = b;
    r.body_close = bc;
    r.body_first_line = t[b].line;
    r.last_line = t[bc].line;
    // The declaration starts at the attributes and `template <...>` before the marker.
    size_t begin = i;
    for (;;) {
      size_t p = prev_sig(t, begin);
      if (p == npos) break;
      if (t[p].is("]") && p > 0 && t[p - 1].is("]")) {
        int depth = 0;
        size_t q = p;
        for (;; --q) {
          if (t[q].is("]"))
            ++depth;
          else if (t[q].is("[") && --depth == 0)
            break;
          if (q == 0) break;
        }
        if (q == 0 || !t[q].is("[") || !t[q - 1].is("[")) break;
        begin = q - 1;
        continue;
      }
      if (t[p].is(">") || t[p].is(">>")) {
        int depth = 0;
        size_t q = p;
        for (;; --q) {
          if (t[q].is(">"))
            ++depth;
          else if (t[q].is(">>"))
            depth += 2;
          else if (t[q].is("<") && --depth == 0)
            break;
          if (q == 0) break;
        }
        size_t tq = prev_sig(t, q);
        if (tq != npos && t[q].is("<") && t[tq].is("template")) {
          r.template_params = template_param_names(t, q + 1, p);
          begin = tq;
        }
      }
      break;
    }
    r.begin = begin;
    r.first_line = t[begin].line;
    regions.push_back(std::move(r));
    i = bc;
  }
  for (auto& [fn, inst] : insts)
    for (auto& r : regions)
      if (r.name == fn) r.instantiations.push_back(inst);
  return regions;
}

// ---- Metal types -----------------------------------------------------------------------------

MetalType parse_metal_type(std::string_view type) {
  static const std::map<std::string, Dtype, std::less<>>& scalars =
      *new std::map<std::string, Dtype, std::less<>>({
          {"bool", Dtype::bool_},
          {"char", Dtype::int8},
          {"int8_t", Dtype::int8},
          {"signed char", Dtype::int8},
          {"uchar", Dtype::uint8},
          {"uint8_t", Dtype::uint8},
          {"unsigned char", Dtype::uint8},
          {"short", Dtype::int16},
          {"int16_t", Dtype::int16},
          {"ushort", Dtype::uint16},
          {"uint16_t", Dtype::uint16},
          {"unsigned short", Dtype::uint16},
          {"int", Dtype::int32},
          {"int32_t", Dtype::int32},
          {"signed int", Dtype::int32},
          {"uint", Dtype::uint32},
          {"uint32_t", Dtype::uint32},
          {"unsigned", Dtype::uint32},
          {"unsigned int", Dtype::uint32},
          {"long", Dtype::int64},
          {"int64_t", Dtype::int64},
          {"ulong", Dtype::uint64},
          {"uint64_t", Dtype::uint64},
          {"unsigned long", Dtype::uint64},
          {"size_t", Dtype::uint64},
          {"half", Dtype::float16},
          {"float16_t", Dtype::float16},
          {"bfloat", Dtype::bfloat16},
          {"bfloat16_t", Dtype::bfloat16},
          {"float", Dtype::float32},
          {"float32_t", Dtype::float32},
          {"double", Dtype::float64},
          {"complex64_t", Dtype::complex64},
      });
  std::string s(type);
  auto strip = [&](std::string_view prefix) {
    if (s.starts_with(prefix)) s = s.substr(prefix.size());
  };
  strip("metal::");
  // atomic<T> and atomic_T: the element type.
  if (s.starts_with("atomic<") && s.ends_with(">"))
    s = s.substr(7, s.size() - 8);
  else if (s.starts_with("atomic_"))
    s = s.substr(7);
  strip("metal::");
  strip("packed_");
  MetalType m;
  if (s.starts_with("vec<") && s.ends_with(">")) {
    std::string inner = s.substr(4, s.size() - 5);
    auto comma = inner.rfind(',');
    if (comma == npos) return m;
    try {
      m.lanes = std::stoi(inner.substr(comma + 1));
    } catch (...) {
      return m;
    }
    s = inner.substr(0, comma);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    strip("metal::");
  }
  if (auto it = scalars.find(s); it != scalars.end()) {
    m.dtype = it->second;
    return m;
  }
  // Vector names: float4, half2, uint3, bfloat4...
  static const std::set<std::string, std::less<>>& vector_bases =
      *new std::set<std::string, std::less<>>({"bool", "char", "uchar", "short", "ushort", "int",
                                               "uint", "long", "ulong", "half", "bfloat", "float"});
  if (s.size() > 1 && (s.back() == '2' || s.back() == '3' || s.back() == '4')) {
    std::string base = s.substr(0, s.size() - 1);
    if (vector_bases.count(base)) {
      m.dtype = scalars.at(base);
      m.lanes = s.back() - '0';
    }
  }
  return m;
}

namespace {

std::vector<std::string> split_spaces(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find(' ', b);
    if (e == npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// Tokens joined the way people write types: "const device float*", "metal::atomic<uint>".
std::string pretty(const std::vector<std::string>& toks) {
  std::string s;
  for (size_t i = 0; i < toks.size(); ++i) {
    const std::string& t = toks[i];
    bool glue = s.empty() || t == "*" || t == "&" || t == "," || t == ">" || t == "::" ||
                t == "<" || s.back() == '<' || s.back() == ' ' || s.ends_with("::");
    if (!glue) s += ' ';
    s += t;
    if (t == ",") s += ' ';
  }
  return s;
}

// Template arguments of an instance expression "f < float , 3 >" (compact text).
std::vector<std::string> template_args_of(const std::string& function) {
  std::vector<std::string> args;
  auto toks = split_spaces(function);
  size_t lt = 0;
  while (lt < toks.size() && toks[lt] != "<") ++lt;
  if (lt >= toks.size()) return args;
  int depth = 0;
  std::vector<std::string> cur;
  for (size_t i = lt + 1; i < toks.size(); ++i) {
    const std::string& t = toks[i];
    if (depth == 0 && (t == "," || t == ">" || t == ">>")) {
      args.push_back(pretty(cur));
      cur.clear();
      if (t != ",") break;
      continue;
    }
    if (t == "<" || t == "(") ++depth;
    if (t == ">" || t == ")") --depth;
    cur.push_back(t);
  }
  return args;
}

KernelInfo make_info(const msl::KernelEntry& e, const std::vector<KernelRegion>& regions,
                     const std::map<std::string, std::string>& template_dtypes) {
  KernelInfo info;
  info.name = e.host_name;
  info.function = pretty(split_spaces(e.written));
  info.max_total_threads = e.max_total_threads;
  // Template parameter -> argument of this instance.
  std::map<std::string, std::string> subst;
  for (auto& r : regions) {
    if (r.name != e.base_name || r.template_params.empty()) continue;
    auto args = template_args_of(e.written);
    for (size_t i = 0; i < r.template_params.size() && i < args.size(); ++i)
      subst[r.template_params[i]] = args[i];
    break;
  }
  std::set<std::string> placeholders;
  for (auto& [input, ph] : template_dtypes) placeholders.insert(ph);
  for (auto& p : e.params) {
    KernelParamInfo q;
    q.name = p.name;
    q.index = p.index;
    auto toks = split_spaces(p.type);
    for (auto& t : toks)
      if (auto it = subst.find(t); it != subst.end()) t = it->second;
    q.type = pretty(toks);
    // Element type: the type without address spaces, cv-qualifiers and the pointer/reference.
    std::vector<std::string> elem;
    bool readonly = false, seen_indirection = false;
    for (auto& t : toks) {
      if (t == "*" || t == "&") seen_indirection = true;
      if (t == "constant" || (t == "const" && !seen_indirection)) readonly = true;
      if (t == "const" || t == "volatile" || t == "device" || t == "constant" ||
          t == "threadgroup" || t == "thread" || t == "*" || t == "&" || t == "restrict" ||
          t == "__restrict")
        continue;
      elem.push_back(t);
    }
    q.element_type = pretty(elem);
    if (q.element_type.starts_with("metal::")) q.element_type = q.element_type.substr(7);
    switch (p.kind) {
      case msl::ParamKind::attribute:
        q.kind = KernelParamInfo::Kind::attribute;
        q.attribute = p.attribute;
        q.index = -1;
        break;
      case msl::ParamKind::threadgroup:
        q.kind = KernelParamInfo::Kind::threadgroup;
        break;
      case msl::ParamKind::buffer:
        q.kind = p.is_reference && readonly ? KernelParamInfo::Kind::scalar
                                            : KernelParamInfo::Kind::buffer;
        q.writable = q.kind == KernelParamInfo::Kind::buffer && !readonly;
        break;
    }
    if (q.takes_argument()) {
      // vec<TYPE, 4> and atomic<TYPE> name their placeholder inside.
      std::string base = q.element_type;
      for (const char* w : {"atomic<", "vec<"})
        if (base.starts_with(w))
          base = base.substr(std::strlen(w), base.find_first_of(",>") - std::strlen(w));
      if (placeholders.count(base))
        q.placeholder = base;
      else
        q.dtype = parse_metal_type(q.element_type).dtype;
    }
    info.params.push_back(std::move(q));
  }
  return info;
}

std::string newlines_of(const std::string& s) {
  return std::string(static_cast<size_t>(std::count(s.begin(), s.end(), '\n')), '\n');
}

// Lines of the user's source that a build error points at: compile errors ("line 12: error: ...")
// and unsupported features ("Metal source line 12)").
// (Plain string scanning: std::regex crashed inside Python processes that load another
// libstdc++ first, e.g. with torch.)
std::vector<int> error_lines(const std::string& what) {
  std::vector<int> lines;
  auto number_at = [&](size_t p, size_t* end) {
    size_t e = p;
    while (e < what.size() && std::isdigit(static_cast<unsigned char>(what[e]))) ++e;
    *end = e;
    return e > p ? std::stoi(what.substr(p, e - p)) : -1;
  };
  // "line N: error" / "line N: fatal error" at the start of a (indented) line.
  for (size_t p = what.find("line "); p != std::string::npos; p = what.find("line ", p + 1)) {
    size_t b = p;
    while (b > 0 && (what[b - 1] == ' ' || what[b - 1] == '\t')) --b;
    if (b > 0 && what[b - 1] != '\n') continue;
    size_t e;
    int n = number_at(p + 5, &e);
    if (n < 0) continue;
    std::string_view rest(what.c_str() + e, what.size() - e);
    if (rest.starts_with(": error") || rest.starts_with(": fatal error")) lines.push_back(n);
  }
  // "... (kernel 'k', Metal source line N)" from NotSupported.
  for (size_t p = what.find("source line "); p != std::string::npos;
       p = what.find("source line ", p + 1)) {
    size_t e;
    int n = number_at(p + 12, &e);
    if (n >= 0 && e < what.size() && what[e] == ')') lines.push_back(n);
  }
  return lines;
}

}  // namespace
}  // namespace kernel

// ---- library state ---------------------------------------------------------------------------

namespace detail {

/// One compilation of some of the library's kernels (a unit) for one target.
struct LibraryBuild {
  std::shared_ptr<kernel::Program> program;
  std::unordered_map<std::string, size_t> index;     // host name -> program->kernels()[i]
  std::exception_ptr whole;                          // the unit as a whole failed
  std::map<std::string, std::exception_ptr> failed;  // set-aside kernels, by function name
};

using LibraryJob = kernel::CompileJob<std::shared_ptr<LibraryBuild>>;

/// The library for one target and one set of placeholder types: which unit compiles each kernel.
/// A kernel called before anything compiled it gets a unit of its own (only that kernel is
/// compiled: lazy compile); precompile() puts the kernels no unit has yet into a few large units
/// compiled in parallel.
struct LibraryVariant {
  msl::Target target = msl::Target::cpu;
  bool robust = false;                       // bounds-checked buffer accesses
  std::map<std::string, std::string> types;  // placeholder -> Metal type
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<LibraryJob>> unit_of;  // by host name
};

struct LibraryKernelSlot {
  std::string name;      // host name
  std::string function;  // base function name (a KernelRegion's name)
  size_t index = 0;      // in LibraryState::kernels
  msl::KernelEntry entry;
  // The reflection (KernelInfo) is made at its first use: a library of thousands of kernels is
  // read without making thousands of parameter lists that no call asks for.
  mutable std::once_flag once;
  mutable KernelInfo info_;
};

struct LibraryState : std::enable_shared_from_this<LibraryState> {
  std::string source;
  // The source with its includes expanded and its function constants applied: with
  // template_dtypes and math_mode, what the library computes (export stores it), and `key`, its
  // content hash (the process-wide registry's key; kernel::library_key).
  std::string resolved;
  std::string key;
  LibraryOptions options;  // references moved to `references`
  std::vector<msl::Token> toks;
  std::vector<kernel::KernelRegion> regions;
  std::map<std::string, std::exception_ptr> unsupported;  // set aside for every target
  std::deque<LibraryKernelSlot> kernels;                  // (slots do not move)
  std::unordered_map<std::string, size_t> index;          // host name -> kernels[i]

  const KernelInfo& info(const LibraryKernelSlot& k) const {
    std::call_once(k.once,
                   [&] { k.info_ = kernel::make_info(k.entry, regions, options.template_dtypes); });
    return k.info_;
  }

  std::mutex mu;  // references, variants
  std::map<std::string, ReferenceFn> references;
  std::map<std::string, std::shared_ptr<LibraryVariant>> variants;
  std::atomic<uint64_t> units_built{0}, kernels_built{0};  // statistics (tests)

  bool fallback() const { return options.fallback.value_or(kernel::fallback_from_env()); }
  bool robust() const { return options.robust || robust_by_default(); }

  const LibraryKernelSlot* find(std::string_view name) const {
    auto it = index.find(std::string(name));
    return it == index.end() ? nullptr : &kernels[it->second];
  }
  [[noreturn]] void unknown(std::string_view name) const {
    std::string names;
    for (auto& k : kernels) names += (names.empty() ? "" : ", ") + k.name;
    throw std::invalid_argument(
        fmt::format("[library] '{}' has no kernel named '{}'; its kernels "
                    "are: {}",
                    options.name, name, names));
  }
  ReferenceFn reference(const std::string& name) {
    std::lock_guard lock(mu);
    auto it = references.find(name);
    return it == references.end() ? ReferenceFn() : it->second;
  }

  // The source with dtype placeholders replaced and the bodies of `stubbed` kernels blanked.
  // With `keep`, only the kernels whose host names it lists stay: every other kernel function is
  // blanked whole, and so are the explicit instantiations of host names it does not list (Metal
  // code cannot call a kernel, so nothing else depends on them). Blanked text keeps its newlines:
  // line numbers stay the user's.
  std::string render(const std::map<std::string, std::string>& types,
                     const std::set<std::string>& stubbed,
                     const std::set<std::string>* keep = nullptr) const {
    std::vector<char> blank(toks.size(), 0);
    auto blank_range = [&](size_t b, size_t e) {  // [b, e]
      for (size_t i = b; i <= e && i < toks.size(); ++i) blank[i] = 1;
    };
    for (auto& r : regions) {
      if (stubbed.count(r.name))
        for (size_t i = r.body_open + 1; i < r.body_close; ++i) blank[i] = 1;
      if (!keep) continue;
      bool any = false;
      if (r.instantiations.empty()) {
        any = keep->count(r.name) > 0;
      } else {
        for (auto& in : r.instantiations) {
          if (keep->count(in.host_name))
            any = true;
          else
            blank_range(in.begin, in.end);
        }
      }
      if (!any) blank_range(r.begin, r.body_close);
    }
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < toks.size(); ++i) {
      const auto& t = toks[i];
      if (blank[i]) {
        out += kernel::newlines_of(t.text);
      } else if (t.kind == msl::TokKind::ident && types.count(t.text)) {
        out += types.at(t.text);
      } else {
        out += t.text;
      }
    }
    return out;
  }

  // The region whose body holds `line` (nullptr if none).
  const kernel::KernelRegion* region_of_body_line(int line) const {
    for (auto& r : regions)
      if (line >= r.body_first_line && line <= r.last_line) return &r;
    return nullptr;
  }

  // Translates for reflection; kernels whose bodies use unsupported features are set aside.
  msl::Translation reflect() {
    std::set<std::string> stubbed;
    for (size_t attempt = 0;; ++attempt) {
      try {
        msl::TranslateOptions topt;
        topt.label = options.name;
        topt.reflect_only = true;
        topt.expand_macros = false;  // render() is of the expanded source
        return msl::translate(render({}, stubbed), topt);
      } catch (const NotSupported& e) {
        auto lines = kernel::error_lines(e.what());
        const kernel::KernelRegion* r = lines.empty() ? nullptr : region_of_body_line(lines[0]);
        if (!r || stubbed.count(r->name) || attempt > regions.size()) throw;
        stubbed.insert(r->name);
        unsupported[r->name] = std::current_exception();
      }
    }
  }

  std::shared_ptr<LibraryVariant> variant(msl::Target target,
                                          const std::map<std::string, std::string>& types,
                                          bool robust) {
    std::string key = target == msl::Target::cuda ? "cuda" : "cpu";
    if (robust) key += "|robust";
    for (auto& [ph, t] : types) key += "|" + ph + "=" + t;
    std::lock_guard lock(mu);
    auto& v = variants[key];
    if (!v) {
      v = std::make_shared<LibraryVariant>();
      v->target = target;
      v->robust = robust;
      v->types = types;
    }
    return v;
  }

  // A new unit compiling `hosts` (not registered anywhere yet).
  std::shared_ptr<LibraryJob> make_unit(const std::shared_ptr<LibraryVariant>& v,
                                        std::set<std::string> hosts) {
    std::weak_ptr<LibraryState> self = weak_from_this();
    return std::make_shared<LibraryJob>([self, v, hosts = std::move(hosts)] {
      auto s = self.lock();
      if (!s) throw Error("", "[library] the library was destroyed before it compiled");
      return s->build(*v, hosts);
    });
  }

  // The unit that compiles kernel `host` in variant `v`: the one registered, else a new unit of
  // that kernel alone. `start` queues a new unit on the compile pool.
  std::shared_ptr<LibraryJob> unit_for(const std::shared_ptr<LibraryVariant>& v,
                                       const std::string& host, bool start) {
    std::shared_ptr<LibraryJob> job;
    {
      std::lock_guard lock(v->mu);
      auto& u = v->unit_of[host];
      if (u) return u;
      u = job = make_unit(v, {host});
    }
    if (start) kernel::compile_soon([job] { job->run(); });
    return job;
  }

  // Compiles the kernels `hosts` of variant `v` as one program, setting aside the kernels whose
  // bodies fail; a failure outside kernel bodies fails the unit as a whole.
  std::shared_ptr<LibraryBuild> build(const LibraryVariant& v, const std::set<std::string>& hosts) {
    auto b = std::make_shared<LibraryBuild>();
    std::set<std::string> stubbed;
    for (auto& [fn, e] : unsupported) {
      stubbed.insert(fn);
      b->failed[fn] = e;
    }
    for (size_t attempt = 0;; ++attempt) {
      kernel::SourceMap map;
      map.label = options.name;
      auto t0 = std::chrono::steady_clock::now();
      map.msl = render(v.types, stubbed, &hosts);
      map.user_text = true;
      if (trace::build())
        std::fprintf(stderr, "alloy: library %s: unit of %zu kernel(s) rendered in %.3f ms\n",
                     options.name.c_str(), hosts.size(), trace::ms_since(t0));
      try {
        kernel::BindOptions bind;
        bind.robust = v.robust;  // library buffers may alias: none of metal_kernel's guarantees
        b->program = kernel::Program::build(map, v.target, options.math_mode, bind);
        break;
      } catch (const std::exception& e) {
        auto ep = std::current_exception();
        if (!kernel::is_fallback_error(ep) || attempt > regions.size()) {
          b->whole = ep;
          break;
        }
        auto lines = kernel::error_lines(e.what());
        std::set<std::string> culprits;
        bool isolable = !lines.empty();
        for (int line : lines) {
          const kernel::KernelRegion* r = region_of_body_line(line);
          if (!r || stubbed.count(r->name))
            isolable = false;
          else
            culprits.insert(r->name);
        }
        if (!isolable || culprits.empty()) {
          b->whole = ep;
          break;
        }
        for (auto& c : culprits) {
          stubbed.insert(c);
          b->failed[c] = ep;
        }
        // Nothing left to compile (a unit of one kernel that failed): no second compile.
        bool left = false;
        for (auto& h : hosts)
          if (auto* k = find(h); k && !stubbed.count(k->function)) left = true;
        if (!left) break;
      }
    }
    if (b->program)
      for (size_t i = 0; i < b->program->kernels().size(); ++i)
        b->index.emplace(b->program->kernels()[i].entry.host_name, i);
    units_built++;
    kernels_built += hosts.size();
    return b;
  }

  // Why kernel `slot` cannot run in build `b` (nullptr: it can).
  static std::exception_ptr failure_of(const LibraryBuild& b, const std::string& function) {
    if (b.whole) return b.whole;
    if (auto it = b.failed.find(function); it != b.failed.end()) return it->second;
    return nullptr;
  }
};

struct LibraryAccess {
  static const std::shared_ptr<LibraryState>& state(const Library& l) { return l.state_; }
  static Library make(std::shared_ptr<LibraryState> s) { return Library(std::move(s)); }
};

// ---- the process-wide registry of libraries, by content key ----------------------------------
// A LibraryKernel primitive names its library by content key; make_primitive finds it here. The
// registry holds no library alive: the most recently read live library of that content answers.

namespace {
std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<std::string, std::weak_ptr<LibraryState>>& registry() {
  static auto* r = new std::unordered_map<std::string, std::weak_ptr<LibraryState>>();
  return *r;
}
}  // namespace

void register_library(const std::shared_ptr<LibraryState>& s) {
  std::lock_guard lock(registry_mutex());
  auto& r = registry();
  if (r.size() > 64 && r.size() % 64 == 0)  // drop the entries of destroyed libraries now and then
    std::erase_if(r, [](const auto& kv) { return kv.second.expired(); });
  r[s->key] = s;
}

std::shared_ptr<LibraryState> registered_library(const std::string& key) {
  std::lock_guard lock(registry_mutex());
  auto it = registry().find(key);
  return it == registry().end() ? nullptr : it->second.lock();
}

}  // namespace detail

// ---- KernelInfo ------------------------------------------------------------------------------

std::string KernelInfo::signature() const {
  std::string s = name + "(";
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (i) s += ", ";
    s += p.type + " " + p.name;
    switch (p.kind) {
      case KernelParamInfo::Kind::buffer:
      case KernelParamInfo::Kind::scalar:
        s += fmt::format(" [[buffer({})]]", p.index);
        break;
      case KernelParamInfo::Kind::threadgroup:
        s += fmt::format(" [[threadgroup({})]]", p.index);
        break;
      case KernelParamInfo::Kind::attribute:
        s += " [[" + p.attribute + "]]";
        break;
    }
  }
  return s + ")";
}

// ---- the primitive ---------------------------------------------------------------------------

namespace kernel {
namespace {

constexpr uint64_t kMaxThreadgroupMemory = 32 << 10;  // Metal's guaranteed threadgroup memory

struct Binding {
  std::string name;          // the parameter's name (robust-mode reports)
  bool threadgroup = false;  // [[threadgroup(n)]] (else [[buffer(n)]])
  int index = 0;             // n
  int input = -1;            // read-only buffer or scalar: the primitive's input
  int output = -1;           // writable buffer: the primitive's output
  uint64_t tg_bytes = 0;
};

// The warning of a kernel that runs its reference because it cannot be compiled for `target`.
std::string fallback_message(const std::string& label, msl::Target target,
                             const std::exception_ptr& why) {
  return fmt::format(
      "kernel '{}' cannot run on the {} ({}); running its reference implementation instead", label,
      target == msl::Target::cuda ? "GPU" : "CPU", first_line(why));
}

/// One call of a library kernel in the graph: a pure primitive. Inputs: the arrays of the call
/// (read-only buffers, scalars, and the previous contents of writable buffers that were given);
/// outputs: the new contents of the writable buffers. Its state is the library's content key, the
/// kernel's host name and the call's parameters; the library itself (reflection, references, the
/// compiled variants) is found by that key in the process-wide registry. The program is bound at
/// evaluation, on the device the op runs on; fallback and check mode are evaluation-time policy.
class LibraryKernelOp : public Primitive {
 public:
  struct State {
    std::string library;                       // the library's content key (kernel::library_key)
    std::string host;                          // the kernel's host name
    std::string label;                         // "library:kernel" (messages)
    std::map<std::string, std::string> types;  // dtype placeholder -> Metal type of this call
    std::vector<Binding> bindings;
    std::vector<int> output_source;   // output j: input holding its previous contents, or -1
    std::vector<int> arg_input;       // data parameter k: its input, or -1 (omitted)
    std::vector<Shape> input_shapes;  // the call's (the dispatch was chosen for them)
    std::vector<Shape> shapes;        // outputs
    std::vector<std::string> output_names;
    Dims threads{1, 1, 1}, group{1, 1, 1};
    bool fallback = false, check = false, robust = false;
    std::optional<double> rtol, atol;

    std::string buffer_name(uint32_t buffer) const {
      for (auto& b : bindings)
        if (!b.threadgroup && b.index == static_cast<int>(buffer)) return b.name;
      return fmt::format("buffer({})", buffer);
    }
  };
  LibraryKernelOp(std::shared_ptr<detail::LibraryState> lib, State s)
      : lib_(std::move(lib)), s_(std::move(s)) {}

  const detail::LibraryState& library() const { return *lib_; }

  const char* name() const override { return "LibraryKernel"; }
  std::string label() const override { return "LibraryKernel(" + s_.label + ")"; }
  // Threads and new buffers are fixed for the call's shapes (output_shapes refuses others): a
  // shapeless compile traces the function again for new shapes.
  bool shapes_from_state() const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override {
    if (inputs.size() != s_.input_shapes.size())
      throw std::invalid_argument(fmt::format("[library] kernel '{}' takes {} input(s), {} given",
                                              s_.label, s_.input_shapes.size(), inputs.size()));
    // Threads and the new buffers' shapes were chosen for the call's shapes: on others the kernel
    // would silently compute something else.
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].shape() != s_.input_shapes[i])
        throw NotSupported(
            s_.label, fmt::format("not supported: library kernel '{}' was called with input {} of "
                                  "shape {}; it cannot run on shape {} (its dispatch is fixed)",
                                  s_.label, i, shape_text(s_.input_shapes[i]),
                                  shape_text(inputs[i].shape())));
    return s_.shapes;
  }
  PrimitiveState state() const override {
    PrimitiveState st(2);
    auto ints = [](auto const& v) { return std::vector<int64_t>(v.begin(), v.end()); };
    std::vector<std::string> types;
    for (auto& [ph, t] : s_.types) types.push_back(ph + "=" + t);
    std::vector<std::vector<int64_t>> bindings;
    std::vector<std::string> binding_names;
    for (auto& b : s_.bindings) {
      bindings.push_back(
          {b.threadgroup, b.index, b.input, b.output, static_cast<int64_t>(b.tg_bytes)});
      binding_names.push_back(b.name);
    }
    st.set("library", s_.library)
        .set("kernel", s_.host)
        .set("label", s_.label)
        .set("placeholder_types", types)
        .set("bindings", bindings)
        .set("binding_names", binding_names)
        .set("output_source", ints(s_.output_source))
        .set("arg_input", ints(s_.arg_input))
        .set("input_shapes",
             std::vector<std::vector<int64_t>>(s_.input_shapes.begin(), s_.input_shapes.end()))
        .set("shapes", std::vector<std::vector<int64_t>>(s_.shapes.begin(), s_.shapes.end()))
        .set("output_names", s_.output_names)
        .set("threads", ints(s_.threads))
        .set("group", ints(s_.group))
        .set("fallback", s_.fallback)
        .set("check", s_.check)
        .set("robust", s_.robust);
    if (s_.rtol) st.set("rtol", *s_.rtol);
    if (s_.atol) st.set("atol", *s_.atol);
    return st;
  }

  static std::shared_ptr<Primitive> from_state(const PrimitiveState& st);

  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override {
    evaluate(msl::Target::cpu, inputs, outputs);
  }
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override {
    evaluate(msl::Target::cuda, inputs, outputs);
  }

 private:
  std::shared_ptr<detail::LibraryState> lib_;
  State s_;

  static std::string shape_text(const Shape& s) {
    return fmt::format("({}{})", fmt::join(s, ", "), s.size() == 1 ? "," : "");
  }

  // The reference's arguments: the call's arguments in parameter order (omitted: invalid).
  std::vector<Array> reference_args(const std::vector<Array>& in) const {
    std::vector<Array> args;
    for (int k : s_.arg_input) args.push_back(k >= 0 ? in.at(static_cast<size_t>(k)) : Array());
    return args;
  }

  void evaluate(msl::Target target, const std::vector<Array>& in, std::vector<Array>& outputs) {
    // Inputs arrive evaluated and row-contiguous (the call, and replay, inserted the copies).
    if (in.size() != s_.input_shapes.size() || outputs.size() != s_.shapes.size())
      throw std::invalid_argument(fmt::format(
          "[library] kernel '{}': {} inputs/{} outputs given, "
          "its state describes {}/{}",
          s_.label, in.size(), outputs.size(), s_.input_shapes.size(), s_.shapes.size()));
    for (auto& o : outputs) allocate_output(o);
    bool compile_failed = false;
    try {
      auto [program, kernel] = compiled(target, &compile_failed);
      prepare_outputs(in, outputs);
      launch(*kernel, in, outputs);
      (void)program;
    } catch (...) {
      auto e = std::current_exception();
      ReferenceFn reference = lib_->reference(s_.host);
      if (!reference || !s_.fallback || !is_fallback_error(e)) throw;
      if (compile_failed)
        warn_once(s_.label + "|" + std::to_string(static_cast<int>(target)),
                  fallback_message(s_.label, target, e));
      else
        warn_once(s_.label + "|launch",
                  fmt::format("kernel '{}' cannot run ({}); running its reference implementation "
                              "instead",
                              s_.label, first_line(e)));
      auto ref = call_reference(reference, s_.label, reference_args(in), outputs.size());
      for (size_t j = 0; j < outputs.size(); ++j)
        copy_into(conform(ref[j], outputs[j].shape(), outputs[j].dtype(), outputs[j].device(),
                          s_.label, s_.output_names[j]),
                  outputs[j]);
      return;  // the reference ran: nothing to check it against
    }
    if (s_.check) check(in, outputs);
  }

  // Check mode: the reference on the same arguments, compared with what the kernel wrote.
  void check(const std::vector<Array>& in, const std::vector<Array>& outputs) const {
    ReferenceFn reference = lib_->reference(s_.host);
    if (!reference) {
      warn_once(s_.label + "|noref",
                fmt::format("check mode: kernel '{}' has no reference implementation; not checked",
                            s_.label));
      return;
    }
    auto ref = call_reference(reference, s_.label, reference_args(in), outputs.size());
    for (size_t j = 0; j < outputs.size(); ++j)
      compare_outputs(s_.label, s_.output_names[j], host_snapshot(outputs[j]), ref[j], s_.rtol,
                      s_.atol);
  }

  // A materialized host copy of an output being evaluated (reading the output itself would
  // evaluate it again).
  static Array host_snapshot(const Array& out) {
    size_t n = out.nbytes();
    std::vector<uint8_t> bytes(n);
    if (n) backend(out.device()).copy_to_host(bytes.data(), node_of(out)->data(), n);
    return Array::from_bytes(bytes.data(), out.shape(), out.dtype(), Device::cpu());
  }

  // Copy-on-write: each output starts as the previous contents of its buffer (zeros if new).
  void prepare_outputs(const std::vector<Array>& in, std::vector<Array>& outputs) {
    for (size_t j = 0; j < outputs.size(); ++j) {
      int src = s_.output_source[j];
      if (src >= 0) {
        copy_into(in[static_cast<size_t>(src)], outputs[j]);
        continue;
      }
      size_t n = outputs[j].nbytes();
      if (n) backend(outputs[j].device()).fill(node_of(outputs[j])->data(), n, 0, 1);
    }
  }

  bool empty_grid() const { return s_.threads[0] == 0 || s_.threads[1] == 0 || s_.threads[2] == 0; }

  // The compiled program and kernel for `target`, from the library's process-wide variants (the
  // call queued the compile for its device; if nothing started it, it compiles now, here);
  // throws why the kernel cannot run (the caller falls back to the reference).
  std::pair<std::shared_ptr<detail::LibraryBuild>, const CompiledKernel*> compiled(
      msl::Target target, bool* compile_failed) const {
    const detail::LibraryKernelSlot* slot = lib_->find(s_.host);
    if (!slot) lib_->unknown(s_.host);
    if (auto it = lib_->unsupported.find(slot->function); it != lib_->unsupported.end()) {
      *compile_failed = true;
      std::rethrow_exception(it->second);
    }
    auto unit = lib_->unit_for(lib_->variant(target, s_.types, s_.robust), s_.host,
                               /*start=*/false);
    const std::shared_ptr<detail::LibraryBuild>& b = unit->get();
    if (auto f = detail::LibraryState::failure_of(*b, slot->function)) {
      *compile_failed = true;
      std::rethrow_exception(f);
    }
    auto it = b->index.find(s_.host);
    const CompiledKernel* k = it == b->index.end() ? nullptr : &b->program->kernels()[it->second];
    if (!k)
      throw Error(s_.label,
                  fmt::format("[library] internal: kernel '{}' missing from the build", s_.label));
    return {b, k};
  }

  const Array& bound(const Binding& b, const std::vector<Array>& in,
                     const std::vector<Array>& outputs) const {
    return b.output >= 0 ? outputs[static_cast<size_t>(b.output)]
                         : in[static_cast<size_t>(b.input)];
  }

  // Both targets: one binding through the device's backend (kernel/launch.h).
  void launch(const CompiledKernel& k, const std::vector<Array>& in, std::vector<Array>& outputs) {
    LaunchBuilder launch("library", s_.label);
    for (auto& b : s_.bindings) {
      if (b.threadgroup) {
        launch.threadgroup_memory(static_cast<uint32_t>(b.index), b.tg_bytes);
        continue;
      }
      launch.memory(static_cast<uint32_t>(b.index), bound(b, in, outputs));
    }
    if (empty_grid()) return;
    launch.dims(s_.threads, s_.group);
    launch.launch(k, outputs.empty() ? in.front().device() : outputs.front().device(), s_.robust,
                  [&](uint32_t b) { return s_.buffer_name(b); });
  }
};

// Rebuilds a library kernel call from its state; the library must be registered (compiled in
// this process, or loaded from an export file). Every index is checked: a state read from a file
// cannot make the launch write outside its tables.
std::shared_ptr<Primitive> LibraryKernelOp::from_state(const PrimitiveState& st) {
  if (st.version() != 2)
    throw std::invalid_argument(
        fmt::format("LibraryKernel state version {}: this Alloy reads version 2", st.version()));
  auto bad = [](const std::string& what) -> std::invalid_argument {
    return std::invalid_argument("LibraryKernel state: " + what);
  };
  State s;
  s.library = st.get_string("library");
  s.host = st.get_string("kernel");
  s.label = st.get_string("label");
  auto lib = detail::registered_library(s.library);
  if (!lib)
    throw bad(
        fmt::format("library {} (kernel '{}') is not loaded in this process: compile it "
                    "(compile_library) or import the file that holds it",
                    s.library, s.host));
  if (!lib->find(s.host)) lib->unknown(s.host);
  for (auto& t : st.get_as<std::vector<std::string>>("placeholder_types")) {
    auto eq = t.find('=');
    if (eq == std::string::npos) throw bad("placeholder type '" + t + "'");
    s.types[t.substr(0, eq)] = t.substr(eq + 1);
  }
  auto to_shapes = [](const std::vector<std::vector<int64_t>>& v) {
    std::vector<Shape> out;
    for (auto& s : v) {
      checked_numel(s);
      out.emplace_back(s);
    }
    return out;
  };
  s.input_shapes = to_shapes(st.get_as<std::vector<std::vector<int64_t>>>("input_shapes"));
  s.shapes = to_shapes(st.get_as<std::vector<std::vector<int64_t>>>("shapes"));
  s.output_names = st.get_as<std::vector<std::string>>("output_names");
  const int n_in = static_cast<int>(s.input_shapes.size());
  const int n_out = static_cast<int>(s.shapes.size());
  if (static_cast<int>(s.output_names.size()) != n_out) throw bad("output names");
  for (auto v : st.get_as<std::vector<int64_t>>("output_source")) {
    if (v < -1 || v >= n_in) throw bad("output source");
    s.output_source.push_back(static_cast<int>(v));
  }
  if (static_cast<int>(s.output_source.size()) != n_out) throw bad("output sources");
  for (auto v : st.get_as<std::vector<int64_t>>("arg_input")) {
    if (v < -1 || v >= n_in) throw bad("argument input");
    s.arg_input.push_back(static_cast<int>(v));
  }
  auto names = st.get_as<std::vector<std::string>>("binding_names");
  auto rows = st.get_as<std::vector<std::vector<int64_t>>>("bindings");
  if (names.size() != rows.size()) throw bad("binding names");
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (r.size() != 5) throw bad("binding");
    Binding b;
    b.name = names[i];
    b.threadgroup = r[0] != 0;
    if (r[1] < 0 || r[1] >= (b.threadgroup ? 8 : static_cast<int64_t>(LaunchBuilder::kMaxArgs)))
      throw bad(fmt::format("binding index {}", r[1]));
    b.index = static_cast<int>(r[1]);
    if (r[2] < -1 || r[2] >= n_in || r[3] < -1 || r[3] >= n_out) throw bad("binding slot");
    if (!b.threadgroup && r[2] < 0 && r[3] < 0) throw bad("binding slot");
    b.input = static_cast<int>(r[2]);
    b.output = static_cast<int>(r[3]);
    if (r[4] < 0 || static_cast<uint64_t>(r[4]) > kMaxThreadgroupMemory) throw bad("tg bytes");
    b.tg_bytes = static_cast<uint64_t>(r[4]);
    s.bindings.push_back(b);
  }
  auto dims = [&](const char* key) {
    auto v = st.get_as<std::vector<int64_t>>(key);
    if (v.size() != 3) throw bad(key);
    Dims d;
    for (int i = 0; i < 3; ++i) {
      if (v[i] < 0 || v[i] > std::numeric_limits<int>::max()) throw bad(key);
      d[i] = static_cast<int>(v[i]);
    }
    return d;
  };
  s.threads = dims("threads");
  s.group = dims("group");
  kernel::check_grid_threads("[library]", s.host, s.threads);
  if (s.group[0] < 1 || s.group[1] < 1 || s.group[2] < 1 ||
      int64_t{s.group[0]} * s.group[1] * s.group[2] > 1024)
    throw bad("group");
  s.fallback = st.get_as<bool>("fallback");
  s.check = st.get_as<bool>("check");
  s.robust = st.get_as<bool>("robust");
  if (st.has("rtol")) s.rtol = st.get_as<double>("rtol");
  if (st.has("atol")) s.atol = st.get_as<double>("atol");
  return std::make_shared<LibraryKernelOp>(std::move(lib), std::move(s));
}

// ---- argument binding ------------------------------------------------------------------------

std::string expected_text(const KernelParamInfo& p, std::optional<Dtype> dt) {
  std::string what = dt ? std::string(dtype_name(*dt))
                        : (p.placeholder.empty() ? "any dtype (" + p.element_type + ")"
                                                 : "the dtype of placeholder " + p.placeholder);
  if (p.kind == KernelParamInfo::Kind::scalar) return "a number or 0-d array of " + what;
  if (p.writable) return "an array of " + what + " (written: its new contents are returned)";
  return "an array of " + what;
}

std::string expected_list(const KernelInfo& info) {
  std::string s;
  int n = 0;
  for (auto& p : info.params) {
    if (!p.takes_argument()) continue;
    std::optional<Dtype> dt = p.dtype;
    s += fmt::format("\n    {}. {} ({}): {}", ++n, p.name, p.type, expected_text(p, dt));
  }
  if (n == 0) s = "\n    (no arguments)";
  return s;
}

[[noreturn]] void bad_arg(const KernelInfo& info, size_t pos, const KernelParamInfo& p,
                          const std::string& why) {
  throw std::invalid_argument(fmt::format(
      "[library] kernel '{}': argument {} ('{}', {}): {}.\n  {} takes:{}\n  signature: {}",
      info.name, pos + 1, p.name, p.type, why, info.name, expected_list(info), info.signature()));
}

// A number as a 0-d array of the parameter's dtype (exact for integers; range-checked).
Array number_array(const KernelArg::Value& v, Dtype dt, Device dev, const KernelInfo& info,
                   size_t pos, const KernelParamInfo& p) {
  double d = 0;
  bool integral = true;
  int64_t i = 0;
  uint64_t u = 0;
  bool negative = false;  // the value is i (< 0), else u
  if (auto* x = std::get_if<double>(&v)) {
    d = *x;
    integral = std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9.2e18;
    if (integral) {
      i = static_cast<int64_t>(d);
      negative = i < 0;
      u = static_cast<uint64_t>(negative ? 0 : i);
    }
  } else if (auto* x = std::get_if<int64_t>(&v)) {
    i = *x;
    d = static_cast<double>(i);
    negative = i < 0;
    u = negative ? 0 : static_cast<uint64_t>(i);
  } else if (auto* x = std::get_if<uint64_t>(&v)) {
    u = *x;
    d = static_cast<double>(u);
    i = static_cast<int64_t>(u);
  } else if (auto* x = std::get_if<bool>(&v)) {
    i = *x;
    u = *x;
    d = *x;
  }
  if (is_floating(dt)) return Array::from_doubles({d}, {}, dt, dev);
  if (!integral) bad_arg(info, pos, p, fmt::format("{} is not an integer", d));
  auto range = [&](int64_t lo, uint64_t hi) {
    if (negative ? i < lo : u > hi)
      bad_arg(info, pos, p,
              fmt::format("{} does not fit in {}", negative ? std::to_string(i) : std::to_string(u),
                          p.element_type));
  };
  uint8_t bytes[8] = {};
  switch (dt) {
    case Dtype::bool_: {
      if (negative || u > 1) bad_arg(info, pos, p, "expected a bool (or 0/1)");
      bool b = u != 0;
      std::memcpy(bytes, &b, 1);
      break;
    }
    case Dtype::int8:
      range(INT8_MIN, INT8_MAX);
      bytes[0] = static_cast<uint8_t>(i);
      break;
    case Dtype::uint8:
      range(0, UINT8_MAX);
      bytes[0] = static_cast<uint8_t>(u);
      break;
    case Dtype::int16: {
      range(INT16_MIN, INT16_MAX);
      int16_t x = static_cast<int16_t>(i);
      std::memcpy(bytes, &x, 2);
      break;
    }
    case Dtype::uint16: {
      range(0, UINT16_MAX);
      uint16_t x = static_cast<uint16_t>(u);
      std::memcpy(bytes, &x, 2);
      break;
    }
    case Dtype::int32: {
      range(INT32_MIN, INT32_MAX);
      int32_t x = static_cast<int32_t>(i);
      std::memcpy(bytes, &x, 4);
      break;
    }
    case Dtype::uint32: {
      range(0, UINT32_MAX);
      uint32_t x = static_cast<uint32_t>(u);
      std::memcpy(bytes, &x, 4);
      break;
    }
    case Dtype::int64: {
      range(INT64_MIN, INT64_MAX);
      std::memcpy(bytes, &i, 8);
      break;
    }
    case Dtype::uint64: {
      range(0, UINT64_MAX);
      std::memcpy(bytes, &u, 8);
      break;
    }
    default:
      return Array::from_doubles({d}, {}, dt, dev);
  }
  return Array::from_bytes(bytes, {}, dt, dev);
}

Dtype natural_dtype(const KernelArg::Value& v) {
  if (std::holds_alternative<bool>(v)) return Dtype::bool_;
  if (std::holds_alternative<double>(v)) return Dtype::float32;
  if (std::holds_alternative<uint64_t>(v)) return Dtype::uint32;
  return Dtype::int32;
}

Dims effective_group(const Dims& threads, const Dims& group) {
  Dims t;
  for (int d = 0; d < 3; ++d) t[d] = std::max(1, std::min(group[d], threads[d]));
  return t;
}

std::string dims_str(const Dims& d) {
  return fmt::format("({}, {}, {})", d[0], d[1], d[2]);
}

}  // namespace

// ---- the call --------------------------------------------------------------------------------

namespace {

std::vector<Array> call_kernel(const std::shared_ptr<detail::LibraryState>& s,
                               const detail::LibraryKernelSlot& slot,
                               const std::vector<KernelArg>& args, const LibraryCall& call) {
  const KernelInfo& info = s->info(slot);
  const std::string label =
      s->options.name == "library" ? info.name : s->options.name + ":" + info.name;
  std::vector<const KernelParamInfo*> data;
  for (auto& p : info.params)
    if (p.takes_argument()) data.push_back(&p);
  if (args.size() != data.size())
    throw std::invalid_argument(fmt::format(
        "[library] kernel '{}' takes {} argument(s), {} given.\n  {} takes:{}\n  signature: {}",
        info.name, data.size(), args.size(), info.name, expected_list(info), info.signature()));
  Device dev = call.stream ? call.stream->device : call.device ? *call.device : default_device();
  if (call.stream && call.device && *call.device != call.stream->device)
    throw std::invalid_argument(
        fmt::format("[library] `device` ({}) and `stream` ({}) disagree: give one of them",
                    call.device->str(), call.stream->str()));
  if (dev.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument("[library] no GPU is available (no CUDA driver or device)");

  // Dtype placeholders bound by this call's arguments.
  std::map<std::string, Dtype> bound;
  for (auto& [input, ph] : s->options.template_dtypes) {
    for (size_t k = 0; k < data.size(); ++k) {
      if (data[k]->name != input) continue;
      const auto& v = args[k].value();
      if (auto* a = std::get_if<Array>(&v)) {
        if (a->valid()) bound[ph] = a->dtype();
      } else if (auto* nb = std::get_if<KernelArg::NewBuffer>(&v)) {
        bound[ph] = nb->dtype;
      } else if (!args[k].omitted()) {
        bound[ph] = natural_dtype(v);
      }
    }
  }

  LibraryKernelOp::State st;
  st.label = label;
  st.robust = s->robust();
  std::vector<Array> inputs;
  std::vector<Array> ref_args(data.size());
  struct Out {
    const KernelParamInfo* param;
    size_t pos;
    Shape shape;
    Dtype dtype = Dtype::float32;
    bool infer = false;
  };
  std::vector<Out> outs;
  std::optional<int64_t> first_size;
  std::vector<Binding> bindings;
  for (size_t k = 0; k < data.size(); ++k) {
    const KernelParamInfo& p = *data[k];
    std::optional<Dtype> want = p.dtype;
    if (!p.placeholder.empty()) {
      auto it = bound.find(p.placeholder);
      if (it == bound.end()) {
        std::string setter;
        for (auto& [input, ph] : s->options.template_dtypes)
          if (ph == p.placeholder) setter += (setter.empty() ? "'" : "/'") + input + "'";
        bad_arg(info, k, p,
                fmt::format("its type uses placeholder {}, which is set by argument {}, and this "
                            "call does not give that argument",
                            p.placeholder, setter));
      }
      want = it->second;
    }
    const auto& v = args[k].value();
    Binding b;
    b.name = p.name;
    b.index = p.index;
    if (auto* a0 = std::get_if<Array>(&v)) {
      if (!a0->valid()) bad_arg(info, k, p, "the array is invalid (empty handle)");
      Array a = *a0;
      if (want && a.dtype() != *want)
        bad_arg(info, k, p,
                fmt::format("expected {}, got an array of {}", expected_text(p, want),
                            dtype_name(a.dtype())));
      if (dev.type == Device::Type::gpu && a.dtype() == Dtype::float64)
        bad_arg(info, k, p, "float64 arrays are not supported on the GPU (Metal has no double)");
      // A scalar takes one element (a vector type: one per lane; a struct: its bytes, any size).
      int lanes = parse_metal_type(p.element_type).lanes;
      if (p.kind == KernelParamInfo::Kind::scalar && want && a.size() != lanes)
        bad_arg(info, k, p,
                fmt::format("expected {}{}, got an array of {} elements", expected_text(p, want),
                            lanes > 1 ? fmt::format(" with {} elements", lanes) : "", a.size()));
      if (a.device() != dev) a = a.to(dev);
      if (!a.is_row_contiguous()) a = a.contiguous();
      if (!first_size && p.kind == KernelParamInfo::Kind::buffer) first_size = a.size();
      b.input = static_cast<int>(inputs.size());
      st.arg_input.push_back(b.input);
      inputs.push_back(a);
      ref_args[k] = a;
      if (p.writable) {
        b.output = static_cast<int>(outs.size());
        st.output_source.push_back(b.input);
        outs.push_back({&p, k, a.shape(), a.dtype(), false});
      }
    } else if (auto* nbuf = std::get_if<KernelArg::NewBuffer>(&v)) {
      if (!p.writable) bad_arg(info, k, p, "a new buffer can only be given to a writable buffer");
      if (want && nbuf->dtype != *want)
        bad_arg(info, k, p,
                fmt::format("expected {}, got a new buffer of {}", expected_text(p, want),
                            dtype_name(nbuf->dtype)));
      int64_t n = 1;
      for (auto d : nbuf->shape) n *= d;
      if (!first_size) first_size = n;
      st.arg_input.push_back(-1);
      b.output = static_cast<int>(outs.size());
      st.output_source.push_back(-1);
      outs.push_back({&p, k, nbuf->shape, nbuf->dtype, false});
    } else if (args[k].omitted()) {
      if (!p.writable) bad_arg(info, k, p, "missing argument: " + expected_text(p, want));
      st.arg_input.push_back(-1);
      b.output = static_cast<int>(outs.size());
      st.output_source.push_back(-1);
      outs.push_back({&p, k, {}, want.value_or(Dtype::float32), true});
    } else {  // a number
      if (p.kind != KernelParamInfo::Kind::scalar)
        bad_arg(info, k, p, "expected " + expected_text(p, want) + ", got a number");
      if (!want || parse_metal_type(p.element_type).lanes != 1)
        bad_arg(
            info, k, p,
            "a number cannot be converted to " + p.element_type + "; pass an array of its bytes");
      Array a = number_array(v, *want, dev, info, k, p);
      b.input = static_cast<int>(inputs.size());
      st.arg_input.push_back(b.input);
      inputs.push_back(a);
      ref_args[k] = a;
    }
    bindings.push_back(b);
  }

  // Threadgroup memory of [[threadgroup(n)]] parameters.
  std::set<int> tg_indices;
  uint64_t tg_total = 0;
  for (auto& p : info.params) {
    if (p.kind != KernelParamInfo::Kind::threadgroup) continue;
    tg_indices.insert(p.index);
    auto it = call.threadgroup_memory.find(p.index);
    if (it == call.threadgroup_memory.end() || it->second == 0)
      throw std::invalid_argument(fmt::format(
          "[library] kernel '{}': parameter '{}' ({} [[threadgroup({})]]) needs its size in bytes: "
          "threadgroup_memory[{}] = bytes.\n  signature: {}",
          info.name, p.name, p.type, p.index, p.index, p.index, info.signature()));
    if (p.index < 0 || p.index >= 8)
      throw std::invalid_argument(
          fmt::format("[library] kernel '{}': [[threadgroup({})]] is out of range (0..7 supported)",
                      info.name, p.index));
    Binding b;
    b.threadgroup = true;
    b.index = p.index;
    b.tg_bytes = it->second;
    tg_total += it->second;
    bindings.push_back(b);
  }
  for (auto& [n, bytes] : call.threadgroup_memory)
    if (!tg_indices.count(n))
      throw std::invalid_argument(fmt::format(
          "[library] kernel '{}' has no [[threadgroup({})]] parameter (threadgroup_memory sets "
          "one).\n  signature: {}",
          info.name, n, info.signature()));
  if (tg_total > kMaxThreadgroupMemory)
    throw std::invalid_argument(fmt::format(
        "[library] kernel '{}': {} bytes of threadgroup memory requested; Metal guarantees {}",
        info.name, tg_total, kMaxThreadgroupMemory));

  // Dispatch: threads are the total per dimension (dispatchThreads), not threadgroups.
  int max_group = info.max_total_threads > 0 ? std::min(info.max_total_threads, 1024) : 1024;
  Dims threads;
  if (call.threads) {
    threads = *call.threads;
  } else {
    if (!first_size)
      throw std::invalid_argument(fmt::format(
          "[library] kernel '{}': `threads` is required (no array argument to take its size from)",
          info.name));
    if (*first_size > std::numeric_limits<int>::max())
      throw std::invalid_argument(fmt::format(
          "[library] kernel '{}': pass `threads` explicitly for arrays of more than 2^31 elements",
          info.name));
    threads = {static_cast<int>(*first_size), 1, 1};
  }
  for (int d = 0; d < 3; ++d)
    if (threads[d] < 0)
      throw std::invalid_argument(fmt::format("[library] kernel '{}': threads must be >= 0, got {}",
                                              info.name, dims_str(threads)));
  kernel::check_grid_threads("[library]", info.name, threads);
  Dims group = call.group_size.value_or(
      Dims{std::max(1, std::min(threads[0], std::min(256, max_group))), 1, 1});
  int64_t group_threads = int64_t{group[0]} * group[1] * group[2];
  for (int d = 0; d < 3; ++d)
    if (group[d] <= 0)
      throw std::invalid_argument(fmt::format(
          "[library] kernel '{}': group_size must be > 0, got {}", info.name, dims_str(group)));
  if (group_threads > max_group)
    throw std::invalid_argument(
        fmt::format("[library] kernel '{}': group_size {} has {} threads; the maximum is {}{}",
                    info.name, dims_str(group), group_threads, max_group,
                    info.max_total_threads > 0 ? " ([[max_total_threads_per_threadgroup]])" : ""));
  st.threads = threads;
  st.group = effective_group(threads, group);
  st.bindings = std::move(bindings);

  ReferenceFn reference = s->reference(info.name);
  bool fallback = call.fallback.value_or(s->fallback());
  bool explicit_check = call.check.value_or(false);
  bool check = call.check.value_or(s->options.check.value_or(check_from_env()));
  if (check && !reference) {
    if (explicit_check)
      throw std::invalid_argument(fmt::format(
          "[library] check mode needs a reference implementation of kernel '{}' (set_reference)",
          info.name));
    warn_once(
        label + "|noref",
        fmt::format("check mode: kernel '{}' has no reference implementation; not checked", label));
    check = false;
  }

  // Outputs the call leaves to the reference.
  std::optional<std::vector<Array>> ref_out;
  auto run_reference = [&]() -> std::vector<Array>& {
    if (!ref_out) ref_out = call_reference(reference, label, ref_args, outs.size());
    return *ref_out;
  };
  for (size_t j = 0; j < outs.size(); ++j) {
    if (!outs[j].infer) continue;
    if (!reference)
      bad_arg(info, outs[j].pos, *outs[j].param,
              "missing argument: give an array (or KernelArg::output(shape, dtype)); only a "
              "kernel with a reference can infer it");
    const Array& r = run_reference()[j];
    outs[j].shape = r.shape();
    if (!outs[j].param->dtype && outs[j].param->placeholder.empty()) outs[j].dtype = r.dtype();
  }
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  for (auto& o : outs) {
    shapes.push_back(o.shape);
    dtypes.push_back(o.dtype);
  }
  st.shapes = shapes;
  for (auto& o : outs) st.output_names.push_back(o.param->name);

  // The placeholder types of this call: which compiled variant the kernel needs.
  std::map<std::string, std::string> types;
  for (auto& [input, ph] : s->options.template_dtypes) {
    auto it = bound.find(ph);
    types[ph] = std::string(msl_type_name(it == bound.end() ? Dtype::float32 : it->second));
  }
  msl::Target target = dev.type == Device::Type::gpu ? msl::Target::cuda : msl::Target::cpu;
  bool unsupported = false;
  if (auto it = s->unsupported.find(slot.function); it != s->unsupported.end()) {
    // A kernel set aside at reading (an unsupported feature) cannot run anywhere: without a
    // reference to fall back to, that is known now (its evaluation would only raise it).
    std::exception_ptr failure = it->second;
    if (!reference || !fallback || !is_fallback_error(failure)) std::rethrow_exception(failure);
    unsupported = true;
  }
  st.library = s->key;
  st.host = info.name;
  st.types = types;
  st.fallback = fallback;
  st.check = check;
  st.rtol = call.rtol;
  st.atol = call.atol;
  for (auto& a : inputs) {
    if (!a.is_row_contiguous()) a = a.contiguous();
    st.input_shapes.push_back(a.shape());
  }
  // Nothing is compiled or run here. The compilation of this kernel for the call's device (lazy:
  // of this kernel alone, unless precompile() put it in a larger unit) is queued on the compile
  // pool so that kernels called one after another compile in parallel (a compile queued alone is
  // left to the evaluation); the evaluation binds the program of the device it runs on.
  if (!unsupported) s->unit_for(s->variant(target, types, st.robust), info.name, /*start=*/true);
  auto prim = std::make_shared<LibraryKernelOp>(s, std::move(st));
  return make_pending(prim, std::move(inputs), shapes, dtypes,
                      call.stream ? *call.stream : default_stream(dev));
}

}  // namespace

std::string compile_library_cubin(const Library& lib, const std::string& arch,
                                  const std::map<std::string, Dtype>& placeholders,
                                  const std::vector<std::string>& kernels) {
  std::string why;
  if (!gpu_compiler_available(&why)) return why.empty() ? "NVRTC not found" : why;
  const auto& s = detail::LibraryAccess::state(lib);
  std::map<std::string, std::string> types;
  for (auto& [input, ph] : s->options.template_dtypes) {
    auto it = placeholders.find(ph);
    types[ph] = std::string(msl_type_name(it == placeholders.end() ? Dtype::float32 : it->second));
  }
  std::set<std::string> stubbed;
  for (auto& [fn, e] : s->unsupported) stubbed.insert(fn);
  SourceMap map;
  map.label = s->options.name;
  std::set<std::string> keep;
  for (auto& k : kernels) {
    if (!s->find(k)) s->unknown(k);
    keep.insert(k);
  }
  auto t0 = std::chrono::steady_clock::now();
  map.msl = s->render(types, stubbed, kernels.empty() ? nullptr : &keep);
  map.user_text = true;
  auto topt = translate_options(map, msl::Target::cuda, {});
  topt.expand_macros = false;  // render() is of the expanded source
  auto tr = msl::translate(map.msl, topt);
  double translate_ms = trace::ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  compile_cubin(tr, s->options.math_mode, map, arch);
  if (trace::build())
    std::fprintf(stderr,
                 "alloy: library %s: cubin of %zu kernel(s): render+translate %.3f ms, "
                 "NVRTC %.3f ms\n",
                 s->options.name.c_str(), tr.kernels.size(), translate_ms, trace::ms_since(t1));
  return "";
}

std::string library_unit_source(const Library& lib, const std::vector<std::string>& kernels) {
  const auto& s = detail::LibraryAccess::state(lib);
  std::map<std::string, std::string> types;
  for (auto& [input, ph] : s->options.template_dtypes)
    types[ph] = std::string(msl_type_name(Dtype::float32));
  std::set<std::string> stubbed, keep;
  for (auto& [fn, e] : s->unsupported) stubbed.insert(fn);
  for (auto& k : kernels) {
    if (!s->find(k)) s->unknown(k);
    keep.insert(k);
  }
  return s->render(types, stubbed, kernels.empty() ? nullptr : &keep);
}

LibraryStats library_stats(const Library& lib) {
  const auto& s = detail::LibraryAccess::state(lib);
  return {s->units_built.load(), s->kernels_built.load()};
}

}  // namespace kernel

// ---- public API ------------------------------------------------------------------------------

namespace kernel {
namespace {

// Reads a library whose includes are expanded and function constants applied (`resolved`):
// kernel macros, reflection, the content key; registers it. `require_runnable`: a kernel that
// reading sets aside and that has no reference fails the library now (compile_library); an
// imported library keeps it (its calls raise the error).
std::shared_ptr<detail::LibraryState> read_library(const std::string& source, std::string resolved,
                                                   const LibraryOptions& options,
                                                   bool require_runnable, double resolve_ms) {
  auto s = std::make_shared<detail::LibraryState>();
  s->source = source;
  s->resolved = std::move(resolved);
  s->options = options;
  s->references = std::move(s->options.references);
  s->options.references.clear();
  s->key = library_key({options.name, s->resolved, options.template_dtypes, options.math_mode});
  auto t0 = std::chrono::steady_clock::now();
  std::string expanded = msl::expand_kernel_macros(s->resolved);
  double expand_ms = resolve_ms + trace::ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  s->toks = msl::lex(expanded);
  s->regions = kernel::find_kernel_regions(s->toks);
  double lex_ms = trace::ms_since(t1);
  auto t2 = std::chrono::steady_clock::now();
  msl::Translation tr = s->reflect();
  double reflect_ms = trace::ms_since(t2);
  auto t3 = std::chrono::steady_clock::now();
  if (tr.kernels.empty())
    throw std::invalid_argument("[library] no kernel function found in the source of '" +
                                options.name + "'");
  for (auto& e : tr.kernels) {
    if (!s->index.emplace(e.host_name, s->kernels.size()).second)
      throw std::invalid_argument(
          fmt::format("[library] two kernels of '{}' are named '{}'", options.name, e.host_name));
    auto& slot = s->kernels.emplace_back();
    slot.name = e.host_name;
    slot.function = e.base_name;
    slot.index = s->kernels.size() - 1;
    slot.entry = std::move(e);
  }
  if (trace::build())
    std::fprintf(stderr,
                 "alloy: library %s read: %zu kernels; includes/constants/macros %.3f ms, lex "
                 "%.3f ms, reflection %.3f ms, parameters %.3f ms\n",
                 options.name.c_str(), s->kernels.size(), expand_ms, lex_ms, reflect_ms,
                 trace::ms_since(t3));
  for (auto& [name, fn] : s->references)
    if (!s->find(name)) s->unknown(name);
  for (auto& [input, ph] : options.template_dtypes) {
    bool used = false;
    for (auto& k : s->kernels)
      for (auto& p : s->info(k).params) used |= p.takes_argument() && p.name == input;
    if (!used)
      throw std::invalid_argument(fmt::format(
          "[library] template_dtypes: no kernel of '{}' has an argument named '{}' (it sets "
          "placeholder {})",
          options.name, input, ph));
  }
  // A kernel that reading set aside (an unsupported feature) and that has no reference to fall
  // back to could never run: known without compiling, so it fails now. Compile errors show at a
  // kernel's first call (compilation is lazy) or in precompile().
  bool fallback = s->fallback();
  if (require_runnable)
    for (auto& k : s->kernels)
      if (auto it = s->unsupported.find(k.function); it != s->unsupported.end())
        if (!(fallback && s->references.count(k.name))) std::rethrow_exception(it->second);
  detail::register_library(s);
  return s;
}

}  // namespace

std::string library_key(const LibrarySpec& spec) {
  // XXH3-128 over the length-prefixed fields that decide what the kernels compute (the name only
  // labels messages).
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  auto add = [&](std::string_view v) {
    uint64_t n = v.size();
    XXH3_128bits_update(st, &n, sizeof n);
    XXH3_128bits_update(st, v.data(), v.size());
  };
  add("alloy-library-v1");
  add(spec.source);
  add(spec.math_mode);
  for (auto& [input, ph] : spec.template_dtypes) {
    add(input);
    add(ph);
  }
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

Library load_library(const LibrarySpec& spec) {
  check_math_mode(spec.math_mode);
  LibraryOptions o;
  o.name = spec.name;
  o.template_dtypes = spec.template_dtypes;
  o.math_mode = spec.math_mode;
  return detail::LibraryAccess::make(read_library(spec.source, spec.source, o, false, 0));
}

bool is_library_kernel(const Primitive& p) {
  return dynamic_cast<const LibraryKernelOp*>(&p) != nullptr;
}

LibrarySpec library_spec(const Primitive& p) {
  auto* op = dynamic_cast<const LibraryKernelOp*>(&p);
  if (!op) throw std::invalid_argument(p.label() + " is not a library kernel call");
  const auto& lib = op->library();
  return {lib.options.name, lib.resolved, lib.options.template_dtypes, lib.options.math_mode};
}

LibrarySpec library_spec(const Library& lib) {
  const auto& s = *detail::LibraryAccess::state(lib);
  return {s.options.name, s.resolved, s.options.template_dtypes, s.options.math_mode};
}

ALLOY_REGISTER_PRIMITIVE(LibraryKernel, LibraryKernelOp::from_state)

}  // namespace kernel

Library compile_library(const std::string& source, const LibraryOptions& options) {
  kernel::check_math_mode(options.math_mode);
  auto t0 = std::chrono::steady_clock::now();
  // Headers, then function constants (both before anything reads the source); macros next.
  std::string included =
      msl::expand_includes(source, {options.headers, options.include_dirs, options.name});
  msl::FunctionConstants constants{
      {options.function_constants.begin(), options.function_constants.end()},
      {options.named_function_constants.begin(), options.named_function_constants.end()}};
  std::string resolved = msl::apply_function_constants(included, constants, options.name);
  return Library(kernel::read_library(source, std::move(resolved), options,
                                      /*require_runnable=*/true, trace::ms_since(t0)));
}

std::vector<std::string> Library::kernel_names() const {
  std::vector<std::string> names;
  for (auto& k : state_->kernels) names.push_back(k.name);
  return names;
}

bool Library::has_kernel(std::string_view name) const {
  return state_->find(name) != nullptr;
}

const KernelInfo& Library::kernel_info(std::string_view name) const {
  auto* k = state_->find(name);
  if (!k) state_->unknown(name);
  return state_->info(*k);
}

LibraryKernel Library::kernel(std::string_view name) const {
  if (!state_->find(name)) state_->unknown(name);
  return LibraryKernel(state_, std::string(name));
}

std::vector<Array> Library::operator()(std::string_view name, const std::vector<KernelArg>& args,
                                       const LibraryCall& call) const {
  auto* k = state_->find(name);
  if (!k) state_->unknown(name);
  return kernel::call_kernel(state_, *k, args, call);
}

void Library::set_reference(std::string_view name, ReferenceFn fn) const {
  kernel(name).set_reference(std::move(fn));
}

void Library::precompile(const PrecompileOptions& options) const {
  auto& s = state_;
  Device dev = options.device.value_or(default_device());
  if (dev.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument("[library] no GPU is available (no CUDA driver or device)");
  std::map<std::string, std::string> types;
  for (auto& [input, ph] : s->options.template_dtypes) {
    auto it = options.placeholders.find(ph);
    types[ph] =
        std::string(msl_type_name(it == options.placeholders.end() ? Dtype::float32 : it->second));
  }
  for (auto& [ph, dt] : options.placeholders)
    if (!types.count(ph))
      throw std::invalid_argument(fmt::format(
          "[library] precompile: '{}' is not a dtype placeholder of '{}'", ph, s->options.name));
  msl::Target target = dev.type == Device::Type::gpu ? msl::Target::cuda : msl::Target::cpu;
  auto v = s->variant(target, types, s->robust());
  // The kernels no unit compiles yet, in source order, split into a few units of neighbouring
  // kernels (one per compile thread, so that they compile in parallel; each unit pays the
  // compiler's fixed cost once). Kernels set aside at reading are not compiled.
  std::vector<std::string> todo;
  std::vector<std::shared_ptr<detail::LibraryJob>> units;
  std::set<std::string> only(options.kernels.begin(), options.kernels.end());
  for (auto& k : only)
    if (!s->find(k)) s->unknown(k);
  auto wanted = [&](const std::string& host) { return only.empty() || only.count(host) > 0; };
  {
    std::lock_guard lock(v->mu);
    for (auto& k : s->kernels)
      if (wanted(k.name) && !s->unsupported.count(k.function) && !v->unit_of.count(k.name))
        todo.push_back(k.name);
    size_t shards = std::min<size_t>(todo.size(), std::max(1, kernel::compile_concurrency()));
    for (size_t i = 0; i < shards; ++i) {
      std::set<std::string> hosts(
          todo.begin() + static_cast<ptrdiff_t>(todo.size() * i / shards),
          todo.begin() + static_cast<ptrdiff_t>(todo.size() * (i + 1) / shards));
      auto unit = s->make_unit(v, hosts);
      for (auto& h : hosts) v->unit_of[h] = unit;
      units.push_back(unit);
    }
  }
  if (options.background) {
    for (auto& u : units) kernel::compile_async([u] { u->run(); });
    return;
  }
  // All but the first on the pool; the first (and any the pool has not started) on this thread.
  for (size_t i = 1; i < units.size(); ++i) kernel::compile_async([u = units[i]] { u->run(); });
  if (!units.empty()) units[0]->run();
  for (auto& u : units) u->run();
  // Errors show now, as compile_library showed them before lazy compilation: a kernel that
  // cannot run and has no reference to fall back to.
  bool fallback = s->fallback();
  for (auto& k : s->kernels) {
    if (!wanted(k.name)) continue;
    std::exception_ptr failure;
    if (auto it = s->unsupported.find(k.function); it != s->unsupported.end()) {
      failure = it->second;
    } else {
      std::shared_ptr<detail::LibraryJob> unit;
      {
        std::lock_guard lock(v->mu);
        unit = v->unit_of.at(k.name);
      }
      failure = detail::LibraryState::failure_of(*unit->get(), k.function);
    }
    if (failure && !(fallback && s->reference(k.name))) std::rethrow_exception(failure);
  }
}

const std::string& Library::source() const {
  return state_->source;
}

const KernelInfo& LibraryKernel::info() const {
  return state_->info(*state_->find(name_));
}

std::vector<Array> LibraryKernel::operator()(const std::vector<KernelArg>& args,
                                             const LibraryCall& call) const {
  return kernel::call_kernel(state_, *state_->find(name_), args, call);
}

void LibraryKernel::set_reference(ReferenceFn fn) const {
  std::lock_guard lock(state_->mu);
  if (fn)
    state_->references[name_] = std::move(fn);
  else
    state_->references.erase(name_);
}

bool LibraryKernel::has_reference() const {
  std::lock_guard lock(state_->mu);
  return state_->references.count(name_) > 0;
}

}  // namespace alloy
