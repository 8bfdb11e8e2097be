"""Python-side cost of one call of a cached metal_kernel on small inputs.

For each device and kind of input, times (best of several repeats of many calls):
  call       kernel(inputs=..., ...) -> lazy outputs: argument conversion + graph recording
  +eval      ... and out.eval(): CPU: runs the (tiny) kernel; GPU: enqueues the launch
  +sync      ... and synchronize(): the GPU round trip (GPU only)
The floor row is a trivial binding call (alloy.default_device()), the cost of crossing into
the extension at all. On the GPU, with CuPy installed, the peer row is CuPy's RawKernel launching
the equivalent hand-written CUDA kernel into a new cupy.empty output (issue "Runtime core v2",
item 7: Alloy's call + eval of a cached kernel <= 0.75x that). A Python float input becomes a 0-d array that a GPU kernel gets copied to
the device on each call; PyTorch/CuPy inputs are imported through DLPack on each call (convert
once with alloy.from_dlpack to avoid it). Target: `call` <= 3 us on CUDA.

    python python/bench/bench_overhead.py [--device cpu|gpu|all] [--calls N] [--repeats R]
"""

import argparse
import os
import time

import numpy as np

# Kernels are timed from their first calls on: the CPU compiles them fully at once (no quick
# tier that a background compile replaces mid-measurement) unless asked (docs/cpu-backend.md).
os.environ.setdefault("ALLOY_CPU_TIERED", "0")

import alloy

SOURCE = """
    uint elem = thread_position_in_grid.x;
    out[elem] = inp[elem] * 2.0f + s;
"""
N = 256  # elements: small enough that the kernel itself costs ~nothing


def best_per_call_us(fn, calls, repeats, after=None):
    """Minimum over `repeats` of the mean time of `calls` calls of fn, in microseconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        if after:
            after()
        best = min(best, (time.perf_counter_ns() - t0) / calls / 1e3)
    return best


def inputs_for(device):
    """(label, inputs) for the kinds of inputs a user passes, and the array's values."""
    x = np.random.default_rng(0).uniform(-1, 1, N).astype(np.float32)
    a = alloy.array(x, device=device)
    kinds = [("alloy.array x2", [a, alloy.array(0.5, device=device)]),
             ("alloy.array + float", [a, 0.5])]
    if device == alloy.cpu:
        kinds.append(("numpy + float", [x, 0.5]))
    else:
        try:
            import torch

            if torch.cuda.is_available():
                kinds.append(("torch.Tensor + float", [torch.from_numpy(x).cuda(), 0.5]))
        except ImportError:
            pass
        try:
            import cupy

            kinds.append(("cupy.ndarray + float", [cupy.asarray(x), 0.5]))
        except ImportError:
            pass
    return kinds, x


def bench_device(device, calls, repeats):
    kernel = alloy.metal_kernel(name="overhead", input_names=["inp", "s"], output_names=["out"],
                                source=SOURCE)
    rows = []
    sync = (lambda: alloy.synchronize(device)) if device == alloy.gpu else None
    kinds, x = inputs_for(device)
    for label, inputs in kinds:
        def call():
            return kernel(inputs=inputs, grid=(N, 1, 1), threadgroup=(N, 1, 1),
                          output_shapes=[(N,)], output_dtypes=[alloy.float32], stream=device)

        def call_eval():
            call()[0].eval()

        def call_eval_sync():
            call()[0].eval()
            alloy.synchronize(device)

        np.testing.assert_allclose(np.asarray(call()[0]), x * 2 + 0.5, rtol=1e-6)
        row = [label, best_per_call_us(call, calls, repeats, sync),
               best_per_call_us(call_eval, calls, repeats, sync)]
        row.append(best_per_call_us(call_eval_sync, calls // 4 or 1, repeats)
                   if device == alloy.gpu else None)
        rows.append(row)
    floor = best_per_call_us(alloy.default_device, calls, repeats)
    return rows, floor


CUDA_SOURCE = r"""
extern "C" __global__ void overhead(const float* inp, float s, float* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = inp[i] * 2.0f + s;
}
"""


def bench_cupy(calls, repeats):
    """CuPy RawKernel: a new output and a launch per call (what Alloy's call + eval does), and
    the same with a synchronize; None without CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    x = np.random.default_rng(0).uniform(-1, 1, N).astype(np.float32)
    xc = cupy.asarray(x)
    raw = cupy.RawKernel(CUDA_SOURCE, "overhead")
    s, n = np.float32(0.5), np.uint32(N)

    def launch():
        out = cupy.empty(N, cupy.float32)
        raw((1,), (N,), (xc, s, out, n))
        return out

    def launch_sync():
        launch()
        cupy.cuda.Device().synchronize()

    np.testing.assert_allclose(cupy.asnumpy(launch()), x * 2 + 0.5, rtol=1e-6)
    sync = cupy.cuda.Device().synchronize
    return (best_per_call_us(launch, calls, repeats, sync),
            best_per_call_us(launch_sync, calls // 4 or 1, repeats))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "gpu", "all"], default="all")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    devices = {"cpu": [alloy.cpu], "gpu": [alloy.gpu], "all": [alloy.cpu, alloy.gpu]}[args.device]
    print(f"alloy {alloy.__version__}: Python-side cost per cached kernel call, {N} float32 "
          f"elements, best of {args.repeats} x {args.calls} calls (microseconds)")
    if alloy.is_available(alloy.gpu):
        print(f"GPU: {alloy.cuda.device_name()} ({alloy.cuda.device_arch()})")
    header = f"{'device':<7} {'inputs':<24} {'call':>8} {'+eval':>8} {'+sync':>8}"
    print(header)
    print("-" * len(header))
    for device in devices:
        name = "cpu" if device == alloy.cpu else "gpu"
        if not alloy.is_available(device):
            print(f"{name:<7} (skipped: {alloy.cuda.unavailable_reason() or 'not available'})")
            continue
        rows, floor = bench_device(device, args.calls, args.repeats)
        for label, call, call_eval, call_sync in rows:
            sync = f"{call_sync:8.2f}" if call_sync is not None else f"{'-':>8}"
            print(f"{name:<7} {label:<24} {call:8.2f} {call_eval:8.2f} {sync}")
        print(f"{name:<7} {'floor: default_device()':<24} {floor:8.2f}")
        if device == alloy.gpu:
            peer = bench_cupy(args.calls, args.repeats)
            if peer is None:
                print("gpu     (CuPy not installed: no RawKernel peer)")
                continue
            print(f"{'cupy':<7} {'RawKernel + cupy.empty':<24} {'-':>8} {peer[0]:8.2f} "
                  f"{peer[1]:8.2f}")
            for label in ("alloy.array x2", "alloy.array + float"):
                alloy_eval = next(r[2] for r in rows if r[0] == label)
                print(f"ratio ({label}): alloy call + eval / cupy launch = "
                      f"{alloy_eval / peer[0]:.2f} (target <= 0.75)")


if __name__ == "__main__":
    main()
