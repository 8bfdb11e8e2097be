// Split mode of the CPU target (msl/regions.cpp): a barrier/simd kernel cut into regions, each a
// loop over the group's threads (POCL's work-item loops). This is the per-group state the
// generated code uses: which threads are alive (a `return` ends a thread), per-thread storage for
// values that live across regions, and simd exchanges. A statement with simd functions runs in
// two passes: every active lane publishes the functions' arguments (mode publish), then every
// lane evaluates the statement reading its simdgroup's published values (mode consume); a
// reduction is computed once per simdgroup and cached for the other lanes.
#pragma once

namespace alloy_split {

constexpr uint32_t kSlot = 64;         // bytes one lane publishes per exchange
constexpr uint32_t kMaxExchanges = 8;  // exchanges per simd statement (quad folds use 5)
constexpr uint32_t kMaxSlots = 64;     // per-thread storage slots per kernel
constexpr uint32_t kMaxThreads = 1024;

template <class T>
struct remove_cv {
  typedef T type;
};
template <class T>
struct remove_cv<const T> {
  typedef T type;
};
template <class T>
struct remove_cv<volatile T> {
  typedef T type;
};
template <class T>
struct remove_cv<const volatile T> {
  typedef T type;
};
template <class... T>
struct types {};
template <int I, class L>
struct nth;
template <class H, class... R>
struct nth<0, types<H, R...>> {
  typedef H type;
};
template <int I, class H, class... R>
struct nth<I, types<H, R...>> {
  typedef typename nth<I - 1, types<R...>>::type type;
};
/// The I-th hoisted variable's storage type (declared type without const/volatile).
template <class L, int I>
using elem_t = typename remove_cv<typename nth<I, L>::type>::type;

// The unsigned type of an integer's width (advance: wrapping arithmetic).
template <class I>
struct unsigned_of;
#define ALLOY_SPLIT_UNSIGNED(S, U) \
  template <>                      \
  struct unsigned_of<S> {          \
    typedef U type;                \
  };
ALLOY_SPLIT_UNSIGNED(char, unsigned char)
ALLOY_SPLIT_UNSIGNED(signed char, unsigned char)
ALLOY_SPLIT_UNSIGNED(unsigned char, unsigned char)
ALLOY_SPLIT_UNSIGNED(short, unsigned short)
ALLOY_SPLIT_UNSIGNED(unsigned short, unsigned short)
ALLOY_SPLIT_UNSIGNED(int, unsigned int)
ALLOY_SPLIT_UNSIGNED(unsigned int, unsigned int)
ALLOY_SPLIT_UNSIGNED(long, unsigned long)
ALLOY_SPLIT_UNSIGNED(unsigned long, unsigned long)
ALLOY_SPLIT_UNSIGNED(long long, unsigned long long)
ALLOY_SPLIT_UNSIGNED(unsigned long long, unsigned long long)
#undef ALLOY_SPLIT_UNSIGNED

template <class T>
constexpr bool is_int = static_cast<T>(1) / static_cast<T>(2) == 0;

/// Largest k * step (in the variable's unsigned type) for which an interchanged loop runs its
/// vectorisable form: small_steps checks it for the whole loop at group level, advance assumes it,
/// so that g++ can tell `lid + k * step` does not wrap (contiguous accesses across threads).
constexpr unsigned long long kSmallStep = 0x7ff00000ull;

/// An interchanged loop's variable in iteration k: `v = start; v += step` k times. In the
/// variable's type: unsigned arithmetic wraps modulo its width and signed arithmetic does not
/// overflow where the loop itself does not, so the closed form is exact.
template <class I, class S>
ALLOY_FN I advance(I start, S step, uint32_t k) {
  typedef typename unsigned_of<I>::type U;
  U c = static_cast<U>(static_cast<U>(k) * static_cast<U>(step));
  // small_steps held for this loop, so this changes nothing; it bounds c for g++ without a
  // branch. (`if (c > kSmallStep) __builtin_unreachable();` left a branch in the thread loop
  // when the loop over k was versioned for if-conversion: "control flow in loop", and every
  // region with a select, such as exp's clamps or max, stayed scalar.)
  if constexpr (sizeof(U) >= 4) c = c < static_cast<U>(kSmallStep) ? c : static_cast<U>(kSmallStep);
  if constexpr (static_cast<I>(-1) < static_cast<I>(0))
    return static_cast<I>(start + static_cast<I>(c));
  else
    return static_cast<I>(start + c);
}

/// Whether every k * step of a loop with trip counts below khi stays within kSmallStep (a
/// non-negative integer step).
template <class S>
ALLOY_FN bool small_steps(uint32_t khi, S step) {
  if constexpr (!is_int<S>) {
    return false;
  } else {
    if (step < static_cast<S>(0)) return false;
    const unsigned long long st = static_cast<unsigned long long>(step);
    if (st > kSmallStep) return khi <= 1;
    return (khi ? khi - 1ull : 0ull) * st <= kSmallStep;
  }
}

/// The trip count of `for (I v = start; v < end; v += step)` (`<=` when le): a closed form for
/// 32-bit variables and bounds, exact under C++'s conversions (the comparison's type, wrapping
/// of unsigned values, no signed overflow); `count` (running the header alone) wherever the
/// closed form does not hold (a step that is not positive, a value that wraps before the end).
template <class I, class E, class S, class F>
ALLOY_FN uint32_t trip_lt(I start, E end, S step, bool le, F&& count) {
  if constexpr (is_int<I> && is_int<E> && is_int<S> && sizeof(I) == 4 && sizeof(E) <= 4 &&
                sizeof(S) <= 4) {
    typedef decltype(start + end) C;  // the comparison's type
    constexpr bool cu = static_cast<C>(-1) > static_cast<C>(0);
    const long long x0 = static_cast<long long>(static_cast<C>(start));
    const long long e = static_cast<long long>(static_cast<C>(end));
    const I si = static_cast<I>(step);  // v += step adds this, modulo 2^32
    const long long d =
        cu ? static_cast<long long>(static_cast<uint32_t>(si)) : static_cast<long long>(si);
    if (d <= 0) return count();
    if (le ? x0 > e : x0 >= e) return 0;
    const long long c = le ? (e - x0) / d + 1 : (e - x0 + d - 1) / d;
    const long long lim = cu ? 0xffffffffll : 0x7fffffffll;
    if (c > 0xffffffffll || x0 + c * d > lim) return count();
    return static_cast<uint32_t>(c);
  } else {
    return count();
  }
}

/// trip_lt for every thread at once, with end and step uniform and each thread's start in x0:
/// writes trip[t] for the threads alive and in m and returns true, or returns false (nothing
/// decided) where a thread needs the exact count (trip_lt's fallback cases). Branch-free, so
/// the loop vectorises; the division by the step is a multiplication and a correction.
template <class I, class E, class S>
ALLOY_FN bool trips_lt(const I* x0s, E end, S step, bool le, uint32_t* trip, uint32_t n,
                       const unsigned char* alive, const unsigned char* m) {
  if constexpr (is_int<I> && is_int<E> && is_int<S> && sizeof(I) == 4 && sizeof(E) <= 4 &&
                sizeof(S) <= 4) {
    typedef decltype(I() + E()) C;
    constexpr bool cu = static_cast<C>(-1) > static_cast<C>(0);
    const long long e = static_cast<long long>(static_cast<C>(end));
    const I si = static_cast<I>(step);
    const long long d =
        cu ? static_cast<long long>(static_cast<uint32_t>(si)) : static_cast<long long>(si);
    if (d <= 0) return false;
    const long long lim = cu ? 0xffffffffll : 0x7fffffffll;
    const double inv = 1.0 / static_cast<double>(d);
    const long long bias = le ? 0 : d - 1;
    if (e + d <= lim) {
      // The common case (e.g. `i < n; i += tpg` from `i = lid`), in 32-bit lanes: with
      // end + step within the comparison type's range, no thread's variable can wrap before the
      // end (v + c * step <= end + step), so every count is the closed form. A negative start
      // (signed) takes the general loop below.
      const uint32_t eb = static_cast<uint32_t>(e + bias);  // < 2^32
      const uint32_t du = static_cast<uint32_t>(d);
      const C ec = static_cast<C>(end);
      bool neg = false;
      for (uint32_t t = 0; t < n; ++t) {
        const C x = static_cast<C>(x0s[t]);
        if constexpr (!cu) neg |= x < static_cast<C>(0);
        const bool none = le ? x > ec : x >= ec;
        const uint32_t num = none ? 0u : eb - static_cast<uint32_t>(x);
        uint32_t q = static_cast<uint32_t>(static_cast<double>(num) * inv);  // off by <= 1
        q = static_cast<unsigned long long>(q) * du > num ? q - 1u : q;
        q = (static_cast<unsigned long long>(q) + 1u) * du <= num ? q + 1u : q;
        trip[t] = none ? 0u : (le ? q + 1u : q);
      }
      if (!neg) return true;
    }
    bool bad = false;
    for (uint32_t t = 0; t < n; ++t) {
      const long long x = static_cast<long long>(static_cast<C>(x0s[t]));
      const bool none = le ? x > e : x >= e;
      const long long num = none ? 0 : e - x + bias;  // in [0, 2^33)
      long long q = static_cast<long long>(static_cast<double>(num) * inv);
      q = q * d > num ? q - 1 : q;
      q = (q + 1) * d <= num ? q + 1 : q;
      const long long c = none ? 0 : (le ? q + 1 : q);
      const bool act = alive[t] && (!m || m[t]);
      bad |= act && !none && x + c * d > lim;
      trip[t] = static_cast<uint32_t>(c);
    }
    return !bad;
  } else {
    return false;
  }
}

template <class T>
ALLOY_FN void copy(T& d, const T& s) {
  d = s;
}
template <class T, unsigned long N>
ALLOY_FN void copy(T (&d)[N], const T (&s)[N]) {
  for (unsigned long i = 0; i < N; ++i) copy(d[i], s[i]);
}

// Versioned regions (msl/regions.cpp, cpu_region_v in entry.h): true when a subscript's value
// at a row's first thread is so large that adding a thread offset could wrap a 32-bit unsigned
// index. Other index types never need the check (64-bit ones do not wrap in practice, signed
// ones may not overflow in C++): the fast copy gains nothing from them.
template <class T>
ALLOY_FN bool index_far(T) {
  return false;
}
ALLOY_FN bool index_far(unsigned int v) {
  return v > 0x7fffffffu;
}
// The same for one term of a subscript's top-level sum (`(t + ly) * n` of
// `(t + ly) * n + gid.x`): g++ proves `S + (G + x)` contiguous from the ranges of S and G, not
// from that of their sum, which the subscript never computes as such.
template <class T>
ALLOY_FN bool index_part(T) {
  return false;
}
ALLOY_FN bool index_part(unsigned int v) {
  return v > 0x3fffffffu;
}

struct state {
  const alloy_cpu_launch* L;
  alloy_cpu_group* g;
  uint32_t n;
  uint32_t mode = 0;  // 0: none, 1: publish, 2: consume
  uint32_t lid = 0, ex_index = 0, round = 1;
  bool any_dead = false;
  unsigned char* alive;
  // [2 banks][kMaxExchanges][kMaxThreads][kSlot]: a region may consume one statement's values
  // and publish the next one's, so the two use different banks (swapped by simd_round).
  unsigned char* ex;
  uint32_t pub_bank = 0, con_bank = 1;
  unsigned char* cache;  // [kMaxExchanges][32 simdgroups][kSlot]
  uint64_t used;
  uint32_t live[32];
  uint32_t cache_round[kMaxExchanges][32];
  void* slots[kMaxSlots];

  ALLOY_FN state(const alloy_cpu_launch* launch, alloy_cpu_group* group) : L(launch), g(group) {
    n = g->nthreads;
    if (!g->split_arena || g->split_capacity < kMaxThreads * (1 + 2 * kMaxExchanges * kSlot) +
                                                   kMaxExchanges * 32 * kSlot)
      ALLOY_THROW_LOGIC_ERROR("alloy: internal: split-mode kernel run without its scratch memory");
    alive = g->split_arena;
    ex = alive + kMaxThreads;
    cache = ex + 2 * kMaxExchanges * kMaxThreads * kSlot;
    used = kMaxThreads + 2 * kMaxExchanges * kMaxThreads * kSlot + kMaxExchanges * 32 * kSlot;
    memset(alive, 1, n);
    memset(cache_round, 0, sizeof cache_round);
    memset(slots, 0, sizeof slots);
    g->split = this;
  }
  ALLOY_FN ~state() { g->split = nullptr; }
  state(const state&) = delete;
  state& operator=(const state&) = delete;

  /// Per-thread storage for slot `slot` (n values of T), allocated once per group.
  template <class T>
  ALLOY_FN T* storage(uint32_t slot) {
    if (slot >= kMaxSlots)
      ALLOY_THROW_RUNTIME_ERROR("alloy: too many values live across barriers in one kernel");
    if (void* p = slots[slot]) return static_cast<T*>(p);
    uint64_t start = (used + 63) & ~uint64_t(63);
    uint64_t bytes = uint64_t(n) * sizeof(T);
    if (start + bytes > g->split_capacity)
      ALLOY_THROW_RUNTIME_ERROR(
          "alloy: values live across barriers exceed the CPU's per-group scratch memory "
          "(run with ALLOY_CPU_SYNC=fibers)");
    used = start + bytes;
    slots[slot] = g->split_arena + start;
    return static_cast<T*>(slots[slot]);
  }
  /// Per-thread flags for a thread-dependent `if` (cleared each time it is evaluated).
  ALLOY_FN unsigned char* flags(uint32_t slot) {
    unsigned char* f = storage<unsigned char>(slot);
    memset(f, 0, n);
    return f;
  }
  template <class T>
  ALLOY_FN void fill(T* h, const T& v) {
    for (uint32_t i = 0; i < n; ++i) h[i] = v;
  }
  ALLOY_FN void kill(uint32_t t) {
    alive[t] = 0;
    any_dead = true;
  }
  ALLOY_FN bool active(uint32_t t, const unsigned char* m) const {
    return alive[t] && (!m || m[t]);
  }

  /// An interchanged loop (msl/regions.cpp): lo / hi = the smallest / largest trip count of the
  /// threads alive and in mask m (0 / 0 when there is none).
  ALLOY_FN void trip_range(const uint32_t* trip, const unsigned char* m, uint32_t& lo,
                           uint32_t& hi) const {
    // Branch-free (vectorised): inactive threads count as 0xffffffff for the minimum and 0
    // for the maximum (masks, not selects: g++ turns those back into branches here).
    uint32_t a = 0xffffffffu, b = 0;
    const unsigned char* al = alive;
    if (m) {
      for (uint32_t t = 0; t < n; ++t) {
        const uint32_t on = 0u - static_cast<uint32_t>((al[t] != 0) & (m[t] != 0));
        const uint32_t x = trip[t];
        a = (x | ~on) < a ? (x | ~on) : a;
        b = (x & on) > b ? (x & on) : b;
      }
    } else {
      for (uint32_t t = 0; t < n; ++t) {
        const uint32_t on = 0u - static_cast<uint32_t>(al[t] != 0);
        const uint32_t x = trip[t];
        a = (x | ~on) < a ? (x | ~on) : a;
        b = (x & on) > b ? (x & on) : b;
      }
    }
    lo = b ? a : 0;
    hi = b;
  }
  /// The mask of iteration k of an interchanged loop: in m, and k below the thread's trip count.
  ALLOY_FN const unsigned char* trip_mask(unsigned char* km, const uint32_t* trip, uint32_t k,
                                          const unsigned char* m) const {
    const uint32_t nn = n;  // a local: stores through km could change n, as far as g++ knows
    if (m) {
      for (uint32_t t = 0; t < nn; ++t) km[t] = (m[t] != 0) & (trip[t] > k);
    } else {
      for (uint32_t t = 0; t < nn; ++t) km[t] = trip[t] > k;
    }
    return km;
  }

  /// simd_sum-like functions: out[t] = the fold of in[] over the lanes of t's simdgroup that are
  /// alive and in mask m, in lane order (as the fiber path folds them).
  template <class T, class Op>
  ALLOY_FN void fold(const T* in, T* out, Op op, const unsigned char* m) {
    if (!m && !any_dead && n % 32 == 0) {
      // Every lane active: the same lane-order folds, up to eight simdgroups side by side, each
      // chain in a register (their chains interleave; each simdgroup's order of operations is
      // unchanged). Accumulated in out[] instead, every step of a chain was a store and a load
      // (out may alias in as far as the compiler knows): twice the latency of the operation.
      const uint32_t groups = n / 32;
      uint32_t sg = 0;
      for (; sg + 8 <= groups; sg += 8) fold_chains<8>(in, out, op, sg);
      if (sg + 4 <= groups) {
        fold_chains<4>(in, out, op, sg);
        sg += 4;
      }
      if (sg + 2 <= groups) {
        fold_chains<2>(in, out, op, sg);
        sg += 2;
      }
      if (sg < groups) fold_chains<1>(in, out, op, sg);
      broadcast(out);
      return;
    }
    const unsigned char* al = alive;
    for (uint32_t base = 0; base < n; base += 32) {
      uint32_t end = n - base < 32 ? n : base + 32;
      T acc = in[base];
      // Whole or empty simdgroups (the common cases under a predicate) without per-lane tests.
      uint32_t cnt = 0;
      for (uint32_t t = base; t < end; ++t) cnt += (al[t] != 0) & (!m || m[t] != 0);
      if (cnt == 0 || cnt == end - base) {
        if (cnt)
          for (uint32_t t = base + 1; t < end; ++t) acc = op(acc, in[t]);
        out[base >> 5] = acc;
        continue;
      }
      bool first = true;
      for (uint32_t t = base; t < end; ++t) {
        if (!active(t, m)) continue;
        acc = first ? in[t] : op(acc, in[t]);
        first = false;
      }
      out[base >> 5] = acc;
    }
    broadcast(out);
  }
  /// out[sg + c] = the lane-order fold of in[(sg + c) * 32 ...] over 32 lanes, c < K: K
  /// independent chains.
  template <int K, class T, class Op>
  ALLOY_FN static void fold_chains(const T* in, T* out, Op op, uint32_t sg) {
    const T* a = in + sg * 32;
    T r[K];
#pragma GCC unroll 8
    for (int c = 0; c < K; ++c) r[c] = a[c * 32];
    for (uint32_t l = 1; l < 32; ++l) {
#pragma GCC unroll 8
      for (int c = 0; c < K; ++c) r[c] = op(r[c], a[c * 32 + l]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < K; ++c) out[sg + c] = r[c];
  }
  /// out[sg] (one value per simdgroup) to out[t] for every lane t of simdgroup sg, so that the
  /// region reading the results loads out[lid], contiguous across threads. Top down: a
  /// simdgroup's lanes (>= 32 sg) never overlap the entries of lower simdgroups not yet read.
  template <class T>
  ALLOY_FN void broadcast(T* out) {
    for (uint32_t sg = (n + 31) / 32; sg-- > 0;) {
      const T v = out[sg];
      const uint32_t end = n - sg * 32 < 32 ? n : sg * 32 + 32;
      for (uint32_t t = sg * 32; t < end; ++t) out[t] = v;
    }
  }

  // ---- simd statements ----
  ALLOY_FN void publish(uint32_t t) {
    mode = 1;
    lid = t;
    ex_index = 0;
    g->current = t;
  }
  /// Between publish and consume: the lanes that take part (alive and in mask m).
  ALLOY_FN void simd_round(const unsigned char* m) {
    ++round;
    con_bank = pub_bank;
    pub_bank ^= 1u;
    for (uint32_t s = 0; s < 32; ++s) live[s] = 0;
    for (uint32_t t = 0; t < n; ++t)
      if (active(t, m)) live[t >> 5] |= 1u << (t & 31u);
  }
  ALLOY_FN void consume(uint32_t t) {
    mode = 2;
    lid = t;
    ex_index = 0;
    g->current = t;
    g->simd_live = live[t >> 5];
  }
  ALLOY_FN void lane_done() {
    mode = 0;
  }

  ALLOY_FN unsigned char* slot_of(uint32_t j, uint32_t t) const {
    uint32_t bank = mode == 1 ? pub_bank : con_bank;
    return ex + ((uint64_t(bank) * kMaxExchanges + j) * kMaxThreads + t) * kSlot;
  }
  template <class T>
  ALLOY_FN uint32_t next_exchange() {
    static_assert(sizeof(T) <= kSlot, "simd value too large for split mode");
    if (ex_index >= kMaxExchanges)
      ALLOY_THROW_RUNTIME_ERROR("alloy: too many simd exchanges in one statement");
    return ex_index++;
  }
  template <class T>
  ALLOY_FN void gather(const T& v, T* all) {
    uint32_t j = next_exchange<T>();
    if (mode == 1) {
      memcpy(slot_of(j, lid), &v, sizeof(T));
      for (uint32_t l = 0; l < 32; ++l) all[l] = v;
      return;
    }
    uint32_t base = lid & ~31u;
    for (uint32_t l = 0; l < 32; ++l)
      memcpy(static_cast<void*>(&all[l]), slot_of(j, base + l), sizeof(T));
  }
  template <class T>
  ALLOY_FN T shuffle(const T& v, uint32_t src) {
    uint32_t j = next_exchange<T>();
    if (mode == 1) {
      memcpy(slot_of(j, lid), &v, sizeof(T));
      return v;
    }
    uint32_t lv = live[lid >> 5];
    if (src >= 32 || !((lv >> src) & 1u)) return v;
    T r;
    memcpy(static_cast<void*>(&r), slot_of(j, (lid & ~31u) + src), sizeof(T));
    return r;
  }
  /// One fold per simdgroup (live lanes in lane order, as the fiber path), cached for the rest.
  template <class T, class Op>
  ALLOY_FN T reduce(const T& v, Op op) {
    uint32_t j = next_exchange<T>();
    if (mode == 1) {
      memcpy(slot_of(j, lid), &v, sizeof(T));
      return v;
    }
    uint32_t sg = lid >> 5;
    unsigned char* c = cache + (uint64_t(j) * 32 + sg) * kSlot;
    T acc;
    if (cache_round[j][sg] == round) {
      memcpy(static_cast<void*>(&acc), c, sizeof(T));
      return acc;
    }
    uint32_t lv = live[sg];
    acc = v;
    bool first = true;
    for (uint32_t l = 0; l < 32; ++l) {
      if (!((lv >> l) & 1u)) continue;
      T x;
      memcpy(static_cast<void*>(&x), slot_of(j, sg * 32 + l), sizeof(T));
      acc = first ? x : op(acc, x);
      first = false;
    }
    memcpy(c, &acc, sizeof(T));
    cache_round[j][sg] = round;
    return acc;
  }
};

/// The split state of the running group while a lane publishes or consumes simd values.
ALLOY_FN state* active() {
  alloy_cpu_group* g = alloy_cpu_current_group;
  if (!g || !g->split) return nullptr;
  state* s = static_cast<state*>(g->split);
  return s->mode ? s : nullptr;
}

}  // namespace alloy_split
