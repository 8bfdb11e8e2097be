"""MLX's own Metal kernel library as a test input (issue 10, item 4).

The `mlx-metal` wheel (PyPI) ships MLX's kernel headers (`mlx/include/mlx/backend/metal/kernels/`:
the kernel templates of every op family). It is downloaded at test time into a cache folder
($ALLOY_TEST_CACHE, default ~/.cache/alloy-tests); nothing of MLX is committed. Without network
access (and no cached copy) every test here is skipped, saying so.

For each header family, an Alloy-written library instantiates MLX's kernel templates the way MLX's
own `.metal` units do (`instantiate_kernel("name", template, args...)`, explicit instantiations
with the full parameter list, function constants given as MLX's host code gives them) and:
  * compiles on the CPU (host compiler) and through NVRTC for sm_90 (no GPU needed);
  * runs one kernel on the CPU (and on the GPU where there is one) in float32, float16 and
    bfloat16, dispatched as MLX's host code dispatches it, on random inputs with poisoned
    outputs, compared with NumPy (float64 references, tolerances by dtype).

Families whose kernels are not in the wheel (MLX keeps arg_reduce, rope, layer/rms norm, random
and conv in its `.metal` units) are read from the units themselves: $ALLOY_MLX_SRC (an MLX source
tree), or else the units downloaded once at a pinned commit into the cache; without either those
tests are skipped, saying so (CI reaches only PyPI and Debian). The same three tests run for each
(`test_unit_*`), compiling only the kernels named (docs/msl-support.md, "MLX's kernel library").
"""

import dataclasses
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import ml_dtypes
import numpy as np
import pytest

import alloy

REPO = pathlib.Path(__file__).resolve().parents[2]
CLI = REPO / "build" / "alloy"
MLX_METAL = "mlx-metal==0.32.4"
KERNELS = "mlx/backend/metal/kernels"

BF16 = ml_dtypes.bfloat16
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": BF16}
METAL_TYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}
# |kernel - ref| <= atol + rtol * |ref|, per dtype (the kernels compute in their dtype).
TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}


def _cache_dir():
    env = os.environ.get("ALLOY_TEST_CACHE")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "alloy-tests"


@pytest.fixture(scope="session")
def mlx_include():
    """The `mlx/include` folder of the mlx-metal wheel (downloaded once into the cache)."""
    dest = _cache_dir() / MLX_METAL.replace("==", "-")
    inc = dest / "mlx" / "include"
    if not (inc / KERNELS / "utils.h").exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--platform", "macosx_14_0_arm64", "--disable-pip-version-check",
                   "--timeout", "30", "-d", tmp, MLX_METAL]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as e:
                pytest.skip(f"cannot download {MLX_METAL} (offline?): {e}")
            wheels = list(pathlib.Path(tmp).glob("*.whl"))
            if r.returncode != 0 or not wheels:
                pytest.skip(f"cannot download {MLX_METAL} (offline?): "
                            f"{(r.stderr or r.stdout).strip()[-300:]}")
            out = pathlib.Path(tmp) / "x"
            with zipfile.ZipFile(wheels[0]) as z:
                z.extractall(out, [n for n in z.namelist() if n.startswith("mlx/include/")])
            if dest.exists():  # a partial copy of an earlier run
                import shutil

                shutil.rmtree(dest)
            (out).rename(dest)
    return inc


def rand(rng, shape, dtype, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(DTYPES[dtype])


def poison(shape, dtype):
    """An output buffer filled with NaN (integers: a large value) before the kernel runs."""
    dt = DTYPES.get(dtype, dtype)
    if np.issubdtype(np.dtype(dt), np.integer):
        return np.full(shape, np.iinfo(dt).max, dtype=dt)
    return np.full(shape, np.nan, dtype=dt)


def check(got, ref, dtype, scale=1.0):
    got = np.asarray(got).astype(np.float64)
    rtol, atol = TOL[dtype]
    assert not np.isnan(got).any(), "the kernel left outputs unwritten (NaN poison)"
    np.testing.assert_allclose(got, ref, rtol=rtol * scale, atol=atol * scale)


def f64(x):
    return np.asarray(x).astype(np.float64)


# ---- the families --------------------------------------------------------------------------------


@dataclasses.dataclass
class Family:
    includes: list  # MLX headers, relative to mlx/backend/metal/kernels/
    body: str  # instantiations (and helpers), after the includes
    run: object = None  # run(lib, dtype, stream, rng): runs one kernel and checks it
    function_constants: dict = dataclasses.field(default_factory=dict)  # by index
    prelude: str = ""  # text before the includes

    def source(self):
        inc = "".join(f'#include "{KERNELS}/{h}"\n' for h in self.includes)
        return "#include <metal_stdlib>\nusing namespace metal;\n" + self.prelude + inc + self.body


def per_dtype(fmt, keep=None):
    """`fmt` once per float dtype ({t} Metal type, {n} dtype name); with `keep`, only its first
    `keep` lines (the kernels that run) for every dtype and the others for float32 alone (they
    are compiled, not run: fewer kernels keep the suite's compile time small)."""
    lines = fmt.splitlines(keepends=True)
    out = ""
    for n in DTYPES:
        for i, line in enumerate(lines):
            if keep is None or i < keep or n == "float32":
                out += line.format(t=METAL_TYPE[n], n=n)
    return out


def groups(n, g):
    return (n + g - 1) // g


# unary: unary_v / unary_v2 / unary_g, as unary.metal instantiates them.
def run_unary(lib, dtype, stream, rng):
    n = 1000
    x = rand(rng, n, dtype)
    out = lib[f"v_Exp{dtype}{dtype}"](x, poison(n, dtype), np.uint32(n), threads=n,
                                       group_size=256, stream=stream)
    check(out, np.exp(f64(x)), dtype)


UNARY = Family(
    ["utils.h", "unary_ops.h", "unary.h"],
    per_dtype('instantiate_kernel("v_Exp{n}{n}", unary_v, {t}, {t}, Exp, 1)\n'
              'instantiate_kernel("v2_Sin{n}{n}", unary_v2, {t}, {t}, Sin)\n'
              'instantiate_kernel("gn1_Abs{n}{n}", unary_g, {t}, {t}, Abs, 1, int)\n'
              'instantiate_kernel("gn4large_Erf{n}{n}", unary_g, {t}, {t}, Erf, 4)\n', keep=1),
    run_unary)


# arange: the one kernel of arange.h (arange.metal instantiates it per type).
def run_arange(lib, dtype, stream, rng):
    n = 250  # indices exact in every dtype (bfloat16: 8 significant bits)
    t = DTYPES[dtype]
    start, step = t(rng.uniform(-3, 3)), t(rng.uniform(0.1, 0.9))
    out = lib[f"arange{dtype}"](start, step, poison(n, dtype), threads=n, group_size=64,
                                stream=stream)
    # Metal: uint * T is a T product, then a T sum (one rounding each).
    idx = np.arange(n).astype(t)
    check(out, f64((start + (idx * step).astype(t)).astype(t)), dtype)


ARANGE = Family(["utils.h", "arange.h"], per_dtype('instantiate_kernel("arange{n}", arange, {t})\n'),
                run_arange)


# binary: binary_vv / binary_sv / binary_g_nd2 / binary_g.
def run_binary(lib, dtype, stream, rng):
    n = 777
    a, b = rand(rng, n, dtype), rand(rng, n, dtype)
    out = lib[f"vv_Add{dtype}"](a, b, poison(n, dtype), np.uint32(n), threads=n, group_size=256,
                                stream=stream)
    check(out, f64(a) + f64(b), dtype)
    out = lib[f"vv_Maximum{dtype}"](a, b, poison(n, dtype), np.uint32(n), threads=n,
                                    group_size=256, stream=stream)
    check(out, np.maximum(f64(a), f64(b)), dtype)


BINARY = Family(
    ["defines.h", "utils.h", "binary_ops.h", "binary.h"],
    per_dtype('instantiate_kernel("vv_Add{n}", binary_vv, {t}, {t}, Add, 1)\n'
              'instantiate_kernel("vv_Maximum{n}", binary_vv, {t}, {t}, Maximum, 1)\n'
              'instantiate_kernel("sv2_Divide{n}", binary_sv2, {t}, {t}, Divide)\n'
              'instantiate_kernel("g2_Power{n}", binary_g_nd2, {t}, {t}, Power, int)\n'
              'instantiate_kernel("gn4large_LogAddExp{n}", binary_g, {t}, {t}, LogAddExp, 4)\n', keep=2),
    run_binary)


# ternary: ternary_v (select), ternary_g.
def run_ternary(lib, dtype, stream, rng):
    n = 600
    c = rng.integers(0, 2, n).astype(np.bool_)
    a, b = rand(rng, n, dtype), rand(rng, n, dtype)
    out = lib[f"v_Select{dtype}"](c, a, b, poison(n, dtype), np.uint32(n), threads=n,
                                  group_size=128, stream=stream)
    check(out, np.where(c, f64(a), f64(b)), dtype)


TERNARY = Family(
    ["utils.h", "ternary_ops.h", "ternary.h"],
    per_dtype('instantiate_kernel("v_Select{n}", ternary_v, {t}, Select, false, false, 1)\n'
              'instantiate_kernel("g2_Select{n}", ternary_g_nd2, {t}, Select, int)\n'
              'instantiate_kernel("gn4large_Select{n}", ternary_g, {t}, Select, 4)\n', keep=1),
    run_ternary)


# copy: copy_v (casting), copy_g_nd2 (strided source), copy_gg.
def run_copy(lib, dtype, stream, rng):
    rows, cols = 13, 37
    x = rand(rng, (cols, rows), "float32")  # read transposed: strides (1, rows)
    strides = np.array([1, rows], np.int64)  # of the (rows, cols) view
    out = lib[f"g2_copyfloat32{dtype}"](x.reshape(-1), poison(rows * cols, dtype), strides,
                                        threads=(cols, rows, 1), group_size=(32, 4, 1),
                                        stream=stream)
    check(np.asarray(out).reshape(rows, cols), f64(x.astype(DTYPES[dtype])).T, dtype)


COPY = Family(
    ["utils.h", "copy.h"],
    per_dtype('instantiate_kernel("v_copyfloat32{n}", copy_v, float, {t}, 1)\n'
              'instantiate_kernel("g2_copyfloat32{n}", copy_g_nd2, float, {t}, int)\n'
              'instantiate_kernel("gg3large_copy{n}{n}", copy_gg_nd3, {t}, {t})\n'
              'instantiate_kernel("ggn2_dynamic_copy{n}{n}", copy_gg_dynamic, {t}, {t}, 2, int)\n', keep=2),
    run_copy)


def row_threads(axis, n_reads, limit=1024):
    """MLX's row kernels: a threadgroup of ceil(axis / n_reads) threads, rounded up to 32."""
    t = groups(axis, n_reads)
    return min(limit, groups(t, 32) * 32)


# softmax: softmax_single_row, softmax_looped, precise variants.
def run_softmax(lib, dtype, stream, rng):
    rows, axis = 6, 300
    x = rand(rng, (rows, axis), dtype, -4, 4)
    tg = row_threads(axis, 4)
    out = lib[f"block_softmax_{dtype}"](x, poison((rows, axis), dtype), np.int32(axis),
                                        threads=(tg * rows, 1, 1), group_size=(tg, 1, 1),
                                        stream=stream)
    e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
    check(out, e / e.sum(axis=1, keepdims=True), dtype)
    # The looped kernels combine 32 simdgroups' partial results: MLX runs them with 1024 threads.
    out = lib[f"looped_softmax_{dtype}"](x, poison((rows, axis), dtype), np.int32(axis),
                                         threads=(1024 * rows, 1, 1), group_size=(1024, 1, 1),
                                         stream=stream)
    check(out, e / e.sum(axis=1, keepdims=True), dtype)


SOFTMAX = Family(
    ["utils.h", "softmax.h"],
    per_dtype('instantiate_kernel("block_softmax_{n}", softmax_single_row, {t})\n'
              'instantiate_kernel("looped_softmax_{n}", softmax_looped, {t})\n'
              'instantiate_kernel("block_softmax_precise_{n}", softmax_single_row, {t}, float)\n', keep=2),
    run_softmax)


# logsumexp: logsumexp, logsumexp_looped.
def run_logsumexp(lib, dtype, stream, rng):
    rows, axis = 5, 257
    x = rand(rng, (rows, axis), dtype, -4, 4)
    tg = row_threads(axis, 4)
    ref = np.log(np.exp(f64(x)).sum(axis=1))
    out = lib[f"block_logsumexp_{dtype}"](x, poison(rows, dtype), np.int32(axis),
                                          threads=(tg * rows, 1, 1), group_size=(tg, 1, 1),
                                          stream=stream)
    check(out, ref, dtype)
    out = lib[f"looped_logsumexp_{dtype}"](x, poison(rows, dtype), np.int32(axis),
                                           threads=(1024 * rows, 1, 1),
                                           group_size=(1024, 1, 1),
                                           stream=stream)
    check(out, ref, dtype)


LOGSUMEXP = Family(
    ["utils.h", "logsumexp.h"],
    per_dtype('instantiate_kernel("block_logsumexp_{n}", logsumexp, {t})\n'
              'instantiate_kernel("looped_logsumexp_{n}", logsumexp_looped, {t})\n', keep=2),
    run_logsumexp)


# reduce: all_reduce (one row per threadgroup), row_reduce_small, col_reduce_small, init_reduce.
def run_reduce(lib, dtype, stream, rng):
    rows, n = 3, 1000
    x = rand(rng, (rows, n), dtype, 0.0, 1.0)
    tg = 256
    out = lib[f"all_reduce_sum{dtype}"](x, poison(rows, dtype), np.uint64(rows * n), np.uint64(n),
                                        threads=(tg, rows, 1), group_size=(tg, 1, 1),
                                        stream=stream)
    # The sum of n values in the dtype: its rounding grows with the partial sums.
    check(out, f64(x).sum(axis=1), dtype, scale=4.0)
    out = lib[f"all_reduce_max{dtype}"](x, poison(rows, dtype), np.uint64(rows * n), np.uint64(n),
                                        threads=(tg, rows, 1), group_size=(tg, 1, 1),
                                        stream=stream)
    check(out, f64(x).max(axis=1), dtype)


REDUCE = Family(
    ["defines.h", "utils.h", "atomic.h", "reduction/ops.h", "reduce.h"],
    per_dtype('instantiate_kernel("all_reduce_sum{n}", all_reduce, {t}, {t}, Sum<{t}>)\n'
              'instantiate_kernel("all_reduce_max{n}", all_reduce, {t}, {t}, Max<{t}>)\n'
              'instantiate_kernel("init_reduce_prod{n}", init_reduce, {t}, Prod<{t}>)\n'
              'instantiate_kernel("row_reduce_small_2_reduce_sum{n}", row_reduce_small, '
              '{t}, {t}, Sum<{t}>, int, 2)\n'
              'instantiate_kernel("col_reduce_small_1_reduce_min{n}", col_reduce_small, '
              '{t}, {t}, Min<{t}>, int, 1)\n'
              'instantiate_kernel("row_reduce_simple_sum{n}", row_reduce_simple, '
              '{t}, {t}, Sum<{t}>)\n', keep=2),
    run_reduce)


# scan: contiguous_scan / strided_scan, explicit instantiations written out as scan.metal does.
SCAN_INST = """
template [[host_name("contig_scan_{incl}_sum_{n}")]] [[kernel]] void
contiguous_scan<{t}, {t}, CumSum<{t}>, 4, {inclusive}, false>(
    const device {t}* in [[buffer(0)]],
    device {t}* out [[buffer(1)]],
    const constant size_t& axis_size [[buffer(2)]],
    uint3 gid [[threadgroup_position_in_grid]],
    uint3 gsize [[threadgroups_per_grid]],
    uint3 lid [[thread_position_in_threadgroup]],
    uint3 lsize [[threads_per_threadgroup]],
    uint simd_lane_id [[thread_index_in_simdgroup]],
    uint simd_group_id [[simdgroup_index_in_threadgroup]]);
template [[host_name("strided_scan_{incl}_max_{n}")]] [[kernel]] void
strided_scan<{t}, {t}, CumMax<{t}>, 4, {inclusive}, true>(
    const device {t}* in [[buffer(0)]],
    device {t}* out [[buffer(1)]],
    const constant size_t& axis_size [[buffer(2)]],
    const constant size_t& stride [[buffer(3)]],
    const constant size_t& stride_blocks [[buffer(4)]],
    uint3 gid [[threadgroup_position_in_grid]],
    uint3 gsize [[threadgroups_per_grid]],
    uint3 lid [[thread_position_in_threadgroup]],
    uint simd_lane_id [[thread_index_in_simdgroup]],
    uint simd_group_id [[simdgroup_index_in_threadgroup]]);
"""


def run_scan(lib, dtype, stream, rng):
    rows, n = 4, 300
    x = rand(rng, (rows, n), dtype, 0.0, 1.0)
    tg = row_threads(n, 4)
    for incl in ("inclusive", "exclusive"):
        out = lib[f"contig_scan_{incl}_sum_{dtype}"](
            x, poison((rows, n), dtype), np.uint64(n), threads=(tg, rows, 1),
            group_size=(tg, 1, 1), stream=stream)
        ref = np.cumsum(f64(x), axis=1)
        if incl == "exclusive":
            ref = np.concatenate([np.zeros((rows, 1)), ref[:, :-1]], axis=1)
        check(out, ref, dtype, scale=4.0)


SCAN = Family(
    ["defines.h", "utils.h", "scan.h"],
    "".join(SCAN_INST.format(t=METAL_TYPE[n], n=n, incl=i, inclusive=v)
            for n in DTYPES for i, v in (("inclusive", "true"), ("exclusive", "false"))),
    run_scan)


# sort: block_sort (values and arg sort), block_sort_nc.
def run_sort(lib, dtype, stream, rng):
    rows, n = 3, 100
    x = rand(rng, (rows, n), dtype)
    bn, tn = 32, 4
    args = (np.int32(n), np.int32(1), np.int32(1), np.int32(n), np.int32(n))
    out = lib[f"c_block_sort_{dtype}_{dtype}_bn{bn}_tn{tn}"](
        x, poison((rows, n), dtype), *args, threads=(bn, rows, 1), group_size=(bn, 1, 1),
        stream=stream)
    np.testing.assert_array_equal(f64(out), np.sort(f64(x), axis=1))
    idx = lib[f"carg_block_sort_{dtype}_uint32_bn{bn}_tn{tn}"](
        x, poison((rows, n), np.uint32), *args, threads=(bn, rows, 1), group_size=(bn, 1, 1),
        stream=stream)
    idx = np.asarray(idx).astype(np.int64)
    np.testing.assert_array_equal(np.take_along_axis(f64(x), idx, 1), np.sort(f64(x), axis=1))


SORT = Family(
    ["utils.h", "sort.h"],
    per_dtype('instantiate_kernel("c_block_sort_{n}_{n}_bn32_tn4", block_sort, {t}, {t}, '
              'false, 32, 4)\n'
              'instantiate_kernel("carg_block_sort_{n}_uint32_bn32_tn4", block_sort, {t}, '
              'uint32_t, true, 32, 4)\n'
              'instantiate_kernel("nc_block_sort_{n}_{n}_bn64_tn4", block_sort_nc, {t}, {t}, '
              'false, 64, 4)\n'
              'instantiate_kernel("sort_mbsort_{n}_uint32_bn512_tn8", mb_block_sort, {t}, '
              'uint32_t, true, 512, 8)\n', keep=2),
    run_sort)


# gemv: gemv (out = mat @ vec), gemv_t, as gemv.metal's instantiate_gemv_blocks.
def run_gemv(lib, dtype, stream, rng):
    m, k = 40, 96
    mat, vec = rand(rng, (m, k), dtype), rand(rng, k, dtype)
    bm, bn, sm, tm = 4, 1, 1, 4
    per_group = bm * sm * tm
    one = np.array([1], np.int32)
    zero64 = np.array([0], np.int64)
    out = lib[f"gemv_{dtype}_bm4_bn1_sm1_sn32_tm4_tn4_nc0_axpby0"](
        mat, vec, vec, poison(m, dtype), np.int32(k), np.int32(m), np.int32(k), np.float32(1),
        np.float32(0), np.int32(1), one, zero64, zero64, zero64, np.int32(1),
        threads=(32 * groups(m, per_group), bn, bm), group_size=(32, bn, bm), stream=stream)
    check(out, f64(mat) @ f64(vec), dtype, scale=4.0)


GEMV_INST = ("instantiate_kernel(\"gemv_{n}_bm4_bn1_sm1_sn32_tm4_tn4_nc0_axpby0\", gemv, {t}, "
             "4, 1, 1, 32, 4, 4, false, false)\n"
             "instantiate_kernel(\"gemv_{n}_bm1_bn8_sm1_sn32_tm4_tn4_nc1_axpby1\", gemv, {t}, "
             "1, 8, 1, 32, 4, 4, true, true)\n"
             "instantiate_kernel(\"gemv_t_{n}_bm1_bn8_sm1_sn32_tm4_tn4_nc0_axpby0\", gemv_t, {t}, "
             "1, 8, 1, 32, 4, 4, false, false)\n")
GEMV = Family(["utils.h", "steel/utils.h", "gemv.h"], per_dtype(GEMV_INST, keep=1), run_gemv)


# hadamard: hadamard_n (N = 2^k in threadgroup memory), hadamard_m.
def hadamard_matrix(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def run_hadamard(lib, dtype, stream, rng):
    n, batch, max_radix = 64, 3, 16
    x = rand(rng, (batch, n), dtype)
    scale = 1.0 / np.sqrt(n)
    out = lib[f"hadamard_64_{dtype}"](x, poison((batch, n), dtype), np.float32(scale),
                                      threads=(n // max_radix, batch, 1),
                                      group_size=(n // max_radix, 1, 1), stream=stream)
    check(out, f64(x) @ hadamard_matrix(n).T * scale, dtype, scale=2.0)


HADAMARD = Family(
    ["steel/defines.h", "utils.h", "hadamard.h"],
    per_dtype('instantiate_kernel("hadamard_64_{n}", hadamard_n, {t}, 64, 16, 4)\n'
              'instantiate_kernel("hadamard_256_{n}", hadamard_n, {t}, 256, 16, 4)\n', keep=1),
    run_hadamard)


# gather/scatter: gather_axis (take_along_axis), scatter_axis (put_along_axis), as MLX's JIT
# (indexing.cpp) instantiates them.
def run_gather(lib, dtype, stream, rng):
    a, p, j = 7, 10, 5  # src (a, p); indices (j, p) along axis 0
    src = rand(rng, (a, p), dtype)
    idx = rng.integers(-a, a, size=(j, p)).astype(np.int32)
    shape = np.array([j, p], np.int32)
    st = np.array([p, 1], np.int64)
    out = lib[f"gather_axis_{dtype}_int32"](
        src, idx, poison((j, p), dtype), shape, st, st, np.uint64(2), np.int32(0), np.int32(a),
        np.uint64(p), np.uint64(p), threads=(p, j, 1), group_size=(p, 1, 1), stream=stream)
    np.testing.assert_array_equal(f64(out), np.take_along_axis(f64(src), idx % a, 0))
    # scatter_axis with Sum: out[idx[j, q], q] += upd[j, q] (atomic adds).
    upd = rand(rng, (j, p), dtype)
    base = rand(rng, (a, p), dtype)
    out = lib[f"scatter_axis_sum_{dtype}_int32"](
        upd, idx, base, shape, st, st, np.uint64(2), np.int32(0), np.int32(a), np.uint64(p),
        np.uint64(p), threads=(p, j, 1), group_size=(p, 1, 1), stream=stream)
    ref = f64(base).copy()
    np.add.at(ref, (idx % a, np.arange(p)[None, :].repeat(j, 0)), f64(upd))
    check(out, ref, dtype, scale=2.0)


GATHER = Family(
    ["utils.h", "atomic.h", "reduction/ops.h", "indexing/indexing.h", "indexing/gather_axis.h",
     "indexing/scatter_axis.h", "indexing/gather.h", "indexing/scatter.h"],
    per_dtype('instantiate_kernel("gather_axis_{n}_int32", gather_axis, {t}, int32_t, int, '
              'true, true)\n'
              'instantiate_kernel("scatter_axis_sum_{n}_int32", scatter_axis, {t}, int32_t, int, '
              'Sum<{t}>, true, true)\n'
              'instantiate_kernel("gather_axis_{n}_uint32_nc", gather_axis, {t}, uint32_t, '
              'int64_t, false, false)\n'
              'instantiate_kernel("scatter_axis_max_{n}_int64", scatter_axis, {t}, int64_t, '
              'int64_t, Max<{t}>, false, false)\n', keep=2),
    run_gather)


# steel GEMM: gemm (steel_gemm_fused.h) with MLX's function constants (no batch, no C source,
# unaligned tiles), as steel_gemm_fused.metal instantiates it.
GEMM_PARAMS = np.dtype([("M", "i4"), ("N", "i4"), ("K", "i4"), ("lda", "i4"), ("ldb", "i4"),
                        ("ldd", "i4"), ("tiles_n", "i4"), ("tiles_m", "i4"),
                        ("batch_stride_a", "i8"), ("batch_stride_b", "i8"),
                        ("batch_stride_d", "i8"), ("swizzle_log", "i4"),
                        ("gemm_k_iterations_aligned", "i4"), ("batch_ndim", "i4")], align=True)


def run_gemm(lib, dtype, stream, rng):
    m, n, k = 37, 45, 40
    bm, bn, bk, wm, wn = 32, 32, 16, 2, 2
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    tm, tn = groups(m, bm), groups(n, bn)
    p = np.zeros(1, GEMM_PARAMS)
    p[0] = (m, n, k, k, n, n, tn, tm, m * k, k * n, m * n, 0, k // bk, 1)
    out = lib[f"steel_gemm_fused_nn_{dtype}_{dtype}_bm32_bn32_bk16_wm2_wn2"](
        a, b, poison((m, n), dtype), p.view(np.uint8), threads=(32 * tn, wn * tm, wm),
        group_size=(32, wn, wm), stream=stream)
    check(out, f64(a) @ f64(b), dtype, scale=4.0)


GEMM = Family(
    ["utils.h", "steel/gemm/gemm.h", "steel/gemm/kernels/steel_gemm_fused.h"],
    per_dtype('instantiate_kernel("steel_gemm_fused_nn_{n}_{n}_bm32_bn32_bk16_wm2_wn2", gemm, '
              '{t}, 32, 32, 16, 2, 2, false, false, float)\n')
    + 'instantiate_kernel("steel_gemm_fused_tn_float32_float32_bm64_bn64_bk16_wm2_wn2", gemm, '
      'float, 64, 64, 16, 2, 2, true, false, float)\n',
    run_gemm,
    function_constants={10: False, 100: False, 110: False, 200: False, 201: False, 202: False})


# steel conv: implicit_gemm_conv_2d (steel/conv/kernels/steel_conv.h), instantiated as MLX's
# steel_conv.metal does, dispatched as conv.cpp's implicit_gemm_conv_2D_gpu: NHWC input, OHWI
# weights, MLXConvParams<2> and ImplicitGemmConv2DParams as bytes (buffers 3 and 4).
CONV_PARAMS = np.dtype([("N", "i4"), ("C", "i4"), ("O", "i4"), ("iS", "i4", 2), ("wS", "i4", 2),
                        ("oS", "i4", 2), ("str", "i4", 2), ("pad", "i4", 2), ("kdil", "i4", 2),
                        ("idil", "i4", 2), ("in_strides", "i8", 4), ("wt_strides", "i8", 4),
                        ("out_strides", "i8", 4), ("groups", "i4"), ("flip", "?")], align=True)
CONV_GEMM_PARAMS = np.dtype([(f, "i4") for f in (
    "M", "N", "K", "gemm_k_iterations", "inp_jump_w", "inp_jump_h", "inp_jump_c", "tiles_n",
    "tiles_m", "swizzle_log")])
assert CONV_PARAMS.itemsize == 176  # the header's layout: int64 strides at 72, groups at 168


def conv2d_ref(x, w, stride, pad):
    """float64 cross-correlation (MLX's conv2d, flip off): x (N, H, W, C), w (O, kh, kw, C)."""
    n, h, wd, c = x.shape
    o, kh, kw, _ = w.shape
    xp = np.zeros((n, h + 2 * pad[0], wd + 2 * pad[1], c))
    xp[:, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh = (h + 2 * pad[0] - kh) // stride[0] + 1
    ow = (wd + 2 * pad[1] - kw) // stride[1] + 1
    out = np.zeros((n, oh, ow, o))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i:i + stride[0] * (oh - 1) + 1:stride[0],
                     j:j + stride[1] * (ow - 1) + 1:stride[1]]
            out += win @ w[:, i, j, :].T
    return out


def run_steel_conv(lib, dtype, stream, rng):
    # (N, H, W, C, O, kernel, stride, pad): O <= 16 takes MLX's bn 8 tiles (wm 4, wn 1), the
    # other its 32x32 tiles (wm 2, wn 2); both leave a partial tile in M, the first also in N.
    for n, h, wd, c, o, (kh, kw), st, pad in ((2, 9, 11, 16, 12, (3, 3), (2, 1), (1, 1)),
                                              (2, 7, 8, 32, 32, (2, 3), (1, 2), (1, 0))):
        x, w = rand(rng, (n, h, wd, c), dtype), rand(rng, (o, kh, kw, c), dtype)
        oh, ow = (h + 2 * pad[0] - kh) // st[0] + 1, (wd + 2 * pad[1] - kw) // st[1] + 1
        # The host logic of implicit_gemm_conv_2D_gpu (one group, no channel specialisation:
        # C a multiple of 16; O <= 16 or a multiple of 16, as MLX sends such convs here).
        gm, gn, gk = n * oh * ow, o, kh * kw * c
        bm, bk, wm, wn = 32, 16, 2, 2
        bn = 64 if gn >= 64 else 32
        if gn <= 16:
            bn, wm, wn = 8, 4, 1
        tn, tm = groups(gn, bn), groups(gm, bm)
        in_st = (h * wd * c, wd * c, c, 1)
        ijw, ijh = in_st[2], in_st[1]  # kernel dilation 1
        p = np.zeros(1, CONV_PARAMS)
        p[0] = (n, c, o, (h, wd), (kh, kw), (oh, ow), st, pad, (1, 1), (1, 1), in_st,
                (kh * kw * c, kw * c, c, 1), (oh * ow * o, ow * o, o, 1), 1, False)
        g = np.zeros(1, CONV_GEMM_PARAMS)
        g[0] = (gm, gn, gk, kh * kw * groups(c, bk), ijw, ijh - (kw - 1) * ijw,
                bk - (kh - 1) * ijh - (kw - 1) * ijw, tn, tm, 0)
        out = lib[f"implicit_gemm_conv_2d_{dtype}_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
                  "_channel_l_filter_s"](
            x, w, poison((n, oh, ow, o), dtype), p.view(np.uint8), g.view(np.uint8),
            threads=(32 * tn, wn * tm, wm), group_size=(32, wn, wm), stream=stream)
        check(out, conv2d_ref(f64(x), f64(w), st, pad), dtype, scale=4.0)


CONV_INST = """template [[host_name("implicit_gemm_conv_2d_{n}_bm{bm}_bn{bn}_bk16_wm{wm}_wn{wn}\
_channel_{cn}_filter_{fn}")]] [[kernel]] void
implicit_gemm_conv_2d<{t}, {bm}, {bn}, 16, {wm}, {wn}, {nc}, {small}>(
    const device {t}* A [[buffer(0)]],
    const device {t}* B [[buffer(1)]],
    device {t}* C [[buffer(2)]],
    const constant MLXConvParams<2>* params [[buffer(3)]],
    const constant ImplicitGemmConv2DParams* gemm_params [[buffer(4)]],
    uint3 tid [[threadgroup_position_in_grid]],
    uint3 lid [[thread_position_in_threadgroup]],
    uint simd_gid [[simdgroup_index_in_threadgroup]],
    uint simd_lid [[thread_index_in_simdgroup]]);
"""
CONV_GENERAL_INST = """template [[host_name("implicit_gemm_conv_2d_general_float32_bm32_bn32_bk16\
_wm2_wn2")]] [[kernel]] void
implicit_gemm_conv_2d_general<float, 32, 32, 16, 2, 2>(
    const device float* A [[buffer(0)]],
    const device float* B [[buffer(1)]],
    device float* C [[buffer(2)]],
    const constant MLXConvParams<2>* params [[buffer(3)]],
    const constant ImplicitGemmConv2DParams* gemm_params [[buffer(4)]],
    const constant Conv2DGeneralJumpParams* jump_params [[buffer(5)]],
    const constant Conv2DGeneralBaseInfo* base_h [[buffer(6)]],
    const constant Conv2DGeneralBaseInfo* base_w [[buffer(7)]],
    uint3 tid [[threadgroup_position_in_grid]],
    uint3 lid [[thread_position_in_threadgroup]],
    uint simd_gid [[simdgroup_index_in_threadgroup]],
    uint simd_lid [[thread_index_in_simdgroup]]);
"""


def conv_inst(n, bm, bn, wm, wn, cn="l", nc=0, fn="s", small="true"):
    return CONV_INST.format(t=METAL_TYPE[n], n=n, bm=bm, bn=bn, wm=wm, wn=wn, cn=cn, nc=nc,
                            fn=fn, small=small)


STEEL_CONV = Family(
    ["utils.h", "steel/gemm/mma.h", "steel/conv/conv.h", "steel/conv/params.h",
     "steel/conv/kernels/steel_conv.h", "steel/conv/kernels/steel_conv_general.h"],
    "".join(conv_inst(n, 32, 8, 4, 1) + conv_inst(n, 32, 32, 2, 2) for n in DTYPES)
    # Compiled, not run: the large-filter and small-channel loaders, the general kernel.
    + conv_inst("float32", 64, 64, 2, 2, fn="l", small="false")
    + conv_inst("float32", 32, 32, 2, 2, cn="2", nc=2, fn="l", small="false")
    + CONV_GENERAL_INST,
    run_steel_conv)


# quantized: affine_dequantize (run), affine_qmv_fast, affine_qmm_t, affine_quantize.
def run_quantized(lib, dtype, stream, rng):
    rows, cols, gs = 4, 256, 64
    q = rng.integers(0, 16, size=(rows, cols)).astype(np.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)  # 4 bits, low nibble first
    scales = rand(rng, (rows, cols // gs), dtype, 0.01, 0.2)
    biases = rand(rng, (rows, cols // gs), dtype, -1, 1)
    out = lib[f"affine_dequantize_{dtype}_gs_64_b_4"](
        packed, scales, biases, poison((rows, cols), dtype), threads=(cols // 2, rows, 1),
        group_size=(cols // 2, 1, 1), stream=stream)
    ref = q * np.repeat(f64(scales), gs, axis=1) + np.repeat(f64(biases), gs, axis=1)
    check(out, ref, dtype, scale=2.0)


QUANTIZED = Family(
    ["utils.h", "steel/gemm/gemm.h", "quantized_utils.h", "quantized.h"],
    per_dtype('instantiate_kernel("affine_dequantize_{n}_gs_64_b_4", affine_dequantize, {t}, '
              '64, 4)\n'
              'instantiate_kernel("affine_quantize_{n}_gs_64_b_4", affine_quantize, {t}, 64, 4)\n'
              'instantiate_kernel("affine_qmv_fast_{n}_gs_64_b_4_batch_0", affine_qmv_fast, '
              '{t}, 64, 4, false)\n'
              'instantiate_kernel("affine_qmm_t_{n}_gs_32_b_8_alN_true_batch_0", affine_qmm_t, '
              '{t}, 32, 8, true, false)\n', keep=1),
    run_quantized)


# steel attention: the tiled attention kernel (steel/attn/kernels/steel_attention.h) as
# steel_attention.metal instantiates it and MLX's sdpa_full dispatches it (bq 32, bk 32 for
# head dim 64, wm 4, wn 1; a threadgroup of (32, wm, wn) per query block, head and batch),
# with grouped-query heads and lengths that are not multiples of the blocks (align_Q/align_K
# false: the partial last blocks), no mask, not causal.
ATTN_PARAMS = np.dtype([("B", "i4"), ("H", "i4"), ("D", "i4"), ("qL", "i4"), ("kL", "i4"),
                        ("gqa_factor", "i4"), ("scale", "f4"), ("NQ", "i4"), ("NK", "i4"),
                        ("NQ_aligned", "i4"), ("NK_aligned", "i4"), ("qL_rem", "i4"),
                        ("kL_rem", "i4"), ("qL_off", "i4"), ("Q_strides", "i8", 3),
                        ("K_strides", "i8", 3), ("V_strides", "i8", 3), ("O_strides", "i8", 3)],
                       align=True)


def run_steel_attention(lib, dtype, stream, rng):
    b, h, hkv, ql, kl, d = 2, 4, 2, 40, 45, 64
    bq, bk, wm, wn = 32, 32, 4, 1
    q = rand(rng, (b, h, ql, d), dtype)
    k, v = rand(rng, (b, hkv, kl, d), dtype), rand(rng, (b, hkv, kl, d), dtype)
    scale = 1.0 / np.sqrt(d)
    nq, nk = groups(ql, bq), groups(kl, bk)
    p = np.zeros(1, ATTN_PARAMS)
    p[0] = (b, h, d, ql, kl, h // hkv, scale, nq, nk, ql // bq, kl // bk, ql - (ql // bq) * bq,
            kl - (kl // bk) * bk, kl - ql, (h * ql * d, ql * d, d), (hkv * kl * d, kl * d, d),
            (hkv * kl * d, kl * d, d), (h * ql * d, ql * d, d))
    out = lib[f"steel_attention_{dtype}_bq32_bk32_bd64_wm4_wn1_mask{dtype}"](
        q, k, v, poison((b, h, ql, d), dtype), p.view(np.uint8),
        threads=(32 * nq, wm * h, wn * b), group_size=(32, wm, wn), stream=stream)
    kk, vv = np.repeat(f64(k), h // hkv, 1), np.repeat(f64(v), h // hkv, 1)
    s = f64(q) @ kk.transpose(0, 1, 3, 2) * scale
    e = np.exp(s - s.max(-1, keepdims=True))
    check(out, (e / e.sum(-1, keepdims=True)) @ vv, dtype, scale=2.0)


STEEL_ATTENTION = Family(
    ["utils.h", "steel/attn/kernels/steel_attention.h"],
    per_dtype('instantiate_kernel("steel_attention_{n}_bq32_bk32_bd64_wm4_wn1_mask{n}", '
              'attention, {t}, 32, 32, 64, 64, 4, 1, {t}, float)\n'),
    run_steel_attention,
    function_constants={200: False, 201: False, 300: False, 301: False, 302: False, 303: False})


# sdpa_vector: single-pass vector attention (one query row per threadgroup), no mask.
def run_sdpa(lib, dtype, stream, rng):
    bh, hkv, ql, n, d = 4, 2, 1, 70, 64
    q = rand(rng, (bh, ql, d), dtype)
    k, v = rand(rng, (hkv, n, d), dtype), rand(rng, (hkv, n, d), dtype)
    scale = 1.0 / np.sqrt(d)
    out = lib[f"sdpa_vector_{dtype}_64_64"](
        q, k, v, poison((bh, ql, d), dtype), np.int32(bh // hkv), np.int32(n), np.uint64(n * d),
        np.uint64(d), np.uint64(n * d), np.uint64(d), np.float32(scale),
        threads=(1024 * bh, ql, 1), group_size=(1024, 1, 1), stream=stream)
    kk, vv = np.repeat(f64(k), bh // hkv, 0), np.repeat(f64(v), bh // hkv, 0)
    s = f64(q) @ kk.transpose(0, 2, 1) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    check(out, (p / p.sum(-1, keepdims=True)) @ vv, dtype, scale=2.0)


SDPA = Family(
    ["utils.h", "sdpa_vector.h"],
    per_dtype('instantiate_kernel("sdpa_vector_{n}_64_64", sdpa_vector, {t}, 64, 64)\n'
              'instantiate_kernel("sdpa_vector_2pass_1_{n}_128_128", sdpa_vector_2pass_1, '
              '{t}, 128, 128)\n'
              'instantiate_kernel("sdpa_vector_2pass_2_{n}_128", sdpa_vector_2pass_2, {t}, 128)\n', keep=1),
    run_sdpa,
    function_constants={20: False, 21: False, 22: False, 23: False, 24: False, 25: False, 26: 32})


# fft: the radix-step fft kernel (complex64 -> complex64), as fft.metal instantiates it; function
# constants give the plan (64 = 4^3: three radix-4 steps).
def run_fft(lib, dtype, stream, rng):
    if dtype != "float32":
        pytest.skip("MLX's fft kernels are complex64 (float32) only")
    n, batch = 64, 3
    x = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(
        np.complex64)
    xs = x.view(np.float32).reshape(batch, n, 2)
    threads_per_fft = n // 4  # elems_per_thread = 4
    out = lib["fft_mem_64_complex64"](
        xs, poison((batch, n, 2), "float32"), np.int32(n), np.int32(batch),
        threads=(batch, 1, threads_per_fft), group_size=(1, 1, threads_per_fft), stream=stream)
    got = np.asarray(out).astype(np.float64)
    ref = np.fft.fft(x.astype(np.complex128), axis=1)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], ref, rtol=1e-4, atol=1e-4)


FFT_CONSTANTS = {0: False, 1: True, 2: 4, 3: 1}
FFT_CONSTANTS.update({i: 0 for i in range(4, 22)})
FFT_CONSTANTS[10] = 3  # radix_4_steps_
FFT = Family(
    ["utils.h", "fft.h"],
    'instantiate_kernel("fft_mem_64_complex64", fft, 64, float2, float2)\n'
    'instantiate_kernel("fft_mem_256_float32", fft, 256, float, float2)\n'
    'instantiate_kernel("rader_mem_64_complex64", rader_fft, 64, float2, float2)\n',
    run_fft,
    function_constants=FFT_CONSTANTS)


FAMILIES = {
    "arange": ARANGE,
    "unary": UNARY,
    "binary": BINARY,
    "ternary": TERNARY,
    "copy": COPY,
    "softmax": SOFTMAX,
    "logsumexp": LOGSUMEXP,
    "reduce": REDUCE,
    "scan": SCAN,
    "sort": SORT,
    "gemv": GEMV,
    "hadamard": HADAMARD,
    "gather_scatter": GATHER,
    "steel_gemm": GEMM,
    "steel_conv": STEEL_CONV,
    "quantized": QUANTIZED,
    "sdpa_vector": SDPA,
    "steel_attention": STEEL_ATTENTION,
    "fft": FFT,
}

# ---- families of MLX's `.metal` units -----------------------------------------------------------
#
# arg_reduce, rope, layer_norm, rms_norm, random and conv keep their kernels in MLX's `.metal`
# units, which the wheel does not ship (MLX publishes no sdist). Their source: $ALLOY_MLX_SRC, an
# MLX source tree (the folder holding mlx/backend/metal/kernels/*.metal), or else the units and
# the headers they include, downloaded once at a pinned commit into the cache; otherwise skipped.
# Each unit is read whole, as MLX's build reads it; only the kernels named here compile.

MLX_COMMIT = "846d176227a0ac13d2667e58d2bb68b322109ab0"
MLX_RAW = "https://raw.githubusercontent.com/ml-explore/mlx/" + MLX_COMMIT + "/"
UNITS_MISSING = ("MLX .metal units not available: set ALLOY_MLX_SRC or allow access to "
                 "raw.githubusercontent.com")


@dataclasses.dataclass
class Unit:
    unit: str  # the .metal file, relative to mlx/backend/metal/kernels/
    kernels: list  # the host names compiled (those that run, for each dtype, and a few more)
    run: object  # run(lib, dtype, stream, rng)
    function_constants: dict = dataclasses.field(default_factory=dict)


def _download_units(dest, units, timeout=10):
    """The units and every `mlx/...` header they include (transitively), from MLX's repository
    at MLX_COMMIT, into dest (written whole or not at all)."""
    import re
    import shutil
    import urllib.request

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        todo, seen = [f"{KERNELS}/{u}" for u in units], set()
        while todo:
            rel = todo.pop()
            if rel in seen:
                continue
            seen.add(rel)
            try:
                with urllib.request.urlopen(MLX_RAW + rel, timeout=timeout) as r:
                    text = r.read().decode()
            except Exception as e:  # noqa: BLE001 - offline, refused, not found: all skip
                pytest.skip(f"{UNITS_MISSING} ({rel}: {e})")
            out = pathlib.Path(tmp) / "src" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            todo += re.findall(r'^\s*#\s*include\s+"(mlx/[^"]+)"', text, re.M)
        if dest.exists():
            shutil.rmtree(dest)
        (pathlib.Path(tmp) / "src").rename(dest)


@pytest.fixture(scope="session")
def mlx_src():
    """The root of an MLX source tree holding the units of UNITS (and the headers they use)."""
    units = sorted({u.unit for u in UNITS.values()})
    env = os.environ.get("ALLOY_MLX_SRC")
    if env:
        root = pathlib.Path(env)
        missing = [u for u in units if not (root / KERNELS / u).exists()]
        if missing:
            pytest.fail(f"ALLOY_MLX_SRC={env} holds no {KERNELS}/{missing[0]}")
        return root
    root = _cache_dir() / f"mlx-src-{MLX_COMMIT[:12]}"
    if not all((root / KERNELS / u).exists() for u in units):
        _download_units(root, units)
    return root


def block_dims(d0, d1, d2, pow2=10):
    """MLX's get_block_dims: powers of two per axis, grown in turn while each fits its extent,
    up to 2^pow2 threads."""
    pows, total = [0, 0, 0], 0
    while True:
        before = total
        for i, d in enumerate((d0, d1, d2)):
            if d >= 1 << (pows[i] + 1):
                pows[i] += 1
                total += 1
            if total == 10:
                return tuple(1 << p for p in pows)
        if total == before or total == pow2:
            return tuple(1 << p for p in pows)


# arg_reduce (arg_reduce.metal): arg_reduce_general, dispatched as ArgReduce::eval_gpu: one
# threadgroup of ceil(axis / 4) threads (rounded up to 32) per output element.
def run_arg_reduce(lib, dtype, stream, rng):
    rows, axis = 5, 300
    x = rand(rng, (rows, axis), dtype)  # bfloat16 has ties: the first index wins, as numpy's
    one = np.array([1], np.int64)
    # Along the rows (contiguous axis) and along the columns (the axis strided by a row).
    for a, n_out, in_st, axis_stride in ((1, rows, axis, 1), (0, axis, 1, axis)):
        n_axis = axis if a == 1 else rows
        tg = row_threads(n_axis, 4)
        out = lib[f"argmax_{dtype}"](
            x, poison(n_out, np.uint32), np.array([n_out], np.int32),
            np.array([in_st], np.int64), one, np.uint64(1), np.int64(axis_stride),
            np.uint64(n_axis), threads=(tg, n_out, 1), group_size=(tg, 1, 1), stream=stream)
        np.testing.assert_array_equal(np.asarray(out), np.argmax(f64(x), axis=a))


def rope_ref(x, offsets, base, scale, traditional):
    """MLX's rope (dims = D, forward) in float64: x (B, N, T, D), an offset per batch."""
    b, n, t, d = x.shape
    half = d // 2
    inv_freq = base ** (-np.arange(half) / half)
    pos = scale * (np.arange(t)[None, :] + offsets[:, None])  # (B, T)
    theta = pos[:, None, :, None] * inv_freq  # (B, 1, T, half)
    c, s = np.cos(theta), np.sin(theta)
    if traditional:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = x[..., :half], x[..., half:]
    r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c
    out = np.empty_like(x)
    if traditional:
        out[..., 0::2], out[..., 1::2] = r1, r2
    else:
        out[..., :half], out[..., half:] = r1, r2
    return out


# rope (rope.metal): the general kernel (T > 1, an offset per batch), dispatched as
# RoPE::eval_gpu: a grid of (dims / 2, T, B * ceil(heads / 4)) threads, get_block_dims groups;
# traditional and forward are function constants.
def run_rope(lib, dtype, stream, rng, traditional=False):
    b, n, t, d = 2, 5, 6, 32
    base, scale = 10000.0, 0.5
    x = rand(rng, (b, n, t, d), dtype)
    offsets = rng.integers(0, 8, b).astype(np.int32)
    strides = np.array([t * d, d, 1], np.int64)
    grid = (d // 2, t, b * groups(n, 4))
    out = lib[f"rope_{dtype}"](
        x, poison(x.shape, dtype), offsets, np.float32(scale), strides, strides, np.int64(1),
        np.int32(n), np.float32(np.log2(base)), threads=grid, group_size=block_dims(*grid),
        stream=stream)
    check(out, rope_ref(f64(x), f64(offsets), base, scale, traditional), dtype, scale=2.0)


def run_rope_traditional(lib, dtype, stream, rng):
    run_rope(lib, dtype, stream, rng, traditional=True)


def norm_threads(axis, n_reads):
    """MLX's normalization kernels: ceil(axis / n_reads) threads rounded up to a simdgroup."""
    return groups(groups(axis, n_reads), 32) * 32


# layer_norm (layer_norm.metal): layer_norm_single_row, dispatched as LayerNorm::eval_gpu. The
# kernel pads a thread's partial reads with `for (i = n; i < N_READS; i++) thread_x[i] = mean`,
# n = axis - lid * 8: a thread wholly past the row's end (n < 0) writes below its array (harmless
# in Metal's registers, a stack overwrite on the CPU). The row is sized as MLX's dispatch leaves
# no such thread: 253 = 31 full reads and a partial one, in 32 threads.
def run_layer_norm(lib, dtype, stream, rng):
    rows, axis, eps = 4, 253, 1e-5
    x, w, bias = rand(rng, (rows, axis), dtype), rand(rng, axis, dtype), rand(rng, axis, dtype)
    tg = norm_threads(axis, 8)
    out = lib[f"layer_norm{dtype}"](
        x, w, bias, poison((rows, axis), dtype), np.float32(eps), np.uint32(axis), np.uint32(1),
        np.uint32(1), threads=rows * tg, group_size=tg, stream=stream)
    xd = f64(x)
    xn = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + eps)
    check(out, xn * f64(w) + f64(bias), dtype, scale=4.0)


# rms_norm (rms_norm.metal): rms_single_row, dispatched as RMSNorm::eval_gpu (RMS_N_READS 4).
def run_rms_norm(lib, dtype, stream, rng):
    rows, axis, eps = 4, 300, 1e-5
    x, w = rand(rng, (rows, axis), dtype), rand(rng, axis, dtype)
    tg = norm_threads(axis, 4)
    out = lib[f"rms{dtype}"](x, w, poison((rows, axis), dtype), np.float32(eps),
                             np.uint32(axis), np.uint32(1), threads=rows * tg, group_size=tg,
                             stream=stream)
    xd = f64(x)
    check(out, xd / np.sqrt((xd * xd).mean(1, keepdims=True) + eps) * f64(w), dtype, scale=4.0)


def threefry2x32(key, x0, x1):
    """Threefry-2x32 with 20 rounds (Salmon et al.), as MLX keys its random bits: key (2,)
    uint32, counters x0, x1 (uint32 arrays) -> two uint32 arrays."""
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    ks = (np.uint32(key[0]), np.uint32(key[1]), np.uint32(key[0] ^ key[1] ^ 0x1BD11BDA))
    with np.errstate(over="ignore"):
        x0, x1 = x0 + ks[0], x1 + ks[1]
        for i in range(5):
            for r in rot[i % 2]:
                x0 = x0 + x1
                x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
            x0 = x0 + ks[(i + 1) % 3]
            x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def random_bits_ref(key, nbytes):
    """MLX's random bits of one key: 32-bit words w[j] = threefry(key, (j, j + h))[0] and
    w[j + h] = ...[1] for j < h = ceil(words / 2) (an odd count drops the last second word,
    counter 0), little-endian, cut to nbytes."""
    words = groups(nbytes, 4)
    h = groups(words, 2)
    j = np.arange(h, dtype=np.uint32)
    last = np.zeros(h, bool)
    last[-1] = words % 2 == 1
    a, b = threefry2x32(key, j, np.where(last, np.uint32(0), j + np.uint32(h)))
    w = np.concatenate([a, b[:words - h]]).astype("<u4")
    return w.view(np.uint8)[:nbytes]


# random (random.metal): rbitsc, dispatched as RandomBits::eval_gpu: a grid of (keys,
# ceil(words / 2)) threads. The bytes per key follow the dtype's width (MLX's random.bits with
# width 4 or 2): 36 words; 18 words, the last half written; 19 words (odd: the last thread
# writes one word), the last half written. Checked against threefry in numpy, and for even word
# counts against MLX's own bits where the `mlx` package is installed.
RANDOM_ELEMS = {"float32": 36, "float16": 35, "bfloat16": 37}


def run_random(lib, dtype, stream, rng):
    width = np.dtype(DTYPES[dtype]).itemsize
    n_keys, nbytes = 3, RANDOM_ELEMS[dtype] * width
    keys = rng.integers(0, 2**32, size=(n_keys, 2), dtype=np.uint32)
    words = groups(nbytes, 4)
    grid = (n_keys, groups(words, 2), 1)
    out = lib["rbitsc"](keys, poison(n_keys * nbytes, np.int8), np.bool_(words % 2),
                        np.uint64(nbytes), threads=grid, group_size=block_dims(*grid),
                        stream=stream)
    got = np.asarray(out).view(np.uint8).reshape(n_keys, nbytes)
    for k in range(n_keys):
        np.testing.assert_array_equal(got[k], random_bits_ref(keys[k], nbytes))
    if words % 2:
        return
    try:
        import mlx.core as mx
    except ImportError:
        return  # the numpy threefry above is the reference; MLX adds its own bits
    # MLX's own bits (the `mlx` package, CPU): random.split(key, num) is random.bits of 2 * num
    # words of width 4, the same counters as any even word count.
    for k in range(n_keys):
        bits = mx.random.split(mx.array(keys[k]), words // 2, stream=mx.cpu)
        mine = np.array(bits).astype("<u4").view(np.uint8).reshape(-1)[:nbytes]
        np.testing.assert_array_equal(got[k], mine)


# conv (conv.metal): depthwise_conv_2d, dispatched as conv.cpp's depthwise_conv_2D_gpu (one
# input channel per group, C a multiple of 16): threadgroups of (8 channels, 8 columns, 4 rows),
# the kernel size, strides and tile given as function constants; MLXConvParams<2> as bytes.
DEPTHWISE = {"kernel": (3, 3), "stride": (1, 2)}


def run_depthwise_conv(lib, dtype, stream, rng):
    n, h, wd, c = 2, 10, 13, 16
    (kh, kw), st, pad = DEPTHWISE["kernel"], DEPTHWISE["stride"], (1, 1)
    tc, tw, th = 8, 8, 4
    x, w = rand(rng, (n, h, wd, c), dtype), rand(rng, (c, kh, kw, 1), dtype)
    oh, ow = (h + 2 * pad[0] - kh) // st[0] + 1, (wd + 2 * pad[1] - kw) // st[1] + 1
    p = np.zeros(1, CONV_PARAMS)
    p[0] = (n, c, c, (h, wd), (kh, kw), (oh, ow), st, pad, (1, 1), (1, 1),
            (h * wd * c, wd * c, c, 1), (kh * kw, kw, 1, 1), (oh * ow * c, ow * c, c, 1), c,
            False)
    out = lib[f"depthwise_conv_2d_{dtype}"](
        x, w, poison((n, oh, ow, c), dtype), p.view(np.uint8),
        threads=(c, groups(ow, tw) * tw, groups(oh, th) * th * n), group_size=(tc, tw, th),
        stream=stream)
    xd, wt = f64(x), f64(w)
    xp = np.zeros((n, h + 2 * pad[0], wd + 2 * pad[1], c))
    xp[:, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = xd
    ref = np.zeros((n, oh, ow, c))
    for i in range(kh):
        for j in range(kw):
            ref += xp[:, i:i + st[0] * (oh - 1) + 1:st[0], j:j + st[1] * (ow - 1) + 1:st[1]] \
                * wt[:, i, j, 0]
    check(out, ref, dtype, scale=2.0)


UNITS = {
    "arg_reduce": Unit("arg_reduce.metal", [f"argmax_{n}" for n in DTYPES]
                       + ["argmin_float32", "argmax_int32"], run_arg_reduce),
    "rope": Unit("rope.metal", [f"rope_{n}" for n in DTYPES]
                 + ["rope_single_float32", "rope_freqs_large_float32"], run_rope,
                 {1: True, 2: False, 3: False}),
    "rope_traditional": Unit("rope.metal", [f"rope_{n}" for n in DTYPES], run_rope_traditional,
                             {1: True, 2: True, 3: False}),
    "layer_norm": Unit("layer_norm.metal", [f"layer_norm{n}" for n in DTYPES]
                       + ["layer_norm_loopedfloat32"], run_layer_norm),
    "rms_norm": Unit("rms_norm.metal", [f"rms{n}" for n in DTYPES] + ["rms_loopedfloat32"],
                     run_rms_norm),
    "random": Unit("random.metal", ["rbitsc", "rbits"], run_random),
    "conv": Unit("conv.metal", [f"depthwise_conv_2d_{n}" for n in DTYPES]
                 + ["naive_unfold_nd_float32_2", "winograd_conv_2d_input_transform_float32_bc32"],
                 run_depthwise_conv,
                 {0: DEPTHWISE["kernel"][0], 1: DEPTHWISE["kernel"][1],
                  10: DEPTHWISE["stride"][0], 11: DEPTHWISE["stride"][1], 100: 4, 101: 8,
                  200: False}),
}


# ---- the tests -----------------------------------------------------------------------------------

_LIBS = {}


def library(name, inc):
    """The family's library (read once per session; compiled kernels are cached by Alloy)."""
    if name not in _LIBS:
        fam = FAMILIES[name]
        _LIBS[name] = alloy.compile_shader(fam.source(), include_dirs=[str(inc)],
                                           function_constants=fam.function_constants or None,
                                           name=f"mlx_{name}")
    return _LIBS[name]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_compiles_on_cpu(family, mlx_include):
    lib = library(family, mlx_include)
    assert lib.kernel_names(), "no kernel instantiated"
    lib.precompile(stream=alloy.cpu)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_compiles_with_nvrtc(family, mlx_include, tmp_path):
    if not CLI.exists():
        pytest.skip("no build/alloy CLI (build the C++ project first)")
    fam = FAMILIES[family]
    src = tmp_path / f"mlx_{family}.metal"
    src.write_text(fam.source())
    cmd = [str(CLI), "translate", "--library", str(src), "--include-dir", str(mlx_include),
           "--target", "ptx", "--arch", "sm_90"]
    for idx, v in fam.function_constants.items():
        cmd += ["--function-constant", f"{idx}={str(v).lower() if isinstance(v, bool) else v}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and "NVRTC" in r.stderr and "not" in r.stderr and "found" in r.stderr:
        pytest.skip("NVRTC unavailable: " + r.stderr.strip()[:200])
    assert r.returncode == 0, r.stderr[-4000:]
    n = len(library(family, mlx_include).kernel_names())
    assert r.stdout.count(".entry ") == n, "a kernel is missing from the PTX"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("family", sorted(f for f in FAMILIES if FAMILIES[f].run))
def test_family_runs(family, dtype, device, mlx_include):
    lib = library(family, mlx_include)
    FAMILIES[family].run(_Kernels(lib), dtype, device, np.random.default_rng(7))


class _Kernels:
    """lib["host name"](...) -> lib.<host name>(...)."""

    def __init__(self, lib):
        self.lib = lib

    def __getitem__(self, name):
        return getattr(self.lib, name)


_UNIT_LIBS = {}


def unit_library(name, root):
    """The unit's library, read whole from the MLX source tree."""
    if name not in _UNIT_LIBS:
        u = UNITS[name]
        src = (root / KERNELS / u.unit).read_text()
        _UNIT_LIBS[name] = alloy.compile_shader(src, include_dirs=[str(root)],
                                                function_constants=u.function_constants or None,
                                                name=f"mlx_{u.unit}")
    return _UNIT_LIBS[name]


@pytest.mark.parametrize("family", sorted(UNITS))
def test_unit_compiles_on_cpu(family, mlx_src):
    lib = unit_library(family, mlx_src)
    kernels = UNITS[family].kernels
    assert set(kernels) <= set(lib.kernel_names()), "a kernel is missing from the unit"
    lib.precompile(stream=alloy.cpu, kernels=kernels)


@pytest.mark.parametrize("family", sorted(UNITS))
def test_unit_compiles_with_nvrtc(family, mlx_src):
    if not CLI.exists():
        pytest.skip("no build/alloy CLI (build the C++ project first)")
    u = UNITS[family]
    cmd = [str(CLI), "translate", "--library", str(mlx_src / KERNELS / u.unit), "--include-dir",
           str(mlx_src), "--target", "ptx", "--arch", "sm_90"]
    for k in u.kernels:
        cmd += ["--kernel", k]
    for idx, v in u.function_constants.items():
        cmd += ["--function-constant", f"{idx}={str(v).lower() if isinstance(v, bool) else v}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and "NVRTC" in r.stderr and "not" in r.stderr and "found" in r.stderr:
        pytest.skip("NVRTC unavailable: " + r.stderr.strip()[:200])
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.count(".entry ") == len(u.kernels), "a kernel is missing from the PTX"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("family", sorted(UNITS))
def test_unit_runs(family, dtype, device, mlx_src):
    lib = unit_library(family, mlx_src)
    UNITS[family].run(_Kernels(lib), dtype, device, np.random.default_rng(11))
