// A CUDA device Alloy runs on: device `ordinal` of those CUDA shows (CUDA_VISIBLE_DEVICES), its
// primary context (shared with the CUDA runtime, so PyTorch/CuPy pointers are valid here), a
// default non-blocking stream on which copies and kernels run in order, the caching allocator, and
// the bookkeeping that names the kernels behind an asynchronous error. One Context per device,
// created on first use.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/driver.h"

namespace alloy::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  std::string arch;  // "sm_90": compute capability as NVRTC's --gpu-architecture names it
  int multiprocessors = 0;
  int max_threads_per_block = 0;
  int max_block_dim[3] = {0, 0, 0};
  int max_grid_dim[3] = {0, 0, 0};
  int max_shared_per_block = 0;        // without opting in (48 KiB)
  int max_shared_per_block_optin = 0;  // what a kernel can opt in to (227 KiB on sm_90)
  size_t total_memory = 0;
  int driver_version = 0;  // 1000 * major + 10 * minor
};

/// "sm_<major><minor>".
std::string arch_name(int cc_major, int cc_minor);

/// Devices a process can address (CUDA ordinals 0 .. kMaxDevices-1).
constexpr int kMaxDevices = 64;

class Context {
 public:
  /// Device `ordinal`, initialized on first use; nullptr when there is no usable CUDA driver or
  /// no such device (never throws; unavailable_reason(ordinal) says why).
  static Context* get(int ordinal = 0);
  static std::string unavailable_reason(int ordinal = 0);
  /// How many devices CUDA shows (0 without a driver), at most kMaxDevices.
  static int count();
  /// Device `ordinal` if its context exists already (nullptr otherwise: never creates one).
  static Context* existing(int ordinal);
  /// The ordinal of the device an external stream (e.g. PyTorch's) belongs to; -1 if unknown.
  static int ordinal_of_stream(CUstream stream);

  const Driver& driver() const { return drv_; }
  const DeviceInfo& info() const { return info_; }
  int ordinal() const { return info_.ordinal; }
  CUcontext handle() const { return ctx_; }
  /// The stream the calling thread enqueues on for this device: the one set_current_stream()
  /// chose, else the default stream.
  CUstream stream() const {
    CUstream s = current_stream_[info_.ordinal];
    return s ? s : stream_;
  }
  CUstream default_stream() const { return stream_; }
  /// Makes the calling thread enqueue on `s` for this device (nullptr: the default stream).
  void set_current_stream(CUstream s) { current_stream_[info_.ordinal] = s; }
  /// A new non-blocking stream, owned by the context.
  CUstream create_stream();
  /// Makes an external stream known (its work is fenced by the allocator like Alloy's own).
  void register_stream(CUstream s);
  /// Every stream Alloy enqueues on (the default one first).
  std::vector<CUstream> streams() const;
  /// No lock (the allocator asks on every free): streams are only ever added.
  bool has_several_streams() const { return several_streams_.load(std::memory_order_acquire); }
  /// Waits for the work enqueued on `s`; like synchronize() for one stream.
  void synchronize_stream(CUstream s);
  Allocator& allocator() { return *allocator_; }

  /// Makes the context current on the calling thread (driver calls need it). Cheap when it
  /// already is.
  void make_current() {
    CUcontext cur = nullptr;
    if (drv_.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != ctx_) bind_current();
  }

  /// Throws if an earlier kernel left the context unusable (see is_sticky_error).
  void check_usable() const {
    if (sticky_.load(std::memory_order_relaxed) != CUDA_SUCCESS) throw_sticky();
  }

  /// Remembers that `kernel` was enqueued, so that an asynchronous error can name it. No
  /// allocation: the name is copied into a small ring.
  void note_launch(const char* kernel);
  /// A kernel's name as the ring stores it (NUL-padded 8-byte words), made once by a caller that
  /// launches the same kernel again and again (a prepared launch): note_launch(name) then only
  /// stores the words.
  static constexpr int kNameBytes = 96;
  struct LaunchName {
    uint64_t words[kNameBytes / 8] = {};
    uint32_t count = 0;  // words to store, the terminating NUL's included
  };
  static LaunchName launch_name(const char* kernel);
  void note_launch(const LaunchName& name);

  /// Checks the result of an enqueue call. Errors of earlier asynchronous work can surface here
  /// too; those name the recently launched kernels. Throws alloy::Error.
  void check(CUresult result, const char* call) {
    if (result != CUDA_SUCCESS) fail(result, call, nullptr);
  }
  /// Like check(), for the launch of `kernel`.
  [[noreturn]] void fail(CUresult result, const char* call, const char* kernel);

  /// Waits for every enqueued copy and kernel (all streams); throws alloy::Error naming the
  /// kernels launched since the last synchronization when one of them failed.
  void synchronize();

 private:
  Context(const Driver& drv, CUdevice dev, CUcontext ctx, CUstream stream, DeviceInfo info);
  /// Initializes device `ordinal`; get() calls it once. nullptr and *reason when it fails.
  static Context* create(int ordinal, std::string* reason);
  void bind_current();
  [[noreturn]] void throw_sticky() const;
  // "a, b, c" (oldest first) and the count of kernels launched since the last synchronization.
  std::string recent_kernels(std::string* last) const;

  const Driver& drv_;
  CUdevice dev_;
  CUcontext ctx_;
  CUstream stream_;
  static constinit thread_local CUstream current_stream_[kMaxDevices];  // per device
  mutable std::mutex streams_mu_;
  std::vector<CUstream> streams_;  // besides stream_: created (owned) and registered ones
  std::atomic<bool> several_streams_{false};  // !streams_.empty(), set once a stream is added
  DeviceInfo info_;
  std::unique_ptr<Allocator> allocator_;

  static constexpr int kHistory = 8;
  mutable std::mutex history_mu_;  // the sticky error's fields
  // The ring of recent kernel names, written without a lock on every launch (note_launch): a
  // name is stored as 8-byte words (NUL-terminated); a launch takes its slot with one atomic
  // increment. Concurrent launches on several threads may leave a torn name in an error message
  // at worst.
  std::atomic<uint64_t> history_[kHistory][kNameBytes / 8] = {};
  std::atomic<uint64_t> launches_since_sync_{0};
  std::string history_name(uint64_t i) const;  // the name in slot i % kHistory

  std::atomic<CUresult> sticky_{CUDA_SUCCESS};
  std::string sticky_message_;  // written once, before sticky_ is set
  std::string sticky_kernel_;
};

}  // namespace alloy::cuda
