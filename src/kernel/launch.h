// The one argument binder of the kernel layer: a metal_kernel call and a library call both
// describe their launch to a LaunchBuilder ([[buffer(n)]] arguments, [[threadgroup(n)]] sizes,
// grid and threadgroup), which turns it into core's backend-neutral LaunchDesc and hands it to
// the backend of the device the primitive runs on. Robust-mode reports and launch failures are
// handled here once for both kinds of call.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "alloy/kernel.h"
#include "core/backend.h"
#include "kernel/program.h"

namespace alloy::kernel {

using BufferNamer = std::function<std::string(uint32_t buffer)>;

class LaunchBuilder {
 public:
  static constexpr uint32_t kMaxArgs = 64;

  /// `kind` prefixes failure messages ("metal_kernel", "library"); `label` names the kernel and
  /// must outlive the builder.
  LaunchBuilder(const char* kind, const std::string& label);
  LaunchBuilder(const LaunchBuilder&) = delete;
  LaunchBuilder& operator=(const LaunchBuilder&) = delete;

  /// [[buffer(n)]] = the memory of the evaluated array `a` (on the launch's device).
  void memory(uint32_t n, const Array& a);
  /// [[buffer(n)]] = `nbytes` host bytes delivered with the launch (copied here). `block`: they
  /// must travel in the launch's parameter block (BindOptions::block_buffers).
  void bytes(uint32_t n, const void* data, size_t nbytes, bool block = false);
  /// [[threadgroup(n)]] of `nbytes`.
  void threadgroup_memory(uint32_t n, uint64_t nbytes);
  void dims(const Dims& grid, const Dims& threadgroup);

  /// Launches `k` on the backend of `device`. Robust: records the out-of-range accesses,
  /// naming buffers with `namer`. Rethrows std::invalid_argument and alloy errors as they are;
  /// other failures become alloy::Error naming the kernel.
  void launch(const CompiledKernel& k, Device device, bool robust, const BufferNamer& namer);
  /// The description bound so far (dims and arguments; the function is set by launch()).
  const LaunchDesc& desc() const { return desc_; }
  /// The same launch packed once for repeated launches (Backend::prepare), or nullptr. Not
  /// robust. Launches nothing and never throws: a launch that cannot be prepared is nullptr.
  std::unique_ptr<PreparedLaunch> prepare(const CompiledKernel& k, Device device);

 private:
  LaunchArg& arg(uint32_t n);

  const char* kind_;
  const std::string& label_;
  LaunchDesc desc_;
  // Arguments 0 .. desc_.num_args - 1 are constructed as they are bound (arg()): a builder
  // does not write all kMaxArgs of them for every launch.
  alignas(LaunchArg) unsigned char args_[kMaxArgs * sizeof(LaunchArg)];
  // Storage of bytes arguments: a small arena here, larger ones on the heap.
  alignas(16) unsigned char local_[768];
  size_t local_used_ = 0;
  std::vector<std::unique_ptr<unsigned char[]>> heap_;
};

/// Launches `prepared` (LaunchBuilder::prepare, for a device of `be`) with memory argument n at
/// `data[n]`; false when it cannot now (Backend::launch_prepared). Failures as
/// LaunchBuilder::launch reports them (`kind`, `label` as there).
bool launch_prepared(Backend& be, const PreparedLaunch& prepared, const void* const* data,
                     const char* kind, const std::string& label);

/// The threadgroup MLX dispatches: min(threadgroup, grid) per dimension.
Dims effective_threadgroup(const Dims& grid, const Dims& tg);

}  // namespace alloy::kernel
