// Exceptions. Bad arguments raise std::invalid_argument; failures to compile or run a kernel raise
// alloy::Error (or a subclass), which names the kernel.
#pragma once
#include <new>
#include <stdexcept>
#include <string>

namespace alloy {

class Error : public std::runtime_error {
 public:
  Error(std::string kernel, const std::string& what)
      : std::runtime_error(what), kernel_(std::move(kernel)) {}
  const std::string& kernel() const { return kernel_; }

 private:
  std::string kernel_;
};

/// A kernel failed to compile. what() shows the compiler's messages with line numbers rewritten to
/// the user's source (body/header), and the offending source lines.
class CompileError : public Error {
 public:
  CompileError(std::string kernel, const std::string& what, std::string log)
      : Error(std::move(kernel), what), log_(std::move(log)) {}
  /// The compiler's raw output, untranslated.
  const std::string& raw_log() const { return log_; }

 private:
  std::string log_;
};

/// A Metal feature the kernel uses is not supported on the target.
class NotSupported : public Error {
 public:
  using Error::Error;
};

/// Memory for an array could not be allocated. A std::bad_alloc (Python: MemoryError) whose
/// message says how many bytes were asked for, and where.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

}  // namespace alloy
