// Metal synchronization (<metal_compute>): threadgroup_barrier, simdgroup_barrier, mem_flags,
// atomic_thread_fence. Our barriers always order device and threadgroup memory, whatever the
// flags: some kernels pass mem_flags::mem_none and still exchange data through threadgroup memory,
// which works on Apple GPUs.
#pragma once

namespace metal {

enum class mem_flags {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16
};
ALLOY_FN constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return mem_flags(int(a) | int(b));
}
ALLOY_FN constexpr mem_flags operator&(mem_flags a, mem_flags b) {
  return mem_flags(int(a) & int(b));
}

ALLOY_FN void threadgroup_barrier(mem_flags = mem_flags::mem_none) {
  alloy_target::threadgroup_barrier();
}
ALLOY_FN void simdgroup_barrier(mem_flags = mem_flags::mem_none) {
  alloy_target::simdgroup_barrier();
}
ALLOY_FN void atomic_thread_fence(mem_flags flags, memory_order = memory_order_seq_cst,
                                  thread_scope scope = thread_scope_device) {
  if (scope == thread_scope_threadgroup || scope == thread_scope_simdgroup)
    alloy_target::fence_threadgroup();
  else if (scope != thread_scope_thread || int(flags) != 0)
    alloy_target::fence_device();
}

}  // namespace metal
