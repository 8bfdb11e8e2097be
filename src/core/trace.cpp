#include "core/trace.h"

#include <cstdio>
#include <stdexcept>

#include "core/env.h"

namespace alloy::trace {

bool build() {
  // Read where no error can be raised (destructors, worker threads): a malformed value is
  // reported once and tracing stays off.
  static const bool on = [] {
    try {
      return env::flag("ALLOY_TRACE_BUILD", false);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "alloy: %s; build tracing stays off\n", e.what());
      return false;
    }
  }();
  return on;
}

}  // namespace alloy::trace
