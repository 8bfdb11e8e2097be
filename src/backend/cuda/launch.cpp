#include "backend/cuda/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "alloy/errors.h"
#include "backend/cuda/graph.h"
#include "core/backend.h"
#include "core/hot.h"

namespace alloy::cuda {
namespace {

// Shared memory a block may use without opting in (every architecture since Volta).
constexpr int kDefaultSharedLimit = 48 * 1024;

[[noreturn]] void too_many_threads(const Function& fn, uint64_t threads, const char* name) {
  throw std::invalid_argument(fmt::format(
      "[metal_kernel] threadgroup of {} threads exceeds the maximum of {} for kernel {}", threads,
      fn.max_threads, name));
}

[[noreturn]] void bad_shape(const Function& fn, const alloy_cuda_head& L, const Context& ctx,
                            const std::string& name) {
  const DeviceInfo& info = ctx.info();
  for (int i = 0; i < 3; ++i) {
    if (L.threadgroup[i] == 0) {
      throw std::invalid_argument(fmt::format(
          "[metal_kernel] threadgroup size must be positive in every dimension, got ({}, {}, {}) "
          "for kernel {}",
          L.threadgroup[0], L.threadgroup[1], L.threadgroup[2], name));
    }
  }
  const char* axis = "xyz";
  for (int i = 0; i < 3; ++i) {
    if (L.threadgroup[i] > static_cast<uint32_t>(info.max_block_dim[i])) {
      throw NotSupported(name, fmt::format("not supported: a threadgroup of {} threads along "
                                           "{} (CUDA allows at most {}) for kernel {}",
                                           L.threadgroup[i], axis[i], info.max_block_dim[i], name));
    }
    if (L.groups[i] > static_cast<uint32_t>(info.max_grid_dim[i])) {
      throw NotSupported(name, fmt::format("not supported: {} threadgroups along {} (CUDA "
                                           "allows at most {}) for kernel {}",
                                           L.groups[i], axis[i], info.max_grid_dim[i], name));
    }
  }
  throw std::logic_error("bad_shape called for a valid shape");
}

// Opts `fn` in to `bytes` of dynamic shared memory when past the default 48 KiB.
void configure_shared(Context& ctx, const Function& fn, uint32_t bytes, const char* name) {
  int limit = ctx.info().max_shared_per_block_optin;
  if (static_cast<int64_t>(bytes) + fn.static_shared > limit) {
    throw std::invalid_argument(fmt::format(
        "[metal_kernel] threadgroup memory of {} bytes ({} dynamic + {} static) exceeds the "
        "maximum of {} for kernel {}",
        static_cast<int64_t>(bytes) + fn.static_shared, bytes, fn.static_shared, limit, name));
  }
  // Raised only, under a lock, so a concurrent launch never sees the limit shrink below its need.
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (fn.dynamic_shared_limit.load() >= static_cast<int>(bytes)) return;
  ctx.check(
      ctx.driver().cuFuncSetAttribute(fn.handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      static_cast<int>(bytes)),
      "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  fn.dynamic_shared_limit.store(static_cast<int>(bytes));
}

}  // namespace

Packed pack(const LaunchDesc& d, ParamBlock& P) {
  if (d.num_args > ALLOY_CUDA_MAX_BUFFERS)
    throw std::invalid_argument(
        fmt::format("kernel '{}' has {} buffers; at most {} are supported on the GPU", d.label,
                    d.num_args, ALLOY_CUDA_MAX_BUFFERS));
  const alloy_cuda_param_layout& l = P.layout;
  alloy_cuda_head& h = P.head;
  const uint32_t n = std::min(d.num_args, l.num_buffers);
  h.num_buffers = n;
  for (int k = 0; k < 3; ++k) {
    h.grid[k] = d.grid[k];
    h.threadgroup[k] = d.threadgroup[k];
  }
  set_groups(h);
  Packed out;
  // Memory pointers and (robust blocks) sizes, then host bytes into the inline data
  // (cuda_block_buffer / cuda_small_buffer in prelude/entry.h): `block` ones first, then `bytes`
  // ones; those that do not fit are left to the caller (device memory).
  bool host_bytes = false;
  for (uint32_t i = 0; i < n; ++i) {
    const LaunchArg& a = d.args[i];
    if (l.robust) P.set_buffer_bytes(i, a.nbytes);
    if (a.kind == LaunchArg::Kind::memory)
      P.set_buffer(i, a.data);
    else
      host_bytes = true;
  }
  size_t inline_used = 0;
  for (int pass = 0; host_bytes && pass < 2; ++pass) {
    auto kind = pass == 0 ? LaunchArg::Kind::block : LaunchArg::Kind::bytes;
    for (uint32_t i = 0; i < n; ++i) {
      const LaunchArg& a = d.args[i];
      if (a.kind != kind) continue;
      size_t off = block_align(inline_used);
      if (off + a.nbytes <= l.inline_bytes) {
        if (a.nbytes) std::memcpy(P.inline_data() + off, a.data, a.nbytes);
        inline_used = off + a.nbytes;
        h.inline_mask |= 1ull << i;
        P.set_buffer(i, reinterpret_cast<const void*>(off));
      } else if (kind == LaunchArg::Kind::block) {
        throw Error(d.label, fmt::format("[launch] kernel '{}': parameter block overflow ({} "
                                         "bytes at buffer({}), {} available)",
                                         d.label, a.nbytes, i, l.inline_bytes));
      } else {  // spilled: its entry holds its offset in the spill buffer (Packed)
        size_t at = block_align(out.spill_bytes);
        out.spilled |= 1ull << i;
        out.spill_bytes = at + a.nbytes;
        P.set_buffer(i, reinterpret_cast<const void*>(at));
      }
    }
  }
  // Threadgroup parameters in dynamic shared memory, in index order; one the entry does not
  // declare still takes its room (the caller asked for it).
  uint64_t smem = 0;
  for (uint32_t k = 0; k < ALLOY_CUDA_MAX_TG_PARAMS; ++k) {
    if (!d.tg_param_bytes[k]) continue;
    if (k < l.num_tg) P.set_tg_offset(k, smem);
    smem += block_align(d.tg_param_bytes[k]);
  }
  out.shared_bytes = static_cast<uint32_t>(smem);
  return out;
}

void spill_into(const LaunchDesc& d, const Packed& packed, ParamBlock& P, unsigned char* host,
                char* device) {
  for (uint32_t i = 0; i < P.head.num_buffers; ++i) {
    if (!((packed.spilled >> i) & 1)) continue;
    size_t off = reinterpret_cast<size_t>(P.buffer(i));
    std::memcpy(host + off, d.args[i].data, d.args[i].nbytes);
    P.set_buffer(i, device + off);
  }
}

void launch(Context& ctx, const Function& fn, const ParamBlock& P, uint32_t dynamic_shared_bytes,
            const char* label, const EntryLayout& layout) {
  const alloy_cuda_head& L = P.head;
  const Enqueued e =
      launch_block(ctx, fn, P.bytes(), P.layout.buffers, dynamic_shared_bytes, label, layout);
  if (e.blocks_x && graph_recording::active()) {
    const unsigned grid_dims[3] = {e.blocks_x, L.groups[1], L.groups[2]};
    const unsigned block_dims[3] = {L.threadgroup[0], L.threadgroup[1], L.threadgroup[2]};
    record_launch(fn, grid_dims, block_dims, e.shared_bytes, ctx.stream(), P, layout.param_buffers,
                  std::min<uint32_t>(layout.num_param_buffers, ALLOY_CUDA_MAX_BUFFERS),
                  label ? label : fn.kernel.c_str());
  }
}

Enqueued check_launch(Context& ctx, const Function& fn, const alloy_cuda_head& L,
                      uint32_t dynamic_shared_bytes, const char* label, const EntryLayout& layout) {
  const char* name = label ? label : fn.kernel.c_str();
  // Metal: a dispatch with no threads runs nothing and is no error.
  if (L.groups[0] == 0 || L.groups[1] == 0 || L.groups[2] == 0) return {};
  uint64_t threads = uint64_t(L.threadgroup[0]) * L.threadgroup[1] * L.threadgroup[2];
  if (threads > static_cast<uint64_t>(fn.max_threads)) too_many_threads(fn, threads, name);
  const DeviceInfo& info = ctx.info();
  if (threads == 0 || L.threadgroup[2] > static_cast<uint32_t>(info.max_block_dim[2]) ||
      L.groups[1] > static_cast<uint32_t>(info.max_grid_dim[1]) ||
      L.groups[2] > static_cast<uint32_t>(info.max_grid_dim[2]) ||
      L.groups[0] > static_cast<uint32_t>(info.max_grid_dim[0])) {
    bad_shape(fn, L, ctx, name);
  }
  // Threadgroup objects in dynamic shared memory sit above the threadgroup parameters, at the top
  // of all the dynamic shared memory the device allows (alloy_target::tg_storage).
  if (fn.large_threadgroup) {
    int all = ctx.info().max_shared_per_block_optin - fn.static_shared;
    if (all > static_cast<int>(dynamic_shared_bytes))
      dynamic_shared_bytes = static_cast<uint32_t>(all / 16 * 16);
  }
  if (static_cast<int64_t>(dynamic_shared_bytes) + fn.static_shared > kDefaultSharedLimit &&
      fn.dynamic_shared_limit.load(std::memory_order_relaxed) <
          static_cast<int>(dynamic_shared_bytes)) {
    configure_shared(ctx, fn, dynamic_shared_bytes, name);
  }
  // Several groups per block only when the grid stays a few waves deep: coarsening a small grid
  // would leave multiprocessors idle.
  uint32_t blocks_x = L.groups[0];
  if (layout.coarsen > 1) {
    uint64_t per_sm = std::min<uint64_t>(32, std::max<uint64_t>(1, 2048 / threads));
    uint64_t total = uint64_t(L.groups[0]) * L.groups[1] * L.groups[2];
    if (total >= uint64_t(layout.coarsen) * info.multiprocessors * per_sm * 2)
      blocks_x = (L.groups[0] + layout.coarsen - 1) / layout.coarsen;
  }
  return {blocks_x, dynamic_shared_bytes};
}

ALLOY_HOT void enqueue_block(Context& ctx, const Function& fn, const alloy_cuda_head& L,
                             const Enqueued& what, const void* block, uint32_t buffers,
                             const EntryLayout& layout, const char* label,
                             const Context::LaunchName& name) {
  if (!what.blocks_x) return;
  void* params[1 + ALLOY_CUDA_MAX_BUFFERS];
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(block));
  params[0] = bytes;
  uint32_t np = std::min<uint32_t>(layout.num_param_buffers, ALLOY_CUDA_MAX_BUFFERS);
  for (uint32_t i = 0; i < np; ++i) params[1 + i] = bytes + buffers + 8 * layout.param_buffers[i];
  CUresult r = ctx.driver().cuLaunchKernel(fn.handle, what.blocks_x, L.groups[1], L.groups[2],
                                           L.threadgroup[0], L.threadgroup[1], L.threadgroup[2],
                                           what.shared_bytes, ctx.stream(), params, nullptr);
  if (r != CUDA_SUCCESS) ctx.fail(r, "cuLaunchKernel", label ? label : fn.kernel.c_str());
  ctx.note_launch(name);
}

Enqueued launch_block(Context& ctx, const Function& fn, const void* block, uint32_t buffers,
                      uint32_t dynamic_shared_bytes, const char* label, const EntryLayout& layout) {
  alloy_cuda_head L;
  std::memcpy(&L, block, sizeof L);
  const Enqueued what = check_launch(ctx, fn, L, dynamic_shared_bytes, label, layout);
  if (!what.blocks_x) return what;
  enqueue_block(ctx, fn, L, what, block, buffers, layout, label,
                Context::launch_name(label ? label : fn.kernel.c_str()));
  return what;
}

}  // namespace alloy::cuda
