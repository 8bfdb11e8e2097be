// Environment changes in tests.
//
// setenv and unsetenv are not thread-safe: the library reads the environment on its compile
// pool's threads (getenv, and the whole environment when it starts a compiler), and a background
// compile queued by an earlier test may still run (CI's ASan run caught a compiler start copying
// `environ` while a test's setenv moved it). So every change waits until the pool is idle first,
// and until no NVRTC workers are being started ahead (nvrtc::prestart_workers).
// A forked child, which has no pool threads, calls ::setenv itself.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include "backend/cuda/nvrtc.h"
#include "kernel/compile_pool.h"

namespace alloy::testing {

// Sets `name` to `value`, or removes it when `value` is null.
inline void set_env(const char* name, const char* value) {
  if (!kernel::compile_pool_wait_idle(std::chrono::minutes(5)))
    ADD_FAILURE() << "background compiles still run after 5 minutes; " << name << " changed anyway";
  // The thread that starts NVRTC workers ahead reads the environment too (it starts processes).
  if (!cuda::nvrtc::testing::wait_for_prestart(std::chrono::minutes(5)))
    ADD_FAILURE() << "NVRTC workers still start ahead after 5 minutes; " << name
                  << " changed anyway";
  if (value)
    ::setenv(name, value, 1);
  else
    ::unsetenv(name);
}

inline std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// Sets (or, with a null value, removes) an environment variable for a scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name), old_(get_env(name)) {
    set_env(name, value);
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv() { set_env(name_.c_str(), old_ ? old_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace alloy::testing
