"""complex64 ops against numpy complex128 references, their promotion and numpy conversion, and
boolean masks (`a[mask]` raises as MLX; `a[mask] = v` is MLX's masked update). Where mlx is
installed (pip install mlx[cpu]) the same calls are compared with MLX's CPU results. CPU arrays;
random inputs."""

import numpy as np
import pytest

import alloy

try:
    import mlx.core as mx
except ImportError:  # pragma: no cover - optional differential reference
    mx = None

needs_mlx = pytest.mark.skipif(mx is None, reason="mlx is not installed (pip install mlx[cpu])")

RNG = np.random.default_rng(11)


def crand(shape, bound=2.0):
    return (RNG.uniform(-bound, bound, shape) + 1j * RNG.uniform(-bound, bound, shape)).astype(
        np.complex64)


def arr(x):
    return alloy.array(np.asarray(x), device=alloy.cpu)


def close(got, want, rtol):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape
    err = np.abs(got.astype(np.complex128) - want) / (np.abs(want) + 1e-3)
    assert err.max(initial=0) <= rtol, (err.max(), got, want)


UNARY = {
    "negative": (np.negative, 1e-7), "square": (np.square, 2e-6),
    "exp": (np.exp, 4e-6), "log": (np.log, 4e-6), "log2": (np.log2, 4e-6),
    "log10": (np.log10, 4e-6), "log1p": (np.log1p, 4e-6), "sqrt": (np.sqrt, 4e-6),
    "rsqrt": (lambda z: 1 / np.sqrt(z), 4e-6), "sin": (np.sin, 4e-6), "cos": (np.cos, 4e-6),
    "tan": (np.tan, 1e-4), "sinh": (np.sinh, 4e-6), "cosh": (np.cosh, 4e-6),
    "tanh": (np.tanh, 1e-4), "arcsin": (np.arcsin, 2e-5), "arccos": (np.arccos, 2e-5),
    "arctan": (np.arctan, 2e-5), "conjugate": (np.conjugate, 0), "sign": (None, 2e-6),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_complex_matches_numpy(name):
    f, rtol = UNARY[name]
    z = crand((13, 7))
    ref = z.astype(np.complex128)
    want = ref / np.abs(ref) if name == "sign" else f(ref)  # numpy 1.x's sign differs
    for x, w in ((arr(z), want), (arr(z).T, want.T)):  # contiguous and a strided view
        y = getattr(alloy, name)(x)
        assert y.dtype == alloy.complex64
        got = np.asarray(y)
        assert got.dtype == np.complex64
        close(got, w, rtol)


def test_parts_abs_and_numpy_round_trip():
    z = crand((5, 6), 100.0)
    a = arr(z)
    assert a.dtype == alloy.complex64
    np.testing.assert_array_equal(np.asarray(a), z)  # numpy complex64 in and out
    for name, want in (("real", z.real), ("imag", z.imag), ("abs", np.abs(z.astype(np.complex128)))):
        y = getattr(alloy, name)(a)
        assert y.dtype == alloy.float32
        np.testing.assert_allclose(np.asarray(y), want, rtol=2e-7)
    np.testing.assert_array_equal(np.asarray(a.real), z.real)
    np.testing.assert_array_equal(np.asarray(a.imag), z.imag)
    np.testing.assert_array_equal(np.asarray(alloy.conj(a)), np.conj(z))
    # Python complex scalars and weak real scalars.
    assert (arr(np.float32([1, 2])) + 1j).dtype == alloy.complex64
    assert (a * 2.5).dtype == alloy.complex64
    assert (a * 2).dtype == alloy.complex64
    close(np.asarray(arr(np.float32([1, 2])) * 1j), np.array([1j, 2j]), 0)
    assert alloy.array(1 + 2j).item() == 1 + 2j


@pytest.mark.parametrize("other", [np.int32, np.uint8, np.float16, np.float32, np.float64, np.bool_])
def test_binary_complex_promotion(other):
    z = crand((4, 9))
    r = (RNG.uniform(-3, 3, (9,)) if other is not np.bool_ else RNG.uniform(size=9) > 0.5)
    r = r.astype(other)
    # float64 becomes complex64 (MLX): the reference sees the rounded values
    ref_z, ref_r = z.astype(np.complex128), r.astype(np.complex64).astype(np.complex128)
    for name, f, rtol in (("add", np.add, 1e-7), ("subtract", np.subtract, 1e-6),
                          ("multiply", np.multiply, 2e-6)):
        y = getattr(alloy, name)(arr(z), arr(r))
        assert y.dtype == alloy.complex64, (name, other)
        close(np.asarray(y), f(ref_z, ref_r), rtol)
    y = alloy.divide(arr(r), arr(z))
    assert y.dtype == alloy.complex64
    close(np.asarray(y), ref_r / ref_z, 4e-6)


def test_complex_reductions_match_numpy():
    z = crand((6, 50, 4), 1.0)
    ref = z.astype(np.complex128)
    a = arr(z)
    for axis in (0, 1, 2, (0, 1), None):
        close(np.asarray(alloy.sum(a, axis=axis)), ref.sum(axis=axis), 2e-6)
        close(np.asarray(alloy.mean(a, axis=axis)), ref.mean(axis=axis), 2e-6)
    v = alloy.var(a, axis=1)
    assert v.dtype == alloy.float32
    np.testing.assert_allclose(np.asarray(v), ref.var(axis=1), rtol=1e-5)
    p = 1 + ref / 8
    close(np.asarray(alloy.prod(arr(p.astype(np.complex64)), axis=1)), p.prod(axis=1), 2e-5)
    # Lexicographic order: numpy's complex order too.
    np.testing.assert_array_equal(np.asarray(alloy.max(a, axis=1)), z.max(axis=1))
    np.testing.assert_array_equal(np.asarray(alloy.min(a, axis=0)), z.min(axis=0))
    np.testing.assert_array_equal(np.asarray(alloy.argmax(a, axis=1)), z.argmax(axis=1))
    np.testing.assert_array_equal(np.asarray(alloy.argmin(a, axis=2)), z.argmin(axis=2))
    w = np.array([0, 1j, 2, 0], np.complex64)
    assert not alloy.all(arr(w)).item() and alloy.any(arr(w)).item()
    np.testing.assert_array_equal(np.asarray(alloy.logical_not(arr(w))), np.logical_not(w))


def test_complex_rejections_are_value_errors():
    a = arr(crand((3,)))
    for name in ("erf", "erfinv", "sigmoid", "expm1", "floor", "ceil"):
        with pytest.raises(ValueError):
            getattr(alloy, name)(a)
    for name in ("remainder", "arctan2", "bitwise_and", "logaddexp"):
        with pytest.raises(ValueError):
            getattr(alloy, name)(a, a)


@needs_mlx
def test_complex_sample_matches_mlx():
    z = crand((5, 8))
    w = crand((5, 8))
    r = RNG.uniform(-2, 2, (8,)).astype(np.float32)
    for name in ("abs", "exp", "log", "sqrt", "sin", "tanh", "arctan", "sign", "square"):
        got = np.asarray(getattr(alloy, name)(arr(z)))
        want = np.array(getattr(mx, name)(mx.array(z)))
        assert got.dtype == want.dtype, name
        close(got, want.astype(np.complex128), 3e-5)
    for name in ("add", "multiply", "divide", "power", "maximum", "minimum", "less", "equal",
                 "floor_divide"):
        got = np.asarray(getattr(alloy, name)(arr(z), arr(w)))
        want = np.array(getattr(mx, name)(mx.array(z), mx.array(w)))
        assert got.dtype == want.dtype, name
        close(got, want.astype(np.complex128), 3e-5)
        got = np.asarray(getattr(alloy, name)(arr(r), arr(z)))
        want = np.array(getattr(mx, name)(mx.array(r), mx.array(z)))
        assert got.dtype == want.dtype, name
        close(got, want.astype(np.complex128), 3e-5)
    for name in ("sum", "prod", "max", "min", "mean", "var"):
        got = np.asarray(getattr(alloy, name)(arr(z), axis=1))
        want = np.array(getattr(mx, name)(mx.array(z), axis=1))
        assert got.dtype == want.dtype, name
        close(got, want.astype(np.complex128), 3e-5)


# ---- boolean masks ----------------------------------------------------------------------------


def test_boolean_mask_read_raises_as_mlx():
    a = arr(RNG.uniform(size=(4, 3)).astype(np.float32))
    m = np.array([True, False, True, False])
    for key in (arr(m), m, [True, False, True, False], True, (arr(m), 0)):
        with pytest.raises(ValueError, match="boolean indices are not yet supported"):
            a[key]


MASK_CASES = [
    # (a shape, mask shape, value shape or None for a Python scalar)
    ((7,), (7,), None),
    ((7,), (7,), ()),
    ((7,), (7,), (7,)),  # k-th True gets value[k]
    ((7,), (7,), (12,)),  # more values than Trues: the first ones
    ((4, 5), (4, 5), (20,)),
    ((4, 5), (4,), (5,)),  # every selected row gets the same row
    ((4, 5), (4,), (1, 5)),
    ((4, 5), (4,), (4, 5)),  # selected rows in order
    ((4, 5), (4,), (4, 1)),
    ((3, 4, 2), (3, 4), (12, 2)),
    ((3, 4, 2), (3,), ()),
]


def numpy_masked_update(x, m, v):
    x = x.copy()
    k = m.ndim
    if np.ndim(v) <= x.ndim - k:
        x[m] = v
        return x
    n = int(m.sum())
    x[m] = np.broadcast_to(v, (v.shape[0],) + x.shape[k:])[:n]
    return x


@pytest.mark.parametrize("a_shape,m_shape,v_shape", MASK_CASES)
def test_boolean_mask_assignment(a_shape, m_shape, v_shape):
    x = RNG.uniform(-5, 5, a_shape).astype(np.float32)
    m = RNG.uniform(size=m_shape) > 0.4
    m.reshape(-1)[0] = True
    v = 2.5 if v_shape is None else RNG.uniform(10, 20, v_shape).astype(np.float32)
    want = numpy_masked_update(x, m, v)
    for key in (arr(m), m, m.tolist()):
        src = arr(x)
        a = src + 0  # a new node: src keeps its value (MLX's functional update)
        a[key] = arr(v) if v_shape is not None else v
        np.testing.assert_array_equal(np.asarray(a), want)
        np.testing.assert_array_equal(np.asarray(src), x)
    # Fewer value rows than Trues: MLX raises at evaluation, Alloy repeats the last row.
    short = v_shape is not None and len(v_shape) == len(a_shape) - m.ndim + 1 and (
        v_shape[0] < m.sum())
    if mx is not None and not short:
        b = mx.array(x)
        b[mx.array(m)] = mx.array(v) if v_shape is not None else v
        np.testing.assert_array_equal(np.asarray(a), np.array(b))


def test_boolean_mask_assignment_errors_and_dtypes():
    a = arr(np.arange(4, dtype=np.int32).reshape(2, 2))
    with pytest.raises(ValueError, match="same shape as the beginning"):
        a[arr(np.array([True, False, True]))] = 1
    with pytest.raises(ValueError, match="broadcastable"):
        a[arr(np.array([[True, False], [False, True]]))] = arr(np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match="broadcastable"):
        a[arr(np.array([True, True]))] = arr(np.arange(4, dtype=np.int32))
    with pytest.raises(ValueError):
        a[arr(np.array([True, False])), 0] = 1
    b = arr(np.array([1, 2, 3], np.int32))
    b[arr(np.array([True, False, True]))] = 2.7  # converted to b's dtype, as MLX
    assert b.dtype == alloy.int32
    np.testing.assert_array_equal(np.asarray(b), [2, 2, 2])
    c = arr(np.array([1.0, 2.0], np.float32))
    c[True] = 5.0
    np.testing.assert_array_equal(np.asarray(c), [5, 5])
    z = arr(crand((3,)))
    z[arr(np.array([False, True, False]))] = 1j
    assert np.asarray(z)[1] == 1j
