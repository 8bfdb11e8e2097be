"""Matrix products and row reductions from Python: alloy.matmul (and @) against numpy in float64
over shapes (1-D promotion, batch broadcasting, transposed / stepped views, empty), dtypes and
errors; MLX's affine quantization (quantize, dequantize, quantized_matmul, gather_qmm) against a
numpy float64 reference and, when mlx[cpu] is installed, against MLX's own results; the fused
softmax / logsumexp over the last axis. CPU arrays (GPU runs go through the device script)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import alloy

ml_dtypes = pytest.importorskip("ml_dtypes")


def _cpu_blas_reason():
    try:
        alloy.matmul(alloy.array(np.ones((1, 1), np.float32), device=alloy.cpu),
                     alloy.array(np.ones((1, 1), np.float32), device=alloy.cpu)).eval()
    except alloy.NotSupportedError as e:
        return str(e)
    return None


CPU_BLAS = _cpu_blas_reason()
needs_cpu_blas = pytest.mark.skipif(CPU_BLAS is not None, reason=str(CPU_BLAS))


def arr(x):
    return alloy.array(np.asarray(x), device=alloy.cpu)


def to64(a):
    if a.dtype == alloy.bfloat16:
        a = a.astype(alloy.float32)
    return np.asarray(a).astype(np.float64)


@needs_cpu_blas
@pytest.mark.parametrize(
    "sa,sb",
    [((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((4, 5), (5, 3)), ((2, 4, 5), (5, 3)),
     ((2, 1, 4, 5), (3, 5, 6)), ((5,), (2, 5, 3)), ((3, 70, 130), (3, 130, 40))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_shapes_match_numpy(sa, sb, dtype):
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)
    got = alloy.matmul(arr(a), arr(b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == want.shape and got.dtype == (alloy.float32 if dtype == np.float32 else alloy.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(to64(got), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(to64(arr(a) @ arr(b)), want, rtol=tol, atol=tol)


@needs_cpu_blas
def test_matmul_views_and_broadcast_batches():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((6, 8, 10)).astype(np.float32)
    a = arr(base)
    cases = [
        (alloy.swapaxes(a, 1, 2), a, np.swapaxes(base, 1, 2), base),
        (a[::2, ::2, ::3], a[:3, :4, :5], base[::2, ::2, ::3], base[:3, :4, :5]),
        (alloy.broadcast_to(a[:1], (4, 8, 10)), alloy.swapaxes(a[:4], 1, 2),
         np.broadcast_to(base[:1], (4, 8, 10)), np.swapaxes(base[:4], 1, 2)),
    ]
    for x, y, nx, ny in cases:
        np.testing.assert_allclose(to64(alloy.matmul(x, y)),
                                   nx.astype(np.float64) @ ny.astype(np.float64), rtol=1e-5,
                                   atol=1e-5)


@needs_cpu_blas
@pytest.mark.parametrize("dt,tol", [(np.float16, 4e-3), (ml_dtypes.bfloat16, 3e-2)])
def test_matmul_half_types_accumulate_in_float(dt, tol):
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (8, 300)).astype(dt)
    b = rng.uniform(-1, 1, (300, 9)).astype(dt)
    got = alloy.matmul(arr(a), arr(b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(to64(got), want, rtol=tol, atol=tol * 10)


@needs_cpu_blas
def test_matmul_empty_and_errors():
    assert alloy.matmul(arr(np.zeros((0, 3), np.float32)), arr(np.ones((3, 4), np.float32))).shape == (0, 4)
    z = alloy.matmul(arr(np.zeros((2, 0), np.float32)), arr(np.zeros((0, 3), np.float32)))
    np.testing.assert_array_equal(np.asarray(z), np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError):
        alloy.matmul(arr(np.ones((2, 3), np.int32)), arr(np.ones((3, 2), np.int32)))
    with pytest.raises(ValueError):
        alloy.matmul(arr(np.ones((2, 3), np.float32)), arr(np.ones((4, 2), np.float32)))
    with pytest.raises(ValueError):
        alloy.matmul(arr(np.float32(1)), arr(np.ones(2, np.float32)))


# ---- which OpenBLAS: numpy's is shared -----------------------------------------------------------

# Run in a fresh interpreter: the library is chosen once per process, at the first CPU product.
# Products in float32, float64 and complex64 through each code path of the CPU gemm (gemm with
# either factor transposed, gemv for one output row or column, broadcast batches) against
# complex128 references; prints the library chosen and the OpenBLAS files loaded before and after.
_BLAS_SCRIPT = r"""
import json, os, sys
import numpy as np
import alloy

def loaded():
    with open("/proc/self/maps") as f:
        files = {line.split()[-1] for line in f if len(line.split()) >= 6}
    return sorted(f for f in files if "openblas" in os.path.basename(f))

before = loaded()
rng = np.random.default_rng(7)
worst = 0.0
for dt, tol in ((np.float32, 1e-5), (np.float64, 1e-12), (np.complex64, 1e-5)):
    def rand(*shape):
        x = rng.standard_normal(shape)
        if dt == np.complex64:
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(dt)
    base_a, base_b = rand(3, 9, 7), rand(3, 7, 5)
    cases = [(base_a, base_b),                                   # gemm
             (np.swapaxes(rand(3, 7, 9), 1, 2), base_b),         # A transposed
             (base_a, np.swapaxes(rand(3, 5, 7), 1, 2)),         # B transposed
             (base_a[:, :1, :], base_b),                         # one row: gemv
             (base_a[:, :1, :], np.swapaxes(rand(3, 5, 7), 1, 2)),
             (base_a, base_b[:, :, :1]),                         # one column: gemv
             (np.swapaxes(rand(3, 7, 9), 1, 2), base_b[:, :, :1]),
             (base_a[:1], base_b)]                               # a broadcast batch
    for x, y in cases:
        want = x.astype(np.complex128) @ y.astype(np.complex128)
        ax = alloy.array(np.ascontiguousarray(x), device=alloy.cpu)
        ay = alloy.array(np.ascontiguousarray(y), device=alloy.cpu)
        if x.strides[-1] != x.itemsize:  # pass the transposed ones as views
            ax = alloy.swapaxes(alloy.array(np.ascontiguousarray(np.swapaxes(x, 1, 2)),
                                            device=alloy.cpu), 1, 2)
        if y.strides[-1] != y.itemsize:
            ay = alloy.swapaxes(alloy.array(np.ascontiguousarray(np.swapaxes(y, 1, 2)),
                                            device=alloy.cpu), 1, 2)
        got = np.asarray(alloy.matmul(ax, ay)).astype(np.complex128)
        assert got.shape == want.shape, (got.shape, want.shape)
        err = float(np.max(np.abs(got - want) / (1 + np.abs(want))))
        worst = max(worst, err / tol)
print(json.dumps({"library": alloy.blas_library(), "before": before, "after": loaded(),
                  "worst": worst}))
"""


def _blas_run(env, cwd):
    full = {k: v for k, v in os.environ.items() if k != "ALLOY_OPENBLAS"}
    full.update(env)
    r = subprocess.run([sys.executable, "-c", _BLAS_SCRIPT], capture_output=True, text=True,
                       env=full, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_cpu_blas
def test_cpu_matmul_shares_numpys_openblas(tmp_path):
    """numpy's bundled OpenBLAS (64-bit sizes, scipy_cblas_*64_ names) is used rather than a
    second library with a second thread pool."""
    r = _blas_run({}, tmp_path)  # a directory without the source package
    if not r["before"]:
        pytest.skip("this numpy loads no OpenBLAS")
    file = r["library"].split(" (")[0]  # "<file> (<openblas_get_config()>)"
    assert os.path.realpath(file) in r["before"], r
    assert r["after"] == r["before"], r  # no second OpenBLAS was loaded
    assert r["worst"] <= 1.0, r


@needs_cpu_blas
def test_alloy_openblas_goes_before_a_loaded_one(tmp_path):
    system = next((f for f in ("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                               "/usr/lib/x86_64-linux-gnu/libopenblas.so.0")
                   if os.path.exists(f)), None)
    if system is None:
        pytest.skip("no system OpenBLAS file")
    r = _blas_run({"ALLOY_OPENBLAS": system}, tmp_path)
    assert r["library"].startswith(system), r
    assert r["worst"] <= 1.0, r


# Alloy imported and used before numpy: the Python package names numpy's bundled OpenBLAS, so the
# first CPU product loads it and numpy, imported afterwards, uses the same copy (one thread pool).
_ORDER_SCRIPT = r"""
import json, os, sys
import alloy

def loaded():
    with open("/proc/self/maps") as f:
        files = {line.split()[-1] for line in f if len(line.split()) >= 6}
    return sorted(f for f in files if "openblas" in os.path.basename(f))

a = alloy.reshape(alloy.arange(30, dtype=alloy.float64, device=alloy.cpu), (5, 6))
prod = a @ alloy.transpose(a)
prod.eval()  # the first CPU product chooses the library
library, first, numpy_then = alloy.blas_library(), loaded(), "numpy" in sys.modules
x = [[float(6 * i + j) for j in range(6)] for i in range(5)]
exact = prod.tolist() == [[sum(p * q for p, q in zip(r, s)) for s in x] for r in x]  # integers
refused = not alloy._add_cpu_blas_candidate("/nonexistent/libopenblas.so")
import numpy as np
m = np.ones((64, 64), np.float32)
m @ m  # numpy's own product
print(json.dumps({"library": library, "first": first, "after_numpy": loaded(), "exact": exact,
                  "refused": refused, "named": alloy._numpy_openblas_files(),
                  "numpy_then": numpy_then}))
"""


def test_numpys_openblas_is_shared_when_alloy_comes_first(tmp_path):
    named = alloy._numpy_openblas_files()
    if not named:
        pytest.skip("this numpy bundles no OpenBLAS")
    env = {k: v for k, v in os.environ.items() if k != "ALLOY_OPENBLAS"}
    # (From tmp_path: `-c` puts the working directory first on the path, and python/ holds the
    # package's sources without its extension.)
    r = subprocess.run([sys.executable, "-c", _ORDER_SCRIPT], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["named"] == named and not out["numpy_then"], out
    real = {os.path.realpath(f) for f in named}
    assert os.path.realpath(out["library"].split(" (")[0]) in real, out
    assert len(out["first"]) == 1 and os.path.realpath(out["first"][0]) in real, out
    assert out["after_numpy"] == out["first"], out  # numpy loaded no second OpenBLAS
    assert out["exact"] and out["refused"], out


# ---- quantization ------------------------------------------------------------------------------


def quantize_ref(w, gs, bits):
    """MLX's affine quantization in numpy (float32 steps, as mx.quantize)."""
    w = w.astype(np.float32)
    g = w.reshape(-1, gs)
    nb = np.float32((1 << bits) - 1)
    wmax, wmin = g.max(-1, keepdims=True), g.min(-1, keepdims=True)
    mask = np.abs(wmin) > np.abs(wmax)
    scales = np.maximum((wmax - wmin) / nb, np.float32(1e-7))
    scales = np.where(mask, scales, -scales)
    edge = np.where(mask, wmin, wmax)
    q0 = np.round(edge / scales)
    scales = np.where(q0 != 0, edge / q0, scales).astype(np.float32)
    biases = np.where(q0 == 0, 0, edge).astype(np.float32)
    q = np.clip(np.round((g - biases) / scales), 0, nb).astype(np.uint32)
    per = 32 // bits
    q = q.reshape(-1, per)
    packed = np.zeros(q.shape[0], np.uint32)
    for j in range(per):
        packed |= q[:, j] << np.uint32(bits * j)
    deq = (scales.astype(np.float64) * q.reshape(g.shape) + biases).reshape(w.shape)
    shape = w.shape[:-1]
    return (packed.reshape(*shape, -1), scales.reshape(*shape, -1), biases.reshape(*shape, -1),
            deq)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
def test_quantize_and_products_match_numpy_reference(bits, gs):
    rng = np.random.default_rng(bits * 1000 + gs)
    w = rng.standard_normal((64, 256)).astype(np.float32)
    wq, scales, biases = alloy.quantize(arr(w), gs, bits)
    rq, rs, rb, deq = quantize_ref(w, gs, bits)
    np.testing.assert_array_equal(np.asarray(wq), rq)
    np.testing.assert_array_equal(np.asarray(scales), rs)
    np.testing.assert_array_equal(np.asarray(biases), rb)
    np.testing.assert_allclose(to64(alloy.dequantize(wq, scales, biases, gs, bits)), deq,
                               rtol=1e-6, atol=1e-6)
    x = rng.standard_normal((3, 7, 256)).astype(np.float32)
    got = alloy.quantized_matmul(arr(x), wq, scales, biases, True, gs, bits)
    np.testing.assert_allclose(to64(got), x.astype(np.float64) @ deq.T, rtol=1e-5, atol=1e-4)
    x2 = rng.standard_normal((5, 64)).astype(np.float32)
    got2 = alloy.quantized_matmul(arr(x2), wq, scales, biases, transpose=False, group_size=gs,
                                  bits=bits)
    np.testing.assert_allclose(to64(got2), x2.astype(np.float64) @ deq, rtol=1e-5, atol=1e-4)


def test_gather_qmm_matches_numpy_reference():
    rng = np.random.default_rng(3)
    E, N, K, M = 4, 32, 128, 2
    w = rng.standard_normal((E, N, K)).astype(np.float32)
    wq, s, b = alloy.quantize(arr(w), 64, 4)
    deq = np.stack([quantize_ref(w[e], 64, 4)[3] for e in range(E)])
    x = rng.standard_normal((6, M, K)).astype(np.float32)
    lhs = np.array([0, 5, 5, 2, 1], np.uint32)
    rhs = np.array([3, 3, 0, 1, 2], np.uint32)
    got = alloy.gather_qmm(arr(x), wq, s, b, arr(lhs), arr(rhs), group_size=64, bits=4)
    want = np.einsum("bmk,bnk->bmn", x[lhs].astype(np.float64), deq[rhs])
    assert got.shape == (5, M, N)
    np.testing.assert_allclose(to64(got), want, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError):
        alloy.gather_qmm(arr(x), wq, s, b, arr(np.array([0.5], np.float32)), group_size=64, bits=4)


mx = None
try:
    import mlx.core as mx  # noqa: F811
except ImportError:  # pragma: no cover - mlx[cpu] is installed by scripts/install-deps.sh
    pass


@pytest.mark.skipif(mx is None, reason="mlx[cpu] is not installed")
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
def test_quantized_ops_match_mlx(bits, gs):
    rng = np.random.default_rng(bits + gs)
    w = rng.standard_normal((4, 64, 256)).astype(np.float32)
    ours = alloy.quantize(arr(w), gs, bits)
    theirs = mx.quantize(mx.array(w), group_size=gs, bits=bits)
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(o), np.array(t))
    np.testing.assert_allclose(np.asarray(alloy.dequantize(*ours, gs, bits)),
                               np.array(mx.dequantize(*theirs, group_size=gs, bits=bits)),
                               rtol=1e-6, atol=1e-6)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    o2 = [o[1] for o in ours]
    t2 = [t[1] for t in theirs]
    np.testing.assert_allclose(
        np.asarray(alloy.quantized_matmul(arr(x), *o2, True, gs, bits)),
        np.array(mx.quantized_matmul(mx.array(x), *t2, transpose=True, group_size=gs, bits=bits)),
        rtol=1e-4, atol=1e-4)
    xt = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(alloy.quantized_matmul(arr(xt), *o2, False, gs, bits)),
        np.array(mx.quantized_matmul(mx.array(xt), *t2, transpose=False, group_size=gs,
                                     bits=bits)),
        rtol=1e-4, atol=1e-4)
    xg = rng.standard_normal((5, 2, 256)).astype(np.float32)
    lhs = np.array([4, 0, 2], np.uint32)
    rhs = np.array([3, 3, 1], np.uint32)
    np.testing.assert_allclose(
        np.asarray(alloy.gather_qmm(arr(xg), *ours, arr(lhs), arr(rhs), True, gs, bits)),
        np.array(mx.gather_qmm(mx.array(xg), *theirs, lhs_indices=mx.array(lhs),
                               rhs_indices=mx.array(rhs), transpose=True, group_size=gs,
                               bits=bits)),
        rtol=1e-4, atol=1e-4)
    # rhs only, broadcast against x's batch positions.
    rhs2 = np.array([[1], [0], [3], [2], [1]], np.uint32)
    np.testing.assert_allclose(
        np.asarray(alloy.gather_qmm(arr(xg), *ours, rhs_indices=arr(rhs2), group_size=gs,
                                    bits=bits)),
        np.array(mx.gather_qmm(mx.array(xg), *theirs, rhs_indices=mx.array(rhs2),
                               group_size=gs, bits=bits)),
        rtol=1e-4, atol=1e-4)


@needs_cpu_blas
@pytest.mark.skipif(mx is None, reason="mlx[cpu] is not installed")
def test_matmul_matches_mlx_promotion_and_shapes():
    rng = np.random.default_rng(5)
    for sa, sb in [((3,), (2, 3, 4)), ((2, 1, 3, 4), (5, 4, 2))]:
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float16)
        ours = alloy.matmul(arr(a), arr(b))
        theirs = mx.matmul(mx.array(a), mx.array(b))
        assert ours.shape == tuple(theirs.shape)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        np.testing.assert_allclose(np.asarray(ours), np.array(theirs), rtol=1e-5, atol=1e-5)


# ---- fused softmax / logsumexp -----------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 1), (7, 64), (3, 4, 1000)])
def test_softmax_logsumexp_last_axis(shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.uniform(-8, 8, shape).astype(np.float32)
    x[0, ...] = -np.inf if len(shape) == 2 else x[0, ...]
    x64 = x.astype(np.float64)
    m = x64.max(-1, keepdims=True)
    sh = np.where(np.isinf(m), 0, m)
    s = np.exp(x64 - sh).sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        lse = np.log(s) + sh
        sm = np.exp(x64 - m) / np.exp(x64 - m).sum(-1, keepdims=True)
    np.testing.assert_allclose(to64(alloy.logsumexp(arr(x), axis=-1, keepdims=True)), lse,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to64(alloy.softmax(arr(x), axis=-1)), sm, rtol=1e-5, atol=1e-7)


def test_ops_on_the_gpu_match_numpy(device):
    """The same ops on each device (the GPU case skips without one)."""
    if device == alloy.cpu and CPU_BLAS:
        pytest.skip(CPU_BLAS)
    rng = np.random.default_rng(11)
    a = rng.standard_normal((3, 50, 70)).astype(np.float32)
    b = rng.standard_normal((70, 30)).astype(np.float32)
    put = lambda x: alloy.array(x, device=device)  # noqa: E731
    np.testing.assert_allclose(np.asarray((put(a) @ put(b)).to(alloy.cpu)),
                               a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    w = rng.standard_normal((32, 128)).astype(np.float32)
    wq, s, bi = alloy.quantize(put(w), 64, 4)
    rq, rs, rb, deq = quantize_ref(w, 64, 4)
    np.testing.assert_array_equal(np.asarray(wq.to(alloy.cpu)), rq)
    x = rng.standard_normal((4, 128)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(alloy.quantized_matmul(put(x), wq, s, bi, True, 64, 4).to(alloy.cpu)),
        x.astype(np.float64) @ deq.T, rtol=1e-4, atol=1e-4)
    m = rng.standard_normal((6, 3000)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(alloy.sum(put(m), axis=1).to(alloy.cpu)),
                               m.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4)
    e = np.exp(m.astype(np.float64) - m.max(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(alloy.softmax(put(m), axis=-1).to(alloy.cpu)),
                               e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
