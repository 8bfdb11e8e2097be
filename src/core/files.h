// Host filesystem checks shared by the backends (the CPU JIT's compiler search, the NVRTC
// worker's).
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace alloy {

/// True when `path` names a regular file that this process may execute.
inline bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace alloy
