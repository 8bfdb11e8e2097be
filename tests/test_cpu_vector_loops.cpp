// Loop-mode kernels on the CPU run as vectorised thread loops (prelude/entry.h
// cpu_for_each_thread): math through glibc's libmvec lanes (prelude/cpu/target.h), half <-> float
// through branch-free conversions. These tests check what the vector forms must keep: Metal's
// precise error bounds and special values in every math mode, bit-exact half conversions (every
// half, round-to-nearest-even ties, overflow, subnormals, NaN payloads), and ids/partial groups.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "alloy/kernel.h"
#include "core/half_convert.h"

namespace alloy {
namespace {

struct Fn {
  const char* name;
  double (*ref)(double);
  double lo, hi;  // random inputs
};

// Unary float functions that the CPU maps to libmvec lanes, with float64 references. Metal's
// precise bounds for these are 4 ulp or more (MSL specification, "Math functions": e.g. exp, log,
// sin: 4 ulp; tan 6; pow 16).
const Fn kFns[] = {
    {"exp", [](double x) { return std::exp(x); }, -90, 89},
    {"exp2", [](double x) { return std::exp2(x); }, -130, 128},
    {"exp10", [](double x) { return std::pow(10.0, x); }, -38, 38},
    {"log", [](double x) { return std::log(x); }, 1e-30, 1e30},
    {"log2", [](double x) { return std::log2(x); }, 1e-30, 1e30},
    {"log10", [](double x) { return std::log10(x); }, 1e-30, 1e30},
    {"sin", [](double x) { return std::sin(x); }, -1e4, 1e4},
    {"cos", [](double x) { return std::cos(x); }, -1e4, 1e4},
    {"tan", [](double x) { return std::tan(x); }, -100, 100},
    {"asin", [](double x) { return std::asin(x); }, -1, 1},
    {"acos", [](double x) { return std::acos(x); }, -1, 1},
    {"atan", [](double x) { return std::atan(x); }, -1e3, 1e3},
    {"sinh", [](double x) { return std::sinh(x); }, -80, 80},
    {"cosh", [](double x) { return std::cosh(x); }, -80, 80},
    {"tanh", [](double x) { return std::tanh(x); }, -20, 20},
    {"asinh", [](double x) { return std::asinh(x); }, -1e6, 1e6},
    {"acosh", [](double x) { return std::acosh(x); }, 1, 1e6},
    {"atanh", [](double x) { return std::atanh(x); }, -0.999, 0.999},
};

double ulp_of(double ref) {
  float f = static_cast<float>(ref);
  if (!std::isfinite(f)) f = std::numeric_limits<float>::max();
  f = std::fabs(f);
  float next = std::nextafter(f, std::numeric_limits<float>::infinity());
  return std::max<double>(next - f, std::numeric_limits<float>::denorm_min());
}

// The inputs: specials first (they land in the first lanes of a vector), then random values.
std::vector<float> inputs_for(const Fn& f, int n, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {-inf,   inf,     std::nanf(""), 0.0f,    -0.0f, 1.0f,    -1.0f, 0.5f,
                          100.0f, -100.0f, 1e-40f,        -1e-40f, 88.8f, -104.0f, 1e30f, -1e30f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(f.lo, f.hi);
  while (static_cast<int>(v.size()) < n) v.push_back(static_cast<float>(u(rng)));
  return v;
}

void check_math(const std::string& mode) {
  const int n = 4096 + 37;  // not a multiple of the group (a partial last group) nor of 16
  std::string body = "uint i = thread_position_in_grid.x;\n";
  std::vector<std::string> outs;
  for (const Fn& f : kFns) {
    body += std::string("out_") + f.name + "[i] = metal::" + f.name + "(inp_" + f.name + "[i]);\n";
    outs.push_back(std::string("out_") + f.name);
  }
  std::vector<std::string> ins;
  std::vector<Array> arrays;
  std::vector<std::vector<float>> xs;
  uint32_t seed = 1;
  for (const Fn& f : kFns) {
    ins.push_back(std::string("inp_") + f.name);
    xs.push_back(inputs_for(f, n, seed++));
    arrays.push_back(Array::from_vector(xs.back(), {n}, float32, Device::cpu()));
  }
  auto k =
      metal_kernel("vector_math_" + mode, ins, outs, body, "", true, false, {{"math_mode", mode}});
  KernelCall call;
  call.output_shapes.assign(outs.size(), Shape{n});
  call.output_dtypes.assign(outs.size(), float32);
  call.grid = {n, 1, 1};
  call.threadgroup = {256, 1, 1};
  call.init_value = std::nan("");  // poisoned outputs
  call.device = Device::cpu();
  auto results = k(arrays, call);
  for (size_t j = 0; j < std::size(kFns); ++j) {
    const Fn& f = kFns[j];
    auto got = results[j].to_vector<float>();
    for (int i = 0; i < n; ++i) {
      double x = xs[j][i];
      double ref = f.ref(x);
      double g = got[i];
      if (std::isnan(ref)) {
        EXPECT_TRUE(std::isnan(g)) << mode << " " << f.name << "(" << x << ") = " << g;
        continue;
      }
      float rf = static_cast<float>(ref);
      if (std::isinf(rf)) {  // overflows in float: inf of the same sign
        EXPECT_EQ(g, rf) << mode << " " << f.name << "(" << x << ")";
        continue;
      }
      double err = std::fabs(g - ref) / ulp_of(ref);
      // Metal's fast-math bound for exp, exp2, exp10: 3 + floor(|2x|) ulp.
      bool fast_exp = mode == "fast" && std::string(f.name).starts_with("exp");
      double bound = fast_exp ? 3 + std::floor(std::fabs(2 * x)) : 4.0;
      EXPECT_LE(err, bound) << mode << " " << f.name << "(" << x << ") = " << g << ", want " << ref;
    }
    // exp(-inf) == 0 in every mode: online softmax starts from -INFINITY.
    if (std::string(f.name).starts_with("exp")) {
      EXPECT_EQ(got[0], 0.0f) << mode << " " << f.name << "(-inf)";
      EXPECT_EQ(got[1], std::numeric_limits<float>::infinity()) << mode << " " << f.name;
    }
  }
}

TEST(CpuVectorLoops, MathWithinMetalPreciseBoundsSafe) {
  check_math("safe");
}

TEST(CpuVectorLoops, MathWithinMetalPreciseBoundsFast) {
  check_math("fast");
}

// Every half: half -> float in a loop-mode kernel equals the host's exact conversion, bit for
// bit (NaNs come out quiet with their payload, as from the F16C instructions).
TEST(CpuVectorLoops, EveryHalfToFloatIsExact) {
  const int n = 65536;
  std::vector<uint16_t> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<uint16_t>(i);
  auto k = metal_kernel("h2f", {"inp"}, {"out"},
                        "uint i = thread_position_in_grid.x; out[i] = float(inp[i]);");
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float32};
  call.grid = {n, 1, 1};
  call.init_value = 12345.0;
  call.device = Device::cpu();
  // 512 threads: whole vector iterations; 61: each group's loop also ends in the narrower vector
  // forms (16 and 8 lanes), which call other vector variants of the conversion.
  for (int tg : {512, 61}) {
    call.threadgroup = {tg, 1, 1};
    auto out =
        k({Array::from_vector(h, {n}, float16, Device::cpu())}, call)[0].to_vector<uint32_t>();
    int bad = 0;
    for (int i = 0; i < n && bad < 10; ++i) {
      float want = detail::f16_to_f32(h[i]);
      uint32_t wb;
      std::memcpy(&wb, &want, 4);
      if (out[i] != wb) {
        ++bad;
        ADD_FAILURE() << "group " << tg << ": half 0x" << std::hex << i << " -> 0x" << out[i]
                      << ", want 0x" << wb;
      }
    }
  }
}

// float -> half: round to nearest even at every exponent (ties both ways), the overflow threshold
// (65520 rounds to inf, the float below it to 65504), subnormal halves and their ties, NaN
// payloads, infinities, and random floats: equal to the host's exact conversion.
TEST(CpuVectorLoops, FloatToHalfRoundsLikeTheHost) {
  std::vector<float> xs = {0.0f,         -0.0f,  65504.0f, 65519.996f, 65520.0f, -65520.0f,
                           1e-8f,        -1e-8f, 6.1e-5f,  5.96e-8f,   2.98e-8f, 2.9802326e-8f,
                           8.940697e-8f, 1e-30f, 1e30f,    -1e30f};
  const float inf = std::numeric_limits<float>::infinity();
  xs.push_back(inf);
  xs.push_back(-inf);
  for (uint32_t payload : {0x7fc00000u, 0x7fa00001u, 0xffc12345u, 0x7f800001u}) {
    float f;
    std::memcpy(&f, &payload, 4);
    xs.push_back(f);
  }
  // Exact ties between two halves (half ulp at 11 bits) and their neighbours, every exponent.
  for (int e = -24; e <= 15; ++e) {
    for (int m : {0, 1, 2, 3, 1023, 1024, 2045, 2046, 2047}) {
      double v = std::ldexp(1024.0 + m * 0.5 + 0.25, e - 10);
      xs.push_back(static_cast<float>(v));
      xs.push_back(static_cast<float>(std::ldexp(1024.0 + m + 0.5, e - 10)));
      xs.push_back(-static_cast<float>(std::ldexp(1024.0 + m + 0.5, e - 10)));
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  while (xs.size() < 20000) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  const int n = static_cast<int>(xs.size());
  auto k = metal_kernel("f2h", {"inp"}, {"out"},
                        "uint i = thread_position_in_grid.x; out[i] = half(inp[i]);");
  KernelCall call;
  call.output_shapes = {{n}};
  call.output_dtypes = {float16};
  call.grid = {n, 1, 1};
  call.init_value = 3.0;
  call.device = Device::cpu();
  // 256 threads: whole vector iterations (32 lanes with AVX-512); 61: the loops also end in
  // 16- and 8-lane forms, which call the other vector variants of the conversion.
  for (int tg : {256, 61}) {
    call.threadgroup = {tg, 1, 1};
    auto out =
        k({Array::from_vector(xs, {n}, float32, Device::cpu())}, call)[0].to_vector<uint16_t>();
    int bad = 0;
    for (int i = 0; i < n && bad < 10; ++i) {
      uint16_t want = detail::f32_to_f16(xs[i]);
      if (out[i] != want) {
        ++bad;
        ADD_FAILURE() << "group " << tg << ": float " << xs[i] << " -> half 0x" << std::hex
                      << out[i] << ", want 0x" << want;
      }
    }
  }
}

// A loop over a 3-D group with partial groups at every edge: each thread writes its ids where
// the loop's grid-position induction variable could go wrong (offset groups, partial rows).
TEST(CpuVectorLoops, IdsOfPartialThreeDimensionalGroups) {
  const int gx = 37, gy = 5, gz = 3;
  auto k = metal_kernel("ids3", {"inp"}, {"out"}, R"(
    uint3 p = thread_position_in_grid;
    uint3 l = thread_position_in_threadgroup;
    uint3 s = threads_per_threadgroup;
    uint idx = (p.z * 5 + p.y) * 37 + p.x;
    out[idx] = inp[0] + float(((l.z * s.y + l.y) * s.x + l.x) * 1000 + thread_index_in_threadgroup);
  )");
  KernelCall call;
  call.output_shapes = {{gx * gy * gz}};
  call.output_dtypes = {float32};
  call.grid = {gx, gy, gz};
  call.threadgroup = {16, 2, 2};
  call.init_value = -1.0;
  call.device = Device::cpu();
  auto out =
      k({Array::from_vector(std::vector<float>{0.25f}, {1}, float32, Device::cpu())}, call)[0]
          .to_vector<float>();
  for (int z = 0; z < gz; ++z)
    for (int y = 0; y < gy; ++y)
      for (int x = 0; x < gx; ++x) {
        int sx = std::min(16, gx - x / 16 * 16), sy = std::min(2, gy - y / 2 * 2);
        int lid = ((z % 2) * sy + y % 2) * sx + x % 16;
        float want = 0.25f + static_cast<float>(lid * 1000 + lid);
        EXPECT_EQ(out[(z * gy + y) * gx + x], want) << x << "," << y << "," << z;
      }
}

// A kernel that reads only its grid position (and grid-wide values) runs a chunk of groups per
// library call (alloy_groups_<i>, 16384 threads a chunk; the thread pool splits the range
// anywhere), each x row of them as one loop (msl/target.cpp merged_groups, cpu_for_each_run):
// every element exactly once (the output starts at 7 and is added to), with 8x2x2 groups
// partial in each dimension of a 1001x7x5 grid, 1512 groups in several chunks, and a
// threadgroup array in the body.
TEST(CpuVectorLoops, MergedGroupRunsCoverTheGrid) {
  const int gx = 1001, gy = 7, gz = 5;
  auto k = metal_kernel("merged_runs", {"inp"}, {"out"}, R"(
    uint3 p = thread_position_in_grid;
    uint3 n = threads_per_grid;
    threadgroup uint scratch[4];
    uint idx = (p.z * n.y + p.y) * n.x + p.x;
    scratch[0] = idx;
    out[idx] += inp[0] + p.x + 1000u * (p.y + 10u * p.z) + 100000000u * threadgroups_per_grid.x;
  )");
  KernelCall call;
  call.output_shapes = {{gx * gy * gz}};
  call.output_dtypes = {uint32};
  call.grid = {gx, gy, gz};
  call.threadgroup = {8, 2, 2};
  call.init_value = 7;
  call.device = Device::cpu();
  auto in = Array::from_vector(std::vector<uint32_t>{3}, {1}, uint32, Device::cpu());
  for (int rep = 0; rep < 2; ++rep) {
    auto out = k({in}, call)[0].to_vector<uint32_t>();
    for (int z = 0; z < gz; ++z)
      for (int y = 0; y < gy; ++y)
        for (int x = 0; x < gx; ++x)
          ASSERT_EQ(out[(size_t(z) * gy + y) * gx + x],
                    7u + 3u + x + 1000u * (y + 10u * z) + 100000000u * 126u)
              << x << "," << y << "," << z;
  }
}

}  // namespace
}  // namespace alloy
