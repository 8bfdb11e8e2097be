"""Where the fused chain's time goes on a GPU (issue 12's 4x target): the compiled chain
sigmoid(exp(x * y - 0.5) * 0.25) + x against kernels moving the same bytes (x + y: two reads,
one write) and the eager chain, each synchronized, medians of 20; torch's eager chain as a
reference when torch is present."""
import statistics
import time

import numpy as np

import alloy


def timed(fn, reps=20):
    fn()
    alloy.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        alloy.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def chain(x, y):
    return alloy.sigmoid(alloy.exp(x * y - 0.5) * 0.25) + x


def main():
    n = 1 << 26
    rng = np.random.default_rng(0)
    x = alloy.array(rng.uniform(-1, 1, n).astype(np.float32), device=alloy.gpu)
    y = alloy.array(rng.uniform(-1, 1, n).astype(np.float32), device=alloy.gpu)
    f = alloy.compile(chain)
    add = alloy.compile(lambda a, b: a + b)
    ex = alloy.compile(lambda a, b: alloy.exp(a) + b)
    t_f = timed(lambda: alloy.eval(f(x, y)))
    t_add = timed(lambda: alloy.eval(add(x, y)))
    t_ex = timed(lambda: alloy.eval(ex(x, y)))
    t_e = timed(lambda: alloy.eval(chain(x, y)))
    gb = 3 * n * 4 / 1e9
    print(f"fused chain {t_f * 1e3:.3f} ms ({gb / t_f:.0f} GB/s), x + y {t_add * 1e3:.3f} ms "
          f"({gb / t_add:.0f} GB/s), exp(x) + y {t_ex * 1e3:.3f} ms, eager chain {t_e * 1e3:.3f} ms:"
          f" vs_eager {t_e / t_f:.2f}")
    try:
        import torch
    except ImportError:
        return
    xt = torch.from_numpy(np.asarray(x)).cuda()
    yt = torch.from_numpy(np.asarray(y)).cuda()

    def tt(fn, reps=20):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    t_tadd = tt(lambda: xt + yt)
    t_tchain = tt(lambda: torch.sigmoid(torch.exp(xt * yt - 0.5) * 0.25) + xt)
    print(f"torch: x + y {t_tadd * 1e3:.3f} ms ({gb / t_tadd:.0f} GB/s), eager chain "
          f"{t_tchain * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
