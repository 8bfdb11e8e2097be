// The CPU backend's compiled function: what CompiledModule::functions (and so
// kernel::CompiledKernel::function) point at on the CPU. For benchmarks and tests that drive the
// executor directly; the stack reaches the CPU only through core's Backend interface.
#pragma once
#include "prelude/cpu/abi.h"

namespace alloy::cpu {

struct Function {
  alloy_cpu_group_fn group = nullptr;    // runs a whole threadgroup (loop or split mode)
  alloy_cpu_thread_fn thread = nullptr;  // runs one thread (fiber mode)
  alloy_cpu_groups_fn groups = nullptr;  // loop mode: a chunk of groups per call (optional)
  bool fibers = false;                   // groups run as one fiber per thread
};

}  // namespace alloy::cpu
