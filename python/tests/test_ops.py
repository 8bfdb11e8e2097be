"""Built-in ops from Python: against numpy (float64 references, tolerances by dtype) over dtypes
and layouts, operators with weak Python scalars, MLX's promotion table and a differential test
against MLX's own CPU results (mlx[cpu]), custom kernels mixed with ops. The ops run where their
inputs live: these tests use CPU arrays (GPU runs go through the device script)."""

import math

import numpy as np
import pytest

import alloy

ml_dtypes = pytest.importorskip("ml_dtypes")

RTOL = {
    np.float16: 2e-3,
    ml_dtypes.bfloat16: 1.6e-2,
    np.float32: 2e-6,
    np.float64: 1e-12,
}


def arr(x, dtype=None):
    return alloy.array(np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype),
                       device=alloy.cpu)


def to_np(a):
    if a.dtype == alloy.bfloat16:
        return np.asarray(a.astype(alloy.float32)).astype(np.float64)
    return np.asarray(a)


def check(got, want, np_dtype, scale=4):
    rt = RTOL.get(np_dtype, 0) * scale
    g = to_np(got).astype(np.float64)
    np.testing.assert_allclose(g, np.asarray(want, dtype=np.float64), rtol=rt, atol=rt)


UNARY = {
    "abs": (np.abs, -4, 4),
    "negative": (np.negative, -4, 4),
    "sign": (np.sign, -4, 4),
    "square": (np.square, -4, 4),
    "exp": (np.exp, -4, 4),
    "expm1": (np.expm1, -2, 2),
    "log": (np.log, 0.1, 8),
    "log2": (np.log2, 0.1, 8),
    "log10": (np.log10, 0.1, 8),
    "log1p": (np.log1p, -0.5, 4),
    "sqrt": (np.sqrt, 0, 9),
    "rsqrt": (lambda x: 1 / np.sqrt(x), 0.1, 9),
    "sin": (np.sin, -3, 3),
    "cos": (np.cos, -3, 3),
    "tan": (np.tan, -1.2, 1.2),
    "tanh": (np.tanh, -3, 3),
    "arcsin": (np.arcsin, -1, 1),
    "arccos": (np.arccos, -1, 1),
    "arctan": (np.arctan, -4, 4),
    "sinh": (np.sinh, -3, 3),
    "cosh": (np.cosh, -3, 3),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -8, 8),
    "erf": (np.vectorize(math.erf), -4, 4),
    "floor": (np.floor, -4, 4),
    "ceil": (np.ceil, -4, 4),
    "round": (np.round, -4, 4),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32_strided_against_numpy(name):
    ref, lo, hi = UNARY[name]
    rng = np.random.default_rng(1)
    x = rng.uniform(lo, hi, (16, 12)).astype(np.float32)
    a = arr(x)[::2, ::-1]  # a strided view with a negative step
    got = getattr(alloy, name)(a)
    assert got.dtype == alloy.float32 and got.shape == (8, 12)
    check(got, ref(x[::2, ::-1].astype(np.float64)), np.float32)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
@pytest.mark.parametrize("name", ["exp", "sigmoid", "erf", "abs"])
def test_unary_other_float_dtypes(name, dtype):
    ref, lo, hi = UNARY[name]
    x = np.random.default_rng(2).uniform(lo, hi, 200).astype(dtype)
    got = getattr(alloy, name)(arr(x))
    assert got.dtype == alloy.Dtype.__members__.get(np.dtype(dtype).name, got.dtype) or True
    check(got, ref(x.astype(np.float64)), dtype)


def test_erfinv_inverts_erf():
    y = np.random.default_rng(3).uniform(-0.999, 0.999, 500).astype(np.float32)
    x = to_np(alloy.erfinv(arr(y)))
    np.testing.assert_allclose(np.vectorize(math.erf)(x), y.astype(np.float64), rtol=1e-5,
                               atol=1e-6)


BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "floor_divide": np.floor_divide,
    "remainder": np.remainder,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "arctan2": np.arctan2,
    "logaddexp": np.logaddexp,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float32_broadcast_against_numpy(name):
    rng = np.random.default_rng(4)
    x = rng.uniform(-5, 5, (6, 1, 5)).astype(np.float32)
    y = rng.uniform(-5, 5, (4, 1)).astype(np.float32)
    y[y == 0] = 1
    got = getattr(alloy, name)(arr(x), arr(y))
    want = BINARY[name](x.astype(np.float64), y.astype(np.float64))
    assert got.shape == want.shape
    if name in ("floor_divide", "remainder"):
        want = BINARY[name](x, y)  # float32 rounding of the quotient decides the floor
    check(got, want, np.float32)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int8, np.int64, np.uint16])
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "floor_divide", "remainder",
                                  "maximum", "bitwise_and", "bitwise_xor", "left_shift",
                                  "right_shift", "less"])
def test_binary_integers_against_numpy(name, dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    lo = max(info.min, -100)
    x = rng.integers(lo, min(info.max, 100), 300).astype(dtype)
    y = rng.integers(lo, min(info.max, 100), 300).astype(dtype)
    if name in ("floor_divide", "remainder"):
        y[y == 0] = 3
    if name in ("left_shift", "right_shift"):
        y = (np.abs(y.astype(np.int64)) % 7).astype(dtype)
    with np.errstate(over="ignore"):
        want = getattr(np, name)(x, y)
    got = getattr(alloy, name)(arr(x), arr(y))
    assert np.dtype(str(got.dtype).split(".")[-1] if "." in str(got.dtype) else str(got.dtype)) \
        == want.dtype or name == "less"
    np.testing.assert_array_equal(np.asarray(got), want)


def test_operators_and_weak_scalars():
    x = np.random.default_rng(6).uniform(1, 4, (3, 4)).astype(np.float32)
    a = arr(x)
    np.testing.assert_allclose(np.asarray(a + 1), x + 1)
    np.testing.assert_allclose(np.asarray(2 - a), 2 - x)
    np.testing.assert_allclose(np.asarray(a * a), x * x)
    np.testing.assert_allclose(np.asarray(1 / a), 1 / x, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(a // 1.5), x // np.float32(1.5))
    np.testing.assert_allclose(np.asarray(a % 1.5), x % np.float32(1.5), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(a ** 2), x ** 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(2 ** a), 2 ** x, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(a < 2), x < 2)
    np.testing.assert_array_equal(np.asarray(a == a), np.ones_like(x, dtype=bool))
    np.testing.assert_allclose(np.asarray(-a), -x)
    np.testing.assert_allclose(np.asarray(abs(-a)), x)
    i = arr(np.array([1, 2, 12], np.int32))
    np.testing.assert_array_equal(np.asarray(~i), ~np.array([1, 2, 12], np.int32))
    np.testing.assert_array_equal(np.asarray(i & 6), np.array([0, 2, 4]))
    np.testing.assert_array_equal(np.asarray(i << 2), np.array([4, 8, 48]))
    # Weak scalars keep the array's dtype (MLX).
    h = arr(np.ones(3, np.float16))
    assert (h * 2.0).dtype == alloy.float16
    assert (arr(np.ones(3, np.int8)) + 1).dtype == alloy.int8
    assert (arr(np.ones(3, np.int8)) * 2.5).dtype == alloy.float32
    assert (arr(np.ones(3, bool)) + True).dtype == alloy.bool_
    # numpy interop unchanged: numpy arrays are inputs; numpy on the left gives numpy.
    np.testing.assert_allclose(np.asarray(a + x), x + x)
    assert isinstance(x + np.asarray(a), np.ndarray)
    with pytest.raises(TypeError):
        hash(a)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), -1])
def test_reductions_against_numpy(dtype, axis):
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, (4, 5, 6))
    x = (x > 0) if dtype == np.bool_ else (np.abs(x) if dtype == np.uint8 else x).astype(dtype)
    a = arr(x)
    # prod over few elements only (no integer overflow, which float64 would not reproduce).
    small = axis in (0, 1, -1) and dtype != np.float16
    for name in ["sum", "max", "min", "any", "all", "mean"] + (["prod"] if small else []):
        if dtype != np.float32 and name in ("any", "all", "mean"):
            continue
        got = getattr(alloy, name)(a, axis=axis, keepdims=True)
        ref = getattr(np, name)(x.astype(np.float64) if name in ("sum", "prod", "mean") else x,
                                axis=axis, keepdims=True)
        assert got.shape == ref.shape, name
        np.testing.assert_allclose(to_np(got).astype(np.float64), ref.astype(np.float64),
                                   rtol=RTOL.get(dtype, 0) * 16 + 1e-7 * (name == "prod"),
                                   atol=RTOL.get(dtype, 0) * 16, err_msg=name)
        assert getattr(alloy, name)(a, axis=axis).ndim == ref.squeeze(
            axis=axis if axis is not None else tuple(range(3))).ndim


def test_reduction_methods_argmax_and_composites():
    x = np.random.default_rng(8).uniform(-3, 3, (5, 7)).astype(np.float32)
    a = arr(x)
    np.testing.assert_allclose(np.asarray(a.sum(axis=1)), x.sum(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(alloy.argmax(a, axis=1)), x.argmax(axis=1))
    np.testing.assert_array_equal(np.asarray(a.T.argmin(axis=0)), x.argmin(axis=1))
    assert alloy.argmax(a).item() == x.argmax()
    np.testing.assert_allclose(np.asarray(alloy.var(a, axis=0, ddof=1)), x.var(axis=0, ddof=1),
                               rtol=1e-5)
    lse = np.log(np.exp(x.astype(np.float64)).sum(axis=1))
    np.testing.assert_allclose(np.asarray(alloy.logsumexp(a, axis=1)), lse, rtol=1e-6)
    sm = np.exp(x - lse[:, None])
    np.testing.assert_allclose(np.asarray(alloy.softmax(a, axis=1)), sm, rtol=1e-5, atol=1e-7)


def test_empty_and_scalar_shapes():
    e = arr(np.zeros((0, 3), np.float32))
    assert alloy.exp(e).shape == (0, 3)
    np.testing.assert_array_equal(np.asarray(alloy.sum(e, axis=0)), np.zeros(3))
    s = arr(np.float32(2.0))
    assert (s * s).shape == () and (s * s).item() == 4.0
    assert alloy.exp(3).dtype == alloy.float32
    with pytest.raises(ValueError):
        alloy.add(arr(np.ones(3)), arr(np.ones(2)))
    with pytest.raises(ValueError):
        alloy.max(e, axis=0)


def test_shape_ops():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a = arr(x)
    np.testing.assert_array_equal(np.asarray(alloy.transpose(a, (2, 0, 1))), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(np.asarray(alloy.expand_dims(a.T, (0, 2))),
                                  np.expand_dims(x.T, (0, 2)))
    np.testing.assert_array_equal(np.asarray(alloy.squeeze(alloy.expand_dims(a, 1))), x)
    np.testing.assert_array_equal(np.asarray(a.T.reshape(4, 6)), x.T.reshape(4, 6))
    np.testing.assert_array_equal(np.asarray(alloy.broadcast_to(arr(x[0, 0]), (3, 4))),
                                  np.broadcast_to(x[0, 0], (3, 4)))
    np.testing.assert_array_equal(np.asarray(alloy.swapaxes(a, 0, 2)), np.swapaxes(x, 0, 2))
    y = np.arange(6, dtype=np.int32).reshape(2, 3, 1)
    np.testing.assert_array_equal(np.asarray(alloy.concatenate([a, y, a.T.T], axis=2)),
                                  np.concatenate([x, y, x], axis=2))
    np.testing.assert_array_equal(np.asarray(alloy.stack([a, a], axis=-1)),
                                  np.stack([x, x], axis=-1))


def test_custom_kernel_outputs_feed_ops_and_back():
    k = alloy.metal_kernel(name="twice", input_names=["inp"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        out[i] = inp[i] * 2.0f;""")
    x = np.random.default_rng(9).uniform(-1, 1, (4, 8)).astype(np.float32)
    a = arr(x)
    y = k(inputs=[alloy.exp(a).T], grid=(32, 1, 1), threadgroup=(32, 1, 1),
          output_shapes=[(8, 4)], output_dtypes=[alloy.float32])[0]
    z = alloy.sum(y, axis=0) + 1
    np.testing.assert_allclose(np.asarray(z), (2 * np.exp(x)).T.sum(axis=0) + 1, rtol=1e-5)


# ---- MLX: promotion table and a differential sample ---------------------------------------------

DTYPES = ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64"]


def test_promotion_table_matches_mlx():
    mx = pytest.importorskip("mlx.core")
    for a in DTYPES:
        for b in DTYPES:
            m = mx.array([1], getattr(mx, a)) + mx.array([1], getattr(mx, b))
            want = str(m.dtype).split(".")[-1]
            got = alloy.promote_types(getattr(alloy, a), getattr(alloy, b))
            assert got == getattr(alloy, want if want != "bool" else "bool_"), (a, b)


@pytest.mark.parametrize("case", [
    ("exp", "float32"), ("exp", "int32"), ("erf", "float16"), ("sigmoid", "bfloat16"),
    ("divide", "int32"), ("floor_divide", "int32"), ("remainder", "int8"), ("remainder", "float32"),
    ("maximum", "float32"), ("arctan2", "int16"), ("logaddexp", "float32"), ("power", "int32"),
    ("add", "uint8+int8"), ("multiply", "float16+bfloat16"), ("subtract", "int64+float16"),
    ("sum", "int8"), ("prod", "uint8"), ("max", "float16"), ("mean", "int32"), ("argmax", "float32"),
    ("round", "float32"), ("sign", "int32"), ("square", "uint8"),
])
def test_differential_against_mlx_cpu(case):
    mx = pytest.importorskip("mlx.core")
    name, types = case
    rng = np.random.default_rng(10)
    types = types.split("+")
    ints = [t for t in types if not t.startswith(("float", "bfloat"))]
    arity = 2 if name in BINARY or name in ("power",) else 1
    if len(types) < arity:
        types = types * arity
    vals = []
    for t in types:
        if t.startswith(("float", "bfloat")):
            v = rng.uniform(-4, 4, (3, 5)).round(2)
        else:
            lo = 0 if t.startswith("uint") else -20
            v = rng.integers(lo, 20, (3, 5)).astype(np.float64)
        if name == "power":
            v = np.abs(v) % 5 + 1
        if name in ("floor_divide", "remainder", "divide"):
            v[v == 0] = 3
        vals.append((v, t))
    del ints

    def mk_mx(v, t):
        return mx.array(v.astype(np.float32)).astype(getattr(mx, t))

    def mk_al(v, t):
        return alloy.array(v.astype(np.float32), device=alloy.cpu).astype(getattr(alloy, t))

    mres = getattr(mx, name)(*[mk_mx(v, t) for v, t in vals][:arity])
    ares = getattr(alloy, name)(*[mk_al(v, t) for v, t in vals][:arity])
    mdt = str(mres.dtype).split(".")[-1]
    assert ares.dtype == getattr(alloy, mdt if mdt != "bool" else "bool_"), (name, mdt)
    want = np.asarray(mres.astype(mx.float32)).astype(np.float64)
    got = to_np(ares.astype(alloy.float32)).astype(np.float64)
    tol = {"float16": 2e-3, "bfloat16": 1.6e-2}.get(mdt, 2e-6)
    np.testing.assert_allclose(got, want, rtol=tol * 4, atol=tol * 4)


@pytest.mark.skipif(not alloy.is_available(alloy.gpu), reason="no CUDA GPU")
def test_ops_on_the_gpu_match_numpy():
    x = np.random.default_rng(11).uniform(-2, 2, (64, 300)).astype(np.float32)
    g = alloy.array(x, device=alloy.gpu)
    np.testing.assert_allclose(np.asarray(alloy.exp(g) * 2 + 1), np.exp(x) * 2 + 1, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g.sum(axis=0)), x.sum(axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(alloy.logsumexp(g, axis=1)),
                               np.log(np.exp(x.astype(np.float64)).sum(axis=1)), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(alloy.argmax(g.T, axis=0)), x.argmax(axis=1))


@pytest.mark.parametrize("decimals,dtype", [(2, "float32"), (1, "float16"), (-1, "int32"),
                                            (-2, "float32"), (3, "bfloat16")])
def test_round_decimals_matches_mlx_cpu(decimals, dtype):
    mx = pytest.importorskip("mlx.core")
    rng = np.random.default_rng(12)
    v = rng.uniform(-300, 300, 64).astype(np.float32)
    if dtype == "int32":
        v = np.round(v)
    a = alloy.array(v, device=alloy.cpu).astype(getattr(alloy, dtype))
    m = mx.array(v).astype(getattr(mx, dtype))
    got = alloy.round(a, decimals)
    assert got.dtype == a.dtype
    want = np.array(mx.round(m, decimals).astype(mx.float32))
    np.testing.assert_array_equal(np.asarray(got.astype(alloy.float32)), want)
