"""alloy.compile: retrace counts, shapeless replay over new sizes (kernels whose geometry is a
lambda of the input shapes), fusion against eager evaluation and float64 references over dtypes
and broadcasting, constant folding and dead code visible in the compiled graph, and errors
raised inside the function."""
import math

import ml_dtypes
import numpy as np
import pytest

import alloy

RNG = np.random.default_rng(12)


def rand(shape, dtype=np.float32):
    # Multiples of 1/64 in [-2, 2): exact in every float dtype tested.
    return (np.round(RNG.uniform(-2, 2, size=shape) * 64) / 64).astype(dtype)


def chain(x, y):
    return alloy.sigmoid(alloy.exp(x * y - 0.5) * 0.25) + x


def chain_ref(x, y):
    x, y = x.astype(np.float64), y.astype(np.float64)
    return 1 / (1 + np.exp(-np.exp(x * y - 0.5) * 0.25)) + x


MYEXP = """
    uint elem = thread_position_in_grid.x;
    out[elem] = metal::exp(inp[elem]);
"""


def test_no_retrace_on_cache_hit():
    f = alloy.compile(chain)
    x, y = rand((8, 16)), rand((8, 16))
    np.testing.assert_allclose(np.asarray(f(alloy.array(x), alloy.array(y))), chain_ref(x, y),
                               rtol=1e-5, atol=1e-6)
    assert f.trace_count == 1
    np.testing.assert_allclose(np.asarray(f(alloy.array(y), alloy.array(x))), chain_ref(y, x),
                               rtol=1e-5, atol=1e-6)
    assert f.trace_count == 1
    f(alloy.array(rand((4, 16))), alloy.array(rand((4, 16))))  # new shape
    assert f.trace_count == 2
    f(alloy.array(x.astype(np.float16)), alloy.array(y.astype(np.float16)))  # new dtype
    assert f.trace_count == 3
    f(alloy.array(x), alloy.array(y))
    assert f.trace_count == 3


def test_non_array_arguments_are_constants_of_the_trace():
    calls = []

    @alloy.compile
    def scaled(x, scale, *, shift=0.0):
        calls.append((scale, shift))
        return {"out": x * scale + shift}

    x = rand((32,))
    a = scaled(alloy.array(x), 2.0)
    np.testing.assert_allclose(np.asarray(a["out"]), x * 2.0, rtol=1e-6)
    scaled(alloy.array(rand((32,))), 2.0)
    assert scaled.trace_count == 1
    b = scaled(alloy.array(x), 3.0, shift=1.0)
    np.testing.assert_allclose(np.asarray(b["out"]), x * 3.0 + 1.0, rtol=1e-6)
    assert scaled.trace_count == 2
    assert calls == [(2.0, 0.0), (3.0, 1.0)]
    with pytest.raises(TypeError, match="hashable"):
        scaled(alloy.array(x), {1.0})


def test_shapeless_compile_over_five_sizes():
    f = alloy.compile(chain, shapeless=True)
    for n in (4, 37, 256, 1000, 4096):
        x, y = rand((n,)), rand((n,))
        out = np.asarray(f(alloy.array(x), alloy.array(y)))
        assert out.shape == (n,)
        np.testing.assert_allclose(out, chain_ref(x, y), rtol=1e-5, atol=1e-6)
    assert f.trace_count == 1


def test_shapeless_broadcasting_follows_both_shapes():
    f = alloy.compile(lambda x, row: x * row + 1, shapeless=True)
    for n, m in ((2, 3), (5, 3), (7, 16)):
        x, row = rand((n, m)), rand((m,))
        np.testing.assert_allclose(np.asarray(f(alloy.array(x), alloy.array(row))), x * row + 1,
                                   rtol=1e-6)
    assert f.trace_count == 1


def test_chain_is_one_fused_kernel():
    f = alloy.compile(chain)
    x = alloy.array(rand((64,)))
    assert f.graph(x, x) == ["Fused(multiply,subtract,exp,multiply,sigmoid,add)"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_fusion_matches_eager_and_float64(dtype):
    tol = {np.float32: 1e-5, np.float16: 1e-2, ml_dtypes.bfloat16: 5e-2, np.float64: 1e-12}[dtype]

    def fn(x, row, c):
        t = alloy.exp(x) * row - c
        return alloy.maximum(t, x) / (alloy.abs(row) + c)

    x, row, c = rand((6, 33), dtype), rand((33,), dtype), np.array(1.5, dtype=dtype)
    # float64 runs on the CPU only (Metal has no double): on a GPU machine the default is the GPU.
    where = {"device": alloy.cpu} if dtype == np.float64 else {}
    args = [alloy.array(v, **where) for v in (x, row, c)]
    f = alloy.compile(fn)
    got = np.asarray(f(*args)).astype(np.float64)
    eager = np.asarray(fn(*args)).astype(np.float64)
    assert f(*args).dtype == args[0].dtype
    xd, rd = x.astype(np.float64), row.astype(np.float64)
    ref = np.maximum(np.exp(xd) * rd - 1.5, xd) / (np.abs(rd) + 1.5)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, eager, rtol=tol, atol=tol)
    fused = [g for g in f.graph(*args) if g.startswith("Fused(")]
    assert sorted(fused) == ["Fused(abs,add)", "Fused(exp,multiply,subtract,maximum,divide)"]


def test_constant_folding_and_dead_code_are_visible():
    c1, c2 = alloy.array(rand((16,))), alloy.array(rand((16,)))

    def fn(x):
        unused = alloy.sin(x)  # dead
        k = alloy.exp(c1 + c2)  # folded at compile time
        return x * k, alloy.cos(x) + alloy.cos(x)  # one cos

    f = alloy.compile(fn)
    x = rand((16,))
    assert f.graph(alloy.array(x)) == ["Multiply", "Fused(cos,add)"]
    assert f.constant_count(alloy.array(x)) == 1
    a, b = f(alloy.array(x))
    k = np.exp(np.asarray(c1).astype(np.float64) + np.asarray(c2))
    np.testing.assert_allclose(np.asarray(a), x * k, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(b), 2 * np.cos(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_errors_inside_fn_propagate():
    state = {"calls": 0}

    def fn(x):
        state["calls"] += 1
        if state["calls"] == 1:
            raise KeyError("boom from the user's function")
        return alloy.exp(x)

    f = alloy.compile(fn)
    x = alloy.array(rand((4,)))
    with pytest.raises(KeyError, match="boom"):
        f(x)
    assert f.trace_count == 0
    np.testing.assert_allclose(np.asarray(f(x)), np.exp(np.asarray(x)), rtol=1e-6)
    assert f.trace_count == 1

    reads = alloy.compile(lambda x: x * float(np.asarray(x)[0]))
    with pytest.raises(alloy.NotSupportedError):
        reads(x)
    with pytest.raises(TypeError, match="must return arrays"):
        alloy.compile(lambda x: 3)(x)


# ---- kernel geometry as functions of the input shapes ------------------------------------------


def test_shapeless_exp_kernel_with_lambda_geometry_grows_4_to_4096():
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)

    @alloy.compile(shapeless=True)
    def f(x):
        return k(inputs=[x], output_shapes=lambda s: [s[0]], output_dtypes=[alloy.float32],
                 grid=lambda s: (math.prod(s[0]), 1, 1),
                 threadgroup=lambda s: (alloy.ShapeExpr.min(s[0][0], 256), 1, 1))[0]

    for n in (4, 40, 300, 1025, 4096):
        x = rand((n,))
        out = np.asarray(f(alloy.array(x)))
        assert out.shape == (n,)
        np.testing.assert_allclose(out, np.exp(x.astype(np.float64)), rtol=1e-5)
    assert f.trace_count == 1


def test_shapeless_two_dimensional_kernel():
    k = alloy.metal_kernel(name="rows_cols", input_names=["inp"], output_names=["out"], source="""
        uint c = thread_position_in_grid.x, r = thread_position_in_grid.y;
        uint cols = threads_per_grid.x;
        out[r * cols + c] = inp[r * cols + c] * float(r + 1) - float(c);
    """)

    @alloy.compile(shapeless=True)
    def f(x):
        return k(inputs=[x], output_shapes=lambda s: [s[0]], output_dtypes=[alloy.float32],
                 grid=lambda s: (s[0][1], s[0][0], 1),
                 threadgroup=lambda s: (alloy.ShapeExpr.min(s[0][1], 32),
                                        alloy.ShapeExpr.min(s[0][0], 8), 1))[0]

    for rows, cols in ((2, 3), (5, 40), (33, 7)):
        x = rand((rows, cols))
        r = np.arange(rows)[:, None]
        c = np.arange(cols)[None, :]
        np.testing.assert_allclose(np.asarray(f(alloy.array(x))), x * (r + 1) - c, rtol=1e-6,
                                   atol=1e-6)
    assert f.trace_count == 1


def test_constant_grid_under_shapeless_names_the_kernel():
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)

    @alloy.compile(shapeless=True)
    def f(x):
        return k(inputs=[x], output_shapes=[(8,)], output_dtypes=[alloy.float32],
                 grid=(8, 1, 1), threadgroup=(32, 1, 1))[0]

    x = rand((8,))
    np.testing.assert_allclose(np.asarray(f(alloy.array(x))), np.exp(x), rtol=1e-6)
    with pytest.raises(alloy.NotSupportedError, match="myexp.*constant grid"):
        f(alloy.array(rand((64,))))


def test_geometry_read_from_shapes_traces_again_under_shapeless():
    # x.shape / x.size read while tracing: the geometry is the traced call's, so new shapes
    # trace the function again (right results) instead of replaying the traced geometry.
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)

    @alloy.compile(shapeless=True)
    def f(x):
        return k(inputs=[x], output_shapes=[x.shape], output_dtypes=[alloy.float32],
                 grid=(x.size, 1, 1), threadgroup=(32, 1, 1))[0]

    for n in (8, 64, 8):
        x = rand((n,))
        np.testing.assert_allclose(np.asarray(f(alloy.array(x))), np.exp(x), rtol=1e-6)
    assert f.trace_count == 2


def test_shapeless_gradient_step_follows_new_sizes():
    # The gradient of a sum broadcasts its cotangent to the traced shape: before, n = 1 after
    # n = 8 returned 8 values and n = 3 raised "shapes (3) and (8) cannot be broadcast".
    def loss(x, w):
        return alloy.sum(alloy.exp(x * w) * 0.5 + alloy.sin(x))

    def step(x, w):
        return w - 0.1 * alloy.grad(loss, argnums=1)(x, w)

    f = alloy.compile(step, shapeless=True)
    for n in (8, 1, 3, 100):
        x, w = rand((n,)), rand((n,))
        got = np.asarray(f(alloy.array(x), alloy.array(w)))
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        assert got.shape == (n,)
        np.testing.assert_allclose(got, w64 - 0.1 * x64 * np.exp(x64 * w64) * 0.5, rtol=1e-5,
                                   atol=1e-5)


def test_shapeless_values_made_from_shapes():
    # x.shape[0] turned into a value (a mean by hand) and an explicit broadcast_to: both are the
    # call's shapes, so each new shape is traced; results equal calling the function.
    def f(x):
        return alloy.sum(x) / x.shape[0] + alloy.broadcast_to(alloy.max(x), (4,))

    g = alloy.compile(f, shapeless=True)
    for n in (4, 1, 16):
        x = rand((n,))
        want = np.asarray(f(alloy.array(x)))
        got = np.asarray(g(alloy.array(x)))
        assert got.shape == want.shape == (4,)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    # Elementwise chains that read no shapes keep one trace for every size, as do slices with
    # open ends; a negative bound is the call's dimension minus one: traced again.
    h = alloy.compile(lambda x, row: x * row + 1.0, shapeless=True)
    for n, m in ((2, 3), (5, 3), (1, 9)):
        h(alloy.array(rand((n, m))), alloy.array(rand((m,))))
    assert h.trace_count == 1
    every_other = alloy.compile(lambda x: x[::2] * 2.0, shapeless=True)
    all_but_last = alloy.compile(lambda x: x[:-1] * 2.0, shapeless=True)
    for n in (8, 13):
        x = rand((n,))
        np.testing.assert_allclose(np.asarray(every_other(alloy.array(x))), x[::2] * 2)
        np.testing.assert_allclose(np.asarray(all_but_last(alloy.array(x))), x[:-1] * 2)
    assert every_other.trace_count == 1 and all_but_last.trace_count == 2


def test_geometry_lambda_that_needs_values_falls_back_to_concrete_shapes():
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)
    x = rand((100,))
    # math.ceil cannot take a ShapeExpr: the lambda is called with the concrete shapes.
    out = k(inputs=[alloy.array(x)], output_shapes=lambda s: [s[0]],
            output_dtypes=[alloy.float32], grid=lambda s: (math.ceil(s[0][0] / 1), 1, 1),
            threadgroup=(64, 1, 1))[0]
    np.testing.assert_allclose(np.asarray(out), np.exp(x), rtol=1e-6)


def test_shape_expr_arithmetic():
    E = alloy.ShapeExpr
    e = E.ceil_div(E.dim(0, 0) * 3 + 1, 2) - E.min(E.size(1), 5) // 2
    assert e.eval([(7,), (2, 4)]) == math.ceil(22 / 2) - min(8, 5) // 2
    assert (-E.dim(0, 0)).eval([(3,)]) == -3
    assert (10 - E.dim(0, 0)).eval([(3,)]) == 7
    assert E(4).is_constant and not E.dim(0, 0).is_constant
    with pytest.raises(TypeError):
        bool(E.dim(0, 0))


def test_lambda_geometry_survives_shapeless_export(tmp_path):
    k = alloy.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)

    def f(x):
        return k(inputs=[x], output_shapes=lambda s: [s[0]], output_dtypes=[alloy.float32],
                 grid=lambda s: (s[0][0] * s[0][1], 1, 1), threadgroup=(32, 1, 1),
                 stream=alloy.cpu)[0]

    path = str(tmp_path / "f.alloy")
    alloy.export_function(path, f, alloy.array(rand((2, 3))), shapeless=True)
    g = alloy.import_function(path, trust_kernels=True, device=alloy.cpu)
    for shape in ((2, 3), (9, 40)):
        x = rand(shape)
        np.testing.assert_allclose(np.asarray(g(alloy.array(x))[0]), np.exp(x.astype(np.float64)),
                                   rtol=1e-5)
