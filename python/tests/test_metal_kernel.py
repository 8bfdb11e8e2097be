"""alloy.metal_kernel through Python, against NumPy references computed in float64.

The kernels are those of examples/example_kernels.h (exp contiguous and strided, grid_sample
forward and backward with atomics) plus the facts of MLX's own metal_kernel tests (arguments of
every kind, attributes, SIMD width)."""

import numpy as np
import pytest

import alloy


def run(kernel, target, **kwargs):
    return kernel(stream=target.stream, **kwargs)


# ---- exp ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_exp_contiguous(target, kernels, rng, dtype):
    x = rng.uniform(-2, 2, size=(4, 33)).astype(dtype)
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                           source=kernels["kExpSource"])
    out = run(k, target, inputs=[target.put(x)], template=[("T", alloy.float32)],
              grid=(x.size, 1, 1), threadgroup=(256, 1, 1), output_shapes=[x.shape],
              output_dtypes=[alloy.float32])
    assert isinstance(out, list) and len(out) == 1
    assert out[0].shape == x.shape and out[0].dtype == alloy.float32
    np.testing.assert_allclose(np.asarray(out[0]), np.exp(x.astype(np.float64)), rtol=2e-6)


def test_exp_strided_views(target, kernels, rng):
    """ensure_row_contiguous=False: the kernel maps indices through elem_to_loc on a strided
    view (made by the target's own slicing), and the contiguous kernel gets a copy."""
    base = rng.uniform(-2, 2, size=(6, 20)).astype(np.float32)
    view = target.put(base)[1::2, ::3]
    expect = np.exp(base[1::2, ::3].astype(np.float64))
    shape = expect.shape
    strided = alloy.metal_kernel(name="myexp_strided", input_names=["inp"], output_names=["out"],
                                 source=kernels["kExpStridedSource"], ensure_row_contiguous=False)
    contiguous = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                                    source=kernels["kExpSource"])
    for k in (strided, contiguous):
        out = run(k, target, inputs=[view], template=[("T", alloy.float32)],
                  grid=(expect.size, 1, 1), threadgroup=(32, 1, 1), output_shapes=[shape],
                  output_dtypes=[alloy.float32])[0]
        np.testing.assert_allclose(np.asarray(out), expect, rtol=2e-6)


EXP_STRIDED_SIGNED = """
    uint elem = thread_position_in_grid.x;
    int64_t loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);  // may be negative
    T tmp = inp[loc];
    out[elem] = metal::exp(tmp);
"""


def test_exp_strided_negative_and_transposed(device, kernels, rng):
    """Views with negative strides and transposes, from alloy slicing and from NumPy (imported
    without a copy). The example body keeps `uint loc`, so negative strides need a signed
    location (as on Metal)."""
    base = rng.uniform(-2, 2, size=(5, 7)).astype(np.float32)
    signed = alloy.metal_kernel(name="myexp_signed", input_names=["inp"], output_names=["out"],
                                source=EXP_STRIDED_SIGNED, ensure_row_contiguous=False)
    unsigned = alloy.metal_kernel(name="myexp_strided", input_names=["inp"], output_names=["out"],
                                  source=kernels["kExpStridedSource"],
                                  ensure_row_contiguous=False)
    contiguous = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                                    source=kernels["kExpSource"])
    a = alloy.array(base, device=device)
    cases = [(a.T, base.T, True), (a[1::2, ::3].T, base[1::2, ::3].T, True),
             (a[::-1, 1::2], base[::-1, 1::2], False), (a[:, ::-3].T, base[:, ::-3].T, False)]
    if device == alloy.cpu:  # NumPy views, imported without a copy
        cases += [(base[::2, 1:].T, base[::2, 1:].T, True),
                  (base[::-2, ::-1], base[::-2, ::-1], False)]
    for view, ref, positive in cases:
        for k in (signed, unsigned, contiguous) if positive else (signed, contiguous):
            out = k(inputs=[view], template=[("T", alloy.float32)], grid=(ref.size, 1, 1),
                    threadgroup=(16, 1, 1), output_shapes=[ref.shape],
                    output_dtypes=[alloy.float32], stream=device)[0]
            np.testing.assert_allclose(np.asarray(out), np.exp(ref.astype(np.float64)),
                                       rtol=2e-6)


# ---- grid_sample ----------------------------------------------------------------------------


def _bilinear_taps(H, W, grid):
    """Per output pixel: the four corners, their weights and in-range masks (float64)."""
    ix = ((grid[..., 0].astype(np.float64) + 1) * W - 1) / 2
    iy = ((grid[..., 1].astype(np.float64) + 1) * H - 1) / 2
    x0, y0 = np.floor(ix).astype(np.int64), np.floor(iy).astype(np.int64)
    fx, fy = ix - x0, iy - y0
    taps = []
    for dy, dx, w in ((0, 0, (1 - fy) * (1 - fx)), (0, 1, (1 - fy) * fx),
                      (1, 0, fy * (1 - fx)), (1, 1, fy * fx)):
        yy, xx = y0 + dy, x0 + dx
        inside = (yy >= 0) & (yy < H) & (xx >= 0) & (xx < W)
        taps.append((np.clip(yy, 0, H - 1), np.clip(xx, 0, W - 1), w, inside))
    return taps, fx, fy


def grid_sample_ref(x, grid):
    B, H, W, C = x.shape
    taps, _, _ = _bilinear_taps(H, W, grid)
    b = np.arange(B)[:, None, None]
    out = np.zeros(grid.shape[:3] + (C,))
    for yy, xx, w, inside in taps:
        v = x.astype(np.float64)[b, yy, xx] * inside[..., None]
        out += w[..., None] * v
    return out


def grid_sample_grad_ref(x, grid, ct):
    B, H, W, C = x.shape
    taps, fx, fy = _bilinear_taps(H, W, grid)
    b = np.arange(B)[:, None, None]
    ct = ct.astype(np.float64)
    x_grad = np.zeros(x.shape)
    v = []
    for yy, xx, w, inside in taps:
        contrib = (w * inside)[..., None] * ct
        np.add.at(x_grad, (np.broadcast_to(b, yy.shape), yy, xx), contrib * inside[..., None])
        v.append(x.astype(np.float64)[b, yy, xx] * inside[..., None])
    v00, v01, v10, v11 = v
    fx, fy = fx[..., None], fy[..., None]
    d_ix = ((1 - fy) * (v01 - v00) + fy * (v11 - v10)) * ct * W / 2
    d_iy = ((1 - fx) * (v10 - v00) + fx * (v11 - v01)) * ct * H / 2
    grid_grad = np.stack([d_ix.sum(-1), d_iy.sum(-1)], axis=-1)
    return x_grad, grid_grad


def test_grid_sample_forward(target, kernels, rng):
    B, H, W, C, gH, gW = 2, 9, 11, 5, 7, 6
    x = rng.uniform(-1, 1, size=(B, H, W, C)).astype(np.float32)
    # Past [-1, 1] too, so that border taps are masked.
    grid = rng.uniform(-1.2, 1.2, size=(B, gH, gW, 2)).astype(np.float32)
    k = alloy.metal_kernel(name="grid_sample", input_names=["x", "grid"], output_names=["out"],
                           source=kernels["kGridSampleSource"])
    out_shape = (B, gH, gW, C)
    out = run(k, target, inputs=[target.put(x), target.put(grid)],
              template=[("T", alloy.float32)], grid=(int(np.prod(out_shape)), 1, 1),
              threadgroup=(256, 1, 1), output_shapes=[out_shape], output_dtypes=[alloy.float32])
    np.testing.assert_allclose(np.asarray(out[0]), grid_sample_ref(x, grid), rtol=1e-5, atol=1e-5)


def test_grid_sample_backward_atomics(target, kernels, rng):
    B, H, W, C, gH, gW = 2, 6, 7, 64, 5, 4  # C a multiple of 32: simd_sum stays in one pixel
    x = rng.uniform(-1, 1, size=(B, H, W, C)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, size=(B, gH, gW, 2)).astype(np.float32)
    ct = rng.uniform(-1, 1, size=(B, gH, gW, C)).astype(np.float32)
    k = alloy.metal_kernel(name="grid_sample_grad", input_names=["x", "grid", "cotangent"],
                           output_names=["x_grad", "grid_grad"],
                           source=kernels["kGridSampleGradSource"], atomic_outputs=True)
    x_grad, grid_grad = run(k, target, inputs=[target.put(x), target.put(grid), target.put(ct)],
                            grid=(ct.size, 1, 1), threadgroup=(256, 1, 1),
                            output_shapes=[x.shape, grid.shape],
                            output_dtypes=[alloy.float32, alloy.float32], init_value=0)
    ref_x, ref_grid = grid_sample_grad_ref(x, grid, ct)
    np.testing.assert_allclose(np.asarray(x_grad), ref_x, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(grid_grad), ref_grid, rtol=1e-4, atol=1e-3)


def test_robust_mode_reads_then_masks(target, kernels, rng):
    """MLX's documented grid_sample reads neighbours before masking them; robust mode (an Alloy
    extension) makes the out-of-range reads give 0 and reports them."""
    B, H, W, C, gH, gW = 1, 5, 6, 3, 4, 4
    x = rng.uniform(-1, 1, size=(B, H, W, C)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, size=(B, gH, gW, 2)).astype(np.float32)
    grid[0, 0, 0] = (-1.25, -1.25)  # certainly outside: reads before the start of x
    k = alloy.metal_kernel(name="grid_sample_read_then_mask", input_names=["x", "grid"],
                           output_names=["out"], source=kernels["kGridSampleReadThenMaskSource"],
                           robust=True)
    assert k.robust
    alloy.take_out_of_range_reports()  # forget earlier ones
    out_shape = (B, gH, gW, C)
    out = run(k, target, inputs=[target.put(x), target.put(grid)],
              template=[("T", alloy.float32)], grid=(int(np.prod(out_shape)), 1, 1),
              threadgroup=(64, 1, 1), output_shapes=[out_shape], output_dtypes=[alloy.float32])
    np.testing.assert_allclose(np.asarray(out[0]), grid_sample_ref(x, grid), rtol=1e-5, atol=1e-5)
    reports = alloy.take_out_of_range_reports()
    assert reports, "out-of-range reads were not reported"
    assert all(r["kernel"] == "grid_sample_read_then_mask" and r["buffer"] == "x"
               for r in reports)
    assert any(r["index"] < 0 for r in reports)
    assert all(len(r["thread"]) == 3 for r in reports)


# ---- MLX's test facts -----------------------------------------------------------------------

ARGS_SOURCE = """
    uint elem = thread_position_in_grid.x;
    T tmp = a[0];
    if (e) {
        out1[elem] = a[1] + b[2] + c[3] + d + f;
    } else {
        out1[elem] = 1;
    }
    out2[elem] = a[1] + b[2] + c[1] - d;
"""


@pytest.mark.parametrize("e", [True, False])
def test_args_of_every_kind(target, rng, e):
    """MLX's test_custom_kernel_args: a float32 array, a small int32 array (constant), a bfloat16
    array of 4 elements, a Python float scalar; template bool, int and dtype."""
    a = rng.normal(size=(3, 6)).astype(np.float32)
    b = np.array([3, 4, 5], dtype=np.int32)
    c32 = rng.normal(size=(2, 2)).astype(np.float32)
    c = alloy.array(c32, dtype=alloy.bfloat16, device=target.stream)
    d = 7.3
    k = alloy.metal_kernel(name="arg_test", input_names=["a", "b", "c", "d"],
                           output_names=["out1", "out2"], source=ARGS_SOURCE)
    out1, out2 = run(k, target, inputs=[target.put(a), target.put(b), c, d],
                     template=[("e", e), ("f", 3), ("T", alloy.float16)], grid=(6, 1, 1),
                     threadgroup=(2, 1, 1), output_shapes=[(3, 2), [3, 2]],
                     output_dtypes=[alloy.float32, alloy.int32])
    # float32 arithmetic in the kernel's order; c's bfloat16 values as the kernel sees them.
    cb = np.asarray(c.astype(alloy.float32)).reshape(-1)
    f32 = np.float32
    s1 = f32(f32(f32(f32(a[0, 1]) + f32(b[2])) + cb[3]) + f32(d)) + f32(3)
    s2 = f32(f32(f32(a[0, 1]) + f32(b[2])) + cb[1]) - f32(d)
    assert out1.dtype == alloy.float32 and out2.dtype == alloy.int32
    np.testing.assert_allclose(np.asarray(out1), np.full((3, 2), s1 if e else 1.0), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(out2), np.full((3, 2), int(s2), dtype=np.int32))


@pytest.mark.parametrize("grid, threadgroup, expect", [
    ((2, 1, 1), (2, 1, 1), 2),
    ((4, 1, 1), (256, 1, 1), 4),  # MLX dispatches min(threadgroup, grid)
])
def test_threads_per_threadgroup(target, grid, threadgroup, expect):
    k = alloy.metal_kernel(name="test_fun", input_names=["a"], output_names=["out"],
                           source="out[0] = threads_per_threadgroup.x;")
    a = target.put(np.ones((1, 1), dtype=np.float32))
    out = run(k, target, inputs=[a], grid=grid, threadgroup=threadgroup, output_shapes=[(1, 1)],
              output_dtypes=[alloy.uint32])[0]
    assert out.item() == expect


def test_threads_per_simdgroup(target):
    k = alloy.metal_kernel(name="simd_width", input_names=["a"], output_names=["out"],
                           source="""
        uint elem = thread_position_in_grid.x;
        out[elem] = threads_per_simdgroup + 0 * a[0];
    """)
    a = target.put(np.ones((4,), dtype=np.float32))
    out = run(k, target, inputs=[a], grid=(64, 1, 1), threadgroup=(64, 1, 1),
              output_shapes=[(64,)], output_dtypes=[alloy.uint32], init_value=0)[0]
    np.testing.assert_array_equal(np.asarray(out), np.full(64, 32, dtype=np.uint32))


def test_header_helper(target, rng):
    header = """
    template <typename T>
    T do_exp(T x) {
        return metal::precise::exp(x);
    }
    """
    k = alloy.metal_kernel(name="helper", input_names=["a"], output_names=["out1"],
                           header=header, source="""
        uint elem = thread_position_in_grid.x;
        out1[elem] = do_exp(a[elem]);
    """)
    a = rng.normal(size=(2, 2)).astype(np.float32)
    out = run(k, target, inputs=[target.put(a)], grid=(4, 1, 1), threadgroup=(2, 1, 1),
              output_shapes=[(2, 2)], output_dtypes=[alloy.float32])[0]
    np.testing.assert_allclose(np.asarray(out), np.exp(a.astype(np.float64)), rtol=2e-6)


# ---- one kernel object, many variants --------------------------------------------------------

SCALE_SOURCE = """
    uint elem = thread_position_in_grid.x;
    out[elem] = static_cast<U>(inp[elem] * N);
"""


def test_kernel_reused_with_dtypes_and_template_values(target, rng):
    k = alloy.metal_kernel(name="scale", input_names=["inp"], output_names=["out"],
                           source=SCALE_SOURCE)
    x = rng.uniform(-4, 4, size=(37,)).astype(np.float32)
    for in_dtype in (np.float32, np.float16):
        for n in (2, 3, 5):
            for out_dtype, np_out in ((alloy.float32, np.float32), (alloy.float16, np.float16)):
                xi = x.astype(in_dtype)
                out = run(k, target, inputs=[target.put(xi)],
                          template=[("N", n), ("U", out_dtype)], grid=(x.size, 1, 1),
                          threadgroup=(32, 1, 1), output_shapes=[x.shape],
                          output_dtypes=[out_dtype])[0]
                assert out.dtype == out_dtype
                ref = (xi.astype(np.float64) * n).astype(np_out)
                np.testing.assert_allclose(np.asarray(out).astype(np.float64),
                                           ref.astype(np.float64), rtol=2e-3)


def test_init_value_fills_unwritten_outputs(target):
    k = alloy.metal_kernel(name="half_writer", input_names=["a"], output_names=["out"],
                           source="""
        uint elem = thread_position_in_grid.x;
        if (elem % 2 == 0) out[elem] = a[elem];
    """)
    a = np.arange(1, 11, dtype=np.float32)
    out = run(k, target, inputs=[target.put(a)], grid=(10, 1, 1), threadgroup=(10, 1, 1),
              output_shapes=[(10,)], output_dtypes=[alloy.float32], init_value=-2.5)[0]
    expect = np.where(np.arange(10) % 2 == 0, a, -2.5)
    np.testing.assert_array_equal(np.asarray(out), expect)


def test_scalar_inputs_become_mlx_types(device):
    """Python bool/int/float inputs are 0-d bool, int32 and float32 (the generated signature shows
    them as `const constant T& name`)."""
    k = alloy.metal_kernel(name="scalars", input_names=["p", "q", "r"], output_names=["out"],
                           source="""
        out[0] = p ? q + r : -1.0f;
    """)
    src = k.metal_source(inputs=[True, 7, 0.5], output_dtypes=[alloy.float32])
    assert "const constant bool& p" in src
    assert "const constant int32_t& q" in src
    assert "const constant float& r" in src
    out = k(inputs=[True, 7, 0.5], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
            output_dtypes=[alloy.float32], stream=device)[0]
    assert out.item() == 7.5


def test_verbose_prints_generated_source(capfd, kernels):
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                           source=kernels["kExpSource"])
    x = np.ones((8,), dtype=np.float16)
    k(inputs=[x], template=[("T", alloy.float32)], grid=(8, 1, 1), threadgroup=(8, 1, 1),
      output_shapes=[x.shape], output_dtypes=[alloy.float16], verbose=True, stream=alloy.cpu)
    printed = capfd.readouterr().out
    assert "custom_kernel_myexp" in printed
    assert "metal::exp(tmp)" in printed


def test_metal_source_names_like_mlx(kernels):
    """MLX 0.32's mangling: template hash, then one suffix per input and output."""
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                           source=kernels["kExpSource"])
    src = k.metal_source(inputs=[np.ones((4, 16), dtype=np.float16)],
                         output_dtypes=[alloy.float16], template=[("T", alloy.float32)])
    assert "custom_kernel_myexp__float_float16_t_float16_t" in src


def test_stream_arguments(rng):
    k = alloy.metal_kernel(name="copy", input_names=["a"], output_names=["out"], source="""
        uint elem = thread_position_in_grid.x;
        out[elem] = a[elem];
    """)
    a = rng.normal(size=(16,)).astype(np.float32)
    for stream in (None, alloy.cpu, alloy.Device(alloy.cpu), alloy.default_stream(alloy.cpu),
                   alloy.Stream(alloy.cpu)):
        out = k(inputs=[a], grid=(16, 1, 1), threadgroup=(16, 1, 1), output_shapes=[(16,)],
                output_dtypes=[alloy.float32], stream=stream)[0]
        np.testing.assert_array_equal(np.asarray(out), a)
        if stream is not None:
            assert out.device == alloy.cpu


def test_outputs_are_lazy_until_read():
    k = alloy.metal_kernel(name="broken_at_compile", input_names=["a"], output_names=["out"],
                           source="out[0] = undeclared_name_xyz;")
    # The call only records the work; compiling happens when the output is read.
    out = k(inputs=[np.ones(1, np.float32)], grid=(1, 1, 1), threadgroup=(1, 1, 1),
            output_shapes=[(1,)], output_dtypes=[alloy.float32], stream=alloy.cpu)[0]
    with pytest.raises(alloy.CompileError):
        out.item()


# ---- errors ---------------------------------------------------------------------------------


def _copy_kernel():
    return alloy.metal_kernel(name="copy", input_names=["a"], output_names=["out"],
                              source="out[thread_position_in_grid.x] = a[0];")


def _call(k, **override):
    args = dict(inputs=[np.ones(4, np.float32)], grid=(4, 1, 1), threadgroup=(4, 1, 1),
                output_shapes=[(4,)], output_dtypes=[alloy.float32], stream=alloy.cpu)
    args.update(override)
    return k(**args)


def test_bad_arguments_raise_value_errors_like_mlx():
    k = _copy_kernel()
    with pytest.raises(ValueError, match=r"\[metal_kernel\] Expected `output_shapes` to have "
                                         r"size 1 but got size 2"):
        _call(k, output_shapes=[(4,), (4,)])
    with pytest.raises(ValueError, match=r"Expected `output_dtypes` to have size 1"):
        _call(k, output_dtypes=[])
    with pytest.raises(ValueError, match=r"Invalid template argument. Must be `alloy.Dtype`, "
                                         r"`int` or `bool`"):
        _call(k, template=[("T", 1.5)])
    with pytest.raises(ValueError, match="1024"):
        _call(k, threadgroup=(64, 32, 1))
    with pytest.raises(ValueError, match="compile_options"):
        alloy.metal_kernel(name="x", input_names=[], output_names=["o"], source="",
                           compile_options=["fast"])
    with pytest.raises(ValueError, match="math_mode"):
        alloy.metal_kernel(name="x", input_names=[], output_names=["o"], source="",
                           compile_options={"fastmath": "yes"})
    with pytest.raises(ValueError, match="at least one output"):
        alloy.metal_kernel(name="x", input_names=["a"], output_names=[], source="")


def test_bad_argument_types_raise_type_errors():
    k = _copy_kernel()
    with pytest.raises(TypeError, match="`grid` to be a tuple of 3 ints"):
        _call(k, grid=(4, 1))
    with pytest.raises(TypeError, match="`threadgroup` to be a tuple of 3 ints"):
        _call(k, threadgroup="big")
    with pytest.raises(TypeError, match="output_shapes"):
        _call(k, output_shapes=[(4.5,)])
    with pytest.raises(TypeError, match="Dtype"):
        _call(k, output_dtypes=[object()])
    with pytest.raises(TypeError, match="stream"):
        _call(k, stream="cpu")
    with pytest.raises(TypeError, match="cannot make an alloy array"):
        _call(k, inputs=[object()])
    with pytest.raises(TypeError):  # keyword-only, as in MLX
        k([np.ones(4, np.float32)], [(4,)], [alloy.float32], (4, 1, 1), (4, 1, 1))
    with pytest.raises(TypeError):  # `grid` missing
        k(inputs=[np.ones(4, np.float32)], threadgroup=(4, 1, 1), output_shapes=[(4,)],
          output_dtypes=[alloy.float32])


def test_compile_error_shows_user_source_lines():
    source = """
        uint elem = thread_position_in_grid.x;
        float y = a[elem];
        out[elem] = y + not_declared_anywhere;
    """
    k = alloy.metal_kernel(name="has_a_bug", input_names=["a"], output_names=["out"],
                           source=source)
    with pytest.raises(alloy.CompileError) as info:
        _call(k)[0].eval()
    e = info.value
    assert isinstance(e, RuntimeError) and isinstance(e, alloy.KernelError)
    assert e.kernel == "has_a_bug"
    assert "not_declared_anywhere" in str(e)
    assert "out[elem] = y + not_declared_anywhere;" in str(e)  # the offending line itself
    assert isinstance(e.raw_log, str) and e.raw_log


def test_gpu_unavailable_is_a_value_error():
    if alloy.is_available(alloy.gpu):
        pytest.skip("a GPU is available here")
    with pytest.raises(ValueError, match="GPU"):
        _call(_copy_kernel(), stream=alloy.gpu)
    with pytest.raises(ValueError, match="GPU"):
        alloy.set_default_device(alloy.gpu)


def test_fast_metal_kernel_is_mlx_spelling():
    import alloy.fast

    assert alloy.fast.metal_kernel is alloy.metal_kernel
    k = alloy.fast.metal_kernel(name="fast_spelling", input_names=["a"], output_names=["o"],
                                source="uint i = thread_position_in_grid.x; o[i] = a[i] * 3.0f;")
    x = np.random.default_rng(3).standard_normal(37).astype(np.float32)
    out = k(inputs=[alloy.array(x, device=alloy.cpu)], grid=(37, 1, 1), threadgroup=(32, 1, 1),
            output_shapes=[(37,)], output_dtypes=[alloy.float32], stream=alloy.cpu)[0]
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) * 3, rtol=1e-6)


def test_indexing_is_a_lazy_view():
    x = np.random.default_rng(4).standard_normal((6, 5)).astype(np.float32)
    a = alloy.array(x, device=alloy.cpu)
    v = a[::-2, 1:4]
    np.testing.assert_array_equal(np.asarray(v), x[::-2, 1:4])
    np.testing.assert_array_equal(np.asarray(a[2]), x[2])
    np.testing.assert_array_equal(np.asarray(a[None, ..., 3]), x[None, ..., 3])


# ---- the call cache (python/src/kernel.cpp: CallCache) ----------------------------------------


def test_repeated_call_reuses_its_conversion_and_changes_fall_back(rng):
    """A call with the same plain arguments as the previous one reuses their conversion; every
    argument that changes the result (shapes, dtypes, grid, threadgroup, template, init_value,
    stream) is noticed, and the call is converted again, with the right result."""
    k = alloy.metal_kernel(name="cache_scale", input_names=["inp", "n"], output_names=["out"],
                           source="""
        uint i = thread_position_in_grid.x;
        if (i < n) out[i] = static_cast<U>(inp[i] * T(S) + T(1));""")
    x = rng.uniform(-1, 1, 64).astype(np.float32)
    a = alloy.array(x, device=alloy.cpu)

    def call(n=16, grid=None, tg=(8, 1, 1), out_dtype=alloy.float32, t=alloy.float32, s=2,
             init=None, stream=alloy.cpu, shapes=None):
        kw = {} if init is None else {"init_value": init}
        return k(inputs=[a, n], grid=grid or (n, 1, 1), threadgroup=tg,
                 output_shapes=shapes or [(n,)], output_dtypes=[out_dtype],
                 template=[("T", t), ("U", out_dtype), ("S", s)], stream=stream, **kw)[0]

    def expect(out, n=16, s=2, size=None, init=None):
        got = np.asarray(out).astype(np.float64)
        ref = x[:n].astype(np.float64) * s + 1
        if size is not None and size > n:
            ref = np.concatenate([ref, np.full(size - n, init)])
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)

    expect(call())
    hits = k._call_cache_hits
    expect(call())
    expect(call())
    assert k._call_cache_hits == hits + 2  # the same arguments: the cached conversion
    hits = k._call_cache_hits
    expect(call(n=32), n=32)  # other output shape and grid
    assert k._call_cache_hits == hits
    expect(call(n=32), n=32)
    assert k._call_cache_hits == hits + 1
    hits = k._call_cache_hits
    expect(call(s=3), s=3)  # template int
    assert k._call_cache_hits == hits
    out = call(out_dtype=alloy.float16, s=3)  # output dtype (and the template that follows it)
    assert out.dtype == alloy.float16
    expect(out, s=3)
    assert k._call_cache_hits == hits
    out = call(init=7.0, shapes=[(20,)])  # init_value and a larger output
    expect(out, size=20, init=7.0)
    assert k._call_cache_hits == hits
    out = call(init=5.0, shapes=[(20,)])  # only the init value differs
    expect(out, size=20, init=5.0)
    assert k._call_cache_hits == hits
    expect(call(tg=(4, 1, 1)))  # threadgroup
    assert k._call_cache_hits == hits
    expect(call(tg=(4, 1, 1), stream=None))  # stream: converted per call, still cached
    assert k._call_cache_hits == hits + 1
    s = alloy.new_stream(alloy.cpu)
    expect(call(tg=(4, 1, 1), stream=s))
    assert k._call_cache_hits == hits + 2
    # Values that look equal but are not plain Python ints/lists take the general path.
    hits = k._call_cache_hits
    expect(call(tg=(np.int64(4), 1, 1)))
    expect(call(tg=[4, 1, 1]))  # a list: plain, converted once then cached
    expect(call(tg=[4, 1, 1]))
    assert k._call_cache_hits == hits + 1
    # A callable geometry is never cached.
    hits = k._call_cache_hits
    for _ in range(2):
        out = k(inputs=[a, 16], grid=lambda shapes: (16, 1, 1), threadgroup=(8, 1, 1),
                output_shapes=[(16,)], output_dtypes=[alloy.float32],
                template=[("T", alloy.float32), ("U", alloy.float32), ("S", 2)],
                stream=alloy.cpu)[0]
        expect(out)
    assert k._call_cache_hits == hits


def test_cached_call_still_validates_its_inputs(rng):
    """The cache holds the arguments' conversion, not the inputs: new inputs of another dtype or
    shape, or an invalid input, are handled as without it."""
    k = alloy.metal_kernel(name="cache_copy", input_names=["inp"], output_names=["out"],
                           source="uint i = thread_position_in_grid.x; out[i] = inp[i];")
    kw = dict(grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(8,)],
              output_dtypes=[alloy.float32], stream=alloy.cpu)
    x = rng.uniform(-1, 1, 8).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(k(inputs=[x], **kw)[0]), x)
    hits = k._call_cache_hits
    y = np.arange(8, dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(k(inputs=[y], **kw)[0]), y.astype(np.float32))
    assert k._call_cache_hits == hits + 1  # same arguments, other input dtype
    with pytest.raises(TypeError):
        k(inputs=[x], unknown=1, **kw)
    with pytest.raises((TypeError, ValueError)):
        k(inputs=[object()], **kw)
    np.testing.assert_array_equal(np.asarray(k(inputs=[x], **kw)[0]), x)


# ---- the call's fast paths (python/src/kernel.cpp: vectorcall, ScalarInputs; alloy.eval) -----

AFFINE = """
    uint i = thread_position_in_grid.x;
    out[i] = float(inp[i]) * float(s) + float(t);"""


def _affine_ref(x, s, t):
    """What AFFINE computes, in float64 from the values the kernel sees: Python floats become
    float32, ints int32 (int64 beyond), bools 0/1."""
    def seen(v):
        return float(np.float32(v)) if isinstance(v, float) else float(v)
    return x.astype(np.float64) * seen(s) + seen(t)


def _affine_setup(name, n, device, rng):
    """An AFFINE kernel named `name`, random input values x (float32, n), x as an alloy array on
    `device`, and the call's keyword arguments for n threads in one group."""
    k = alloy.metal_kernel(name=name, input_names=["inp", "s", "t"], output_names=["out"],
                           source=AFFINE)
    x = rng.uniform(-1, 1, n).astype(np.float32)
    kw = dict(grid=(n, 1, 1), threadgroup=(n, 1, 1), output_shapes=[(n,)],
              output_dtypes=[alloy.float32], stream=device)
    return k, x, alloy.array(x, device=device), kw


def test_keyword_routes_agree_on_results_and_errors(device, rng):
    """A call through the vectorcall slot (plain keywords, functools.partial), through tp_call
    (`**kwargs` of a dict subclass reaches it via PyObject_Call) and through the nanobind
    `__call__` attribute converts alike: same outputs, same errors and messages."""
    import functools

    n = 32
    k, x, a, kw = _affine_setup("routes", n, device, rng)

    class Kw(dict):
        pass

    routes = {
        "keywords": lambda **extra: k(inputs=[a, 1.5, 2], grid=(n, 1, 1), threadgroup=(n, 1, 1),
                                      output_shapes=[(n,)], output_dtypes=[alloy.float32],
                                      stream=device, **extra),
        "dict": lambda **extra: k(**Kw(inputs=[a, 1.5, 2], **kw, **extra)),
        "partial": lambda **extra: functools.partial(k, inputs=[a, 1.5, 2])(**kw, **extra),
        "__call__": lambda **extra: k.__call__(inputs=[a, 1.5, 2], **kw, **extra),
    }
    ref = _affine_ref(x, 1.5, 2)
    for name, call in routes.items():
        for _ in range(3):  # the first call converts, the next ones take the cached conversion
            out = call()
            assert isinstance(out, list) and len(out) == 1, name
            np.testing.assert_allclose(np.asarray(out[0]), ref, rtol=1e-6, err_msg=name)
    errors = {}
    for name in routes:
        got = []
        for extra in ({"grid": (n, 1)}, {"output_dtypes": [object()]},
                      {"threadgroup": (n, 1, "1")}, {"output_shapes": [(n, 1.5)]}):
            with pytest.raises(Exception) as e:
                _call_with(k, a, kw, extra, name)
            got.append((type(e.value), str(e.value)))
        errors[name] = got
    assert len({tuple(v) for v in errors.values()}) == 1, errors
    assert all(t is TypeError for t, _ in errors["keywords"]), errors
    # An unknown keyword: the slot's own message (nanobind's dispatcher words its own).
    for name in ("keywords", "dict", "partial"):
        with pytest.raises(TypeError) as e:
            _call_with(k, a, kw, {"unknown": 1}, name)
        assert str(e.value) == "MetalKernel.__call__() got an unexpected keyword argument 'unknown'"
    for name, args in (("positional", (1,)),):
        msgs = set()
        for f in (lambda: k(*args, **kw), lambda: k(*args), lambda: k(*args, **Kw(kw))):
            with pytest.raises(TypeError) as e:
                f()
            msgs.add(str(e.value))
        assert len(msgs) == 1 and "keyword arguments only" in msgs.pop()
    for f in (lambda: k(inputs=[a, 1.5, 2]), lambda: k(**Kw(inputs=[a, 1.5, 2]))):
        with pytest.raises(TypeError, match="missing required keyword argument: 'output_shapes'"):
            f()


def _call_with(k, a, kw, extra, route):
    """One call of `k` with `kw` updated by `extra`, through `route`."""
    import functools

    args = {**kw, **extra}
    if route == "keywords":
        return k(inputs=[a, 1.5, 2], **args)
    if route == "dict":
        class Kw(dict):
            pass
        return k(**Kw(inputs=[a, 1.5, 2], **args))
    if route == "partial":
        return functools.partial(k, inputs=[a, 1.5, 2])(**args)
    return k.__call__(inputs=[a, 1.5, 2], **args)


def test_scalar_inputs_follow_their_values(device, rng):
    """A kernel object reuses the 0-d array of a scalar input only for the same value and kind
    at the same position: every change (value, -0.0, float vs int vs bool, an int beyond int32,
    NumPy scalars, the position) gives the call's own value, and outputs made before a change
    keep the values of their own call when evaluated afterwards."""
    k = alloy.metal_kernel(name="scalars", input_names=["inp", "s", "t"], output_names=["out"],
                           source=AFFINE)
    n = 16
    x = rng.uniform(-1, 1, n).astype(np.float32)
    a = alloy.array(x, device=device)

    def call(s, t):
        return k(inputs=[a, s, t], grid=(n, 1, 1), threadgroup=(n, 1, 1), output_shapes=[(n,)],
                 output_dtypes=[alloy.float32], stream=device)[0]

    values = [(0.5, 1), (0.5, 1), (0.25, 1), (0.25, 2), (-0.0, 2), (0.0, 2), (1 + 2**-30, 2),
              (1.0, 2), (True, False), (1, 0), (3, True), (3.0, 3), (2**40, 1), (7, 2**40),
              (np.float32(0.75), np.int32(5)), (0.5, 1), (1e30, -3), (float("inf"), 0)]
    pool = [0.5, 0.25, 1, 2, True, rng.uniform(-4, 4)]
    values += [(pool[i], pool[j]) for i, j in rng.integers(0, len(pool), (16, 2))]
    outs = [(s, t, call(s, t)) for s, t in values]  # all lazy until now
    for s, t, out in reversed(outs):
        got = np.asarray(out).astype(np.float64)
        np.testing.assert_allclose(got, _affine_ref(x, s, t).astype(np.float32), rtol=1e-6,
                                   err_msg=f"s={s!r} t={t!r}")
    # -0.0 and 0.0 are different float32 inputs: 1 / s tells them apart.
    recip = alloy.metal_kernel(name="recip", input_names=["s"], output_names=["out"],
                               source="out[0] = 1.0f / s;")

    def r(s):
        return float(np.asarray(recip(inputs=[s], grid=(1, 1, 1), threadgroup=(1, 1, 1),
                                      output_shapes=[(1,)], output_dtypes=[alloy.float32],
                                      stream=device)[0])[0])
    assert [r(0.0), r(-0.0), r(-0.0), r(0.0)] == [np.inf, -np.inf, -np.inf, np.inf]
    # The same scalar at another position is that position's input.
    swap = alloy.metal_kernel(name="swap", input_names=["p", "q"], output_names=["out"],
                              source="out[0] = p - q;")
    for p, q in [(1.0, 2.0), (2.0, 1.0), (2.0, 2.0), (1.0, 2.0)]:
        got = np.asarray(swap(inputs=[p, q], grid=(1, 1, 1), threadgroup=(1, 1, 1),
                              output_shapes=[(1,)], output_dtypes=[alloy.float32],
                              stream=device)[0])
        assert got[0] == p - q


def test_threads_calling_one_kernel_with_scalars(device, rng):
    """Threads calling one kernel object with their own scalars (the call cache is taken by one
    call at a time, the others convert their arguments): every output has its thread's value."""
    import threading

    k = alloy.metal_kernel(name="threads_scalars", input_names=["inp", "s", "t"],
                           output_names=["out"], source=AFFINE)
    n = 64
    x = rng.uniform(-1, 1, n).astype(np.float32)
    a = alloy.array(x, device=device)
    errors = []

    def work(tid):
        try:
            for i in range(150):
                s, t = 0.5 * tid + (i % 3), tid
                out = k(inputs=[a, s, t], grid=(n, 1, 1), threadgroup=(32, 1, 1),
                        output_shapes=[(n,)], output_dtypes=[alloy.float32], stream=device)[0]
                if i % 2:
                    alloy.eval(out)
                np.testing.assert_allclose(np.asarray(out).astype(np.float64),
                                           _affine_ref(x, s, t), rtol=1e-6)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(tid,)) for tid in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


def test_eval_of_one_array_matches_eval_of_a_list(device, rng):
    """alloy.eval(out) with one array (evaluated as out.eval()) computes what alloy.eval([out])
    does and raises the same errors."""
    n = 16
    k, x, a, kw = _affine_setup("eval_one", n, device, rng)
    one, many = k(inputs=[a, 2.0, 1], **kw)[0], k(inputs=[a, 2.0, 1], **kw)[0]
    assert alloy.eval(one) is None
    alloy.eval([many])
    np.testing.assert_array_equal(np.asarray(one), np.asarray(many))
    np.testing.assert_allclose(np.asarray(one).astype(np.float64), _affine_ref(x, 2.0, 1),
                               rtol=1e-6)
    alloy.eval(one)  # evaluated already: nothing to do
    bad = alloy.metal_kernel(name="eval_one_bad", input_names=["inp"], output_names=["out"],
                             source="out[0] = inp[0] +;")
    got = []
    for ev in (lambda o: alloy.eval(o), lambda o: alloy.eval([o]), lambda o: o.eval()):
        out = bad(inputs=[a], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
                  output_dtypes=[alloy.float32], stream=device)[0]
        with pytest.raises(alloy.CompileError) as e:
            ev(out)
        got.append(str(e.value))
    assert got[0] == got[1] == got[2]
    with pytest.raises(TypeError, match="eval\\(\\) takes arrays"):
        alloy.eval(1.5)
