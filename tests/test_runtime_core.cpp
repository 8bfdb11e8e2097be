// Runtime core v2: pure primitives (state round trips, equivalence, registry), lazy views and
// moves, geometry as expressions of input shapes, evaluation that frees intermediates and fails
// once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "alloy/alloy.h"
#include "core/array_node.h"
#include "core/block_pool.h"
#include "core/primitive.h"
#include "core/primitives.h"
#include "core/scheduler.h"
#include "core/thread_cache.h"
#include "kernel/custom_kernel.h"
#include "random_values.h"

namespace alloy {
namespace {

using testing::random_values;

// The primitive behind a pending array.
std::shared_ptr<Primitive> primitive_of(const Array& a) {
  auto p = node_of(a)->pending;
  EXPECT_TRUE(p) << "array is not pending";
  return p ? p->primitive : nullptr;
}

void expect_round_trip(const std::shared_ptr<Primitive>& p) {
  ASSERT_TRUE(p);
  PrimitiveState s = p->state();
  auto bytes = s.to_bytes();
  PrimitiveState back = PrimitiveState::from_bytes(bytes.data(), bytes.size());
  EXPECT_EQ(back, s) << p->name();
  auto rebuilt = make_primitive(p->name(), back);
  EXPECT_TRUE(rebuilt->is_equivalent(*p)) << p->name();
  EXPECT_TRUE(p->is_equivalent(*rebuilt)) << p->name();
  EXPECT_EQ(rebuilt->state(), s) << p->name();
}

MetalKernel scale_kernel() {
  return metal_kernel("scale", {"inp"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = inp[i] * T(2) + T(1);)");
}

TEST(RuntimeCore, EveryPrimitiveRoundTripsThroughItsState) {
  Array a = Array::from_doubles(random_values(24, 1), {2, 3, 4}, float32, Device::cpu());
  expect_round_trip(
      primitive_of(a.slice({{1, std::nullopt, 1}, {std::nullopt, std::nullopt, -2}})));
  expect_round_trip(primitive_of(a.transpose({2, 0, 1})));
  expect_round_trip(primitive_of(a.reshape({6, 4})));
  expect_round_trip(primitive_of(a.broadcast_to({5, 2, 3, 4})));
  expect_round_trip(primitive_of(a.as_strided({3, 2}, {1, 4}, 2)));
  expect_round_trip(primitive_of(a.transpose().contiguous()));
  expect_round_trip(primitive_of(a.astype(float16)));
  KernelCall call;
  call.output_dtypes = {float32};
  call.grid_expr = DimsExpr{ShapeExpr::size(0), 1, 1};
  call.threadgroup = {32, 1, 1};
  call.output_shape_exprs = {{ShapeExpr::dim(0, 0), ShapeExpr::dim(0, 1) * 4}};
  call.template_args = {{"T", float32}, {"N", 3}, {"B", true}};
  call.init_value = 0.5;
  auto out = scale_kernel()({a}, call);
  expect_round_trip(primitive_of(out[0]));
  for (auto& name : {"Slice", "Transpose", "Reshape", "Broadcast", "AsStrided", "Copy", "AsType",
                     "ToDevice", "CustomKernel"}) {
    auto names = registered_primitives();
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

TEST(RuntimeCore, DifferentPrimitivesAreNotEquivalent) {
  Array a = Array::from_doubles(random_values(24, 2), {4, 6}, float32, Device::cpu());
  auto t1 = primitive_of(a.transpose({1, 0}));
  auto s1 = primitive_of(a.slice({{0, 2, 1}}));
  auto s2 = primitive_of(a.slice({{0, 3, 1}}));
  EXPECT_FALSE(t1->is_equivalent(*s1));
  EXPECT_FALSE(s1->is_equivalent(*s2));
  EXPECT_TRUE(s1->is_equivalent(*primitive_of(a.slice({{0, 2, 1}}))));
  auto k = scale_kernel();
  auto o1 = k({a}, {{4, 6}}, {float32}, {24, 1, 1}, {8, 1, 1}, {{"T", float32}})[0];
  auto o2 = k({a}, {{4, 6}}, {float32}, {24, 1, 1}, {8, 1, 1}, {{"T", float16}})[0];
  auto o3 = k({a}, {{4, 6}}, {float32}, {24, 1, 1}, {8, 1, 1}, {{"T", float32}})[0];
  EXPECT_FALSE(primitive_of(o1)->is_equivalent(*primitive_of(o2)));
  EXPECT_TRUE(primitive_of(o1)->is_equivalent(*primitive_of(o3)));
  EXPECT_FALSE(primitive_of(o1)->is_equivalent(*t1));
}

TEST(RuntimeCore, StateErrorsAreClear) {
  EXPECT_THROW(make_primitive("NoSuchPrimitive", PrimitiveState(1)), std::invalid_argument);
  uint8_t junk[] = {1, 2, 3, 4, 5};
  EXPECT_THROW(PrimitiveState::from_bytes(junk, sizeof junk), std::invalid_argument);
  EXPECT_THROW(make_primitive("Slice", PrimitiveState(1)), std::invalid_argument);
  PrimitiveState bad(7);
  EXPECT_THROW(make_primitive("CustomKernel", bad), std::invalid_argument);
}

TEST(RuntimeCore, GradientHooksDefaultToAClearError) {
  Array a = Array::from_doubles(random_values(8, 3), {8}, float32, Device::cpu());
  auto k = scale_kernel()({a}, {{8}}, {float32}, {8, 1, 1}, {8, 1, 1}, {{"T", float32}})[0];
  try {
    primitive_of(k)->vjp({a}, {a}, {0}, {k});
    FAIL() << "no error";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("no gradient for CustomKernel(scale)"), std::string::npos)
        << e.what();
  }
}

TEST(RuntimeCore, ViewsAreLazyAndMatchNumpySemantics) {
  auto v = random_values(60, 4);
  Array a = Array::from_doubles(v, {3, 4, 5}, float32, Device::cpu());
  Array s = a.slice({{2, 0, -1}, {1, std::nullopt, 2}, {std::nullopt, std::nullopt, -2}});
  EXPECT_FALSE(s.is_evaluated());
  EXPECT_EQ(s.shape(), (Shape{2, 2, 3}));
  auto got = s.to_doubles();
  std::vector<double> want;
  for (int i : {2, 1})
    for (int j : {1, 3})
      for (int k : {4, 2, 0}) want.push_back(v[i * 20 + j * 5 + k]);
  EXPECT_EQ(got, want);
  Array t = a.transpose({2, 0, 1}).reshape({5, 12});  // a copy, then a view
  std::vector<double> wt;
  for (int k = 0; k < 5; ++k)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) wt.push_back(v[i * 20 + j * 5 + k]);
  EXPECT_EQ(t.to_doubles(), wt);
  Array b = Array::from_doubles({1, 2, 3}, {3, 1}, int32, Device::cpu()).broadcast_to({2, 3, 4});
  std::vector<double> wb;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k) wb.push_back(i + 1);
  EXPECT_EQ(b.to_doubles(), wb);
  EXPECT_THROW(a.broadcast_to({3, 4, 6}), std::invalid_argument);
  EXPECT_THROW(a.reshape({7, -1}), std::invalid_argument);
  EXPECT_THROW(a.as_strided({100}, {1}, 0), std::invalid_argument);
  Array h = a.astype(float16).astype(int32);
  std::vector<double> wh;
  for (double x : v) wh.push_back(std::trunc(x));
  EXPECT_EQ(h.to_doubles(), wh);
}

TEST(RuntimeCore, KernelInputsAreCopiedLazilyWhereTheKernelNeedsRowMajor) {
  auto v = random_values(64, 5);
  Array a = Array::from_doubles(v, {8, 8}, float32, Device::cpu());
  Array at = a.transpose();
  auto out = scale_kernel()({at}, {{8, 8}}, {float32}, {64, 1, 1}, {16, 1, 1}, {{"T", float32}})[0];
  EXPECT_FALSE(out.is_evaluated());
  auto got = out.to_doubles();
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) EXPECT_EQ(got[i * 8 + j], v[j * 8 + i] * 2 + 1);
}

TEST(RuntimeCore, ChainOfViewsAndKernelsEvaluatesOnceWithFewLiveBuffers) {
  auto v = random_values(4096, 6);
  Array x = Array::from_doubles(v, {64, 64}, float32, Device::cpu());
  auto k = scale_kernel();
  int64_t before = live_buffers();
  Array cur = x;
  std::vector<double> want = v;
  for (int step = 0; step < 50; ++step) {
    cur = cur.transpose();  // a view
    KernelCall call;
    call.output_dtypes = {float32};
    call.output_shapes = {{64, 64}};
    call.grid = {4096, 1, 1};
    call.threadgroup = {256, 1, 1};
    call.template_args = {{"T", float32}};
    cur = k({cur}, call)[0];  // copies the transposed view first (ensure_row_contiguous)
    std::vector<double> next(4096);
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 64; ++j) next[i * 64 + j] = std::fmod(want[j * 64 + i] * 2 + 1, 1e30);
    want = next;
  }
  EXPECT_EQ(live_buffers(), before) << "building the graph allocated buffers";
  // Evaluate, watching the number of live buffers from inside a kernel's evaluation is not
  // possible; instead check the peak through the host allocator's active bytes.
  cur.eval();
  EXPECT_LE(live_buffers() - before, 1) << "intermediates outlived the evaluation";
  auto got = cur.to_doubles();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_FLOAT_EQ(static_cast<float>(got[i]), static_cast<float>(want[i])) << i;
}

TEST(RuntimeCore, PeakLiveBuffersDuringAChainStaysSmall) {
  // A primitive that records the live buffers while it runs, fed by a chain of 100 steps.
  struct Probe : Primitive {
    int64_t* peak;
    explicit Probe(int64_t* p) : peak(p) {}
    const char* name() const override { return "Probe"; }
    std::vector<Shape> output_shapes(const std::vector<Array>& in) const override {
      return {in[0].shape()};
    }
    PrimitiveState state() const override { return PrimitiveState(1); }
    void eval_cpu(const std::vector<Array>& in, std::vector<Array>& out) override {
      *peak = std::max(*peak, live_buffers());
      allocate_output(out[0]);
      copy_convert_host(in[0].data(), in[0].shape(), in[0].strides(), in[0].dtype(), out[0].data(),
                        in[0].dtype());
    }
    void eval_gpu(const std::vector<Array>&, std::vector<Array>&) override {}
  };
  Array x = Array::from_doubles(random_values(256, 7), {16, 16}, float32, Device::cpu());
  int64_t base = live_buffers(), peak = 0;
  Array cur = x;
  for (int i = 0; i < 100; ++i) {
    cur = cur.transpose();
    if (i % 2) cur = cur.slice({{0, std::nullopt, 1}});
    cur = make_pending(std::make_shared<Probe>(&peak), {cur}, {cur.shape()}, {float32},
                       Device::cpu())[0];
  }
  cur.eval();
  // At most: the source, the input being read and the output being written.
  EXPECT_LE(peak - base + 1, 3) << "live intermediate buffers during the chain";
}

TEST(RuntimeCore, GeometryExpressionsFollowTheInputShapes) {
  auto k = scale_kernel();
  KernelCall call;
  call.output_dtypes = {float32};
  call.grid_expr = DimsExpr{ShapeExpr::size(0), 1, 1};
  call.threadgroup = {64, 1, 1};
  call.output_shape_exprs = {{ShapeExpr::dim(0, 0), ShapeExpr::dim(0, -1)}};
  call.template_args = {{"T", float32}};
  for (int n : {4, 37, 4096}) {
    auto v = random_values(2 * n, n);
    Array a = Array::from_doubles(v, {2, n}, float32, Device::cpu());
    auto out = k({a}, call)[0];
    EXPECT_EQ(out.shape(), (Shape{2, n}));
    auto got = out.to_doubles();
    for (int i = 0; i < 2 * n; ++i) ASSERT_EQ(got[i], v[i] * 2 + 1) << n << " " << i;
  }
  using E = ShapeExpr;
  E e = E::ceil_div(E::dim(0, 1), 32) * 2 + E::min(E::size(1), 5) - E(7) / 2;
  EXPECT_EQ(e.eval({{3, 100}, {2, 2}}), 4 * 2 + 4 - 3);
  EXPECT_EQ(E::from_code(e.code()), e);
  EXPECT_THROW(E::from_code({3}), std::invalid_argument);
  EXPECT_THROW(E::dim(2, 0).eval({{1}}), std::invalid_argument);
  EXPECT_THROW((E(1) / E(0)).eval({}), std::invalid_argument);
  EXPECT_EQ(e.str(), "(((ceil_div(in0.shape[1], 32) * 2) + min(in1.size, 5)) - (7 // 2))");
}

// live_buffers() counts per thread (plain stores, no atomic read-modify-write per buffer): the
// total stays exact when buffers are made on one thread and freed on another, when threads exit
// (their counts move to the shared total) and when a later thread reuses an exited one's slot.
TEST(RuntimeCore, LiveBufferCountIsExactAcrossThreads) {
  std::mt19937 rng(31);
  const int64_t base = live_buffers();
  const int n = std::uniform_int_distribution<int>(6, 20)(rng);
  std::vector<std::vector<double>> values;
  for (int i = 0; i < n; ++i) values.push_back(random_values(1 + 7 * i, 40 + i));
  std::vector<Array> made(n);
  auto k = scale_kernel();
  // Made on a thread that then exits: half are inputs, half are kernel outputs evaluated there.
  std::thread([&] {
    for (int i = 0; i < n; ++i) {
      const int64_t len = static_cast<int64_t>(values[i].size());
      Array x = Array::from_doubles(values[i], {len}, float32, Device::cpu());
      if (i % 2) {
        KernelCall call;
        call.output_shapes = {{len}};
        call.output_dtypes = {float32};
        call.grid = {static_cast<int>(len), 1, 1};
        call.threadgroup = {32, 1, 1};
        call.template_args = {{"T", float32}};
        call.device = Device::cpu();
        made[i] = k({x}, call)[0];
        made[i].eval();
      } else {
        made[i] = x;
      }
    }
  }).join();
  EXPECT_EQ(live_buffers(), base + n);
  for (int i = 0; i < n; ++i) {
    auto got = made[i].to_doubles();
    ASSERT_EQ(got.size(), values[i].size());
    for (size_t j = 0; j < got.size(); ++j) {
      double want = static_cast<float>(values[i][j]);
      if (i % 2) want = static_cast<float>(want * 2 + 1);
      ASSERT_EQ(got[j], want) << i << " " << j;
    }
  }
  // Freed on another thread, which exits.
  const int half = n / 2;
  std::thread([&] {
    for (int i = 0; i < half; ++i) made[i] = Array();
  }).join();
  EXPECT_EQ(live_buffers(), base + n - half);
  // A later thread (which may reuse an exited thread's slot) makes three and frees one.
  std::vector<Array> more(3);
  std::thread([&] {
    for (auto& m : more) m = make_empty({5}, float32, Device::cpu());
    more[1] = Array();
  }).join();
  EXPECT_EQ(live_buffers(), base + n - half + 2);
  // Freed here.
  made.clear();
  more.clear();
  EXPECT_EQ(live_buffers(), base);
}

// Pending outputs' nodes are recycled per thread (node_pool in array.cpp): a dropped output's node
// serves the thread's next pending output, of another rank too, with its own shape, row-major
// strides, no offset, buffer or pending link left over; a node dropped on another thread goes to
// that thread's pool; a pool keeps at most node_pool::kCapacity nodes.
TEST(RuntimeCore, PendingOutputNodesAreRecycledPerThread) {
  std::mt19937 rng(53);
  auto k = scale_kernel();
  auto call_on = [&](const Shape& shape) {
    int64_t len = 1;
    for (auto d : shape) len *= d;
    auto values = random_values(static_cast<size_t>(len), static_cast<uint32_t>(rng()));
    Array x = Array::from_doubles(values, shape, float32, Device::cpu());
    KernelCall call;
    call.output_shapes = {shape};
    call.output_dtypes = {float32};
    call.grid = {static_cast<int>(len), 1, 1};
    call.threadgroup = {32, 1, 1};
    call.template_args = {{"T", float32}};
    call.device = Device::cpu();
    return std::pair{k({x}, call)[0], values};
  };
  auto check = [](const Array& out, const Shape& shape, const std::vector<double>& values) {
    ASSERT_EQ(out.shape(), shape);
    Strides want(shape.size());
    int64_t acc = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      want[d] = acc;
      acc *= shape[d];
    }
    EXPECT_EQ(out.strides(), want);
    EXPECT_FALSE(out.is_evaluated());
    auto got = out.to_doubles();
    ASSERT_EQ(got.size(), values.size());
    for (size_t j = 0; j < got.size(); ++j)
      ASSERT_EQ(got[j], static_cast<float>(static_cast<float>(values[j]) * 2.0 + 1.0)) << j;
  };
  std::uniform_int_distribution<int64_t> dim(1, 9);
  std::thread([&] {
    EXPECT_EQ(node_pool::pooled(), 0u);
    // Ranks 3, 1, 4, 2: each call takes the node the previous one dropped.
    for (size_t rank : {3, 1, 4, 2}) {
      Shape shape(rank);
      for (auto& d : shape) d = dim(rng);
      size_t before = node_pool::pooled();
      auto [out, values] = call_on(shape);
      EXPECT_EQ(node_pool::pooled(), before ? before - 1 : 0);
      check(out, shape, values);
      out = Array();
      EXPECT_EQ(node_pool::pooled(), std::max<size_t>(before, 1));
    }
    // More outputs alive at once than a pool keeps: the extra nodes are deleted when dropped.
    std::vector<Array> many;
    for (size_t i = 0; i < node_pool::kCapacity + 9; ++i) many.push_back(call_on({2}).first);
    many.clear();
    EXPECT_EQ(node_pool::pooled(), node_pool::kCapacity);
  }).join();
  // Made on this thread (its pool has a node after the first drop), dropped on another thread
  // that has a pool: it lands there.
  Shape shape{dim(rng), dim(rng)};
  auto made = call_on(shape);  // no structured binding: clang 14 cannot capture one
  Array& out = made.first;
  check(out, shape, made.second);
  std::thread([&] {
    call_on({3}).first = Array();  // this thread's pool now exists, with one node
    EXPECT_EQ(node_pool::pooled(), 1u);
    out = Array();
    EXPECT_EQ(node_pool::pooled(), 2u);
  }).join();
}

// block_pool (core/block_pool.h): a freed block serves the thread's next request of its size
// class; a pool keeps at most kCapacity per class; a block freed on another thread goes to that
// thread's pool; requests above kMaxBlock bypass it.
TEST(RuntimeCore, BlockPoolRecyclesPerThread) {
  std::mt19937 rng(59);
  std::uniform_int_distribution<size_t> size(1, block_pool::kMaxBlock);
  std::thread([&] {
    const size_t bytes = size(rng);
    const size_t base = block_pool::pooled(bytes);
    void* p = block_pool::allocate(bytes);
    std::memset(p, 0xAB, bytes);  // usable for `bytes`
    block_pool::deallocate(p, bytes);
    EXPECT_EQ(block_pool::pooled(bytes), base + 1);
    void* q = block_pool::allocate(bytes);
    EXPECT_EQ(q, p);
    EXPECT_EQ(block_pool::pooled(bytes), base);
    // More live blocks than a pool keeps: the extra ones go back to the heap when freed.
    std::vector<void*> many{q};
    for (size_t i = 0; i < block_pool::kCapacity + 5; ++i)
      many.push_back(block_pool::allocate(bytes));
    for (void* m : many) block_pool::deallocate(m, bytes);
    EXPECT_EQ(block_pool::pooled(bytes), block_pool::kCapacity);
    // Larger requests bypass the pool.
    const size_t big = block_pool::kMaxBlock + 1 + size(rng);
    void* b = block_pool::allocate(big);
    std::memset(b, 0xCD, big);
    block_pool::deallocate(b, big);
    EXPECT_EQ(block_pool::pooled(big), 0u);
  }).join();
  // Allocated here, freed on a thread whose pool exists: it lands there.
  const size_t bytes = size(rng);
  void* p = block_pool::allocate(bytes);
  std::thread([&] {
    block_pool::deallocate(block_pool::allocate(bytes), bytes);
    const size_t before = block_pool::pooled(bytes);
    block_pool::deallocate(p, bytes);
    EXPECT_EQ(block_pool::pooled(bytes), before + 1);
  }).join();
}

// ThreadCache (core/thread_cache.h, under both pools above): a thread's lists exist from its
// first take; each keeps at most its capacity; at the thread's exit every spare object goes to
// the release function.
namespace {
std::atomic<int> g_cache_released{0};
void count_release(int* p) noexcept {
  delete p;
  g_cache_released.fetch_add(1);
}
}  // namespace

TEST(RuntimeCore, ThreadCacheReleasesItsSpareObjectsAtThreadExit) {
  using Cache = ThreadCache<int, 2, 4, count_release>;
  std::mt19937 rng(61);
  const int given[2] = {std::uniform_int_distribution<int>(1, 7)(rng),
                        std::uniform_int_distribution<int>(1, 7)(rng)};
  int kept = 0;
  std::thread([&] {
    int* early = new int(-1);
    EXPECT_FALSE(Cache::give(0, early));  // no lists before the thread's first take
    delete early;
    EXPECT_EQ(Cache::take(0), nullptr);  // makes them, empty
    for (int list = 0; list < 2; ++list)
      for (int i = 0; i < given[list]; ++i) {
        int* p = new int(100 * list + i);
        if (!Cache::give(list, p)) delete p;  // full
      }
    for (int list = 0; list < 2; ++list)
      EXPECT_EQ(Cache::size(list), static_cast<size_t>(std::min(given[list], 4)));
    int* last = Cache::take(1);  // the last one given to list 1
    ASSERT_NE(last, nullptr);
    EXPECT_EQ(*last, 100 + std::min(given[1], 4) - 1);
    delete last;
    kept = static_cast<int>(Cache::size(0) + Cache::size(1));
    EXPECT_EQ(g_cache_released.load(), 0);
  }).join();
  EXPECT_EQ(g_cache_released.load(), kept);
  EXPECT_EQ(Cache::size(0), 0u);  // this thread never took: no lists
}

// The live-buffer counters' registry lock is held across fork(): a child forked while another
// thread sums the counters (live_buffers() takes the lock) can still register a new thread's
// counter. Without the fork handler, most children here would start with the lock held by a
// thread they do not have and hang (alarm ends them).
TEST(RuntimeCore, LiveBufferCountSurvivesForkWhileAnotherThreadCounts) {
  std::atomic<bool> stop{false};
  std::thread counter([&] {
    while (!stop.load(std::memory_order_relaxed)) (void)live_buffers();
  });
  std::mt19937 rng(47);
  int hung = 0;
  for (int i = 0; i < 20; ++i) {
    const int64_t len = std::uniform_int_distribution<int64_t>(3, 50)(rng);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(10);
      int64_t before = live_buffers();
      bool ok = false;
      std::thread([&] {
        Array x = make_empty({len}, float32, Device::cpu());
        ok = live_buffers() == before + 1;
      }).join();
      ::_exit(ok && live_buffers() == before ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++hung;
  }
  stop = true;
  counter.join();
  EXPECT_EQ(hung, 0);
}

// A call repeated with the same arguments on inputs of the same dtypes and shapes shares the
// previous call's primitive (primitives are immutable); any difference builds and validates a
// new one, and every call computes its own inputs.
TEST(RuntimeCore, RepeatedCallsShareTheirPrimitiveAndOthersDoNot) {
  auto k = scale_kernel();
  auto call_on = [&](const Array& a, Dims grid, Dtype t, Shape out_shape) {
    return k({a}, {out_shape}, {t}, grid, {4, 1, 1}, {{"T", t}})[0];
  };
  auto v8 = random_values(8, 1), w8 = random_values(8, 2), v16 = random_values(16, 3);
  Array a = Array::from_doubles(v8, {8}, float32, Device::cpu());
  Array b = Array::from_doubles(w8, {8}, float32, Device::cpu());
  Array c = Array::from_doubles(v16, {16}, float32, Device::cpu());
  Array h = Array::from_doubles(v8, {8}, float16, Device::cpu());
  Array o1 = call_on(a, {8, 1, 1}, float32, {8});
  Array o2 = call_on(b, {8, 1, 1}, float32, {8});
  EXPECT_EQ(primitive_of(o1), primitive_of(o2));
  Array o3 = call_on(c, {16, 1, 1}, float32, {16});  // other shapes and grid
  EXPECT_NE(primitive_of(o3), primitive_of(o2));
  Array o4 = call_on(c, {8, 1, 1}, float32, {8});  // same shapes as o3, other grid
  EXPECT_NE(primitive_of(o4), primitive_of(o3));
  Array o5 = call_on(h, {8, 1, 1}, float16, {8});  // other dtypes
  EXPECT_NE(primitive_of(o5), primitive_of(o1));
  auto expect = [](const Array& out, const std::vector<double>& in, size_t n, double tol) {
    auto got = out.to_doubles();
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], in[i] * 2 + 1, tol) << i;
  };
  expect(o1, v8, 8, 1e-6);
  expect(o2, w8, 8, 1e-6);
  expect(o3, v16, 16, 1e-6);
  expect(o4, v16, 8, 1e-6);
  expect(o5, v8, 8, 1e-2);
  // After a valid call, the same call with an invalid grid is still refused at the call.
  EXPECT_THROW(call_on(a, {8, 1, 1}, float32, {-1}), std::invalid_argument);
  EXPECT_THROW(k({a}, {{8}}, {float32}, {8, 1, 1}, {2048, 1, 1}, {{"T", float32}}),
               std::invalid_argument);
  Array o6 = call_on(a, {8, 1, 1}, float32, {8});
  expect(o6, v8, 8, 1e-6);
}

// Repeated calls share the call plan's output shape and dtype lists (no copy per call); a call
// with other output shapes or dtypes gets lists of its own, and the earlier ops keep theirs. A
// dropped output of a two-output kernel is still computed from its op's (shared) shape and dtype.
TEST(RuntimeCore, RepeatedCallsShareOutputListsAndOthersDoNot) {
  auto k = metal_kernel("two_outputs", {"inp"}, {"out0", "out1"}, R"(
    uint i = thread_position_in_grid.x;
    out0[i] = inp[i] * T(2) + T(1);
    out1[i] = inp[i] - T(3);)");
  auto op_of = [](const Array& a) { return scheduler::pending_of(*node_of(a)); };
  auto call = [&](const Array& a, int64_t n, Dtype t) {
    return k({a}, {{n}, {n}}, {t, t}, {static_cast<int>(n), 1, 1}, {4, 1, 1}, {{"T", t}});
  };
  auto v8 = random_values(8, 11), w8 = random_values(8, 12), v16 = random_values(16, 13);
  Array a = Array::from_doubles(v8, {8}, float32, Device::cpu());
  Array b = Array::from_doubles(w8, {8}, float32, Device::cpu());
  Array c = Array::from_doubles(v16, {16}, float32, Device::cpu());
  Array h = Array::from_doubles(v8, {8}, float16, Device::cpu());
  auto o1 = call(a, 8, float32), o2 = call(b, 8, float32);
  auto o3 = call(c, 16, float32), o4 = call(h, 8, float16);
  auto p1 = op_of(o1[0]), p2 = op_of(o2[0]), p3 = op_of(o3[0]), p4 = op_of(o4[0]);
  ASSERT_TRUE(p1 && p2 && p3 && p4);
  EXPECT_EQ(&p1->shapes.get(), &p2->shapes.get());  // shared
  EXPECT_EQ(&p1->dtypes.get(), &p2->dtypes.get());
  EXPECT_NE(&p3->shapes.get(), &p1->shapes.get());  // other shapes: its own
  EXPECT_NE(&p4->dtypes.get(), &p1->dtypes.get());  // other dtypes: its own
  EXPECT_EQ(p1->shapes.get(), (std::vector<Shape>{{8}, {8}}));
  EXPECT_EQ(p3->shapes.get(), (std::vector<Shape>{{16}, {16}}));
  EXPECT_EQ(p4->dtypes.get(), (std::vector<Dtype>{float16, float16}));
  EXPECT_EQ(p2->dtypes.get(), (std::vector<Dtype>{float32, float32}));
  // The plan is the last call's: the last call again shares its lists; an earlier one (o3's)
  // gets lists of its own again.
  auto o5 = call(h, 8, float16);
  EXPECT_EQ(&op_of(o5[0])->dtypes.get(), &p4->dtypes.get());
  EXPECT_EQ(&op_of(o5[0])->shapes.get(), &p4->shapes.get());
  auto o6 = call(c, 16, float32);
  EXPECT_NE(&op_of(o6[0])->shapes.get(), &p3->shapes.get());
  EXPECT_EQ(op_of(o6[0])->shapes.get(), p3->shapes.get());
  // Drop the second output of o2 before evaluating: the op still fills a node for it.
  Array o2_first = o2[0];
  o2.clear();
  auto expect = [](const Array& out, const std::vector<double>& in, double mul, double add,
                   double tol) {
    auto got = out.to_doubles();
    ASSERT_EQ(got.size(), in.size());
    for (size_t i = 0; i < in.size(); ++i) ASSERT_NEAR(got[i], in[i] * mul + add, tol) << i;
  };
  expect(o2_first, w8, 2, 1, 1e-6);
  expect(o1[0], v8, 2, 1, 1e-6);
  expect(o1[1], v8, 1, -3, 1e-6);
  expect(o3[1], v16, 1, -3, 1e-6);
  expect(o4[0], v8, 2, 1, 1e-2);
  expect(o5[1], v8, 1, -3, 1e-2);
  expect(o6[0], v16, 2, 1, 1e-6);
  EXPECT_EQ(o4[1].dtype(), float16);
  EXPECT_EQ(o3[0].shape(), (Shape{16}));
}

// A cached call's pending op borrows the output shapes and dtypes its primitive keeps (no list
// copied or reference-counted per call); the lists live as long as the op's primitive, also after
// the kernel object and its call plan are gone, and a copy of a borrowed list owns its own.
TEST(RuntimeCore, PendingOpsBorrowTheirPrimitivesOutputLists) {
  std::mt19937_64 rng(21);
  int64_t n = 5 + static_cast<int64_t>(rng() % 20), m = n + 1 + static_cast<int64_t>(rng() % 7);
  auto vn = random_values(static_cast<size_t>(n), 22),
       vm = random_values(static_cast<size_t>(m), 23);
  Array a = Array::from_doubles(vn, {n}, float32, Device::cpu());
  Array b = Array::from_doubles(vm, {m}, float32, Device::cpu());
  auto call_of = [](int64_t len) {
    KernelCall c;
    c.output_shapes = {{len}};
    c.output_dtypes = {float32};
    c.grid = {static_cast<int>(len), 1, 1};
    c.threadgroup = {4, 1, 1};
    c.template_args = {{"T", float32}};
    c.device = Device::cpu();
    return c;
  };
  std::vector<Array> first, second;
  {
    auto k = scale_kernel();
    first = k({a}, call_of(n));
    second = k({a}, call_of(n));  // the plan's primitive again
    k({b}, call_of(m));           // a new plan: the first primitive is only the ops' now
  }
  auto op1 = scheduler::pending_of(*node_of(first[0]));
  auto op2 = scheduler::pending_of(*node_of(second[0]));
  ASSERT_TRUE(op1 && op2);
  ASSERT_EQ(op1->primitive, op2->primitive);
  const auto& prim = static_cast<const kernel::CustomKernel&>(*op1->primitive);
  EXPECT_EQ(&op1->shapes.get(), &prim.call_shapes());
  EXPECT_EQ(&op2->dtypes.get(), &prim.output_dtypes());
  EXPECT_EQ(prim.call_shapes(), (std::vector<Shape>{{n}}));
  // A copy owns its list: it stays valid after the lists it was copied from are gone.
  auto owner = std::make_unique<std::vector<Shape>>(std::vector<Shape>{{n, m}, {m}});
  auto borrowed = OutputList<Shape>::borrowed(*owner);
  OutputList<Shape> copy = borrowed;
  OutputList<Shape> moved = std::move(borrowed);
  EXPECT_EQ(&moved.get(), owner.get());
  EXPECT_NE(&copy.get(), owner.get());
  (*owner)[0][0] = -1;  // poison the original, then drop it
  owner.reset();
  EXPECT_EQ(copy.get(), (std::vector<Shape>{{n, m}, {m}}));
  // Values: the outputs of the dropped kernel object evaluate from the borrowed lists.
  first.push_back(second[0]);
  op1.reset();
  op2.reset();
  for (auto& out : first) {
    ASSERT_EQ(out.shape(), (Shape{n}));
    auto got = out.to_doubles();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], static_cast<double>(static_cast<float>(vn[i])) * 2 + 1, 1e-5) << i;
  }
}

// A call given its list of inputs (moved in, no copy of the list) behaves as one given a list it
// only reads: same primitive for the same arguments, the caller's strided input still copied
// to row-major where the kernel asks for it, the same values.
TEST(RuntimeCore, MovedInputListGivesTheSameOutputs) {
  auto k = scale_kernel();
  KernelCall call;
  call.output_shapes = {{8}};
  call.output_dtypes = {float32};
  call.grid = {8, 1, 1};
  call.threadgroup = {4, 1, 1};
  call.template_args = {{"T", float32}};
  auto v = random_values(16, 7);
  Array a = Array::from_doubles(v, {16}, float32, Device::cpu());
  std::vector<Array> kept{a.reshape({8, 2})};
  Array o1 = k(kept, call)[0];
  std::vector<Array> moved{a.reshape({8, 2})};
  Array o2 = k(std::move(moved), call)[0];
  EXPECT_EQ(primitive_of(o1), primitive_of(o2));
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].shape(), (Shape{8, 2}));  // the caller's list is left as it was
  // A strided input (every other element): made row-contiguous in both forms.
  Array strided = a.as_strided({8}, {2}, 0);
  ASSERT_FALSE(strided.is_row_contiguous());
  Array o3 = k(std::vector<Array>{strided}, call)[0];
  Array o4 = k({strided}, call)[0];
  auto r1 = o1.to_doubles(), r2 = o2.to_doubles(), r3 = o3.to_doubles(), r4 = o4.to_doubles();
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(r1[i], v[i] * 2 + 1, 1e-6) << i;
    EXPECT_EQ(r2[i], r1[i]) << i;
    EXPECT_NEAR(r3[i], v[2 * i] * 2 + 1, 1e-6) << i;
    EXPECT_EQ(r4[i], r3[i]) << i;
  }
}

TEST(RuntimeCore, FailedEvaluationFailsOnceAndTheNextCallWorks) {
  auto bad = metal_kernel("broken", {"inp"}, {"out"}, "out[0] = inp[0] +;");
  Array a = Array::from_doubles({1, 2}, {2}, float32, Device::cpu());
  auto out = bad({a}, {{2}}, {float32}, {2, 1, 1}, {2, 1, 1})[0];
  EXPECT_THROW(out.eval(), CompileError);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(out.to_doubles(), CompileError);  // reported again, not recompiled
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.05);
  auto good = scale_kernel()({a}, {{2}}, {float32}, {2, 1, 1}, {2, 1, 1}, {{"T", float32}})[0];
  EXPECT_EQ(good.to_doubles(), (std::vector<double>{3, 5}));
}

TEST(RuntimeCore, KernelFedFromAnotherDevice) {
  if (!gpu_available()) GTEST_SKIP() << "needs a GPU";
  auto v = random_values(256, 8);
  Array g = Array::from_doubles(v, {256}, float32, Device::gpu());
  auto out = scale_kernel()({g}, {{256}}, {float32}, {256, 1, 1}, {64, 1, 1}, {{"T", float32}},
                            std::nullopt, false, Device::cpu())[0];
  auto got = out.to_doubles();
  for (int i = 0; i < 256; ++i) ASSERT_EQ(got[i], v[i] * 2 + 1);
  Array c = Array::from_doubles(v, {16, 16}, float32, Device::cpu()).transpose();
  auto out2 = scale_kernel()({c}, {{16, 16}}, {float32}, {256, 1, 1}, {64, 1, 1}, {{"T", float32}},
                             std::nullopt, false, Device::gpu())[0];
  auto got2 = out2.astype(float16).to(Device::cpu()).to_doubles();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) ASSERT_EQ(got2[i * 16 + j], v[j * 16 + i] * 2 + 1);
}

}  // namespace
}  // namespace alloy
