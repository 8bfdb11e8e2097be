"""grid_sample backward with atomic outputs (atomic_outputs=True, init_value=0): the input
gradient is accumulated with atomic adds, the grid gradient with simd_sum over the channels of a
pixel; checked against NumPy.

    python examples/python/grid_sample_grad.py [--device cpu|gpu]
"""

import argparse
import sys

import numpy as np

import alloy
from kernels import GRID_SAMPLE_GRAD


def grid_sample_grad_reference(x, grid, ct):
    """float64 NumPy reference: (d loss / d x, d loss / d grid) for the cotangent `ct`."""
    B, H, W, C = x.shape
    x64, ct = x.astype(np.float64), ct.astype(np.float64)
    ix = ((grid[..., 0].astype(np.float64) + 1) * W - 1) / 2
    iy = ((grid[..., 1].astype(np.float64) + 1) * H - 1) / 2
    x0, y0 = np.floor(ix).astype(int), np.floor(iy).astype(int)
    fx, fy = ix - x0, iy - y0
    b = np.broadcast_to(np.arange(B)[:, None, None], x0.shape)
    x_grad = np.zeros(x.shape)
    values = []
    for dy, dx, w in ((0, 0, (1 - fy) * (1 - fx)), (0, 1, (1 - fy) * fx),
                      (1, 0, fy * (1 - fx)), (1, 1, fy * fx)):
        yy, xx = y0 + dy, x0 + dx
        inside = (yy >= 0) & (yy < H) & (xx >= 0) & (xx < W)
        yy, xx = np.clip(yy, 0, H - 1), np.clip(xx, 0, W - 1)
        np.add.at(x_grad, (b, yy, xx), (w * inside)[..., None] * ct)
        values.append(x64[b, yy, xx] * inside[..., None])
    v00, v01, v10, v11 = values
    fx, fy = fx[..., None], fy[..., None]
    d_ix = ((1 - fy) * (v01 - v00) + fy * (v11 - v10)) * ct * W / 2
    d_iy = ((1 - fx) * (v10 - v00) + fx * (v11 - v01)) * ct * H / 2
    return x_grad, np.stack([d_ix.sum(-1), d_iy.sum(-1)], axis=-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "gpu"], default=None,
                        help="where the kernel runs (default: alloy.default_device())")
    device = {"cpu": alloy.cpu, "gpu": alloy.gpu, None: None}[parser.parse_args().device]

    rng = np.random.default_rng(0)
    B, H, W, C, gH, gW = 2, 10, 12, 32, 8, 6  # C a multiple of 32 (one pixel per simdgroup)
    x = rng.normal(size=(B, H, W, C)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, size=(B, gH, gW, 2)).astype(np.float32)
    cotangent = rng.normal(size=(B, gH, gW, C)).astype(np.float32)

    kernel = alloy.metal_kernel(name="grid_sample_grad", input_names=["x", "grid", "cotangent"],
                                output_names=["x_grad", "grid_grad"], source=GRID_SAMPLE_GRAD,
                                atomic_outputs=True)
    x_grad, grid_grad = kernel(inputs=[x, grid, cotangent], grid=(cotangent.size, 1, 1),
                               threadgroup=(256, 1, 1), output_shapes=[x.shape, grid.shape],
                               output_dtypes=[alloy.float32, alloy.float32], init_value=0,
                               stream=device)

    ref_x, ref_grid = grid_sample_grad_reference(x, grid, cotangent)
    err_x = np.max(np.abs(np.asarray(x_grad) - ref_x))
    err_grid = np.max(np.abs(np.asarray(grid_grad) - ref_grid) / (1 + np.abs(ref_grid)))
    print(f"grid_sample backward on {x_grad.device}: max abs. error x_grad {err_x:.2e}, "
          f"grid_grad {err_grid:.2e} (relative)")
    return 0 if err_x < 1e-4 and err_grid < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
