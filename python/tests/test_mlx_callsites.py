"""Real mx.fast.metal_kernel call sites of mlx-lm and mlx-vlm, run unchanged through alloy.mlx.

Each test calls the package's kernel path (its own kernel, its own call) and the same package's
pure-MLX fallback on the same inputs, in float32 and bfloat16, and compares them. The packages
are installed at test time, pinned and without their (heavy) dependencies, into a cache folder
(`$ALLOY_TEST_CACHE`, default ~/.cache/alloy/test-packages); only the module files that the tests
need are loaded, by path. Without network access the tests are skipped.

The modules build their kernels at import time only when `mx.metal.is_available()`; the loader
reports Metal as present while a module is imported so that its kernel path exists (alloy.mlx
itself does not pretend Metal is there, see docs/mlx.md).
"""

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install 'mlx[cpu]')")
if mx.metal.is_available():
    pytest.skip("MLX has Metal here: alloy.mlx leaves mx.fast.metal_kernel alone",
                allow_module_level=True)

import alloy  # noqa: E402
import alloy.mlx  # noqa: E402,F401  (installs)

PACKAGES = ("mlx-lm==0.32.2", "mlx-vlm==0.7.10")


def _cache_root():
    root = os.environ.get("ALLOY_TEST_CACHE")
    if root:
        return pathlib.Path(root)
    return pathlib.Path.home() / ".cache" / "alloy" / "test-packages"


@pytest.fixture(scope="module")
def site():
    """The folder holding the pinned packages (installed on first use)."""
    target = _cache_root() / "_".join(p.replace("==", "-") for p in PACKAGES)
    if not (target / ".complete").exists():
        staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--no-deps", "--no-compile", "--target", str(staging), *PACKAGES]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            pytest.skip(f"pip install {' '.join(PACKAGES)} timed out (offline?)")
        if r.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            pytest.skip(f"cannot install {' '.join(PACKAGES)} (offline?): {last}")
        (staging / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


_loaded = {}


def load(site, relpath):
    """The module file `relpath` of the installed packages, imported on its own (its package's
    __init__ pulls in transformers & co), with Metal reported present during the import."""
    if relpath in _loaded:
        return _loaded[relpath]
    name = "alloy_test_" + relpath.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, site / relpath)
    module = importlib.util.module_from_spec(spec)
    real = mx.metal.is_available
    mx.metal.is_available = lambda: True
    try:
        spec.loader.exec_module(module)
    finally:
        mx.metal.is_available = real
    _loaded[relpath] = module
    return module


DTYPES = [mx.float32, mx.bfloat16]
# Kernel path vs fallback: the two round differently (fp32 accumulation vs ops in the input
# dtype), so bfloat16 gets bfloat16's tolerance.
TOL = {mx.float32: dict(rtol=2e-5, atol=2e-5), mx.bfloat16: dict(rtol=3e-2, atol=3e-2)}


def f64(a):
    return np.array(a.astype(mx.float32), dtype=np.float64)


def assert_close(kernel_out, fallback_out, dtype, scale=1.0):
    got, want = f64(kernel_out), f64(fallback_out)
    assert got.shape == want.shape
    tol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"] * scale)


def normal(shape, dtype, key, scale=1.0):
    return (mx.random.normal(shape=shape, key=mx.random.key(key)) * scale).astype(dtype)


# ---- mlx-lm: gated delta rule (Qwen3-Next, Kimi-Linear ...) ----------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("variant", ["scalar", "masked", "vectorized", "packed"])
def test_mlx_lm_gated_delta(site, dtype, variant):
    gd = load(site, "mlx_lm/models/gated_delta.py")
    B, T, Hk, Hv = 2, 5, 2, 4
    Dk, Dv = (128, 16) if variant == "packed" else (64, 24)
    q = normal((B, T, Hk, Dk), dtype, 1, 0.2)
    k = normal((B, T, Hk, Dk), dtype, 2, 0.2)
    v = normal((B, T, Hv, Dv), dtype, 3)
    g_shape = (B, T, Hv, Dk) if variant == "vectorized" else (B, T, Hv)
    # Decays in (0.5, 1), gates in (0, 1), as compute_g and sigmoid give them.
    g = mx.random.uniform(0.5, 1.0, g_shape, key=mx.random.key(4))
    g = g if variant == "packed" else g.astype(dtype)  # the packed kernel takes float32 decays
    beta = mx.sigmoid(normal((B, T, Hv), mx.float32, 5)).astype(dtype)
    state = normal((B, Hv, Dv, Dk), mx.float32, 6, 0.1)
    mask = None
    if variant == "masked":
        mask = mx.array(np.random.default_rng(7).random((B, T)) < 0.7)

    y_k, state_k = gd.gated_delta_kernel(q, k, v, g, beta, state, mask)
    y_f, state_f = gd.gated_delta_ops(q, k, v, g, beta, state, mask)
    assert y_k.dtype == dtype and state_k.dtype == mx.float32
    if mask is not None:
        # Padding steps: the kernel writes 0, the ops path leaves a value nobody reads.
        keep = mask[:, :, None, None]
        np.testing.assert_array_equal(f64(mx.where(keep, 0, y_k)), 0)
        y_k, y_f = mx.where(keep, y_k, 0), mx.where(keep, y_f, 0)
    assert_close(y_k, y_f, dtype)
    assert_close(state_k, state_f, dtype)


# ---- mlx-lm: Mamba-2 SSM decode step ---------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_mlx_lm_ssm_update(site, dtype):
    ssm = load(site, "mlx_lm/models/ssm.py")
    n, h, d, g, ds = 2, 4, 16, 2, 64
    x = normal((n, 1, h, d), dtype, 1)
    A_log = normal((h,), mx.float32, 2, 0.5)
    B = normal((n, 1, g, ds), dtype, 3, 0.3)
    C = normal((n, 1, g, ds), dtype, 4, 0.3)
    D = normal((h,), mx.float32, 5)
    dt = normal((n, 1, h), dtype, 6)
    dt_bias = normal((h,), mx.float32, 7, 0.1)
    state = normal((n, h, d, ds), mx.float32, 8, 0.2)
    limit = (0.001, 100.0)

    y_k, state_k = ssm.ssm_update_kernel(x, A_log, B, C, D, dt, dt_bias, state, limit)
    y_f, state_f = ssm.ssm_attn(x, A_log, B, C, D, dt, dt_bias, state, limit)
    assert y_k.dtype == dtype
    assert_close(y_k, y_f, dtype, scale=4)
    assert_close(state_k, state_f, dtype)


# ---- mlx-vlm: image resampling (vision towers' position embeddings, pre-processing) -----------


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_mlx_vlm_nearest_interpolate(site, dtype):
    kern = load(site, "mlx_vlm/models/kernels.py")
    x = normal((2, 3, 7, 9), dtype, 1)
    out_k = kern.nearest_interpolate(x, size=(12, 5))
    out_f = kern._nearest_interpolate_mlx(x, 12, 5)
    assert out_k.dtype == dtype
    np.testing.assert_array_equal(f64(out_k), f64(out_f))  # a gather: exact


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("antialias", [False, True], ids=["plain", "antialias"])
def test_mlx_vlm_bicubic_interpolate(site, dtype, antialias):
    kern = load(site, "mlx_vlm/models/kernels.py")
    x = normal((1, 3, 12, 10), dtype, 2)
    size = (7, 15)  # down in height, up in width
    out_k = kern.bicubic_interpolate(x, size=size, antialias=antialias)
    out_f = kern._bicubic_interpolate_mlx(x, *size, False, antialias)
    assert out_k.dtype == dtype
    assert_close(out_k, out_f, dtype, scale=2)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_mlx_vlm_grid_sample(site, dtype):
    kern = load(site, "mlx_vlm/models/kernels.py")
    x = normal((2, 6, 8, 5), dtype, 3)
    grid = mx.random.uniform(-1.1, 1.1, (2, 4, 7, 2), key=mx.random.key(4)).astype(dtype)
    out_k = kern.grid_sample(x, grid)
    # The reference is the package's own fallback on the same values in float32: its bfloat16
    # run computes the sampling coordinates in bfloat16 and is itself ~0.07 off (the kernel,
    # which keeps them in float, is ~0.006 off), so it cannot judge the kernel at bfloat16's
    # tolerance.
    out_f = kern._grid_sample_mlx(x.astype(mx.float32), grid.astype(mx.float32))
    assert out_k.dtype == dtype
    assert_close(out_k, out_f, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_mlx_vlm_separable_interpolate(site, dtype):
    kern = load(site, "mlx_vlm/models/kernels.py")
    rng = np.random.default_rng(5)
    N, H, W, C, oh, ow, ty, tx = 2, 9, 11, 3, 6, 8, 3, 4
    x = normal((N, H, W, C), dtype, 6)
    iy = mx.array(rng.integers(0, H, (oh, ty)), dtype=mx.int32)
    ix = mx.array(rng.integers(0, W, (ow, tx)), dtype=mx.int32)
    wy = mx.array(rng.random((oh, ty)), dtype=mx.float32)
    wx = mx.array(rng.random((ow, tx)), dtype=mx.float32)
    out_k = kern.separable_interpolate(x, iy, wy, ix, wx)
    out_f = kern._separable_interpolate_mlx(x, iy, wy, ix, wx)
    assert out_k.dtype == mx.float32
    assert_close(out_k, out_f, mx.float32, scale=4)


# ---- mlx-lm: fused kernels without a pure-MLX path (muse_spark uses them unconditionally) ------
# The package has no fallback for these; the reference is the formula their docstrings state,
# written with MLX's own ops.


def load_package(site, relpath):
    """The package folder `relpath` (its __init__ and relative imports), imported on its own."""
    if relpath in _loaded:
        return _loaded[relpath]
    name = "alloy_test_" + relpath.replace("/", "_")
    spec = importlib.util.spec_from_file_location(
        name, site / relpath / "__init__.py", submodule_search_locations=[str(site / relpath)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _loaded[relpath] = module
    return module


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_mlx_lm_kernels_rms_norm_sigmoid_gate(site, dtype):
    kernels = load_package(site, "mlx_lm/kernels")
    B, H, L, D, eps = 2, 3, 5, 80, 1e-6
    x = normal((B, H, L, D), dtype, 1).transpose(0, 2, 1, 3).swapaxes(1, 2)  # a strided view
    gate = normal((B, L, H * D), dtype, 2)
    out = kernels.rms_norm_sigmoid_gate(x, gate, eps=eps)
    x32, g32 = x.astype(mx.float32), gate.astype(mx.float32)
    ref = mx.fast.rms_norm(x32, None, eps).transpose(0, 2, 1, 3).reshape(B, L, H * D)
    ref = ref * mx.sigmoid(g32)
    assert out.dtype == dtype
    assert_close(out, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_mlx_lm_kernels_qk_norm(site, dtype):
    kernels = load_package(site, "mlx_lm/kernels")
    N, HQ, HK, D, eps, scale = 3, 4, 2, 64, 1e-5, 0.125
    qkvg = normal((1, N, 2 * (HQ + HK) * D), dtype, 3)
    q, k = kernels.qk_norm(qkvg, n_heads=HQ, n_kv_heads=HK, head_dim=D, eps=eps,
                           query_scale=scale)
    heads = qkvg.astype(mx.float32)[..., : (HQ + HK) * D].reshape(1, N, HQ + HK, D)
    normed = mx.fast.rms_norm(heads, None, eps)
    assert q.shape == (1, N, HQ, D) and k.shape == (1, N, HK, D) and q.dtype == dtype
    assert_close(q, normed[:, :, :HQ] * scale, dtype)
    assert_close(k, normed[:, :, HQ:], dtype)
