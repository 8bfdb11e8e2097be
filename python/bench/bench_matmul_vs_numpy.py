"""matmul, quantized_matmul and the fused softmax / logsumexp against numpy on the CPU, measured
alternately in the same process (issue "Built-in ops", item 7: matmul >= 0.9x numpy on the CPU;
softmax / logsumexp over rows >= 1.0x numpy).

Cases (ratio = numpy time / Alloy time: > 1 means Alloy is faster):
  matmul f32 N      alloy.matmul(a, b).eval() vs x @ y, N x N
  matmul f64 N      the same in float64
  matmul batch f32  [64, 128, 128] @ [64, 128, 128]
  matmul vec f32    [4096] @ [4096, 4096] (gemv)
  softmax rows f32  alloy.softmax(m, axis=-1) vs e = np.exp(m - max); e / e.sum(-1), 4096 x 4096
  logsumexp f32     alloy.logsumexp(m, axis=-1) vs the same composition in numpy
Alloy's CPU products run through numpy's bundled OpenBLAS when numpy loaded one (one thread pool
in the process; alloy.blas_library() names it); ALLOY_OPENBLAS=<file> makes Alloy load its own
(e.g. Debian's libopenblas0-pthread) to compare two pools. Wall time and process CPU time (all
threads, spinning BLAS workers included) per call, medians. `--blocked B` times B calls of
Alloy, then B of numpy, per sample (each library back to back, not interleaved call by call).

    python python/bench/bench_matmul_vs_numpy.py [--repeats R] [--blocked B]
                                                 [--cases matmul_f32_1024,...]
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


def alternate(alloy_fn, numpy_fn, repeats, blocked=1):
    """Medians of (wall, CPU) seconds per call of each, sampled alternately: `blocked` calls of
    one, then `blocked` of the other, per sample."""
    alloy_fn()
    numpy_fn()
    a, b, ca, cb = [], [], [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(blocked):
            alloy_fn()
        c1, t1 = time.process_time(), time.perf_counter()
        for _ in range(blocked):
            numpy_fn()
        c2, t2 = time.process_time(), time.perf_counter()
        a.append((t1 - t0) / blocked)
        b.append((t2 - t1) / blocked)
        ca.append((c1 - c0) / blocked)
        cb.append((c2 - c1) / blocked)
    med = statistics.median
    return med(a), med(b), med(ca), med(cb)


def np_softmax(m):
    e = np.exp(m - m.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_logsumexp(m):
    mx = m.max(-1, keepdims=True)
    return np.log(np.exp(m - mx).sum(-1)) + mx[..., 0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--blocked", type=int, default=1,
                   help="calls of each library per sample (1: alternate call by call)")
    p.add_argument("--cases", default="")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    cpu = alloy.cpu

    def both(x):
        return alloy.array(x, device=cpu), x

    cases = {}
    for n in (256, 1024, 2048):
        for dt in (np.float32, np.float64):
            a, x = both(rng.standard_normal((n, n)).astype(dt))
            b, y = both(rng.standard_normal((n, n)).astype(dt))
            name = f"matmul_{'f32' if dt == np.float32 else 'f64'}_{n}"
            cases[name] = (lambda a=a, b=b: alloy.eval(a @ b), lambda x=x, y=y: x @ y)
    ab, xb = both(rng.standard_normal((64, 128, 128)).astype(np.float32))
    cases["matmul_batch_f32"] = (lambda: alloy.eval(ab @ ab), lambda: xb @ xb)
    av, xv = both(rng.standard_normal(4096).astype(np.float32))
    am, xm = both(rng.standard_normal((4096, 4096)).astype(np.float32))
    cases["matmul_vec_f32"] = (lambda: alloy.eval(av @ am), lambda: xv @ xm)
    cases["softmax_rows_f32"] = (lambda: alloy.eval(alloy.softmax(am, axis=-1)),
                                 lambda: np_softmax(xm))
    cases["logsumexp_rows_f32"] = (lambda: alloy.eval(alloy.logsumexp(am, axis=-1)),
                                   lambda: np_logsumexp(xm))
    chosen = [c for c in args.cases.split(",") if c] or list(cases)
    print(f"BLAS: {alloy.blas_library()}")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print(f"{'case':22s} {'alloy ms':>10s} {'numpy ms':>10s} {'ratio':>7s} {'alloy cpu':>10s} "
          f"{'numpy cpu':>10s} {'cpu ratio':>9s}")
    for name in chosen:
        ta, tn, ca, cn = alternate(*cases[name], args.repeats, args.blocked)
        cpu_ratio = cn / ca if ca > 0 else float("nan")
        print(f"{name:22s} {ta * 1e3:10.3f} {tn * 1e3:10.3f} {tn / ta:7.2f} {ca * 1e3:10.3f} "
              f"{cn * 1e3:10.3f} {cpu_ratio:9.2f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
