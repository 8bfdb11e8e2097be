"""A loop whose unsigned induction variable wraps (CpuSplit.SimdSumAfterDivergentLoops found
lanes 0, 1, 4, 5, ... counting 2 more iterations on an H100): the same loop as hand-written CUDA
through CuPy (NVRTC + the driver's ptxas), against the count computed here. Prints the SASS of
the loop when cuobjdump is found."""
import shutil
import subprocess
import tempfile

import cupy as cp

SRC = r'''
extern "C" __global__ void wr(unsigned* out) {
  unsigned lid = threadIdx.x;
  unsigned wraps = 0;
  for (unsigned w = lid; w < 0xfffffff0u; w += 0x7fffffffu) wraps += 1;
  out[blockIdx.x * blockDim.x + lid] = wraps;
}
'''


def expected(lid):
    w, c = lid, 0
    while w < 0xFFFFFFF0:
        c += 1
        w = (w + 0x7FFFFFFF) % 2**32
    return c


def main():
    n = 96
    for opts in [(), ("--ptxas-options=-O0",), ("-G",)]:
        k = cp.RawKernel(SRC, "wr", options=opts)
        out = cp.zeros(n, dtype=cp.uint32)
        k((1,), (n,), (out,))
        got = out.get().tolist()
        exp = [expected(i) for i in range(n)]
        bad = [(i, got[i], exp[i]) for i in range(n) if got[i] != exp[i]]
        print(f"options {opts}: {len(bad)} of {n} lanes wrong; first (lane, got, expected): {bad[:6]}")
    if shutil.which("nvcc") and shutil.which("cuobjdump"):
        with tempfile.TemporaryDirectory() as d:
            open(f"{d}/k.cu", "w").write(SRC)
            subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", f"{d}/k.cubin", f"{d}/k.cu"])
            print(subprocess.run(["cuobjdump", "-sass", f"{d}/k.cubin"], capture_output=True,
                                 text=True).stdout)


if __name__ == "__main__":
    main()
