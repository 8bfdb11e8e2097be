"""Export and import (docs/export.md): Alloy's own format and MLX's ``.mlxfn`` files, trust,
shapeless functions, keyword arguments and bad files. MLX files are written here, at test time,
by mlx[cpu]==0.32.4 (its exporter records mx.fast.metal_kernel calls on Linux)."""

import os
import sys

import numpy as np
import pytest

import alloy

mx = pytest.importorskip("mlx.core")

RNG = np.random.default_rng(1234)

EXP_SOURCE = """
    uint i = thread_position_in_grid.x;
    out[i] = T(metal::exp(float(inp[i])) * 2.0f);
"""


def rand(*shape, dtype=np.float32):
    return (RNG.uniform(-2, 2, size=shape)).astype(dtype)


def mlx_metal_kernel():
    """MLX's own mx.fast.metal_kernel (alloy.mlx may have replaced it in this session)."""
    am = sys.modules.get("alloy.mlx")
    original = getattr(am, "_original", None) if am is not None else None
    return original or mx.fast.metal_kernel


# ---- Alloy's format ----------------------------------------------------------------------------


def alloy_fn():
    k = alloy.metal_kernel(name="exp2x", input_names=["inp"], output_names=["out"],
                           source=EXP_SOURCE)

    def f(x):
        v = x[:, ::2].transpose()  # a strided view: the kernel gets a row-contiguous copy
        out = k(inputs=[v], template=[("T", alloy.float32)], grid=(v.size, 1, 1),
                threadgroup=(64, 1, 1), output_shapes=[v.shape], output_dtypes=[alloy.float32],
                stream=alloy.cpu)[0]
        return out.transpose(), out.astype(alloy.float16)

    return f


def alloy_reference(x):
    v = x[:, ::2].T.astype(np.float64)
    out = (np.exp(v.astype(np.float32)) * 2.0)
    return out.T, out


def test_views_and_kernel_round_trip(tmp_path):
    path = str(tmp_path / "f.alloy")
    alloy.export_function(path, alloy_fn(), alloy.array(rand(6, 10)))
    f = alloy.import_function(path, trust_kernels=True, device=alloy.cpu)
    assert f.format == "alloy"
    assert [k["name"] for k in f.kernels] == ["exp2x"]
    x = rand(6, 10)
    a, b = f(alloy.array(x))
    ra, rb = alloy_reference(x)
    np.testing.assert_allclose(np.asarray(a), ra, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(b).astype(np.float64), rb, rtol=1e-3)
    assert np.asarray(b).dtype == np.float16


def test_kernels_need_consent(tmp_path):
    path = str(tmp_path / "f.alloy")
    alloy.export_function(path, alloy_fn(), alloy.array(rand(4, 4)))
    with pytest.raises(alloy.UntrustedKernelsError, match="exp2x  sha256 [0-9a-f]{64}"):
        alloy.import_function(path)
    with pytest.raises(ValueError):  # UntrustedKernelsError is a ValueError
        alloy.import_function(path, allowed_kernels={"0" * 64})
    listing = alloy.describe_exported_function(path)
    digest = listing.split("sha256 ")[1].split()[0]
    f = alloy.import_function(path, allowed_kernels={digest}, device=alloy.cpu)
    x = rand(4, 4)
    np.testing.assert_allclose(np.asarray(f(alloy.array(x))[0]), alloy_reference(x)[0], rtol=1e-6)


def test_tracing_a_function_that_reads_values_fails_clearly(tmp_path):
    def f(x):
        if x[0].item() > 0:  # reads a value while traced
            return x
        return x.transpose()

    with pytest.raises(alloy.NotSupportedError, match="read the values of input 0"):
        alloy.export_function(str(tmp_path / "f.alloy"), f, alloy.array(rand(3)))


def test_shapeless_views_at_three_sizes(tmp_path):
    path = str(tmp_path / "views.alloy")

    def f(x, *, y):
        return [x[:, ::2].transpose().astype(alloy.float64), y[1:]]

    alloy.export_function(path, f, alloy.array(rand(4, 6)), y=alloy.array(rand(5)),
                          shapeless=True)
    g = alloy.import_function(path, device=alloy.cpu)  # no kernels: no consent needed
    assert g.shapeless
    for n, m in [(3, 5), (17, 40), (64, 129)]:
        x, y = rand(n, m), rand(m)
        a, b = g(alloy.array(x), y=alloy.array(y))
        np.testing.assert_array_equal(np.asarray(a), x[:, ::2].T.astype(np.float64))
        np.testing.assert_array_equal(np.asarray(b), y[1:])


def test_shapeless_constant_grid_kernel_refuses_other_shapes(tmp_path):
    path = str(tmp_path / "k.alloy")
    # Geometry read from shapes (v.size, v.shape): a shapeless file could not follow it.
    with pytest.raises(alloy.NotSupportedError, match="read the shapes of its inputs"):
        alloy.export_function(path, alloy_fn(), alloy.array(rand(4, 8)), shapeless=True)
    k = alloy.metal_kernel(name="exp2x", input_names=["inp"], output_names=["out"],
                           source=EXP_SOURCE)

    def literal(x):  # literal geometry: exported; other shapes are refused naming the kernel
        v = x[:, ::2].transpose()
        return k(inputs=[v], template=[("T", alloy.float32)], grid=(16, 1, 1),
                 threadgroup=(64, 1, 1), output_shapes=[(4, 4)], output_dtypes=[alloy.float32],
                 stream=alloy.cpu)[0].transpose(), x

    alloy.export_function(path, literal, alloy.array(rand(4, 8)), shapeless=True)
    f = alloy.import_function(path, trust_kernels=True, device=alloy.cpu)
    x = rand(4, 8)
    np.testing.assert_allclose(np.asarray(f(alloy.array(x))[0]), alloy_reference(x)[0],
                               rtol=1e-6)
    with pytest.raises(alloy.NotSupportedError, match="constant grid"):
        f(alloy.array(rand(5, 8)))


def test_several_traces_and_keyword_arguments(tmp_path):
    path = str(tmp_path / "multi.alloy")

    def f(x, scale=None):
        return x.transpose().astype(scale.dtype), scale[::-1]

    with alloy.exporter(path, f) as ex:
        ex(alloy.array(rand(2, 3)), scale=alloy.array(rand(4, dtype=np.float16)))
        ex(alloy.array(rand(3, 2).astype(np.int32)), scale=alloy.array(rand(5)))
    g = alloy.import_function(path, device=alloy.cpu)
    for xd, sd, shape, n in [(np.float32, np.float16, (2, 3), 4), (np.int32, np.float32, (3, 2), 5)]:
        x, s = rand(*shape).astype(xd), rand(n).astype(sd)
        a, b = g(alloy.array(x), scale=alloy.array(s))
        np.testing.assert_array_equal(np.asarray(a), x.T.astype(sd))
        np.testing.assert_array_equal(np.asarray(b), s[::-1])
    with pytest.raises(ValueError, match="no exported trace matches"):
        g(alloy.array(rand(2, 3)))  # the keyword argument is missing


@pytest.mark.skipif(not alloy.is_available(alloy.gpu), reason="no CUDA GPU")
def test_imported_function_runs_on_the_gpu(tmp_path):
    path = str(tmp_path / "f.alloy")
    alloy.export_function(path, alloy_fn(), alloy.array(rand(6, 10)))
    f = alloy.import_function(path, trust_kernels=True, device=alloy.gpu)
    x = rand(6, 10)
    a, _ = f(alloy.array(x))
    assert a.device == alloy.gpu
    np.testing.assert_allclose(np.asarray(a), alloy_reference(x)[0], rtol=1e-5)


def test_library_kernel_round_trip(tmp_path):
    lib = alloy.compile_shader("""
        #include <metal_stdlib>
        #include "offset.h"
        using namespace metal;
        kernel void shifted_square(device const float* x [[buffer(0)]],
                                   device float* y [[buffer(1)]],
                                   constant float& s [[buffer(2)]],
                                   uint i [[thread_position_in_grid]]) {
          y[i] = (x[i] + OFFSET) * (x[i] + OFFSET) * s;
        }""", headers={"offset.h": "#define OFFSET 0.5f"}, name="py_exported_lib")

    def f(x):
        y = lib.shifted_square(x.T, alloy.zeros(x.T.shape), 3.0,
                               stream=alloy.cpu)
        return y, y.sum()

    path = str(tmp_path / "lib.alloy")
    alloy.export_function(path, f, alloy.array(rand(3, 5)))
    with pytest.raises(alloy.UntrustedKernelsError, match="library py_exported_lib"):
        alloy.import_function(path)
    g = alloy.import_function(path, trust_kernels=True, device=alloy.cpu)
    x2 = rand(3, 5)
    y, total = g(alloy.array(x2))
    want = (x2.T.astype(np.float64) + 0.5) ** 2 * 3.0
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6)
    np.testing.assert_allclose(float(np.asarray(total)), want.sum(), rtol=1e-5)


# ---- MLX's .mlxfn ------------------------------------------------------------------------------


def test_mlxfn_with_metal_kernel_and_views(tmp_path):
    mk = mlx_metal_kernel()
    k = mk(name="myexp", input_names=["inp"], output_names=["out"], source="""
        uint elem = thread_position_in_grid.x;
        T tmp = inp[elem];
        out[elem] = metal::exp(tmp);
    """)

    def f(x):
        y = x[::2, 1:]
        o = k(inputs=[y], template=[("T", mx.float32)], grid=(y.size, 1, 1),
              threadgroup=(256, 1, 1), output_shapes=[y.shape], output_dtypes=[mx.float32])[0]
        return o.T, o.astype(mx.float16)

    path = str(tmp_path / "k.mlxfn")
    x = rand(8, 5)
    mx.export_function(path, f, mx.array(x))
    with pytest.raises(alloy.UntrustedKernelsError, match="myexp"):
        alloy.import_function(path)
    g = alloy.import_function(path, trust_kernels=True)
    assert g.format == "mlxfn"
    (kernel,) = g.kernels
    assert "custom_kernel_myexp__float_float_float" in kernel["metal_source"]
    x2 = rand(8, 5)
    a, b = g(alloy.array(x2))
    ref = np.exp(x2[::2, 1:].astype(np.float64))
    np.testing.assert_allclose(np.asarray(a), ref.T, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(b).astype(np.float64), ref, rtol=1e-3)


def test_mlxfn_views_match_mlx(tmp_path):
    def f(x, y):
        a = x[1:, ::-2].T
        b = mx.broadcast_to(y, (3, 4))
        c = mx.reshape(x[:, :4], (-1,))
        return (a.astype(mx.float16), b, mx.expand_dims(c, 0), mx.stop_gradient(c),
                mx.as_strided(x, (3, 2), (1, 4), 2), mx.flatten(x, 0, 1),
                mx.squeeze(mx.expand_dims(x, 1), 1), mx.unflatten(x, 1, (2, 3)),
                x[::-1, 2:5:2], mx.swapaxes(x, 0, 1), x.astype(mx.int32))

    x, y = rand(5, 6) * 10, rand(4)
    path = str(tmp_path / "views.mlxfn")
    mx.export_function(path, f, mx.array(x), mx.array(y))
    g = alloy.import_function(path)
    want = f(mx.array(x), mx.array(y))
    got = g(alloy.array(x), alloy.array(y))
    assert len(got) == len(want)
    for gv, wv in zip(got, want):
        w = np.array(wv)
        assert np.asarray(gv).shape == w.shape
        np.testing.assert_array_equal(np.asarray(gv), w)


def test_mlxfn_keyword_arguments_and_several_functions(tmp_path):
    path = str(tmp_path / "kw.mlxfn")

    def f(x, *, y):
        return [x.T, y[::2]]

    with mx.exporter(path, f) as ex:
        ex(mx.array(rand(2, 3)), y=mx.array(rand(6)))
        ex(mx.array(rand(4, 2)), y=mx.array(rand(3)))
    g = alloy.import_function(path)
    for shape, n in [((2, 3), 6), ((4, 2), 3)]:
        x, y = rand(*shape), rand(n)
        a, b = g(alloy.array(x), y=alloy.array(y))
        np.testing.assert_array_equal(np.asarray(a), x.T)
        np.testing.assert_array_equal(np.asarray(b), y[::2])


def test_mlxfn_unknown_primitive_is_named(tmp_path):
    path = str(tmp_path / "sort.mlxfn")
    mx.export_function(path, lambda x: mx.sort(x, axis=1), mx.array(rand(3, 3)))
    with pytest.raises(alloy.NotSupportedError, match="MLX primitive 'Sort'"):
        alloy.import_function(path)


def test_mlxfn_matmul_matches_mlx(tmp_path):
    path = str(tmp_path / "matmul.mlxfn")
    x, w = rand(2, 3, 5), rand(5, 4)
    f = lambda a, b: (a @ b, a @ a.swapaxes(1, 2), mx.matmul(a[0, 0], b))
    mx.export_function(path, f, mx.array(x), mx.array(w))
    g = alloy.import_function(path)
    got = g(alloy.array(x, device=alloy.cpu), alloy.array(w, device=alloy.cpu))
    want = f(mx.array(x), mx.array(w))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.array(b), rtol=1e-5, atol=1e-6)


def mlx_ops_function(x, y):
    """Elementwise, comparison, logical, bitwise, reduction, arg-reduction, concatenation and
    fill ops of MLX, each recorded as its own primitive (MLX CPU streams do not fuse)."""
    pos = mx.abs(y) + 1.0
    a = mx.exp(x) + mx.log(pos) * mx.sin(x) - mx.cos(y) / (mx.tanh(x) + 2.0)
    b = mx.sigmoid(-x) ** 2 + mx.sqrt(pos) + mx.rsqrt(pos) + mx.square(y) - mx.log2(pos)
    c = mx.where(x > y, mx.maximum(x, y), mx.minimum(x, y)) + mx.log10(pos) + mx.log1p(pos)
    d = mx.sum(a, axis=1) + mx.max(b, axis=1) - mx.min(c, axis=1)
    e = mx.prod(mx.abs(x) + 0.5, axis=0, keepdims=True) + mx.mean(y)
    cmp = [x == y, x != y, x < y, x <= y, x >= y,
           mx.logical_and(x < y, mx.logical_not(x < 0.0)), mx.logical_or(x < y, y < 0.0),
           mx.all(x < 1.5, axis=0), mx.any(y > 1.5, axis=1)]
    i = (x * 100).astype(mx.int32)
    bits = [i & 12, i | 3, i ^ 7, i << 2, i >> 1, i % 7]  # (MLX cannot export ~i)
    arg = [mx.argmax(x, axis=1), mx.argmin(y, axis=0)]
    more = [mx.concatenate([x, y], axis=0), mx.full((2, 3), 1.5), mx.zeros_like(x),
            mx.arctan2(x, y), mx.logaddexp(x, y), mx.floor(x * 3), mx.ceil(x * 3),
            mx.round(x * 3), mx.sign(x), mx.negative(y), mx.expm1(x), mx.erf(x),
            mx.arcsin(x / 3), mx.arccos(x / 3), mx.arctan(x), mx.sinh(x), mx.cosh(x), mx.tan(x),
            mx.erfinv(x / 3), x - y, x * y]
    return [a, b, c, d, e] + cmp + bits + arg + more


def test_mlxfn_ops_match_mlx(tmp_path):
    x, y = rand(4, 6), rand(4, 6)
    path = str(tmp_path / "ops.mlxfn")
    mx.export_function(path, mlx_ops_function, mx.array(x), mx.array(y))
    g = alloy.import_function(path)  # no kernels: no consent needed
    x2, y2 = rand(4, 6), rand(4, 6)  # new values
    want = mlx_ops_function(mx.array(x2), mx.array(y2))
    got = g(alloy.array(x2), alloy.array(y2))
    assert len(got) == len(want)
    for k, (gv, wv) in enumerate(zip(got, want)):
        w = np.array(wv)
        gv = np.asarray(gv)
        assert gv.shape == w.shape and gv.dtype == w.dtype, (k, gv.shape, w.shape, gv.dtype)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(gv, w, rtol=2e-5, atol=1e-6, err_msg=str(k))
        else:
            np.testing.assert_array_equal(gv, w, err_msg=str(k))


def test_mlxfn_ops_and_metal_kernel(tmp_path):
    mk = mlx_metal_kernel()
    k = mk(name="scaled_softplus", input_names=["inp"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        float v = float(inp[i]);
        out[i] = T(metal::log(1.0f + metal::exp(v)) * 0.5f);
    """)

    def f(x, w):
        h = mx.maximum(x * w + 0.25, 0.0)  # ops feeding the kernel
        o = k(inputs=[h], template=[("T", mx.float32)], grid=(h.size, 1, 1),
              threadgroup=(32, 1, 1), output_shapes=[h.shape], output_dtypes=[mx.float32])[0]
        return mx.sum(o, axis=1), mx.argmax(o, axis=1), o - h

    x, w = rand(3, 40), rand(3, 40)
    path = str(tmp_path / "mixed.mlxfn")
    mx.export_function(path, f, mx.array(x), mx.array(w))
    g = alloy.import_function(path, trust_kernels=True, device=alloy.cpu)
    x2, w2 = rand(3, 40), rand(3, 40)
    s, am, diff = g(alloy.array(x2), alloy.array(w2))
    h = np.maximum(x2.astype(np.float64) * w2 + 0.25, 0.0)
    o = np.log1p(np.exp(h)) * 0.5
    np.testing.assert_allclose(np.asarray(s), o.sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(am), o.argmax(axis=1))
    assert np.asarray(am).dtype == np.uint32  # MLX's argmax dtype
    np.testing.assert_allclose(np.asarray(diff), o - h, rtol=1e-5, atol=1e-6)


def test_bad_files(tmp_path):
    path = str(tmp_path / "k.mlxfn")
    mx.export_function(path, lambda x: x.T, mx.array(rand(2, 3)))
    good = open(path, "rb").read()
    alloy_path = str(tmp_path / "f.alloy")
    alloy.export_function(alloy_path, alloy_fn(), alloy.array(rand(4, 4)))
    good_alloy = open(alloy_path, "rb").read()
    bad = tmp_path / "bad"
    for data in [b"", b"\x00" * 3, good[: len(good) // 2], good_alloy[: len(good_alloy) // 2],
                 os.urandom(200), b"\xff" * 64]:
        bad.write_bytes(data)
        with pytest.raises(ValueError):
            alloy.import_function(str(bad))
    with pytest.raises(ValueError, match="cannot read"):
        alloy.import_function(str(tmp_path / "missing.alloy"))


# ---- the CLI -----------------------------------------------------------------------------------


def _cli():
    import pathlib
    import shutil

    exe = os.environ.get("ALLOY_CLI") or str(pathlib.Path(__file__).resolve().parents[2] / "build" / "alloy")
    if not os.path.exists(exe):
        exe = shutil.which("alloy")
    if not exe:
        pytest.skip("the alloy CLI is not built (build/alloy): `make build` builds it")
    return exe


def test_cli_inspect_and_run(tmp_path):
    import subprocess

    exe = _cli()
    mk = mlx_metal_kernel()
    k = mk(name="twice", input_names=["inp"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        out[i] = inp[i] * 2;
    """)

    def f(x):
        return [k(inputs=[x.T], grid=(x.size, 1, 1), threadgroup=(32, 1, 1),
                  output_shapes=[(x.shape[1], x.shape[0])], output_dtypes=[mx.float32])[0]]

    path = str(tmp_path / "twice.mlxfn")
    mx.export_function(path, f, mx.array(rand(3, 4)))
    listing = subprocess.run([exe, "inspect", path], capture_output=True, text=True, check=True)
    assert "twice  sha256 " in listing.stdout and "(3, 4) float32" in listing.stdout
    x = rand(3, 4)
    np.save(tmp_path / "x.npy", x)
    out = str(tmp_path / "out.npy")
    refused = subprocess.run([exe, "run", path, "--input", str(tmp_path / "x.npy"),
                              "--output", out], capture_output=True, text=True)
    assert refused.returncode != 0 and "sha256" in refused.stderr
    subprocess.run([exe, "run", path, "--trust", "--device", "cpu", "--input",
                    str(tmp_path / "x.npy"), "--output", out], check=True)
    np.testing.assert_array_equal(np.load(out), x.T.astype(np.float64) * 2)


def _examples():
    import importlib.util
    import pathlib

    folder = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"
    sys.path.insert(0, str(folder))
    try:
        mods = {}
        for name in ("kernels", "grid_sample", "grid_sample_grad"):
            spec = importlib.util.spec_from_file_location(f"_export_{name}", folder / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            mods[name] = mod
        return mods
    finally:
        sys.path.remove(str(folder))


def test_mlxfn_grid_sample_forward_and_backward(tmp_path):
    """The MLX docs' grid_sample forward and its atomic backward (init_value=0, shape arrays),
    exported by MLX on Linux, run by Alloy (on the GPU too when there is one)."""
    ex = _examples()
    mk = mlx_metal_kernel()
    fwd = mk(name="grid_sample", input_names=["x", "grid"], output_names=["out"],
             source=ex["kernels"].GRID_SAMPLE)
    bwd = mk(name="grid_sample_grad", input_names=["x", "grid", "cotangent"],
             output_names=["x_grad", "grid_grad"], source=ex["kernels"].GRID_SAMPLE_GRAD,
             atomic_outputs=True)
    B, H, W, C, gH, gW = 2, 5, 6, 32, 3, 4

    def f(x, grid, cot):
        n = B * gH * gW * C
        out = fwd(inputs=[x, grid], template=[("T", mx.float32)], grid=(n, 1, 1),
                  threadgroup=(256, 1, 1), output_shapes=[(B, gH, gW, C)],
                  output_dtypes=[mx.float32])[0]
        gx, gg = bwd(inputs=[x, grid, cot], grid=(n, 1, 1), threadgroup=(256, 1, 1),
                     output_shapes=[x.shape, grid.shape], output_dtypes=[mx.float32] * 2,
                     init_value=0)
        return out, gx, gg

    x = rand(B, H, W, C)
    grid = rand(B, gH, gW, 2) * 0.55
    cot = rand(B, gH, gW, C)
    path = str(tmp_path / "grid_sample.mlxfn")
    mx.export_function(path, f, mx.array(x), mx.array(grid), mx.array(cot))
    devices = [alloy.cpu] + ([alloy.gpu] if alloy.is_available(alloy.gpu) else [])
    for device in devices:
        g = alloy.import_function(path, trust_kernels=True, device=device)
        assert sorted(k["name"] for k in g.kernels) == ["grid_sample", "grid_sample_grad"]
        x2, grid2, cot2 = rand(B, H, W, C), rand(B, gH, gW, 2) * 0.55, rand(B, gH, gW, C)
        out, gx, gg = g(alloy.array(x2), alloy.array(grid2), alloy.array(cot2))
        want_x, want_grid = ex["grid_sample_grad"].grid_sample_grad_reference(x2, grid2, cot2)
        np.testing.assert_allclose(np.asarray(out),
                                   ex["grid_sample"].grid_sample_reference(x2, grid2),
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(gx), want_x, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(gg), want_grid, rtol=1e-3, atol=1e-3)
