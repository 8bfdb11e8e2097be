// What differs between translation targets, as data (one table per target), consumed by the one
// translator in msl/translate.cpp.
#pragma once
#include <string>

#include "msl/translate.h"

namespace alloy::msl {

struct TargetTraits {
  std::string name;      // "cpu" | "cuda"
  std::string preamble;  // start of the translation unit (prelude includes)
  // `threadgroup TYPE NAME DIMS;` -> target storage shared by the group's threads. `slot` is
  // unique per declaration in the source; `prev_slot` is the declaration before it in the same
  // kernel whose scope is still open (-1: none), whose storage this one follows.
  std::string (*threadgroup_decl)(const std::string& type, const std::string& name,
                                  const std::string& dims, int slot, int prev_slot);
  // `#pragma unroll N` in the target compiler's spelling ("" count = let it decide / full).
  std::string (*unroll_pragma)(const std::string& count);
  // Exported entry point(s) for kernel `index`: bind buffers, compute attributes, call it.
  std::string (*entry)(const KernelEntry& kernel, size_t index, const TranslateOptions& options);
};

const TargetTraits& target_traits(Target t);

}  // namespace alloy::msl
