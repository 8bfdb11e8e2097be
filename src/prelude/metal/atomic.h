// Metal atomics (<metal_atomic>): atomic<T> for int, uint, float (and 64-bit integers where the
// target has them), the atomic_*_explicit functions, memory_order. Objects live in device or
// threadgroup memory; after translation both are plain pointers.
#pragma once

namespace metal {

enum memory_order {
  memory_order_relaxed,
  memory_order_acquire,
  memory_order_release,
  memory_order_acq_rel,
  memory_order_seq_cst
};

enum thread_scope {
  thread_scope_thread,
  thread_scope_simdgroup,
  thread_scope_threadgroup,
  thread_scope_device
};

// Trivial, so it can be a threadgroup (CUDA __shared__) object or overlay a device buffer.
template <class T>
struct atomic {
  typedef T value_type;
  T alloy_v;
};
typedef atomic<int> atomic_int;
typedef atomic<unsigned int> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<long> atomic_long;
typedef atomic<unsigned long> atomic_ulong;

namespace alloy_detail {
template <class T>
ALLOY_FN T* atomic_ptr(const volatile atomic<T>* obj) {
  return const_cast<T*>(&obj->alloy_v);
}
// Orders stronger than relaxed: fences around the relaxed operation.
ALLOY_FN void fence_before(memory_order o) {
  if (o == memory_order_release || o == memory_order_acq_rel || o == memory_order_seq_cst)
    alloy_target::fence_device();
}
ALLOY_FN void fence_after(memory_order o) {
  if (o == memory_order_acquire || o == memory_order_acq_rel || o == memory_order_seq_cst)
    alloy_target::fence_device();
}
}  // namespace alloy_detail

template <class T>
ALLOY_FN void atomic_store_explicit(volatile atomic<T>* obj, typename atomic<T>::value_type desired,
                                    memory_order order = memory_order_relaxed) {
  alloy_detail::fence_before(order);
  alloy_target::atomic_store(alloy_detail::atomic_ptr(obj), desired);
  alloy_detail::fence_after(order);
}
template <class T>
ALLOY_FN T atomic_load_explicit(const volatile atomic<T>* obj,
                                memory_order order = memory_order_relaxed) {
  alloy_detail::fence_before(order);
  T r = alloy_target::atomic_load(alloy_detail::atomic_ptr(obj));
  alloy_detail::fence_after(order);
  return r;
}
template <class T>
ALLOY_FN T atomic_exchange_explicit(volatile atomic<T>* obj, typename atomic<T>::value_type desired,
                                    memory_order order = memory_order_relaxed) {
  alloy_detail::fence_before(order);
  T r = alloy_target::atomic_exchange(alloy_detail::atomic_ptr(obj), desired);
  alloy_detail::fence_after(order);
  return r;
}
// On failure *expected receives the current value (Metal: compare-and-exchange semantics).
template <class T>
ALLOY_FN bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* obj, T* expected,
                                                    typename atomic<T>::value_type desired,
                                                    memory_order success = memory_order_relaxed,
                                                    memory_order failure = memory_order_relaxed) {
  alloy_detail::fence_before(success);
  bool ok = alloy_target::atomic_compare_exchange(alloy_detail::atomic_ptr(obj), expected, desired);
  alloy_detail::fence_after(ok ? success : failure);
  return ok;
}
template <class T>
ALLOY_FN bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* obj, T* expected,
                                                      typename atomic<T>::value_type desired,
                                                      memory_order success = memory_order_relaxed,
                                                      memory_order failure = memory_order_relaxed) {
  return atomic_compare_exchange_weak_explicit(obj, expected, desired, success, failure);
}

#define ALLOY_ATOMIC_RMW(name)                                                           \
  template <class T>                                                                     \
  ALLOY_FN T atomic_fetch_##name##_explicit(volatile atomic<T>* obj,                     \
                                            typename atomic<T>::value_type arg,          \
                                            memory_order order = memory_order_relaxed) { \
    alloy_detail::fence_before(order);                                                   \
    T r = alloy_target::atomic_fetch_##name(alloy_detail::atomic_ptr(obj), arg);         \
    alloy_detail::fence_after(order);                                                    \
    return r;                                                                            \
  }
ALLOY_ATOMIC_RMW(add)
ALLOY_ATOMIC_RMW(sub)
ALLOY_ATOMIC_RMW(and)
ALLOY_ATOMIC_RMW(or)
ALLOY_ATOMIC_RMW(xor)
ALLOY_ATOMIC_RMW(min)
ALLOY_ATOMIC_RMW(max)
#undef ALLOY_ATOMIC_RMW

// The non-_explicit spellings (sequentially consistent in C++; relaxed is what Metal offers).
template <class T>
ALLOY_FN void atomic_store(volatile atomic<T>* obj, typename atomic<T>::value_type v) {
  atomic_store_explicit(obj, v, memory_order_seq_cst);
}
template <class T>
ALLOY_FN T atomic_load(const volatile atomic<T>* obj) {
  return atomic_load_explicit(obj, memory_order_seq_cst);
}

}  // namespace metal
