// compile()'s replay through CUDA graphs (src/transforms/compile_graph.*,
// src/backend/cuda/graph.*): the decisions (which traces and calls may use a graph) and the
// patching of recorded launch parameters, without a GPU; on a GPU, graph replays against eager
// evaluation with new inputs every call, the graph reused (no re-recording), pointers rewritten
// when outputs stay alive, chained replays, and the fallbacks (changed shapes under shapeless, work
// a graph cannot hold).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "backend/cuda/graph.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "random_values.h"
#include "transforms/compile_graph.h"
#include "transforms/trace.h"

namespace alloy {
namespace {

using Arrays = std::vector<Array>;
using transforms::GraphInput;
using transforms::GraphReplayState;

Array random_array(const Shape& shape, uint64_t seed, std::optional<Device> dev = std::nullopt) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  Array a = Array::from_doubles(testing::random_values(static_cast<size_t>(n), seed, 2, 64), shape,
                                float32, dev);
  a.eval();  // materialized: a graph is recorded only on computed inputs
  return a;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- patch sites (no GPU) ----------------------------------------------------------------------

void* addr(uintptr_t a) {
  return reinterpret_cast<void*>(a);
}

TEST(CompileGraph, PatchSitesFindPointersIntoExternalRanges) {
  // Parameter blocks of two layouts (prelude/cuda/abi.h): a plain one and a robust one with
  // threadgroup parameters and inline data.
  auto L0 = std::make_unique<cuda::ParamBlock>(alloy_cuda_layout(2, 0, false, 0));
  auto L1 = std::make_unique<cuda::ParamBlock>(alloy_cuda_layout(5, 2, true, 512));
  // Launch 0 reads input 0 (at +0) and writes an intermediate; launch 1 reads the intermediate
  // and input 1 at an offset, writes the output; buffer 3 of launch 1 sits inline (an offset,
  // numerically inside input 0's range, which must not count); its table's entry 4 is past the
  // buffers the launch bound (head.num_buffers) and is not read.
  L0->head.num_buffers = 2;
  L0->set_buffer(0, addr(0x100000));  // input 0: [0x100000, +0x400)
  L0->set_buffer(1, addr(0x900000));  // intermediate (not external)
  L1->head.num_buffers = 4;
  L1->set_buffer(0, addr(0x900000));
  L1->set_buffer(1, addr(0x200010));  // input 1 + 16
  L1->set_buffer(2, addr(0x300000));  // output
  L1->set_buffer(3, addr(0x100000));
  L1->set_buffer(4, addr(0x100010));
  L1->head.inline_mask = 1ull << 3;
  std::vector<ExternalRange> ext = {
      {addr(0x100000), 0x400}, {addr(0x200000), 0x400}, {addr(0x300000), 0x400}};
  auto sites = cuda::find_patch_sites({L0.get(), L1.get()}, ext);
  ASSERT_EQ(sites.size(), 3u);
  EXPECT_EQ(sites[0].launch, 0u);
  EXPECT_EQ(sites[0].buffer, 0u);
  EXPECT_EQ(sites[0].external, 0u);
  EXPECT_EQ(sites[0].offset, 0u);
  EXPECT_EQ(sites[1].launch, 1u);
  EXPECT_EQ(sites[1].buffer, 1u);
  EXPECT_EQ(sites[1].external, 1u);
  EXPECT_EQ(sites[1].offset, 16u);
  EXPECT_EQ(sites[2].buffer, 2u);
  EXPECT_EQ(sites[2].external, 2u);
}

TEST(CompileGraph, PatchSitesStopAtRangeEndsAndRejectOverlaps) {
  auto L = std::make_unique<cuda::ParamBlock>(alloy_cuda_layout(3, 0, false, 0));
  L->head.num_buffers = 3;
  L->set_buffer(0, addr(0x100400));  // one past input 0's end: another buffer
  L->set_buffer(1, addr(0x1003fc));  // last element of input 0
  L->set_buffer(2, addr(0x0ffffc));  // just before it
  std::vector<ExternalRange> ext = {{addr(0x100000), 0x400}};
  auto sites = cuda::find_patch_sites({L.get()}, ext);
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].buffer, 1u);
  EXPECT_EQ(sites[0].offset, 0x3fcu);
  // The same buffer given twice (f(x, x)): a pointer could belong to either.
  std::vector<ExternalRange> twice = {{addr(0x100000), 0x400}, {addr(0x100000), 0x400}};
  EXPECT_THROW(cuda::find_patch_sites({L.get()}, twice), std::invalid_argument);
  std::vector<ExternalRange> overlapping = {{addr(0x100000), 0x400}, {addr(0x100200), 0x400}};
  EXPECT_THROW(cuda::find_patch_sites({L.get()}, overlapping), std::invalid_argument);
}

// ---- decisions (no GPU) ------------------------------------------------------------------------

// A trace made on the CPU, then marked as if it ran on the GPU (the decision reads only that).
transforms::Trace gpu_marked(const transforms::TraceFn& fn, const Arrays& examples) {
  auto t = transforms::trace(fn, examples);
  for (auto& op : t.ops) op.device = Device::gpu();
  for (auto& c : t.constants) c.device = Device::gpu();
  return t;
}

TEST(CompileGraph, TraceDecision) {
  StreamContext on_cpu(Device::cpu());  // the ops of the traces run on the CPU, GPU or not
  Arrays ex = {random_array({8}, 1), random_array({8}, 2)};
  auto two_ops = [](const Arrays& in) { return Arrays{exp(multiply(in[0], in[1]))}; };
  auto cpu_trace = transforms::trace(two_ops, ex);
  EXPECT_TRUE(contains(transforms::graph_trace_blocker(cpu_trace), "runs on the"));
  EXPECT_EQ(transforms::graph_trace_blocker(gpu_marked(two_ops, ex)), "");

  auto one_op = [](const Arrays& in) { return Arrays{exp(in[0])}; };
  EXPECT_TRUE(contains(transforms::graph_trace_blocker(gpu_marked(one_op, ex)), "fewer than two"));

  auto returns_input = [](const Arrays& in) { return Arrays{exp(exp(in[0])), in[1]}; };
  EXPECT_TRUE(contains(transforms::graph_trace_blocker(gpu_marked(returns_input, ex)),
                       "output 1 is an input"));

  auto returns_view = [](const Arrays& in) { return Arrays{exp(exp(in[0])).reshape({2, 4})}; };
  EXPECT_TRUE(contains(transforms::graph_trace_blocker(gpu_marked(returns_view, ex)),
                       "output 0 is a view"));

  auto twice = [](const Arrays& in) {
    Array y = exp(exp(in[0]));
    return Arrays{y, y};
  };
  EXPECT_TRUE(
      contains(transforms::graph_trace_blocker(gpu_marked(twice, ex)), "are the same array"));

  auto with_constant = [c = random_array({8}, 3)](const Arrays& in) {
    return Arrays{exp(multiply(in[0], c))};
  };
  auto t = transforms::trace(with_constant, ex);
  ASSERT_FALSE(t.constants.empty());
  for (auto& op : t.ops) op.device = Device::gpu();
  // Constants are fixed for a cache entry: a small host one travels inside the recorded launch,
  // a larger one is moved by a copy, which the recording itself refuses.
  EXPECT_EQ(transforms::graph_trace_blocker(t), "");

  transforms::set_cuda_graphs_enabled(false);
  EXPECT_TRUE(contains(transforms::graph_trace_blocker(gpu_marked(two_ops, ex)), "disabled"));
  transforms::set_cuda_graphs_enabled(true);
  EXPECT_EQ(transforms::graph_trace_blocker(gpu_marked(two_ops, ex)), "");
}

GraphInput gpu_input(Shape shape) {
  GraphInput g;
  g.device = Device::gpu();
  g.strides = row_major_strides(shape);
  g.shape = std::move(shape);
  g.materialized = true;
  return g;
}

TEST(CompileGraph, InputDecision) {
  std::vector<GraphInput> ok = {gpu_input({4, 8}), gpu_input({8})};
  EXPECT_EQ(transforms::graph_input_blocker(ok, nullptr), "");
  EXPECT_EQ(transforms::graph_input_blocker(ok, &ok), "");

  auto on_cpu = ok;
  on_cpu[1].device = Device::cpu();
  EXPECT_TRUE(contains(transforms::graph_input_blocker(on_cpu, nullptr), "input 1 is on the"));

  // Pending inputs: never recorded (recording evaluates at once); a replay takes the outputs of
  // other replays only (grad's leaves and trace placeholders are pending too).
  auto lazy = ok;
  lazy[0].materialized = false;
  EXPECT_TRUE(contains(transforms::graph_input_blocker(lazy, &ok), "not computed yet"));
  lazy[0].from_graph = true;
  EXPECT_EQ(transforms::graph_input_blocker(lazy, &ok), "");
  EXPECT_TRUE(contains(transforms::graph_input_blocker(lazy, nullptr), "not computed yet"));

  auto transposed = ok;
  transposed[0].strides = {1, 4};
  EXPECT_TRUE(contains(transforms::graph_input_blocker(transposed, nullptr), "row-contiguous"));

  // Shapeless: another shape than the recorded one replays op by op.
  auto grown = ok;
  grown[0] = gpu_input({4, 16});
  EXPECT_EQ(transforms::graph_input_blocker(grown, nullptr), "");
  EXPECT_TRUE(contains(transforms::graph_input_blocker(grown, &ok), "another shape"));
  auto offset = ok;
  offset[1].offset = 4;
  EXPECT_TRUE(contains(transforms::graph_input_blocker(offset, &ok), "another shape or layout"));
  EXPECT_TRUE(contains(transforms::graph_input_blocker({ok[0]}, &ok), "number of inputs"));
}

TEST(CompileGraph, CpuFunctionsReplayOpByOp) {
  StreamContext on_cpu(Device::cpu());
  auto f = compile([](const Arrays& in) { return Arrays{exp(multiply(in[0], in[1]))}; });
  Array x = random_array({64}, 4), y = random_array({64}, 5);
  auto got = f({x, y})[0].to_doubles();
  auto xv = x.to_doubles(), yv = y.to_doubles();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], std::exp(xv[i] * yv[i]), 1e-5 * (1 + std::exp(xv[i] * yv[i])));
  auto info = transforms::cuda_graph_info(f, {x, y});
  if (!gpu_backend()) return;  // without a GPU nothing is even tried
  EXPECT_EQ(info.status, GraphReplayState::Status::rejected);
  EXPECT_TRUE(contains(info.reason, "runs on the")) << info.reason;
}

// ---- on the GPU --------------------------------------------------------------------------------

class CompileGraphGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_backend()) GTEST_SKIP() << "no CUDA GPU";
    transforms::set_cuda_graphs_enabled(true);
  }
};

constexpr int kSteps = 12;

// kSteps small kernels, each reading the previous one's output (the benchmark's shape).
Arrays steps(const Arrays& in) {
  static auto k = metal_kernel("graph_step", {"inp", "b"}, {"out"}, R"(
    uint i = thread_position_in_grid.x;
    out[i] = inp[i] * 0.75f + b[i % b_shape[0]];)");
  Array v = in[0];
  for (int j = 0; j < kSteps; ++j) {
    KernelCall call;
    call.output_dtypes = {float32};
    call.grid_expr = DimsExpr{ShapeExpr::size(0), 1, 1};
    call.threadgroup_expr = DimsExpr{ShapeExpr::min(ShapeExpr::size(0), 128), 1, 1};
    call.output_shape_exprs = {{ShapeExpr::dim(0, 0)}};
    v = k({v, in[1]}, call)[0];
  }
  return {v};
}

std::vector<double> steps_ref(const std::vector<double>& x, const std::vector<double>& b) {
  std::vector<double> v = x;
  for (int j = 0; j < kSteps; ++j)
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(static_cast<float>(v[i]) * 0.75f +
                                static_cast<float>(b[i % b.size()]));
  return v;
}

void expect_steps(const Array& got, const Array& x, const Array& b, const std::string& what) {
  auto want = steps_ref(x.to_doubles(), b.to_doubles());
  auto g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << what << " at " << i;
}

TEST_F(CompileGraphGpu, ReplaysThroughOneGraphWithNewInputsEveryCall) {
  auto f = compile(steps);
  const Shape shape = {1000};
  uint64_t seed = 100;
  Array x = random_array(shape, seed++, Device::gpu()),
        b = random_array({7}, seed++, Device::gpu());
  expect_steps(f({x, b})[0], x, b, "recording call");
  auto info = transforms::cuda_graph_info(f, {x, b});
  ASSERT_EQ(info.status, GraphReplayState::Status::ready) << info.reason;
  EXPECT_EQ(info.launches, kSteps);
  // Later calls: new input buffers every time; outputs kept alive, so each call's output lives
  // at a new address and the nodes reading inputs / writing the output are rewritten.
  struct Call {
    Array x, b, out;
  };
  std::vector<Call> kept;
  for (int call = 0; call < 6; ++call) {
    Array xi = random_array(shape, seed++, Device::gpu());
    Array bi = random_array({7}, seed++, Device::gpu());
    Array out = f({xi, bi})[0];
    kept.push_back({xi, bi, out});
    expect_steps(out, xi, bi, "replay " + std::to_string(call));
  }
  info = transforms::cuda_graph_info(f, {x, b});
  EXPECT_EQ(info.status, GraphReplayState::Status::ready);
  EXPECT_EQ(info.replays, 6);
  EXPECT_GT(info.updates, 0);
  EXPECT_EQ(f.trace_count(), 1);
  // Every kept output still holds its own call's values (later replays wrote elsewhere).
  for (size_t i = 0; i < kept.size(); ++i)
    expect_steps(kept[i].out, kept[i].x, kept[i].b, "kept output " + std::to_string(i));
}

TEST_F(CompileGraphGpu, ChainedReplaysAndOtherStreams) {
  auto f = compile(steps);
  Array x = random_array({256}, 1, Device::gpu()), b = random_array({5}, 2, Device::gpu());
  f({x, b})[0].eval();  // records
  // y is the pending output of a replay: the next call takes it as is.
  Array y = f({x, b})[0];
  Array z = f({y, b})[0];
  auto ref = steps_ref(steps_ref(x.to_doubles(), b.to_doubles()), b.to_doubles());
  auto got = z.to_doubles();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-5 * (1 + std::abs(ref[i])));
  EXPECT_GE(transforms::cuda_graph_info(f, {x, b}).replays, 2);
  // A replay on another stream waits for the graph's previous launch.
  Stream s = new_stream(Device::gpu());
  Array w;
  {
    StreamContext ctx(s);
    w = f({x, b})[0];
    w.eval();
  }
  expect_steps(w, x, b, "other stream");
}

TEST_F(CompileGraphGpu, ShapelessWithNewShapesReplaysOpByOp) {
  auto f = compile(steps, /*shapeless=*/true);
  Array b = random_array({3}, 9, Device::gpu());
  Array x = random_array({512}, 10, Device::gpu());
  expect_steps(f({x, b})[0], x, b, "recorded shape");
  ASSERT_EQ(transforms::cuda_graph_info(f, {x, b}).status, GraphReplayState::Status::ready);
  for (int64_t n : {64, 4096, 512}) {
    Array xi = random_array({n}, 11 + n, Device::gpu());
    expect_steps(f({xi, b})[0], xi, b, "n = " + std::to_string(n));
  }
  auto info = transforms::cuda_graph_info(f, {x, b});
  EXPECT_EQ(info.replays, 1);  // only the call with the recorded shape
  EXPECT_EQ(f.trace_count(), 1);
}

TEST_F(CompileGraphGpu, WorkAGraphCannotHoldReplaysOpByOp) {
  // astype is a strided copy (not a recorded kernel launch): the whole function stays eager.
  auto f = compile([](const Arrays& in) {
    return Arrays{exp(multiply(in[0], in[1])).astype(float16).astype(float32)};
  });
  Array x = random_array({300}, 20, Device::gpu()), y = random_array({300}, 21, Device::gpu());
  for (int call = 0; call < 3; ++call) {
    auto got = f({x, y})[0].to_doubles();
    auto xv = x.to_doubles(), yv = y.to_doubles();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], std::exp(xv[i] * yv[i]), 2e-3 * (1 + std::exp(xv[i] * yv[i])));
  }
  auto info = transforms::cuda_graph_info(f, {x, y});
  EXPECT_EQ(info.status, GraphReplayState::Status::rejected);
  EXPECT_FALSE(info.reason.empty());
  EXPECT_EQ(info.replays, 0);
}

TEST_F(CompileGraphGpu, DisabledGraphsGiveTheSameResults) {
  transforms::set_cuda_graphs_enabled(false);
  auto f = compile(steps);
  Array x = random_array({777}, 30, Device::gpu()), b = random_array({9}, 31, Device::gpu());
  expect_steps(f({x, b})[0], x, b, "disabled");
  transforms::set_cuda_graphs_enabled(true);
  auto info = transforms::cuda_graph_info(f, {x, b});
  EXPECT_NE(info.status, GraphReplayState::Status::ready);
  EXPECT_EQ(info.replays, 0);
}

}  // namespace
}  // namespace alloy
