"""alloy.mlx: MLX's mx.fast.metal_kernel in MLX builds without Metal (PyPI's mlx[cpu]).

The kernels are those of MLX's documentation page "Custom Metal Kernels" (exp, strided exp,
grid_sample forward and backward), written here as the page writes them and called with MLX's
own keywords on mx.array inputs. References: MLX's own ops and float64 NumPy.
"""

import sys
import types

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install 'mlx[cpu]')")
if mx.metal.is_available():
    pytest.skip("MLX has Metal here: alloy.mlx leaves mx.fast.metal_kernel alone",
                allow_module_level=True)

import alloy  # noqa: E402
import alloy.mlx  # noqa: E402  (installs)


# ---- the documentation's kernels, as written there -----------------------------------------

EXP_SOURCE = """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
"""

EXP_STRIDED_SOURCE = """
    uint elem = thread_position_in_grid.x;
    // Utils from `mlx/backend/metal/kernels/utils.h` are automatically included
    uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
    T tmp = inp[loc];
    // Output arrays are always row contiguous
    out[elem] = metal::exp(tmp);
"""

GRID_SAMPLE_SOURCE = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    int gH = grid_shape[1];
    int gW = grid_shape[2];

    int w_stride = C;
    int h_stride = W * w_stride;
    int b_stride = H * h_stride;

    uint grid_idx = elem / C * 2;
    float ix = ((grid[grid_idx] + 1) * W - 1) / 2;
    float iy = ((grid[grid_idx + 1] + 1) * H - 1) / 2;

    int ix_nw = floor(ix);
    int iy_nw = floor(iy);

    int ix_ne = ix_nw + 1;
    int iy_ne = iy_nw;

    int ix_sw = ix_nw;
    int iy_sw = iy_nw + 1;

    int ix_se = ix_nw + 1;
    int iy_se = iy_nw + 1;

    T nw = (ix_se - ix)    * (iy_se - iy);
    T ne = (ix    - ix_sw) * (iy_sw - iy);
    T sw = (ix_ne - ix)    * (iy    - iy_ne);
    T se = (ix    - ix_nw) * (iy    - iy_nw);

    int batch_idx = elem / C / gH / gW * b_stride;
    int channel_idx = elem % C;
    int base_idx = batch_idx + channel_idx;

    T I_nw = x[base_idx + iy_nw * h_stride + ix_nw * w_stride];
    T I_ne = x[base_idx + iy_ne * h_stride + ix_ne * w_stride];
    T I_sw = x[base_idx + iy_sw * h_stride + ix_sw * w_stride];
    T I_se = x[base_idx + iy_se * h_stride + ix_se * w_stride];

    I_nw = iy_nw >= 0 && iy_nw <= H - 1 && ix_nw >= 0 && ix_nw <= W - 1 ? I_nw : 0;
    I_ne = iy_ne >= 0 && iy_ne <= H - 1 && ix_ne >= 0 && ix_ne <= W - 1 ? I_ne : 0;
    I_sw = iy_sw >= 0 && iy_sw <= H - 1 && ix_sw >= 0 && ix_sw <= W - 1 ? I_sw : 0;
    I_se = iy_se >= 0 && iy_se <= H - 1 && ix_se >= 0 && ix_se <= W - 1 ? I_se : 0;

    out[elem] = nw * I_nw + ne * I_ne + sw * I_sw + se * I_se;
"""

GRID_SAMPLE_VJP_SOURCE = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    // Pad C to the nearest larger simdgroup size multiple
    int C_padded = ceildiv(C, threads_per_simdgroup) * threads_per_simdgroup;

    int gH = grid_shape[1];
    int gW = grid_shape[2];

    int w_stride = C;
    int h_stride = W * w_stride;
    int b_stride = H * h_stride;

    uint grid_idx = elem / C_padded * 2;
    float ix = ((grid[grid_idx] + 1) * W - 1) / 2;
    float iy = ((grid[grid_idx + 1] + 1) * H - 1) / 2;

    int ix_nw = floor(ix);
    int iy_nw = floor(iy);

    int ix_ne = ix_nw + 1;
    int iy_ne = iy_nw;

    int ix_sw = ix_nw;
    int iy_sw = iy_nw + 1;

    int ix_se = ix_nw + 1;
    int iy_se = iy_nw + 1;

    T nw = (ix_se - ix)    * (iy_se - iy);
    T ne = (ix    - ix_sw) * (iy_sw - iy);
    T sw = (ix_ne - ix)    * (iy    - iy_ne);
    T se = (ix    - ix_nw) * (iy    - iy_nw);

    int batch_idx = elem / C_padded / gH / gW * b_stride;
    int channel_idx = elem % C_padded;
    int base_idx = batch_idx + channel_idx;

    T gix = T(0);
    T giy = T(0);
    if (channel_idx < C) {
        int cot_index = elem / C_padded * C + channel_idx;
        T cot = cotangent[cot_index];
        if (iy_nw >= 0 && iy_nw <= H - 1 && ix_nw >= 0 && ix_nw <= W - 1) {
            int offset = base_idx + iy_nw * h_stride + ix_nw * w_stride;
            atomic_fetch_add_explicit(&x_grad[offset], nw * cot, memory_order_relaxed);

            T I_nw = x[offset];
            gix -= I_nw * (iy_se - iy) * cot;
            giy -= I_nw * (ix_se - ix) * cot;
        }
        if (iy_ne >= 0 && iy_ne <= H - 1 && ix_ne >= 0 && ix_ne <= W - 1) {
            int offset = base_idx + iy_ne * h_stride + ix_ne * w_stride;
            atomic_fetch_add_explicit(&x_grad[offset], ne * cot, memory_order_relaxed);

            T I_ne = x[offset];
            gix += I_ne * (iy_sw - iy) * cot;
            giy -= I_ne * (ix - ix_sw) * cot;
        }
        if (iy_sw >= 0 && iy_sw <= H - 1 && ix_sw >= 0 && ix_sw <= W - 1) {
            int offset = base_idx + iy_sw * h_stride + ix_sw * w_stride;
            atomic_fetch_add_explicit(&x_grad[offset], sw * cot, memory_order_relaxed);

            T I_sw = x[offset];
            gix -= I_sw * (iy - iy_ne) * cot;
            giy += I_sw * (ix_ne - ix) * cot;
        }
        if (iy_se >= 0 && iy_se <= H - 1 && ix_se >= 0 && ix_se <= W - 1) {
            int offset = base_idx + iy_se * h_stride + ix_se * w_stride;
            atomic_fetch_add_explicit(&x_grad[offset], se * cot, memory_order_relaxed);

            T I_se = x[offset];
            gix += I_se * (iy - iy_nw) * cot;
            giy += I_se * (ix - ix_nw) * cot;
        }
    }

    T gix_mult = W / 2;
    T giy_mult = H / 2;

    // Reduce across each simdgroup first.
    // This is much faster than relying purely on atomics.
    gix = simd_sum(gix);
    giy = simd_sum(giy);

    if (thread_index_in_simdgroup == 0) {
        atomic_fetch_add_explicit(&grid_grad[grid_idx], gix * gix_mult, memory_order_relaxed);
        atomic_fetch_add_explicit(&grid_grad[grid_idx + 1], giy * giy_mult, memory_order_relaxed);
    }
"""


def exp_elementwise(a: mx.array):
    kernel = mx.fast.metal_kernel(
        name="myexp",
        input_names=["inp"],
        output_names=["out"],
        source=EXP_SOURCE,
    )
    outputs = kernel(
        inputs=[a],
        template=[("T", mx.float32)],
        grid=(a.size, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[a.shape],
        output_dtypes=[a.dtype],
        verbose=False,
    )
    return outputs[0]


def exp_elementwise_strided(a: mx.array):
    kernel = mx.fast.metal_kernel(
        name="myexp_strided",
        input_names=["inp"],
        output_names=["out"],
        source=EXP_STRIDED_SOURCE,
        ensure_row_contiguous=False,
    )
    outputs = kernel(
        inputs=[a],
        template=[("T", mx.float32)],
        grid=(a.size, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[a.shape],
        output_dtypes=[a.dtype],
    )
    return outputs[0]


@mx.custom_function
def grid_sample(x, grid):
    assert x.ndim == 4, "`x` must be 4D."
    assert grid.ndim == 4, "`grid` must be 4D."

    B, _, _, C = x.shape
    _, gN, gM, D = grid.shape
    out_shape = (B, gN, gM, C)

    assert D == 2, "Last dim of `grid` must be size 2."

    kernel = mx.fast.metal_kernel(
        name="grid_sample",
        input_names=["x", "grid"],
        output_names=["out"],
        source=GRID_SAMPLE_SOURCE,
    )
    outputs = kernel(
        inputs=[x, grid],
        template=[("T", x.dtype)],
        output_shapes=[out_shape],
        output_dtypes=[x.dtype],
        grid=(np.prod(out_shape), 1, 1),
        threadgroup=(256, 1, 1),
    )
    return outputs[0]


@grid_sample.vjp
def grid_sample_vjp(primals, cotangent, _):
    x, grid = primals
    B, _, _, C = x.shape
    _, gN, gM, D = grid.shape

    assert D == 2, "Last dim of `grid` must be size 2."

    kernel = mx.fast.metal_kernel(
        name="grid_sample_grad",
        input_names=["x", "grid", "cotangent"],
        output_names=["x_grad", "grid_grad"],
        source=GRID_SAMPLE_VJP_SOURCE,
        atomic_outputs=True,
    )
    # pad the output channels to simd group size
    # so that our `simd_sum`s don't overlap.
    simdgroup_size = 32
    C_padded = (C + simdgroup_size - 1) // simdgroup_size * simdgroup_size
    grid_size = B * gN * gM * C_padded
    outputs = kernel(
        inputs=[x, grid, cotangent],
        template=[("T", x.dtype)],
        output_shapes=[x.shape, grid.shape],
        output_dtypes=[x.dtype, x.dtype],
        grid=(grid_size, 1, 1),
        threadgroup=(256, 1, 1),
        init_value=0,
    )
    return outputs[0], outputs[1]


# ---- references ------------------------------------------------------------------------------


def grid_sample_ref(x, grid):
    """Bilinear, zero padding, align_corners=False; float64 NumPy."""
    x = np.asarray(x, dtype=np.float64)
    grid = np.asarray(grid, dtype=np.float64)
    B, H, W, C = x.shape
    ix = ((grid[..., 0] + 1) * W - 1) / 2
    iy = ((grid[..., 1] + 1) * H - 1) / 2
    x0, y0 = np.floor(ix).astype(np.int64), np.floor(iy).astype(np.int64)
    fx, fy = (ix - x0)[..., None], (iy - y0)[..., None]
    b = np.arange(B)[:, None, None]

    def tap(yy, xx):
        inside = ((yy >= 0) & (yy < H) & (xx >= 0) & (xx < W))[..., None]
        return x[b, np.clip(yy, 0, H - 1), np.clip(xx, 0, W - 1)] * inside

    return ((1 - fy) * ((1 - fx) * tap(y0, x0) + fx * tap(y0, x0 + 1))
            + fy * ((1 - fx) * tap(y0 + 1, x0) + fx * tap(y0 + 1, x0 + 1)))


def finite_difference_grad(f, args, i, eps=1e-6):
    """d f(*args) / d args[i] by central differences, float64."""
    args = [np.array(a, dtype=np.float64) for a in args]
    grad = np.zeros_like(args[i])
    flat = args[i].reshape(-1)
    for j in range(flat.size):
        keep = flat[j]
        flat[j] = keep + eps
        hi = f(*args)
        flat[j] = keep - eps
        lo = f(*args)
        flat[j] = keep
        grad.reshape(-1)[j] = (hi - lo) / (2 * eps)
    return grad


def to_np(a):
    return np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a, dtype=np.float64)


# ---- installation ------------------------------------------------------------------------------


def test_install_replaces_metal_kernel():
    from mlx.core.fast import metal_kernel

    assert alloy.mlx.installed()
    assert mx.fast.metal_kernel is alloy.mlx.metal_kernel
    assert metal_kernel is alloy.mlx.metal_kernel
    assert alloy.mlx.install() is True  # idempotent


def test_install_reaches_earlier_from_imports():
    alloy.mlx.uninstall()
    try:
        original = mx.fast.metal_kernel
        assert original is not alloy.mlx.metal_kernel
        # A module that ran `from mlx.core.fast import metal_kernel` before the install.
        early = types.ModuleType("alloy_test_early_importer")
        early.metal_kernel = original
        early.unrelated = len
        sys.modules[early.__name__] = early
        try:
            alloy.mlx.install()
            assert early.metal_kernel is alloy.mlx.metal_kernel
            assert early.unrelated is len
            alloy.mlx.uninstall()
            assert early.metal_kernel is original and mx.fast.metal_kernel is original
        finally:
            del sys.modules[early.__name__]
    finally:
        alloy.mlx.install()
    assert alloy.mlx.installed()


# ---- the documentation's kernels ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float32])
def test_docs_exp(dtype):
    a = mx.random.normal(shape=(4, 16), key=mx.random.key(1)).astype(dtype)
    b = exp_elementwise(a)
    assert isinstance(b, mx.array) and b.dtype == dtype and b.shape == a.shape
    # The kernel computes in float32 and rounds once to `dtype`; mx.exp is within a few float32
    # ulps of exact too: one ulp of `dtype` apart for float16/bfloat16, a few for float32.
    rtol = {mx.float16: 2**-10, mx.bfloat16: 2**-7, mx.float32: 2**-21}[dtype]
    np.testing.assert_allclose(to_np(b), to_np(mx.exp(a)), rtol=rtol, atol=0)
    np.testing.assert_allclose(to_np(b), np.exp(to_np(a)), rtol=rtol, atol=0)


def test_docs_exp_strided():
    a = mx.random.normal(shape=(8, 12), key=mx.random.key(2))
    view = a[::2, 1::3]
    b = exp_elementwise_strided(view)
    assert b.shape == (4, 4)
    np.testing.assert_allclose(to_np(b), to_np(mx.exp(view)), rtol=2**-21)
    np.testing.assert_allclose(to_np(b), np.exp(to_np(a)[::2, 1::3]), rtol=2**-21)


def _grid_sample_inputs(dtype=mx.float32, B=2, H=4, W=6, C=3, gN=5, gM=7, seed=0):
    # H and W even: the documented vjp scales with `W / 2` in integer arithmetic.
    key = mx.random.key(seed)
    k1, k2 = mx.random.split(key)
    x = mx.random.normal(shape=(B, H, W, C), key=k1).astype(dtype)
    # Past [-1, 1] too, so that border taps are masked.
    grid = mx.random.uniform(low=-1.2, high=1.2, shape=(B, gN, gM, 2), key=k2).astype(dtype)
    return x, grid


def test_docs_grid_sample_forward():
    x, grid = _grid_sample_inputs(B=2, H=16, W=20, C=8, gN=12, gM=10)
    out = grid_sample(x, grid)
    assert out.shape == (2, 12, 10, 8) and out.dtype == mx.float32
    np.testing.assert_allclose(to_np(out), grid_sample_ref(to_np(x), to_np(grid)),
                               rtol=1e-5, atol=1e-5)


def test_docs_grid_sample_grad_matches_finite_differences():
    x, grid = _grid_sample_inputs()
    w = mx.random.normal(shape=(2, 5, 7, 3), key=mx.random.key(7))

    def loss(x, grid):
        return (grid_sample(x, grid) * w).sum()

    dx, dgrid = mx.grad(loss, argnums=(0, 1))(x, grid)
    assert dx.shape == x.shape and dgrid.shape == grid.shape

    w64 = to_np(w)

    def loss_ref(x, grid):
        return float((grid_sample_ref(x, grid) * w64).sum())

    args = (to_np(x), to_np(grid))
    np.testing.assert_allclose(to_np(dx), finite_difference_grad(loss_ref, args, 0),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(to_np(dgrid), finite_difference_grad(loss_ref, args, 1),
                               rtol=1e-4, atol=1e-4)
    # The value goes through the custom function too.
    value, (gx, _) = mx.value_and_grad(loss, argnums=(0, 1))(x, grid)
    assert abs(value.item() - loss_ref(*args)) < 1e-4
    np.testing.assert_allclose(to_np(gx), to_np(dx), rtol=1e-6, atol=1e-6)


def test_docs_grid_sample_vjp_direct():
    x, grid = _grid_sample_inputs(seed=3)
    ct = mx.random.normal(shape=(2, 5, 7, 3), key=mx.random.key(11))
    (out,), (dx, dgrid) = mx.vjp(grid_sample, [x, grid], [ct])
    np.testing.assert_allclose(to_np(out), grid_sample_ref(to_np(x), to_np(grid)),
                               rtol=1e-5, atol=1e-5)
    ct64 = to_np(ct)

    def loss_ref(x, grid):
        return float((grid_sample_ref(x, grid) * ct64).sum())

    args = (to_np(x), to_np(grid))
    np.testing.assert_allclose(to_np(dx), finite_difference_grad(loss_ref, args, 0),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(to_np(dgrid), finite_difference_grad(loss_ref, args, 1),
                               rtol=1e-4, atol=1e-4)


# ---- behaviour MLX code relies on -----------------------------------------------------------


def test_compile_tracing_raises_naming_the_kernel():
    a = mx.random.normal(shape=(64,), key=mx.random.key(3))
    with pytest.raises(alloy.NotSupportedError, match="'myexp'.*mx.compile"):
        mx.compile(exp_elementwise)(a)
    with pytest.raises(alloy.NotSupportedError, match="'myexp'"):
        mx.vmap(exp_elementwise)(a.reshape(4, 16))
    # Outside the transformation the same call works.
    np.testing.assert_allclose(to_np(exp_elementwise(a)), np.exp(to_np(a)), rtol=2**-21)


def test_threadgroup_above_limit_is_value_error():
    a = mx.random.normal(shape=(4096,), key=mx.random.key(4))
    kernel = mx.fast.metal_kernel(name="myexp_big", input_names=["inp"], output_names=["out"],
                                  source=EXP_SOURCE)

    def call(threads):
        return kernel(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1),
                      threadgroup=(threads, 1, 1), output_shapes=[a.shape],
                      output_dtypes=[a.dtype])[0]

    # Real code catches the ValueError to choose a smaller threadgroup.
    try:
        out = call(2048)
        raise AssertionError("a threadgroup of 2048 threads was accepted")
    except ValueError as e:
        assert "threadgroup" in str(e)
        out = call(1024)
    np.testing.assert_allclose(to_np(out), np.exp(to_np(a)), rtol=2**-21)


def test_argument_errors_are_mlx_types():
    a = mx.random.normal(shape=(16,), key=mx.random.key(5))
    kernel = mx.fast.metal_kernel(name="myexp_args", input_names=["inp"], output_names=["out"],
                                  source=EXP_SOURCE)
    good = dict(inputs=[a], template=[("T", mx.float32)], grid=(16, 1, 1),
                threadgroup=(16, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype])
    with pytest.raises(ValueError, match="inputs"):
        kernel(**{**good, "inputs": [a, a]})
    with pytest.raises(ValueError, match="template"):
        kernel(**{**good, "template": [("T", 1.5)]})
    with pytest.raises(TypeError):
        kernel(**{**good, "output_dtypes": [np.float32]})
    with pytest.raises(TypeError):
        kernel(**{**good, "stream": "gpu"})
    with pytest.raises(TypeError):
        kernel(a)  # keyword-only, as MLX's
    bad = mx.fast.metal_kernel(name="broken", input_names=["inp"], output_names=["out"],
                               source="out[0] = undeclared_name;")
    with pytest.raises(RuntimeError, match="broken"):
        bad(**good)


def test_scalars_template_and_init_value():
    source = """
        uint i = thread_position_in_grid.x;
        if (i < n) {
            out[i] = static_cast<T>(scale * x[i] + (FLIP ? -1 : 1) * OFFSET);
        }
    """
    kernel = mx.fast.metal_kernel(name="affine", input_names=["x", "scale", "n"],
                                  output_names=["out"], source=source)
    x = mx.random.normal(shape=(40,), key=mx.random.key(6))
    out = kernel(inputs=[x, 2.5, 33], template=[("T", mx.float32), ("FLIP", True),
                                                ("OFFSET", 3)],
                 grid=(40, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(40,)],
                 output_dtypes=[mx.float32], init_value=7.0)[0]
    expect = np.full(40, 7.0)
    expect[:33] = 2.5 * to_np(x)[:33] - 3
    np.testing.assert_allclose(to_np(out), expect, rtol=1e-6)


def test_stream_rule():
    gpu = alloy.is_available(alloy.gpu)
    assert alloy.mlx.device_for(mx.cpu) == alloy.cpu
    assert alloy.mlx.device_for(mx.default_stream(mx.cpu)) == alloy.cpu
    assert alloy.mlx.device_for(mx.Device(mx.cpu)) == alloy.cpu
    for accel in (mx.gpu, mx.Device(mx.gpu), None):
        assert alloy.mlx.device_for(accel) == (alloy.gpu if gpu else alloy.cpu)
    a = mx.random.normal(shape=(300,), key=mx.random.key(7))
    kernel = mx.fast.metal_kernel(name="myexp_stream", input_names=["inp"],
                                  output_names=["out"], source=EXP_SOURCE)
    for stream in (mx.gpu, mx.cpu, mx.default_stream(mx.cpu), None):
        out = kernel(inputs=[a], template=[("T", mx.float32)], grid=(300, 1, 1),
                     threadgroup=(128, 1, 1), output_shapes=[(300,)],
                     output_dtypes=[mx.float32], stream=stream)[0]
        np.testing.assert_allclose(to_np(out), np.exp(to_np(a)), rtol=2**-21)


def test_mlx_memory_is_shared_without_copy():
    # Inputs reach the kernel through DLPack: alloy sees MLX's memory itself.
    for dtype in (mx.float32, mx.bfloat16, mx.int32):
        a = (mx.random.normal(shape=(6,), key=mx.random.key(8)) * 10).astype(dtype)
        mx.eval(a)
        view = alloy.from_dlpack(a)
        assert view.dtype == alloy.mlx._DTYPES[dtype]
        before = np.asarray(view.astype(alloy.float32)).copy()
        np.testing.assert_array_equal(before, to_np(a))
        # Write through MLX's buffer (a writable memoryview of the same memory).
        mv = memoryview(a).cast("B")
        mv[0:2] = bytes([0x12, 0x34])
        after = np.asarray(view.astype(alloy.float32))
        assert after[0] != before[0]
        np.testing.assert_array_equal(after, to_np(a))


def test_differentiating_without_custom_vjp_raises_naming_the_kernel():
    a = mx.random.normal(shape=(64,), key=mx.random.key(9))
    with pytest.raises(alloy.NotSupportedError, match="'myexp'.*custom_function"):
        mx.grad(lambda x: exp_elementwise(x).sum())(a)
    with pytest.raises(alloy.NotSupportedError, match="'myexp'"):
        mx.jvp(exp_elementwise, [a], [mx.ones_like(a)])
    # A kernel on inputs that do not depend on the differentiated variable is a constant.
    c = mx.random.normal(shape=(64,), key=mx.random.key(10))
    g = mx.grad(lambda x: (exp_elementwise(c) * x).sum())(a)
    np.testing.assert_allclose(to_np(g), np.exp(to_np(c)), rtol=2**-21)
