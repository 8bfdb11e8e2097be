// Gradient transforms (include/alloy/transforms.h): vjp, jvp, grad, value_and_grad,
// custom_function, stop_gradient, against float64 central differences computed on the CPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "alloy/alloy.h"
#include "alloy/cuda.h"
#include "example_kernels.h"
#include "random_values.h"
#include "transforms/trace.h"

using namespace alloy;

namespace {

const Device kCpu = Device::cpu();
using Fn = std::function<Array(const std::vector<Array>&)>;

// Random inputs in [lo, hi) (never zeros), float64 on the CPU.
Array rand_in(const Shape& shape, uint64_t seed, double lo = -1.5, double hi = 1.5,
              Dtype t = Dtype::float64) {
  return random_uniform(shape, t, lo, hi, seed, kCpu);
}

// A fixed random weight turns an array-valued function into a scalar with a non-trivial
// cotangent: sum(w * f(x)).
Array weighted_sum(const Array& y, uint64_t seed) {
  Array w = random_uniform(y.shape(), y.dtype(), 0.5, 1.5, seed, y.device());
  return sum(multiply(y, w));
}

// d f / d inputs[k] by central differences in float64.
std::vector<double> numeric_grad(const Fn& f, std::vector<Array> inputs, int k, double h = 1e-6) {
  std::vector<double> x = inputs[k].astype(Dtype::float64).to_doubles();
  Shape s = inputs[k].shape();
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    auto at = [&](double d) {
      std::vector<double> xp = x;
      xp[i] += d;
      inputs[k] = Array::from_doubles(xp, s, Dtype::float64, kCpu);
      return f(inputs).item();
    };
    g[i] = (at(h) - at(-h)) / (2 * h);
  }
  return g;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " at " << i;
}

// grad(f) with respect to every input against central differences (float64 inputs).
void check_grad(const Fn& f, const std::vector<Array>& inputs, const std::string& what,
                double rtol = 1e-6, double atol = 1e-7) {
  std::vector<int> argnums;
  for (size_t i = 0; i < inputs.size(); ++i) argnums.push_back(static_cast<int>(i));
  std::vector<Array> g = grad(f, argnums)(inputs);
  ASSERT_EQ(g.size(), inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    EXPECT_EQ(g[k].shape(), inputs[k].shape()) << what;
    EXPECT_EQ(g[k].dtype(), inputs[k].dtype()) << what;
    expect_close(g[k].to_doubles(), numeric_grad(f, inputs, static_cast<int>(k)), rtol, atol,
                 fmt::format("{} (input {})", what, k));
  }
}

// ---- op families -------------------------------------------------------------------------------

struct UnaryCase {
  const char* name;
  Array (*op)(const Array&, StreamOrDevice);
  double lo, hi;
};

TEST(Grad, UnaryOps) {
  const UnaryCase cases[] = {
      {"abs", abs, 0.2, 1.5},        {"negative", negative, -1.5, 1.5},
      {"square", square, -1.5, 1.5}, {"exp", exp, -1.5, 1.5},
      {"expm1", expm1, -1.5, 1.5},   {"log", log, 0.2, 3},
      {"log2", log2, 0.2, 3},        {"log10", log10, 0.2, 3},
      {"log1p", log1p, -0.5, 2},     {"sqrt", sqrt, 0.2, 3},
      {"rsqrt", rsqrt, 0.2, 3},      {"sin", sin, -3, 3},
      {"cos", cos, -3, 3},           {"tan", tan, -1.2, 1.2},
      {"tanh", tanh, -2, 2},         {"arcsin", arcsin, -0.9, 0.9},
      {"arccos", arccos, -0.9, 0.9}, {"arctan", arctan, -2, 2},
      {"sinh", sinh, -2, 2},         {"cosh", cosh, -2, 2},
      {"sigmoid", sigmoid, -3, 3},   {"erf", erf, -2, 2},
      {"erfc", erfc, -2, 2},         {"erfinv", erfinv, -0.9, 0.9},
  };
  uint64_t seed = 1;
  for (auto& c : cases) {
    Fn f = [&](const std::vector<Array>& in) { return weighted_sum(c.op(in[0], {}), 100); };
    check_grad(f, {rand_in({2, 3}, seed++, c.lo, c.hi)}, c.name, 1e-5, 1e-6);
  }
  // Piecewise constant ops have zero gradients.
  for (auto op : {floor, ceil, round, sign}) {
    Array x = rand_in({5}, seed++, 0.1, 0.9);
    auto g = grad([&](const Array& a) { return sum(op(a, {})); })(x);
    for (double v : g.to_doubles()) EXPECT_EQ(v, 0.0);
  }
}

struct BinaryCase {
  const char* name;
  Array (*op)(const Array&, const Array&, StreamOrDevice);
  double lo, hi;
};

TEST(Grad, BinaryOpsWithBroadcasting) {
  const BinaryCase cases[] = {
      {"add", add, -2, 2},
      {"subtract", subtract, -2, 2},
      {"multiply", multiply, -2, 2},
      {"divide", divide, 0.5, 2},
      {"power", power, 0.5, 2},
      {"maximum", maximum, -2, 2},
      {"minimum", minimum, -2, 2},
      {"arctan2", arctan2, 0.3, 2},
      {"logaddexp", logaddexp, -2, 2},
      {"remainder", remainder, 0.6, 2.5},
  };
  uint64_t seed = 50;
  for (auto& c : cases) {
    Fn f = [&](const std::vector<Array>& in) { return weighted_sum(c.op(in[0], in[1], {}), 7); };
    // Same shapes, then broadcasting of both sides, then a 0-d operand.
    check_grad(f, {rand_in({2, 3}, seed, c.lo, c.hi), rand_in({2, 3}, seed + 1, c.lo, c.hi)},
               fmt::format("{} (2,3)x(2,3)", c.name), 1e-5, 1e-6);
    check_grad(f, {rand_in({3, 1}, seed + 2, c.lo, c.hi), rand_in({4}, seed + 3, c.lo, c.hi)},
               fmt::format("{} (3,1)x(4,)", c.name), 1e-5, 1e-6);
    check_grad(f, {rand_in({3}, seed + 4, c.lo, c.hi), rand_in({}, seed + 5, c.lo, c.hi)},
               fmt::format("{} (3,)x()", c.name), 1e-5, 1e-6);
    seed += 6;
  }
}

TEST(Grad, WhereClipAndComparisons) {
  Array c = greater(rand_in({3, 4}, 3), Array(0.0f));
  Fn f = [&](const std::vector<Array>& in) {
    return weighted_sum(where(c, multiply(in[0], in[1]), exp(in[1])), 9);
  };
  check_grad(f, {rand_in({3, 4}, 4), rand_in({4}, 5)}, "where");
  Fn g = [&](const std::vector<Array>& in) {
    return weighted_sum(clip(in[0], Array::from_doubles({-0.5}, {}, Dtype::float64, kCpu),
                             Array::from_doubles({0.7}, {}, Dtype::float64, kCpu)),
                        10);
  };
  check_grad(g, {rand_in({10}, 6)}, "clip");
}

TEST(Grad, Reductions) {
  Array x = rand_in({3, 4, 2}, 11, 0.3, 1.7);
  const std::vector<std::pair<const char*, Fn>> cases = {
      {"sum all", [](auto& in) { return sum(square(in[0])); }},
      {"sum axis", [](auto& in) { return weighted_sum(sum(in[0], 1), 3); }},
      {"sum keepdims",
       [](auto& in) {
         return weighted_sum(multiply(sum(in[0], {0, 2}, true), in[0]), 4);
       }},
      {"prod axis", [](auto& in) { return weighted_sum(prod(in[0], 2), 5); }},
      {"max axis", [](auto& in) { return weighted_sum(max(in[0], 1), 6); }},
      {"min all", [](auto& in) { return min(in[0]); }},
      {"mean",
       [](auto& in) {
         return weighted_sum(mean(in[0], {0, 1}), 7);
       }},
      {"var", [](auto& in) { return weighted_sum(var(in[0], 1, false, 1), 8); }},
      {"logsumexp", [](auto& in) { return weighted_sum(logsumexp(in[0], 2), 9); }},
      {"softmax", [](auto& in) { return weighted_sum(softmax(in[0], -1), 10); }},
  };
  for (auto& [name, f] : cases) check_grad(f, {x}, name, 1e-5, 1e-7);
  // Ties (a maximum over a broadcast axis) share the cotangent: the difference quotient moves
  // every copy at once.
  check_grad(
      [](auto& in) {
        return weighted_sum(max(broadcast_to(reshape(in[0], {3, 1, 8}), {3, 4, 8}), 1), 11);
      },
      {x}, "max over a broadcast axis", 1e-5, 1e-7);
  Array t = rand_in({3, 4, 2}, 12);
  auto [o, j] = jvp(
      [](const Array& a) {
        return min(broadcast_to(reshape(a, {1, 24}), {5, 24}), 0);
      },
      x, t);
  expect_close(j.to_doubles(), t.to_doubles(), 1e-15, 0, "jvp of min over a broadcast axis");
}

TEST(Grad, ViewsSlicingAndBroadcast) {
  Array x = rand_in({4, 6}, 21);
  const std::vector<std::pair<const char*, Fn>> cases = {
      {"slice",
       [](auto& in) {
         return weighted_sum(slice(in[0], {1, 0}, {3, 5}), 1);
       }},
      {"strided slice",
       [](auto& in) {
         return weighted_sum(in[0].slice({{1, std::nullopt, 2}, {0, 6, 3}}), 2);
       }},
      {"negative step slice",
       [](auto& in) {
         return weighted_sum(in[0].slice({{std::nullopt, std::nullopt, -1}, {4, 0, -2}}), 3);
       }},
      {"overlapping slices",
       [](auto& in) {
         return add(weighted_sum(slice(in[0], {0, 0}, {3, 4}), 4),
                    weighted_sum(slice(in[0], {1, 2}, {4, 6}), 5));
       }},
      {"transpose",
       [](auto& in) { return weighted_sum(multiply(transpose(in[0]), Array(2.0f)), 6); }},
      {"reshape",
       [](auto& in) {
         return weighted_sum(exp(reshape(in[0], {3, 8})), 7);
       }},
      {"reshape of transpose",
       [](auto& in) { return weighted_sum(reshape(transpose(in[0]), {24}), 8); }},
      {"broadcast_to",
       [](auto& in) {
         return weighted_sum(broadcast_to(reshape(in[0], {4, 1, 6}), {2, 4, 3, 6}), 9);
       }},
      {"expand/squeeze", [](auto& in) { return weighted_sum(squeeze(expand_dims(in[0], 1)), 10); }},
      {"concatenate",
       [](auto& in) {
         return weighted_sum(concatenate({in[0], sin(in[0]), slice(in[0], {0, 0}, {4, 2})}, 1), 11);
       }},
      {"stack",
       [](auto& in) {
         return weighted_sum(stack({in[0], cos(in[0])}, 2), 12);
       }},
      {"contiguous copy", [](auto& in) { return weighted_sum(transpose(in[0]).contiguous(), 13); }},
  };
  for (auto& [name, f] : cases) check_grad(f, {x}, name);
}

TEST(Grad, Compositions) {
  // A small MLP-like loss: tanh(x * w1 + b) summed against a target, with broadcasting.
  Fn mlp = [](const std::vector<Array>& in) {
    Array h = tanh(add(multiply(reshape(in[0], {4, 1}), in[1]), in[2]));
    Array y = sum(h, 0);
    return mean(square(subtract(y, Array(0.25f))));
  };
  check_grad(mlp, {rand_in({4}, 31), rand_in({1, 5}, 32), rand_in({5}, 33)}, "mlp");
  // A numerically-stable softmax cross-entropy written with ops.
  Fn xent = [](const std::vector<Array>& in) {
    Array logits = in[0];
    Array lse = logsumexp(logits, 1, true);
    Array logp = subtract(logits, lse);
    return negative(sum(multiply(logp, softmax(in[1], 1))));
  };
  check_grad(xent, {rand_in({3, 5}, 34), rand_in({3, 5}, 35)}, "cross entropy");
  // The same input used many times; pow/sqrt chains.
  Fn chain = [](const std::vector<Array>& in) {
    Array x = in[0];
    Array y = add(multiply(x, sin(x)), divide(sqrt(add(square(x), Array(1.0f))), exp(x)));
    return weighted_sum(power(add(abs(y), Array(0.5f)), Array(1.5f)), 36);
  };
  check_grad(chain, {rand_in({7}, 37)}, "chain");
}

TEST(Grad, DtypesAndTolerances) {
  // Gradients come back in the argument's dtype; half precision within its rounding.
  const std::pair<Dtype, double> dtypes[] = {
      {Dtype::float32, 2e-4}, {Dtype::float16, 2e-2}, {Dtype::bfloat16, 8e-2}};
  for (auto [t, tol] : dtypes) {
    Array x64 = rand_in({6}, 41, -1, 1);
    Array x = x64.astype(t);
    auto f = [](const std::vector<Array>& in) {
      return sum(multiply(tanh(in[0]), exp(multiply(in[0], Array(0.5f)))));
    };
    Array g = grad(f, 0)({x})[0];
    EXPECT_EQ(g.dtype(), t);
    // The reference at the rounded inputs, in float64.
    std::vector<double> ref = numeric_grad(f, {x.astype(Dtype::float64)}, 0);
    expect_close(g.to_doubles(), ref, tol, tol, std::string(dtype_name(t)));
  }
}

// ---- the transforms ----------------------------------------------------------------------------

TEST(Grad, ArgnumsAndValueAndGrad) {
  Array a = rand_in({3}, 51), b = rand_in({3}, 52), c = rand_in({3}, 53);
  auto f = [](const std::vector<Array>& in) {
    return std::vector<Array>{sum(multiply(multiply(in[0], in[1]), exp(in[2]))), add(in[0], in[1])};
  };
  auto [values, grads] = value_and_grad(f, std::vector<int>{2, 0})({a, b, c});
  ASSERT_EQ(values.size(), 2u);
  ASSERT_EQ(grads.size(), 2u);
  std::vector<double> av = a.to_doubles(), bv = b.to_doubles(), cv = c.to_doubles();
  double loss = 0;
  for (int i = 0; i < 3; ++i) loss += av[i] * bv[i] * std::exp(cv[i]);
  EXPECT_NEAR(values[0].item(), loss, 1e-12);
  std::vector<double> aux = values[1].to_doubles();
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(aux[i], av[i] + bv[i], 1e-15);
    EXPECT_NEAR(grads[0].to_doubles()[i], av[i] * bv[i] * std::exp(cv[i]), 1e-12);  // d/dc
    EXPECT_NEAR(grads[1].to_doubles()[i], bv[i] * std::exp(cv[i]), 1e-12);          // d/da
  }
  // Negative argnums count from the end.
  auto g = grad([](const std::vector<Array>& in) { return sum(multiply(in[0], in[1])); },
                std::vector<int>{-1})({a, b});
  expect_close(g[0].to_doubles(), av, 0, 1e-15, "argnum -1");
  // A single-array overload.
  auto [v1, g1] = value_and_grad([](const Array& x) { return sum(square(x)); })(a);
  EXPECT_NEAR(v1.item(), av[0] * av[0] + av[1] * av[1] + av[2] * av[2], 1e-12);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(g1.to_doubles()[i], 2 * av[i], 1e-15);
}

TEST(Grad, ArgumentsThatDoNotReachTheOutputGetZeros) {
  Array a = rand_in({2, 2}, 61), b = rand_in({3}, 62);
  auto g =
      grad([](const std::vector<Array>& in) { return sum(in[0]); }, std::vector<int>{0, 1})({a, b});
  for (double v : g[0].to_doubles()) EXPECT_EQ(v, 1.0);
  EXPECT_EQ(g[1].shape(), b.shape());
  for (double v : g[1].to_doubles()) EXPECT_EQ(v, 0.0);
  // The same array passed twice is two arguments.
  auto h = grad([](const std::vector<Array>& in) { return sum(multiply(in[0], in[1])); },
                std::vector<int>{0, 1})({b, b});
  expect_close(h[0].to_doubles(), b.to_doubles(), 0, 0, "x*y at x=y (d/dx)");
  expect_close(h[1].to_doubles(), b.to_doubles(), 0, 0, "x*y at x=y (d/dy)");
}

TEST(Grad, VjpWithSeveralOutputsAndJvpConsistency) {
  Array x = rand_in({2, 3}, 71), y = rand_in({3}, 72);
  auto f = [](const std::vector<Array>& in) {
    return std::vector<Array>{multiply(sin(in[0]), in[1]), sum(exp(in[1])),
                              transpose(slice(in[0], {0, 1}, {2, 3}))};
  };
  Array c0 = rand_in({2, 3}, 73), c1 = rand_in({}, 74), c2 = rand_in({2, 2}, 75);
  auto [outs, vjps] = vjp(f, {x, y}, {c0, c1, c2});
  ASSERT_EQ(outs.size(), 3u);
  ASSERT_EQ(vjps.size(), 2u);
  Array tx = rand_in({2, 3}, 76), ty = rand_in({3}, 77);
  auto [outs2, jvps] = jvp(f, {x, y}, {tx, ty});
  ASSERT_EQ(jvps.size(), 3u);
  // <c, J t> == <J^T c, t>
  double lhs = sum(multiply(c0, jvps[0])).item() + sum(multiply(c1, jvps[1])).item() +
               sum(multiply(c2, jvps[2])).item();
  double rhs = sum(multiply(vjps[0], tx)).item() + sum(multiply(vjps[1], ty)).item();
  EXPECT_NEAR(lhs, rhs, 1e-12 * (1 + std::abs(lhs)));
  // jvp against a central difference along the tangent.
  double h = 1e-6;
  auto along = [&](double s) {
    auto o = f({add(x, multiply(tx, Array::from_doubles({s}, {}, Dtype::float64, kCpu))),
                add(y, multiply(ty, Array::from_doubles({s}, {}, Dtype::float64, kCpu)))});
    return o;
  };
  auto p = along(h), m = along(-h);
  for (int k = 0; k < 3; ++k) {
    std::vector<double> fd;
    auto pv = p[k].to_doubles(), mv = m[k].to_doubles();
    for (size_t i = 0; i < pv.size(); ++i) fd.push_back((pv[i] - mv[i]) / (2 * h));
    expect_close(jvps[k].to_doubles(), fd, 1e-6, 1e-8, fmt::format("jvp output {}", k));
  }
}

TEST(Grad, JvpThroughEveryViewAndReduction) {
  Array x = rand_in({3, 4}, 81, 0.3, 1.5), t = rand_in({3, 4}, 82);
  auto f = [](const std::vector<Array>& in) {
    Array a = in[0].slice({{std::nullopt, std::nullopt, -1}, {1, 4, 2}});  // (3, 2)
    Array b = broadcast_to(reshape(transpose(a), {2, 1, 3}), {2, 2, 3});
    Array c = concatenate({b, b}, 1);
    return std::vector<Array>{c, prod(in[0], 1), max(in[0], 0),
                              in[0].astype(Dtype::float32).astype(Dtype::float64)};
  };
  auto [outs, jvps] = jvp(f, {x}, {t});
  double h = 1e-6;
  auto step = [&](double s) {
    return f({add(x, multiply(t, Array::from_doubles({s}, {}, Dtype::float64, kCpu)))});
  };
  auto p = step(h), m = step(-h);
  for (int k = 0; k < 3; ++k) {
    std::vector<double> fd;
    auto pv = p[k].to_doubles(), mv = m[k].to_doubles();
    for (size_t i = 0; i < pv.size(); ++i) fd.push_back((pv[i] - mv[i]) / (2 * h));
    expect_close(jvps[k].to_doubles(), fd, 1e-6, 1e-8, fmt::format("jvp output {}", k));
  }
  // Through a float32 round trip the tangent is the float32-rounded one.
  expect_close(jvps[3].to_doubles(), t.astype(Dtype::float32).to_doubles(), 0, 0, "astype");
}

TEST(Grad, StopGradient) {
  Array x = rand_in({4}, 91);
  auto g = grad([](const Array& a) { return sum(multiply(a, stop_gradient(a))); })(x);
  expect_close(g.to_doubles(), x.to_doubles(), 0, 0, "d/dx x*stop(x) = stop(x)");
  Array v = stop_gradient(x);
  expect_close(v.to_doubles(), x.to_doubles(), 0, 0, "stop_gradient is the identity");
}

TEST(Grad, GraphsAreLazyAndIntegersAreConstants) {
  Array x = rand_in({5}, 95);
  auto [v, g] = value_and_grad([](const Array& a) { return sum(exp(a)); })(x);
  EXPECT_FALSE(v.is_evaluated());
  EXPECT_FALSE(g.is_evaluated());
  expect_close(g.to_doubles(), exp(x).to_doubles(), 1e-15, 0, "lazy gradient");
  // An integer detour carries no gradient (as JAX; integer arrays are constants).
  auto gi = grad(
      [](const Array& a) { return sum(add(a, a.astype(Dtype::int32).astype(Dtype::float64))); })(x);
  for (double d : gi.to_doubles()) EXPECT_EQ(d, 1.0);
}

TEST(Grad, TracedAndReplayedLikeAnyGraph) {
  // A function taking a gradient traces over placeholders (nothing is evaluated inside the
  // transforms) and replays on new inputs; with a custom_function too. (Gradient graphs are
  // shape-specialized: the rules build zeros and ones of the traced shapes.)
  auto sq = custom_vjp(
      [](const std::vector<Array>& in) { return std::vector<Array>{square(in[0])}; },
      [](const std::vector<Array>& p, const std::vector<Array>& ct, const std::vector<Array>&) {
        return std::vector<Array>{multiply(ct[0], multiply(Array(2.0f), p[0]))};
      });
  auto fn = [&](const std::vector<Array>& in) {
    auto [v, g] = value_and_grad(
        [&](const std::vector<Array>& a) {
          return sum(add(multiply(sin(a[0]), a[1]), sq({a[0]})[0]));
        },
        std::vector<int>{0, 1})(in);
    return std::vector<Array>{v, g[0], g[1]};
  };
  Array x = rand_in({4}, 141), y = rand_in({4}, 142);
  transforms::Trace t = transforms::trace(fn, {x, y});
  for (uint64_t seed : {143, 145}) {
    const int64_t n = 4;
    Array a = rand_in({n}, seed), b = rand_in({n}, seed + 1);
    auto out = transforms::replay(t, {a, b});
    auto direct = fn({a, b});
    for (int k = 0; k < 3; ++k)
      expect_close(out[k].to_doubles(), direct[k].to_doubles(), 1e-15, 0,
                   fmt::format("replayed output {} (seed {})", k, seed));
    auto av = a.to_doubles(), bv = b.to_doubles();
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(out[1].to_doubles()[i], std::cos(av[i]) * bv[i] + 2 * av[i], 1e-12);
  }
}

TEST(Grad, AsStridedViews) {
  Array x = rand_in({6}, 151);
  // Overlapping windows: its adjoint would be a scatter-add.
  EXPECT_THROW(grad([](const Array& a) {
                 return sum(a.as_strided({3, 4}, {1, 1}));
               })(x),
               NotSupported);
  // Non-overlapping views (as integer indexing makes them), of contiguous and transposed
  // inputs, through the gather rules.
  Array m = rand_in({4, 5}, 155);
  check_grad(
      [](const std::vector<Array>& in) {
        return weighted_sum(exp(in[0].as_strided({2, 2}, {10, 2}, 1)), 156);
      },
      {m}, "as_strided of a contiguous input");
  check_grad(
      [](const std::vector<Array>& in) {
        Array t = transpose(in[0]);  // (5, 4), strides (1, 5)
        return weighted_sum(sin(t.as_strided({3, 2}, {1, 10}, 5)), 157);
      },
      {m}, "as_strided of a transposed input");
  Array tm = rand_in({4, 5}, 158);
  auto f = [](const std::vector<Array>& in) {
    return std::vector<Array>{transpose(in[0]).as_strided({3, 2}, {1, 10}, 5)};
  };
  auto [o, j] = jvp(f, {m}, {tm});
  EXPECT_EQ(o[0].shape(), (Shape{3, 2}));
  expect_close(j[0].to_doubles(), f({tm})[0].to_doubles(), 0, 0, "jvp of as_strided");
  // expand_dims of a transposed view (an as_strided view of unit dimensions) differentiates
  // both ways.
  Array m2 = rand_in({3, 2}, 152), t2 = rand_in({2, 3}, 153);
  auto f2 = [](const std::vector<Array>& in) {
    return std::vector<Array>{squeeze(expand_dims(transpose(in[0]), 1))};
  };
  auto [o2, j2] = jvp(f2, {m2}, {transpose(t2)});
  EXPECT_EQ(o2[0].shape(), (Shape{2, 3}));
  expect_close(j2[0].to_doubles(), t2.to_doubles(), 0, 0, "jvp of expand_dims/squeeze");
  check_grad([&](const std::vector<Array>& in) { return weighted_sum(f2(in)[0], 154); }, {m2},
             "expand_dims/squeeze of a transpose");
}

// ---- errors ------------------------------------------------------------------------------------

TEST(Grad, ClearErrors) {
  Array x = rand_in({3}, 101);
  // A non-scalar output.
  EXPECT_THROW(grad([](const Array& a) { return exp(a); })(x), std::invalid_argument);
  // Integer arguments.
  EXPECT_THROW(grad([](const Array& a) { return sum(a); })(arange(3, Dtype::int32, kCpu)),
               std::invalid_argument);
  // argnums out of range / duplicated.
  auto f = [](const std::vector<Array>& in) { return sum(in[0]); };
  EXPECT_THROW(grad(f, 3)({x}), std::invalid_argument);
  EXPECT_THROW(grad(f, std::vector<int>{0, 0})({x}), std::invalid_argument);
  // Mismatched cotangents.
  EXPECT_THROW(vjp([](const Array& a) { return exp(a); }, x, rand_in({4}, 102)),
               std::invalid_argument);
  EXPECT_THROW(jvp([](const Array& a) { return exp(a); }, x, rand_in({2}, 103)),
               std::invalid_argument);
  // Evaluating inside the function.
  try {
    grad([](const Array& a) {
      Array y = exp(a);
      y.eval();
      return sum(y);
    })(x);
    ADD_FAILURE() << "no error";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("evaluated"), std::string::npos) << e.what();
  }
}

TEST(Grad, KernelWithoutVjpNamesTheKernel) {
  auto k = metal_kernel("myexp", {"inp"}, {"out"}, alloy::examples::kExpSource);
  Array x = rand_in({8}, 111, -1, 1, Dtype::float32);
  auto call = [&](const Array& a) {
    return k({a}, {a.shape()}, {Dtype::float32}, {8, 1, 1}, {8, 1, 1}, {{"T", Dtype::float32}},
             std::nullopt, false, a.device())[0];
  };
  try {
    grad([&](const Array& a) { return sum(call(a)); })(x);
    ADD_FAILURE() << "no error";
  } catch (const NotSupported& e) {
    EXPECT_EQ(e.kernel(), "myexp");
    EXPECT_NE(std::string(e.what()).find("no vjp for myexp: wrap it in custom_function with a vjp"),
              std::string::npos)
        << e.what();
  }
  try {
    jvp(call, x, x);
    ADD_FAILURE() << "no error";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("no jvp for myexp: wrap it in custom_function with a jvp"),
              std::string::npos)
        << e.what();
  }
  // Not differentiated (stop_gradient, or not depending on the argument): no error.
  auto g = grad([&](const Array& a) { return sum(multiply(a, stop_gradient(call(a)))); })(x);
  expect_close(g.to_doubles(), exp(x).to_doubles(), 1e-6, 0, "stop_gradient(kernel)");
  // With a vjp, through custom_function.
  auto f = custom_function(
      [&](const std::vector<Array>& in) { return std::vector<Array>{call(in[0])}; },
      [](const std::vector<Array>&, const std::vector<Array>& ct, const std::vector<Array>& out) {
        return std::vector<Array>{multiply(ct[0], out[0])};
      });
  Array gx = grad([&](const Array& a) { return sum(multiply(f({a})[0], a)); })(x);
  std::vector<double> xv = x.to_doubles(), want;
  for (double v : xv) want.push_back(std::exp(v) * (1 + v));
  expect_close(gx.to_doubles(), want, 1e-5, 1e-6, "custom vjp of a kernel");
}

TEST(Grad, CustomFunction) {
  Array x = rand_in({5}, 121), y = rand_in({5}, 122);
  int vjp_calls = 0, jvp_calls = 0;
  auto fwd = [](const std::vector<Array>& in) {
    return std::vector<Array>{multiply(sin(in[0]), in[1])};
  };
  // A deliberately different vjp (scaled by 2) shows which one ran.
  auto f = custom_function(
      fwd,
      [&](const std::vector<Array>& p, const std::vector<Array>& ct, const std::vector<Array>&) {
        ++vjp_calls;
        return std::vector<Array>{multiply(Array(2.0f), multiply(ct[0], multiply(cos(p[0]), p[1]))),
                                  multiply(Array(2.0f), multiply(ct[0], sin(p[0])))};
      },
      [&](const std::vector<Array>& p, const std::vector<Array>& t,
          const std::vector<int>& argnums) {
        ++jvp_calls;
        EXPECT_EQ(argnums, (std::vector<int>{0, 1}));
        return std::vector<Array>{
            add(multiply(t[0], multiply(cos(p[0]), p[1])), multiply(t[1], sin(p[0])))};
      });
  auto out = f({x, y})[0];
  expect_close(out.to_doubles(), fwd({x, y})[0].to_doubles(), 0, 0, "forward");
  auto g = grad([&](const std::vector<Array>& in) { return sum(f(in)[0]); },
                std::vector<int>{0, 1})({x, y});
  EXPECT_EQ(vjp_calls, 1);
  auto xv = x.to_doubles(), yv = y.to_doubles();
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(g[0].to_doubles()[i], 2 * std::cos(xv[i]) * yv[i], 1e-12);
    EXPECT_NEAR(g[1].to_doubles()[i], 2 * std::sin(xv[i]), 1e-12);
  }
  Array tx = rand_in({5}, 123), ty = rand_in({5}, 124);
  auto [o, t] = jvp(f, {x, y}, {tx, ty});
  EXPECT_EQ(jvp_calls, 1);
  auto txv = tx.to_doubles(), tyv = ty.to_doubles();
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(t[0].to_doubles()[i], txv[i] * std::cos(xv[i]) * yv[i] + tyv[i] * std::sin(xv[i]),
                1e-12);
  // Without custom rules the forward graph is differentiated.
  auto plain = custom_function(fwd);
  check_grad([&](const std::vector<Array>& in) { return sum(plain(in)[0]); }, {x, y},
             "custom_function without rules");
  auto [o2, t2] = jvp(plain, {x, y}, {tx, ty});
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(t2[0].to_doubles()[i], txv[i] * std::cos(xv[i]) * yv[i] + tyv[i] * std::sin(xv[i]),
                1e-12);
  // A vjp returning the wrong number of cotangents is reported.
  auto bad = custom_vjp(fwd, [](const std::vector<Array>&, const std::vector<Array>& ct,
                                const std::vector<Array>&) { return std::vector<Array>{ct[0]}; });
  EXPECT_THROW(grad([&](const std::vector<Array>& in) { return sum(bad(in)[0]); }, 0)({x, y}),
               std::invalid_argument);
}

// ---- grid_sample (MLX's custom-kernel documentation) -----------------------------------------

struct GridSample {
  MetalKernel fwd =
      metal_kernel("grid_sample", {"x", "grid"}, {"out"}, alloy::examples::kGridSampleSource);
  MetalKernel bwd =
      metal_kernel("grid_sample_grad", {"x", "grid", "cotangent"}, {"x_grad", "grid_grad"},
                   alloy::examples::kGridSampleGradSource, "", true, /*atomic_outputs=*/true);
  ArraysFn fn;

  GridSample() {
    fn = custom_function(
        [this](const std::vector<Array>& in) {
          const Array &x = in[0], &grid = in[1];
          Shape out{x.shape(0), grid.shape(1), grid.shape(2), x.shape(3)};
          int n = static_cast<int>(out[0] * out[1] * out[2] * out[3]);
          return fwd({x, grid}, {out}, {Dtype::float32}, {n, 1, 1}, {256, 1, 1},
                     {{"T", Dtype::float32}}, std::nullopt, false, x.device());
        },
        [this](const std::vector<Array>& p, const std::vector<Array>& ct,
               const std::vector<Array>&) {
          const Array &x = p[0], &grid = p[1];
          int n = static_cast<int>(ct[0].size());
          // One simdgroup per pixel's channels needs C % 32 == 0 (the kernel's comment).
          return bwd({x, grid, ct[0]}, {x.shape(), grid.shape()}, {Dtype::float32, Dtype::float32},
                     {n, 1, 1}, {256, 1, 1}, {}, /*init_value=*/0.0, false, x.device());
        });
  }
};

TEST(Grad, GridSampleKernelVjpMatchesFiniteDifferences) {
  GridSample gs;
  const int B = 1, H = 4, W = 5, C = 32, gH = 3, gW = 2;
  Array x = rand_in({B, H, W, C}, 131, -1, 1, Dtype::float32);
  // Grid points away from pixel-centre lines, where bilinear sampling is not differentiable.
  Array grid = rand_in({B, gH, gW, 2}, 132, -0.9, 0.9, Dtype::float32);
  Array w = rand_in({B, gH, gW, C}, 133, 0.5, 1.5, Dtype::float32);
  auto loss = [&](const std::vector<Array>& in) {
    return sum(multiply(gs.fn({in[0], in[1]})[0], w));
  };
  auto [v, g] = value_and_grad(loss, std::vector<int>{0, 1})({x, grid});
  // The reference: the loss re-implemented in float64 here (bilinear, zero padding), and its
  // central differences (the float32 kernel is too coarse for differences).
  auto xv = x.to_doubles(), gv = grid.to_doubles(), wv = w.to_doubles();
  auto f64 = [&](const std::vector<double>& X, const std::vector<double>& G) {
    double s = 0;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < gH; ++i)
        for (int j = 0; j < gW; ++j) {
          int gi = ((b * gH + i) * gW + j) * 2;
          double ix = ((G[gi] + 1) * W - 1) / 2, iy = ((G[gi + 1] + 1) * H - 1) / 2;
          int x0 = static_cast<int>(std::floor(ix)), y0 = static_cast<int>(std::floor(iy));
          double fx = ix - x0, fy = iy - y0;
          for (int c = 0; c < C; ++c) {
            auto at = [&](int yy, int xx) {
              if (yy < 0 || yy >= H || xx < 0 || xx >= W) return 0.0;
              return X[((b * H + yy) * W + xx) * C + c];
            };
            double o = (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x0 + 1)) +
                       fy * ((1 - fx) * at(y0 + 1, x0) + fx * at(y0 + 1, x0 + 1));
            s += o * wv[((b * gH + i) * gW + j) * C + c];
          }
        }
    return s;
  };
  EXPECT_NEAR(v.item(), f64(xv, gv), 1e-4 * (1 + std::abs(f64(xv, gv))));
  double h = 1e-6;
  std::vector<double> gx(xv.size()), gg(gv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    auto p = xv, m = xv;
    p[i] += h;
    m[i] -= h;
    gx[i] = (f64(p, gv) - f64(m, gv)) / (2 * h);
  }
  for (size_t i = 0; i < gv.size(); ++i) {
    auto p = gv, m = gv;
    p[i] += h;
    m[i] -= h;
    gg[i] = (f64(xv, p) - f64(xv, m)) / (2 * h);
  }
  expect_close(g[0].to_doubles(), gx, 1e-4, 1e-4, "d loss / d x");
  expect_close(g[1].to_doubles(), gg, 1e-4, 1e-3, "d loss / d grid");
}

TEST(Grad, OnTheGpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA GPU: " << cuda::unavailable_reason();
  // Ops, views and a kernel vjp on the GPU, against the same gradients computed on the CPU.
  GridSample gs;
  Array x = rand_in({1, 4, 5, 32}, 161, -1, 1, Dtype::float32);
  Array grid = rand_in({1, 3, 2, 2}, 162, -0.9, 0.9, Dtype::float32);
  auto loss = [&](const std::vector<Array>& in) {
    Array s = gs.fn({tanh(in[0]), in[1]})[0];
    return mean(square(slice(s, {0, 0, 0, 0}, {1, 3, 2, 16})));
  };
  auto cpu = grad(loss, std::vector<int>{0, 1})({x, grid});
  auto gpu = grad(loss, std::vector<int>{0, 1})({x.to(Device::gpu()), grid.to(Device::gpu())});
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(gpu[k].device(), Device::gpu());
    expect_close(gpu[k].to_doubles(), cpu[k].to_doubles(), 1e-4, 1e-6,
                 fmt::format("gpu gradient {}", k));
  }
}

}  // namespace
