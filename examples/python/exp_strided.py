"""exp of a strided view (ensure_row_contiguous=False): the kernel maps each logical index to
memory with elem_to_loc, so the view is read in place, without a copy.

    python examples/python/exp_strided.py [--device cpu|gpu]
"""

import argparse
import sys

import numpy as np

import alloy
from kernels import EXP_STRIDED


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "gpu"], default=None,
                        help="where the kernel runs (default: alloy.default_device())")
    device = {"cpu": alloy.cpu, "gpu": alloy.gpu, None: alloy.default_device()}[
        parser.parse_args().device]

    kernel = alloy.metal_kernel(name="myexp_strided", input_names=["inp"], output_names=["out"],
                                source=EXP_STRIDED, ensure_row_contiguous=False)
    x = np.random.default_rng(0).normal(size=(8, 12)).astype(np.float32)
    a = alloy.array(x, device=device)[::2, 1::3]  # every other row, every third column
    out = kernel(inputs=[a], template=[("T", alloy.float32)], grid=(a.size, 1, 1),
                 threadgroup=(256, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype],
                 stream=device)[0]

    expect = np.exp(x[::2, 1::3].astype(np.float64))
    err = np.max(np.abs(np.asarray(out) - expect) / np.abs(expect))
    print(f"strided exp on {out.device}: view {a.shape} of (8, 12), max rel. error {err:.2e}")
    return 0 if err < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
