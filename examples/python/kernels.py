"""The Metal bodies of examples/example_kernels.h as Python strings (the same text; the tests
check that they stay equal). They run unchanged under MLX's mx.fast.metal_kernel."""

# Element-wise exp of a row-contiguous input; T is the compute type (a template argument).
EXP = """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
"""

# The same on a strided input (ensure_row_contiguous=false): elem_to_loc maps the logical index.
EXP_STRIDED = """
    uint elem = thread_position_in_grid.x;
    uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
    T tmp = inp[loc];
    out[elem] = metal::exp(tmp);
"""

# Bilinear grid_sample forward, NHWC input x (B, H, W, C), grid (B, gH, gW, 2) in [-1, 1]
# (align_corners=False, zero padding); one thread per output element (B, gH, gW, C).
# Neighbours outside the image are masked before they are read.
GRID_SAMPLE = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1], W = x_shape[2], C = x_shape[3];
    int gH = grid_shape[1], gW = grid_shape[2];
    int row = W * C;
    int image = H * row;

    uint g = elem / C;  // output pixel (b, gy, gx)
    float ix = ((grid[2 * g] + 1) * W - 1) / 2;
    float iy = ((grid[2 * g + 1] + 1) * H - 1) / 2;
    int x0 = floor(ix), y0 = floor(iy);
    int x1 = x0 + 1, y1 = y0 + 1;
    float fx = ix - x0, fy = iy - y0;

    int b = elem / C / (gH * gW);
    int base = b * image + elem % C;
    bool in_x0 = x0 >= 0 && x0 < W, in_x1 = x1 >= 0 && x1 < W;
    bool in_y0 = y0 >= 0 && y0 < H, in_y1 = y1 >= 0 && y1 < H;
    T v00 = (in_y0 && in_x0) ? x[base + y0 * row + x0 * C] : T(0);
    T v01 = (in_y0 && in_x1) ? x[base + y0 * row + x1 * C] : T(0);
    T v10 = (in_y1 && in_x0) ? x[base + y1 * row + x0 * C] : T(0);
    T v11 = (in_y1 && in_x1) ? x[base + y1 * row + x1 * C] : T(0);
    out[elem] = (1 - fy) * ((1 - fx) * v00 + fx * v01) + fy * ((1 - fx) * v10 + fx * v11);
"""

# The same forward written the way MLX's documentation writes it: it reads the four neighbours
# first and masks them afterwards, so border taps read outside `x` (Metal tolerates it; robust
# mode makes it safe elsewhere and reports the reads).
GRID_SAMPLE_READ_THEN_MASK = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1], W = x_shape[2], C = x_shape[3];
    int gH = grid_shape[1], gW = grid_shape[2];
    int row = W * C;
    int image = H * row;

    uint g = elem / C;
    float ix = ((grid[2 * g] + 1) * W - 1) / 2;
    float iy = ((grid[2 * g + 1] + 1) * H - 1) / 2;
    int x0 = floor(ix), y0 = floor(iy);
    int x1 = x0 + 1, y1 = y0 + 1;
    float fx = ix - x0, fy = iy - y0;

    int b = elem / C / (gH * gW);
    int base = b * image + elem % C;
    T v00 = x[base + y0 * row + x0 * C];
    T v01 = x[base + y0 * row + x1 * C];
    T v10 = x[base + y1 * row + x0 * C];
    T v11 = x[base + y1 * row + x1 * C];
    v00 = (y0 >= 0 && y0 < H && x0 >= 0 && x0 < W) ? v00 : T(0);
    v01 = (y0 >= 0 && y0 < H && x1 >= 0 && x1 < W) ? v01 : T(0);
    v10 = (y1 >= 0 && y1 < H && x0 >= 0 && x0 < W) ? v10 : T(0);
    v11 = (y1 >= 0 && y1 < H && x1 >= 0 && x1 < W) ? v11 : T(0);
    out[elem] = (1 - fy) * ((1 - fx) * v00 + fx * v01) + fy * ((1 - fx) * v10 + fx * v11);
"""

# grid_sample backward (atomic_outputs=True, init_value=0): one thread per (b, gy, gx, c).
# x_grad gets each corner's weight * cotangent with atomic adds; the grid gradient sums the
# channels of one pixel with simd_sum (C a multiple of 32: a simdgroup never spans two pixels)
# and lane 0 of each simdgroup adds it atomically.
GRID_SAMPLE_GRAD = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1], W = x_shape[2], C = x_shape[3];
    int gH = grid_shape[1], gW = grid_shape[2];
    int row = W * C;
    int image = H * row;

    uint g = elem / C;
    float ix = ((grid[2 * g] + 1) * W - 1) / 2;
    float iy = ((grid[2 * g + 1] + 1) * H - 1) / 2;
    int x0 = floor(ix), y0 = floor(iy);
    int x1 = x0 + 1, y1 = y0 + 1;
    float fx = ix - x0, fy = iy - y0;

    int b = elem / C / (gH * gW);
    int base = b * image + elem % C;
    bool in_x0 = x0 >= 0 && x0 < W, in_x1 = x1 >= 0 && x1 < W;
    bool in_y0 = y0 >= 0 && y0 < H, in_y1 = y1 >= 0 && y1 < H;
    float ct = cotangent[elem];

    float v00 = 0, v01 = 0, v10 = 0, v11 = 0;
    if (in_y0 && in_x0) {
      v00 = x[base + y0 * row + x0 * C];
      atomic_fetch_add_explicit(&x_grad[base + y0 * row + x0 * C], (1 - fy) * (1 - fx) * ct, memory_order_relaxed);
    }
    if (in_y0 && in_x1) {
      v01 = x[base + y0 * row + x1 * C];
      atomic_fetch_add_explicit(&x_grad[base + y0 * row + x1 * C], (1 - fy) * fx * ct, memory_order_relaxed);
    }
    if (in_y1 && in_x0) {
      v10 = x[base + y1 * row + x0 * C];
      atomic_fetch_add_explicit(&x_grad[base + y1 * row + x0 * C], fy * (1 - fx) * ct, memory_order_relaxed);
    }
    if (in_y1 && in_x1) {
      v11 = x[base + y1 * row + x1 * C];
      atomic_fetch_add_explicit(&x_grad[base + y1 * row + x1 * C], fy * fx * ct, memory_order_relaxed);
    }
    // d out / d ix and d iy, chained through ix = ((gx + 1) * W - 1) / 2.
    float d_ix = ((1 - fy) * (v01 - v00) + fy * (v11 - v10)) * ct * W / 2;
    float d_iy = ((1 - fx) * (v10 - v00) + fx * (v11 - v01)) * ct * H / 2;
    d_ix = simd_sum(d_ix);
    d_iy = simd_sum(d_iy);
    if (thread_index_in_simdgroup == 0) {
      atomic_fetch_add_explicit(&grid_grad[2 * g], d_ix, memory_order_relaxed);
      atomic_fetch_add_explicit(&grid_grad[2 * g + 1], d_iy, memory_order_relaxed);
    }
"""
