#include "conformance/harness.h"

#include <fmt/format.h>

#include <cstdio>
#include <random>

#include "kernel/custom_kernel.h"

namespace conformance {

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (gpu_available()) d.push_back(Device::gpu());
  return d;
}

std::string nvrtc_compile(const MetalKernel& k, const std::vector<Array>& inputs,
                          const KernelCall& call) {
  return alloy::kernel::compile_call_cubin(k, inputs, call, "sm_90");
}

void poison(KernelCall& call) {
  bool all_float = true;
  for (auto d : call.output_dtypes)
    if (!is_floating(d) || d == Dtype::complex64) all_float = false;
  call.init_value = all_float ? std::numeric_limits<double>::quiet_NaN() : 90.0;
}

double tolerance(Dtype dtype) {
  switch (dtype) {
    case Dtype::float16:
      return 2e-3;
    case Dtype::bfloat16:
      return 1.6e-2;
    case Dtype::float32:
    case Dtype::complex64:
      return 2e-5;
    case Dtype::float64:
      return 1e-12;
    default:
      return 0;
  }
}

void expect_close(const Array& actual, const std::vector<double>& expected, double rtol,
                  double atol) {
  auto got = actual.to_doubles();
  ASSERT_EQ(got.size(), expected.size());
  if (rtol < 0) rtol = tolerance(actual.dtype());
  if (atol < 0) atol = rtol;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = expected[i], g = got[i];
    bool ok = std::isnan(e)
                  ? std::isnan(g)
                  : (std::isinf(e) ? g == e : std::fabs(g - e) <= atol + rtol * std::fabs(e));
    if (!ok && bad++ < 5) ADD_FAILURE() << fmt::format("element {}: got {}, expected {}", i, g, e);
  }
  EXPECT_EQ(bad, 0) << bad << " of " << got.size() << " elements differ";
}

void expect_equal(const Array& actual, const std::vector<double>& expected) {
  expect_close(actual, expected, 0, 0);
}

std::vector<double> random_values(size_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

Array random_array(const Shape& shape, Dtype dtype, double lo, double hi, uint64_t seed,
                   Device device) {
  size_t n = 1;
  for (auto s : shape) n *= static_cast<size_t>(s);
  auto v = random_values(n, lo, hi, seed);
  if (!is_floating(dtype))
    for (auto& x : v) x = std::floor(x);
  return Array::from_doubles(v, shape, dtype, device);
}

void for_each_device(const std::function<void(Device)>& body) {
  for (auto d : devices()) {
    SCOPED_TRACE("device " + d.str());
    body(d);
  }
}

void run_kernel(const MetalKernel& k, const std::vector<Array>& inputs, KernelCall call,
                const std::function<void(const std::vector<Array>&)>& check) {
  if (!call.init_value) poison(call);
  for_each_device([&](Device d) {
    call.device = d;
    std::vector<Array> outs;
    try {
      outs = k(inputs, call);
      eval(outs);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "on " << d.str() << ": " << e.what();
      return;
    }
    check(outs);
  });
  call.device.reset();
  try {
    std::string skipped = nvrtc_compile(k, inputs, call);
    if (!skipped.empty()) std::printf("NVRTC check skipped: %s\n", skipped.c_str());
  } catch (const std::exception& e) {
    ADD_FAILURE() << "NVRTC (sm_90): " << e.what();
  }
}

KernelCall make_call(std::vector<Shape> shapes, std::vector<Dtype> dtypes, Dims grid, Dims tg,
                     TemplateArgs targs) {
  KernelCall c;
  c.output_shapes = std::move(shapes);
  c.output_dtypes = std::move(dtypes);
  c.grid = grid;
  c.threadgroup = tg;
  c.template_args = std::move(targs);
  return c;
}

void expect_table(const Array& out, const std::vector<double>& expected,
                  const std::vector<std::string>& names, double rtol, double atol) {
  auto got = out.to_doubles();
  ASSERT_EQ(got.size(), expected.size());
  if (rtol < 0) rtol = tolerance(out.dtype());
  if (atol < 0) atol = rtol;
  size_t cols = names.size();
  for (size_t c = 0; c < cols; ++c) {
    int bad = 0;
    for (size_t i = c; i < got.size(); i += cols) {
      double e = expected[i], g = got[i];
      bool ok = std::isnan(e)
                    ? std::isnan(g)
                    : (std::isinf(e) ? g == e : std::fabs(g - e) <= atol + rtol * std::fabs(e));
      if (!ok && bad++ == 0)
        ADD_FAILURE() << names[c] << " (row " << i / cols << "): got " << g << ", expected " << e;
    }
    if (bad > 1) ADD_FAILURE() << names[c] << ": " << bad << " rows differ";
  }
}

std::vector<double> round_to(Dtype dtype, const std::vector<double>& v) {
  return Array::from_doubles(v, {static_cast<int64_t>(v.size())}, dtype, Device::cpu())
      .to_doubles();
}
double round_to(Dtype dtype, double v) {
  return round_to(dtype, std::vector<double>{v})[0];
}

}  // namespace conformance
