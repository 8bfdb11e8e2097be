"""Built-in ops (alloy.exp, alloy.add, alloy.sum, ...) against numpy on the CPU, measured
alternately in the same process (issue "Built-in ops", item 7: elementwise unary/binary on 2^26
elements and sum over rows >= 1.0x numpy on the CPU).

Cases (ratio = numpy time / Alloy time: > 1 means Alloy is faster):
  exp f32        alloy.exp(a).eval()          vs np.exp(x)
  add f32        alloy.add(a, b).eval()       vs np.add(x, y)
  mul scalar f32 (a * 1.5).eval()             vs x * np.float32(1.5)
  exp f16        alloy.exp(a16).eval()        vs np.exp(x16)
  sum rows f32   alloy.sum(m, axis=1).eval()  vs m.sum(axis=1), m of 2^13 x 2^13
  sum cols f32   alloy.sum(m, axis=0).eval()  vs m.sum(axis=0)
  sum all f32    alloy.sum(a).eval()          vs x.sum()
  add f16, sum rows/cols f16, max/mean rows/cols f32: the same forms
  softmax f32    alloy.softmax(m2, axis=-1)   vs e = np.exp(m2 - max); e / e.sum(-1), m2 of
                                                 2^12 x 2^12 (2^24 elements)
  logsumexp f32  alloy.logsumexp(m2, axis=-1) vs the same composition in numpy
Also printed: each side's process CPU time (all threads) and the CPU-time ratio (numpy / Alloy),
the one-core-equivalent comparison when other processes share the cores.
Both sides allocate their output, as a user's `np.exp(x)` / `alloy.exp(a)` do. Alloy runs
threadgroups on every core this process may use (its affinity mask: run under `taskset -c 0` for
one core); numpy's ufuncs use one.

    python python/bench/bench_ops_vs_numpy.py [--repeats R] [--log2n N] [--cases exp_f32,...]
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


def alternate(alloy_fn, numpy_fn, repeats):
    """Median wall seconds and median process CPU seconds (all threads) per call of each,
    sampled alternately."""
    a, b, ca, cb = [], [], [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        alloy_fn()
        c1, t1 = time.process_time(), time.perf_counter()
        numpy_fn()
        c2, t2 = time.process_time(), time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
        ca.append(c1 - c0)
        cb.append(c2 - c1)
    med = statistics.median
    return med(a), med(b), med(ca), med(cb)


def cases(n, rng):
    x = rng.uniform(-4, 4, n).astype(np.float32)
    y = rng.uniform(-4, 4, n).astype(np.float32)
    a = alloy.array(x, device=alloy.cpu)
    b = alloy.array(y, device=alloy.cpu)
    x16 = x.astype(np.float16)
    a16 = alloy.array(x16, device=alloy.cpu)
    side = int(round(n ** 0.5))
    m = x[: side * side].reshape(side, side)
    am = alloy.array(m, device=alloy.cpu)
    m16 = m.astype(np.float16)
    am16 = alloy.array(m16, device=alloy.cpu)
    y16 = y.astype(np.float16)
    b16 = alloy.array(y16, device=alloy.cpu)
    half = side // 2
    m2 = np.ascontiguousarray(m[:half, :half])
    am2 = alloy.array(m2, device=alloy.cpu)

    def np_softmax(v):
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def np_logsumexp(v):
        mx = v.max(axis=-1, keepdims=True)
        return (mx + np.log(np.exp(v - mx).sum(axis=-1, keepdims=True)))[..., 0]

    return {
        "exp_f32": (lambda: alloy.exp(a).eval(), lambda: np.exp(x)),
        "add_f32": (lambda: alloy.add(a, b).eval(), lambda: np.add(x, y)),
        "mul_scalar_f32": (lambda: (a * 1.5).eval(), lambda: x * np.float32(1.5)),
        "exp_f16": (lambda: alloy.exp(a16).eval(), lambda: np.exp(x16)),
        "sum_rows_f32": (lambda: alloy.sum(am, axis=1).eval(), lambda: m.sum(axis=1)),
        "sum_cols_f32": (lambda: alloy.sum(am, axis=0).eval(), lambda: m.sum(axis=0)),
        "sum_all_f32": (lambda: alloy.sum(a).eval(), lambda: x.sum()),
        "add_f16": (lambda: alloy.add(a16, b16).eval(), lambda: np.add(x16, y16)),
        "sum_rows_f16": (lambda: alloy.sum(am16, axis=1).eval(), lambda: m16.sum(axis=1)),
        "sum_cols_f16": (lambda: alloy.sum(am16, axis=0).eval(), lambda: m16.sum(axis=0)),
        "max_rows_f32": (lambda: alloy.max(am, axis=1).eval(), lambda: m.max(axis=1)),
        "max_cols_f32": (lambda: alloy.max(am, axis=0).eval(), lambda: m.max(axis=0)),
        "mean_rows_f32": (lambda: alloy.mean(am, axis=1).eval(), lambda: m.mean(axis=1)),
        "softmax_f32": (lambda: alloy.softmax(am2, axis=-1).eval(), lambda: np_softmax(m2)),
        "logsumexp_f32": (lambda: alloy.logsumexp(am2, axis=-1).eval(),
                          lambda: np_logsumexp(m2)),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--log2n", type=int, default=26)
    p.add_argument("--cases", default="")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    all_cases = cases(1 << args.log2n, rng)
    names = args.cases.split(",") if args.cases else list(all_cases)
    print(f"n = 2^{args.log2n}, cores available: {len(os.sched_getaffinity(0))}, "
          f"load average: {os.getloadavg()[0]:.1f}")
    print(f"{'case':<16} {'alloy':>10} {'numpy':>10} {'ratio':>7} {'alloy cpu':>10} "
          f"{'numpy cpu':>10} {'cpu ratio':>9}")
    for name in names:
        alloy_fn, numpy_fn = all_cases[name]
        alloy_fn()  # compile (cached on disk afterwards) and warm the allocator
        numpy_fn()
        ta, tn, ca, cn = alternate(alloy_fn, numpy_fn, args.repeats)
        # CPU-time ratio: numpy's process CPU time over Alloy's (summed over its threads), the
        # one-core-equivalent comparison on a loaded machine.
        print(f"{name:<16} {ta * 1e3:>8.2f}ms {tn * 1e3:>8.2f}ms {tn / ta:>7.2f} "
              f"{ca * 1e3:>8.2f}ms {cn * 1e3:>8.2f}ms {cn / max(ca, 1e-9):>9.2f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
