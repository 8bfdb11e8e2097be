// float64 references for the example kernels (examples/example_kernels.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace alloy::examples {

// Bilinear grid_sample, NHWC, align_corners=False, zero padding.
struct GridSampleDims {
  int64_t B, H, W, C, gH, gW;
};

inline std::vector<double> grid_sample_ref(const std::vector<double>& x,
                                           const std::vector<double>& grid, GridSampleDims d) {
  std::vector<double> out(d.B * d.gH * d.gW * d.C);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t p = 0; p < d.gH * d.gW; ++p) {
      int64_t g = b * d.gH * d.gW + p;
      double ix = ((grid[2 * g] + 1) * d.W - 1) / 2, iy = ((grid[2 * g + 1] + 1) * d.H - 1) / 2;
      int64_t x0 = static_cast<int64_t>(std::floor(ix)), y0 = static_cast<int64_t>(std::floor(iy));
      double fx = ix - x0, fy = iy - y0;
      for (int64_t c = 0; c < d.C; ++c) {
        auto at = [&](int64_t yy, int64_t xx) {
          if (yy < 0 || yy >= d.H || xx < 0 || xx >= d.W) return 0.0;
          return x[((b * d.H + yy) * d.W + xx) * d.C + c];
        };
        out[g * d.C + c] = (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x0 + 1)) +
                           fy * ((1 - fx) * at(y0 + 1, x0) + fx * at(y0 + 1, x0 + 1));
      }
    }
  return out;
}

inline void grid_sample_grad_ref(const std::vector<double>& x, const std::vector<double>& grid,
                                 const std::vector<double>& cot, GridSampleDims d,
                                 std::vector<double>& x_grad, std::vector<double>& grid_grad) {
  x_grad.assign(x.size(), 0.0);
  grid_grad.assign(grid.size(), 0.0);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t p = 0; p < d.gH * d.gW; ++p) {
      int64_t g = b * d.gH * d.gW + p;
      double ix = ((grid[2 * g] + 1) * d.W - 1) / 2, iy = ((grid[2 * g + 1] + 1) * d.H - 1) / 2;
      int64_t x0 = static_cast<int64_t>(std::floor(ix)), y0 = static_cast<int64_t>(std::floor(iy));
      double fx = ix - x0, fy = iy - y0;
      for (int64_t c = 0; c < d.C; ++c) {
        double ct = cot[g * d.C + c];
        auto idx = [&](int64_t yy, int64_t xx) -> int64_t {
          if (yy < 0 || yy >= d.H || xx < 0 || xx >= d.W) return -1;
          return ((b * d.H + yy) * d.W + xx) * d.C + c;
        };
        int64_t i00 = idx(y0, x0), i01 = idx(y0, x0 + 1), i10 = idx(y0 + 1, x0),
                i11 = idx(y0 + 1, x0 + 1);
        double v00 = i00 < 0 ? 0 : x[i00], v01 = i01 < 0 ? 0 : x[i01];
        double v10 = i10 < 0 ? 0 : x[i10], v11 = i11 < 0 ? 0 : x[i11];
        if (i00 >= 0) x_grad[i00] += (1 - fy) * (1 - fx) * ct;
        if (i01 >= 0) x_grad[i01] += (1 - fy) * fx * ct;
        if (i10 >= 0) x_grad[i10] += fy * (1 - fx) * ct;
        if (i11 >= 0) x_grad[i11] += fy * fx * ct;
        grid_grad[2 * g] += ((1 - fy) * (v01 - v00) + fy * (v11 - v10)) * ct * d.W / 2;
        grid_grad[2 * g + 1] += ((1 - fx) * (v10 - v00) + fx * (v11 - v01)) * ct * d.H / 2;
      }
    }
}

}  // namespace alloy::examples
