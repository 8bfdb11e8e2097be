"""Built-in ops on CUDA against PyTorch on the same GPU, measured alternately in one process
(issue "Built-in ops", item 7: matmul >= 0.95x torch; sum / softmax / logsumexp over rows
>= 0.9x torch; elementwise unary/binary on 2^26 elements >= 0.95x torch).

Cases (ratio = torch time / Alloy time: > 1 means Alloy is faster):
  matmul f32/f16/bf16  a @ b, 4096 x 4096 (cuBLAS on both sides; torch's default: no TF32)
  matmul batched f16   [32, 512, 512] @ [32, 512, 512]
  sum rows f32         sum(m, axis=1), m of 8192 x 8192        (cooperative row kernel)
  sum rows short f32   sum(m, axis=1), m of 262144 x 256
  sum all f32          sum(x), 2^26 elements                   (pieces, then rows)
  max rows f32         max(m, axis=1)
  softmax f32/f16      softmax(m, axis=-1), 8192 x 8192         (fused kernel)
  logsumexp f32        logsumexp(m, axis=-1)
  exp f32 / add f32    elementwise on 2^26 elements
  qmm 4-bit            quantized_matmul(x [1, 4096], w [4096, 4096] 4-bit g64) vs torch's f16
                       x @ w.T on the dequantized matrix (torch has no affine 4-bit kernel: the
                       ratio compares against the dense product a user would otherwise run)
Each call is timed with a device synchronization after it (both sides), median of --repeats.

    python python/bench/bench_ops_gpu.py [--repeats R] [--cases matmul_f32,...]
"""

import argparse
import statistics
import time

import numpy as np

import alloy


def timed(fn, sync, repeats):
    fn()
    sync()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--cases", default="")
    args = p.parse_args()
    if not alloy.is_available(alloy.gpu):
        raise SystemExit("needs a CUDA GPU: " + (alloy.cuda.unavailable_reason() or "none found"))
    try:
        import torch
    except ImportError:
        raise SystemExit("needs PyTorch with CUDA (the peer the ratios compare against)")
    if not torch.cuda.is_available():
        raise SystemExit("PyTorch has no CUDA device")
    rng = np.random.default_rng(0)
    dev = torch.device("cuda")

    def both(x):
        return alloy.array(x, device=alloy.gpu), torch.from_numpy(x).to(dev)

    def a_sync():
        alloy.synchronize(alloy.gpu)

    def t_sync():
        torch.cuda.synchronize()

    n = 4096
    cases = {}
    for name, npdt, tdt, adt in [("f32", np.float32, torch.float32, alloy.float32),
                                 ("f16", np.float16, torch.float16, alloy.float16),
                                 ("bf16", np.float32, torch.bfloat16, alloy.bfloat16)]:
        a_np = rng.standard_normal((n, n)).astype(npdt)
        b_np = rng.standard_normal((n, n)).astype(npdt)
        aa, ta = both(a_np)
        bb, tb = both(b_np)
        aa, bb = aa.astype(adt), bb.astype(adt)
        ta, tb = ta.to(tdt), tb.to(tdt)
        cases[f"matmul_{name}"] = (lambda aa=aa, bb=bb: alloy.eval(aa @ bb),
                                   lambda ta=ta, tb=tb: ta @ tb, 2 * n ** 3)
    ab_np = rng.standard_normal((32, 512, 512)).astype(np.float16)
    ab, tb16 = both(ab_np)
    cases["matmul_batched_f16"] = (lambda: alloy.eval(ab @ ab), lambda: tb16 @ tb16,
                                   2 * 32 * 512 ** 3)
    m_np = rng.standard_normal((8192, 8192)).astype(np.float32)
    am, tm = both(m_np)
    s_np = rng.standard_normal((262144, 256)).astype(np.float32)
    as_, ts_ = both(s_np)
    x_np = rng.standard_normal(1 << 26).astype(np.float32)
    ax, tx = both(x_np)
    ay, ty = both(rng.standard_normal(1 << 26).astype(np.float32))
    am16, tm16 = am.astype(alloy.float16), tm.half()
    cases.update({
        "sum_rows_f32": (lambda: alloy.eval(alloy.sum(am, axis=1)), lambda: tm.sum(1), None),
        "sum_rows_short_f32": (lambda: alloy.eval(alloy.sum(as_, axis=1)), lambda: ts_.sum(1),
                               None),
        "sum_all_f32": (lambda: alloy.eval(alloy.sum(ax)), lambda: tx.sum(), None),
        "max_rows_f32": (lambda: alloy.eval(alloy.max(am, axis=1)), lambda: tm.amax(1), None),
        "softmax_f32": (lambda: alloy.eval(alloy.softmax(am, axis=-1)),
                        lambda: torch.softmax(tm, -1), None),
        "softmax_f16": (lambda: alloy.eval(alloy.softmax(am16, axis=-1)),
                        lambda: torch.softmax(tm16, -1), None),
        "logsumexp_f32": (lambda: alloy.eval(alloy.logsumexp(am, axis=-1)),
                          lambda: torch.logsumexp(tm, -1), None),
        "exp_f32": (lambda: alloy.eval(alloy.exp(ax)), lambda: torch.exp(tx), None),
        "add_f32": (lambda: alloy.eval(ax + ay), lambda: tx + ty, None),
    })
    w_np = rng.standard_normal((n, n)).astype(np.float16)
    wq, ws, wb = alloy.quantize(alloy.array(w_np, device=alloy.gpu), 64, 4)
    deq = torch.from_numpy(np.asarray(alloy.dequantize(wq, ws, wb, 64, 4).to(alloy.cpu))).to(dev)
    xq_np = rng.standard_normal((1, n)).astype(np.float16)
    xq, txq = both(xq_np)
    cases["qmm_4bit_f16"] = (lambda: alloy.eval(alloy.quantized_matmul(xq, wq, ws, wb, True, 64, 4)),
                             lambda: txq @ deq.T, None)
    chosen = [c for c in args.cases.split(",") if c] or list(cases)
    print(f"{'case':24s} {'alloy ms':>10s} {'torch ms':>10s} {'ratio':>7s}")
    for name in chosen:
        fa, ft, flops = cases[name]
        ta_s = timed(fa, a_sync, args.repeats)
        tt_s = timed(ft, t_sync, args.repeats)
        extra = f"  ({flops / ta_s / 1e12:.1f} TFLOP/s)" if flops else ""
        print(f"{name:24s} {ta_s * 1e3:10.3f} {tt_s * 1e3:10.3f} {tt_s / ta_s:7.2f}{extra}")


if __name__ == "__main__":
    main()
