// Kernel entry support, written once for every target: the Metal attribute values of a thread
// and the binding of launch buffers to kernel parameters. The translator's per-target entry
// (msl/target.cpp) fills a thread_ids from the target's raw thread ids and calls the kernel.
#pragma once
#include "metal_core.h"
#if defined(ALLOY_TARGET_CUDA)
#include "cuda/abi.h"
#else
#include "cpu/abi.h"
#endif
#ifdef ALLOY_NEED_ROBUST
#include "robust.h"
#endif

namespace alloy_entry {

typedef unsigned int u32;

// A CUDA entry binds a buffer as ptr_arg/ref_arg (one conversion per parameter type) and an
// attribute of a known declared type as plain code (msl/target.cpp); the binding templates below
// (arg, the attribute conversions) cost a small kernel's NVRTC compile milliseconds, so a
// selected CUDA translation gets them only when it names them (robust mode, an attribute of
// another declared type): ALLOY_NEED_ENTRY_ARGS. The CPU entries use them always.
#if !defined(ALLOY_SELECT) || !defined(ALLOY_TARGET_CUDA) || defined(ALLOY_NEED_ENTRY_ARGS)
#define ALLOY_ENTRY_ARGS 1
#endif

struct ptr_arg {
  void* p;
  template <class T>
  ALLOY_FN operator T*() const {
    return static_cast<T*>(p);
  }
};
struct ref_arg {
  void* p;
  template <class T>
  ALLOY_FN operator T&() const {
    return *static_cast<T*>(p);
  }
};

#ifdef ALLOY_ENTRY_ARGS
// ---- minimal traits (NVRTC has no standard library) ----
template <class T>
struct remove_ref {
  typedef T type;
};
template <class T>
struct remove_ref<T&> {
  typedef T type;
};
template <class T>
struct is_ptr {
  enum : bool { value = false };
};
template <class T>
struct is_ptr<T*> {
  enum : bool { value = true };
};
template <int I, class... A>
struct nth;
template <class H, class... A>
struct nth<0, H, A...> {
  typedef H type;
};
template <int I, class H, class... A>
struct nth<I, H, A...> {
  typedef typename nth<I - 1, A...>::type type;
};
template <int I, class F>
struct param;
template <int I, class R, class... A>
struct param<I, R (*)(A...)> {
  typedef typename nth<I, A...>::type type;
};

template <class P>
struct robust_traits {
  enum : bool { value = false };
};
#ifdef ALLOY_NEED_ROBUST
template <class E>
struct robust_traits<alloy_robust::ptr<E>> {
  enum : bool { value = true };
  typedef E elem;
};
#endif

/// Parameter I of kernel F bound to launch memory `p` of `bytes` bytes from [[buffer(index)]]:
/// pointers are cast, `constant T&` scalars are dereferenced, robust-mode pointers get the
/// buffer's extent and the launch context `ctx` for reports.
template <int I, class F>
ALLOY_FN decltype(auto) arg(F, void* p, unsigned long long bytes, unsigned index, void* ctx) {
  typedef typename param<I, F>::type P;
  if constexpr (robust_traits<P>::value) {
    return P(static_cast<typename robust_traits<P>::elem*>(p), bytes, index, ctx);
  } else if constexpr (is_ptr<P>::value) {
    return static_cast<P>(p);
  } else {
    typedef typename remove_ref<P>::type V;
    return *static_cast<V*>(p);
  }
}

// An attribute value that converts to the parameter's declared type (uint, uint2, uint3,
// ushort...).
template <class T>
struct attr_conv {
  static ALLOY_FN T make(u32 x, u32, u32) { return static_cast<T>(x); }
};
template <class E>
struct attr_conv<metal::vec<E, 2>> {
  static ALLOY_FN metal::vec<E, 2> make(u32 x, u32 y, u32) {
    return metal::vec<E, 2>(static_cast<E>(x), static_cast<E>(y));
  }
};
template <class E>
struct attr_conv<metal::vec<E, 3>> {
  static ALLOY_FN metal::vec<E, 3> make(u32 x, u32 y, u32 z) {
    return metal::vec<E, 3>(static_cast<E>(x), static_cast<E>(y), static_cast<E>(z));
  }
};
struct attr {
  u32 x, y, z;
  template <class T>
  ALLOY_FN operator T() const {
    return attr_conv<T>::make(x, y, z);
  }
};
// The CUDA entry's binding of an attribute of a declared type it does not spell itself.
ALLOY_FN attr attr_to_param(attr a) {
  return a;
}
#else
struct attr {  // components only: the CUDA entry converts them itself
  u32 x, y, z;
};
#endif  // ALLOY_ENTRY_ARGS

// An attribute as a vector<E, N> (N = 2, 3): the CUDA entry's binding of `uint3 gid
// [[thread_position_in_grid]]` and the like. Assigns the components instead of calling vec's
// constructors, whose overload resolution costs NVRTC milliseconds.
template <class E, int N>
ALLOY_FN metal::vec<E, N> attr_vec(attr a) {
  metal::vec<E, N> v;
  v.alloy_e[0] = static_cast<E>(a.x);
  v.alloy_e[1] = static_cast<E>(a.y);
  if constexpr (N == 3) v.alloy_e[2] = static_cast<E>(a.z);
  return v;
}

// The quick compile (ALLOY_QUICK_ENTRY) of a CUDA translation whose entries all read CUDA's ids
// directly (ALLOY_ENTRY_GRID_IDS, msl/target.cpp: cuda_grid_ids) has no use for thread_ids.
#if !(defined(ALLOY_TARGET_CUDA) && defined(ALLOY_QUICK_ENTRY) && defined(ALLOY_ENTRY_GRID_IDS))
#define ALLOY_ENTRY_THREAD_IDS 1
#endif

#ifdef ALLOY_ENTRY_THREAD_IDS
/// Raw ids of one thread; the attribute functions give Metal's values (MSL spec, attribute
/// qualifiers for kernel function input arguments). Non-uniform threadgroups: at the grid's
/// edges a group is partial, and threads_per_threadgroup is its actual size, while
/// dispatch_threads_per_threadgroup stays the dispatched size.
struct thread_ids {
  u32 grid[3];    // threads per grid
  u32 tg[3];      // dispatched threadgroup size
  u32 groups[3];  // threadgroups per grid
  u32 gpos[3];    // this group's position
  u32 gsize[3];   // this group's actual (partial) size
  u32 local[3];   // position in the group
  u32 lid;        // linear index in the group, x fastest, over the actual size
  // CPU: lid as a 64-bit index, for the split mode's per-thread arrays: affine in the thread
  // loop's counter (a 32-bit sum may wrap, which keeps the vectoriser from seeing contiguous
  // accesses). Unused on CUDA.
  unsigned long long li;

  ALLOY_FN bool outside_grid() const {
    // Global position >= grid in some dimension (non-short-circuit: no branches).
    return (gpos[0] * tg[0] + local[0] >= grid[0]) | (gpos[1] * tg[1] + local[1] >= grid[1]) |
           (gpos[2] * tg[2] + local[2] >= grid[2]);
  }
  ALLOY_FN attr thread_position_in_grid() const {
    return {gpos[0] * tg[0] + local[0], gpos[1] * tg[1] + local[1], gpos[2] * tg[2] + local[2]};
  }
  ALLOY_FN attr threads_per_grid() const { return {grid[0], grid[1], grid[2]}; }
  ALLOY_FN attr grid_size() const { return {grid[0], grid[1], grid[2]}; }
  ALLOY_FN attr grid_origin() const { return {0, 0, 0}; }
  ALLOY_FN attr thread_position_in_threadgroup() const { return {local[0], local[1], local[2]}; }
  ALLOY_FN attr threadgroup_position_in_grid() const { return {gpos[0], gpos[1], gpos[2]}; }
  ALLOY_FN attr threads_per_threadgroup() const { return {gsize[0], gsize[1], gsize[2]}; }
  ALLOY_FN attr dispatch_threads_per_threadgroup() const { return {tg[0], tg[1], tg[2]}; }
  ALLOY_FN attr threadgroups_per_grid() const { return {groups[0], groups[1], groups[2]}; }
  ALLOY_FN attr thread_index_in_threadgroup() const { return {lid, 0, 0}; }
  ALLOY_FN attr thread_index_in_simdgroup() const { return {lid % 32u, 0, 0}; }
  ALLOY_FN attr simdgroup_index_in_threadgroup() const { return {lid / 32u, 0, 0}; }
  ALLOY_FN attr simdgroups_per_threadgroup() const {
    return {(gsize[0] * gsize[1] * gsize[2] + 31u) / 32u, 0, 0};
  }
  ALLOY_FN attr dispatch_simdgroups_per_threadgroup() const {
    return {(tg[0] * tg[1] * tg[2] + 31u) / 32u, 0, 0};
  }
  ALLOY_FN attr threads_per_simdgroup() const { return {32u, 0, 0}; }
  ALLOY_FN attr thread_execution_width() const { return {32u, 0, 0}; }
  ALLOY_FN attr thread_index_in_quadgroup() const { return {lid % 4u, 0, 0}; }
  ALLOY_FN attr quadgroup_index_in_threadgroup() const { return {lid / 4u, 0, 0}; }
  ALLOY_FN attr quadgroups_per_threadgroup() const {
    return {(gsize[0] * gsize[1] * gsize[2] + 3u) / 4u, 0, 0};
  }
  ALLOY_FN attr dispatch_quadgroups_per_threadgroup() const {
    return {(tg[0] * tg[1] * tg[2] + 3u) / 4u, 0, 0};
  }
};
#endif  // ALLOY_ENTRY_THREAD_IDS

#if defined(ALLOY_TARGET_CPU)
ALLOY_FN thread_ids cpu_ids(const alloy_cpu_launch* L, const alloy_cpu_group* g, u32 x, u32 y,
                            u32 z) {
  thread_ids t;
  for (int d = 0; d < 3; ++d) {
    t.grid[d] = L->grid[d];
    t.tg[d] = L->threadgroup[d];
    t.groups[d] = L->groups[d];
    t.gpos[d] = g->group_pos[d];
    t.gsize[d] = g->group_size[d];
  }
  t.local[0] = x;
  t.local[1] = y;
  t.local[2] = z;
  t.lid = x + g->group_size[0] * (y + g->group_size[1] * z);
  t.li = t.lid;
  return t;
}
ALLOY_FN thread_ids cpu_ids(const alloy_cpu_launch* L, const alloy_cpu_group* g, u32 lid) {
  u32 sx = g->group_size[0], sy = g->group_size[1];
  return cpu_ids(L, g, lid % sx, (lid / sx) % sy, lid / (sx * sy));
}

/// Loop mode: f(ids) for every thread of group g in Metal's linear order (x fastest). The loop
/// counts over the grid position in x rather than over the position in the group: a kernel's
/// global index (thread_position_in_grid.x) is then the induction variable itself, which the
/// vectoriser sees as affine; gpos * tg + local could wrap, so it cannot.
template <class F>
ALLOY_FN void cpu_for_each_thread(const alloy_cpu_launch* L, const alloy_cpu_group* g, F&& f) {
  thread_ids t = cpu_ids(L, g, 0, 0, 0);
  const u32 nx = t.gsize[0], ny = t.gsize[1], nz = t.gsize[2];
  const u32 x0 = t.gpos[0] * t.tg[0];  // grid x of the group's first thread; x0 + nx <= grid
  for (u32 z = 0; z < nz; ++z) {
    for (u32 y = 0; y < ny; ++y) {
      t.local[1] = y;
      t.local[2] = z;
      const u32 row = nx * (y + ny * z);
      const u32 end = x0 + nx;
      for (u32 px = x0; px < end; ++px) {
        thread_ids u = t;
        u.local[0] = px - x0;
        u.lid = row + (px - x0);
        u.li = u.lid;
        f(u);
      }
    }
  }
}

/// Streamed outputs (msl/target.cpp, KernelEntry::stream_params): threads per block, so that
/// the blocks' staging of all streamed outputs (`bytes` per thread) takes about 16 KiB, a
/// multiple of 64 threads.
constexpr unsigned cpu_stream_block(unsigned long long bytes) {
  unsigned long long n = (16384 / (bytes ? bytes : 1)) / 64 * 64;
  return n ? static_cast<unsigned>(n) : 64u;
}

/// Copies `bytes` from src to dst with non-temporal stores where dst is 16-byte aligned (x86-64;
/// elsewhere a plain copy). Ordered with later stores only by cpu_stream_fence.
// One aligned non-temporal vector store: Clang's generic builtin, g++'s x86 ones.
#if defined(__clang__)
#define ALLOY_CPU_NT_STORE(V, P, BUILTIN) __builtin_nontemporal_store(V, P)
#else
#define ALLOY_CPU_NT_STORE(V, P, BUILTIN) BUILTIN(P, V)
#endif
ALLOY_FN void cpu_stream_copy(void* dst, const void* src, unsigned long long bytes) {
#if defined(__x86_64__) && defined(__SSE2__)
  typedef long long v2di __attribute__((vector_size(16)));
  unsigned char* d = static_cast<unsigned char*>(dst);
  const unsigned char* s = static_cast<const unsigned char*>(src);
  unsigned long long head = (16 - (reinterpret_cast<unsigned long long>(d) & 15)) & 15;
  if (head > bytes) head = bytes;
  __builtin_memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
#if defined(__AVX512F__)
  typedef long long v8di __attribute__((vector_size(64)));
  if ((reinterpret_cast<unsigned long long>(d) & 63) == 0) {
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
      v8di v;
      __builtin_memcpy(&v, s, 64);
      ALLOY_CPU_NT_STORE(v, reinterpret_cast<v8di*>(d), __builtin_ia32_movntdq512);
    }
  }
#elif defined(__AVX__)
  typedef long long v4di __attribute__((vector_size(32)));
  if ((reinterpret_cast<unsigned long long>(d) & 31) == 0) {
    for (; bytes >= 32; bytes -= 32, d += 32, s += 32) {
      v4di v;
      __builtin_memcpy(&v, s, 32);
      ALLOY_CPU_NT_STORE(v, reinterpret_cast<v4di*>(d), __builtin_ia32_movntdq256);
    }
  }
#endif
  for (; bytes >= 16; bytes -= 16, d += 16, s += 16) {
    v2di v;
    __builtin_memcpy(&v, s, 16);
    ALLOY_CPU_NT_STORE(v, reinterpret_cast<v2di*>(d), __builtin_ia32_movntdq);
  }
  __builtin_memcpy(d, s, bytes);
#else
  __builtin_memcpy(dst, src, bytes);
#endif
}
ALLOY_FN void cpu_stream_fence() {
#if defined(__x86_64__) && defined(__SSE2__)
  __builtin_ia32_sfence();
#endif
}
/// Stores elements [x0, x0 + n) of a streamed output from its staging block, within the
/// buffer's `buffer_bytes` (a grid larger than the buffer writes past its end in a plain
/// store's place: not further).
template <class T>
ALLOY_FN void cpu_stream_store(T* out, u32 x0, u32 n, const void* stage,
                               unsigned long long buffer_bytes) {
  const unsigned long long off = (unsigned long long)x0 * sizeof(T);
  if (off >= buffer_bytes) return;
  unsigned long long bytes = (unsigned long long)n * sizeof(T);
  if (bytes > buffer_bytes - off) bytes = buffer_bytes - off;
  cpu_stream_copy(reinterpret_cast<unsigned char*>(out) + off, stage, bytes);
}

/// Loop mode, several groups per call (alloy_groups_<i>, abi.h), for a kernel that reads no
/// attribute of its group
/// (msl/target.cpp merged_groups: only thread_position_in_grid and grid-wide values; no
/// threadgroup parameter; not robust mode): consecutive groups of one x row of groups run as one
/// loop over their threads, row by row (y, z), so the loop's setup, its alias check and its last
/// partial vector are paid once per run of groups instead of once per group. Such a kernel
/// cannot tell which group a thread is in, and in loop mode each thread runs to its end before
/// the next one starts, so one run is an order in which Metal may run those groups' threads. g's
/// position is the run's first group (a fault inside a run is located by the executor, which
/// runs that chunk's groups again one by one: executor.cpp).
///
/// cpu_for_each_run_rows walks the runs: for each run and each (y, z) row of its groups' threads
/// it sets g and calls row(t, x0, end) with t the row's first thread's ids (local x unset), x0
/// the grid x of the run's first thread (as thread_position_in_grid computes it: gpos * tg +
/// local, so a loop counter from x0 is the kernel's index itself) and end the grid x past its
/// last thread.
template <class R>
ALLOY_FN void cpu_for_each_run_rows(const alloy_cpu_launch* L, alloy_cpu_group* g,
                                    unsigned long long first, unsigned long long count, R&& row) {
  const unsigned long long gx = L->groups[0], gxy = gx * L->groups[1];
  u32 p[3] = {static_cast<u32>(first % gx), static_cast<u32>(first % gxy / gx),
              static_cast<u32>(first / gxy)};
  while (count > 0) {
    const unsigned long long left = gx - p[0];
    const u32 c = static_cast<u32>(count < left ? count : left);
    u32 n = 1;
    for (int d = 0; d < 3; ++d) {
      const u32 start = p[d] * L->threadgroup[d];
      const u32 size =
          L->grid[d] - start < L->threadgroup[d] ? L->grid[d] - start : L->threadgroup[d];
      g->group_pos[d] = p[d];
      g->group_size[d] = size;
      n *= size;
    }
    g->nthreads = n;
    g->current = 0;
    g->simd_live = 0;
    if (g->tg_used) {
      g->tg_used = 0;
      for (int s = 0; s < ALLOY_CPU_MAX_TG_SLOTS; ++s) g->tg_slots[s] = nullptr;
    }
    thread_ids t = cpu_ids(L, g, 0, 0, 0);
    const u32 ny = t.gsize[1], nz = t.gsize[2];
    const u32 x0 = t.gpos[0] * t.tg[0];
    const unsigned long long last = (unsigned long long)(p[0] + c) * L->threadgroup[0];
    const u32 end = last < L->grid[0] ? static_cast<u32>(last) : L->grid[0];
    for (u32 z = 0; z < nz; ++z) {
      for (u32 y = 0; y < ny; ++y) {
        t.local[1] = y;
        t.local[2] = z;
        row(t, x0, end);
      }
    }
    count -= c;
    p[0] += c;
    if (p[0] == L->groups[0]) {
      p[0] = 0;
      if (++p[1] == L->groups[1]) {
        p[1] = 0;
        ++p[2];
      }
    }
  }
}

template <class F>
ALLOY_FN void cpu_for_each_run(const alloy_cpu_launch* L, alloy_cpu_group* g,
                               unsigned long long first, unsigned long long count, F&& f) {
  cpu_for_each_run_rows(L, g, first, count,
                        [&](const thread_ids& t, u32 x0, u32 end) ALLOY_CPU_INLINE_LAMBDA {
                          for (u32 px = x0; px < end; ++px) {
                            thread_ids u = t;
                            u.local[0] = px - x0;
                            u.lid = px - x0;
                            u.li = u.lid;
                            f(u);
                          }
                        });
}

/// cpu_for_each_run in blocks of at most `block` threads along x: f(ids, before(x0)) for the
/// threads [x0, x0 + n) of a block (before's value: the block's output pointers, loop-invariant),
/// then after(x0, n) (streamed outputs: prelude above).
template <class B, class F, class A>
ALLOY_FN void cpu_for_each_run_blocks(const alloy_cpu_launch* L, alloy_cpu_group* g,
                                      unsigned long long first, unsigned long long count, u32 block,
                                      B&& before, F&& f, A&& after) {
  cpu_for_each_run_rows(L, g, first, count,
                        [&](const thread_ids& t, u32 x0, u32 end) ALLOY_CPU_INLINE_LAMBDA {
                          for (u32 b = x0; b < end;) {
                            const u32 e = end - b > block ? b + block : end;
                            const auto block_args = before(b);
                            for (u32 px = b; px < e; ++px) {
                              thread_ids u = t;
                              u.local[0] = px - x0;
                              u.lid = px - x0;
                              u.li = u.lid;
                              f(u, block_args);
                            }
                            after(b, e - b);
                            b = e;
                          }
                        });
}

/// Split mode's thread loop (one region): the x loop counts the position in the group, and
/// `#pragma GCC ivdep` tells the vectoriser that threads carry no dependence from one to the
/// next: between two barriers, two threads' conflicting accesses to one location (other than
/// atomics, which are never vectorised) are a data race in Metal, so any order of the group's
/// threads is a valid execution. Without it g++ needs runtime alias checks, which it cannot form
/// for 32-bit indices that may wrap (`lid + k * n`), and leaves such loops scalar. The per-thread
/// arrays are indexed by li, 64-bit and affine in the loop counter.
template <class F>
ALLOY_FN void cpu_for_each_region_thread(const alloy_cpu_launch* L, const alloy_cpu_group* g,
                                         F&& f) {
  thread_ids t = cpu_ids(L, g, 0, 0, 0);
  const u32 nx = t.gsize[0], ny = t.gsize[1], nz = t.gsize[2];
  // The executor runs groups of at most 1024 threads: with these bounds g++ can tell that
  // `lid + small offset` does not wrap.
  if (nx > 1024u || ny > 1024u || nz > 1024u) __builtin_unreachable();
  for (u32 z = 0; z < nz; ++z) {
    for (u32 y = 0; y < ny; ++y) {
      t.local[1] = y;
      t.local[2] = z;
      const unsigned long long row = (unsigned long long)nx * (y + (unsigned long long)ny * z);
#pragma GCC ivdep
      for (u32 x = 0; x < nx; ++x) {
        thread_ids u = t;
        u.local[0] = x;
        u.li = row + x;
        u.lid = static_cast<u32>(u.li);
        f(u);
      }
    }
  }
}

/// Split mode: one region of a kernel cut at barriers, f(ids) for every thread of the group that
/// is alive and in mask m (null: every live thread). While no thread has returned and no mask
/// applies it is the plain loop of loop mode, for the host compiler to vectorise.
template <class F>
ALLOY_FN void cpu_region(alloy_split::state& s, const unsigned char* m, F&& f) {
  if (!m && !s.any_dead) {
    cpu_for_each_region_thread(s.L, s.g, f);
    return;
  }
  // Locals: stores through char pointers could otherwise change them, as far as g++ knows.
  const unsigned char* alive = s.alive;
  const unsigned char* mm = m ? m : alive;
  // Blocks of up to 32 threads of one x row (a simdgroup where x is a multiple of 32): a block
  // with no active thread is skipped, a block with every thread active runs as an unmasked loop
  // (vectorised), and only mixed blocks test each thread. Predicated simd statements
  // (`if (sg == 0) { v = simd_sum(v); }`) and interchanged loops' last iterations are mostly
  // whole or empty blocks. Flags and the alive bytes are 0 or 1.
  thread_ids t = cpu_ids(s.L, s.g, 0, 0, 0);
  const u32 nx = t.gsize[0], ny = t.gsize[1], nz = t.gsize[2];
  if (nx > 1024u || ny > 1024u || nz > 1024u) __builtin_unreachable();
  for (u32 z = 0; z < nz; ++z) {
    for (u32 y = 0; y < ny; ++y) {
      t.local[1] = y;
      t.local[2] = z;
      const unsigned long long row = (unsigned long long)nx * (y + (unsigned long long)ny * z);
      for (u32 x0 = 0; x0 < nx; x0 += 32u) {
        const u32 len = nx - x0 < 32u ? nx - x0 : 32u;
        const unsigned long long b = row + x0;
        u32 cnt = 0;
        for (u32 j = 0; j < len; ++j) cnt += alive[b + j] & mm[b + j];
        if (cnt == 0) continue;
        if (cnt == len) {
#pragma GCC ivdep
          for (u32 j = 0; j < len; ++j) {
            thread_ids u = t;
            u.local[0] = x0 + j;
            u.li = b + j;
            u.lid = static_cast<u32>(u.li);
            f(u);
          }
        } else {
          for (u32 j = 0; j < len; ++j) {
            if (!(alive[b + j] & mm[b + j])) continue;
            thread_ids u = t;
            u.local[0] = x0 + j;
            u.li = b + j;
            u.lid = static_cast<u32>(u.li);
            f(u);
          }
        }
      }
    }
  }
}

/// Split mode: a region in which only threads at x = 0 of their group can have an effect
/// (msl/regions.cpp first_x_region: `if (lane == 0) ...` after a simd_sum): f(ids) for the
/// first thread of each x row that is alive and in mask m, the others skipped.
template <class F>
ALLOY_FN void cpu_region_x0(alloy_split::state& s, const unsigned char* m, F&& f) {
  thread_ids t = cpu_ids(s.L, s.g, 0, 0, 0);
  const u32 nx = t.gsize[0], ny = t.gsize[1], nz = t.gsize[2];
  for (u32 z = 0; z < nz; ++z) {
    for (u32 y = 0; y < ny; ++y) {
      const unsigned long long row = (unsigned long long)nx * (y + (unsigned long long)ny * z);
      if (!s.alive[row] || (m && !m[row])) continue;
      thread_ids u = t;
      u.local[1] = y;
      u.local[2] = z;
      u.li = row;
      u.lid = static_cast<u32>(row);
      f(u);
    }
  }
}

/// Split mode: a versioned region (msl/regions.cpp). `far(t)` evaluates, for the first thread
/// of a row of the group (x = 0), the subscripts of the region's buffer accesses that depend on
/// the thread, and says whether one of them is a 32-bit unsigned value above 2^31 - 1
/// (alloy_split::index_far). Where none is, the row runs `fast`, the same statements, in a loop
/// that tells g++ so (`if (far(t)) __builtin_unreachable();`, loop-invariant): then `C + lid.x`
/// with C below 2^31 and lid.x below 1024 cannot wrap, and g++ emits contiguous vector loads
/// instead of an element-by-element gather (it does no runtime wrap versioning itself). Rows
/// where one is, and masked regions or groups where a thread has returned, run `slow`, the
/// region as before. Both copies compute the same values (Metal's uint arithmetic, wrapping
/// where it wraps): the fact given to g++ is checked before it is used.
template <class C, class F, class G>
ALLOY_FN void cpu_region_v(alloy_split::state& s, const unsigned char* m, C&& far, F&& fast,
                           G&& slow) {
  if (m || s.any_dead) {
    cpu_region(s, m, slow);
    return;
  }
  thread_ids t = cpu_ids(s.L, s.g, 0, 0, 0);
  const u32 nx = t.gsize[0], ny = t.gsize[1], nz = t.gsize[2];
  if (nx > 1024u || ny > 1024u || nz > 1024u) __builtin_unreachable();
  for (u32 z = 0; z < nz; ++z) {
    for (u32 y = 0; y < ny; ++y) {
      t.local[1] = y;
      t.local[2] = z;
      const unsigned long long row = (unsigned long long)nx * (y + (unsigned long long)ny * z);
      t.li = row;
      t.lid = static_cast<u32>(row);
      if (far(t)) {
#pragma GCC ivdep
        for (u32 x = 0; x < nx; ++x) {
          thread_ids u = t;
          u.local[0] = x;
          u.li = row + x;
          u.lid = static_cast<u32>(u.li);
          slow(u);
        }
        continue;
      }
#pragma GCC ivdep
      for (u32 x = 0; x < nx; ++x) {
        if (far(t)) __builtin_unreachable();
        thread_ids u = t;
        u.local[0] = x;
        u.li = row + x;
        u.lid = static_cast<u32>(u.li);
        fast(u);
      }
    }
  }
}
#endif

#if defined(ALLOY_TARGET_CUDA) && defined(ALLOY_ENTRY_THREAD_IDS)
template <class P>
__device__ __forceinline__ thread_ids cuda_ids(const P& L) {
  const alloy_cuda_head& h = L.head();
  thread_ids t;
  const u32 b[3] = {blockIdx.x, blockIdx.y, blockIdx.z};
  const u32 l[3] = {threadIdx.x, threadIdx.y, threadIdx.z};
  // The launch makes blockDim = h.threadgroup and gridDim = h.groups; the special registers are
  // cheaper than parameter loads.
  const u32 bd[3] = {blockDim.x, blockDim.y, blockDim.z};
  const u32 gd[3] = {gridDim.x, gridDim.y, gridDim.z};
  for (int d = 0; d < 3; ++d) {
    t.grid[d] = h.grid[d];
    t.tg[d] = bd[d];
    t.groups[d] = gd[d];
    t.gpos[d] = b[d];
    u32 left = h.grid[d] - b[d] * bd[d];
    t.gsize[d] = left < bd[d] ? left : bd[d];
    t.local[d] = l[d];
  }
  t.lid = l[0] + t.gsize[0] * (l[1] + t.gsize[1] * l[2]);
  // Metal numbers a partial group's threads over its actual size (lid = x + w * (y + h * z)) and
  // forms simdgroups from consecutive lids; CUDA forms warps over the block's full width. Where
  // the two differ (partial in x with y/z extent, or partial in y with z extent), CUDA thread
  // number n plays Metal thread lid = n, so warps are Metal's simdgroups; the block's last
  // threads, past the group's size, are outside the grid.
  if ((t.gsize[0] != bd[0] && bd[1] * bd[2] > 1) || (t.gsize[1] != bd[1] && bd[2] > 1)) {
    const u32 n = l[0] + bd[0] * (l[1] + bd[1] * l[2]);
    const u32 plane = t.gsize[0] * t.gsize[1];
    t.lid = n;
    if (n < plane * t.gsize[2]) {
      t.local[0] = n % t.gsize[0];
      t.local[1] = (n / t.gsize[0]) % t.gsize[1];
      t.local[2] = n / plane;
    } else if (t.gsize[0] != bd[0]) {
      t.local[0] =
          t.gsize[0];  // gpos * tg + gsize = grid in a dimension where the group is partial
    } else {
      t.local[1] = t.gsize[1];
    }
  }
  return t;
}

// Coarsened entries (abi.h): the ids of this thread in threadgroup (gx, blockIdx.y, blockIdx.z).
// `full`: the caller knows the group is whole (no partial sizes to compute).
template <class P>
__device__ __forceinline__ thread_ids cuda_ids_at(const P& L, u32 gx, bool full) {
  const alloy_cuda_head& h = L.head();
  thread_ids t;
  const u32 b[3] = {gx, blockIdx.y, blockIdx.z};
  const u32 l[3] = {threadIdx.x, threadIdx.y, threadIdx.z};
  const u32 bd[3] = {blockDim.x, blockDim.y, blockDim.z};
  for (int d = 0; d < 3; ++d) {
    t.grid[d] = h.grid[d];
    t.tg[d] = bd[d];
    t.groups[d] = h.groups[d];
    t.gpos[d] = b[d];
    if (full) {
      t.gsize[d] = bd[d];
    } else {
      u32 left = h.grid[d] - b[d] * bd[d];
      t.gsize[d] = left < bd[d] ? left : bd[d];
    }
    t.local[d] = l[d];
  }
  t.lid = l[0] + t.gsize[0] * (l[1] + t.gsize[1] * l[2]);
  return t;
}

#endif  // ALLOY_ENTRY_THREAD_IDS

#if defined(ALLOY_TARGET_CUDA)
// The quick entry's ids (one group per block, ALLOY_QUICK_ENTRY) when the kernel reads only
// attributes that need no group-size arithmetic (msl/target.cpp): what cuda_ids_at(L,
// blockIdx.x, false) gives for them, with no thread_ids to fill (NVVM's time on a small kernel).
struct cuda_grid_ids {
  const alloy_cuda_head& L;
  __device__ __forceinline__ attr thread_position_in_grid() const {
    return {blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y,
            blockIdx.z * blockDim.z + threadIdx.z};
  }
  __device__ __forceinline__ bool outside_grid() const {
    const attr p = thread_position_in_grid();
    return (p.x >= L.grid[0]) | (p.y >= L.grid[1]) | (p.z >= L.grid[2]);
  }
  __device__ __forceinline__ attr threads_per_grid() const {
    return {L.grid[0], L.grid[1], L.grid[2]};
  }
  __device__ __forceinline__ attr grid_size() const { return {L.grid[0], L.grid[1], L.grid[2]}; }
  __device__ __forceinline__ attr thread_position_in_threadgroup() const {
    return {threadIdx.x, threadIdx.y, threadIdx.z};
  }
  __device__ __forceinline__ attr threadgroup_position_in_grid() const {
    return {blockIdx.x, blockIdx.y, blockIdx.z};
  }
};
#endif

#if defined(ALLOY_TARGET_CUDA) && defined(ALLOY_ENTRY_THREAD_IDS)
// True when all `k` groups this block runs (blockIdx.x + j * gridDim.x, j < k) are whole: then
// no thread is past the grid and the entry needs no per-thread checks.
template <class P>
__device__ __forceinline__ bool cuda_groups_whole(const P& L, u32 k) {
  const alloy_cuda_head& h = L.head();
  return blockIdx.x + (k - 1) * gridDim.x < h.full_groups[0] && blockIdx.y < h.full_groups[1] &&
         blockIdx.z < h.full_groups[2];
}
#endif  // ALLOY_ENTRY_THREAD_IDS

#if defined(ALLOY_TARGET_CUDA)
// [[buffer(n)]] always in the parameter block: the compiler sees a parameter-space address and
// reads it with parameter (constant-bank) loads.
template <class P>
__device__ __forceinline__ void* cuda_block_buffer(const P& L, u32 n) {
  return L.inline_data() + reinterpret_cast<unsigned long long>(L.buffer(n));
}

// [[buffer(n)]] of a small parameter buffer: in the parameter block or in device memory.
template <class P>
__device__ __forceinline__ void* cuda_small_buffer(const P& L, u32 n) {
  if ((L.head().inline_mask >> n) & 1ull)
    return L.inline_data() + reinterpret_cast<unsigned long long>(L.buffer(n));
  return L.buffer(n);
}
#endif

#if defined(ALLOY_TARGET_CUDA) && !defined(ALLOY_NEED_VECTOR)
// A vector-typed attribute whose every use reads one component (no vector values,
// prelude_select.h) as a plain struct of its components: NVRTC's IR generation and back end of a
// `vec<uint, 3>` parameter cost a small kernel's quick compile ~2 ms (docs/performance.md).
// Component spelling xyz only (the selection keeps vector values for `.r`/`.g`/`.b`).
template <class E, int N>
struct attr_comps;
template <class E>
struct attr_comps<E, 2> {
  E x, y;
};
template <class E>
struct attr_comps<E, 3> {
  E x, y, z;
};
template <class E, int N>
ALLOY_FN attr_comps<E, N> attr_comps_of(attr a) {
  if constexpr (N == 2)
    return {static_cast<E>(a.x), static_cast<E>(a.y)};
  else
    return {static_cast<E>(a.x), static_cast<E>(a.y), static_cast<E>(a.z)};
}
#endif

}  // namespace alloy_entry

#if defined(ALLOY_TARGET_CUDA)
// The CUDA translation declares a kernel's `uint3 gid [[thread_position_in_grid]]` (and the
// other 2- and 3-component spellings of uint, ushort, int, short) as `alloy_attr_uint3 gid`, and
// its entry binds it with ALLOY_ATTR_UINT3(attr) / ALLOY_ATTR_VEC(E, N, attr) (msl/translate.cpp,
// msl/target.cpp): Metal's vector type when the translation has vector values
// (ALLOY_NEED_VECTOR), the plain components otherwise (uint3: the entry's own `attr`).
#ifdef ALLOY_NEED_VECTOR
#define ALLOY_ATTR_TYPE(E, N) ::metal::vec<E, N>
#define ALLOY_ATTR_UINT3(a) ::alloy_entry::attr_vec<unsigned int, 3>(a)
#define ALLOY_ATTR_VEC(E, N, a) ::alloy_entry::attr_vec<E, N>(a)
typedef ::metal::vec<unsigned int, 3> alloy_attr_uint3;
#else
#define ALLOY_ATTR_TYPE(E, N) ::alloy_entry::attr_comps<E, N>
#define ALLOY_ATTR_UINT3(a) (a)
#define ALLOY_ATTR_VEC(E, N, a) ::alloy_entry::attr_comps_of<E, N>(a)
typedef ::alloy_entry::attr alloy_attr_uint3;
#endif
typedef ALLOY_ATTR_TYPE(unsigned int, 2) alloy_attr_uint2;
typedef ALLOY_ATTR_TYPE(unsigned short, 2) alloy_attr_ushort2;
typedef ALLOY_ATTR_TYPE(unsigned short, 3) alloy_attr_ushort3;
typedef ALLOY_ATTR_TYPE(int, 2) alloy_attr_int2;
typedef ALLOY_ATTR_TYPE(int, 3) alloy_attr_int3;
typedef ALLOY_ATTR_TYPE(short, 2) alloy_attr_short2;
typedef ALLOY_ATTR_TYPE(short, 3) alloy_attr_short3;
#undef ALLOY_ATTR_TYPE
#endif
