// The C ABI between the CPU runtime (src/backend/cpu) and JIT-compiled kernel libraries.
// Included by both sides: plain C layout, no STL, no exceptions across it.
//
// A kernel library exports, for each kernel entry i (see msl/translate.h):
//   extern "C" ALLOY_CPU_EXPORT void alloy_group_<i>(const alloy_cpu_launch*, alloy_cpu_group*);
//       runs every thread of one threadgroup as a plain loop (kernels without barriers/simd ops);
//   extern "C" ALLOY_CPU_EXPORT void alloy_groups_<i>(const alloy_cpu_launch*, alloy_cpu_group*,
//                                                     uint64_t first, uint64_t count);
//       loop mode, kernels that cannot tell their threadgroup only (msl/target.cpp
//       merged_groups): runs groups [first, first + count) (linear index, x fastest), each x row
//       of them as one thread loop; one call per chunk of groups instead of one per group
//       (optional: the runtime runs alloy_group_<i> per group where a library lacks it);
//   extern "C" ALLOY_CPU_EXPORT void alloy_thread_<i>(const alloy_cpu_launch*, alloy_cpu_group*,
//                                                     uint32_t lid);
//       runs one thread (linear index lid in its group); the runtime gives each thread a fiber
//       and switches at barriers and simd exchanges.
#pragma once
#include <stdint.h>

// Kernel libraries are built with -fvisibility=hidden (backend/cpu/jit.cpp): only what is marked
// so is exported, and the functions the entries call are not interposable, so they inline.
#define ALLOY_CPU_EXPORT __attribute__((visibility("default")))

#define ALLOY_CPU_MAX_TG_SLOTS 64
#define ALLOY_CPU_MAX_BUFFERS 64
#define ALLOY_CPU_SIMD_SLOT_BYTES 64  // largest value one lane exchanges (e.g. a long4 + padding)

extern "C" {

struct alloy_cpu_group;

// Synchronization services the runtime provides to kernels running in fiber mode.
struct alloy_cpu_sync {
  // threadgroup_barrier: returns when every live thread of the group has reached a barrier.
  void (*threadgroup_barrier)(alloy_cpu_group* g);
  // Publishes `bytes` bytes of the current lane, waits for every live lane of its simdgroup, then
  // copies the 32 lanes' slots (32 * bytes, lane-major) into `all`; sets g->simd_live (mask).
  void (*simd_gather)(alloy_cpu_group* g, const void* in, void* all, uint32_t bytes);
  // simdgroup_barrier: returns when every live lane of the current simdgroup has reached it.
  void (*simdgroup_barrier)(alloy_cpu_group* g);
  // Reports an out-of-range access in robust mode (the access itself is suppressed by the kernel).
  void (*report_oob)(alloy_cpu_group* g, uint32_t buffer, int64_t index, int is_write);
};

struct alloy_cpu_launch {
  void* const* buffers;          // buffer(n) -> pointer
  const uint64_t* buffer_bytes;  // sizes, for robust mode
  uint32_t num_buffers;
  uint32_t grid[3];            // threads per grid (dispatchThreads)
  uint32_t threadgroup[3];     // threads per threadgroup as dispatched
  uint32_t groups[3];          // threadgroups per grid = ceil(grid / threadgroup)
  uint64_t tg_param_bytes[8];  // sizes of [[threadgroup(n)]] parameters
};

struct alloy_cpu_group {
  const alloy_cpu_sync* sync;  // loop mode: only report_oob works (barrier/simd entries throw)
  void* runtime;               // opaque to kernels
  uint32_t group_pos[3];       // threadgroup_position_in_grid
  uint32_t group_size[3];      // threads_per_threadgroup (partial at the grid's edges)
  uint32_t nthreads;           // product of group_size
  uint32_t current;            // fiber mode: linear index of the running thread
  uint32_t simd_live;          // fiber mode: bitmask of live lanes in the current simdgroup
  uint32_t pad_;
  // Threadgroup memory of this group: a bump arena, reset per group. Each `threadgroup` object in
  // the source has a slot id; the first thread to reach it allocates, the others reuse the pointer.
  unsigned char* tg_arena;
  uint64_t tg_capacity;
  uint64_t tg_used;
  void* tg_slots[ALLOY_CPU_MAX_TG_SLOTS];
  void* tg_params[8];  // [[threadgroup(n)]] parameters, allocated by the runtime per group
  // Split mode (kernels cut at barriers into work-item loops, cpu/split.h): scratch for values
  // that live across regions and for simd exchanges, owned by the runtime (reused per group),
  // and the split state of the running group (null outside split mode).
  unsigned char* split_arena;
  uint64_t split_capacity;
  void* split;
  // Outputs that a kernel may stream (msl/target.cpp: KernelEntry::stream_params) are streamed
  // with non-temporal stores when their buffer holds at least this many bytes (set by the
  // runtime; UINT64_MAX: never).
  uint64_t stream_min_bytes;
};

typedef void (*alloy_cpu_group_fn)(const alloy_cpu_launch*, alloy_cpu_group*);
typedef void (*alloy_cpu_thread_fn)(const alloy_cpu_launch*, alloy_cpu_group*, uint32_t);
typedef void (*alloy_cpu_groups_fn)(const alloy_cpu_launch*, alloy_cpu_group*, uint64_t, uint64_t);

}  // extern "C"
