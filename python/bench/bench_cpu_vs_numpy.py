"""Alloy's CPU backend against numpy on elementwise kernels (issue "The CPU backend at numpy
speed", item 3), measured alternately in the same process.

Cases (ratio = numpy time / Alloy time: > 1 means Alloy is faster):
  exp f32      the MLX docs' myexp body (T=float32) over 2^24 elements vs np.exp(x, out=o)
  exp f16      the same body with T=float16 vs np.exp(x16, out=o16)
  copy f32     out[i] = inp[i] over 2^24 float32 vs np.copyto(o, x)
  mixed f16    out = half(float(x) * 1.5f + float(y)) over 2^24 float16 (float lanes, one
               rounding) vs np.multiply(x, 1.5, out=o); np.add(o, y, out=o)
  tiny call    host cost of a cached call on 32 float32 elements (call + eval) vs x * 2 + 0.5
Alloy's calls are metal_kernel call + eval() with the output allocated by the call (as a user's
loop does); numpy's write into a preallocated `out=`. Alloy runs threadgroups on every core this
process may use (its affinity mask: run under `taskset -c 0` for one core); numpy's ufuncs use one.

Each case: Alloy and numpy run alternately, `--repeats` samples each, and the medians are
compared; the machine's load average is printed with the results (a shared machine makes absolute
times vary far more than the alternately measured ratios).

    python python/bench/bench_cpu_vs_numpy.py [--repeats R] [--n N] [--cases exp_f32,...]
"""

import argparse
import os
import statistics
import time

import numpy as np

import alloy

MYEXP = """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
"""
COPY = """
    uint elem = thread_position_in_grid.x;
    out[elem] = inp[elem];
"""
MIXED = """
    uint elem = thread_position_in_grid.x;
    out[elem] = half(float(x[elem]) * 1.5f + float(y[elem]));
"""
TINY = """
    uint elem = thread_position_in_grid.x;
    out[elem] = inp[elem] * 2.0f + 0.5f;
"""
TINY_N = 32
TARGETS = {"exp_f32": 1.0, "exp_f16": 1.0, "copy_f32": 1.0, "mixed_f16": 1.0, "tiny_call": 1.0}


def alternate(alloy_fn, numpy_fn, repeats, inner=1):
    """Median seconds per call of each, sampled alternately (`inner` calls per sample)."""
    a, b = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            alloy_fn()
        t1 = time.perf_counter()
        for _ in range(inner):
            numpy_fn()
        t2 = time.perf_counter()
        a.append((t1 - t0) / inner)
        b.append((t2 - t1) / inner)
    return statistics.median(a), statistics.median(b)


def elementwise_call(kernel, inputs, n, dtype, template=None):
    def call():
        kw = {"template": template} if template else {}
        out = kernel(inputs=inputs, grid=(n, 1, 1), threadgroup=(256, 1, 1),
                     output_shapes=[(n,)], output_dtypes=[dtype], stream=alloy.cpu, **kw)[0]
        out.eval()
        return out
    return call


def case_exp(n, dtype, np_dtype, rng):
    x = rng.uniform(-4, 4, n).astype(np_dtype)
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)
    a = alloy.array(x, device=alloy.cpu)
    fn = elementwise_call(k, [a], n, dtype, [("T", dtype)])
    o = np.empty_like(x)
    ref = np.exp(x.astype(np.float64))
    got = np.asarray(fn()).astype(np.float64)
    tol = 2e-6 if np_dtype == np.float32 else 1e-3
    np.testing.assert_allclose(got, ref, rtol=tol)
    return fn, lambda: np.exp(x, out=o)


def case_copy(n, rng):
    x = rng.uniform(-1, 1, n).astype(np.float32)
    k = alloy.metal_kernel(name="copy", input_names=["inp"], output_names=["out"], source=COPY)
    fn = elementwise_call(k, [alloy.array(x, device=alloy.cpu)], n, alloy.float32)
    o = np.empty_like(x)
    np.testing.assert_array_equal(np.asarray(fn()), x)
    return fn, lambda: np.copyto(o, x)


def case_mixed(n, rng):
    x = rng.uniform(-2, 2, n).astype(np.float16)
    y = rng.uniform(-2, 2, n).astype(np.float16)
    k = alloy.metal_kernel(name="mixed", input_names=["x", "y"], output_names=["out"],
                           source=MIXED)
    fn = elementwise_call(k, [alloy.array(x, device=alloy.cpu), alloy.array(y, device=alloy.cpu)],
                          n, alloy.float16)
    ref = (x.astype(np.float32) * np.float32(1.5) + y.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(np.asarray(fn()), ref)
    o = np.empty_like(x)

    def peer():
        np.multiply(x, np.float16(1.5), out=o)
        np.add(o, y, out=o)
    return fn, peer


def case_tiny(rng):
    x = rng.uniform(-1, 1, TINY_N).astype(np.float32)
    k = alloy.metal_kernel(name="tiny", input_names=["inp"], output_names=["out"], source=TINY)
    a = alloy.array(x, device=alloy.cpu)

    def call():
        k(inputs=[a], grid=(TINY_N, 1, 1), threadgroup=(TINY_N, 1, 1),
          output_shapes=[(TINY_N,)], output_dtypes=[alloy.float32], stream=alloy.cpu)[0].eval()
    np.testing.assert_allclose(
        np.asarray(k(inputs=[a], grid=(TINY_N, 1, 1), threadgroup=(TINY_N, 1, 1),
                     output_shapes=[(TINY_N,)], output_dtypes=[alloy.float32],
                     stream=alloy.cpu)[0]), x * 2 + 0.5, rtol=1e-6)
    return call, lambda: x * 2 + 0.5


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--n", type=int, default=1 << 24)
    parser.add_argument("--cases", default=",".join(TARGETS))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = args.cases.split(",")
    cores = len(os.sched_getaffinity(0))
    print(f"alloy {alloy.__version__}, numpy {np.__version__}; {cores} core(s) allowed; "
          f"load average {os.getloadavg()[0]:.1f}; medians of {args.repeats} alternate samples")
    print(f"{'case':<10} {'alloy':>10} {'numpy':>10} {'ratio':>7} {'target':>7}")
    for name in cases:
        if name == "exp_f32":
            fns, unit, inner = case_exp(args.n, alloy.float32, np.float32, rng), "ms", 1
        elif name == "exp_f16":
            fns, unit, inner = case_exp(args.n, alloy.float16, np.float16, rng), "ms", 1
        elif name == "copy_f32":
            fns, unit, inner = case_copy(args.n, rng), "ms", 1
        elif name == "mixed_f16":
            fns, unit, inner = case_mixed(args.n, rng), "ms", 1
        elif name == "tiny_call":
            fns, unit, inner = case_tiny(rng), "us", 2000
        else:
            raise SystemExit(f"unknown case {name}")
        for _ in range(2):  # warm up: compile, allocator caches, page faults
            fns[0]()
            fns[1]()
        ta, tb = alternate(fns[0], fns[1], args.repeats, inner)
        scale = 1e3 if unit == "ms" else 1e6
        print(f"{name:<10} {ta * scale:8.3f}{unit} {tb * scale:8.3f}{unit} {tb / ta:7.2f} "
              f"{TARGETS[name]:>6.1f}x", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
