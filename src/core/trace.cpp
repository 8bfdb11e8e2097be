#include "core/trace.h"

#include <cstdlib>
#include <string_view>

namespace alloy::trace {

bool build() {
  static const bool on = [] {
    const char* v = std::getenv("ALLOY_TRACE_BUILD");
    return v && *v && std::string_view(v) != "0";
  }();
  return on;
}

}  // namespace alloy::trace
