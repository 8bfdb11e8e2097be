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

Families whose kernel templates are not in the wheel (MLX keeps arg_reduce, rope, layer/rms norm,
random and conv in its `.metal` units) are covered by `scripts/mlx_units.py` over MLX's source
(docs/msl-support.md, "MLX's kernel library").
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
    "quantized": QUANTIZED,
    "sdpa_vector": SDPA,
    "steel_attention": STEEL_ATTENTION,
    "fft": FFT,
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
