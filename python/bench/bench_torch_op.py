"""Cost of one alloy.torch op call against the peer a PyTorch user would write: a
torch.library custom op that launches the same CUDA kernel through CuPy on torch's stream.

Rows (per call, best of --repeats runs of --calls calls, in microseconds; GPU rows end with one
torch.cuda.synchronize() per run, so they measure host cost while the GPU keeps up):

  alloy.torch __call__       kernel(x, y, threads_per_grid=..., ...): the eager fast path
                             (no dispatcher when nothing is traced or differentiated)
  alloy.torch op             torch.ops.alloy_metal.<name>(...): through torch's dispatcher, as
                             exported/compiled graphs call it
  cupy custom_op             @torch.library.custom_op whose body launches a cupy.RawKernel on
                             torch's current stream, inputs/outputs shared via DLPack
                             (the issue's peer)
  cupy raw-ptr custom_op     the same, passing raw device pointers (no DLPack): the cheapest
                             launch through CuPy
  cupy define+impl           the same CuPy launch registered with torch.library.define/impl
                             (the registration alloy.torch uses: the dispatcher cost alone)
  torch x + y                torch's own eager add (the floor of any op call)
  custom_op no-op            @torch.library.custom_op returning torch.empty_like (dispatcher +
                             Python op overhead, no kernel)

On a machine without CUDA (or with --device cpu) the CPU rows run: alloy.torch on CPU tensors
against torch's own add and a no-op custom op (CuPy has no CPU kernels).

    python python/bench/bench_torch_op.py [--device cuda|cpu] [--n 4096] [--calls 2000]
"""

import argparse
import time

import torch

import alloy
from alloy.torch import MetalParameter, TorchMetalKernel

CUDA_SOURCE = r"""
extern "C" __global__ void add_kernel(const float* x, const float* y, float* out,
                                      unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}
"""


def per_call_us(fn, calls, repeats, sync):
    best = float("inf")
    for _ in range(3):
        fn()
    sync()
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter_ns() - t0) / calls / 1e3)
    return best


def torch_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default=None)
    p.add_argument("--n", type=int, default=4096, help="elements per call")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    n, group = args.n, 256
    if device == "cuda":
        sync = torch.cuda.synchronize
        where = torch.cuda.get_device_name()
    else:
        sync = lambda: None  # noqa: E731
        where = "CPU"

    kernel = TorchMetalKernel(
        "bench_add", ["x", "y"], ["out"], "if (i < x.get_extent(0)) out[i] = x[i] + y[i];",
        torch_add, [MetalParameter("i", "uint", "thread_position_in_grid")])
    x = torch.randn(n, device=device)
    y = torch.randn(n, device=device)
    want = x + y
    grid, tg = (n, 1, 1), (group, 1, 1)

    def alloy_call():
        return kernel(x, y, threads_per_grid=grid, threads_per_thread_group=tg,
                      result_shapes=[[n]])

    def alloy_op():
        return kernel.op(x, y, n, 1, 1, group, 1, 1, [n])

    assert torch.equal(alloy_call(), want) and torch.equal(alloy_op(), want)

    @torch.library.custom_op("bench_peer::noop", mutates_args=())
    def noop(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    rows = [("alloy.torch __call__", alloy_call), ("alloy.torch op", alloy_op)]
    if device == "cuda":
        try:
            import cupy
        except ImportError:
            cupy = None
            print("cupy is not installed: the CuPy rows are skipped (pip install cupy-cuda12x)")
        if cupy is not None:
            raw = cupy.RawKernel(CUDA_SOURCE, "add_kernel")
            streams = {}

            def cupy_stream():
                h = torch.cuda.current_stream().cuda_stream
                s = streams.get(h)
                if s is None:
                    s = streams[h] = cupy.cuda.ExternalStream(h)
                return s

            def cupy_launch(x, y):
                # Tensors shared through DLPack (cupy.from_dlpack), launched on torch's stream.
                out = torch.empty_like(x)
                blocks = (x.numel() + group - 1) // group
                with cupy_stream():
                    cx, cy, co = (cupy.from_dlpack(t) for t in (x, y, out))
                    raw((blocks,), (group,), (cx, cy, co, cupy.uint32(x.numel())))
                return out

            def cupy_raw_launch(x, y):
                # The cheapest launch: raw device pointers as 64-bit kernel arguments.
                out = torch.empty_like(x)
                blocks = (x.numel() + group - 1) // group
                with cupy_stream():
                    raw((blocks,), (group,), (cupy.uint64(x.data_ptr()), cupy.uint64(y.data_ptr()),
                                              cupy.uint64(out.data_ptr()), cupy.uint32(x.numel())))
                return out

            @torch.library.custom_op("bench_peer::cupy_add", mutates_args=())
            def cupy_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                return cupy_launch(x, y)

            @cupy_add.register_fake
            def _(x, y):
                return torch.empty_like(x)

            @torch.library.custom_op("bench_peer::cupy_raw_add", mutates_args=())
            def cupy_raw_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                return cupy_raw_launch(x, y)

            @cupy_raw_add.register_fake
            def _(x, y):
                return torch.empty_like(x)

            lib = torch.library.Library("bench_peer2", "DEF")
            lib.define("cupy_add(Tensor x, Tensor y) -> Tensor")
            lib.impl("cupy_add", cupy_launch, "CUDA")
            define_impl = torch.ops.bench_peer2.cupy_add.default
            assert torch.equal(cupy_add(x, y), want) and torch.equal(define_impl(x, y), want)
            assert torch.equal(cupy_raw_add(x, y), want)
            rows += [("cupy custom_op", lambda: cupy_add(x, y)),
                     ("cupy raw-ptr custom_op", lambda: cupy_raw_add(x, y)),
                     ("cupy define+impl", lambda: define_impl(x, y))]
    rows += [("torch x + y", lambda: x + y), ("custom_op no-op", lambda: noop(x, y))]

    print(f"device: {where}; n = {n} float32; {args.calls} calls x {args.repeats} repeats; "
          f"torch {torch.__version__}, alloy {alloy.__version__}")
    results = {}
    for label, fn in rows:
        results[label] = per_call_us(fn, args.calls, args.repeats, sync)
        print(f"  {label:24s} {results[label]:8.2f} us/call")
    peer = results.get("cupy custom_op")
    if peer:
        for label in ("alloy.torch __call__", "alloy.torch op"):
            for p in ("cupy custom_op", "cupy raw-ptr custom_op"):
                print(f"  ratio {label} / {p}: {results[label] / results[p]:.2f}x")
        print(f"  ratio alloy.torch op / cupy define+impl: "
              f"{results['alloy.torch op'] / results['cupy define+impl']:.2f}x")


if __name__ == "__main__":
    main()
