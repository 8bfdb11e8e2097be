// Host filesystem helpers shared by the backends (the CPU JIT's compiler search and work
// folder, the NVRTC workers' executable and PCH folder).
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace alloy {

/// True when `path` names a regular file that this process may execute.
inline bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

/// The folder for temporary files: $TMPDIR when set and not empty, else /tmp.
inline std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

}  // namespace alloy
