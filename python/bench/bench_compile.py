"""alloy.compile against eager alloy and numpy (issue 12, item 4), measured alternately in one
process:
  chain   sigmoid(exp(x * y - 0.5) * 0.25) + x on 2^N float32 elements (default N = 26):
          compiled (one fused kernel) vs eager alloy (five kernels) vs numpy (five ufuncs,
          sigmoid as 1 / (1 + exp(-v)))
  hit     a compiled one-op function called without evaluation: Python cost per call of a
          cache hit (flattening, signature, lookup, replay) vs the eager op call

    python python/bench/bench_compile.py [--log2n N] [--repeats R] [--device cpu|gpu]
"""

import argparse
import os
import statistics
import time

import numpy as np

# Kernels are timed from their first calls on: the CPU compiles them fully at once (no quick
# tier that a background compile replaces mid-measurement) unless asked (docs/cpu-backend.md).
os.environ.setdefault("ALLOY_CPU_TIERED", "0")

import alloy


def median_times(fns, repeats):
    times = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def chain(x, y):
    return alloy.sigmoid(alloy.exp(x * y - 0.5) * 0.25) + x


def chain_np(x, y):
    t = np.exp(x * y - np.float32(0.5)) * np.float32(0.25)
    return np.float32(1) / (np.float32(1) + np.exp(-t)) + x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--log2n", type=int, default=26)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    dev = alloy.cpu if args.device == "cpu" else alloy.gpu
    rng = np.random.default_rng(0)
    n = 1 << args.log2n
    xn = rng.uniform(-1, 1, n).astype(np.float32)
    yn = rng.uniform(-1, 1, n).astype(np.float32)
    x, y = alloy.array(xn, device=dev), alloy.array(yn, device=dev)
    f = alloy.compile(chain)
    got = np.asarray(f(x, y))
    np.testing.assert_allclose(got, chain_np(xn, yn), rtol=1e-5, atol=1e-6)
    alloy.eval(chain(x, y))

    def run(fn):  # to the end of the work: eval() on a GPU only enqueues
        alloy.eval(fn(x, y))
        alloy.synchronize()

    compiled, eager, numpy_t = median_times(
        [lambda: run(f), lambda: run(chain), lambda: chain_np(xn, yn)], args.repeats)
    print(f"chain 2^{args.log2n} on {args.device}: compiled {compiled * 1e3:.1f} ms, "
          f"eager {eager * 1e3:.1f} ms, numpy {numpy_t * 1e3:.1f} ms; "
          f"compiled vs eager {eager / compiled:.2f}x, vs numpy {numpy_t / compiled:.2f}x "
          f"(graph: {f.graph(x, y)})")

    s = alloy.array(rng.uniform(-1, 1, 16).astype(np.float32), device=dev)
    g = alloy.compile(alloy.exp)
    g(s)
    batch = 2000

    def hits():
        for _ in range(batch):
            g(s)

    def eagers():
        for _ in range(batch):
            alloy.exp(s)

    hit, op = median_times([hits, eagers], args.repeats)
    print(f"compiled call (cache hit, no eval) {hit / batch * 1e6:.2f} us/call; "
          f"eager alloy.exp call {op / batch * 1e6:.2f} us/call")


if __name__ == "__main__":
    main()
