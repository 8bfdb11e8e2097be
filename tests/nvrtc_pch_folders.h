// The PCH folders that NVRTC's automatic PCH (nvrtc::auto_pch_options) made for a process: NVRTC
// 13.0 names them $TMPDIR-or-/tmp/__nvrtc_auto_pch_<pid>_<n> (not documented; the tests that use
// this check that a folder is found where one must exist).
#pragma once

#include <glob.h>

#include <cstdlib>
#include <string>
#include <vector>

inline std::vector<std::string> nvrtc_pch_folders(int pid) {
  std::vector<std::string> dirs = {"/tmp"};
  if (const char* t = std::getenv("TMPDIR"); t && *t && std::string(t) != "/tmp") dirs.push_back(t);
  std::vector<std::string> found;
  for (const auto& dir : dirs) {
    glob_t g{};
    std::string pattern = dir + "/__nvrtc_auto_pch_" + std::to_string(pid) + "_*";
    if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
  return found;
}
