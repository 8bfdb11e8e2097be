"""alloy.array: construction, properties, reading, views, NumPy without copies."""

import gc
import weakref

import numpy as np
import pytest

import alloy

ALL_DTYPES = [
    (alloy.bool_, np.bool_), (alloy.int8, np.int8), (alloy.int16, np.int16),
    (alloy.int32, np.int32), (alloy.int64, np.int64), (alloy.uint8, np.uint8),
    (alloy.uint16, np.uint16), (alloy.uint32, np.uint32), (alloy.uint64, np.uint64),
    (alloy.float16, np.float16), (alloy.float32, np.float32), (alloy.float64, np.float64),
    (alloy.complex64, np.complex64),
]


def test_dtypes_look_like_mlx():
    assert repr(alloy.float32) == "alloy.float32"
    assert repr(alloy.bool_) == "alloy.bool_"
    assert str(alloy.bfloat16) == "bfloat16"
    assert alloy.float16.size == 2 and alloy.complex64.size == 8
    assert isinstance(alloy.int32, alloy.Dtype)
    assert alloy.float32 == alloy.Dtype.float32 and alloy.float32 != alloy.float16


def test_devices():
    assert alloy.Device(alloy.cpu) == alloy.cpu
    assert repr(alloy.Device(alloy.cpu)) == "Device(cpu, 0)"
    assert alloy.is_available(alloy.cpu)
    d = alloy.default_device()
    assert d == (alloy.gpu if alloy.is_available(alloy.gpu) else alloy.cpu)
    try:
        alloy.set_default_device(alloy.cpu)
        assert alloy.default_device() == alloy.cpu
        assert alloy.array([1.0]).device == alloy.cpu
    finally:
        alloy.set_default_device(d)
    assert alloy.default_stream(alloy.cpu).device == alloy.cpu


@pytest.mark.parametrize("value, dtype, shape", [
    (True, alloy.bool_, ()),
    (3, alloy.int32, ()),
    (2**40, alloy.int64, ()),
    (2.5, alloy.float32, ()),
    (1 + 2j, alloy.complex64, ()),
    ([1, 2, 3], alloy.int32, (3,)),
    ([[1.5, 2], [3, 4]], alloy.float32, (2, 2)),
    ([True, False], alloy.bool_, (2,)),
    ([], alloy.float32, (0,)),
])
def test_from_python_values(device, value, dtype, shape):
    a = alloy.array(value, device=device)
    assert a.dtype == dtype and a.shape == shape and a.device == device
    assert a.ndim == len(shape) and a.size == int(np.prod(shape))
    expect = np.asarray(value).tolist()
    assert a.tolist() == expect


@pytest.mark.parametrize("adt, ndt", ALL_DTYPES)
def test_from_numpy_keeps_dtype(device, rng, adt, ndt):
    x = (rng.uniform(-50, 50, size=(3, 5)) * (1 + 1j if ndt == np.complex64 else 1)).astype(ndt)
    a = alloy.array(x, device=device)
    assert a.dtype == adt and a.shape == (3, 5) and a.itemsize == x.itemsize
    assert a.nbytes == x.nbytes
    np.testing.assert_array_equal(np.asarray(a), x)
    assert a.tolist() == x.tolist()
    assert a[1, 2].item() == x[1, 2].item()


def test_conversions(device, rng):
    x = rng.uniform(-100, 100, size=(17,))
    a = alloy.array(x, dtype=alloy.float16, device=device)
    assert a.dtype == alloy.float16
    np.testing.assert_array_equal(np.asarray(a), x.astype(np.float16))
    b = alloy.array(x, dtype=alloy.int32, device=device)
    np.testing.assert_array_equal(np.asarray(b), x.astype(np.int32))
    np.testing.assert_array_equal(np.asarray(a.astype(alloy.float32)),
                                  x.astype(np.float16).astype(np.float32))
    assert alloy.array(x, dtype=np.float32).dtype == alloy.float32
    assert alloy.array(x, dtype="bfloat16").dtype == alloy.bfloat16


def test_bfloat16(device, rng):
    x = rng.uniform(-3, 3, size=(4, 4)).astype(np.float32)
    a = alloy.array(x, dtype=alloy.bfloat16, device=device)
    # Round-to-nearest-even to the top 16 bits of the float32 pattern.
    bits = x.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    np.testing.assert_array_equal(np.asarray(a.astype(alloy.float32)), rounded)
    assert "dtype=bfloat16" in repr(a)
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    n = np.asarray(a)
    assert n.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(n.astype(np.float32), rounded)
    back = alloy.array(n, device=device)  # NumPy bfloat16 in
    assert back.dtype == alloy.bfloat16
    np.testing.assert_array_equal(np.asarray(back.astype(alloy.float32)), rounded)


def test_repr_and_scalars():
    a = alloy.array([[1, 2], [3, 4]], device=alloy.cpu)
    assert repr(a) == "array([[1, 2],\n       [3, 4]], dtype=int32)"
    assert repr(alloy.array(1.5, device=alloy.cpu)) == "array(1.5, dtype=float32)"
    s = alloy.array(2.5)
    assert s.item() == 2.5 and float(s) == 2.5 and int(alloy.array(7)) == 7
    assert bool(alloy.array(True)) is True
    assert isinstance(alloy.array(True).item(), bool)
    assert isinstance(alloy.array(3).item(), int)
    with pytest.raises(ValueError):
        a.item()
    with pytest.raises(TypeError):
        len(s)
    assert len(a) == 2


def test_slicing_gives_strided_views(device, rng):
    x = rng.normal(size=(6, 8, 3)).astype(np.float32)
    a = alloy.array(x, device=device)
    keys = [
        (slice(None, None, 2),), (slice(1, None, 3), slice(None, None, -2)),
        (Ellipsis, 1), (2,), (-1, slice(None), slice(None, None, -1)), (None, 1, Ellipsis),
        (slice(10, 20),), (slice(None, None, -1), 0, None),
    ]
    for key in keys:
        v = a[key]
        assert v.shape == x[key].shape
        np.testing.assert_array_equal(np.asarray(v), x[key])
        assert v.tolist() == x[key].tolist()
    np.testing.assert_array_equal(np.asarray(a.T), x.T)
    np.testing.assert_array_equal(np.asarray(a[:, ::2].T[1]), x[:, ::2].T[1])
    with pytest.raises(IndexError):
        a[6]
    with pytest.raises(IndexError):
        a[0, 0, 0, 0]
    with pytest.raises(TypeError):
        a["0"]
    # Index arrays gather (numpy's advanced indexing; tests/test_ops_misc.py covers it).
    np.testing.assert_array_equal(np.asarray(a[[0, 1]]), x[[0, 1]])


def test_numpy_views_share_memory_without_copies(rng):
    x = rng.normal(size=(4, 6)).astype(np.float32)
    a = alloy.array(x, device=alloy.cpu)
    n1, n2 = np.asarray(a), np.asarray(a)
    assert np.shares_memory(n1, n2)
    assert not np.shares_memory(n1, x)  # alloy.array copies its input
    v = a[::2, ::-3]
    nv = np.asarray(v)
    assert np.shares_memory(nv, n1)
    assert nv.strides == (2 * 6 * 4, -3 * 4)
    m = memoryview(a)
    assert m.format == "f" and m.shape == (4, 6) and not m.readonly
    with pytest.raises(BufferError):
        memoryview(alloy.array(x, dtype=alloy.bfloat16, device=alloy.cpu))


def test_numpy_view_keeps_array_alive(rng):
    x = rng.normal(size=(1000,)).astype(np.float32)
    a = alloy.array(x, device=alloy.cpu)
    ref = weakref.ref(a)
    n = np.asarray(a)
    del a
    gc.collect()
    assert ref() is not None  # the view holds it
    np.testing.assert_array_equal(n, x)
    del n
    gc.collect()
    assert ref() is None


def test_numpy_copy_semantics(device, rng):
    x = rng.normal(size=(5,)).astype(np.float32)
    a = alloy.array(x, device=device)
    c = np.array(a, copy=True)
    if device == alloy.cpu:
        assert not np.shares_memory(c, np.asarray(a))
    np.testing.assert_array_equal(np.asarray(a, dtype=np.float64), x.astype(np.float64))
    if device == alloy.gpu:
        with pytest.raises(ValueError):
            np.asarray(a, copy=False)


def test_creation_functions(device):
    np.testing.assert_array_equal(np.asarray(alloy.zeros((2, 3), device=device)), np.zeros((2, 3)))
    f = alloy.full([4], 2.5, alloy.float16, device=device)
    assert f.dtype == alloy.float16 and f.tolist() == [2.5] * 4
    assert alloy.arange(5, device=device).tolist() == [0, 1, 2, 3, 4]


def test_eval_accepts_trees(device):
    a = alloy.array([1, 2], device=device)
    alloy.eval(a, [a, (a,)], {"k": a})
    a.eval()
    with pytest.raises(TypeError):
        alloy.eval(3)
