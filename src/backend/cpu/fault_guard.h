// Faults inside CPU kernels (issue 16, item 7): a kernel that reads or writes outside its buffers
// hits a guard page (the host allocator puts every buffer between guard pages:
// src/core/host_allocator.cpp) or an unmapped page. Instead of killing the process, the fault ends
// the launch with an alloy::Error (Python alloy.KernelError) naming the kernel, the buffer (its
// parameter name) and the offset, the thread or threadgroup, with a hint to use robust mode.
//
// How: a SIGSEGV/SIGBUS handler (installed once, chaining to the previous handler for faults
// outside kernels; it runs on an alternate signal stack, so an overflowed stack is handled too)
// jumps back (siglongjmp) to this thread's fault target:
//  - loop mode: the point where the thread entered the kernel's groups (run_fault_guarded);
//  - fiber mode: the entry of the running fiber, on the fiber's own stack (the fiber scheduler
//    switches the target at every fiber switch); the fiber then fails the group as a thrown
//    exception would.
// Kernel frames are left without unwinding: they are the translated Metal code, whose objects
// have no destructors that matter (no locks, no heap).
#pragma once
#include <csetjmp>
#include <cstdint>
#include <functional>
#include <string>

#include "prelude/cpu/abi.h"

namespace alloy::cpu {

/// What the handler saw.
struct FaultInfo {
  int signal = 0;
  uintptr_t address = 0;
  int access = 0;  // 0 unknown, 1 read, 2 write (x86-64: from the page fault's error code)
};

/// Names [[buffer(n)]] for messages (the kernel's parameter name); may be null.
using BufferNames = std::function<std::string(uint32_t)>;

/// Whether launches guard their groups (ALLOY_CPU_FAULT_GUARD: 1 on, 0 off; default on).
bool fault_guard_enabled();

/// Installs the handler (once per process) and an alternate signal stack for this thread (once
/// per thread, unless it has one).
void prepare_fault_guard();

/// This thread's fault target (null: faults are not caught). set_ returns the previous target.
sigjmp_buf* fault_target();
sigjmp_buf* set_fault_target(sigjmp_buf* target);

/// What the handler saw when it last jumped on this thread.
FaultInfo last_fault();

/// Runs `body(arg)` on this thread with kernel faults turned into a return of false (`info`
/// filled in); true when it returned normally. The body must not throw past this call: call it
/// with a body that catches (a C++ exception cannot unwind through the jump).
bool run_fault_guarded(void (*body)(void*), void* arg, FaultInfo* info);

/// The message of a fault in `kernel` at `info.address`, naming the launch's buffer the address
/// lies in or next to (by `names` when given, else by index), and `where` ("thread (x, y, z)" or
/// "threadgroup (x, y, z)") when not empty.
std::string fault_message(const std::string& kernel, const FaultInfo& info,
                          const alloy_cpu_launch& L, const BufferNames* names,
                          const std::string& where);

}  // namespace alloy::cpu
