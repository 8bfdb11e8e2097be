// Starting helper processes (the CPU JIT's host compiler, the NVRTC workers) without fork: a fork
// copies the caller's page tables (hundreds of ms in a process holding gigabytes) and, in a
// threaded process under a sanitizer, can hang the child (docs/reliability.md).
#pragma once
#include <sys/types.h>

#include <initializer_list>
#include <utility>

namespace alloy {

/// posix_spawn of `argv[0]` (a path) with `argv` and `envp`, in a process group of its own (a
/// terminal's Ctrl-C reaches the caller, not it; a kill of -pid reaches it and its children) and
/// an empty signal mask. The child's descriptor `to` is a copy of the caller's `from` for each
/// pair of `dups` (`to` at most 2); with `stdin_null`, its stdin reads /dev/null; it inherits no
/// other descriptor (glibc 2.34 and later: those of other threads without O_CLOEXEC included).
/// Returns 0 and sets `*pid`, else
/// the errno (glibc reports a failed execve so: the call returns once the child has run it).
int spawn_process(char* const* argv, char* const* envp,
                  std::initializer_list<std::pair<int, int>> dups, bool stdin_null, pid_t* pid);

}  // namespace alloy
