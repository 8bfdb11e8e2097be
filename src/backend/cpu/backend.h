// The CPU backend's compiled function: what CompiledModule::functions (and so
// kernel::CompiledKernel::function) point at on the CPU. For benchmarks and tests that drive the
// executor directly; the stack reaches the CPU only through core's Backend interface.
#pragma once
#include <atomic>

#include "prelude/cpu/abi.h"

namespace alloy::cpu {

/// A tiered compile (docs/cpu-backend.md) first loads the quick tier's entries, then stores the
/// full tier's when its background compile is loaded: read each pointer once per launch (any mix
/// of the two tiers gives the same results; both libraries stay loaded while the module lives).
struct Function {
  std::atomic<alloy_cpu_group_fn> group{nullptr};    // runs a whole threadgroup (loop/split mode)
  std::atomic<alloy_cpu_thread_fn> thread{nullptr};  // runs one thread (fiber mode)
  std::atomic<alloy_cpu_groups_fn> groups{nullptr};  // loop mode: a chunk of groups per call
  bool fibers = false;                               // groups run as one fiber per thread
  void* tiers = nullptr;  // the backend's: the tiered compile this belongs to, or null
};

/// How many tiered compiles of this process have switched their functions to the full tier.
uint64_t full_tier_switches();

/// Whether ALLOY_CPU_TIERED allows tiered compiles (on unless it is 0 or off; read at each call).
bool tiered_compile();

}  // namespace alloy::cpu
