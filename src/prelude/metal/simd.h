// Metal SIMD-group functions (<metal_simdgroup>) over the target's lane primitives. Simdgroups
// have 32 lanes; in a partial simdgroup (threadgroup size not a multiple of 32, early returns,
// divergent branches) only the live lanes take part, in lane order.
#pragma once

namespace metal {

namespace alloy_detail {
struct op_sum {
  enum : bool { commutative = true };  // op(a, b) == op(b, a), bit for bit
  template <class T>
  ALLOY_FN T operator()(const T& a, const T& b) const {
    return T(a + b);
  }
};
struct op_product {
  enum : bool { commutative = true };  // op(a, b) == op(b, a), bit for bit
  template <class T>
  ALLOY_FN T operator()(const T& a, const T& b) const {
    return T(a * b);
  }
};
struct op_min {
  enum : bool { commutative = false };  // min(-0, +0) and min(+0, -0) may differ
  template <class T>
  ALLOY_FN T operator()(const T& a, const T& b) const {
    return T(min(a, b));
  }
};
struct op_max {
  enum : bool { commutative = false };  // min(-0, +0) and min(+0, -0) may differ
  template <class T>
  ALLOY_FN T operator()(const T& a, const T& b) const {
    return T(max(a, b));
  }
};
struct op_and {
  enum : bool { commutative = true };  // op(a, b) == op(b, a), bit for bit
  template <class T>
  ALLOY_FN T operator()(const T& a, const T& b) const {
    return T(a & b);
  }
};
struct op_or {
  enum : bool { commutative = true };  // op(a, b) == op(b, a), bit for bit
  template <class T>
  ALLOY_FN T operator()(const T& a, const T& b) const {
    return T(a | b);
  }
};
struct op_xor {
  enum : bool { commutative = true };  // op(a, b) == op(b, a), bit for bit
  template <class T>
  ALLOY_FN T operator()(const T& a, const T& b) const {
    return T(a ^ b);
  }
};
template <class T>
using simd_t = remove_cvref_t<conditional_t<is_vecish_c<T>::value(), vec_of_t<T>, T>>;
ALLOY_FN uint32_t lowest_lane(uint32_t mask) {
  return alloy_target::ctz32(mask);
}
}  // namespace alloy_detail

// simd_vote: a lane mask (bit i = lane i), as returned by simd_ballot.
struct simd_vote {
  typedef uint64_t vote_t;
  vote_t alloy_v;
  uint32_t alloy_live;
  simd_vote() = default;
  ALLOY_FN constexpr explicit simd_vote(vote_t v, uint32_t live = 0xffffffffu)
      : alloy_v(v), alloy_live(live) {}
  ALLOY_FN constexpr operator vote_t() const { return alloy_v; }
  ALLOY_FN constexpr bool all() const { return (alloy_v & alloy_live) == alloy_live; }
  ALLOY_FN constexpr bool any() const { return alloy_v != 0; }
};

#define ALLOY_SIMD_REDUCE(name, op)                           \
  template <class T>                                          \
  ALLOY_FN alloy_detail::simd_t<T> name(const T& data) {      \
    typedef alloy_detail::simd_t<T> V;                        \
    return alloy_target::reduce(V(data), alloy_detail::op{}); \
  }
ALLOY_SIMD_REDUCE(simd_sum, op_sum)
ALLOY_SIMD_REDUCE(simd_product, op_product)
ALLOY_SIMD_REDUCE(simd_min, op_min)
ALLOY_SIMD_REDUCE(simd_max, op_max)
ALLOY_SIMD_REDUCE(simd_and, op_and)
ALLOY_SIMD_REDUCE(simd_or, op_or)
ALLOY_SIMD_REDUCE(simd_xor, op_xor)
#undef ALLOY_SIMD_REDUCE

ALLOY_FN bool simd_all(bool p) {
  return alloy_target::reduce(p, alloy_detail::op_and{});
}
ALLOY_FN bool simd_any(bool p) {
  return alloy_target::reduce(p, alloy_detail::op_or{});
}
ALLOY_FN simd_vote simd_ballot(bool p) {
  uint32_t live = alloy_target::live_mask();
  return simd_vote(alloy_target::ballot(p), live);
}
ALLOY_FN simd_vote simd_active_threads_mask() {
  uint32_t live = alloy_target::live_mask();
  return simd_vote(live, live);
}
ALLOY_FN bool simd_is_first() {
  return alloy_target::lane_id() == alloy_detail::lowest_lane(alloy_target::live_mask());
}
ALLOY_FN bool simd_is_helper_thread() {
  return false;
}

template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_shuffle(const T& data, ushort lane) {
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), lane);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_broadcast(const T& data, ushort lane) {
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), lane);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_broadcast_first(const T& data) {
  uint32_t first = alloy_detail::lowest_lane(alloy_target::live_mask());
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), first);
}
// Lanes whose source is outside the simdgroup keep their own value.
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_shuffle_up(const T& data, ushort delta) {
  uint32_t lane = alloy_target::lane_id();
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), lane >= delta ? lane - delta : 32u);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_shuffle_down(const T& data, ushort delta) {
  uint32_t lane = alloy_target::lane_id();
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), lane + delta);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_shuffle_xor(const T& data, ushort mask) {
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), alloy_target::lane_id() ^ mask);
}
// Rotations wrap around the simdgroup's lanes (up to its highest live lane when partial).
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_shuffle_rotate_down(const T& data, ushort delta) {
  uint32_t n = 32 - alloy_target::clz32(alloy_target::live_mask());
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data),
                               (alloy_target::lane_id() + delta) % n);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_shuffle_rotate_up(const T& data, ushort delta) {
  uint32_t n = 32 - alloy_target::clz32(alloy_target::live_mask());
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data),
                               (alloy_target::lane_id() + n - delta % n) % n);
}
// Shift by delta within groups of `modulo` lanes (default 32); vacated lanes read `filling` from
// the lane delta positions away on the other side of the group.
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_shuffle_and_fill_up(const T& data, const T& filling,
                                                          ushort delta, ushort modulo = 32) {
  typedef alloy_detail::simd_t<T> V;
  uint32_t lane = alloy_target::lane_id();
  uint32_t base = lane - lane % modulo, i = lane % modulo;
  bool from_data = i >= delta;
  V d = alloy_target::shuffle(V(data), from_data ? lane - delta : lane);
  V f = alloy_target::shuffle(V(filling), from_data ? lane : base + i + modulo - delta);
  return from_data ? d : f;
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_shuffle_and_fill_down(const T& data, const T& filling,
                                                            ushort delta, ushort modulo = 32) {
  typedef alloy_detail::simd_t<T> V;
  uint32_t lane = alloy_target::lane_id();
  uint32_t base = lane - lane % modulo, i = lane % modulo;
  bool from_data = i + delta < modulo;
  V d = alloy_target::shuffle(V(data), from_data ? lane + delta : lane);
  V f = alloy_target::shuffle(V(filling), from_data ? lane : base + i + delta - modulo);
  return from_data ? d : f;
}

template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_prefix_inclusive_sum(const T& data) {
  return alloy_target::inclusive_scan(alloy_detail::simd_t<T>(data), alloy_detail::op_sum{});
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_prefix_inclusive_product(const T& data) {
  return alloy_target::inclusive_scan(alloy_detail::simd_t<T>(data), alloy_detail::op_product{});
}
namespace alloy_detail {
// Exclusive scan = the inclusive result of the previous live lane (identity on the first).
template <class V, class Op>
ALLOY_FN V exclusive_scan(const V& v, Op op, V identity) {
#if defined(ALLOY_TARGET_CPU)
  // One exchange (the CPU's split mode publishes a statement's exchanges before it runs, so
  // every exchange must carry a value known then): fold the live lanes below this one.
  V all[32];
  alloy_target::gather(v, all);
  uint32_t live = alloy_cpu_current_group->simd_live, me = alloy_target::lane_id();
  V acc = identity;
  bool have = false;
  for (uint32_t l = 0; l < me; ++l) {
    if (!((live >> l) & 1u)) continue;
    acc = have ? op(acc, all[l]) : all[l];
    have = true;
  }
  return acc;
#else
  uint32_t live = alloy_target::live_mask();
  V incl = alloy_target::inclusive_scan(v, op);
  uint32_t lane = alloy_target::lane_id();
  uint32_t below = live & ((1u << lane) - 1u);
  uint32_t prev = below ? 31u - alloy_target::clz32(below) : lane;
  V r = alloy_target::shuffle(incl, prev);
  return below ? r : identity;
#endif
}
}  // namespace alloy_detail
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_prefix_exclusive_sum(const T& data) {
  typedef alloy_detail::simd_t<T> V;
  return alloy_detail::exclusive_scan(V(data), alloy_detail::op_sum{}, V(0));
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> simd_prefix_exclusive_product(const T& data) {
  typedef alloy_detail::simd_t<T> V;
  return alloy_detail::exclusive_scan(V(data), alloy_detail::op_product{}, V(1));
}

// ---- Quad-group functions: groups of 4 consecutive lanes of a simdgroup ----

// quad_vote: bit i = lane i of the quad.
struct quad_vote {
  typedef uint16_t vote_t;
  vote_t alloy_v;
  uint16_t alloy_live;
  quad_vote() = default;
  ALLOY_FN constexpr explicit quad_vote(vote_t v, uint16_t live = 0xfu)
      : alloy_v(v), alloy_live(live) {}
  ALLOY_FN constexpr operator vote_t() const { return alloy_v; }
  ALLOY_FN constexpr bool all() const { return (alloy_v & alloy_live) == alloy_live; }
  ALLOY_FN constexpr bool any() const { return alloy_v != 0; }
};

namespace alloy_detail {
// Reads the 4 lanes of my quad (4 collective shuffles) and folds the live ones in order, up to
// quad lane `last` (3 for a reduction, my own for an inclusive scan).
template <class V, class Op>
ALLOY_FN V quad_fold(const V& v, Op op, bool scan) {
  uint32_t live = alloy_target::live_mask();
  uint32_t lane = alloy_target::lane_id(), base = lane & ~3u;
  uint32_t last = scan ? lane & 3u : 3u;
  V acc = v;
  bool have = false;
  for (uint32_t k = 0; k < 4; ++k) {
    V x = alloy_target::shuffle(v, base + k);
    if (k <= last && ((live >> (base + k)) & 1u)) {
      acc = have ? op(acc, x) : x;
      have = true;
    }
  }
  return acc;
}
template <class V, class Op>
ALLOY_FN V quad_exclusive(const V& v, Op op, V identity) {
  uint32_t live = alloy_target::live_mask();
  uint32_t lane = alloy_target::lane_id(), base = lane & ~3u;
  V acc = identity;
  bool have = false;
  for (uint32_t k = 0; k < 4; ++k) {
    V x = alloy_target::shuffle(v, base + k);
    if (base + k < lane && ((live >> (base + k)) & 1u)) {
      acc = have ? op(acc, x) : x;
      have = true;
    }
  }
  return acc;
}
}  // namespace alloy_detail

#define ALLOY_QUAD_REDUCE(name, op)                                     \
  template <class T>                                                    \
  ALLOY_FN alloy_detail::simd_t<T> name(const T& data) {                \
    typedef alloy_detail::simd_t<T> V;                                  \
    return alloy_detail::quad_fold(V(data), alloy_detail::op{}, false); \
  }
ALLOY_QUAD_REDUCE(quad_sum, op_sum)
ALLOY_QUAD_REDUCE(quad_product, op_product)
ALLOY_QUAD_REDUCE(quad_min, op_min)
ALLOY_QUAD_REDUCE(quad_max, op_max)
ALLOY_QUAD_REDUCE(quad_and, op_and)
ALLOY_QUAD_REDUCE(quad_or, op_or)
ALLOY_QUAD_REDUCE(quad_xor, op_xor)
#undef ALLOY_QUAD_REDUCE

template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_prefix_inclusive_sum(const T& data) {
  typedef alloy_detail::simd_t<T> V;
  return alloy_detail::quad_fold(V(data), alloy_detail::op_sum{}, true);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_prefix_inclusive_product(const T& data) {
  typedef alloy_detail::simd_t<T> V;
  return alloy_detail::quad_fold(V(data), alloy_detail::op_product{}, true);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_prefix_exclusive_sum(const T& data) {
  typedef alloy_detail::simd_t<T> V;
  return alloy_detail::quad_exclusive(V(data), alloy_detail::op_sum{}, V(0));
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_prefix_exclusive_product(const T& data) {
  typedef alloy_detail::simd_t<T> V;
  return alloy_detail::quad_exclusive(V(data), alloy_detail::op_product{}, V(1));
}
ALLOY_FN bool quad_all(bool p) {
  return alloy_detail::quad_fold(p, alloy_detail::op_and{}, false);
}
ALLOY_FN bool quad_any(bool p) {
  return alloy_detail::quad_fold(p, alloy_detail::op_or{}, false);
}
ALLOY_FN quad_vote quad_ballot(bool p) {
  uint32_t shift = alloy_target::lane_id() & ~3u;
  uint32_t live = (alloy_target::live_mask() >> shift) & 0xfu;
  return quad_vote(uint16_t((alloy_target::ballot(p) >> shift) & 0xfu), uint16_t(live));
}
ALLOY_FN quad_vote quad_active_threads_mask() {
  uint32_t live = (alloy_target::live_mask() >> (alloy_target::lane_id() & ~3u)) & 0xfu;
  return quad_vote(uint16_t(live), uint16_t(live));
}
ALLOY_FN bool quad_is_first() {
  uint32_t lane = alloy_target::lane_id(), base = lane & ~3u;
  uint32_t live = (alloy_target::live_mask() >> base) & 0xfu;
  return live && lane == base + alloy_target::ctz32(live);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_shuffle(const T& data, ushort quad_lane) {
  uint32_t base = alloy_target::lane_id() & ~3u;
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), base + (quad_lane & 3u));
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_broadcast(const T& data, ushort quad_lane) {
  return quad_shuffle(data, quad_lane);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_broadcast_first(const T& data) {
  uint32_t lane = alloy_target::lane_id(), base = lane & ~3u;
  uint32_t live = (alloy_target::live_mask() >> base) & 0xfu;
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data),
                               base + (live ? alloy_target::ctz32(live) : 0u));
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_shuffle_up(const T& data, ushort delta) {
  uint32_t lane = alloy_target::lane_id();
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data),
                               (lane & 3u) >= delta ? lane - delta : 32u);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_shuffle_down(const T& data, ushort delta) {
  uint32_t lane = alloy_target::lane_id();
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data),
                               (lane & 3u) + delta < 4u ? lane + delta : 32u);
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_shuffle_xor(const T& data, ushort mask) {
  uint32_t lane = alloy_target::lane_id();
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), (lane & ~3u) | ((lane ^ mask) & 3u));
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_shuffle_rotate_down(const T& data, ushort delta) {
  uint32_t lane = alloy_target::lane_id();
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data), (lane & ~3u) | ((lane + delta) & 3u));
}
template <class T>
ALLOY_FN alloy_detail::simd_t<T> quad_shuffle_rotate_up(const T& data, ushort delta) {
  uint32_t lane = alloy_target::lane_id();
  return alloy_target::shuffle(alloy_detail::simd_t<T>(data),
                               (lane & ~3u) | ((lane + 4u - (delta & 3u)) & 3u));
}

}  // namespace metal
