"""nvrtc_thread_cost.cpp's question inside a Python process (ctypes on libnvrtc): does the quick
first compile of Alloy's exp(sin(x)) translation cost more on the interpreter's main thread than
on a long-lived second thread (glibc's main arena holds the interpreter's heap)? Median wall /
thread-CPU ms of the quick and the full compile in three patterns, a 0.3 s pause before each.

    python3 scripts/experiments/nvrtc_thread_cost.py src/prelude k.cu /path/to/libnvrtc.so 7
"""
import ctypes, sys, time, threading, statistics, queue
lib = ctypes.CDLL(sys.argv[3] if len(sys.argv) > 3 else "/usr/local/cuda/lib64/libnvrtc.so")
src0 = open(sys.argv[2]).read()
inc = "-I" + sys.argv[1]
full = ["--gpu-architecture=sm_90", "--std=c++17", "-default-device", "-DALLOY_MATH_SAFE", "-minimal", inc]
quick = full + ["-DALLOY_QUICK_ENTRY", "--ptxas-options=-O0", "-maxrregcount=64"]
cnt = [0]
def compile(opts):
    cnt[0] += 1
    src = (src0 + f"\n// run {cnt[0]}\n").encode()
    w0, c0 = time.perf_counter(), time.thread_time()
    p = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(p), src, b"kernel.cu", 0, None, None) == 0
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    assert lib.nvrtcCompileProgram(p, len(opts), arr) == 0
    n = ctypes.c_size_t()
    lib.nvrtcGetCUBINSize(p, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(p, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(p))
    return (time.perf_counter() - w0) * 1e3, (time.thread_time() - c0) * 1e3
jobs, results = queue.Queue(), queue.Queue()
def worker():
    while True:
        f = jobs.get()
        if f is None: return
        results.put(f())
t = threading.Thread(target=worker, daemon=True); t.start()
def on_worker(f):
    jobs.put(f); return results.get()
# Python heap churn as an interpreter has
junk = [bytes(1000) * (i % 50 + 1) for i in range(20000)]
compile(quick); on_worker(lambda: compile(full))
pats = ["quick main, full worker", "quick worker, full worker", "quick main, full main"]
res = {p: ([], []) for p in pats}
for r in range(int(sys.argv[4]) if len(sys.argv) > 4 else 7):
    for p in pats:
        time.sleep(0.3)
        q = compile(quick) if p.startswith("quick main") else on_worker(lambda: compile(quick))
        f = compile(full) if p.endswith("full main") else on_worker(lambda: compile(full))
        res[p][0].append(q); res[p][1].append(f)
for p in pats:
    q, f = res[p]
    print(f"{statistics.median(x[0] for x in q):6.1f}/{statistics.median(x[1] for x in q):6.1f}  "
          f"{statistics.median(x[0] for x in f):6.1f}/{statistics.median(x[1] for x in f):6.1f}  {p}")
