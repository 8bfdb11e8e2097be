// Built-in ops as graph nodes: primitive state and registry, gradients against finite
// differences (float64, CPU), composite reductions, custom kernels mixed with ops, and the
// generated kernels' CUDA translations compiled with NVRTC for sm_90 (no GPU needed).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "alloy/alloy.h"
#include "core/array_node.h"
#include "kernel/custom_kernel.h"
#include "ops/functors.h"
#include "ops/kernels.h"
#include "ops/primitives.h"

using namespace alloy;

namespace {

std::vector<double> randoms(size_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= rtol * (1 + std::fabs(want[i]))) && bad++ < 4)
      ADD_FAILURE() << what << fmt::format(": element {}: got {}, expected {}", i, got[i], want[i]);
  EXPECT_EQ(bad, 0) << what;
}

std::shared_ptr<PendingOp> pending(const Array& a) {
  auto p = node_of(a)->pending;
  EXPECT_TRUE(p) << "the array is not a pending op";
  return p;
}

}  // namespace

TEST(OpsPrimitives, EveryOpRoundTripsThroughStateAndRegistry) {
  auto names = registered_primitives();
  for (const auto& info : ops::all_ops()) {
    ops::Elementwise p(info.op);
    EXPECT_STREQ(p.name(), info.primitive);
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), info.primitive)) << info.primitive;
    auto bytes = p.state().to_bytes();
    auto back = make_primitive(p.name(), PrimitiveState::from_bytes(bytes.data(), bytes.size()));
    EXPECT_TRUE(back->is_equivalent(p)) << info.op;
    EXPECT_TRUE(p.is_equivalent(*back)) << info.op;
    EXPECT_EQ(back->label(), p.label());
    // A different op is not equivalent, also under a shared primitive name (Log: log vs log2).
    ops::Elementwise other(std::string(info.op) == "log" ? "log2" : "log");
    EXPECT_FALSE(p.is_equivalent(other)) << info.op;
  }
  // An op under another primitive's name is rejected.
  PrimitiveState wrong(1);
  wrong.set("op", std::string("exp"));
  EXPECT_THROW(make_primitive("Log", wrong), std::invalid_argument);
  for (auto& r : std::vector<std::shared_ptr<Primitive>>{
           std::make_shared<ops::Reduce>("sum", std::vector<int>{0, 2}),
           std::make_shared<ops::Reduce>("max", std::vector<int>{1}),
           std::make_shared<ops::ArgReduce>("argmin", 1)}) {
    auto bytes = r->state().to_bytes();
    auto back = make_primitive(r->name(), PrimitiveState::from_bytes(bytes.data(), bytes.size()));
    EXPECT_TRUE(back->is_equivalent(*r)) << r->label();
  }
  EXPECT_FALSE(ops::Reduce("sum", {0}).is_equivalent(ops::Reduce("sum", {1})));
  EXPECT_FALSE(ops::Reduce("sum", {0}).is_equivalent(ops::Reduce("prod", {0})));
  // A rebuilt primitive computes the same function.
  Array a = Array::from_doubles(randoms(12, -1, 1, 1), {3, 4}, Dtype::float32, Device::cpu());
  Array y = exp(a);
  auto p = pending(y);
  auto bytes = p->primitive->state().to_bytes();
  auto rebuilt = make_primitive("Exp", PrimitiveState::from_bytes(bytes.data(), bytes.size()));
  auto out = make_pending(rebuilt, p->inputs, {a.shape()}, {Dtype::float32}, Device::cpu())[0];
  EXPECT_EQ(out.to_doubles(), y.to_doubles());
}

namespace {

// d sum(cot * f(x)) / dx by central differences, for f over float64 CPU arrays.
std::vector<double> fd_vjp(const std::function<Array(const std::vector<Array>&)>& f,
                           std::vector<std::vector<double>> xs, const std::vector<Shape>& shapes,
                           const std::vector<double>& cot, int k) {
  std::vector<double> g(xs[k].size());
  auto value = [&] {
    std::vector<Array> in;
    for (size_t j = 0; j < xs.size(); ++j)
      in.push_back(Array::from_doubles(xs[j], shapes[j], Dtype::float64, Device::cpu()));
    auto y = f(in).to_doubles();
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += cot[i] * y[i];
    return s;
  };
  for (size_t i = 0; i < g.size(); ++i) {
    double x0 = xs[k][i], h = 1e-6 * std::max(1.0, std::fabs(x0));
    xs[k][i] = x0 + h;
    double up = value();
    xs[k][i] = x0 - h;
    double down = value();
    xs[k][i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

void check_grad(const std::string& what, const std::function<Array(const std::vector<Array>&)>& f,
                const std::vector<std::vector<double>>& xs, const std::vector<Shape>& shapes,
                int first_input = 0) {  // the primitive's input that is f's first argument
  std::vector<Array> in;
  for (size_t j = 0; j < xs.size(); ++j)
    in.push_back(Array::from_doubles(xs[j], shapes[j], Dtype::float64, Device::cpu()));
  Array y = f(in);
  // Copies: evaluating y (below) drops the pending op's inputs.
  auto primitive = pending(y)->primitive;
  auto primals = pending(y)->inputs;
  std::vector<int> argnums;
  for (size_t j = 0; j < xs.size(); ++j) argnums.push_back(first_input + static_cast<int>(j));
  auto cot_v = randoms(static_cast<size_t>(y.size()), 0.5, 1.5, 17);
  Array cot = Array::from_doubles(cot_v, y.shape(), Dtype::float64, Device::cpu());
  auto grads = primitive->vjp(primals, {cot}, argnums, {y});
  ASSERT_EQ(grads.size(), xs.size());
  for (size_t k = 0; k < xs.size(); ++k) {
    auto want = fd_vjp(f, xs, shapes, cot_v, static_cast<int>(k));
    expect_close(grads[k].to_doubles(), want, 2e-6, fmt::format("vjp {} arg {}", what, k));
  }
  // jvp with one-hot-free random tangents: sum(cot * jvp) == sum(vjp * tangent).
  std::vector<Array> tangents;
  std::vector<std::vector<double>> tv;
  for (size_t j = 0; j < xs.size(); ++j) {
    tv.push_back(randoms(xs[j].size(), -1, 1, 30 + j));
    tangents.push_back(Array::from_doubles(tv[j], shapes[j], Dtype::float64, Device::cpu()));
  }
  auto jv = primitive->jvp(primals, tangents, argnums);
  ASSERT_EQ(jv.size(), 1u);
  auto jd = broadcast_to(jv[0], y.shape()).contiguous().to_doubles();
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < jd.size(); ++i) lhs += cot_v[i] * jd[i];
  for (size_t k = 0; k < xs.size(); ++k) {
    auto g = grads[k].to_doubles();
    for (size_t i = 0; i < g.size(); ++i) rhs += g[i] * tv[k][i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::fabs(rhs))) << "jvp " << what;
}

}  // namespace

TEST(OpsGradients, UnaryMatchFiniteDifferences) {
  struct U {
    const char* name;
    std::function<Array(const Array&)> f;
    double lo, hi;
  };
  std::vector<U> cases = {
      {"abs", [](auto& a) { return abs(a); }, 0.2, 2},
      {"negative", [](auto& a) { return negative(a); }, -2, 2},
      {"square", [](auto& a) { return square(a); }, -2, 2},
      {"exp", [](auto& a) { return exp(a); }, -2, 2},
      {"expm1", [](auto& a) { return expm1(a); }, -2, 2},
      {"log", [](auto& a) { return log(a); }, 0.2, 3},
      {"log2", [](auto& a) { return log2(a); }, 0.2, 3},
      {"log1p", [](auto& a) { return log1p(a); }, -0.5, 3},
      {"sqrt", [](auto& a) { return sqrt(a); }, 0.2, 3},
      {"rsqrt", [](auto& a) { return rsqrt(a); }, 0.2, 3},
      {"sin", [](auto& a) { return sin(a); }, -2, 2},
      {"cos", [](auto& a) { return cos(a); }, -2, 2},
      {"tan", [](auto& a) { return tan(a); }, -1, 1},
      {"tanh", [](auto& a) { return tanh(a); }, -2, 2},
      {"arcsin", [](auto& a) { return arcsin(a); }, -0.8, 0.8},
      {"arctan", [](auto& a) { return arctan(a); }, -2, 2},
      {"sigmoid", [](auto& a) { return sigmoid(a); }, -3, 3},
      {"erf", [](auto& a) { return erf(a); }, -2, 2},
      {"erfinv", [](auto& a) { return erfinv(a); }, -0.9, 0.9},
  };
  for (auto& c : cases)
    check_grad(c.name, [&](const std::vector<Array>& in) { return c.f(in[0]); },
               {randoms(6, c.lo, c.hi, 3)}, {{2, 3}});
}

TEST(OpsGradients, BinaryMatchFiniteDifferencesWithBroadcastScalars) {
  StreamContext on_cpu(Device::cpu());  // float64 references: a CPU test on every machine
  struct B {
    const char* name;
    std::function<Array(const Array&, const Array&)> f;
    double lo, hi;
  };
  std::vector<B> cases = {
      {"add", [](auto& a, auto& b) { return a + b; }, -2, 2},
      {"subtract", [](auto& a, auto& b) { return a - b; }, -2, 2},
      {"multiply", [](auto& a, auto& b) { return a * b; }, -2, 2},
      {"divide", [](auto& a, auto& b) { return a / b; }, 0.5, 2},
      {"power", [](auto& a, auto& b) { return power(a, b); }, 0.5, 2},
      {"maximum", [](auto& a, auto& b) { return maximum(a, b); }, -2, 2},
      {"arctan2", [](auto& a, auto& b) { return arctan2(a, b); }, 0.3, 2},
      {"logaddexp", [](auto& a, auto& b) { return logaddexp(a, b); }, -2, 2},
  };
  for (auto& c : cases) {
    check_grad(c.name, [&](const std::vector<Array>& in) { return c.f(in[0], in[1]); },
               {randoms(6, c.lo, c.hi, 5), randoms(6, c.lo, c.hi, 6)}, {{2, 3}, {2, 3}});
    // A 0-d second argument: its gradient is summed over the broadcast.
    check_grad(std::string(c.name) + " scalar",
               [&](const std::vector<Array>& in) { return c.f(in[0], in[1]); },
               {randoms(6, c.lo, c.hi, 7), randoms(1, c.lo, c.hi, 8)}, {{2, 3}, {}});
  }
  check_grad(
      "where",
      [](const std::vector<Array>& in) {
        Array cond = Array::from_doubles({1, 0, 1, 0, 0, 1}, {2, 3}, Dtype::bool_);
        return where(cond, in[0], in[1]);
      },
      {randoms(6, -1, 1, 9), randoms(6, -1, 1, 10)}, {{2, 3}, {2, 3}}, 1);
}

TEST(OpsGradients, ReductionsMatchFiniteDifferences) {
  for (const char* op : {"sum", "prod", "max"}) {
    check_grad(op,
               [&](const std::vector<Array>& in) {
                 std::string o = op;
                 return o == "sum"    ? sum(in[0], {1}, true)
                        : o == "prod" ? prod(in[0], {1}, true)
                                      : max(in[0], {1}, true);
               },
               {randoms(12, 0.5, 2, 11)}, {{3, 4}});
  }
}

TEST(OpsComposite, MeanVarLogsumexpSoftmaxArgmax) {
  auto v = randoms(60, -3, 3, 40);
  Array a = Array::from_doubles(v, {4, 15}, Dtype::float32);
  auto vr = a.to_doubles();
  std::vector<double> mean_r(4), var_r(4), lse_r(4), soft(60), amax(4), amin(4);
  for (int i = 0; i < 4; ++i) {
    double s = 0, m = -INFINITY, mn = INFINITY;
    int im = 0, in = 0;
    for (int j = 0; j < 15; ++j) {
      double x = vr[i * 15 + j];
      s += x;
      if (x > m) m = x, im = j;
      if (x < mn) mn = x, in = j;
    }
    mean_r[i] = s / 15;
    double ss = 0, se = 0;
    for (int j = 0; j < 15; ++j) {
      ss += std::pow(vr[i * 15 + j] - mean_r[i], 2);
      se += std::exp(vr[i * 15 + j] - m);
    }
    var_r[i] = ss / 14;
    lse_r[i] = m + std::log(se);
    for (int j = 0; j < 15; ++j) soft[i * 15 + j] = std::exp(vr[i * 15 + j] - lse_r[i]);
    amax[i] = im;
    amin[i] = in;
  }
  expect_close(mean(a, 1).to_doubles(), mean_r, 1e-6, "mean");
  expect_close(var(a, 1, false, 1).to_doubles(), var_r, 1e-5, "var ddof=1");
  expect_close(logsumexp(a, 1).to_doubles(), lse_r, 1e-6, "logsumexp");
  expect_close(softmax(a, 1).to_doubles(), soft, 1e-6, "softmax");
  expect_close(argmax(a, 1).to_doubles(), amax, 0, "argmax");
  expect_close(argmin(a.transpose(), 0).to_doubles(), amin, 0, "argmin of a transposed view");
  EXPECT_EQ(argmax(a).item(),
            static_cast<double>(std::max_element(vr.begin(), vr.end()) - vr.begin()));
  // logsumexp of -inf rows and +inf.
  Array inf = Array::from_doubles({-INFINITY, -INFINITY, 1, INFINITY}, {2, 2}, Dtype::float32);
  auto l = logsumexp(inf, 1).to_doubles();
  EXPECT_EQ(l[0], -INFINITY);
  EXPECT_EQ(l[1], INFINITY);
  // NaN: argmax picks the first NaN (numpy).
  EXPECT_EQ(argmax(Array::from_doubles({1, NAN, 5, NAN}, {4}, Dtype::float32)).item(), 1);
  EXPECT_TRUE(std::isnan(max(Array::from_doubles({1, NAN, 5}, {3}, Dtype::float32)).item()));
}

TEST(OpsShapes, ViewsAndCreation) {
  Array a = Array::from_doubles(randoms(24, -1, 1, 50), {2, 3, 4}, Dtype::float32);
  EXPECT_EQ(expand_dims(a, {0, -1}).shape(), (Shape{1, 2, 3, 4, 1}));
  EXPECT_EQ(squeeze(expand_dims(a, 1)).shape(), a.shape());
  EXPECT_EQ(expand_dims(a.transpose(), 1).to_doubles(), a.transpose().contiguous().to_doubles());
  EXPECT_THROW(squeeze(a, {0}), std::invalid_argument);
  EXPECT_EQ(swapaxes(a, 0, 2).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(transpose(a).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(flatten(a.transpose()).to_doubles(), a.transpose().contiguous().to_doubles());
  EXPECT_EQ(slice(a, {0, 0, 3}, {2, 3, 0}, {1, 2, -2}).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(arange(0, 1, 0.25).to_doubles(), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(arange(5, 0, -2, Dtype::int32).to_doubles(), (std::vector<double>{5, 3, 1}));
  EXPECT_EQ(ones({2}, Dtype::int8).to_doubles(), (std::vector<double>{1, 1}));
  EXPECT_EQ(zeros_like(a).dtype(), Dtype::float32);
  EXPECT_EQ(sum(ones_like(a)).item(), 24);
}

TEST(OpsWithKernels, CustomKernelOutputsFeedOpsAndBack) {
  auto k = metal_kernel("myexp", {"inp"}, {"out"}, R"(
      uint elem = thread_position_in_grid.x;
      out[elem] = metal::exp(inp[elem]);)");
  auto v = randoms(64, -1, 1, 60);
  Array a = Array::from_doubles(v, {8, 8}, Dtype::float32);
  // Ops feed the kernel (a strided view of an op's output), the kernel feeds ops.
  Array x = (a * 2.0f + 1.0f).transpose();
  Array y = k({x}, {x.shape()}, {Dtype::float32}, {64, 1, 1}, {32, 1, 1})[0];
  Array z = sum(log(y) - x, 0);  // log(exp(x)) - x == 0
  auto zd = z.to_doubles();
  for (double d : zd) EXPECT_NEAR(d, 0, 1e-5);
  Array w = k({sum(a, 1)}, {{8}}, {Dtype::float32}, {8, 1, 1}, {8, 1, 1})[0];
  auto wd = w.to_doubles();
  for (int i = 0; i < 8; ++i) {
    double s = 0;
    for (int j = 0; j < 8; ++j) s += static_cast<float>(v[i * 8 + j]);
    EXPECT_NEAR(wd[i], std::exp(s), 1e-5 * std::exp(s));
  }
}

TEST(OpsKernels, GeneratedKernelsCompileWithNvrtcForSm90) {
  // One kernel per op (float32, or int32 for integer-only ops), several layouts, and the
  // reductions: the CUDA translation the GPU would build, compiled for sm_90.
  Shape shape{4, 8};
  Array c32 = Array::from_doubles(randoms(32, 1, 2, 1), shape, Dtype::float32);
  Array g32 = Array::from_doubles(randoms(32, 1, 2, 2), {8, 4}, Dtype::float32).transpose();
  Array s16 = Array::from_doubles({1.5}, {}, Dtype::float16);
  int compiled = 0;
  for (const auto& info : ops::all_ops()) {
    bool ints = info.family == ops::Family::integer_only;
    Dtype t = ints ? Dtype::int32
                   : (info.family == ops::Family::complex_part ? Dtype::complex64 : Dtype::float32);
    std::vector<Array> in;
    if (std::string(info.op) == "select")
      in = {Array::from_doubles(randoms(32, 0, 1, 3), shape, Dtype::bool_), c32, s16};
    else
      for (int j = 0; j < info.arity; ++j)
        in.push_back(j == 0 ? c32.astype(t) : (j == 1 ? g32.astype(t) : s16));
    std::vector<Dtype> dtypes;
    for (auto& a : in) dtypes.push_back(a.dtype());
    auto plan = ops::plan_elementwise(info, dtypes);
    auto k = ops::elementwise_kernel({info.op, plan.via, plan.compute, plan.out}, in, shape);
    std::string why = kernel::compile_call_cubin(
        MetalKernel(k.spec), in, ops::kernel_call(shape, plan.out, 32, true), "sm_90");
    if (!why.empty()) GTEST_SKIP() << why;
    ++compiled;
  }
  for (auto [op, t] : std::vector<std::pair<const char*, Dtype>>{{"sum", Dtype::float16},
                                                                 {"max", Dtype::bfloat16},
                                                                 {"all", Dtype::bool_},
                                                                 {"argmax", Dtype::float32}}) {
    std::string o = op;
    bool arg = o == "argmax";
    for (auto axes : std::vector<std::vector<int>>{{1}, {0}}) {
      Array x = c32.astype(t);
      auto [acc, out] = arg ? std::pair{Dtype::float32, Dtype::uint32} : ops::reduce_dtypes(o, t);
      auto k = ops::reduce_kernel({o, axes, acc, out}, x);
      Shape os = shape;
      os[axes[0]] = 1;
      std::string why = kernel::compile_call_cubin(
          MetalKernel(k.spec), {x}, ops::kernel_call(os, out, os[0] * os[1], true), "sm_90");
      EXPECT_EQ(why, "");
      ++compiled;
    }
  }
  {
    Array x = Array::from_doubles(randoms(320, 1, 2, 4), {40, 8}, Dtype::float16);
    auto k = ops::column_pass_kernel("sum", Dtype::float16, Dtype::float32, Dtype::float32);
    EXPECT_EQ(
        kernel::compile_call_cubin(MetalKernel(k.spec), {x},
                                   ops::kernel_call({3, 8}, Dtype::float32, 8, true, 3), "sm_90"),
        "");
    ++compiled;
  }
  {
    Array x = Array::from_doubles(randoms(32, 1, 2, 5), shape, Dtype::bfloat16);
    auto k = ops::concatenate_kernel(3, Dtype::bfloat16, 1, 2);
    EXPECT_EQ(
        kernel::compile_call_cubin(MetalKernel(k.spec), {x, x.transpose().transpose(), x},
                                   ops::kernel_call({4, 24}, Dtype::bfloat16, 96, true), "sm_90"),
        "");
    ++compiled;
  }
  EXPECT_GT(compiled, 50);
}

TEST(OpsShapes, ConcatenateAndStack) {
  auto av = randoms(6, -1, 1, 70), bv = randoms(12, -1, 1, 71);
  Array a = Array::from_doubles(av, {2, 3}, Dtype::float32);
  Array b = Array::from_doubles(bv, {3, 4}, Dtype::int32).transpose();  // (4, 3), strided
  Array c = concatenate({a, b, a}, 0);
  EXPECT_EQ(c.shape(), (Shape{8, 3}));
  EXPECT_EQ(c.dtype(), Dtype::float32);
  std::vector<double> want = a.to_doubles(), bt = b.contiguous().to_doubles();
  want.insert(want.end(), bt.begin(), bt.end());
  auto ad = a.to_doubles();
  want.insert(want.end(), ad.begin(), ad.end());
  EXPECT_EQ(c.to_doubles(), want);
  Array d = concatenate({a, a.slice({{}, {std::nullopt, std::nullopt, -1}})}, -1);
  EXPECT_EQ(d.shape(), (Shape{2, 6}));
  EXPECT_EQ(d.to_doubles(), (std::vector<double>{ad[0], ad[1], ad[2], ad[2], ad[1], ad[0], ad[3],
                                                 ad[4], ad[5], ad[5], ad[4], ad[3]}));
  Array s = stack({a, a}, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{ad[0], ad[1], ad[2], ad[0], ad[1], ad[2], ad[3],
                                                 ad[4], ad[5], ad[3], ad[4], ad[5]}));
  EXPECT_THROW(concatenate({a, Array::from_doubles({1, 2}, {1, 2}, Dtype::float32)}, 0),
               std::invalid_argument);
  EXPECT_EQ(concatenate({Array::from_doubles({}, {0, 3}, Dtype::float32), a}, 0).shape(),
            (Shape{2, 3}));
  // Its gradient slices the cotangent back.
  Array cat = concatenate({a, a * 2.0f}, 1);
  auto p = node_of(cat)->pending;
  auto g = p->primitive->vjp(p->inputs, {ones({2, 6})}, {0, 1}, {cat});
  EXPECT_EQ(g[1].shape(), (Shape{2, 3}));
  auto bytes = p->primitive->state().to_bytes();
  EXPECT_TRUE(make_primitive("Concatenate", PrimitiveState::from_bytes(bytes.data(), bytes.size()))
                  ->is_equivalent(*p->primitive));
}

TEST(OpsGpu, MatchTheCpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU";
  auto v = randoms(64 * 300, -2, 2, 80);
  for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::int32}) {
    Array c = Array::from_doubles(v, {64, 300}, t, Device::cpu());
    Array g = c.to(Device::gpu());
    Array row = Array::from_doubles(randoms(300, 1, 2, 81), {300}, t, Device::cpu());
    std::vector<std::function<Array(const Array&, const Array&)>> fs = {
        [](auto& x, auto& r) { return exp(x); },
        [](auto& x, auto& r) { return x.transpose() * 2 + 1; },
        [](auto& x, auto& r) { return maximum(x, r) - r; },
        [](auto& x, auto& r) { return where(x > 0, x, r); },
        [](auto& x, auto& r) { return floor_divide(x, r); },
        [](auto& x, auto& r) { return sum(x, 1); },
        [](auto& x, auto& r) { return sum(x, 0); },
        [](auto& x, auto& r) { return max(x); },
        [](auto& x, auto& r) {
          return sum(concatenate({x, x, x, x}, 1));
        },
        [](auto& x, auto& r) { return argmax(x, 1); },
        [](auto& x, auto& r) { return softmax(astype(x, Dtype::float32), 1); },
    };
    for (size_t i = 0; i < fs.size(); ++i) {
      Array want = fs[i](c, row);
      Array got = fs[i](g, row.to(Device::gpu()));
      EXPECT_EQ(got.device(), Device::gpu());
      EXPECT_EQ(got.dtype(), want.dtype());
      double rt = t == Dtype::float16 ? 4e-3 : 1e-5;
      expect_close(got.to_doubles(), want.to_doubles(), rt,
                   fmt::format("case {} {}", i, dtype_name(t)));
    }
  }
  // A host scalar next to a GPU array travels with the launch.
  Array g = Array::from_doubles({1, 2, 3}, {3}, Dtype::float32, Device::gpu());
  EXPECT_EQ((g * 2.0f).to_doubles(), (std::vector<double>{2, 4, 6}));
}
