"""First call of a new small kernel on the GPU: Alloy's metal_kernel against CuPy's RawKernel.

Issue "First-call latency", item 1: a new small kernel (exp of sin of the input) compiled and run
once, in a warm process (both runtimes initialised, one kernel of each already run), with empty
caches for both: every sample's source is new (a comment with a counter), and both disk caches
point at empty temporary folders. Timed: from building the kernel object to the end of its
first execution (synchronized):

  alloy   metal_kernel(...) + call + eval + synchronize: signature, translation, NVRTC with the
          Metal prelude, cache store, module load, launch
  cupy    RawKernel(...) + launch + synchronize: NVRTC on the hand-written CUDA, module load,
          launch

CuPy's RawKernel compiles with NVRTC to a cubin for the device (-arch=sm_XX, --std=c++17,
-ftz=true, --device-as-default-execution-space) and loads it with cuModuleLoadData, as Alloy
does. Alloy's first call of a coarsened kernel (this one: 1M elements) compiles the quick entry
and launches it; the full compile then runs in the background (src/backend/cuda/tiered.h). After
each Alloy sample the script waits (untimed) for that background compile, so that it takes no
CPU from the next sample, then calls the kernel again and checks the result (the switched-to
full code). --no-tiered sets ALLOY_CUDA_TIERED=0 (the full compile at the first call).

Samples alternate (alloy, cupy, alloy, ...); medians are printed with the ratio
alloy / cupy (target <= 1.0). With --trace, Alloy prints where each first call's time went
(ALLOY_TRACE_BUILD). Skips (exit status 0) without CuPy or a GPU.

Alloy compiles with NVRTC's automatic PCH of the prelude (src/backend/cuda/nvrtc.h auto_pch):
the prelude's core (types, vectors, the math framework, the entry) gets its PCH at its second
compile in a process, which kernels of any math selection then load, and a selection its own
(the whole prelude) at the selection's second compile. Here the second warm-up kernel makes the
core's PCH; the first sample makes exp(sin(x))'s own from it and the later samples load that;
with --distinct-selections every sample is a selection of its own (its first compile: it loads
the core's PCH). ALLOY_NVRTC_PCH=0 turns PCHs off.

    python python/bench/bench_first_call.py [--samples N] [--n ELEMENTS] [--trace] [--no-tiered]
                                            [--distinct-selections]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

_cache = tempfile.mkdtemp(prefix="alloy-first-call-")
os.environ["ALLOY_CACHE_DIR"] = os.path.join(_cache, "alloy")
os.environ["CUPY_CACHE_DIR"] = os.path.join(_cache, "cupy")
os.environ.setdefault("CUPY_CACHE_IN_MEMORY", "1")  # CuPy: no disk cache at all
if "--trace" in sys.argv:
    os.environ["ALLOY_TRACE_BUILD"] = "1"
if "--no-tiered" in sys.argv:
    os.environ["ALLOY_CUDA_TIERED"] = "0"

import numpy as np  # noqa: E402

import alloy  # noqa: E402

METAL_BODY = """
    uint i = thread_position_in_grid.x;
    out[i] = exp(sin(inp[i])){extra};  // sample {tag}
"""

CUDA_SOURCE = r"""
extern "C" __global__ void expsin(const float* inp, float* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = expf(sinf(inp[i])){extra};  // sample {tag}
}
"""

# --distinct-selections: sample k adds 0 * f(|x| + 1) for the k-th of these (Metal, CUDA), so
# every Alloy sample has a prelude selection of its own (a new directive prefix: NVRTC's PCH of
# the prelude, made per selection, is then never reused); the result is unchanged.
EXTRA_FUNCTIONS = [("cos", "cosf"), ("tan", "tanf"), ("log", "logf"), ("sqrt", "sqrtf"),
                   ("exp2", "exp2f"), ("log2", "log2f"), ("floor", "floorf"),
                   ("ceil", "ceilf"), ("round", "roundf"), ("trunc", "truncf"),
                   ("sinh", "sinhf"), ("cosh", "coshf"), ("tanh", "tanhf"), ("atan", "atanf"),
                   ("log10", "log10f"), ("asinh", "asinhf")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--n", type=int, default=1 << 20, help="elements")
    ap.add_argument("--trace", action="store_true", help="ALLOY_TRACE_BUILD=1")
    ap.add_argument("--no-tiered", action="store_true", help="ALLOY_CUDA_TIERED=0")
    ap.add_argument("--distinct-selections", action="store_true",
                    help="each sample calls one more math function of its own (times 0)")
    args = ap.parse_args()
    try:
        import cupy
    except ImportError:
        print("skipped: CuPy is not installed")
        return 0
    if not alloy.is_available(alloy.gpu) or cupy.cuda.runtime.getDeviceCount() == 0:
        print("skipped: no CUDA GPU")
        return 0

    n = args.n
    x = np.random.default_rng(0).uniform(-3, 3, n).astype(np.float32)
    want = np.exp(np.sin(x.astype(np.float64)))
    xa = alloy.array(x, device=alloy.gpu)
    xc = cupy.asarray(x)
    yc = cupy.empty_like(xc)
    alloy.synchronize(alloy.gpu)
    cupy.cuda.Device().synchronize()
    block = 256
    counter = [0]
    sample = [0]  # samples after the warm-up: which extra function (--distinct-selections)

    def extra(cuda):
        if not args.distinct_selections or sample[0] == 0:
            return ""
        metal_name, cuda_name = EXTRA_FUNCTIONS[(sample[0] - 1) % len(EXTRA_FUNCTIONS)]
        if cuda:
            return f" + 0.0f * {cuda_name}(fabsf(inp[i]) + 1.0f)"
        return f" + 0.0f * {metal_name}(fabs(inp[i]) + 1.0f)"

    def call(k):
        out = k(inputs=[xa], grid=(n, 1, 1), threadgroup=(block, 1, 1), output_shapes=[(n,)],
                output_dtypes=[alloy.float32], stream=alloy.gpu)[0]
        out.eval()
        alloy.synchronize(alloy.gpu)
        return out

    def run_alloy():
        counter[0] += 1
        t0 = time.perf_counter()
        k = alloy.metal_kernel(name="expsin", input_names=["inp"], output_names=["out"],
                               source=METAL_BODY.replace("{tag}", f"a{counter[0]}")
                               .replace("{extra}", extra(False)))
        out = call(k)
        dt = time.perf_counter() - t0
        # Untimed: let the background full compile finish (it would take CPU from the next
        # sample), then check the kernel's result again (by then the full code runs).
        time.sleep(max(0.3, 4 * dt))
        again = call(k)
        np.testing.assert_allclose(np.asarray(again.to(alloy.cpu)), want, rtol=2e-6, atol=1e-6)
        return dt, out

    def run_cupy():
        counter[0] += 1
        t0 = time.perf_counter()
        k = cupy.RawKernel(CUDA_SOURCE.replace("{tag}", f"c{counter[0]}")
                           .replace("{extra}", extra(True)), "expsin")
        k(((n + block - 1) // block,), (block,), (xc, yc, np.uint32(n)))
        cupy.cuda.Device().synchronize()
        return time.perf_counter() - t0, yc

    # Warm both processes' runtimes (NVRTC loaded, contexts made, first module loaded); Alloy's
    # second warm-up kernel makes the selection's PCH.
    for _ in range(2):
        _, out = run_alloy()
        np.testing.assert_allclose(np.asarray(out.to(alloy.cpu)), want, rtol=2e-6, atol=1e-6)
    _, out = run_cupy()
    np.testing.assert_allclose(cupy.asnumpy(out), want, rtol=2e-6, atol=1e-6)

    ta, tc = [], []
    for _ in range(args.samples):
        sample[0] += 1
        ta.append(run_alloy()[0])
        tc.append(run_cupy()[0])
    ma, mc = statistics.median(ta), statistics.median(tc)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    tiered = os.environ.get("ALLOY_CUDA_TIERED", "1") != "0"
    print(f"device: {name}; cupy {cupy.__version__}; {args.samples} samples each, "
          f"n = {n}; alloy tiered compile {'on' if tiered else 'off'}"
          f"{'; a new prelude selection per sample' if args.distinct_selections else ''}; "
          f"ALLOY_NVRTC_PCH={os.environ.get('ALLOY_NVRTC_PCH', 'unset')}")
    print(f"alloy metal_kernel first call: median {1e3 * ma:.1f} ms "
          f"(min {1e3 * min(ta):.1f}, max {1e3 * max(ta):.1f})")
    print(f"cupy RawKernel first call:     median {1e3 * mc:.1f} ms "
          f"(min {1e3 * min(tc):.1f}, max {1e3 * max(tc):.1f})")
    print(f"cost_vs_cupy = {ma / mc:.2f} (target <= 1.0)")
    print(f"NVRTC libraries in this process: {', '.join(nvrtc_libraries()) or 'none found'}; "
          f"CuPy's NVRTC {'.'.join(map(str, cupy.cuda.nvrtc.getVersion()))}")
    return 0


def nvrtc_libraries():
    """The NVRTC files mapped into this process (Alloy's and CuPy's: the same file or two)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libnvrtc" in line and "/" in line}
    except OSError:
        return []
    return sorted(paths)


if __name__ == "__main__":
    sys.exit(main())
