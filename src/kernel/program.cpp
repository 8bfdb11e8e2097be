#include "kernel/program.h"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "alloy/errors.h"
#include "core/backend.h"
#include "core/trace.h"
#include "kernel/compile_pool.h"

namespace alloy::kernel {

std::string SourceMap::describe(int line) const {
  if (user_text) return fmt::format("line {}", line);
  if (header_lines > 0 && line >= header_first && line < header_first + header_lines)
    return fmt::format("header line {}", line - header_first + 1);
  if (body_lines > 0 && line >= body_first && line < body_first + body_lines)
    return fmt::format("body line {}", line - body_first + 1);
  return fmt::format("generated signature line {}", line);
}

std::string SourceMap::line_text(int line) const {
  std::istringstream in(msl);
  std::string s;
  for (int i = 1; std::getline(in, s); ++i)
    if (i == line) return s;
  return "";
}

void check_math_mode(const std::string& mode) {
  if (mode != "safe" && mode != "relaxed" && mode != "fast")
    throw std::invalid_argument("[metal_kernel] Invalid math_mode '" + mode +
                                "': expected 'safe', 'relaxed' or 'fast'.");
}

std::string map_compile_log(const SourceMap& src, const std::string& log,
                            const std::string& filename) {
  // g++/clang: "kernel.metal:12:5: error: msg"; NVRTC: "kernel.metal(12): error: msg".
  // (Plain string scanning: std::regex crashed inside Python processes that load another
  // libstdc++ first, e.g. with torch.)
  std::string out =
      fmt::format("[{}] Failed to compile {} '{}':\n", src.user_text ? "library" : "metal_kernel",
                  src.user_text ? "library" : "kernel", src.label);
  int errors = 0;
  std::istringstream lines(log);
  for (std::string l; std::getline(lines, l);) {
    size_t p = l.find(filename);
    if (p == std::string::npos) continue;
    p += filename.size();
    auto digits = [&](size_t q, size_t* end) {
      size_t e = q;
      while (e < l.size() && std::isdigit(static_cast<unsigned char>(l[e]))) ++e;
      *end = e;
      return e > q ? std::stoi(l.substr(q, e - q)) : -1;
    };
    int line = -1;
    size_t e = p;
    if (p < l.size() && l[p] == ':') {  // :LINE[:COL]:
      line = digits(p + 1, &e);
      if (e < l.size() && l[e] == ':') {
        size_t c;
        if (digits(e + 1, &c) >= 0) e = c;
      }
      if (e >= l.size() || l[e] != ':') continue;
      ++e;
    } else if (p < l.size() && l[p] == '(') {  // (LINE):
      line = digits(p + 1, &e);
      if (e + 1 >= l.size() || l[e] != ')' || l[e + 1] != ':') continue;
      e += 2;
    }
    if (line < 0) continue;
    while (e < l.size() && l[e] == ' ') ++e;
    std::string kind;
    for (const char* k : {"fatal error", "error", "warning", "note"})
      if (l.compare(e, std::strlen(k), k) == 0) {
        kind = k;
        break;
      }
    if (kind.empty() || kind == "warning") continue;
    e += kind.size();
    while (e < l.size() && (l[e] == ':' || l[e] == ' ')) ++e;
    out += fmt::format("  {}: {}: {}\n", src.describe(line), kind, l.substr(e));
    std::string text = src.line_text(line);
    if (!text.empty() && kind != "note") out += "    | " + text + "\n";
    if (kind != "note") ++errors;
    if (errors >= 10) break;
  }
  if (errors == 0) {
    // The error is outside the user's text (an included header, the prelude or the generated
    // entry): show the raw log's error lines with the two lines after each (the source line and
    // the caret), else its first lines. Warnings before the first error are left out.
    std::vector<std::string> all;
    std::istringstream in(log);
    for (std::string s; std::getline(in, s);) all.push_back(s);
    int shown = 0;
    for (size_t i = 0; i < all.size() && shown < 30; ++i) {
      if (all[i].find("error") == std::string::npos) continue;
      for (size_t j = i; j < all.size() && j < i + 3 && shown < 30; ++j, ++shown)
        out += "  " + all[j] + "\n";
      i += 2;
    }
    for (size_t i = 0; shown == 0 && i < all.size() && i < 30; ++i) out += "  " + all[i] + "\n";
  }
  return out;
}

namespace {
const char* kFilename = "kernel.metal";
}  // namespace

msl::TranslateOptions translate_options(const SourceMap& source, msl::Target target,
                                        const BindOptions& bind) {
  msl::TranslateOptions o;
  o.target = target;
  o.label = source.label;
  o.filename = kFilename;
  o.robust = bind.robust;
  o.distinct_buffers = bind.distinct_buffers;
  o.small_buffers = bind.small_buffers;
  o.block_buffers = bind.block_buffers;
  return o;
}

std::string translate_only(const SourceMap& source, msl::Target target, const BindOptions& bind) {
  return msl::translate(source.msl, translate_options(source, target, bind)).code;
}

std::shared_ptr<Program> Program::build(const SourceMap& source, msl::Target target,
                                        const std::string& math_mode, const BindOptions& bind) {
  check_math_mode(math_mode);
  auto t0 = std::chrono::steady_clock::now();
  auto tr = msl::translate(source.msl, translate_options(source, target, bind));
  double translate_ms = trace::ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  struct Trace {  // prints when the build ends, also when it throws
    const std::string& label;
    msl::Target target;
    double translate_ms;
    std::chrono::steady_clock::time_point t1;
    ~Trace() {
      if (!trace::build()) return;
      std::fprintf(stderr, "alloy: build %s for %s: translate %.3f ms, compile/load %.3f ms\n",
                   label.c_str(), target == msl::Target::cuda ? "cuda" : "cpu", translate_ms,
                   trace::ms_since(t1));
    }
  } trace_guard{source.label, target, translate_ms, t1};
  if (trace::build() && target == msl::Target::cpu)
    for (auto& k : tr.kernels)
      if (!k.sync_path.empty())
        std::fprintf(stderr, "alloy: build %s for cpu: kernel '%s' with barriers/simd: %s\n",
                     source.label.c_str(), k.host_name.c_str(), k.sync_path.c_str());
  auto p = std::make_shared<Program>();
  p->target_ = target;
  p->uses_sync_ = tr.uses_sync;
  p->uses_simd_ = tr.uses_simd;
  p->translated_ = tr.code;
  if (tr.kernels.empty())
    throw std::invalid_argument("[metal_kernel] no kernel function found in the source of '" +
                                source.label + "'");
  Backend* be = target == msl::Target::cpu ? &cpu_backend() : gpu_backend();
  if (!be) throw std::invalid_argument("no GPU is available (no CUDA driver or device)");
  CompiledModule m;
  try {
    m = be->compile(compile_request(tr, source, math_mode));
  } catch (const CompileError& e) {
    throw CompileError(source.label, map_compile_log(source, e.raw_log(), kFilename), e.raw_log());
  }
  for (size_t i = 0; i < tr.kernels.size(); ++i) {
    CompiledKernel k;
    k.entry = tr.kernels[i];
    k.function = m.functions.at(i);
    p->kernels_.push_back(std::move(k));
  }
  p->module_ = std::move(m.module);
  if (m.refine) compile_async(std::move(m.refine));
  return p;
}

CompileRequest compile_request(const msl::Translation& tr, const SourceMap& source,
                               const std::string& math_mode) {
  CompileRequest r;
  r.label = source.label;
  r.code = tr.code;
  r.filename = kFilename;
  r.math_mode = math_mode;
  for (const auto& k : tr.kernels)
    r.entries.push_back({k.param_buffers, k.coarsen, k.fibers, k.cuda_block});
  return r;
}

namespace {
std::vector<char> offline(const msl::Translation& tr, const std::string& math_mode,
                          const SourceMap& source, const std::string& arch, bool ptx) {
  check_math_mode(math_mode);
  try {
    return gpu_compile_offline(compile_request(tr, source, math_mode), arch, ptx);
  } catch (const CompileError& e) {
    throw CompileError(source.label, map_compile_log(source, e.raw_log(), kFilename), e.raw_log());
  }
}
}  // namespace

std::vector<char> compile_cubin(const msl::Translation& tr, const std::string& math_mode,
                                const SourceMap& source, const std::string& arch) {
  return offline(tr, math_mode, source, arch, false);
}

std::string compile_ptx(const msl::Translation& tr, const std::string& math_mode,
                        const SourceMap& source, const std::string& arch) {
  return offline(tr, math_mode, source, arch, true).data();
}

const CompiledKernel* Program::find(std::string_view host_name) const {
  for (auto& k : kernels_)
    if (k.entry.host_name == host_name) return &k;
  return nullptr;
}

}  // namespace alloy::kernel
