// Core arrays: creation, dtypes, strided views, evaluation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "alloy/alloy.h"
#include "core/host_allocator.h"

using namespace alloy;

namespace {

TEST(Array, DtypesRoundTrip) {
  std::vector<double> v = {-3.5, -1, 0.25, 2, 7.75};
  for (Dtype t : {int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16,
                  float32, float64, complex64, bool_}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<double> in = v;
    if (!is_signed(t))
      for (auto& x : in) x = std::fabs(x);
    Array a = Array::from_doubles(in, {5}, t, Device::cpu());
    auto out = a.to_doubles();
    for (size_t i = 0; i < in.size(); ++i) {
      double want = t == bool_ ? (in[i] != 0) : is_integral(t) ? std::trunc(in[i]) : in[i];
      EXPECT_EQ(out[i], want);  // all values are exact in every float type
    }
    EXPECT_EQ(a.nbytes(), 5 * size_of(t));
  }
  EXPECT_EQ(msl_type_name(float16), "float16_t");
  EXPECT_EQ(msl_type_name(bfloat16), "bfloat16_t");
  EXPECT_EQ(msl_type_name(float32), "float");
  EXPECT_EQ(dtype_from_name("half"), float16);
  EXPECT_THROW(dtype_from_name("float8"), std::invalid_argument);
}

TEST(Array, HalfAndBfloatRoundToNearestEven) {
  // 1 + 2^-11 is halfway between two halfs: ties go to even (1.0); 1 + 3*2^-11 rounds up.
  auto h = Array::from_doubles({1 + std::ldexp(1, -11), 1 + 3 * std::ldexp(1, -11), 70000, 1e-8},
                               {4}, float16, Device::cpu())
               .to_doubles();
  EXPECT_EQ(h[0], 1.0);
  EXPECT_EQ(h[1], 1 + std::ldexp(1, -9));
  EXPECT_TRUE(std::isinf(h[2]));
  EXPECT_EQ(h[3], std::ldexp(1, -24) * std::round(1e-8 / std::ldexp(1, -24)));
  auto b = Array::from_doubles({1 + std::ldexp(1, -8), 3.14159}, {2}, bfloat16, Device::cpu())
               .to_doubles();
  EXPECT_EQ(b[0], 1.0);
  EXPECT_NEAR(b[1], 3.14159, 0.0079);
}

TEST(Array, SlicesAndTransposeAreViews) {
  Array a = arange(24, float32, Device::cpu());
  Array m = Array::from_doubles(a.to_doubles(), {4, 6}, float32, Device::cpu());
  Array s = m.slice({{1, std::nullopt, 2}, {std::nullopt, std::nullopt, -2}});
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_FALSE(s.is_row_contiguous());
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{11, 9, 7, 23, 21, 19}));
  Array t = m.transpose();
  EXPECT_EQ(t.shape(), (Shape{6, 4}));
  EXPECT_EQ(t.strides(), (Strides{1, 6}));
  EXPECT_EQ(t.to_doubles()[1], 6);
  Array c = t.contiguous();
  EXPECT_TRUE(c.is_row_contiguous());
  EXPECT_EQ(c.to_doubles(), t.to_doubles());
  EXPECT_EQ(m.slice({{10, 20}}).size(), 0);
  EXPECT_THROW(m.slice({{0, 1, 0}}), std::invalid_argument);
  EXPECT_THROW(m.transpose({0, 0}), std::invalid_argument);
}

TEST(Array, CreationHelpers) {
  EXPECT_EQ(zeros({2, 2}, int32, Device::cpu()).to_doubles(), (std::vector<double>(4, 0)));
  EXPECT_EQ(full({3}, 2.5, float16, Device::cpu()).to_doubles(), (std::vector<double>(3, 2.5)));
  auto r = random_uniform({1000}, float32, -1, 1, 7, Device::cpu()).to_doubles();
  for (double x : r) EXPECT_TRUE(x >= -1 && x < 1);
  EXPECT_NE(r[0], r[1]);
  EXPECT_EQ(Array(7.5f).item(), 7.5);
  EXPECT_EQ(Array(3).dtype(), int32);
  EXPECT_THROW(arange(5, float32, Device::cpu()).item(), std::invalid_argument);
  EXPECT_THROW(Array::from_doubles({1, 2}, {3}, float32, Device::cpu()), std::invalid_argument);
  EXPECT_THROW(zeros({-1}, float32, Device::cpu()), std::invalid_argument);
}

TEST(Array, ExternalMemoryIsWrappedWithoutCopy) {
  std::vector<float> host = {1, 2, 3, 4, 5, 6};
  bool released = false;
  {
    Array a = Array::from_external(host.data(), {3, 2}, {1, 3}, float32, Device::cpu(),
                                   [&] { released = true; });  // a transposed (2,3) view
    EXPECT_EQ(a.to_doubles(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
    host[1] = 20;
    EXPECT_EQ(a.to_doubles()[2], 20);
    EXPECT_FALSE(released);
  }
  EXPECT_TRUE(released);
}

TEST(Array, DefaultDevice) {
  Device d = default_device();
  EXPECT_EQ(d.type == Device::Type::gpu, gpu_available());
  if (!gpu_available()) {
    EXPECT_THROW(set_default_device(Device::gpu()), std::invalid_argument);
  }
  set_default_device(Device::cpu());
  EXPECT_EQ(default_device(), Device::cpu());
  set_default_device(d);
}

}  // namespace

namespace {
// Blocks of the small (power-of-two, found by index) and large (multiple-of-1-MiB) size classes
// all come back from the cache for the same size, hold what is written to them, and all leave
// with host_empty_cache.
TEST(Array, HostBuffersOfEveryClassAreReused) {
  std::mt19937 rng(5);
  std::vector<int64_t> sizes = {1, 7, 64, 1000, 4096, 70000, (1 << 18) - 16, 3 << 18};
  for (int i = 0; i < 4; ++i)
    sizes.push_back(std::uniform_int_distribution<int64_t>(1, 1 << 19)(rng));
  auto round = [&] {
    for (int64_t n : sizes) {
      std::vector<double> v(static_cast<size_t>(n));
      for (auto& x : v) x = std::uniform_real_distribution<double>(-1, 1)(rng);
      auto a = alloy::Array::from_doubles(v, {n}, alloy::float32, alloy::Device::cpu());
      auto got = a.to_doubles();
      ASSERT_EQ(got.size(), v.size());
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(v[i])) << n;
    }
  };
  round();
  auto before = alloy::host_allocator_stats();
  round();
  auto after = alloy::host_allocator_stats();
  EXPECT_GE(after.cache_hits, before.cache_hits + sizes.size());
  EXPECT_GT(after.cached_bytes, 0u);
  alloy::host_empty_cache();
  EXPECT_EQ(alloy::host_allocator_stats().cached_bytes, 0u);
  round();  // fresh blocks after the cache was emptied
}

TEST(Array, HostBuffersAreReused) {
  auto before = alloy::host_allocator_stats();
  { auto a = alloy::zeros({1 << 16}, alloy::float32, alloy::Device::cpu()); }
  { auto b = alloy::zeros({1 << 16}, alloy::float32, alloy::Device::cpu()); }
  auto after = alloy::host_allocator_stats();
  EXPECT_GE(after.cache_hits, before.cache_hits + 1);
  alloy::host_empty_cache();
  EXPECT_EQ(alloy::host_allocator_stats().cached_bytes, 0u);
}
}  // namespace
