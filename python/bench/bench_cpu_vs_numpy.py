"""Alloy's CPU backend against numpy on elementwise kernels (issue "The CPU backend at numpy
speed", item 3), measured alternately in the same process.

Cases (ratio = numpy time / Alloy time: > 1 means Alloy is faster):
  exp f32      the MLX docs' myexp body (T=float32) over 2^24 elements vs np.exp(x, out=o)
  exp f16      the same body with T=float16 vs np.exp(x16, out=o16)
  copy f32     out[i] = inp[i] over 2^24 float32 vs np.copyto(o, x)
  mixed f16    out = half(float(x) * 1.5f + float(y)) over 2^24 float16 (float lanes, one
               rounding) vs np.multiply(x, 1.5, out=o); np.add(o, y, out=o)
  tiny call    host cost of a cached call on 32 float32 elements (call + eval) vs x * 2 + 0.5
  exp small    the exp f32 body over 2^16 elements (256 groups: spread over the pool, so the
               fixed cost of a parallel launch, waking the pool's threads included) vs np.exp
               (no target: a diagnostic)
  row sum      4096x4096 float32, one 256-thread group per row: strided loop, simd_sum, partials
               through threadgroup memory and a barrier, simd_sum again (bench/bench_common.h's
               kernel) vs x.sum(1)
  softmax      64x32768 float32, one 1024-thread group per row (simd_max/simd_sum, threadgroup
               memory, barriers) vs a numpy softmax into preallocated buffers
  gated delta  one decode step of the gated delta rule, 32 heads, Dk = Dv = 128, float32 state,
               32-lane groups over Dk with simd_sum (the layout mlx-lm's kernel uses) vs numpy
               (matmul over the heads)
  matmul       a .metal library (compile_shader) with 16x16 threadgroup tiles and barriers,
               512^3 float32, vs a @ b (BLAS)
Alloy's calls are metal_kernel call + eval() with the output allocated by the call (as a user's
loop does); numpy's write into a preallocated `out=`. Alloy runs threadgroups on every core this
process may use (its affinity mask: run under `taskset -c 0` for one core); numpy's ufuncs use one.

Each case: Alloy and numpy run alternately, `--repeats` samples each, and the medians are
compared (wall time; "cpu ratio" compares the process CPU time of the same samples, summed over
threads: on a loaded machine Alloy's pool threads wait for a core, which wall time includes); the
machine's load average is printed with the results (a shared machine makes absolute times vary
far more than the alternately measured ratios). "flt" is the minor page faults per Alloy call
(the process's, getrusage): 0 when the host allocator hands back pooled, already-faulted memory.

Peers with a thread pool (blocks). numpy's `@` runs on OpenBLAS's threads, which after each call
spin for 2^28 time-stamp-counter ticks before they sleep (OpenBLAS's default THREAD_TIMEOUT of 28
in driver/others/blas_server.c; about 0.1 s at 2.7 GHz). Alternating call by call, every Alloy
call then starts while those threads spin on every core, and on a many-core host it measures two
thread pools fighting over the cores (on the 16-core GPU host the library matmul took 3-7 ms
that way against 1.4-1.9 ms on its own), not what a user who calls one library or the other
gets. So for a case whose numpy side leaves threads running after a call (measured before the
samples: the process uses a fifth of a core or more during 50 ms of sleep after one peer call;
the printed "spin" is how long it went on), each sample is a pair of blocks: one side's two
warm-up calls, then `--block` calls timed one by one (the medians are over all timed calls),
then a pause (`--pause`, at least 1.5x the measured spin, so that both sides' threads are asleep
again); then the other side's warm-up, block and pause. The side that goes first alternates
between samples, so that drift still cancels. Neither side's configuration is changed (no
OPENBLAS_* variables: they change numpy's own speed). The call-by-call figure of such a case is
printed too, as the row "<case> alt" (the interference stays visible). Their "cpu ratio" is left
out: the process CPU clock takes in a thread that never blocks (a spinner) only at scheduler
ticks, so per-call CPU times of such a peer are meaningless. Cases whose peer is one numpy ufunc
or reduction (single-threaded: exp, copy, row sum, softmax...) leave no thread running and are
measured call by call only.

`--alone GAP_MS` adds, per case, Alloy's median alone: back to back, and with GAP_MS of sleep
before each call. On the 16-core host a launch after an idle gap (the pool's threads asleep, as
they are during each numpy call of the alternation) is much slower than back to back (`exp`
2^24: 2.1 vs 1.13 ms), while one core never idles (docs/performance.md, h-cpu16b).

`--scaling SETTLE_S` adds the scaling mode (the exp cases and row_sum), a row "<case> solo".
Issue 14's scaling figure is the 16-core time against the 1-core time. Call by call, the two are
not measured alike: on 16 cores every Alloy launch follows numpy's single-threaded call, during
which the pool's 15 other threads had nothing to do and slept, so each launch wakes them (the host
wakes idle vCPUs: +60-330 us, and a launch woken from idle ran up to 2x slower than back to back on
the GPU host); on one core nothing ever idles. The scaling mode measures every configuration the
same way: each side alone, back to back in blocks (`--block` timed calls after two untimed ones),
after SETTLE_S seconds of sleep, the sides taking turns. Run it once under `taskset -c 0` and once
on all cores and divide (a self-comparison, as the item defines it). As the host's own ceiling for
the same work, it also times numpy's call split into as many slices as cores allowed, run by as
many Python threads (numpy's ufuncs and reductions release the GIL), against its one-thread
call: what this host gives a plain thread pool on the same memory-bound work. Both figures are
printed next to the call-by-call row, not instead of it.

    python python/bench/bench_cpu_vs_numpy.py [--repeats R] [--n N] [--cases exp_f32,...]
        [--block B] [--pause SECONDS] [--alone GAP_MS] [--scaling SETTLE_S]
"""

import argparse
import concurrent.futures
import os
import resource
import statistics
import time

import numpy as np


# Kernels are timed from their first calls on: the CPU compiles them fully at once (no quick
# tier that a background compile replaces mid-measurement) unless asked (docs/cpu-backend.md).
os.environ.setdefault("ALLOY_CPU_TIERED", "0")

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
ROWSUM = """
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_position_in_threadgroup.x;
    uint tpg = threads_per_threadgroup.x;
    uint cols = inp_shape[1];
    const device float* p = inp + row * cols;
    float acc = 0.0f;
    for (uint i = lid; i < cols; i += tpg) acc += p[i];
    acc = simd_sum(acc);
    threadgroup float partial[32];
    uint sg = simdgroup_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    if (lane == 0) partial[sg] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
      float v = lane < simdgroups_per_threadgroup ? partial[lane] : 0.0f;
      v = simd_sum(v);
      if (lane == 0) out[row] = v;
    }
"""
SOFTMAX = """
    uint row = threadgroup_position_in_grid.y;
    uint lid = thread_position_in_threadgroup.x;
    uint tpg = threads_per_threadgroup.x;
    uint n = x_shape[1];
    const device float* xr = x + row * n;
    device float* orow = out + row * n;
    threadgroup float red[32];
    uint sg = simdgroup_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint nsg = simdgroups_per_threadgroup;
    float m = -INFINITY;
    for (uint i = lid; i < n; i += tpg) m = max(m, xr[i]);
    m = simd_max(m);
    if (lane == 0) red[sg] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    m = lane < nsg ? red[lane] : -INFINITY;
    m = simd_max(m);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = 0.0f;
    for (uint i = lid; i < n; i += tpg) s += exp(xr[i] - m);
    s = simd_sum(s);
    if (lane == 0) red[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s = lane < nsg ? red[lane] : 0.0f;
    s = simd_sum(s);
    float inv = 1.0f / s;
    for (uint i = lid; i < n; i += tpg) orow[i] = exp(xr[i] - m) * inv;
"""
# One decode step of the gated delta rule: S <- g S; kv = S k; delta = beta (v - kv);
# S <- S + delta k^T; y = S q. Thread (x, y, z): lanes x over Dk (Dk / 32 each), row dv = y,
# head z.
GATED_DELTA = """
    uint h = thread_position_in_grid.z;
    uint dv = thread_position_in_grid.y;
    uint lane = thread_position_in_threadgroup.x;
    constexpr int per = Dk / 32;
    const device float* qh = q + h * Dk;
    const device float* kh = k + h * Dk;
    const device float* srow = state_in + (h * Dv + dv) * Dk;
    device float* orow = state_out + (h * Dv + dv) * Dk;
    float st[per];
    float kv = 0.0f;
    for (int i = 0; i < per; ++i) {
      st[i] = srow[lane * per + i] * g[h];
      kv += st[i] * kh[lane * per + i];
    }
    kv = simd_sum(kv);
    float delta = (v[h * Dv + dv] - kv) * beta[h];
    float acc = 0.0f;
    for (int i = 0; i < per; ++i) {
      st[i] += kh[lane * per + i] * delta;
      acc += st[i] * qh[lane * per + i];
      orow[lane * per + i] = st[i];
    }
    acc = simd_sum(acc);
    if (lane == 0) y[h * Dv + dv] = acc;
"""
MATMUL_LIBRARY = """
#include <metal_stdlib>
using namespace metal;
kernel void matmul16(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                     device float* c [[buffer(2)]], constant uint& n [[buffer(3)]],
                     constant uint& kdim [[buffer(4)]],
                     uint2 gid [[thread_position_in_grid]],
                     uint2 lid [[thread_position_in_threadgroup]]) {
  threadgroup float as[16][16];
  threadgroup float bs[16][16];
  float acc = 0.0f;
  for (uint t = 0; t < kdim; t += 16) {
    as[lid.y][lid.x] = a[gid.y * kdim + t + lid.x];
    bs[lid.y][lid.x] = b[(t + lid.y) * n + gid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = 0; j < 16; ++j) acc += as[lid.y][j] * bs[j][lid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  c[gid.y * n + gid.x] = acc;
}
"""
TINY_N = 32
SMALL_N = 1 << 16
# exp_small (no target): the fixed cost of a launch spread over the pool, 256 groups of 256.
TARGETS = {"exp_f32": 1.0, "exp_f16": 1.0, "copy_f32": 1.0, "mixed_f16": 1.0, "tiny_call": 1.0,
           "row_sum": 0.8, "softmax": 1.0, "gated_delta": 1.0, "matmul": 0.25, "exp_small": None}


def alternate(alloy_fn, numpy_fn, repeats, inner=1):
    """Median wall and CPU seconds per call of each, sampled alternately (`inner` calls per
    sample). CPU time is the process's, summed over its threads (Alloy's pool included)."""
    a, b, ca, cb = [], [], [], []
    for _ in range(repeats):
        t0, p0 = time.perf_counter(), time.process_time()
        for _ in range(inner):
            alloy_fn()
        t1, p1 = time.perf_counter(), time.process_time()
        for _ in range(inner):
            numpy_fn()
        t2, p2 = time.perf_counter(), time.process_time()
        a.append((t1 - t0) / inner)
        b.append((t2 - t1) / inner)
        ca.append((p1 - p0) / inner)
        cb.append((p2 - p1) / inner)
    m = statistics.median
    return m(a), m(b), m(ca), m(cb)


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def peer_spin(numpy_fn, settle=0.3, window=0.05, step=0.01, limit=2.0):
    """Seconds for which threads that the peer's call started keep running after it returns (0
    when it leaves none): after `settle` seconds of quiet, one call; if the process then uses a
    fifth of a core or more over `window` seconds of sleep, its CPU time is sampled every `step`
    seconds until three steps in a row use under a tenth of one: the time to the last busy step."""
    time.sleep(settle)
    numpy_fn()
    t0 = time.perf_counter()
    c0 = time.process_time()
    time.sleep(window)
    if time.process_time() - c0 < window / 5:
        return 0.0
    quiet, last_busy, prev = 0, time.perf_counter() - t0, time.process_time()
    while quiet < 3 and time.perf_counter() - t0 < limit:
        time.sleep(step)
        cur = time.process_time()
        if cur - prev < step / 10:
            quiet += 1
        else:
            quiet, last_busy = 0, time.perf_counter() - t0
        prev = cur
    return last_busy


def blocks(alloy_fn, numpy_fn, repeats, block, pause, warmup=2):
    """Median wall and CPU seconds per call of each, measured in blocks: per sample, each side's
    `warmup` calls (untimed: they wake its threads) and `block` calls timed one by one, then
    `pause` seconds of sleep; the side that goes first alternates between samples. The medians
    are over every timed call of every block."""
    res = {alloy_fn: ([], []), numpy_fn: ([], [])}
    for r in range(repeats):
        for fn in ((alloy_fn, numpy_fn) if r % 2 == 0 else (numpy_fn, alloy_fn)):
            for _ in range(warmup):
                fn()
            wall, cpu = res[fn]
            for _ in range(block):
                t0, p0 = time.perf_counter(), time.process_time()
                fn()
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - p0)
            time.sleep(pause)
    m = statistics.median
    (a, ca), (b, cb) = res[alloy_fn], res[numpy_fn]
    return m(a), m(b), m(ca), m(cb)


def alone(alloy_fn, gap, calls=15):
    """Median seconds of one Alloy call with nothing else running: `calls` calls back to back,
    then `calls` calls each after `gap` seconds of sleep (after three warm-up calls)."""
    for _ in range(3):
        alloy_fn()
    res = []
    for pause in (0.0, gap):
        ts = []
        for _ in range(calls):
            if pause:
                time.sleep(pause)
            t0 = time.perf_counter()
            alloy_fn()
            ts.append(time.perf_counter() - t0)
        res.append(statistics.median(ts))
    return res[0], res[1]


def split(n, k):
    """k contiguous slices covering range(n), as even as possible."""
    return [slice(n * i // k, n * (i + 1) // k) for i in range(k)]


def solo(fns, repeats, block, settle, warmup=2):
    """Median seconds of one call of each of `fns`, each measured alone, back to back in blocks:
    per sample and function, `settle` seconds of sleep, `warmup` untimed calls, then `block` calls
    timed one by one; the functions take turns within a sample, in an order that rotates between
    samples (drift cancels). The same method whatever the core count (the scaling mode): no timed
    call starts from an idle pool, and the settle lets the previous function's threads (or another
    process's load) go quiet first."""
    ts = [[] for _ in fns]
    for r in range(repeats):
        for i in [(r + j) % len(fns) for j in range(len(fns))]:
            time.sleep(settle)
            for _ in range(warmup):
                fns[i]()
            for _ in range(block):
                t0 = time.perf_counter()
                fns[i]()
                ts[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in ts]


def threaded_peer(slices, pool):
    """One call of the peer split over `pool`'s threads (numpy's ufuncs and reductions release
    the GIL): every slice submitted, then all awaited. One slice: called directly."""
    if len(slices) == 1:
        return slices[0]
    return lambda: [f.result() for f in [pool.submit(fn) for fn in slices]]


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
    peer = lambda: np.exp(x, out=o)  # noqa: E731
    peer.slices = lambda k: [lambda p=p: np.exp(x[p], out=o[p]) for p in split(len(x), k)]
    return fn, peer


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


def case_row_sum(rng, rows=4096, cols=4096):
    x = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    k = alloy.metal_kernel(name="row_sum", input_names=["inp"], output_names=["out"],
                           source=ROWSUM)
    a = alloy.array(x, device=alloy.cpu)

    def call():
        o = k(inputs=[a], grid=(rows * 256, 1, 1), threadgroup=(256, 1, 1),
              output_shapes=[(rows,)], output_dtypes=[alloy.float32], stream=alloy.cpu)[0]
        o.eval()
        return o
    np.testing.assert_allclose(np.asarray(call()), x.astype(np.float64).sum(1), rtol=1e-4,
                               atol=1e-3)
    o = np.empty(rows, np.float32)
    peer = lambda: np.sum(x, axis=1, out=o)  # noqa: E731
    peer.slices = lambda k: [lambda p=p: np.sum(x[p], axis=1, out=o[p]) for p in split(rows, k)]
    return call, peer


def case_softmax(rng, rows=64, cols=32768):
    x = rng.uniform(-4, 4, (rows, cols)).astype(np.float32)
    k = alloy.metal_kernel(name="softmax", input_names=["x"], output_names=["out"],
                           source=SOFTMAX)
    a = alloy.array(x, device=alloy.cpu)

    def call():
        o = k(inputs=[a], grid=(1024, rows, 1), threadgroup=(1024, 1, 1),
              output_shapes=[(rows, cols)], output_dtypes=[alloy.float32], stream=alloy.cpu)[0]
        o.eval()
        return o
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(call()), ref, rtol=1e-5, atol=1e-9)
    t = np.empty_like(x)
    m = np.empty((rows, 1), np.float32)
    s = np.empty((rows, 1), np.float32)

    def peer():
        np.max(x, axis=1, keepdims=True, out=m)
        np.subtract(x, m, out=t)
        np.exp(t, out=t)
        np.sum(t, axis=1, keepdims=True, out=s)
        np.divide(t, s, out=t)
    return call, peer


def case_gated_delta(rng, heads=32, dk=128, dv=128):
    q = rng.normal(0, 0.2, (heads, dk)).astype(np.float32)
    kk = rng.normal(0, 0.2, (heads, dk)).astype(np.float32)
    v = rng.normal(0, 1, (heads, dv)).astype(np.float32)
    g = rng.uniform(0.5, 1, heads).astype(np.float32)
    beta = rng.uniform(0, 1, heads).astype(np.float32)
    state = rng.normal(0, 0.1, (heads, dv, dk)).astype(np.float32)
    kern = alloy.metal_kernel(name="gated_delta_step",
                              input_names=["q", "k", "v", "g", "beta", "state_in"],
                              output_names=["y", "state_out"], source=GATED_DELTA)
    ins = [alloy.array(t, device=alloy.cpu) for t in (q, kk, v, g, beta, state)]

    def call():
        y, s = kern(inputs=ins, template=[("Dk", dk), ("Dv", dv)], grid=(32, dv, heads),
                    threadgroup=(32, 4, 1), output_shapes=[(heads, dv), state.shape],
                    output_dtypes=[alloy.float32, alloy.float32], stream=alloy.cpu)
        alloy.eval(y, s) if hasattr(alloy, "eval") else (y.eval(), s.eval())
        return y, s
    s_ref = state.astype(np.float64) * g[:, None, None]
    kv = np.einsum("hvk,hk->hv", s_ref, kk)
    s_ref += ((v - kv) * beta[:, None])[:, :, None] * kk[:, None, :]
    y_ref = np.einsum("hvk,hk->hv", s_ref, q)
    y, s = call()
    np.testing.assert_allclose(np.asarray(y), y_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(s), s_ref, rtol=1e-4, atol=1e-5)
    st = np.empty_like(state)
    y_out = np.empty((heads, dv, 1), np.float32)

    def peer():
        np.multiply(state, g[:, None, None], out=st)
        kv = np.matmul(st, kk[:, :, None])[:, :, 0]
        np.add(st, ((v - kv) * beta[:, None])[:, :, None] * kk[:, None, :], out=st)
        np.matmul(st, q[:, :, None], out=y_out)
    return call, peer


def case_matmul(rng, n=512):
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    lib = alloy.compile_shader(MATMUL_LIBRARY, name="bench_matmul16")
    aa, bb = alloy.array(a, device=alloy.cpu), alloy.array(b, device=alloy.cpu)
    c0 = np.zeros((n, n), np.float32)

    def call():
        c = lib.matmul16(aa, bb, c0, n, n, threads=(n, n), group_size=(16, 16), stream=alloy.cpu)
        np.asarray(c)
        return c
    np.testing.assert_allclose(np.asarray(call()), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    o = np.empty((n, n), np.float32)
    return call, lambda: np.matmul(a, b, out=o)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--n", type=int, default=1 << 24)
    parser.add_argument("--cases", default=",".join(TARGETS))
    parser.add_argument("--block", type=int, default=5,
                        help="timed calls per block (cases whose peer leaves threads running)")
    parser.add_argument("--pause", type=float, default=0.3,
                        help="seconds of sleep after each block (raised to 1.5x the peer's spin)")
    parser.add_argument("--alone", type=float, default=None, metavar="GAP_MS",
                        help="also time Alloy alone: 15 calls back to back, then 15 calls each "
                             "after GAP_MS of sleep (the pool's threads idle, as during a numpy "
                             "call)")
    parser.add_argument("--scaling", type=float, default=None, metavar="SETTLE_S",
                        help="also the scaling mode (exp cases, row_sum): Alloy alone and numpy "
                             "on 1 and on all allowed cores (Python threads over slices), each "
                             "back to back in blocks after SETTLE_S seconds of sleep")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = args.cases.split(",")
    cores = len(os.sched_getaffinity(0))
    print(f"alloy {alloy.__version__}, numpy {np.__version__}; {cores} core(s) allowed; "
          f"load average {os.getloadavg()[0]:.1f}; medians of {args.repeats} samples")
    print(f"CPU sync path: ALLOY_CPU_SYNC={os.environ.get('ALLOY_CPU_SYNC', 'auto')}; "
          f"ALLOY_CPU_SCHEDULE={os.environ.get('ALLOY_CPU_SCHEDULE', 'dynamic')}, "
          f"ALLOY_CPU_STREAM={os.environ.get('ALLOY_CPU_STREAM', 'auto')}, "
          f"ALLOY_CPU_SLICE_US={os.environ.get('ALLOY_CPU_SLICE_US', '300')} "
          "(docs/cpu-backend.md)")
    print(f"{'case':<12} {'alloy':>10} {'numpy':>10} {'ratio':>7} {'target':>7} {'cpu ratio':>9} "
          f"{'flt':>5}  how")
    for name in cases:
        if name == "exp_f32":
            fns, unit, inner = case_exp(args.n, alloy.float32, np.float32, rng), "ms", 1
        elif name == "exp_f16":
            fns, unit, inner = case_exp(args.n, alloy.float16, np.float16, rng), "ms", 1
        elif name == "exp_small":
            fns, unit, inner = case_exp(SMALL_N, alloy.float32, np.float32, rng), "us", 50
        elif name == "copy_f32":
            fns, unit, inner = case_copy(args.n, rng), "ms", 1
        elif name == "mixed_f16":
            fns, unit, inner = case_mixed(args.n, rng), "ms", 1
        elif name == "tiny_call":
            fns, unit, inner = case_tiny(rng), "us", 2000
        elif name == "row_sum":
            fns, unit, inner = case_row_sum(rng), "ms", 1
        elif name == "softmax":
            fns, unit, inner = case_softmax(rng), "ms", 1
        elif name == "gated_delta":
            fns, unit, inner = case_gated_delta(rng), "ms", 4
        elif name == "matmul":
            fns, unit, inner = case_matmul(rng), "ms", 1
        else:
            raise SystemExit(f"unknown case {name}")
        for _ in range(2):  # warm up: compile, allocator caches, page faults
            fns[0]()
            fns[1]()
        f0 = minor_faults()
        fns[0]()
        flt = minor_faults() - f0
        scale = 1e3 if unit == "ms" else 1e6
        target = f"{TARGETS[name]:>6g}x" if TARGETS[name] else f"{'-':>7}"
        spin = peer_spin(fns[1]) if unit == "ms" else 0.0

        def row(label, ta, tb, ca, cb, how):
            cpu = f"{cb / ca:9.2f}" if ca > 0 and spin == 0 else f"{'-':>9}"
            print(f"{label:<12} {ta * scale:8.3f}{unit} {tb * scale:8.3f}{unit} {tb / ta:7.2f} "
                  f"{target} {cpu} {flt:5d}  {how}", flush=True)
        if spin > 0:
            pause = max(args.pause, 1.5 * spin)
            row(name, *blocks(fns[0], fns[1], args.repeats, args.block, pause),
                f"blocks of {args.block}, {pause:.2f} s pauses (numpy's threads spin "
                f"{spin * 1e3:.0f} ms after a call)")
            row(name + " alt", *alternate(fns[0], fns[1], args.repeats, inner),
                "call by call: Alloy starts while numpy's threads spin")
        else:
            row(name, *alternate(fns[0], fns[1], args.repeats, inner), "call by call")
        if args.alone is not None:
            time.sleep(max(args.pause, 1.5 * spin))  # the peer's threads asleep first
            b2b, gap = alone(fns[0], args.alone / 1e3)
            print(f"{name + ' alone':<12} back to back {b2b * scale:.3f}{unit}, after "
                  f"{args.alone:g} ms idle {gap * scale:.3f}{unit} (medians of 15)", flush=True)
        if args.scaling is not None and hasattr(fns[1], "slices"):
            time.sleep(max(args.pause, 1.5 * spin))
            with concurrent.futures.ThreadPoolExecutor(max_workers=cores) as pool:
                peers = [fns[1]] + ([threaded_peer(fns[1].slices(cores), pool)] if cores > 1
                                    else [])
                t = solo([fns[0]] + peers, args.repeats, args.block, args.scaling)
            many = (f", numpy {cores} threads {t[2] * scale:.3f}{unit} ({t[1] / t[2]:.1f}x its "
                    "1 thread)") if cores > 1 else ""
            print(f"{name + ' solo':<12} {cores} core(s): alloy {t[0] * scale:.3f}{unit}, numpy 1 "
                  f"thread {t[1] * scale:.3f}{unit}{many} (alone, blocks of {args.block} after "
                  f"{args.scaling:g} s settle; medians of {args.repeats * args.block})",
                  flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
