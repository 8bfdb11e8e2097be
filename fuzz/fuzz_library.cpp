// libFuzzer target: the library parser (compile_library's front end without the compiler): kernel
// macro expansion, the lexer, kernel regions, reflection through the translator and Metal type
// names. docs/reliability.md.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "alloy/errors.h"
#include "kernel/library.h"
#include "msl/lexer.h"
#include "msl/macros.h"
#include "msl/translate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string src(reinterpret_cast<const char*>(data), size);
  try {
    std::string expanded = alloy::msl::expand_kernel_macros(src);
    auto toks = alloy::msl::lex(expanded);
    auto regions = alloy::kernel::find_kernel_regions(toks);
    for (auto& r : regions) {
      if (r.body_open >= toks.size() || r.body_close >= toks.size() || r.begin > r.body_open)
        __builtin_trap();  // regions must point into the tokens
      for (auto& i : r.instantiations)
        if (i.end >= toks.size()) __builtin_trap();
    }
    for (auto& t : toks)
      if (t.kind == alloy::msl::TokKind::ident) alloy::kernel::parse_metal_type(t.text);
    alloy::msl::TranslateOptions o;
    o.label = "fuzz";
    auto tr = alloy::msl::translate(expanded, o);
    for (auto& k : tr.kernels)
      for (auto& p : k.params) alloy::kernel::parse_metal_type(p.type);
  } catch (const std::invalid_argument&) {
  } catch (const alloy::Error&) {
  }
  return 0;
}
