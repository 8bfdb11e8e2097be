"""What a synchronize costs and what x + y costs on the GPU when the synchronization is amortised
over 10 calls (the fused-chain benchmarks synchronize after every call)."""
import statistics
import time

import numpy as np

import alloy


def med(fn, reps=30):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    n = 1 << 26
    rng = np.random.default_rng(0)
    x = alloy.array(rng.uniform(-1, 1, n).astype(np.float32), device=alloy.gpu)
    y = alloy.array(rng.uniform(-1, 1, n).astype(np.float32), device=alloy.gpu)
    alloy.synchronize()
    t_sync = med(alloy.synchronize)
    t_gsync = med(lambda: alloy.synchronize(alloy.gpu))
    t_cuda_sync = med(alloy.cuda.synchronize)
    gb = 3 * n * 4 / 1e9

    def one():
        alloy.eval(x + y)
        alloy.synchronize()

    def ten():
        outs = [x + y for _ in range(10)]
        alloy.eval(outs)
        alloy.synchronize()

    t1 = med(one)
    t10 = med(ten) / 10
    small = alloy.array(rng.uniform(-1, 1, 256).astype(np.float32), device=alloy.gpu)

    def tiny():
        alloy.eval(small + small)
        alloy.synchronize()

    t_tiny = med(tiny)
    print(f"idle synchronize() {t_sync * 1e6:.1f} us, synchronize(gpu) {t_gsync * 1e6:.1f} us, "
          f"cuda.synchronize() {t_cuda_sync * 1e6:.1f} us; tiny add + sync {t_tiny * 1e6:.1f} us")
    print(f"x + y 2^26: one per sync {t1 * 1e3:.3f} ms ({gb / t1:.0f} GB/s), ten per sync "
          f"{t10 * 1e3:.3f} ms ({gb / t10:.0f} GB/s)")


if __name__ == "__main__":
    main()
