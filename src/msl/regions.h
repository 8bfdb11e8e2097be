// CPU: barrier and simd kernels as work-item loops (POCL's approach) instead of one fiber per
// thread. The kernel body is split at threadgroup_barrier / simdgroup_barrier and at statements
// that call simd functions into regions; each region runs as one loop over the group's threads
// (alloy_split::group::region in prelude/cpu/split.h). Values that live across a region boundary
// move to per-thread storage; simd functions are computed once per simdgroup between a region
// that publishes their arguments and one that consumes the results. Token level and
// conservative: what it cannot prove splittable is reported (reason) and runs as fibers.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "msl/translate.h"

namespace alloy::msl {

struct SplitBody {
  bool ok = false;
  std::string reason;  // why not (ok == false)
  std::string body;    // replacement for the text between the body's braces (same newlines)
};

/// Splits the translated body `body` (the text between the kernel's braces) of a kernel with
/// parameters `params`. The result uses `alloy_L` / `alloy_g` (the launch and group), which the
/// caller adds as the kernel's last parameters; attribute parameters receive thread 0's values.
/// `preprocessor_lines`: the source's preprocessor lines (its macros may change values the
/// body's statements do not name).
SplitBody split_kernel_body(std::string_view body, const std::vector<KernelParam>& params,
                            const std::vector<std::string>& preprocessor_lines = {});

/// ALLOY_CPU_SYNC: "fibers" forces fibers, "split" prefers splitting (the default, "auto", too:
/// the splitter falls back to fibers where it cannot split either way).
enum class CpuSyncMode { automatic, fibers, split };
CpuSyncMode cpu_sync_mode();

}  // namespace alloy::msl
