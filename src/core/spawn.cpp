#include "core/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

namespace alloy {

int spawn_process(char* const* argv, char* const* envp,
                  std::initializer_list<std::pair<int, int>> dups, bool stdin_null, pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdin_null) posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  for (const auto& [from, to] : dups) posix_spawn_file_actions_adddup2(&actions, from, to);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Nothing but 0, 1 and 2: a descriptor another thread opened meanwhile without O_CLOEXEC (a
  // test framework's pipe whose reader waits for its end of file, a user's socket) must not stay
  // open in a helper that lives as long as the process (an NVRTC worker).
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  int r = ::posix_spawn(pid, argv[0], &actions, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return r;
}

}  // namespace alloy
