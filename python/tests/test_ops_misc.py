"""Scans, indexing (take, take_along_axis, put_along_axis, advanced a[idx]), MLX's functional
a[key] = value, split/eye/tri, alloy.random (bit for bit against MLX's CPU results where mlx is
installed) and MLX-style printing. References in numpy float64; inputs are random, CPU arrays
(GPU runs go through the device script)."""

import numpy as np
import pytest

import alloy

RNG = np.random.default_rng(7)

RTOL = {np.float16: 4e-3, np.float32: 2e-5, np.float64: 1e-12}


def arr(x):
    return alloy.array(np.asarray(x), device=alloy.cpu)


def rand(shape, dtype, lo=-3, hi=3):
    if np.issubdtype(dtype, np.integer):
        lo = max(lo, 0) if np.issubdtype(dtype, np.unsignedinteger) else lo
        return RNG.integers(lo, hi + 1, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def check(got, want, dtype, scale=4):
    rt = RTOL.get(dtype, 0) * scale
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), np.asarray(want, np.float64),
                               rtol=rt, atol=rt)


def np_scan(op, x, axis, reverse, inclusive):
    f = {"cumsum": np.cumsum, "cumprod": np.cumprod,
         "cummax": np.maximum.accumulate, "cummin": np.minimum.accumulate}[op]
    x = x.astype(np.float64)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if reverse:
        x = np.flip(x, axis)
    y = f(x, axis=axis)
    if not inclusive:
        ident = {"cumsum": 0.0, "cumprod": 1.0}[op]
        y = np.concatenate([np.full_like(np.take(y, [0], axis), ident),
                            np.take(y, range(y.shape[axis] - 1), axis)], axis)
    return np.flip(y, axis) if reverse else y


# Each (op, dtype, rank, axis, direction) is a kernel to build: every combination in float32,
# one per op in the other dtypes.
SCAN_COMBOS = [(None, False, True), (0, True, False), (-1, False, False), (1, True, True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int16,
                                   np.uint8])
@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax", "cummin"])
def test_scans_against_numpy(op, dtype):
    lo, hi = (0.5, 1.5) if op == "cumprod" else (-3, 3)
    if np.issubdtype(dtype, np.integer):
        lo, hi = (1, 2) if op == "cumprod" else (0, 9)
    x = rand((3, 4, 5), dtype, lo, hi)
    combos = SCAN_COMBOS if dtype == np.float32 else [(1, False, True)]
    views = [(x, arr(x)), (x.transpose(2, 0, 1), arr(x).transpose([2, 0, 1])),
             (x[:, ::2, ::-1], arr(x)[:, ::2, ::-1])]
    for view, a in views:
        for axis, reverse, inclusive in combos:
            if not inclusive and op in ("cummax", "cummin"):
                continue
            got = getattr(alloy, op)(a, axis, reverse=reverse, inclusive=inclusive)
            want = np_scan(op, view, axis, reverse, inclusive)
            assert got.dtype == a.dtype
            if dtype == np.float16:
                want = want.astype(np.float16)
            check(got, want, dtype)
    assert arr(x).cumsum(1).shape == x.shape


def test_scan_bool_empty_and_broadcast():
    b = arr(np.array([[True, False], [True, True]]))
    assert alloy.cumsum(b).dtype == alloy.int32
    assert alloy.cumsum(b).tolist() == [1, 1, 2, 3]
    assert alloy.cumsum(arr(np.zeros((0, 3), np.float32)), 0).shape == (0, 3)
    bc = alloy.broadcast_to(arr(np.array([1, 2, 3], np.int32)), (2, 3))
    assert alloy.cumsum(bc, 0).tolist() == [[1, 2, 3], [2, 4, 6]]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16, np.bool_])
def test_take_and_take_along_axis(dtype):
    x = rand((4, 6), np.float32) > 0 if dtype == np.bool_ else rand((4, 6), dtype)
    a = arr(x)
    for idt in ((np.int32, np.int64, np.uint32, np.int8) if dtype == np.float32 else (np.int64,)):
        idx = np.array([[1, 5, 0], [3, 3, 2]], idt)
        np.testing.assert_array_equal(np.asarray(alloy.take(a, arr(idx), 1)), np.take(x, idx, 1))
        np.testing.assert_array_equal(np.asarray(alloy.take(a, arr(idx))), np.take(x, idx))
    neg = np.array([-1, 0, -4])
    np.testing.assert_array_equal(np.asarray(alloy.take(a, arr(neg), 0)), np.take(x, neg, 0))
    np.testing.assert_array_equal(np.asarray(alloy.take(a.T, [2, 0], 1)), np.take(x.T, [2, 0], 1))
    ia = RNG.integers(0, 6, size=(4, 3))
    np.testing.assert_array_equal(np.asarray(alloy.take_along_axis(a, arr(ia), 1)),
                                  np.take_along_axis(x, ia, 1))
    ib = RNG.integers(0, 4, size=(1, 6))
    np.testing.assert_array_equal(np.asarray(alloy.take_along_axis(a, arr(ib), 0)),
                                  np.take_along_axis(x, ib, 0))
    vals = rand((4, 3), np.float32).astype(x.dtype)
    y = x.copy()
    ip = np.stack([RNG.permutation(6)[:3] for _ in range(4)])
    np.put_along_axis(y, ip, vals, 1)
    np.testing.assert_array_equal(np.asarray(alloy.put_along_axis(a, arr(ip), arr(vals), 1)), y)


def test_advanced_getitem_matches_numpy():
    x = rand((5, 6, 7), np.float32)
    a = arr(x)
    i = np.array([[0, 4], [2, -1]])
    j = np.array([1, 4])
    keys = [
        i, [0, 2], (i,), (slice(None), j), (i, j), (j, slice(1, 4), j),
        (Ellipsis, j), (1, j), (j, 2), (slice(None, None, -1), [3, 0], slice(None, None, 2)),
        (0, slice(None), [0, 1]), (None, j), (np.int64(2), [1, 1, 0]),
    ]
    for k in keys:
        np.testing.assert_array_equal(np.asarray(a[k]), x[k], err_msg=str(k))
    # An alloy index array (int32), alone and with a slice.
    np.testing.assert_array_equal(np.asarray(a[arr(j.astype(np.int32))]), x[j])
    np.testing.assert_array_equal(np.asarray(a[1:, arr(j.astype(np.int32))]), x[1:, j])
    np.testing.assert_array_equal(np.asarray(a[:, ::2][[1, 0]]), x[:, ::2][[1, 0]])
    with pytest.raises(ValueError, match="boolean indices are not yet supported"):  # as MLX
        a[x > 0]
    with pytest.raises(IndexError):
        a[np.array([1.5])]
    with pytest.raises(IndexError):
        a[5, [0]]


def test_setitem_is_a_functional_update():
    x = rand((4, 5), np.float32)
    cases = [
        (Ellipsis, 2.5), ((slice(1, 3), slice(None, None, 2)), rand((2, 3), np.float32)),
        (1, rand((5,), np.float32)), ((slice(None, None, -2), 0), 7.0),
        ([0, 2], rand((2, 5), np.float32)), ((slice(None), [4, 0, 4]), -1.0),
        (([1, 3], [0, 2]), np.array([8.0, 9.0], np.float32)), ((None, 2), 3.0),
        ((slice(3, 0, -1), slice(4, None, -3)), rand((3, 2), np.float32)),
    ]
    for key, value in cases:
        a = arr(x)
        old = a
        view = a[1:3]
        a[key] = arr(value) if isinstance(value, np.ndarray) else value
        y = x.copy()
        y[key] = value
        np.testing.assert_array_equal(np.asarray(a), y, err_msg=str(key))
        assert old is a  # the same Python object, rebound to the new value
        np.testing.assert_array_equal(np.asarray(view), x[1:3])  # views keep the old value
    # Weak scalars keep the dtype; values are converted to it.
    h = arr(np.zeros(3, np.float16))
    h[1] = 2
    assert h.dtype == alloy.float16 and h.tolist() == [0, 2, 0]
    n = arr(np.zeros(4, np.int32))
    n[[1, 3]] = arr(np.array([1.7, -2.2], np.float32))
    assert n.tolist() == [0, 1, 0, -2]


def test_at_add_counts_repeated_indices():
    """MLX's a.at[key].add(v) / .subtract(v): every repeated index counts (numpy's np.add.at);
    the original array is unchanged."""
    x = rand((5, 4), np.float32)
    cases = [
        ([0, 2, 0, 0], rand((4, 4), np.float32)),
        ((slice(None), [1, 1, 3]), rand((5, 3), np.float32)),
        (([4, 4, 0], [2, 2, 1]), np.array([1.0, 2.0, 3.0], np.float32)),
        ((slice(1, 4), 2), 0.5),
        (Ellipsis, 1.25),
    ]
    for key, value in cases:
        a = arr(x)
        v = arr(value) if isinstance(value, np.ndarray) else value
        got = a.at[key].add(v)
        want = x.copy()
        np.add.at(want, key, value)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, err_msg=str(key))
        got = a.at[key].subtract(v)
        want = x.copy()
        np.subtract.at(want, key, value)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, err_msg=str(key))
        np.testing.assert_array_equal(np.asarray(a), x)  # a itself is not changed
    with pytest.raises(Exception, match="not supported: a.at"):
        arr(x).at[[0, 0]].multiply(2.0)
    mx = pytest.importorskip("mlx.core")
    m = mx.array(x).at[mx.array([0, 2, 0])].add(mx.array(np.ones((3, 4), np.float32)))
    g = arr(x).at[[0, 2, 0]].add(arr(np.ones((3, 4), np.float32)))
    np.testing.assert_allclose(np.asarray(g), np.array(m), rtol=1e-6)


def test_split_eye_tri():
    x = rand((4, 6), np.float32)
    a = arr(x)
    for got, want in zip(alloy.split(a, 3, 1), np.split(x, 3, 1)):
        np.testing.assert_array_equal(np.asarray(got), want)
    for got, want in zip(alloy.split(a, [1, 3]), np.split(x, [1, 3])):
        np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(alloy.eye(3, 4, 1)), np.eye(3, 4, 1))
    np.testing.assert_array_equal(np.asarray(alloy.identity(3, alloy.int32)), np.identity(3))
    np.testing.assert_array_equal(np.asarray(alloy.tri(3, 5, -1)), np.tri(3, 5, -1))
    np.testing.assert_array_equal(np.asarray(alloy.tril(a, 1)), np.tril(x, 1))
    np.testing.assert_array_equal(np.asarray(alloy.triu(a, -1)), np.triu(x, -1))


def test_repr_is_mlx_style():
    assert repr(arr(np.array([1, 2, 3], np.int32))) == "array([1, 2, 3], dtype=int32)"
    assert repr(arr(np.array([True, False]))) == "array([True, False], dtype=bool)"
    assert repr(arr(np.array([1.5, 2.0, 3.25], np.float32))) == \
        "array([1.5, 2, 3.25], dtype=float32)"
    big = arr(np.arange(3000, dtype=np.int32))
    assert repr(big) == "array([0, 1, 2, ..., 2997, 2998, 2999], dtype=int32)"
    assert str(arr(np.float32(3.0))) == "array(3, dtype=float32)"


mx = None
try:
    import mlx.core as mx  # noqa: F811
except ImportError:  # pragma: no cover
    pass

needs_mlx = pytest.mark.skipif(mx is None, reason="mlx is not installed (pip install mlx[cpu])")


@needs_mlx
def test_random_matches_mlx_bit_for_bit():
    for seed in (0, 7, 2**40 + 3):
        k, mk = alloy.random.key(seed), mx.random.key(seed)
        np.testing.assert_array_equal(np.asarray(k), np.array(mk))
        for num in (1, 2, 3, 8):
            np.testing.assert_array_equal(np.asarray(alloy.random.split(k, num)),
                                          np.array(mx.random.split(mk, num)))
        for shape in ((), (1,), (5,), (3, 7), (64,)):
            np.testing.assert_array_equal(
                np.asarray(alloy.random.uniform(shape=shape, key=k)),
                np.array(mx.random.uniform(shape=shape, key=mk)))
            np.testing.assert_array_equal(
                np.asarray(alloy.random.uniform(-2.0, 5.0, shape, key=k)),
                np.array(mx.random.uniform(-2.0, 5.0, shape, key=mk)))
            np.testing.assert_array_equal(
                np.asarray(alloy.random.bernoulli(0.3, shape, key=k)),
                np.array(mx.random.bernoulli(0.3, shape, key=mk)))
            np.testing.assert_array_equal(
                np.asarray(alloy.random.randint(-5, 17, shape, key=k)),
                np.array(mx.random.randint(-5, 17, shape, key=mk)))
            np.testing.assert_allclose(
                np.asarray(alloy.random.normal(shape, key=k)),
                np.array(mx.random.normal(shape, key=mk)), rtol=1e-4, atol=2e-6)
        np.testing.assert_array_equal(
            np.asarray(alloy.random.uniform(shape=(9,), dtype=alloy.float16, key=k)),
            np.array(mx.random.uniform(shape=(9,), dtype=mx.float16, key=mk)))


@needs_mlx
def test_sample_of_new_ops_matches_mlx():
    x = rand((4, 6), np.float32)
    a, m = arr(x), mx.array(x)
    idx = np.array([[3, 0], [5, -1]], np.int32)
    pairs = [
        (alloy.cumsum(a, 1, reverse=True, inclusive=False),
         mx.cumsum(m, 1, reverse=True, inclusive=False)),
        (alloy.cumprod(a, 0), mx.cumprod(m, 0)),
        (alloy.cummax(a), mx.cummax(m)),
        (alloy.take(a, arr(idx), 1), mx.take(m, mx.array(idx), 1)),
        (alloy.take_along_axis(a, arr(np.abs(idx[:1])), 1),
         mx.take_along_axis(m, mx.array(np.abs(idx[:1])), 1)),
        (a[[2, 0]], m[mx.array([2, 0])]),
        (alloy.tril(a, 1), mx.tril(m, 1)),
    ]
    for got, want in pairs:
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_allclose(np.asarray(got), np.array(want), rtol=1e-6, atol=1e-6)
    b = arr(x)
    mb = mx.array(x)
    b[1:3, ::2] = 0.5
    mb[1:3, ::2] = 0.5
    np.testing.assert_array_equal(np.asarray(b), np.array(mb))
    assert repr(arr(np.arange(24, dtype=np.int32).reshape(2, 3, 4))) == \
        repr(mx.arange(24).reshape(2, 3, 4))
    v = np.array([1 / 3, 1e-8, 1e10, np.nan, np.inf, -2.5], np.float32)
    assert repr(arr(v)) == repr(mx.array(v))
