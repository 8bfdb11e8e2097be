// Launching one kernel entry (see src/prelude/cuda/abi.h): its parameter block (a ParamBlock
// packed to the entry's layout) is the entry's first parameter (then the device buffers of
// EntryLayout::param_buffers), gridDim = head.groups (x divided by EntryLayout::coarsen when the
// grid is deep enough), blockDim = head.threadgroup (Metal dispatchThreads: threads past
// head.grid leave before the body).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cuda/device.h"
#include "backend/cuda/jit.h"
#include "prelude/cuda/abi.h"

namespace alloy {
struct LaunchDesc;
}  // namespace alloy

namespace alloy::cuda {

/// A parameter block on the host, packed to one entry's layout (prelude/cuda/abi.h): `head` at
/// offset 0, the rest at layout's offsets. Only layout.size bytes from bytes() are the block (what
/// cuLaunchKernel copies); the capacity past them is never written nor sent.
struct alignas(16) ParamBlock {
  static constexpr uint32_t kMaxBytes =
      alloy_cuda_layout(ALLOY_CUDA_MAX_BUFFERS, ALLOY_CUDA_MAX_TG_PARAMS, true,
                        ALLOY_CUDA_INLINE_BYTES)
          .size;

  alloy_cuda_head head;
  unsigned char rest[kMaxBytes - sizeof(alloy_cuda_head)];
  alloy_cuda_param_layout layout;

  /// Zeroes the head and the tables of `l` (the inline data is written as far as it is used).
  explicit ParamBlock(const alloy_cuda_param_layout& l) : layout(l) {
    // head and rest are contiguous (static_assert below): one memset of both.
    std::memset(static_cast<void*>(this), 0, l.inline_bytes ? l.inline_data : l.size);
  }

  const void* bytes() const { return &head; }
  /// Address of buffer-table entry n (also an entry parameter for EntryLayout::param_buffers).
  const void* buffer_slot(uint32_t n) const { return at(layout.buffers + 8 * n); }
  void* buffer(uint32_t n) const {
    void* p;
    std::memcpy(&p, buffer_slot(n), sizeof p);
    return p;
  }
  void set_buffer(uint32_t n, const void* p) { std::memcpy(at(layout.buffers + 8 * n), &p, 8); }
  void set_buffer_bytes(uint32_t n, uint64_t v) {
    std::memcpy(at(layout.buffer_bytes + 8 * n), &v, 8);
  }
  void set_oob(const alloy_cuda_oob_log& log) { std::memcpy(at(layout.oob), &log, sizeof log); }
  void set_tg_offset(uint32_t n, uint64_t v) { std::memcpy(at(layout.tg_offset + 8 * n), &v, 8); }
  unsigned char* inline_data() { return at(layout.inline_data); }
  /// Byte `off` of the block (the layout's offsets).
  unsigned char* at(uint32_t off) { return rest + (off - sizeof(alloy_cuda_head)); }
  const unsigned char* at(uint32_t off) const { return rest + (off - sizeof(alloy_cuda_head)); }
};

static_assert(offsetof(ParamBlock, head) == 0 &&
                  offsetof(ParamBlock, rest) == sizeof(alloy_cuda_head),
              "the block's bytes are head then rest");

/// What pack() left to the caller: `bytes` arguments that do not fit in the inline data (their
/// bits) and the size of the spill buffer that holds them (16-byte aligned parts, in index
/// order), and the [[threadgroup(n)]] parameters' dynamic shared memory. A spilled argument's
/// buffer entry holds its byte offset in the spill buffer: the caller copies it there and adds
/// the buffer's device address (spill_into).
struct Packed {
  uint64_t spilled = 0;
  size_t spill_bytes = 0;
  uint32_t shared_bytes = 0;
};

/// 16-byte alignment of the inline data's and the spill buffer's parts.
inline size_t block_align(size_t n) {
  return (n + 15) / 16 * 16;
}

/// The one argument binder of CUDA launches: packs `d` (dims, buffers, sizes in robust blocks,
/// inline bytes, threadgroup parameters) into `P`, laid out for the launched entry. Buffers past
/// the entry's table are not read by it and are left out. Throws alloy::Error when a `block`
/// argument does not fit in the inline data, std::invalid_argument when `d` binds more than
/// ALLOY_CUDA_MAX_BUFFERS buffers. No allocation.
Packed pack(const LaunchDesc& d, ParamBlock& P);

/// The spilled arguments of `packed`: copies each into `host` (packed.spill_bytes, the spill
/// buffer's bytes) at the offset pack() chose, and points its buffer entry at `device` + that
/// offset (the spill buffer's device address).
void spill_into(const LaunchDesc& d, const Packed& packed, ParamBlock& P, unsigned char* host,
                char* device);

/// What an entry takes beyond its block (abi.h): device buffers as parameters (indices into the
/// block's buffer table, in parameter order) and how many threadgroups along x one block may run.
struct EntryLayout {
  const int* param_buffers = nullptr;
  uint32_t num_param_buffers = 0;
  uint32_t coarsen = 1;
};

/// Enqueues `fn` over the parameter block `P` with `dynamic_shared_bytes` of dynamic shared memory
/// (the [[threadgroup(n)]] parameters) on the context's stream. A grid with no threads launches
/// nothing. Throws std::invalid_argument when the threadgroup has more threads than the compiled
/// function allows (MLX raises ValueError there, and callers catch it to pick another kernel) or
/// the threadgroup memory exceeds the device's; alloy::NotSupported for shapes CUDA cannot launch
/// (threadgroup depth > 64, more than 65535 groups along y or z); alloy::Error when the launch
/// fails. Errors inside the kernel surface at the next synchronization, naming it.
/// `label` (default: fn.kernel) names the kernel in errors. No allocation and no string work
/// unless it throws. The caller has made `ctx` current and checked it usable.
void launch(Context& ctx, const Function& fn, const ParamBlock& P,
            uint32_t dynamic_shared_bytes = 0, const char* label = nullptr,
            const EntryLayout& layout = {});

/// What launch_block enqueued: blocks along x (0: nothing, a grid with no threads) and the
/// dynamic shared memory it launched with.
struct Enqueued {
  uint32_t blocks_x = 0;
  uint32_t shared_bytes = 0;
};

/// launch() over a parameter block's bytes (`block`: the head at offset 0, the buffer table at
/// byte `buffers`, at least the entry's layout size; cuLaunchKernel copies them), without the
/// launch-graph recording (the caller records, or checked that nothing records).
Enqueued launch_block(Context& ctx, const Function& fn, const void* block, uint32_t buffers,
                      uint32_t dynamic_shared_bytes, const char* label, const EntryLayout& layout);

/// launch_block in two parts, for a caller that launches blocks with the same head on the same
/// function again and again (a prepared launch): check_launch validates the head against `fn` and
/// the device (throwing as launch() does), sets the function's shared memory limit when it must
/// grow, and says what to enqueue; enqueue_block enqueues a block with it, checking nothing.
Enqueued check_launch(Context& ctx, const Function& fn, const alloy_cuda_head& head,
                      uint32_t dynamic_shared_bytes, const char* label, const EntryLayout& layout);
/// `name` is the kernel's name as Context::launch_name made it (once, by the caller); `label`
/// names it in a launch error.
void enqueue_block(Context& ctx, const Function& fn, const alloy_cuda_head& head,
                   const Enqueued& what, const void* block, uint32_t buffers,
                   const EntryLayout& layout, const char* label, const Context::LaunchName& name);

/// What a function handle of this backend's modules (CompiledModule::functions, the kernel
/// layer's CompiledKernel::function) launches: the function on the GPU that compiled it (the full
/// compile's once loaded), the layout of its parameter block and its entry layout (param_buffers
/// stays valid while the module lives). For benchmarks that launch Alloy's own kernel with a raw
/// cuLaunchKernel.
struct LaunchTarget {
  const Function* function = nullptr;
  alloy_cuda_param_layout block{};
  EntryLayout layout;
};
LaunchTarget launch_target(const void* function);

/// Sets h.groups (ceil(grid / threadgroup)) and h.full_groups (floor) from h.grid and
/// h.threadgroup.
inline void set_groups(alloy_cuda_head& h) {
  for (int d = 0; d < 3; ++d) {
    uint32_t tg = h.threadgroup[d] ? h.threadgroup[d] : 1;
    h.full_groups[d] = h.grid[d] / tg;
    h.groups[d] = h.full_groups[d] + (h.grid[d] % tg != 0);
  }
}

}  // namespace alloy::cuda
