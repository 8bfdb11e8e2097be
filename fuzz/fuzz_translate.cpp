// libFuzzer target: the MSL translator (src/msl/translate.cpp) for both targets. Any input must
// give a translation or a documented exception (std::invalid_argument, alloy::NotSupported), never
// a crash or a sanitizer report. docs/reliability.md.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "alloy/errors.h"
#include "msl/translate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string src(reinterpret_cast<const char*>(data), size);
  for (auto target : {alloy::msl::Target::cpu, alloy::msl::Target::cuda}) {
    for (bool robust : {false, true}) {
      alloy::msl::TranslateOptions o;
      o.target = target;
      o.label = "fuzz";
      o.robust = robust;
      try {
        alloy::msl::translate(src, o);
      } catch (const std::invalid_argument&) {
      } catch (const alloy::Error&) {
      }
    }
  }
  return 0;
}
