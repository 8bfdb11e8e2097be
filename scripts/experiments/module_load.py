"""Design experiment (not part of the build): what makes cuModuleLoadData of an NVRTC cubin slow.
Compares a plain kernel with the same kernel plus N template `static constexpr` members, which
NVRTC emits as initialized device globals. Usage: python3 module_load.py LIBNVRTC [CUBIN...]"""
import ctypes, statistics, sys, time

nvrtc = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libnvrtc.so")
cu = ctypes.CDLL("libcuda.so.1")


def cubin(src):
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"t.cu", 0, None, None) == 0
    opts = [b"-default-device", b"--std=c++17", b"--gpu-architecture=sm_90"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    if nvrtc.nvrtcCompileProgram(prog, len(opts), arr):
        n = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.value.decode())
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    b = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetCUBIN(prog, b)
    return b.raw


def source(globals_):
    traits = "".join(
        f"template <class T> struct t{i} {{ static constexpr int value = sizeof(T) + {i}; }};\n"
        for i in range(globals_))
    use = " + ".join([f"t{i}<float>::value" for i in range(globals_)] or ["0"])
    return traits + ('extern "C" __global__ void k(float* p) { if (threadIdx.x == 0) '
                     f'p[0] = float({use}); }}\n')


assert cu.cuInit(0) == 0
dev = ctypes.c_int()
cu.cuDeviceGet(ctypes.byref(dev), 0)
ctx = ctypes.c_void_p()
cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
cu.cuCtxSetCurrent(ctx)
def images():
    for g in (0, 0, 10, 50, 200):
        yield f"{g:4d} globals", cubin(source(g))
    for path in sys.argv[2:]:  # cubins made elsewhere (e.g. from Alloy's cache)
        yield path, open(path, "rb").read()


for name, img in images():
    times = []
    for _ in range(15):
        m, f = ctypes.c_void_p(), ctypes.c_void_p()
        t0 = time.perf_counter()
        assert cu.cuModuleLoadData(ctypes.byref(m), img) == 0
        assert cu.cuModuleGetFunction(ctypes.byref(f), m, b"k") == 0
        times.append(time.perf_counter() - t0)
        cu.cuModuleUnload(m)
    print(f"{name}: cubin {len(img):6d} bytes, load+get {1e3 * statistics.median(times):.3f} ms")
