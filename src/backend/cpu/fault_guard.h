// Faults inside CPU kernels (issue 16, item 7): a kernel that reads or writes far outside its
// buffers hits an unmapped or guard page (the host allocator puts guard pages around every
// buffer of a page or more: src/core/host_allocator.cpp). Instead of killing the process, the
// fault ends the launch with an alloy::Error (Python alloy.KernelError) naming the kernel, the
// address and the nearest buffer, with a hint to use robust mode.
//
// How: a SIGSEGV/SIGBUS handler (installed once, chaining to the previous handler for faults
// outside kernels) jumps back (siglongjmp) to the point where the faulting thread entered the
// kernel's groups. Only loop-mode kernels are guarded: a fault inside a fiber (its own stack) is
// not recovered. Kernel frames are left without unwinding: they are the translated Metal code,
// whose objects have no destructors that matter (no locks, no heap).
#pragma once
#include <csetjmp>
#include <cstdint>
#include <string>

#include "prelude/cpu/abi.h"

namespace alloy::cpu {

/// What the handler saw.
struct FaultInfo {
  int signal = 0;
  uintptr_t address = 0;
};

/// Whether launches guard their groups (ALLOY_CPU_FAULT_GUARD: 1 on, 0 off; default on).
bool fault_guard_enabled();

/// Runs `body(arg)` on this thread with kernel faults turned into a return of false (`info`
/// filled in); true when it returned normally. The body must not throw past this call: call it
/// with a body that catches (a C++ exception cannot unwind through the jump).
bool run_fault_guarded(void (*body)(void*), void* arg, FaultInfo* info);

/// The message of a fault in `kernel` at `info.address`, naming the launch's nearest buffer.
std::string fault_message(const std::string& kernel, const FaultInfo& info,
                          const alloy_cpu_launch& L);

}  // namespace alloy::cpu
