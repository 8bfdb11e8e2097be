// alloy::fast (rms_norm, layer_norm, rope, scaled_dot_product_attention): CPU results against
// float64 references written from the definitions, primitive state round trips, argument errors,
// the generated kernels compiled with NVRTC for sm_90, and the GPU against the CPU (skipped
// without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "alloy/alloy.h"
#include "kernel/custom_kernel.h"
#include "ops/fast_primitives.h"
#include "ops/kernels.h"

using namespace alloy;

namespace {

std::vector<double> randoms(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d;
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// The float32-rounded values an Array of `v` holds.
std::vector<double> f32(const std::vector<double>& v) {
  std::vector<double> r;
  for (double x : v) r.push_back(static_cast<float>(x));
  return r;
}

void expect_close(const Array& got, const std::vector<double>& want, double tol) {
  auto g = got.astype(Dtype::float64).to_vector<double>();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
}

}  // namespace

TEST(Fast, RmsNormAndLayerNormMatchFloat64) {
  StreamContext on_cpu(Device::cpu());  // float64 runs on the CPU (the GPU is the default)
  ops::set_poison_outputs(true);
  const int N = 7, D = 37;
  auto xv = f32(randoms(N * D, 1)), wv = f32(randoms(D, 2)), bv = f32(randoms(D, 3));
  Array x = Array::from_doubles(xv, {N, D}, Dtype::float32);
  Array w = Array::from_doubles(wv, {D}, Dtype::float32);
  Array b = Array::from_doubles(bv, {D}, Dtype::float32);
  std::vector<double> rms(N * D), ln(N * D);
  for (int r = 0; r < N; ++r) {
    double ss = 0, s = 0;
    for (int i = 0; i < D; ++i) ss += xv[r * D + i] * xv[r * D + i], s += xv[r * D + i];
    double mu = s / D, v = 0;
    for (int i = 0; i < D; ++i) v += (xv[r * D + i] - mu) * (xv[r * D + i] - mu);
    for (int i = 0; i < D; ++i) {
      rms[r * D + i] = xv[r * D + i] / std::sqrt(ss / D + 1e-5) * wv[i];
      ln[r * D + i] = (xv[r * D + i] - mu) / std::sqrt(v / D + 1e-5) * wv[i] + bv[i];
    }
  }
  expect_close(fast::rms_norm(x, w, 1e-5f), rms, 1e-5);
  expect_close(fast::layer_norm(x, w, b, 1e-5f), ln, 1e-5);
  ops::set_poison_outputs(false);
}

TEST(Fast, RopeMatchesFloat64) {
  StreamContext on_cpu(Device::cpu());  // float64 runs on the CPU (the GPU is the default)
  const int B = 2, N = 3, T = 5, D = 12, dims = 8;
  auto xv = f32(randoms(B * N * T * D, 4));
  Array x = Array::from_doubles(xv, {B, N, T, D}, Dtype::float32);
  for (bool trad : {false, true}) {
    std::vector<double> want(xv);
    for (int r = 0; r < B * N * T; ++r) {
      int t = r % T;
      for (int i = 0; i < dims / 2; ++i) {
        double th = (t + 2) * 0.5 * std::pow(1000.0, -2.0 * i / dims);
        int i1 = trad ? 2 * i : i, i2 = trad ? 2 * i + 1 : i + dims / 2;
        double x1 = xv[r * D + i1], x2 = xv[r * D + i2];
        want[r * D + i1] = x1 * std::cos(th) - x2 * std::sin(th);
        want[r * D + i2] = x1 * std::sin(th) + x2 * std::cos(th);
      }
    }
    expect_close(fast::rope(x, dims, trad, 1000.0f, 0.5f, 2), want, 2e-5);
  }
}

TEST(Fast, AttentionMatchesFloat64) {
  StreamContext on_cpu(Device::cpu());  // float64 runs on the CPU (the GPU is the default)
  const int B = 2, H = 4, Hk = 2, Lq = 3, Lk = 6, Dh = 8, Dv = 5;
  auto qv = f32(randoms(B * H * Lq * Dh, 5)), kv = f32(randoms(B * Hk * Lk * Dh, 6)),
       vv = f32(randoms(B * Hk * Lk * Dv, 7));
  Array q = Array::from_doubles(qv, {B, H, Lq, Dh}, Dtype::float32);
  Array k = Array::from_doubles(kv, {B, Hk, Lk, Dh}, Dtype::float32);
  Array v = Array::from_doubles(vv, {B, Hk, Lk, Dv}, Dtype::float32);
  const double scale = 0.4;
  for (bool causal : {false, true}) {
    std::vector<double> want(B * H * Lq * Dv);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < Lq; ++i) {
          int hk = h / (H / Hk);
          std::vector<double> s(Lk);
          double m = -INFINITY;
          for (int j = 0; j < Lk; ++j) {
            double d = 0;
            for (int e = 0; e < Dh; ++e)
              d += qv[((b * H + h) * Lq + i) * Dh + e] * kv[((b * Hk + hk) * Lk + j) * Dh + e];
            s[j] = (causal && j > i + Lk - Lq) ? -INFINITY : d * scale;
            m = std::max(m, s[j]);
          }
          double l = 0;
          for (auto& x : s) l += (x = std::exp(x - m));
          for (int e = 0; e < Dv; ++e) {
            double o = 0;
            for (int j = 0; j < Lk; ++j) o += s[j] / l * vv[((b * Hk + hk) * Lk + j) * Dv + e];
            want[((b * H + h) * Lq + i) * Dv + e] = o;
          }
        }
    expect_close(fast::scaled_dot_product_attention(q, k, v, static_cast<float>(scale),
                                                    causal ? "causal" : ""),
                 want, 2e-5);
  }
}

TEST(Fast, StateRoundTrips) {
  std::vector<std::shared_ptr<Primitive>> ps = {
      std::make_shared<ops::RMSNorm>(1e-6f), std::make_shared<ops::LayerNorm>(3e-4f),
      std::make_shared<ops::RoPE>(6, true, 500.0f, 0.25f, false),
      std::make_shared<ops::ScaledDotProductAttention>(0.125f, true, true, false)};
  for (auto& p : ps) {
    auto bytes = p->state().to_bytes();
    auto back = make_primitive(p->name(), PrimitiveState::from_bytes(bytes.data(), bytes.size()));
    EXPECT_EQ(back->state(), p->state()) << p->name();
  }
  EXPECT_THROW(ops::RoPE(5, false, 1, 1, true), std::invalid_argument);
  EXPECT_THROW(ops::ScaledDotProductAttention(1, false, false, true), NotSupported);
}

TEST(Fast, BadArguments) {
  Array x = Array::from_doubles(randoms(24, 8), {2, 3, 4}, Dtype::float32);
  EXPECT_THROW(fast::rms_norm(x, Array::from_doubles({1, 2}, {2}, Dtype::float32), 1e-5f),
               std::invalid_argument);
  EXPECT_THROW(fast::rms_norm(Array::from_doubles({1, 2}, {2}, Dtype::int32), std::nullopt, 1e-5f),
               std::invalid_argument);
  EXPECT_THROW(fast::rope(x, 3, false, 1.0f, 1.0f, 0), std::invalid_argument);
  EXPECT_THROW(fast::rope(x, 4, false, std::nullopt, 1.0f, 0), std::invalid_argument);
  EXPECT_THROW(fast::scaled_dot_product_attention(x, x, x, 1.0f), std::invalid_argument);
  Array q = Array::from_doubles(randoms(16, 9), {1, 2, 2, 4}, Dtype::float32);
  EXPECT_THROW(fast::scaled_dot_product_attention(q, q, q, 1.0f, "sliding"), std::invalid_argument);
}

TEST(FastKernels, CompileWithNvrtcForSm90) {
  Array x = Array::from_doubles(randoms(2 * 3 * 4 * 8, 10), {2, 3, 4, 8}, Dtype::float16);
  Array w = Array::from_doubles(randoms(8, 11), {8}, Dtype::float16);
  Array p1 = Array::from_doubles({1e-5}, {1}, Dtype::float32);
  Array p3 = Array::from_doubles({0.1, 1.0, 8}, {3}, Dtype::float32);
  Array off = Array::from_doubles({0}, {1}, Dtype::int32);
  Array k = Array::from_doubles(randoms(2 * 1 * 4 * 8, 12), {2, 1, 4, 8}, Dtype::float16);
  struct Case {
    Array y;
    std::string key;
    std::vector<Array> inputs;
  };
  std::vector<Case> cases = {
      {fast::rms_norm(x, w, 1e-5f), "rmsnorm|float16|float16|float16|i", {x, w, p1}},
      {fast::layer_norm(x, w, std::nullopt, 1e-5f),
       "layernorm|float16|float16|float16|float16|i|0",
       {x, w, w, p1}},
      {fast::rope(x, 8, false, 10000.0f, 1.0f, 0),
       "rope|float16|float16|int32|false|false|-|false|true",
       {x, off, p3}},
      {fast::scaled_dot_product_attention(x, k, k, 0.3f, "causal"),
       "sdpa|float16|float16|float16|float16|true|false|bool|false|-|8",
       {x, k, k, p1}},
  };
  for (auto& c : cases) {
    c.y.eval();
    bool built = true;
    auto kern = ops::op_kernel(
        c.key,
        [&] {
          built = false;
          return KernelSpec{};
        },
        true);
    ASSERT_TRUE(built) << c.key << " is not the key of the kernel the op built";
    std::string why =
        kernel::compile_call_cubin(MetalKernel(kern.spec), c.inputs,
                                   ops::kernel_call(c.y.shape(), c.y.dtype(), 8, true), "sm_90");
    if (!why.empty()) GTEST_SKIP() << why;  // NVRTC is not installed
  }
}

TEST(FastGpu, MatchTheCpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU";
  Array x = Array::from_doubles(randoms(2 * 4 * 6 * 16, 13), {2, 4, 6, 16}, Dtype::float32);
  Array k = Array::from_doubles(randoms(2 * 2 * 6 * 16, 14), {2, 2, 6, 16}, Dtype::float32);
  Array w = Array::from_doubles(randoms(16, 15), {16}, Dtype::float32);
  auto run = [&](Device d) {
    Array xd = x.to(d), kd = k.to(d), wd = w.to(d);
    return std::vector<Array>{fast::rms_norm(xd, wd, 1e-5f), fast::layer_norm(xd, wd, wd, 1e-5f),
                              fast::rope(xd, 12, true, 10000.0f, 1.0f, 3),
                              fast::scaled_dot_product_attention(xd, kd, kd, 0.25f, "causal")};
  };
  auto c = run(Device::cpu()), g = run(Device::gpu());
  for (size_t i = 0; i < c.size(); ++i)
    expect_close(g[i].to(Device::cpu()), c[i].astype(Dtype::float64).to_vector<double>(), 1e-5);
}
