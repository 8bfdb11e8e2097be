// Caching allocator for device memory. cuMemAlloc/cuMemFree are slow (and cuMemFree waits for the
// device), so freed blocks are kept in size buckets and handed to later allocations.
//
// Frees are stream-ordered: with one stream, a block freed on the host while the GPU still uses it
// can go to the next allocation at once: the work that uses it next is enqueued after the work
// that used it before. With several streams (alloy::new_stream, wrapped external streams), a freed
// block keeps a fence: an event recorded on every stream at the free; the stream that reuses the
// block waits for those events first (on the GPU: the host does not block).
//
// Sizes: up to 1 MiB round up to a power of two (at least 512 bytes); above, to a multiple of
// 2 MiB, and a cached block up to 1/8 larger than the request is reused. The rounding leaves slack
// after most buffers, so kernels that read a little past the end before masking (as the MLX docs'
// grid_sample does, which Metal tolerates) usually do not fault; it is not a guarantee.
//
// Locking: one spin lock around the buckets and the statistics, held for a few instructions (a
// cached allocation, a free); the driver is never called under it (a miss allocates without it,
// empty_cache takes the blocks out and frees them without it).
#pragma once
#include <tbb/spin_mutex.h>

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "alloy/cuda.h"
#include "backend/cuda/driver.h"

namespace alloy::cuda {

class Allocator {
 public:
  /// `synchronize` waits for every stream (used before memory goes back to the driver);
  /// `streams` lists them (the default one first), `current` is the calling thread's stream.
  /// `enter` makes the context current before a driver call (a cached block needs none).
  /// `several_streams`, when given, is false while there is one stream (then `streams` is not
  /// called on a free: no fence is needed).
  Allocator(
      const Driver& driver, std::function<void()> synchronize,
      std::function<std::vector<CUstream>()> streams, std::function<CUstream()> current,
      std::function<void()> enter = [] {}, const std::atomic<bool>* several_streams = nullptr);
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// A block of at least `nbytes` (256-byte aligned; nbytes 0 gives the smallest block). On
  /// CUDA_ERROR_OUT_OF_MEMORY, empties the cache and retries once; then throws alloy::Error.
  void* allocate(size_t nbytes);
  /// Returns a block from allocate() to the cache (stream-ordered, see above). Never throws.
  void free(void* ptr);
  /// The same for an owner that keeps the block's size (a Buffer): allocate() gives it in
  /// `*block`, free() takes it back; no lookup of the block by address.
  void* allocate(size_t nbytes, size_t* block);
  void free(void* ptr, size_t block);

  MemoryStats stats() const;
  /// Waits for the stream, then gives every cached block back to the driver.
  void empty_cache();

  /// The size of the block allocate(nbytes) returns (exposed for tests).
  static size_t round_size(size_t nbytes);

 private:
  static constexpr size_t kMinBlock = 512;
  static constexpr size_t kSmallLimit = size_t(1) << 20;
  static constexpr size_t kLargeGranule = size_t(2) << 20;

  // Events recorded on every stream when a block was freed (several streams only).
  struct Fence {
    const Driver* driver;
    std::vector<CUevent> events;
    ~Fence();
  };
  struct Cached {
    CUdeviceptr ptr;
    std::shared_ptr<Fence> fence;  // null: one stream, nothing to wait for
  };
  // A cached block of `size` (rounded) taken out, its fence with it; false when none.
  bool take_cached(size_t size, CUdeviceptr* ptr, size_t* block, std::shared_ptr<Fence>* fence);
  void note_active_locked(size_t block);  // a block handed out: active and peak bytes
  std::shared_ptr<Fence> make_fence();    // null when there is one stream
  void wait_fence(const std::shared_ptr<Fence>& fence);  // on the calling thread's stream

  const Driver& driver_;
  std::function<void()> synchronize_;
  std::function<std::vector<CUstream>()> streams_;
  std::function<CUstream()> current_;
  std::function<void()> enter_;
  const std::atomic<bool>* several_streams_;

  // Guards what follows. A spin lock (its release is a plain store: one atomic update fewer per
  // allocation and per free than a mutex, issue 9 item 7); the driver is never called under it.
  using Lock = std::lock_guard<tbb::spin_mutex>;
  mutable tbb::spin_mutex mu_;
  // Held by empty_cache until the blocks it took out are back with the driver: an allocation
  // that ran out of memory with nothing cached waits for it before trying again.
  std::mutex release_mu_;
  std::unordered_map<CUdeviceptr, size_t> live_;  // block -> its size (allocate(nbytes) ones)
  // Exact power-of-two buckets, kMinBlock << i at i (an index, not a tree walk, per allocation).
  static constexpr int kSmallBuckets = 12;  // 512 B .. 1 MiB
  static_assert((kMinBlock << (kSmallBuckets - 1)) == kSmallLimit);
  static int small_bucket(size_t block) {
    return std::countr_zero(block) - std::countr_zero(kMinBlock);
  }
  std::array<std::vector<Cached>, kSmallBuckets> small_;
  std::multimap<size_t, Cached> large_;  // best fit
  MemoryStats stats_{};
};

}  // namespace alloy::cuda
