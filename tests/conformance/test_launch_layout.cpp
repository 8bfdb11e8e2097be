// Conformance: how a metal_kernel call is laid out on the device must not show in its results.
// On CUDA, kernels whose threads share nothing run several threadgroups per block when the grid
// is large (prelude/cuda/abi.h), and the `x_shape` / `x_strides` / `x_ndim` parameters travel in
// the launch's parameter block until it is full, then in device memory. These grids are large
// enough for the GPU to coarsen them (a few waves of blocks on a 132-multiprocessor H100/H200),
// with partial groups at the edges; each thread writes the attributes it sees.
#include <algorithm>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// 1-D: 8448 whole groups of 256 and a partial one of 77 threads.
TEST(ConformanceLaunchLayout, ManyGroups1D) {
  constexpr int TG = 256, N = 8448 * TG + 77, K = 5;
  auto k = metal_kernel("layout_many_1d", {"x"}, {"out"}, R"MSL(
    uint gid = thread_position_in_grid.x;
    device int* o = out + gid * 5;
    o[0] = int(gid) + (x[gid] > 2.0f ? 1 : 0);
    o[1] = threadgroup_position_in_grid.x;
    o[2] = thread_position_in_threadgroup.x;
    o[3] = threads_per_threadgroup.x;
    o[4] = threadgroups_per_grid.x;
  )MSL");
  auto x = random_array({N}, float32, -1, 1, 2001, Device::cpu());
  std::vector<double> ref;
  ref.reserve(size_t(N) * K);
  for (int g = 0; g < N; ++g) {
    int group = g / TG;
    ref.insert(ref.end(), {double(g), double(group), double(g % TG),
                           double(std::min(TG, N - group * TG)), double(ceil_div(N, TG))});
  }
  run_kernel(k, {x}, make_call({{N, K}}, {int32}, {N, 1, 1}, {TG, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"thread_position_in_grid.x", "threadgroup_position_in_grid.x",
                  "thread_position_in_threadgroup.x", "threads_per_threadgroup.x",
                  "threadgroups_per_grid.x"},
                 0, 0);
  });
}

// 2-D: 32 x 276 groups of 32 x 8, partial in x (11 wide) and in y (5 high); blocks run groups
// along x only, so y stays one group per block row.
TEST(ConformanceLaunchLayout, ManyGroups2DPartialEdges) {
  constexpr int GX = 1003, GY = 2205, TX = 32, TY = 8, K = 9;
  auto k = metal_kernel("layout_many_2d", {"x"}, {"out"}, R"MSL(
    uint2 p = thread_position_in_grid.xy;
    uint row = p.y * threads_per_grid.x + p.x;
    device int* o = out + row * 9;
    o[0] = int(p.x) + (x[row] > 2.0f ? 1 : 0);
    o[1] = p.y;
    o[2] = threadgroup_position_in_grid.x;
    o[3] = threadgroup_position_in_grid.y;
    o[4] = threads_per_threadgroup.x;
    o[5] = threads_per_threadgroup.y;
    o[6] = thread_index_in_threadgroup;
    o[7] = threadgroups_per_grid.x;
    o[8] = threadgroups_per_grid.y;
  )MSL");
  auto x = random_array({GX * GY}, float32, -1, 1, 2002, Device::cpu());
  std::vector<double> ref;
  ref.reserve(size_t(GX) * GY * K);
  for (int y = 0; y < GY; ++y)
    for (int xx = 0; xx < GX; ++xx) {
      int sx = std::min(TX, GX - xx / TX * TX), sy = std::min(TY, GY - y / TY * TY);
      ref.insert(ref.end(), {double(xx), double(y), double(xx / TX), double(y / TY), double(sx),
                             double(sy), double(xx % TX + sx * (y % TY)), double(ceil_div(GX, TX)),
                             double(ceil_div(GY, TY))});
    }
  run_kernel(k, {x}, make_call({{GX * GY, K}}, {int32}, {GX, GY, 1}, {TX, TY, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"thread_position_in_grid.x", ".y", "threadgroup_position_in_grid.x", ".y",
                  "threads_per_threadgroup.x", ".y", "thread_index_in_threadgroup",
                  "threadgroups_per_grid.x", ".y"},
                 0, 0);
  });
}

// An element-wise kernel over a large grid with an early return: every element written once,
// whichever groups share a block.
TEST(ConformanceLaunchLayout, ManyGroupsEarlyReturn) {
  constexpr int N = 3000000, TG = 128;
  auto k = metal_kernel("layout_early_return", {"a", "b"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    if (i >= uint(a_shape[0])) return;
    out[i] = a[i] * b[i] + float(i % 7u);
  )MSL");
  auto a = random_array({N - 5}, float32, -2, 2, 2003, Device::cpu());
  auto b = random_array({N - 5}, float32, -2, 2, 2004, Device::cpu());
  auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  std::vector<double> ref(N - 5);
  for (int i = 0; i < N - 5; ++i) ref[i] = f32(f32(double(av[i]) * bv[i]) + i % 7);
  run_kernel(k, {a, b}, make_call({{N - 5}}, {float32}, {N, 1, 1}, {TG, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-6); });
}

// Shape parameters of many 8-D inputs: more than the launch's parameter block holds, so the
// last inputs' parameters go through device memory. Each thread sums input i's
// shape[d] * 1000 + strides[d] over d, plus ndim and its first element.
TEST(ConformanceLaunchLayout, ShapeParamsBeyondTheParameterBlock) {
  constexpr int NI = 11;  // 44 buffers + out: at most 48 on the GPU
  std::vector<std::string> names;
  for (int i = 0; i < NI; ++i) names.push_back("x" + std::to_string(i));
  std::string body = "    uint i = thread_position_in_grid.x;\n    float s = 0.0f;\n";
  for (int i = 0; i < NI; ++i)
    body += "    if (i == " + std::to_string(i) + "u) { for (int d = 0; d < x" + std::to_string(i) +
            "_ndim; ++d) s += float(x" + std::to_string(i) + "_shape[d] * 1000 + x" +
            std::to_string(i) + "_strides[d]); s += float(x" + std::to_string(i) + "_ndim) + x" +
            std::to_string(i) + "[0]; }\n";
  // A scalar after them: its bytes no longer fit in the parameter block either.
  names.push_back("scale");
  body += "    out[i] = s * scale;\n";
  auto k = metal_kernel("layout_many_shapes", names, {"out"}, body);
  std::vector<Array> inputs;
  std::vector<double> ref;
  for (int i = 0; i < NI; ++i) {
    // 8-D shapes that differ per input: 1..3 along each axis.
    Shape shape;
    for (int d = 0; d < 8; ++d) shape.push_back(1 + (i + d) % 3);
    Array a = random_array(shape, float32, -1, 1, 2100 + i, Device::cpu());
    double s = 0;
    int64_t stride = 1;
    std::vector<int64_t> strides(8);
    for (int d = 7; d >= 0; --d) {
      strides[d] = stride;
      stride *= shape[d];
    }
    for (int d = 0; d < 8; ++d) s += double(shape[d]) * 1000 + double(strides[d]);
    s += 8 + a.to_vector<float>()[0];
    ref.push_back(f32(s));
    inputs.push_back(a);
  }
  inputs.push_back(Array(0.5f));
  for (auto& r : ref) r *= 0.5;
  run_kernel(k, inputs, make_call({{NI}}, {float32}, {NI, 1, 1}, {NI, 1, 1}),
             [&](auto& o) { expect_close(o[0], ref, 1e-6, 1e-3); });
}

// Scalars and arrays of fewer than 8 elements are `constant` in the signature. From the host they
// travel with a GPU launch; already on the device they are read where they are.
TEST(ConformanceLaunchLayout, SmallInputsFromHostAndDevice) {
  constexpr int N = 4096;
  auto k = metal_kernel("layout_small_inputs", {"x", "scale", "coef", "flag"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    float v = x[i] * scale;
    for (int d = 0; d < 5; ++d) v += coef[d] * float(d + 1);
    out[i] = flag ? v : -v;
  )MSL");
  auto x = random_array({N}, float32, -1, 1, 2201, Device::cpu());
  auto coef = random_array({5}, float32, -1, 1, 2202, Device::cpu());
  auto xv = x.to_vector<float>(), cv = coef.to_vector<float>();
  const float scale = 1.75f;
  std::vector<double> ref(N);
  for (int i = 0; i < N; ++i) {
    double v = double(xv[i]) * scale;
    for (int d = 0; d < 5; ++d) v += double(cv[d]) * (d + 1);
    ref[i] = -v;
  }
  KernelCall call = make_call({{N}}, {float32}, {N, 1, 1}, {256, 1, 1});
  run_kernel(k, {x, Array(scale), coef, Array(false)}, call,
             [&](auto& o) { expect_close(o[0], ref, 1e-5, 1e-5); });
  if (!gpu_available()) return;
  // The same small inputs made on the GPU.
  auto on_gpu = [](const Array& a) { return a.to(Device::gpu()); };
  KernelCall gc = call;
  gc.device = Device::gpu();
  poison(gc);
  auto out = k({on_gpu(x), on_gpu(Array(scale)), on_gpu(coef), on_gpu(Array(false))}, gc);
  expect_close(out[0], ref, 1e-5, 1e-5);
}

}  // namespace
