#include "msl/includes.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "alloy/errors.h"

namespace alloy::msl {
namespace {

namespace fs = std::filesystem;

struct Expander {
  const IncludeOptions& opt;
  std::set<std::string> once;  // headers with #pragma once already included
  int depth = 0;

  // Finds `name`; returns false when it is nowhere. `key` identifies the header (#pragma once).
  bool find(const std::string& name, const std::string& from_dir, std::string* text,
            std::string* key, std::string* dir) const {
    if (auto it = opt.headers.find(name); it != opt.headers.end()) {
      *text = it->second;
      *key = "headers:" + name;
      *dir = "";
      return true;
    }
    std::vector<std::string> dirs;
    if (!from_dir.empty()) dirs.push_back(from_dir);
    dirs.insert(dirs.end(), opt.include_dirs.begin(), opt.include_dirs.end());
    for (auto& d : dirs) {
      fs::path p = fs::path(d) / name;
      std::error_code ec;
      if (!fs::is_regular_file(p, ec)) continue;
      std::ifstream f(p, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      *text = ss.str();
      *key = fs::weakly_canonical(p, ec).string();
      *dir = p.parent_path().string();
      return true;
    }
    return false;
  }

  std::string run(std::string_view src, const std::string& file, const std::string& dir) {
    if (++depth > 64)
      throw CompileError(opt.label,
                         fmt::format("#include nested more than 64 deep (in '{}')", file), "");
    std::string out;
    size_t pos = 0;
    int line = 1;
    while (pos < src.size()) {
      size_t eol = src.find('\n', pos);
      std::string_view l =
          src.substr(pos, eol == std::string_view::npos ? src.size() - pos : eol - pos);
      size_t next = eol == std::string_view::npos ? src.size() : eol + 1;
      size_t h = l.find_first_not_of(" \t");
      bool handled = false;
      if (h != std::string_view::npos && l[h] == '#') {
        size_t d = l.find_first_not_of(" \t", h + 1);
        std::string_view rest = d == std::string_view::npos ? "" : l.substr(d);
        if (rest.starts_with("pragma") && rest.find("once") != std::string_view::npos) {
          out += "\n";
          handled = true;
        } else if (rest.starts_with("include")) {
          size_t a = rest.find_first_of("\"<");
          char close = a != std::string_view::npos && rest[a] == '<' ? '>' : '"';
          size_t b = a == std::string_view::npos ? a : rest.find(close, a + 1);
          if (a != std::string_view::npos && b != std::string_view::npos) {
            std::string name(rest.substr(a + 1, b - a - 1));
            if (name.starts_with("MetalPerformancePrimitives"))
              throw NotSupported(
                  opt.label,
                  fmt::format("not supported: MetalPerformancePrimitives ('#include <{}>' in {} "
                              "line {}, library '{}')",
                              name, file, line, opt.label));
            bool metal_std = name.starts_with("metal_") || name.starts_with("simd/");
            std::string text, key, hdir;
            if (!metal_std && find(name, close == '"' ? dir : "", &text, &key, &hdir)) {
              handled = true;
              if (!once.count(key)) {
                if (text.find("pragma once") != std::string::npos) once.insert(key);
                out += fmt::format("#line 1 \"{}\"\n", name);
                std::string body = run(text, name, hdir);
                out += body;
                if (!body.empty() && body.back() != '\n') out += '\n';
              }
              out += fmt::format("#line {} \"{}\"\n", line + 1, file);
            } else if (!metal_std) {
              throw CompileError(
                  opt.label,
                  fmt::format("{}:{}: cannot find '#include {}{}{}' (in headers= or include_dirs= "
                              "of library '{}')",
                              file, line, close == '"' ? '"' : '<', name, close, opt.label),
                  "");
            }
          }
        }
      }
      if (!handled) out += std::string(src.substr(pos, next - pos));
      // Directives continued on the next line count their lines.
      ++line;
      pos = next;
    }
    --depth;
    return out;
  }
};

}  // namespace

std::string expand_includes(std::string_view source, const IncludeOptions& options) {
  if (options.headers.empty() && options.include_dirs.empty() &&
      source.find("MetalPerformancePrimitives") == std::string_view::npos)
    return std::string(source);
  Expander e{options, {}, 0};
  return e.run(source, "kernel.metal", "");
}

}  // namespace alloy::msl
