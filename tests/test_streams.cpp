// Streams and events (include/alloy/stream.h): work on several CPU streams and GPU streams with
// cross dependencies, async_eval handing work to CPU workers, errors of queued work surfacing at
// synchronize and leaving the stream usable.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>

#include "alloy/alloy.h"
#include "alloy/cuda.h"
#include "random_values.h"

namespace alloy {
namespace {

using testing::random_values;

// out = a * 2 + b, computed with a loop long enough that async work is still running when the
// caller moves on.
MetalKernel axpb_kernel() {
  return metal_kernel("axpb", {"a", "b"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    float acc = 0.0f;
    for (int k = 0; k < 64; ++k) acc += a[i] * 2.0f / 64.0f;
    out[i] = acc + b[i];)");
}

Array axpb(const Array& a, const Array& b, std::optional<Stream> stream,
           std::optional<Device> device = std::nullopt) {
  KernelCall call;
  call.output_shapes = {a.shape()};
  call.output_dtypes = {float32};
  call.grid = {static_cast<int>(a.size()), 1, 1};
  call.threadgroup = {256, 1, 1};
  call.stream = stream;
  call.device = device;
  return axpb_kernel()({a, b}, call)[0];
}

std::vector<double> axpb_ref(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] * 2 + b[i];
  return r;
}

void expect_values(const Array& x, const std::vector<double>& ref) {
  auto got = x.to_doubles();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << i;
}

TEST(Streams, DefaultAndNewStreams) {
  Stream d = default_stream(Device::cpu());
  EXPECT_EQ(d.device, Device::cpu());
  EXPECT_EQ(default_stream(Device::cpu()), d);
  Stream s1 = new_stream(Device::cpu()), s2 = new_stream(Device::cpu());
  EXPECT_NE(s1, s2);
  EXPECT_NE(s1, d);
  EXPECT_EQ(to_stream(StreamOrDevice{s1}), s1);
  EXPECT_EQ(to_stream(StreamOrDevice{Device::cpu()}), d);
  EXPECT_THROW(synchronize(Stream(1 << 20, Device::cpu())), std::invalid_argument);
  EXPECT_THROW(new_stream(Device(Device::Type::cpu, 3)), std::invalid_argument);
  if (!gpu_available()) {
    EXPECT_THROW(new_stream(Device::gpu()), std::invalid_argument);
    EXPECT_THROW(cuda::stream_from_handle(nullptr), std::invalid_argument);
  } else {
    EXPECT_THROW(new_stream(Device::gpu(gpu_count())), std::invalid_argument);
  }
}

// Streams beyond the registry's lock-free table (its first 64) are found through the locked
// list: work on them runs, waits for the work it reads and reports to synchronize.
TEST(Streams, StreamsBeyondTheFirst64Work) {
  std::vector<Stream> streams;
  for (int i = 0; i < 70; ++i) streams.push_back(new_stream(Device::cpu()));
  Stream late = streams.back();
  ASSERT_GE(late.index, 64);
  const size_t n = 1024;
  auto va = random_values(n, 11), vb = random_values(n, 12);
  Array a = Array::from_doubles(va, {static_cast<int64_t>(n)}, float32, Device::cpu());
  Array b = Array::from_doubles(vb, {static_cast<int64_t>(n)}, float32, Device::cpu());
  Array x = axpb(a, b, late);        // handed to the late stream's worker
  Array y = axpb(x, b, streams[0]);  // a stream of the table, reading the late one's output
  async_eval({y});
  synchronize(late);
  auto rx = axpb_ref(va, vb);
  expect_values(y, axpb_ref(rx, vb));
  Array z = axpb(a, b, late);  // evaluated on this thread (the late stream is idle)
  z.eval();
  expect_values(z, rx);
  synchronize(late);
}

TEST(Streams, TwoCpuStreamsWithCrossDependencies) {
  const size_t n = 1 << 16;
  auto va = random_values(n, 1), vb = random_values(n, 2), vc = random_values(n, 3);
  Array a = Array::from_doubles(va, {static_cast<int64_t>(n)}, float32, Device::cpu());
  Array b = Array::from_doubles(vb, {static_cast<int64_t>(n)}, float32, Device::cpu());
  Array c = Array::from_doubles(vc, {static_cast<int64_t>(n)}, float32, Device::cpu());
  Stream s1 = new_stream(Device::cpu()), s2 = new_stream(Device::cpu());
  for (int round = 0; round < 3; ++round) {
    Array x = axpb(a, b, s1);  // s1
    Array y = axpb(c, x, s2);  // s2, reads s1's x
    Array z = axpb(y, x, s1);  // s1, reads s2's y
    async_eval({z});
    // Nothing was computed on this thread; the result is right once read.
    auto rx = axpb_ref(va, vb);
    auto ry = axpb_ref(vc, rx);
    expect_values(z, axpb_ref(ry, rx));
    expect_values(y, ry);
    synchronize(s1);
    synchronize(s2);
  }
}

TEST(Streams, AsyncEvalRunsOnTheWorkerAndReadsWait) {
  const size_t n = 1 << 18;
  auto va = random_values(n, 4), vb = random_values(n, 5);
  Array a = Array::from_doubles(va, {static_cast<int64_t>(n)}, float32, Device::cpu());
  Array b = Array::from_doubles(vb, {static_cast<int64_t>(n)}, float32, Device::cpu());
  Stream s = new_stream(Device::cpu());
  Array x = a;
  std::vector<double> ref = va;
  for (int i = 0; i < 8; ++i) {
    x = axpb(x, b, s);
    ref = axpb_ref(ref, vb);
  }
  async_eval({x});
  synchronize(s);
  EXPECT_TRUE(x.is_evaluated());
  expect_values(x, ref);
}

// A stream worker releases an op's inputs after the graph mutex: an input's last reference may be
// memory imported from Python, whose release takes the GIL, while the Python thread holding the
// GIL waits for the graph mutex (`array.shape` of a lazy array reads Array::is_evaluated). A
// timed mutex stands for the GIL: the caller holds it while the worker runs the op and polls the
// output's state; releasing the input under the graph mutex would block the poll until the
// release gives up waiting (a deadlock with the real GIL).
TEST(Streams, WorkerReleasesInputsOutsideTheGraphMutex) {
  const int64_t n = 4096;
  auto vb = random_values(n, 7);
  Array b = Array::from_doubles(vb, {n}, float32, Device::cpu());
  MetalKernel k = axpb_kernel();
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {static_cast<int>(n), 1, 1};
  call.threadgroup = {256, 1, 1};
  call.stream = new_stream(Device::cpu());
  std::timed_mutex gil;
  int released = 0, gave_up = 0;
  for (int round = 0; round < 4; ++round) {
    auto va = random_values(n, 100 + round);
    std::vector<float> data(va.begin(), va.end());
    Array out;
    {
      Array a = Array::from_external(data.data(), {n}, {}, float32, Device::cpu(), [&] {
        if (gil.try_lock_for(std::chrono::seconds(3))) {
          gil.unlock();
          ++released;
        } else {
          ++gave_up;
        }
      });
      out = k({a, b}, call)[0];
    }  // the op holds the last reference to `a`
    std::unique_lock held(gil);
    async_eval({out});
    while (!out.is_evaluated()) std::this_thread::yield();
    held.unlock();
    synchronize(*call.stream);
    expect_values(out, axpb_ref(va, vb));
  }
  EXPECT_EQ(gave_up, 0) << "an input was released under the graph mutex";
  EXPECT_EQ(released, 4);
}

// eval_inline evaluates only what runs on the calling thread alone, and otherwise does nothing
// (the Python binding keeps the GIL through what it evaluates: docs/architecture.md).
MetalKernel scaled_kernel(int salt) {
  // The comment makes the source new to this process and to the compile cache on disk (this
  // process's id and the time), so that its first call finds no program built.
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return metal_kernel("scaled", {"x"}, {"y"},
                      fmt::format(R"(
    uint i = thread_position_in_grid.x;  // {} {}
    y[i] = x[i] * 2.0f + {}.0f;)",
                                  static_cast<long>(getpid()), static_cast<long long>(now), salt));
}

Array scaled(const MetalKernel& k, const Array& x, std::optional<Stream> stream,
             int threadgroup = 0) {
  KernelCall call;
  call.output_shapes = {x.shape()};
  call.output_dtypes = {float32};
  call.grid = {static_cast<int>(x.size()), 1, 1};
  call.threadgroup = {
      threadgroup ? threadgroup : static_cast<int>(std::min<int64_t>(x.size(), 1024)), 1, 1};
  call.stream = stream;
  return k({x}, call)[0];
}

std::vector<double> scaled_ref(const std::vector<double>& x, int salt) {
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = x[i] * 2 + salt;
  return r;
}

TEST(Streams, EvalInlineRunsOnlyWorkOfTheCallingThread) {
  const int salt = static_cast<int>(std::random_device{}() % 100000) + 1;
  MetalKernel k = scaled_kernel(salt);
  const int64_t n = 32;
  auto vx = random_values(n, 21);
  Array x = Array::from_doubles(vx, {n}, float32, Device::cpu());
  EXPECT_TRUE(eval_inline(x));  // materialized: nothing to do
  EXPECT_FALSE(eval_inline(Array()));
  const Stream cpu = default_stream(Device::cpu());  // (the default device may be a GPU)

  // A compile pending (the first call of a new kernel starts its compile: milliseconds of the
  // host compiler): not inline, nothing done; eval() compiles and runs it.
  Array y0 = scaled(k, x, cpu);
  EXPECT_FALSE(eval_inline(y0));
  EXPECT_FALSE(y0.is_evaluated());
  y0.eval();
  expect_values(y0, scaled_ref(vx, salt));

  // Compiled, materialized inputs, one group on an idle stream: run here.
  Array y1 = scaled(k, x, cpu);
  EXPECT_TRUE(eval_inline(y1));
  EXPECT_TRUE(y1.is_evaluated());
  expect_values(y1, scaled_ref(vx, salt));

  // An input not evaluated: neither is run by eval_inline; once it is, the reader is.
  Array a = scaled(k, x, cpu), b = scaled(k, a, cpu);
  EXPECT_FALSE(eval_inline(b));
  EXPECT_FALSE(a.is_evaluated());
  EXPECT_FALSE(b.is_evaluated());
  EXPECT_TRUE(eval_inline(a));
  EXPECT_TRUE(eval_inline(b));
  expect_values(b, scaled_ref(scaled_ref(vx, salt), salt));

  // Work queued on the stream (a long op handed to its worker), or an input produced on another
  // stream and still running there: not inline.
  const int64_t big = 1 << 22;
  auto vbig = random_values(big, 22);
  Array xb = Array::from_doubles(vbig, {big}, float32, Device::cpu());
  Stream s1 = new_stream(Device::cpu()), s2 = new_stream(Device::cpu());
  Array long_op = axpb(xb, xb, s1);
  for (int i = 0; i < 3; ++i) long_op = axpb(long_op, xb, s1);
  async_eval({long_op});
  Array queued_behind = scaled(k, x, s1);
  EXPECT_FALSE(eval_inline(queued_behind));
  Array reads_other_stream = scaled(k, long_op, s2);
  EXPECT_FALSE(eval_inline(reads_other_stream));
  EXPECT_FALSE(long_op.is_evaluated()) << "the long op ended before the checks: make it longer";
  expect_values(queued_behind, scaled_ref(vx, salt));
  synchronize(s1);
  std::vector<double> rl = axpb_ref(vbig, vbig);
  for (int i = 0; i < 3; ++i) rl = axpb_ref(rl, vbig);
  expect_values(reads_other_stream, scaled_ref(rl, salt));

  // Launches the pool would share: not inline; one group of 1024, or 512 threads in groups, are.
  auto v16 = random_values(1 << 16, 23);
  Array x16 = Array::from_doubles(v16, {1 << 16}, float32, Device::cpu());
  Array wide = scaled(k, x16, cpu, 256);
  EXPECT_FALSE(eval_inline(wide));
  expect_values(wide, scaled_ref(v16, salt));
  for (auto [len, tg] : {std::pair<int64_t, int>{1024, 1024}, {512, 64}}) {
    auto v = random_values(len, 24);
    Array xs = Array::from_doubles(v, {len}, float32, Device::cpu());
    Array warm = scaled(k, xs, cpu, tg);
    warm.eval();  // a new input length may be a new variant
    Array ys = scaled(k, xs, cpu, tg);
    EXPECT_TRUE(eval_inline(ys)) << len << " threads in groups of " << tg;
    expect_values(ys, scaled_ref(v, salt));
  }

  if (gpu_available()) {  // GPU work: never inline (a launch can wait in the driver)
    Array xg = Array::from_doubles(vx, {n}, float32, Device::gpu());
    Array g0 = scaled(k, xg, default_stream(Device::gpu()));
    g0.eval();
    Array g1 = scaled(k, xg, default_stream(Device::gpu()));
    EXPECT_FALSE(eval_inline(g1));
    expect_values(g1, scaled_ref(vx, salt));
  }
}

// A failure inline is the failure of eval(): same type and message, and a second read reports it
// again.
TEST(Streams, EvalInlineFailsAsEval) {
  MetalKernel k = metal_kernel("faults", {"x"}, {"y"}, R"(
    uint i = thread_position_in_grid.x;
    y[i] = x[i + 0x40000000u];)");
  const int64_t n = 32;
  const Stream cpu = default_stream(Device::cpu());  // (never a GPU: the kernel faults)
  Array x = Array::from_doubles(random_values(n, 25), {n}, float32, Device::cpu());
  auto message_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Array warm = scaled(k, x, cpu);
  std::string slow = message_of([&] { warm.eval(); });
  ASSERT_NE(slow, "no error");
  Array y = scaled(k, x, cpu);
  EXPECT_EQ(message_of([&] { eval_inline(y); }), slow);
  EXPECT_FALSE(eval_inline(y));  // failed: eval() reports it again
  EXPECT_EQ(message_of([&] { y.eval(); }), slow);
}

TEST(Streams, AFailingKernelSurfacesAtSynchronizeAndTheStreamStaysUsable) {
  // Compiles at evaluation (on the worker): the body has a C++ error.
  auto bad = metal_kernel("broken_on_stream", {"a"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = a[i] + not_declared_anywhere;)");
  Array a = Array::from_doubles(random_values(64, 6), {64}, float32, Device::cpu());
  Stream s = new_stream(Device::cpu());
  KernelCall call;
  call.output_shapes = {{64}};
  call.output_dtypes = {float32};
  call.grid = {64, 1, 1};
  call.threadgroup = {64, 1, 1};
  call.stream = s;
  Array out;
  try {
    out = bad({a}, call)[0];
  } catch (const CompileError&) {
    GTEST_SKIP() << "the kernel failed at the call, not on the stream";
  }
  async_eval({out});
  try {
    synchronize(s);
    FAIL() << "synchronize did not report the failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken_on_stream"), std::string::npos) << e.what();
  }
  synchronize(s);  // reported once
  // Reading the output reports it again; the stream runs the next call.
  EXPECT_THROW(out.to_doubles(), Error);
  auto va = random_values(64, 7);
  Array b = Array::from_doubles(va, {64}, float32, Device::cpu());
  Array good = axpb(b, b, s);
  async_eval({good});
  synchronize(s);
  expect_values(good, axpb_ref(va, va));
}

TEST(Streams, DeviceAndStreamMustAgree) {
  Array a = Array::from_doubles(random_values(8, 8), {8}, float32, Device::cpu());
  if (!gpu_available()) GTEST_SKIP() << "needs a GPU to disagree with";
  EXPECT_THROW(axpb(a, a, default_stream(Device::cpu()), Device::gpu()), std::invalid_argument);
}

TEST(Streams, CudaStreamsAndCpuStreamsWithCrossDependencies) {
  if (!gpu_available()) GTEST_SKIP() << "no GPU";
  const size_t n = 1 << 16;
  auto va = random_values(n, 9), vb = random_values(n, 10);
  Array a = Array::from_doubles(va, {static_cast<int64_t>(n)}, float32, Device::gpu());
  Array b = Array::from_doubles(vb, {static_cast<int64_t>(n)}, float32, Device::gpu());
  Stream g1 = new_stream(Device::gpu()), c1 = new_stream(Device::cpu()),
         c2 = new_stream(Device::cpu());
  for (int round = 0; round < 3; ++round) {
    Array x = axpb(a, b, g1);                              // GPU stream g1
    Array xc = x.to(Device::cpu());                        // waits for g1
    Array y = axpb(xc, xc, c1);                            // CPU stream c1
    Array z = axpb(y, xc, c2);                             // CPU stream c2, reads c1
    Array w = axpb(z.to(Device::gpu()), x, std::nullopt);  // GPU default stream, reads c2 and g1
    async_eval({w});
    auto rx = axpb_ref(va, vb);
    auto ry = axpb_ref(rx, rx);
    auto rz = axpb_ref(ry, rx);
    expect_values(w, axpb_ref(rz, rx));
    synchronize(g1);
    synchronize(c1);
    synchronize(c2);
  }
  // An external stream: Alloy's own non-default stream, wrapped by its handle.
  void* h = cuda::stream_handle(g1);
  EXPECT_EQ(cuda::stream_from_handle(h), g1);
  EXPECT_EQ(cuda::stream_from_handle(nullptr), default_stream(Device::gpu()));
}

TEST(Streams, StreamContextSetsTheDefaultOfItsScope) {
  Device before = default_device();
  Stream s = new_stream(Device::cpu());
  {
    StreamContext on(s);
    EXPECT_EQ(default_device(), Device::cpu());
    EXPECT_EQ(to_stream(std::monostate{}), s);
    {
      StreamContext inner(Device::cpu());
      EXPECT_EQ(to_stream(std::monostate{}), default_stream(Device::cpu()));
    }
    EXPECT_EQ(to_stream(std::monostate{}), s);
    // Ops given no stream run on the context's: a float64 op stays on the CPU even where the
    // default device is a GPU.
    Array a = Array::from_doubles(random_values(8, 3), {8}, Dtype::float64, Device::cpu());
    Array y = exp(a);
    EXPECT_EQ(y.device(), Device::cpu());
    auto v = y.to_doubles();
    auto x = a.to_doubles();
    for (size_t i = 0; i < v.size(); ++i) EXPECT_DOUBLE_EQ(v[i], std::exp(x[i]));
  }
  EXPECT_EQ(default_device(), before);
  // Other threads do not see a context.
  StreamContext on(s);
  Stream other;
  std::thread([&] { other = to_stream(std::monostate{}); }).join();
  EXPECT_EQ(other, default_stream(before));
}

// Device indices: GPU i is CUDA's device i (of those CUDA_VISIBLE_DEVICES shows); an index CUDA
// does not show is a clear error everywhere a device is named.
TEST(Devices, GpuIndicesFollowWhatCudaShows) {
  const int n = gpu_count();
  EXPECT_EQ(n, cuda::device_count());
  EXPECT_EQ(gpu_available(), n > 0);
  for (Device bad : {Device::gpu(n), Device::gpu(-1), Device::gpu(1000)}) {
    EXPECT_THROW(new_stream(bad), std::invalid_argument) << bad.str();
    EXPECT_THROW(default_stream(bad), std::invalid_argument) << bad.str();
    EXPECT_THROW(set_default_device(bad), std::invalid_argument) << bad.str();
    EXPECT_THROW(Array::from_doubles({1.0, 2.0}, {2}, float32, bad), std::invalid_argument);
    Array host = Array::from_doubles({1.0, 2.0}, {2}, float32, Device::cpu());
    EXPECT_THROW(host.to(bad), std::invalid_argument) << bad.str();
  }
  if (n > 0) {
    try {
      new_stream(Device::gpu(n));
      ADD_FAILURE() << "gpu:" << n << " was accepted";
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("gpu:" + std::to_string(n)), std::string::npos) << what;
      EXPECT_NE(what.find("CUDA shows"), std::string::npos) << what;
    }
  }
}

// Work on two GPUs: arrays, kernels, moves between the GPUs (peer copies ordered by events),
// streams of the second GPU, its cuBLAS handle, and the default device set to it.
TEST(Devices, KernelsMovesAndStreamsOnTwoGpus) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs two GPUs (" << gpu_count() << " here)";
  const Device g0 = Device::gpu(0), g1 = Device::gpu(1);
  const size_t len = 1 << 16;
  const int64_t n = static_cast<int64_t>(len);
  auto va = random_values(len, 31), vb = random_values(len, 32);
  Array a0 = Array::from_doubles(va, {n}, float32, g0);
  Array b1 = Array::from_doubles(vb, {n}, float32, g1);
  EXPECT_EQ(b1.device(), g1);
  EXPECT_EQ(cuda::device_arch(1).rfind("sm_", 0), 0u);

  // A kernel on GPU 1 fed from GPU 0, then back to GPU 0, then a new stream of GPU 1.
  Array out1 = axpb(a0.to(g1), b1, std::nullopt, g1);
  EXPECT_EQ(out1.device(), g1);
  Array out0 = axpb(out1.to(g0), a0, std::nullopt, g0);
  Stream s1 = new_stream(g1);
  EXPECT_EQ(s1.device, g1);
  Array chain = axpb(out0.to(g1), b1, s1);
  auto r1 = axpb_ref(va, vb), r0 = axpb_ref(r1, va), rc = axpb_ref(r0, vb);
  synchronize(s1);
  expect_values(chain, rc);
  expect_values(out0, r0);
  expect_values(out1, r1);
  EXPECT_GT(cuda::memory_stats(1).active_bytes, 0u);

  // cuBLAS on GPU 1 (its own handle), against a float64 reference.
  const int64_t m = 48, k = 40, p = 24;
  auto vx = random_values(m * k, 33), vy = random_values(k * p, 34);
  Array x = Array::from_doubles(vx, {m, k}, float32, g1);
  Array y = Array::from_doubles(vy, {k, p}, float32, g1);
  Array z = matmul(x, y);
  EXPECT_EQ(z.device(), g1);
  std::vector<double> rz(m * p, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < p; ++j)
      for (int64_t q = 0; q < k; ++q) rz[i * p + j] += vx[i * k + q] * vy[q * p + j];
  auto got = z.to_doubles();
  for (size_t i = 0; i < rz.size(); ++i) ASSERT_NEAR(got[i], rz[i], 1e-3 * (1 + std::abs(rz[i])));

  // The default device: new arrays and kernels go to GPU 1.
  set_default_device(g1);
  EXPECT_EQ(default_device(), g1);
  Array d = axpb(b1, b1, std::nullopt);
  EXPECT_EQ(d.device(), g1);
  expect_values(d, axpb_ref(vb, vb));
  set_default_device(g0);
  EXPECT_EQ(default_device(), g0);
}

}  // namespace
}  // namespace alloy
