// compile() (src/transforms/compile*, fuse*): retrace counts, shapeless replay over new sizes
// (custom kernels with geometry given as ShapeExprs), fused elementwise chains against eager
// evaluation and float64 references over dtypes and broadcasting, constant folding, common
// subexpressions and dead code visible in the compiled graph, and errors inside the function.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "core/primitive.h"
#include "kernel/custom_kernel.h"
#include "ops/kernels.h"
#include "random_values.h"
#include "transforms/fuse.h"

namespace alloy {
namespace {

using E = ShapeExpr;
using Arrays = std::vector<Array>;

Array random_array(const Shape& shape, Dtype dtype, uint64_t seed, double bound = 2) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return Array::from_doubles(testing::random_values(static_cast<size_t>(n), seed, bound, 64), shape,
                             dtype);
}

// Tolerance of a value computed in `dtype` through a few ops.
double tolerance(Dtype dtype) {
  switch (dtype) {
    case Dtype::float16:
      return 1e-2;
    case Dtype::bfloat16:
      return 5e-2;
    case Dtype::float64:
      return 1e-12;
    default:
      return 1e-5;
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
}

class CompileTest : public ::testing::Test {
 protected:
  void SetUp() override { ops::set_poison_outputs(true); }
  void TearDown() override { ops::set_poison_outputs(false); }
};

// The 5-op chain of the benchmark: sigmoid(exp(x * y - 0.5) * 0.25) + x.
Arrays chain(const Arrays& in) {
  Array x = in.at(0), y = in.at(1);
  Array t = subtract(multiply(x, y), Array(0.5f));
  return {add(sigmoid(multiply(exp(t), Array(0.25f))), x)};
}

double chain_ref(double x, double y) {
  return 1 / (1 + std::exp(-std::exp(x * y - 0.5) * 0.25)) + x;
}

TEST_F(CompileTest, NoRetraceOnCacheHit) {
  auto f = compile(chain);
  Array x = random_array({8, 16}, float32, 1), y = random_array({8, 16}, float32, 2);
  Array a = f({x, y})[0];
  EXPECT_EQ(f.trace_count(), 1);
  Array b = f({y, x})[0];  // same signature, other values
  EXPECT_EQ(f.trace_count(), 1);
  auto xs = x.to_doubles(), ys = y.to_doubles(), av = a.to_doubles(), bv = b.to_doubles();
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_NEAR(av[i], chain_ref(xs[i], ys[i]), 1e-5);
    ASSERT_NEAR(bv[i], chain_ref(ys[i], xs[i]), 1e-5);
  }
  f({random_array({4, 16}, float32, 3), random_array({4, 16}, float32, 4)});  // new shape
  EXPECT_EQ(f.trace_count(), 2);
  f({x.astype(float16), y.astype(float16)});  // new dtype
  EXPECT_EQ(f.trace_count(), 3);
  f({x, y});
  f({random_array({4, 16}, float32, 5), random_array({4, 16}, float32, 6)});
  EXPECT_EQ(f.trace_count(), 3);
  // Copies share the cache.
  CompiledFunction g = f;
  g({x, y});
  EXPECT_EQ(f.trace_count(), 3);
}

TEST_F(CompileTest, ShapelessReplaysOverFiveSizes) {
  auto f = compile(chain, /*shapeless=*/true);
  uint64_t seed = 10;
  for (int64_t n : {4, 37, 256, 1000, 4096}) {
    Array x = random_array({n}, float32, seed++), y = random_array({n}, float32, seed++);
    auto out = f({x, y})[0];
    ASSERT_EQ(out.shape(), (Shape{n}));
    auto xs = x.to_doubles(), ys = y.to_doubles(), got = out.to_doubles();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], chain_ref(xs[i], ys[i]), 1e-5) << "n=" << n << " i=" << i;
  }
  EXPECT_EQ(f.trace_count(), 1);
  f({random_array({3, 3}, float32, 1), random_array({3, 3}, float32, 2)});  // another rank
  EXPECT_EQ(f.trace_count(), 2);
}

TEST_F(CompileTest, ShapelessBroadcastingFollowsBothShapes) {
  // x (n, m) * row (m,) + 1: the row's broadcast is done by the fused kernel, so new shapes of
  // both inputs replay correctly.
  auto f = compile(
      [](const Arrays& in) { return Arrays{add(multiply(in[0], in[1]), Array(1.0f))}; }, true);
  uint64_t seed = 40;
  for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {5, 3}, {7, 16}, {1, 9}}) {
    Array x = random_array({n, m}, float32, seed++), row = random_array({m}, float32, seed++);
    auto got = f({x, row})[0];
    ASSERT_EQ(got.shape(), (Shape{n, m}));
    auto xs = x.to_doubles(), rs = row.to_doubles(), g = got.to_doubles();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j)
        ASSERT_NEAR(g[i * m + j], xs[i * m + j] * rs[j] + 1, 1e-6) << n << "x" << m;
  }
  EXPECT_EQ(f.trace_count(), 1);
  EXPECT_EQ(f.graph({random_array({2, 3}, float32, 1), random_array({3}, float32, 2)}),
            (std::vector<std::string>{"Fused(multiply,add)"}));
}

// A training step: w - 0.1 * d/dw sum(exp(x * w) * 0.5 + sin(x)). The gradient of the sum
// broadcasts the cotangent to the traced shape (a Broadcast holding it), so a shapeless compile
// must trace again for new sizes: before, a call with n = 1 after n = 8 returned 8 values and
// n = 3 raised "shapes (3) and (8) cannot be broadcast".
TEST_F(CompileTest, ShapelessGradientStepFollowsNewSizes) {
  auto loss = [](const Arrays& in) {
    return sum(add(multiply(exp(multiply(in[0], in[1])), Array(0.5f)), sin(in[0])));
  };
  auto step = [&](const Arrays& in) {
    return Arrays{subtract(in[1], multiply(Array(0.1f), grad(loss, 1)(in)[0]))};
  };
  auto f = compile(step, /*shapeless=*/true);
  uint64_t seed = 70;
  int traces = 0;
  for (int64_t n : {8, 1, 3, 100, 8}) {
    Array x = random_array({n}, float32, seed++), w = random_array({n}, float32, seed++);
    Array got = f({x, w})[0];
    ASSERT_EQ(got.shape(), (Shape{n})) << "n=" << n;
    auto xs = x.to_doubles(), ws = w.to_doubles(), g = got.to_doubles();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(g[i], ws[i] - 0.1 * xs[i] * std::exp(xs[i] * ws[i]) * 0.5, 1e-5)
          << "n=" << n << " i=" << i;
    if (n != 8 || traces == 0) ++traces;  // the second n = 8 replays the first trace
    EXPECT_EQ(f.trace_count(), traces) << "n=" << n;
  }
}

// An explicit broadcast_to keeps its shape whatever the other operand's shape: the fused chain
// reads only the elementwise ops' own broadcasts through (before, x of shape (1,) gave (1,)).
TEST_F(CompileTest, ShapelessExplicitBroadcastKeepsItsShape) {
  auto fn = [](const Arrays& in) {
    return Arrays{multiply(broadcast_to(sum(in[0]), Shape{8}), in[0])};
  };
  auto f = compile(fn, /*shapeless=*/true);
  for (int64_t n : {8, 1}) {
    Array x = random_array({n}, float32, 90 + n);
    Array got = f({x})[0], want = fn({x})[0];
    ASSERT_EQ(got.shape(), want.shape()) << "n=" << n;
    expect_close(got.to_doubles(), want.to_doubles(), 1e-6, "n=" + std::to_string(n));
  }
  EXPECT_EQ(f.trace_count(), 2);
}

// A reshape to a shape made from the input's shape: traced again for each new shape (the
// Reshape holds the traced target), results as calling the function.
TEST_F(CompileTest, ShapelessReshapeTracesAgainForNewShapes) {
  auto fn = [](const Arrays& in) {
    const Shape& s = in[0].shape();
    return Arrays{sum(reshape(in[0], {s[0] * s[1]}))};  // C++ reads the shape itself
  };
  auto f = compile(fn, /*shapeless=*/true);
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {4, 5}, {2, 3}}) {
    Array x = random_array({r, c}, float32, 95 + r);
    expect_close(f({x})[0].to_doubles(), fn({x})[0].to_doubles(), 1e-5, "reshape");
  }
  EXPECT_EQ(f.trace_count(), 2);
}

TEST_F(CompileTest, ChainIsOneFusedKernel) {
  auto f = compile(chain);
  Arrays in{random_array({64}, float32, 1), random_array({64}, float32, 2)};
  auto g = f.graph(in);
  ASSERT_EQ(g.size(), 1u) << fmt::format("{}", fmt::join(g, " "));
  EXPECT_EQ(g[0], "Fused(multiply,subtract,exp,multiply,sigmoid,add)");
}

// Fusion against eager evaluation and a float64 reference, per dtype, with a broadcast row and
// scalars: out = maximum(exp(x) * row - 1.5, x) / (abs(row) + 1). abs(row) + 1 is computed on
// the row (one fused kernel), the rest is a second fused kernel reading the row broadcast.
TEST_F(CompileTest, FusionMatchesEagerOverDtypesAndBroadcasting) {
  StreamContext on_cpu(Device::cpu());  // float64 among the dtypes: a CPU test on every machine
  for (Dtype dt : {float32, float16, bfloat16, float64}) {
    SCOPED_TRACE(dtype_name(dt));
    Array c15 = Array::from_doubles({1.5}, {}, dt), one = Array::from_doubles({1}, {}, dt);
    auto fn = [&](const Arrays& in) {
      Array x = in[0], row = in[1];
      Array t = subtract(multiply(exp(x), row), c15);
      return Arrays{divide(maximum(t, x), add(abs(row), one))};
    };
    Array x = random_array({6, 33}, dt, 7), row = random_array({33}, dt, 8);
    auto f = compile(fn);
    auto compiled = f({x, row})[0];
    auto eager = fn({x, row})[0];
    ASSERT_EQ(compiled.dtype(), dt);
    ASSERT_EQ(compiled.shape(), (Shape{6, 33}));
    // The row's Broadcast views are read through by the fused kernel (no view ops left).
    std::vector<std::string> want{"Fused(abs,add)", "Fused(exp,multiply,subtract,maximum,divide)"};
    auto g = f.graph({x, row});
    std::sort(g.begin(), g.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(g, want) << fmt::format("{}", fmt::join(g, " "));
    auto xs = x.to_doubles(), rs = row.to_doubles();
    std::vector<double> ref;
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 33; ++j) {
        double a = xs[i * 33 + j], r = rs[j];
        ref.push_back(std::max(std::exp(a) * r - 1.5, a) / (std::abs(r) + 1));
      }
    expect_close(compiled.to_doubles(), ref, tolerance(dt), "compiled vs float64");
    expect_close(compiled.to_doubles(), eager.to_doubles(), tolerance(dt), "compiled vs eager");
  }
}

TEST_F(CompileTest, IntegerAndComparisonChains) {
  auto fn = [](const Arrays& in) {
    Array s = add(multiply(in[0], in[1]), Array(3));
    return Arrays{where(greater(s, Array(0)), s, negative(in[1]))};
  };
  Array a = Array::from_vector<int32_t>({-4, 7, 2, -9, 5, 0, 11, -3}, {8}, int32);
  Array b = Array::from_vector<int32_t>({3, -2, 5, 1, -6, 8, 2, 4}, {8}, int32);
  auto f = compile(fn);
  auto got = f({a, b})[0].to_vector<int32_t>();
  auto av = a.to_vector<int32_t>(), bv = b.to_vector<int32_t>();
  for (size_t i = 0; i < 8; ++i) {
    int32_t s = av[i] * bv[i] + 3;
    EXPECT_EQ(got[i], s > 0 ? s : -bv[i]) << i;
  }
  EXPECT_EQ(f.graph({a, b}).size(), 1u);
}

TEST_F(CompileTest, ConstantsFoldAndDeadCodeIsRemoved) {
  Array c1 = random_array({16}, float32, 3), c2 = random_array({16}, float32, 4);
  auto fn = [&](const Arrays& in) {
    Array unused = sin(in[0]);                  // dead
    Array k = exp(add(c1, c2));                 // constant: folded at compile time
    Array twice = add(cos(in[0]), cos(in[0]));  // one cos after common subexpressions
    (void)unused;
    return Arrays{multiply(in[0], k), twice};
  };
  auto f = compile(fn);
  Array x = random_array({16}, float32, 5);
  auto g = f.graph({x});
  ASSERT_EQ(g.size(), 2u) << fmt::format("{}", fmt::join(g, " "));
  EXPECT_EQ(g[0], "Multiply");
  EXPECT_EQ(g[1], "Fused(cos,add)");
  EXPECT_EQ(f.constant_count({x}), 1);  // exp(c1 + c2), c1 and c2 dropped
  auto out = f({x});
  auto xs = x.to_doubles(), a = c1.to_doubles(), b = c2.to_doubles();
  auto y0 = out[0].to_doubles(), y1 = out[1].to_doubles();
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(y0[i], xs[i] * std::exp(a[i] + b[i]), 1e-4 * (1 + std::abs(y0[i])));
    EXPECT_NEAR(y1[i], 2 * std::cos(xs[i]), 1e-5);
  }
}

TEST_F(CompileTest, IntermediateOutputsStayUnfused) {
  // exp(x) is returned and used by the chain: it cannot disappear into a fused kernel.
  auto fn = [](const Arrays& in) {
    Array e = exp(in[0]);
    return Arrays{e, sqrt(add(e, Array(1.0f)))};
  };
  auto f = compile(fn);
  Array x = random_array({32}, float32, 9);
  auto g = f.graph({x});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0], "Exp");
  EXPECT_EQ(g[1], "Fused(add,sqrt)");
  auto out = f({x});
  auto xs = x.to_doubles(), e = out[0].to_doubles(), s = out[1].to_doubles();
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(e[i], std::exp(xs[i]), 1e-5 * std::exp(xs[i]));
    EXPECT_NEAR(s[i], std::sqrt(std::exp(xs[i]) + 1), 1e-5);
  }
}

TEST_F(CompileTest, ErrorsInsideTheFunctionPropagate) {
  int calls = 0;
  auto f = compile([&](const Arrays& in) -> Arrays {
    if (++calls == 1) throw std::runtime_error("boom from the user's function");
    return {exp(in[0])};
  });
  Array x = random_array({4}, float32, 1);
  EXPECT_THROW(
      {
        try {
          f({x});
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "boom from the user's function");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(f.trace_count(), 0);  // nothing cached for the failed trace
  auto y = f({x})[0].to_doubles();
  EXPECT_NEAR(y[0], std::exp(x.to_doubles()[0]), 1e-5);
  EXPECT_EQ(f.trace_count(), 1);

  auto reads = compile([](const Arrays& in) {
    return Arrays{multiply(in[0], Array(static_cast<float>(in[0].to_doubles()[0])))};
  });
  EXPECT_THROW(reads({x}), NotSupported);
}

// ---- custom kernels under shapeless compile --------------------------------------------------

MetalKernel exp_kernel() {
  return metal_kernel("myexp", {"inp"}, {"out"}, R"(
    uint elem = thread_position_in_grid.x;
    out[elem] = metal::exp(inp[elem]);)");
}

TEST_F(CompileTest, ShapelessKernelWithShapeExprGeometryFollowsSizes) {
  MetalKernel k = exp_kernel();
  auto f = compile(
      [&](const Arrays& in) {
        KernelCall call;
        call.output_dtypes = {float32};
        call.grid_expr = DimsExpr{E::size(0), 1, 1};
        call.threadgroup_expr = DimsExpr{E::min(E::size(0), 256), 1, 1};
        call.output_shape_exprs = {{E::dim(0, 0)}};
        return k(in, call);
      },
      true);
  uint64_t seed = 20;
  for (int64_t n : {4, 40, 300, 1025, 4096}) {
    Array x = random_array({n}, float32, seed++);
    auto got = f({x})[0].to_doubles();
    auto xs = x.to_doubles();
    ASSERT_EQ(got.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], std::exp(xs[i]), 1e-5 * std::exp(xs[i]));
  }
  EXPECT_EQ(f.trace_count(), 1);
}

TEST_F(CompileTest, ShapelessTwoDimensionalKernel) {
  // out[r, c] = inp[r, c] * (r + 1) - c over a (cols, rows) grid; output (rows, cols).
  MetalKernel k = metal_kernel("rows_cols", {"inp"}, {"out"}, R"(
    uint c = thread_position_in_grid.x, r = thread_position_in_grid.y;
    uint cols = threads_per_grid.x;
    out[r * cols + c] = inp[r * cols + c] * float(r + 1) - float(c);)");
  auto f = compile(
      [&](const Arrays& in) {
        KernelCall call;
        call.output_dtypes = {float32};
        call.grid_expr = DimsExpr{E::dim(0, 1), E::dim(0, 0), 1};
        call.threadgroup_expr = DimsExpr{E::min(E::dim(0, 1), 32), E::min(E::dim(0, 0), 8), 1};
        call.output_shape_exprs = {{E::dim(0, 0), E::dim(0, 1)}};
        return k(in, call);
      },
      true);
  uint64_t seed = 30;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {5, 40}, {33, 7}}) {
    Array x = random_array({rows, cols}, float32, seed++);
    auto got = f({x})[0].to_doubles();
    auto xs = x.to_doubles();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_NEAR(got[r * cols + c], xs[r * cols + c] * (r + 1) - c, 1e-5)
            << rows << "x" << cols << " at " << r << "," << c;
  }
  EXPECT_EQ(f.trace_count(), 1);
}

TEST_F(CompileTest, ConstantGridUnderShapelessNamesTheKernel) {
  MetalKernel k = exp_kernel();
  auto f = compile(
      [&](const Arrays& in) {
        return k(in, {in[0].shape()}, {float32}, {static_cast<int>(in[0].size()), 1, 1},
                 {32, 1, 1});
      },
      true);
  Array small = random_array({8}, float32, 1);
  EXPECT_NEAR(f({small})[0].to_doubles()[3], std::exp(small.to_doubles()[3]), 1e-5);
  try {
    f({random_array({64}, float32, 2)});
    FAIL() << "a constant grid replayed on a new shape";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("myexp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("constant grid"), std::string::npos) << e.what();
  }
}

TEST(FusedElementwise, KernelCompilesWithNvrtcForSm90) {
  // float16 contiguous, float32 strided (a transpose), a 0-d bfloat16 scalar: the CUDA
  // translation the GPU would build for exp(a) * b + s, then sigmoid.
  Array a = random_array({4, 8}, float16, 1);
  Array b = random_array({8, 4}, float32, 2).transpose();
  Array s = Array::from_doubles({0.5}, {}, bfloat16);
  std::vector<transforms::FusedNode> nodes{
      {"exp", {0}}, {"multiply", {-1, 1}}, {"add", {-2, 2}}, {"sigmoid", {-3}}};
  transforms::FusedElementwise p(nodes);
  Dtype out = p.output_dtype({float16, float32, bfloat16});
  EXPECT_EQ(out, float32);
  auto k = transforms::fused_kernel(nodes, {a, b, s}, {4, 8});
  std::string why = kernel::compile_call_cubin(MetalKernel(k.spec), {a, b, s},
                                               ops::kernel_call({4, 8}, out, 32, true), "sm_90");
  if (!why.empty()) GTEST_SKIP() << why;
}

TEST(FusedElementwise, StateRoundTrips) {
  transforms::FusedElementwise p({{"exp", {0}}, {"add", {-1, 1}}});
  auto q = make_primitive("FusedElementwise", p.state());
  EXPECT_TRUE(p.is_equivalent(*q));
  EXPECT_EQ(q->label(), "Fused(exp,add)");
  EXPECT_THROW(transforms::FusedElementwise(std::vector<transforms::FusedNode>{{"add", {0}}}),
               std::invalid_argument);
  EXPECT_THROW(transforms::FusedElementwise(std::vector<transforms::FusedNode>{{"exp", {-1}}}),
               std::invalid_argument);
  EXPECT_THROW(
      transforms::FusedElementwise(std::vector<transforms::FusedNode>{{"no_such_op", {0}}}),
      std::invalid_argument);
}

}  // namespace
}  // namespace alloy
