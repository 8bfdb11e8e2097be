// Matrix products and row reductions (src/ops/matmul.cpp, quantized.cpp, reduce_gpu.cpp) against
// float64 references computed here: matmul shapes (1-D promotion, batch broadcasting, strided
// views, empty), dtypes and errors, its vjp/jvp against finite differences; MLX's affine
// quantization, quantized_matmul and gather_qmm; the cooperative row kernels (the CUDA path) run on
// the CPU backend; and the new kernels' CUDA translations compiled with NVRTC for sm_90.
#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>

#include "alloy/alloy.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "kernel/custom_kernel.h"
#include "ops/kernels.h"
#include "ops/matmul.h"
#include "ops/reduce_rows.h"

using namespace alloy;

namespace {

struct PoisonOutputs : ::testing::Environment {
  void SetUp() override { ops::set_poison_outputs(true); }
};
const auto* const kPoison = ::testing::AddGlobalTestEnvironment(new PoisonOutputs);

std::vector<double> randoms(size_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = want[i], g = got[i];
    bool ok = std::isnan(e)
                  ? std::isnan(g)
                  : (std::isinf(e) ? g == e : std::fabs(g - e) <= atol + rtol * std::fabs(e));
    if (!ok && bad++ < 4)
      ADD_FAILURE() << what << fmt::format(": element {}: got {}, expected {}", i, g, e);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ";
}

// numpy's matmul in float64 over row-major values of shapes sa, sb.
std::pair<std::vector<double>, Shape> ref_matmul(const std::vector<double>& a, Shape sa,
                                                 const std::vector<double>& b, Shape sb) {
  bool va = sa.size() == 1, vb = sb.size() == 1;
  if (va) sa = {1, sa[0]};
  if (vb) sb = {sb[0], 1};
  int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch = broadcast_shapes(ba, bb);
  int64_t nb = numel(batch);
  std::vector<double> out(nb * M * N);
  auto offset = [&](const Shape& own, int64_t i) {  // broadcast batch index -> own batch index
    int64_t o = 0, stride = 1, rem = i;
    for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % batch[d];
      rem /= batch[d];
      int od = d - static_cast<int>(batch.size() - own.size());
      if (od >= 0) {
        o += (own[od] == 1 ? 0 : idx) * stride;
        stride *= own[od];
      }
    }
    return o;
  };
  for (int64_t i = 0; i < nb; ++i) {
    int64_t oa = offset(ba, i) * M * K, ob = offset(bb, i) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[oa + m * K + k] * b[ob + k * N + n];
        out[(i * M + m) * N + n] = s;
      }
  }
  Shape os = batch;
  if (!va) os.push_back(M);
  if (!vb) os.push_back(N);
  return {out, os};
}

void skip_without_blas() {
  std::string why;
  if (!cpu_backend().blas_available(&why)) GTEST_SKIP() << why;
}

}  // namespace

TEST(OpsMatmul, ShapesPromotionAndBatchBroadcasting) {
  StreamContext on_cpu(Device::cpu());  // float64 references: a CPU test on every machine
  skip_without_blas();
  std::vector<std::pair<Shape, Shape>> cases = {
      {{5}, {5}},          {{5}, {5, 3}},       {{4, 5}, {5}},       {{4, 5}, {5, 3}},
      {{1, 5}, {5, 1}},    {{2, 4, 5}, {5, 3}}, {{4, 5}, {3, 5, 2}}, {{2, 1, 4, 5}, {3, 5, 6}},
      {{3, 1, 7}, {7, 2}}, {{5}, {2, 5, 3}},    {{2, 3, 5}, {5}},    {{1, 33, 65}, {2, 65, 17}},
  };
  uint64_t seed = 1;
  for (auto& [sa, sb] : cases) {
    auto va = randoms(numel(sa), -1, 1, seed++), vb = randoms(numel(sb), -1, 1, seed++);
    for (Dtype t : {Dtype::float32, Dtype::float64}) {
      Array a = Array::from_doubles(va, sa, t), b = Array::from_doubles(vb, sb, t);
      Array r = matmul(a, b);
      auto [want, ws] = ref_matmul(a.to_doubles(), sa, b.to_doubles(), sb);
      std::string what = fmt::format("matmul ({}) x ({}) {}", fmt::join(sa, ","),
                                     fmt::join(sb, ","), dtype_name(t));
      EXPECT_EQ(r.shape(), ws) << what;
      EXPECT_EQ(r.dtype(), t) << what;
      expect_close(r.to_doubles(), want, t == Dtype::float64 ? 1e-12 : 1e-5, 1e-6, what);
    }
  }
}

TEST(OpsMatmul, StridedViewsAreReadWhereTheyAre) {
  skip_without_blas();
  auto v = randoms(6 * 8 * 10, -1, 1, 3);
  Array base = Array::from_doubles(v, {6, 8, 10}, Dtype::float32);
  auto bv = base.to_doubles();
  auto gather = [&](const Array& x) { return x.contiguous().to_doubles(); };
  struct Case {
    std::string what;
    Array a, b;
  };
  std::vector<Case> cases = {
      // Transposed matrices (BLAS reads them as transposed operands).
      {"a.T", base.slice({{0, 1}}).reshape({8, 10}).transpose(),
       base.slice({{1, 2}}).reshape({8, 10})},
      {"b.T", base.slice({{0, 1}}).reshape({8, 10}),
       base.slice({{1, 2}}).reshape({8, 10}).transpose()},
      {"batched swapaxes", swapaxes(base, 1, 2), base},
      // Steps along both matrix axes: no unit stride, copied first.
      {"stepped", base.slice({{0, 6, 2}, {0, 8, 2}, {0, 10, 3}}),
       base.slice({{0, 3}, {0, 4}, {0, 5}})},
      // A stepped batch axis with contiguous rows.
      {"stepped batch", base.slice({{0, 6, 3}}), swapaxes(base.slice({{1, 3}}), 1, 2)},
      // Matrix-vector products (gemv) with strided vectors and transposed matrices.
      {"strided row x matrix", base.slice({{0, 1}}).reshape({8, 10}).transpose().slice({{0, 1}}),
       base.slice({{1, 2}}).reshape({8, 10})},
      {"strided row x transposed matrix",
       base.slice({{0, 1}}).reshape({8, 10}).transpose().slice({{0, 1}}),
       base.slice({{2, 3}, {0, 8}, {0, 8}}).reshape({8, 8}).transpose()},
      {"transposed matrix x strided column", base.slice({{0, 1}}).reshape({8, 10}).transpose(),
       base.slice({{3, 4}, {0, 8}, {0, 1}})},
      // A broadcast (stride 0) batch.
      {"broadcast batch", broadcast_to(base.slice({{0, 1}}), {4, 8, 10}),
       swapaxes(base.slice({{0, 4}}), 1, 2)},
  };
  for (auto& c : cases) {
    Array r = matmul(c.a, c.b);
    auto [want, ws] = ref_matmul(gather(c.a), c.a.shape(), gather(c.b), c.b.shape());
    EXPECT_EQ(r.shape(), ws) << c.what;
    expect_close(r.to_doubles(), want, 1e-5, 1e-6, c.what);
  }
  (void)bv;
}

TEST(OpsMatmul, HalfBfloatAndMixedDtypes) {
  StreamContext on_cpu(Device::cpu());  // float64 references: a CPU test on every machine
  skip_without_blas();
  auto va = randoms(3 * 40, -1, 1, 5), vb = randoms(40 * 7, -1, 1, 6);
  struct Case {
    Dtype a, b, out;
    double rtol;
  };
  for (auto c : std::vector<Case>{{Dtype::float16, Dtype::float16, Dtype::float16, 4e-3},
                                  {Dtype::bfloat16, Dtype::bfloat16, Dtype::bfloat16, 3e-2},
                                  {Dtype::float16, Dtype::bfloat16, Dtype::float32, 1e-5},
                                  {Dtype::float16, Dtype::float32, Dtype::float32, 1e-5},
                                  {Dtype::int32, Dtype::float32, Dtype::float32, 1e-5},
                                  {Dtype::float32, Dtype::float64, Dtype::float64, 1e-12}}) {
    Array a = Array::from_doubles(va, {3, 40}, c.a), b = Array::from_doubles(vb, {40, 7}, c.b);
    Array r = matmul(a, b);
    EXPECT_EQ(r.dtype(), c.out);
    auto [want, ws] = ref_matmul(a.to_doubles(), {3, 40}, b.to_doubles(), {40, 7});
    expect_close(r.to_doubles(), want, c.rtol, c.rtol,
                 fmt::format("matmul {} x {}", dtype_name(c.a), dtype_name(c.b)));
  }
}

TEST(OpsMatmul, EmptyAndErrors) {
  skip_without_blas();
  // M = 0, N = 0, batch 0: empty results; K = 0: zeros.
  EXPECT_EQ(matmul(zeros({0, 3}, Dtype::float32), ones({3, 4})).shape(), (Shape{0, 4}));
  EXPECT_EQ(matmul(ones({2, 3}), zeros({3, 0}, Dtype::float32)).to_doubles().size(), 0u);
  EXPECT_EQ(matmul(zeros({0, 2, 3}, Dtype::float32), ones({3, 4})).shape(), (Shape{0, 2, 4}));
  Array z = matmul(zeros({2, 0}, Dtype::float32), zeros({0, 3}, Dtype::float32));
  EXPECT_EQ(z.to_doubles(), std::vector<double>(6, 0.0));
  EXPECT_THROW(matmul(ones({2, 3}, Dtype::int32), ones({3, 2}, Dtype::int32)),
               std::invalid_argument);
  EXPECT_THROW(matmul(ones({2, 3}), ones({4, 2})), std::invalid_argument);
  EXPECT_THROW(matmul(ones({}), ones({2})), std::invalid_argument);
  EXPECT_THROW(matmul(ones({2, 2, 3}), ones({3, 3, 2})), std::invalid_argument);
}

TEST(OpsMatmul, BlasLibraryNamesTheOpenBlasInUse) {
  std::string why;
  if (!cpu_backend().blas_available(&why)) {
    EXPECT_THROW(blas_library(), NotSupported);
    GTEST_SKIP() << why;
  }
  std::string lib = blas_library();
  EXPECT_NE(lib.find("openblas"), std::string::npos) << lib;  // the file (and its config)
  EXPECT_NE(lib.find("OpenBLAS"), std::string::npos) << lib;  // openblas_get_config()
  EXPECT_EQ(blas_library(Device::cpu()), lib);
  if (!gpu_available()) {
    EXPECT_THROW(blas_library(Device::gpu()), std::invalid_argument);
  }
}

namespace {

// The system's OpenBLAS (or ALLOY_OPENBLAS's file), resolved; "" when none is at a known path.
std::string openblas_file_at_a_known_path() {
  for (const char* f : {"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                        "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
                        static_cast<const char*>(std::getenv("ALLOY_OPENBLAS"))})
    if (f && std::filesystem::exists(f)) return std::filesystem::canonical(f).string();
  return "";
}

// Whether an m x k @ k x n product of random inputs in `dtype` matches float64 within `tol`.
bool product_matches_float64(int m, int k, int n, Dtype dtype, int seed, double tol) {
  // The CPU's BLAS is what these checks choose (and float64 has no GPU kernel): on a machine
  // with a GPU the default device is the GPU.
  StreamContext on_cpu(Device::cpu());
  auto va = randoms(m * k, -1, 1, seed), vb = randoms(k * n, -1, 1, seed + 1);
  auto got = matmul(Array::from_doubles(va, {m, k}, dtype), Array::from_doubles(vb, {k, n}, dtype))
                 .to_doubles();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int p = 0; p < k; ++p) want += va[i * k + p] * vb[p * n + j];
      if (std::fabs(got[i * n + j] - want) > tol) return false;
    }
  return true;
}

}  // namespace

// The library is chosen once per process, so the choices are checked in child processes (gtest
// re-runs the test there): an OpenBLAS already loaded is shared (numpy's in Python; here the
// system's file under a name the search would never find), ALLOY_OPENBLAS (here a copy of the
// file: a second library) goes before it.
TEST(OpsMatmul, AnOpenBlasAlreadyLoadedIsShared) {
  // Nothing here may load Alloy's BLAS before the child's EXPECT_EXIT (the child runs this body
  // from the start), so no skip_without_blas(): a file at a known path instead.
  std::string system_file = openblas_file_at_a_known_path();
  if (system_file.empty()) GTEST_SKIP() << "no OpenBLAS file at a known path";
  // A fixed name: the child processes make the same link again.
  auto dir = std::filesystem::temp_directory_path() / "alloy-test-preloaded-openblas";
  std::filesystem::create_directories(dir);
  std::string preloaded = (dir / "libopenblas-preloaded.so").string();
  std::string copy = (dir / "libopenblas-copy.so").string();
  std::filesystem::remove(preloaded);
  std::filesystem::create_symlink(system_file, preloaded);
  std::filesystem::copy_file(system_file, copy, std::filesystem::copy_options::skip_existing);
  // In the child: load the link, then Alloy's first product; exit 0 when Alloy named the
  // expected file and its product matches float64.
  auto child = [&](bool env) {
    if (env)
      ::setenv("ALLOY_OPENBLAS", copy.c_str(), 1);
    else
      ::unsetenv("ALLOY_OPENBLAS");
    if (!dlopen(preloaded.c_str(), RTLD_NOW | RTLD_LOCAL)) std::_Exit(3);
    std::string lib = blas_library();
    std::fprintf(stderr, "%s\n", lib.c_str());
    if (lib.rfind(env ? copy : preloaded, 0) != 0) std::_Exit(1);
    std::_Exit(product_matches_float64(6, 5, 4, Dtype::float32, 31, 1e-5) ? 0 : 2);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(false), ::testing::ExitedWithCode(0), "OpenBLAS") << "preloaded";
  EXPECT_EXIT(child(true), ::testing::ExitedWithCode(0), "OpenBLAS") << "ALLOY_OPENBLAS set";
  std::filesystem::remove_all(dir);
}

// add_cpu_blas_candidate: a named file goes after ALLOY_OPENBLAS and a loaded OpenBLAS, before
// the system's names; a file that does not load is passed over; nothing can be added once the
// library is chosen. In a child process (the choice is made once per process).
TEST(OpsMatmul, ANamedOpenBlasCandidateGoesBeforeTheSystems) {
  // Nothing here may load Alloy's BLAS before the child's EXPECT_EXIT (the child runs this body
  // from the start): a file at a known path instead of skip_without_blas().
  std::string system_file = openblas_file_at_a_known_path();
  if (system_file.empty()) GTEST_SKIP() << "no OpenBLAS file at a known path";
  auto dir = std::filesystem::temp_directory_path() / "alloy-test-openblas-candidate";
  std::filesystem::create_directories(dir);
  std::string named = (dir / "libopenblas-named.so").string();
  std::string missing = (dir / "libopenblas-missing.so").string();
  std::filesystem::remove(named);
  std::filesystem::create_symlink(system_file, named);
  // In the child: name a missing file and the link, then Alloy's first product; exit 0 when
  // Alloy chose the link, refuses a candidate afterwards and its product matches float64.
  auto child = [&] {
    ::unsetenv("ALLOY_OPENBLAS");
    if (!add_cpu_blas_candidate(missing) || !add_cpu_blas_candidate(named)) std::_Exit(3);
    std::string lib = blas_library();
    std::fprintf(stderr, "%s\n", lib.c_str());
    if (lib.rfind(named, 0) != 0) std::_Exit(1);
    if (add_cpu_blas_candidate(system_file)) std::_Exit(4);
    std::_Exit(product_matches_float64(7, 6, 5, Dtype::float64, 41, 1e-12) ? 0 : 2);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "libopenblas-named.so");
  std::filesystem::remove_all(dir);
}

TEST(OpsMatmul, GradientsMatchFiniteDifferences) {
  StreamContext on_cpu(Device::cpu());  // float64 references: a CPU test on every machine
  skip_without_blas();
  Shape sa{2, 3, 4}, sb{4, 5};
  auto va = randoms(24, -1, 1, 7), vb = randoms(20, -1, 1, 8);
  auto f = [&](const std::vector<double>& x, const std::vector<double>& y) {
    return matmul(Array::from_doubles(x, sa, Dtype::float64),
                  Array::from_doubles(y, sb, Dtype::float64));
  };
  Array y = f(va, vb);
  auto p = node_of(y)->pending;
  ASSERT_TRUE(p);
  auto prim = p->primitive;
  auto primals = p->inputs;  // b broadcast to [2, 4, 5]
  auto cot_v = randoms(y.size(), 0.5, 1.5, 9);
  Array cot = Array::from_doubles(cot_v, y.shape(), Dtype::float64);
  auto g = prim->vjp(primals, {cot}, {0, 1}, {y});
  ASSERT_EQ(g.size(), 2u);
  // The cotangent of the broadcast b, summed over the batch: numerical vjp of f in b.
  std::vector<double> gb = sum(g[1], 0).to_doubles(), ga = g[0].to_doubles();
  auto numeric = [&](int which) {
    auto base = which == 0 ? va : vb;
    std::vector<double> out(base.size());
    for (size_t i = 0; i < base.size(); ++i) {
      auto up = base, down = base;
      up[i] += 1e-6;
      down[i] -= 1e-6;
      auto yu = (which == 0 ? f(up, vb) : f(va, up)).to_doubles();
      auto yd = (which == 0 ? f(down, vb) : f(va, down)).to_doubles();
      double s = 0;
      for (size_t j = 0; j < yu.size(); ++j) s += cot_v[j] * (yu[j] - yd[j]) / 2e-6;
      out[i] = s;
    }
    return out;
  };
  expect_close(ga, numeric(0), 1e-6, 1e-8, "vjp a");
  expect_close(gb, numeric(1), 1e-6, 1e-8, "vjp b");
  // jvp: <cot, J t> == <J^T cot, t>.
  auto ta = randoms(24, -1, 1, 10), tb = randoms(40, -1, 1, 11);
  auto jv = prim->jvp(primals,
                      {Array::from_doubles(ta, sa, Dtype::float64),
                       Array::from_doubles(tb, {2, 4, 5}, Dtype::float64)},
                      {0, 1})[0]
                .to_doubles();
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < jv.size(); ++i) lhs += cot_v[i] * jv[i];
  auto g1 = g[1].to_doubles();
  for (size_t i = 0; i < ta.size(); ++i) rhs += ga[i] * ta[i];
  for (size_t i = 0; i < tb.size(); ++i) rhs += g1[i] * tb[i];
  EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::fabs(rhs)));
}

TEST(OpsMatmul, PrimitivesRoundTripThroughTheRegistry) {
  Array a = ones({2, 3}), b = ones({3, 4});
  auto w = quantize(ones({8, 64}), 32, 4);
  for (Array y : {matmul(a, b), w[0], dequantize(w[0], w[1], w[2], 32, 4),
                  quantized_matmul(ones({2, 64}), w[0], w[1], w[2], true, 32, 4),
                  gather_qmm(ones({2, 1, 64}), reshape(w[0], {1, 8, 8}), reshape(w[1], {1, 8, 2}),
                             reshape(w[2], {1, 8, 2}), std::nullopt,
                             Array::from_doubles({0, 0}, {2}, Dtype::uint32), true, 32, 4),
                  softmax(ones({3, 5}), -1), logsumexp(ones({3, 5}), -1, true)}) {
    auto node = node_of(y);
    auto p = node->pending;
    while (p && p->view) p = node_of(p->inputs[0])->pending;  // through reshapes
    ASSERT_TRUE(p);
    auto bytes = p->primitive->state().to_bytes();
    auto back = make_primitive(p->primitive->name(),
                               PrimitiveState::from_bytes(bytes.data(), bytes.size()));
    EXPECT_TRUE(back->is_equivalent(*p->primitive)) << p->primitive->name();
  }
}

// ---- quantization ---------------------------------------------------------------------------

namespace {

// MLX's affine quantization, step for step in float32 (what mx.quantize computes).
struct Quantized {
  std::vector<double> wq, scales, biases, deq;
};
Quantized ref_quantize(const std::vector<double>& w, int gs, int bits) {
  Quantized q;
  int per = 32 / bits;
  float nb = static_cast<float>((1 << bits) - 1);
  for (size_t g = 0; g < w.size() / gs; ++g) {
    float mx = -INFINITY, mn = INFINITY;
    for (int j = 0; j < gs; ++j) {
      float v = static_cast<float>(w[g * gs + j]);
      mx = std::max(mx, v);
      mn = std::min(mn, v);
    }
    bool mask = std::fabs(mn) > std::fabs(mx);
    float scale = std::max((mx - mn) / nb, 1e-7f);
    scale = mask ? scale : -scale;
    float edge = mask ? mn : mx;
    float q0 = std::nearbyint(edge / scale);
    if (q0 != 0) scale = edge / q0;
    float bias = q0 == 0 ? 0.0f : edge;
    q.scales.push_back(scale);
    q.biases.push_back(bias);
    for (int wi = 0; wi < gs / per; ++wi) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j) {
        float v = static_cast<float>(w[g * gs + wi * per + j]);
        float c = std::min(std::max(std::nearbyint((v - bias) / scale), 0.0f), nb);
        word |= static_cast<uint32_t>(c) << (bits * j);
        q.deq.push_back(static_cast<double>(scale) * c + bias);
      }
      q.wq.push_back(word);
    }
  }
  return q;
}

}  // namespace

TEST(OpsQuantized, QuantizeDequantizeMatchMlxAlgorithm) {
  for (int bits : {4, 8})
    for (int gs : {32, 64, 128}) {
      auto v = randoms(6 * 256, -2, 2, bits * 1000 + gs);
      Array w = Array::from_doubles(v, {6, 256}, Dtype::float32);
      auto q = quantize(w, gs, bits);
      auto r = ref_quantize(w.to_doubles(), gs, bits);
      std::string what = fmt::format("bits {} group {}", bits, gs);
      EXPECT_EQ(q[0].dtype(), Dtype::uint32);
      EXPECT_EQ(q[0].shape(), (Shape{6, 256 * bits / 32})) << what;
      EXPECT_EQ(q[1].shape(), (Shape{6, 256 / gs})) << what;
      EXPECT_EQ(q[0].to_doubles(), r.wq) << what;
      EXPECT_EQ(q[1].to_doubles(), r.scales) << what;
      EXPECT_EQ(q[2].to_doubles(), r.biases) << what;
      Array d = dequantize(q[0], q[1], q[2], gs, bits);
      EXPECT_EQ(d.shape(), w.shape());
      expect_close(d.to_doubles(), r.deq, 1e-6, 1e-6, "dequantize " + what);
    }
  // float16 weights give float16 scales and biases.
  auto q16 = quantize(Array::from_doubles(randoms(128, -1, 1, 3), {2, 64}, Dtype::float16), 64, 4);
  EXPECT_EQ(q16[1].dtype(), Dtype::float16);
  EXPECT_THROW(quantize(ones({4, 64}), 48, 4), std::invalid_argument);
  EXPECT_THROW(quantize(ones({4, 64}), 64, 3), std::invalid_argument);
  EXPECT_THROW(quantize(ones({4, 60}), 32, 4), std::invalid_argument);
  EXPECT_THROW(quantize(ones({64}), 32, 4), std::invalid_argument);
  EXPECT_THROW(quantize(ones({4, 64}, Dtype::int32), 32, 4), std::invalid_argument);
}

TEST(OpsQuantized, QuantizedMatmulMatchesDequantizedProduct) {
  for (int bits : {4, 8})
    for (int gs : {32, 64, 128})
      for (bool transpose : {true, false}) {
        int64_t K = 256, N = 128, M = 5;
        Shape ws = transpose ? Shape{N, K} : Shape{K, N};
        auto wv = randoms(N * K, -1, 1, bits + gs + transpose);
        auto q = quantize(Array::from_doubles(wv, ws, Dtype::float32), gs, bits);
        auto deq = dequantize(q[0], q[1], q[2], gs, bits).to_doubles();
        auto xv = randoms(2 * M * K, -1, 1, 77);
        Array x = Array::from_doubles(xv, {2, M, K}, Dtype::float32);
        Array r = quantized_matmul(x, q[0], q[1], q[2], transpose, gs, bits);
        std::string what = fmt::format("bits {} group {} transpose {}", bits, gs, transpose);
        ASSERT_EQ(r.shape(), (Shape{2, M, N})) << what;
        std::vector<double> want(2 * M * N);
        for (int64_t m = 0; m < 2 * M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += xv[m * K + k] * (transpose ? deq[n * K + k] : deq[k * N + n]);
            want[m * N + n] = s;
          }
        expect_close(r.to_doubles(), want, 1e-5, 1e-4, what);
      }
  // float16 x keeps float16 when the scales are float16; a vector x gives a vector.
  auto q =
      quantize(Array::from_doubles(randoms(64 * 64, -1, 1, 4), {64, 64}, Dtype::float16), 64, 4);
  Array xh = Array::from_doubles(randoms(64, -1, 1, 5), {64}, Dtype::float16);
  Array rh = quantized_matmul(xh, q[0], q[1], q[2]);
  EXPECT_EQ(rh.dtype(), Dtype::float16);
  EXPECT_EQ(rh.shape(), (Shape{64}));
  auto deq = dequantize(q[0], q[1], q[2]).to_doubles();
  auto xd = xh.to_doubles();
  std::vector<double> want(64);
  for (int n = 0; n < 64; ++n)
    for (int k = 0; k < 64; ++k) want[n] += xd[k] * deq[n * 64 + k];
  expect_close(rh.to_doubles(), want, 4e-3, 4e-3, "float16 vector");
  EXPECT_THROW(quantized_matmul(ones({2, 32}), q[0], q[1], q[2]), std::invalid_argument);
  EXPECT_THROW(quantized_matmul(ones({2, 64}), q[0], q[1], q[2], true, 32), std::invalid_argument);
  EXPECT_THROW(quantized_matmul(ones({2, 64}), q[1], q[1], q[2]), std::invalid_argument);
}

TEST(OpsQuantized, GatherQmmPicksMatricesByIndex) {
  int64_t E = 4, N = 32, K = 64, M = 3, B = 5;
  for (bool transpose : {true, false}) {
    Shape ws = transpose ? Shape{E, N, K} : Shape{E, K, N};
    auto q =
        quantize(Array::from_doubles(randoms(E * N * K, -1, 1, 21), ws, Dtype::float32), 32, 4);
    auto deq = dequantize(q[0], q[1], q[2], 32, 4).to_doubles();
    auto xv = randoms(B * M * K, -1, 1, 22);
    Array x = Array::from_doubles(xv, {B, M, K}, Dtype::float32);
    Array lhs = Array::from_doubles({0, 4, 4, 2}, {4}, Dtype::int32);
    Array rhs = Array::from_doubles({3, 0, 3, 1}, {4}, Dtype::uint32);
    auto check = [&](const Array& r, const std::vector<int>& li, const std::vector<int>& ri,
                     const Shape& shape, const std::string& what) {
      ASSERT_EQ(r.shape(), shape) << what;
      std::vector<double> want;
      for (size_t b = 0; b < li.size(); ++b)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) {
              double wv = transpose ? deq[(ri[b] * N + n) * K + k] : deq[(ri[b] * K + k) * N + n];
              s += xv[(li[b] * M + m) * K + k] * wv;
            }
            want.push_back(s);
          }
      expect_close(r.to_doubles(), want, 1e-5, 1e-4, what);
    };
    check(gather_qmm(x, q[0], q[1], q[2], lhs, rhs, transpose, 32, 4), {0, 4, 4, 2}, {3, 0, 3, 1},
          {4, M, N}, fmt::format("indices, transpose {}", transpose));
    // lhs omitted: x's batch positions (5), broadcast against rhs of shape [5, 1].
    Array rhs2 = Array::from_doubles({1, 2, 3, 0, 1}, {5, 1}, Dtype::int32);
    std::vector<int> li, ri;
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 5; ++j) li.push_back(j), ri.push_back(std::vector<int>{1, 2, 3, 0, 1}[i]);
    check(gather_qmm(x, q[0], q[1], q[2], std::nullopt, rhs2, transpose, 32, 4), li, ri,
          {5, 5, M, N}, "rhs only");
  }
  // Batched w in quantized_matmul: batch axes broadcast (x [2, 1, M, K] with w [E, ...]).
  auto q = quantize(Array::from_doubles(randoms(E * N * K, -1, 1, 23), {E, N, K}, Dtype::float32),
                    64, 8);
  Array xb = Array::from_doubles(randoms(2 * M * K, -1, 1, 24), {2, 1, M, K}, Dtype::float32);
  Array r = quantized_matmul(xb, q[0], q[1], q[2], true, 64, 8);
  EXPECT_EQ(r.shape(), (Shape{2, E, M, N}));
  if (cpu_backend().blas_available()) {
    Array ref = matmul(xb, swapaxes(dequantize(q[0], q[1], q[2], 64, 8), -1, -2));
    expect_close(r.to_doubles(), ref.to_doubles(), 1e-5, 1e-4, "batched w");
  }
  EXPECT_THROW(gather_qmm(xb, q[0], q[1], q[2], Array::from_doubles({0.5}, {1}, Dtype::float32)),
               std::invalid_argument);
}

// ---- row reductions -------------------------------------------------------------------------

namespace {
struct CooperativeRowsOnCpu {
  CooperativeRowsOnCpu() { ops::set_cooperative_rows_on_cpu(true); }
  ~CooperativeRowsOnCpu() { ops::set_cooperative_rows_on_cpu(false); }
};
}  // namespace

TEST(OpsRowReduce, MoreRowsThanCudaAllowsAlongY) {
  // 600,000 short rows, 8 per threadgroup (ops::row_layout): 75,000 threadgroups, more than
  // CUDA's 65,535 along y; the rows continue along z (the CUDA path's kernels, run by the CPU
  // backend).
  StreamContext on_cpu(Device::cpu());
  CooperativeRowsOnCpu coop;
  const int64_t N = 600000, L = 3;
  ASSERT_EQ(ops::row_layout(N, L).rows, 8);
  auto v = randoms(N * L, -1, 1, 77);
  Array x = Array::from_doubles(v, {N, L}, Dtype::float32);
  auto s = sum(x, 1).to_doubles();
  auto lse = logsumexp(x, 1).to_doubles();
  ASSERT_EQ(s.size(), static_cast<size_t>(N));
  for (int64_t r = 0; r < N; r += 4999) {
    double want = 0, m = -INFINITY, e = 0;
    for (int64_t i = 0; i < L; ++i) {
      double xi = static_cast<float>(v[r * L + i]);
      want += xi;
      m = std::max(m, xi);
    }
    for (int64_t i = 0; i < L; ++i) e += std::exp(static_cast<float>(v[r * L + i]) - m);
    EXPECT_NEAR(s[r], want, 1e-5) << r;
    EXPECT_NEAR(lse[r], m + std::log(e), 1e-5) << r;
  }
  EXPECT_NEAR(s[N - 1], v[(N - 1) * L] + v[(N - 1) * L + 1] + v[(N - 1) * L + 2], 1e-5);
}

TEST(OpsRowReduce, CooperativeKernelsMatchReferenceOnTheCpuBackend) {
  CooperativeRowsOnCpu coop;  // the CUDA path's kernels, run by the CPU backend
  // Row lengths: one partial simdgroup, several simdgroups, a long row split into pieces.
  for (int64_t L : {64, 100, 1000, 4099, 200000}) {
    int64_t N = L > 10000 ? 2 : 7;
    auto v = randoms(N * L, -1, 1, L);
    for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::int32}) {
      Array x = Array::from_doubles(t == Dtype::int32 ? [&] {
        auto w = v;
        for (auto& e : w) e = std::floor(e * 50);
        return w;
      }() : v, {N, L}, t);
      auto xv = x.to_doubles();
      for (const char* op : {"sum", "max", "min", "prod"}) {
        std::string o = op;
        if (o == "prod" && (t == Dtype::int32 || L > 100)) continue;  // overflow / underflow
        std::vector<double> want(N);
        for (int64_t r = 0; r < N; ++r) {
          double a = o == "sum" ? 0 : o == "prod" ? 1 : o == "max" ? -INFINITY : INFINITY;
          for (int64_t i = 0; i < L; ++i) {
            double e = xv[r * L + i];
            a = o == "sum"    ? a + e
                : o == "prod" ? a * e
                : o == "max"  ? std::max(a, e)
                              : std::min(a, e);
          }
          want[r] = a;
        }
        Array y = o == "sum"    ? sum(x, 1)
                  : o == "prod" ? prod(x, 1)
                  : o == "max"  ? max(x, 1)
                                : min(x, 1);
        double rtol = t == Dtype::float16 && o == "sum" ? 1e-3 : 2e-6;
        expect_close(y.to_doubles(), want, rtol, t == Dtype::int32 ? 0 : 1e-4,
                     fmt::format("{} over rows of {} {}", o, L, dtype_name(t)));
      }
    }
  }
  // NaN propagates through max; mean over the last axes of a 3-d array.
  auto v = randoms(3 * 200, -1, 1, 2);
  v[250] = NAN;
  Array x = Array::from_doubles(v, {3, 200}, Dtype::float32);
  auto m = max(x, 1).to_doubles();
  EXPECT_FALSE(std::isnan(m[0]));
  EXPECT_TRUE(std::isnan(m[1]));
  Array x3 = Array::from_doubles(randoms(2 * 8 * 16, -1, 1, 3), {2, 8, 16}, Dtype::float32);
  auto xv = x3.to_doubles();
  std::vector<double> want(2);
  for (int i = 0; i < 256; ++i) want[i / 128] += xv[i] / 128;
  expect_close(mean(x3, {1, 2}).to_doubles(), want, 1e-6, 1e-7, "mean over two trailing axes");
}

TEST(OpsRowReduce, FusedSoftmaxAndLogsumexpBothForms) {
  StreamContext on_cpu(Device::cpu());  // float64 references: a CPU test on every machine
  for (bool coop : {false, true}) {
    ops::set_cooperative_rows_on_cpu(coop);
    for (int64_t L : {1, 7, 64, 333, 5000}) {
      int64_t N = 5;
      auto v = randoms(N * L, -6, 6, L);
      for (int64_t i = 0; i < L; ++i) v[3 * L + i] = -INFINITY;  // a row of -inf
      if (L > 2) v[4 * L + 1] = -INFINITY;                       // one -inf element
      for (Dtype t : {Dtype::float32, Dtype::float64, Dtype::bfloat16}) {
        Array x = Array::from_doubles(v, {N, L}, t);
        auto xv = x.to_doubles();
        std::vector<double> lse(N), sm(N * L);
        for (int64_t r = 0; r < N; ++r) {
          double m = -INFINITY, s = 0;
          for (int64_t i = 0; i < L; ++i) m = std::max(m, xv[r * L + i]);
          double sh = std::isinf(m) ? 0 : m;
          for (int64_t i = 0; i < L; ++i) s += std::exp(xv[r * L + i] - sh);
          lse[r] = std::log(s) + sh;
          for (int64_t i = 0; i < L; ++i) sm[r * L + i] = std::exp(xv[r * L + i] - m) / s;
        }
        std::string what =
            fmt::format("L {} {} {}", L, dtype_name(t), coop ? "cooperative" : "per row");
        double rtol = t == Dtype::bfloat16 ? 1.6e-2 : t == Dtype::float32 ? 1e-5 : 1e-12;
        Array y = logsumexp(x, -1);
        EXPECT_EQ(y.dtype(), t);
        expect_close(y.to_doubles(), lse, rtol, rtol, "logsumexp " + what);
        Array z = softmax(x, -1);
        EXPECT_EQ(z.shape(), x.shape());
        expect_close(z.to_doubles(), sm, rtol, rtol * 1e-2, "softmax " + what);
      }
    }
  }
  ops::set_cooperative_rows_on_cpu(false);
  // Strided input (a transposed view), keepdims, integer input (float32).
  Array base = Array::from_doubles(randoms(6 * 40, -2, 2, 9), {40, 6}, Dtype::float32);
  Array xt = base.transpose();
  auto xv = xt.contiguous().to_doubles();
  std::vector<double> lse(6);
  for (int r = 0; r < 6; ++r) {
    double s = 0;
    for (int i = 0; i < 40; ++i) s += std::exp(xv[r * 40 + i]);
    lse[r] = std::log(s);
  }
  Array y = logsumexp(xt, -1, true);
  EXPECT_EQ(y.shape(), (Shape{6, 1}));
  expect_close(y.to_doubles(), lse, 1e-5, 1e-5, "strided logsumexp");
  EXPECT_EQ(softmax(ones({3, 4}, Dtype::int32), -1).dtype(), Dtype::float32);
}

TEST(OpsRowReduce, SoftmaxLogsumexpGradientsMatchFiniteDifferences) {
  StreamContext on_cpu(Device::cpu());  // float64 references: a CPU test on every machine
  auto v = randoms(3 * 7, -2, 2, 12);
  for (bool log : {false, true}) {
    auto f = [&](const std::vector<double>& x) {
      Array a = Array::from_doubles(x, {3, 7}, Dtype::float64);
      return log ? logsumexp(a, -1, true) : softmax(a, -1);
    };
    Array y = f(v);
    auto p = node_of(y)->pending;
    ASSERT_TRUE(p);
    // Copies: evaluating y (through the gradient) drops the pending op's inputs.
    auto prim = p->primitive;
    auto primals = p->inputs;
    auto cot_v = randoms(y.size(), 0.5, 1.5, 13);
    auto g =
        prim->vjp(primals, {Array::from_doubles(cot_v, y.shape(), Dtype::float64)}, {0}, {y})[0]
            .to_doubles();
    std::vector<double> num(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      auto up = v, down = v;
      up[i] += 1e-6;
      down[i] -= 1e-6;
      auto yu = f(up).to_doubles(), yd = f(down).to_doubles();
      for (size_t j = 0; j < yu.size(); ++j) num[i] += cot_v[j] * (yu[j] - yd[j]) / 2e-6;
    }
    expect_close(g, num, 1e-6, 1e-8, log ? "logsumexp vjp" : "softmax vjp");
    auto tv = randoms(v.size(), -1, 1, 14);
    auto jv =
        prim->jvp(primals, {Array::from_doubles(tv, {3, 7}, Dtype::float64)}, {0})[0].to_doubles();
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < jv.size(); ++i) lhs += cot_v[i] * jv[i];
    for (size_t i = 0; i < g.size(); ++i) rhs += g[i] * tv[i];
    EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::fabs(rhs))) << (log ? "logsumexp jvp" : "softmax jvp");
  }
}

// ---- CUDA translations ----------------------------------------------------------------------

TEST(OpsMatmulKernels, NewKernelsCompileWithNvrtcForSm90) {
  auto call = [](Shape out, Dtype t, std::array<int, 3> grid, int tg) {
    KernelCall c;
    c.output_shapes = {out};
    c.output_dtypes = {t};
    c.grid = {grid[0], grid[1], grid[2]};
    c.threadgroup = {tg, 1, 1};
    return c;
  };
  auto compile = [](const ops::OpKernel& k, const std::vector<Array>& in, const KernelCall& c) {
    return kernel::compile_call_cubin(MetalKernel(k.spec), in, c, "sm_90");
  };
  Array x = Array::from_doubles(randoms(4 * 256, -1, 1, 1), {4, 256}, Dtype::float32);
  int compiled = 0;
  // Row reductions (every op, a 64-bit and a half input) and the fused softmax / logsumexp.
  for (auto [op, in, acc] :
       std::vector<std::tuple<std::string, Dtype, Dtype>>{{"sum", Dtype::float16, Dtype::float32},
                                                          {"max", Dtype::bfloat16, Dtype::float32},
                                                          {"min", Dtype::int64, Dtype::int64},
                                                          {"prod", Dtype::float32, Dtype::float32},
                                                          {"sum", Dtype::uint32, Dtype::uint32}}) {
    // Layouts: 8 one-simdgroup rows per threadgroup with 32-bit indices; 256 threads per row
    // with 64-bit indices.
    for (ops::RowLayout lay : {ops::RowLayout{32, 8, false}, ops::RowLayout{256, 1, true}}) {
      auto k = ops::row_reduce_kernel(op, in, acc, acc, lay);
      std::string why =
          compile(k, {x.astype(in)},
                  call({4, 1}, acc, {lay.threads * lay.rows, 1, 1}, lay.threads * lay.rows));
      if (!why.empty()) GTEST_SKIP() << why;
      ++compiled;
    }
  }
  for (bool log : {false, true})
    for (Dtype t : {Dtype::float32, Dtype::float16, Dtype::bfloat16})
      for (ops::RowLayout lay : {ops::RowLayout{32, 8, false}, ops::RowLayout{256, 1, true}}) {
        auto k = ops::row_softmax_kernel(log, t, Dtype::float32, t, true, lay);
        EXPECT_EQ(compile(k, {x.astype(t)},
                          call(log ? Shape{4, 1} : Shape{4, 256}, t, {lay.threads * lay.rows, 1, 1},
                               lay.threads * lay.rows)),
                  "");
        ++compiled;
      }
  // Quantized kernels: quantize (three outputs), dequantize, the products (both orientations,
  // with and without gather indices), float16 and float32 inputs.
  for (int bits : {4, 8})
    for (Dtype t : {Dtype::float32, Dtype::float16}) {
      Array w = x.astype(t);
      KernelCall c = call({4, 256 * bits / 32}, Dtype::uint32, {16, 1, 1}, 16);
      c.output_shapes = {{4, 256 * bits / 32}, {4, 4}, {4, 4}};
      c.output_dtypes = {Dtype::uint32, t, t};
      EXPECT_EQ(compile(ops::quantize_kernel(t, 64, bits), {w}, c), "");
      auto q = quantize(w, 64, bits);
      eval({q[0], q[1], q[2]});
      EXPECT_EQ(compile(ops::dequantize_kernel(t, 64, bits), {q[0], q[1], q[2]},
                        call({4, 256}, t, {1024, 1, 1}, 256)),
                "");
      Array lhs = Array::from_doubles({0, 0}, {2}, Dtype::uint32);
      for (bool transpose : {true, false})
        for (bool gather : {false, true}) {
          SCOPED_TRACE(fmt::format("bits {} transpose {} gather {}", bits, transpose, gather));
          // w [4, 256] quantized: transpose: N = 4, K = 256; else K = 4, N = 256.
          int64_t K = transpose ? 256 : 4, N = transpose ? 4 : 256;
          Array xx = Array::from_doubles(randoms(3 * K, -1, 1, 2), {1, 3, K}, t);
          std::vector<Array> in{gather ? xx : reshape(xx, {3, K}), q[0], q[1], q[2]};
          if (gather) {
            in = {xx,
                  reshape(q[0], {1, 4, 256 * bits / 32}),
                  reshape(q[1], {1, 4, 4}),
                  reshape(q[2], {1, 4, 4}),
                  lhs,
                  lhs};
            eval(in);
          }
          auto k = ops::qmm_kernel(t, t, t, 64, bits, transpose, gather);
          int64_t gx = transpose ? 32 * N : N;
          EXPECT_EQ(compile(k, in,
                            call(gather ? Shape{2, 3, N} : Shape{3, N}, t,
                                 {static_cast<int>(gx), 3, gather ? 2 : 1}, transpose ? 64 : 256)),
                    "");
          ++compiled;
        }
    }
  EXPECT_GT(compiled, 20);
}

// ---- on CUDA (skipped without a GPU; run by the device script) --------------------------------

TEST(OpsMatmulGpu, MatchTheCpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU";
  StreamContext on_cpu(
      Device::cpu());  // the references on the CPU; GPU arrays are moved explicitly
  std::string why;
  if (!gpu_backend()->blas_available(&why)) GTEST_FAIL() << why;  // the device has the CUDA toolkit
  EXPECT_NE(blas_library(Device::gpu()).find("libcublas"), std::string::npos)
      << blas_library(Device::gpu());
  auto check = [](const Array& got, const Array& want, double tol, const std::string& what) {
    ASSERT_EQ(got.device(), Device::gpu()) << what;
    ASSERT_EQ(got.shape(), want.shape()) << what;
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    expect_close(got.to(Device::cpu()).to_doubles(), want.to_doubles(), tol, tol, what);
  };
  // matmul against the float64 reference (the device may lack the CPU's OpenBLAS).
  auto a = Array::from_doubles(randoms(3 * 70 * 130, -1, 1, 1), {3, 70, 130}, Dtype::float32);
  auto b = Array::from_doubles(randoms(130 * 40, -1, 1, 2), {130, 40}, Dtype::float32);
  auto ag = a.to(Device::gpu()), bg = b.to(Device::gpu());
  auto ref = [](const Array& x, const Array& y, const Array& got, double tol,
                const std::string& what) {
    auto [want, ws] =
        ref_matmul(x.contiguous().to_doubles(), x.shape(), y.contiguous().to_doubles(), y.shape());
    ASSERT_EQ(got.device(), Device::gpu()) << what;
    ASSERT_EQ(got.shape(), ws) << what;
    expect_close(got.to(Device::cpu()).to_doubles(), want, tol, tol, what);
  };
  ref(a, b, matmul(ag, bg), 1e-4, "batched x broadcast matrix");
  ref(swapaxes(a, 1, 2), a, matmul(swapaxes(ag, 1, 2), ag), 1e-4, "transposed");
  ref(a.slice({{0, 3, 2}, {0, 70, 3}, {0, 130, 2}}), b.slice({{0, 130, 2}}),
      matmul(ag.slice({{0, 3, 2}, {0, 70, 3}, {0, 130, 2}}), bg.slice({{0, 130, 2}})), 1e-4,
      "stepped");
  for (Dtype t : {Dtype::float16, Dtype::bfloat16})
    ref(a.astype(t), b.astype(t), matmul(ag.astype(t), bg.astype(t)),
        t == Dtype::float16 ? 4e-3 : 3e-2, fmt::format("matmul {}", dtype_name(t)));
  check(matmul(zeros({2, 0}, Dtype::float32, Device::gpu()),
               zeros({0, 3}, Dtype::float32, Device::gpu())),
        zeros({2, 3}, Dtype::float32), 0, "K = 0");
  // Quantized ops: the same kernels on both devices.
  auto w = Array::from_doubles(randoms(4 * 64 * 256, -1, 1, 3), {4, 64, 256}, Dtype::float32);
  auto q = quantize(w, 64, 4), qg = quantize(w.to(Device::gpu()), 64, 4);
  for (int i = 0; i < 3; ++i) check(qg[i], q[i], 0, "quantize output " + std::to_string(i));
  auto x = Array::from_doubles(randoms(5 * 2 * 256, -1, 1, 4), {5, 2, 256}, Dtype::float32);
  auto xg = x.to(Device::gpu());
  // (Stacked w: x's batch axes broadcast against w's 4 matrices, as matmul's.)
  check(quantized_matmul(xg.slice({{0, 4}}), qg[0], qg[1], qg[2], true, 64, 4),
        quantized_matmul(x.slice({{0, 4}}), q[0], q[1], q[2], true, 64, 4), 1e-4,
        "quantized_matmul 3-d w");
  auto q2 = quantize(w.slice({{0, 1}}).reshape({64, 256}), 32, 8);
  auto q2g = quantize(w.to(Device::gpu()).slice({{0, 1}}).reshape({64, 256}), 32, 8);
  auto x2 = Array::from_doubles(randoms(7 * 64, -1, 1, 5), {7, 64}, Dtype::float32);
  check(quantized_matmul(x2.to(Device::gpu()), q2g[0], q2g[1], q2g[2], false, 32, 8),
        quantized_matmul(x2, q2[0], q2[1], q2[2], false, 32, 8), 1e-4, "not transposed");
  Array li = Array::from_doubles({4, 0, 2}, {3}, Dtype::uint32);
  Array ri = Array::from_doubles({3, 3, 1}, {3}, Dtype::uint32);
  check(
      gather_qmm(xg, qg[0], qg[1], qg[2], li.to(Device::gpu()), ri.to(Device::gpu()), true, 64, 4),
      gather_qmm(x, q[0], q[1], q[2], li, ri, true, 64, 4), 1e-4, "gather_qmm");
  check(dequantize(qg[0], qg[1], qg[2], 64, 4), dequantize(q[0], q[1], q[2], 64, 4), 0,
        "dequantize");
  // Cooperative row reductions and the fused softmax / logsumexp.
  for (int64_t L : {64, 1000, 100000}) {
    auto m = Array::from_doubles(randoms(3 * L, -1, 1, L), {3, L}, Dtype::float32);
    auto mg = m.to(Device::gpu());
    check(sum(mg, 1), sum(m, 1), 1e-5, "sum rows " + std::to_string(L));
    check(max(mg, 1), max(m, 1), 0, "max rows");
    check(min(mg.astype(Dtype::int32), 1), min(m.astype(Dtype::int32), 1), 0, "min int rows");
    check(mean(mg.astype(Dtype::float16), 1), mean(m.astype(Dtype::float16), 1), 2e-3,
          "mean half rows");
    check(softmax(mg, -1), softmax(m, -1), 1e-5, "softmax");
    check(logsumexp(mg, -1), logsumexp(m, -1), 1e-5, "logsumexp");
    check(softmax(mg.astype(Dtype::bfloat16), -1), softmax(m.astype(Dtype::bfloat16), -1), 1.6e-2,
          "softmax bf16");
  }
  check(sum(Array::from_doubles(randoms(1 << 22, -1, 1, 9), {1 << 22}, Dtype::float32)
                .to(Device::gpu())),
        sum(Array::from_doubles(randoms(1 << 22, -1, 1, 9), {1 << 22}, Dtype::float32)), 1e-4,
        "sum all (pieces)");
}
