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

/// The CUDA quick entry (ALLOY_QUICK_ENTRY) of coarsened kernel `k` reads its attributes straight
/// from CUDA's ids (alloy_entry::cuda_grid_ids): every attribute is one that needs no group sizes
/// (thread_position_in_grid, threadgroup_position_in_grid, thread_position_in_threadgroup,
/// threads_per_grid, grid_size). When all of a translation's entries do, it defines
/// ALLOY_ENTRY_GRID_IDS, and its quick compile leaves out alloy_entry::thread_ids.
bool cuda_quick_grid_ids(const KernelEntry& k);

/// The parameter block of CUDA entry `k` translated with `opt` (KernelEntry::cuda_block).
alloy_cuda_param_layout cuda_block_of(const KernelEntry& k, const TranslateOptions& opt);

}  // namespace alloy::msl
