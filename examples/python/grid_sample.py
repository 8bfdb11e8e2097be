"""Bilinear grid_sample forward (NHWC, zero padding, align_corners=False) as a custom Metal
kernel, checked against NumPy.

    python examples/python/grid_sample.py [--device cpu|gpu]
"""

import argparse
import sys

import numpy as np

import alloy
from kernels import GRID_SAMPLE


def grid_sample_reference(x, grid):
    """float64 NumPy reference."""
    B, H, W, C = x.shape
    ix = ((grid[..., 0].astype(np.float64) + 1) * W - 1) / 2
    iy = ((grid[..., 1].astype(np.float64) + 1) * H - 1) / 2
    x0, y0 = np.floor(ix).astype(int), np.floor(iy).astype(int)
    fx, fy = (ix - x0)[..., None], (iy - y0)[..., None]
    b = np.arange(B)[:, None, None]

    def tap(yy, xx):
        inside = ((yy >= 0) & (yy < H) & (xx >= 0) & (xx < W))[..., None]
        return x.astype(np.float64)[b, np.clip(yy, 0, H - 1), np.clip(xx, 0, W - 1)] * inside

    return ((1 - fy) * ((1 - fx) * tap(y0, x0) + fx * tap(y0, x0 + 1)) +
            fy * ((1 - fx) * tap(y0 + 1, x0) + fx * tap(y0 + 1, x0 + 1)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "gpu"], default=None,
                        help="where the kernel runs (default: alloy.default_device())")
    device = {"cpu": alloy.cpu, "gpu": alloy.gpu, None: None}[parser.parse_args().device]

    rng = np.random.default_rng(0)
    B, H, W, C, gH, gW = 2, 16, 20, 8, 12, 10
    x = rng.normal(size=(B, H, W, C)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, size=(B, gH, gW, 2)).astype(np.float32)

    kernel = alloy.metal_kernel(name="grid_sample", input_names=["x", "grid"],
                                output_names=["out"], source=GRID_SAMPLE)
    out_shape = (B, gH, gW, C)
    out = kernel(inputs=[x, grid], template=[("T", alloy.float32)],
                 grid=(int(np.prod(out_shape)), 1, 1), threadgroup=(256, 1, 1),
                 output_shapes=[out_shape], output_dtypes=[alloy.float32], stream=device)[0]

    err = np.max(np.abs(np.asarray(out) - grid_sample_reference(x, grid)))
    print(f"grid_sample on {out.device}: output {out.shape}, max abs. error {err:.2e}")
    return 0 if err < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
