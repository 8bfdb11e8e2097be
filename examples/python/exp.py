"""Element-wise exp with a custom Metal kernel, checked against NumPy.

    python examples/python/exp.py [--device cpu|gpu]
"""

import argparse
import sys

import numpy as np

import alloy
from kernels import EXP


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "gpu"], default=None,
                        help="where the kernel runs (default: alloy.default_device())")
    device = {"cpu": alloy.cpu, "gpu": alloy.gpu, None: None}[parser.parse_args().device]

    kernel = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                                source=EXP)
    a = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float16)
    out = kernel(inputs=[a], template=[("T", alloy.float32)], grid=(a.size, 1, 1),
                 threadgroup=(256, 1, 1), output_shapes=[a.shape], output_dtypes=[alloy.float16],
                 stream=device)[0]

    expect = np.exp(a.astype(np.float64))
    err = np.max(np.abs(np.asarray(out).astype(np.float64) - expect) / np.abs(expect))
    print(f"exp on {out.device}: shape {out.shape}, dtype {out.dtype}, max rel. error {err:.2e}")
    return 0 if err < 1e-3 else 1  # float16 output: 2**-11 relative rounding


if __name__ == "__main__":
    sys.exit(main())
