// Robust (bounds-checked) mode: DESIGN.md §2. The translator turns every `device`/`constant`
// pointer of a robust kernel into alloy_robust::ptr<T>, which knows the extent of the buffer it
// came from. An access out of range is reported (kernel, buffer, index, thread) and suppressed:
// a read gives 0, a write lands in a per-pointer scratch element and is dropped.
#pragma once
#include "metal_core.h"

namespace alloy_robust {

/// Reports one out-of-range access; `ctx` is the launch context the entry gave the pointer.
ALLOY_FN void report(void* ctx, unsigned buffer, long long index) {
#if defined(ALLOY_TARGET_CUDA)
  auto* L = static_cast<const alloy_cuda_oob_log*>(ctx);
  if (!L || !L->count) return;
  unsigned i = atomicAdd(L->count, 1u);
  if (i < L->capacity) {
    alloy_cuda_oob_record r;
    r.buffer = buffer;
    r.is_write = 2;  // unknown: a reference does not tell reads from writes
    r.index = index;
    r.thread[0] = blockIdx.x * blockDim.x + threadIdx.x;
    r.thread[1] = blockIdx.y * blockDim.y + threadIdx.y;
    r.thread[2] = blockIdx.z * blockDim.z + threadIdx.z;
    r.pad_ = 0;
    L->records[i] = r;
  }
#else
  auto* g = static_cast<alloy_cpu_group*>(ctx);
  if (g && g->sync && g->sync->report_oob) g->sync->report_oob(g, buffer, index, 2);
#endif
}

template <class T>
struct ptr {
  typedef metal::remove_cv_t<T> value_type;
  static constexpr bool alloy_robust_tag = true;

  T* base = nullptr;      // start of the buffer
  T* p = nullptr;         // where this pointer points
  long long count = 0;    // elements in the buffer from base
  unsigned buffer = ~0u;  // [[buffer(n)]] it came from (~0u: unchecked)
  void* ctx = nullptr;    // launch context for reports
  mutable value_type scratch;

  ptr() = default;
  /// From a kernel argument: the buffer's bytes bound the accesses.
  ALLOY_FN ptr(T* b, unsigned long long bytes, unsigned buf, void* c)
      : base(b), p(b), count(static_cast<long long>(bytes / sizeof(T))), buffer(buf), ctx(c) {}
  /// From a raw pointer (threadgroup/thread memory, &x[i]): nothing to check against.
  ALLOY_FN ptr(T* raw) : base(raw), p(raw), count(0x3fffffffffffffffLL), buffer(~0u) {}
  ALLOY_FN ptr(const ptr& o) : base(o.base), p(o.p), count(o.count), buffer(o.buffer), ctx(o.ctx) {}
  ALLOY_FN ptr& operator=(const ptr& o) {
    base = o.base;
    p = o.p;
    count = o.count;
    buffer = o.buffer;
    ctx = o.ctx;
    return *this;
  }
  /// `device T*` from `device U*` (adding const, or a cast such as (device float4*)x).
  template <class U>
  ALLOY_FN ptr(const ptr<U>& o)
      : base(reinterpret_cast<T*>(o.base)),
        p(reinterpret_cast<T*>(o.p)),
        count(static_cast<long long>((o.count * static_cast<long long>(sizeof(U))) /
                                     static_cast<long long>(sizeof(T)))),
        buffer(o.buffer),
        ctx(o.ctx) {}

  ALLOY_FN T& at(long long i) const {
    long long k = (p - base) + i;
    if (k >= 0 && k < count) return p[i];
    report(ctx, buffer, k);
    scratch = value_type();
    return scratch;
  }
  template <class I>
  ALLOY_FN T& operator[](I i) const {
    return at(static_cast<long long>(i));
  }
  ALLOY_FN T& operator*() const { return at(0); }
  ALLOY_FN T* operator->() const { return &at(0); }
  /// Decays to a raw pointer (e.g. for atomic functions): checked at this point.
  ALLOY_FN operator T*() const { return &at(0); }
  template <class U>
  ALLOY_FN explicit operator U*() const {
    return reinterpret_cast<U*>(p);
  }
  ALLOY_FN explicit operator bool() const { return p != nullptr; }

  ALLOY_FN ptr moved(long long d) const {
    ptr r(*this);
    r.p = p + d;
    return r;
  }
  template <class I>
  ALLOY_FN ptr operator+(I d) const {
    return moved(static_cast<long long>(d));
  }
  template <class I>
  ALLOY_FN ptr operator-(I d) const {
    return moved(-static_cast<long long>(d));
  }
  template <class I>
  ALLOY_FN ptr& operator+=(I d) {
    p += d;
    return *this;
  }
  template <class I>
  ALLOY_FN ptr& operator-=(I d) {
    p -= d;
    return *this;
  }
  ALLOY_FN ptr& operator++() {
    ++p;
    return *this;
  }
  ALLOY_FN ptr& operator--() {
    --p;
    return *this;
  }
  ALLOY_FN ptr operator++(int) {
    ptr r(*this);
    ++p;
    return r;
  }
  ALLOY_FN ptr operator--(int) {
    ptr r(*this);
    --p;
    return r;
  }
  ALLOY_FN long long operator-(const ptr& o) const { return p - o.p; }
  ALLOY_FN bool operator==(const ptr& o) const { return p == o.p; }
  ALLOY_FN bool operator!=(const ptr& o) const { return p != o.p; }
  ALLOY_FN bool operator<(const ptr& o) const { return p < o.p; }
};

template <class I, class T>
ALLOY_FN ptr<T> operator+(I d, const ptr<T>& q) {
  return q + d;
}

}  // namespace alloy_robust
