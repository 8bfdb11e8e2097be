"""DLPack round trips without copies: NumPy, PyTorch (CPU and CUDA), CuPy."""

import gc

import numpy as np
import pytest

import alloy


def _ptr_np(x):
    return x.__array_interface__["data"][0]


# ---- NumPy ----------------------------------------------------------------------------------


def test_numpy_into_alloy_shares_memory(rng):
    x = rng.normal(size=(3, 4)).astype(np.float32)
    a = alloy.from_dlpack(x)
    assert a.device == alloy.cpu and a.dtype == alloy.float32 and a.shape == (3, 4)
    assert _ptr_np(np.asarray(a)) == _ptr_np(x)
    x[1, 2] = 123.0  # the same memory
    assert a[1, 2].item() == 123.0


def test_numpy_strided_import(rng):
    x = rng.normal(size=(5, 6)).astype(np.float32)
    for view in (x[::2, ::-1], x.T, x[1:, 3], x[::-1, ::-2].T):
        a = alloy.from_dlpack(view)
        assert a.shape == view.shape
        assert a.tolist() == view.tolist()
        np.testing.assert_array_equal(np.asarray(a), view)


def test_numpy_import_keeps_producer_alive(rng):
    x = rng.normal(size=(256,)).astype(np.float64)
    expect = x.copy()
    a = alloy.from_dlpack(x)
    del x
    gc.collect()
    np.testing.assert_array_equal(np.asarray(a), expect)


def test_numpy_readonly_and_all_dtypes(rng):
    for dt in (np.bool_, np.int8, np.uint16, np.int32, np.int64, np.uint64, np.float16,
               np.float32, np.float64, np.complex64):
        x = (rng.uniform(0, 100, size=(7,))).astype(dt)
        x.flags.writeable = False
        a = alloy.from_dlpack(x)
        assert np.dtype(str(a.dtype)) == x.dtype
        np.testing.assert_array_equal(np.asarray(a), x)


def test_alloy_into_numpy_shares_memory(rng):
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    a = alloy.array(x, device=alloy.cpu)
    assert a.__dlpack_device__() == (1, 0)
    n = np.from_dlpack(a)
    assert np.shares_memory(n, np.asarray(a))
    np.testing.assert_array_equal(n, x)
    v = np.from_dlpack(a[:, ::-1, 1::2])
    np.testing.assert_array_equal(v, x[:, ::-1, 1::2])
    del a
    gc.collect()
    np.testing.assert_array_equal(n, x)  # the capsule's consumer keeps the memory alive


def test_from_dlpack_copy_and_device():
    x = np.arange(6, dtype=np.int32)
    c = alloy.from_dlpack(x, copy=True)
    x[0] = 99
    assert c[0].item() == 0
    if alloy.is_available(alloy.gpu):
        g = alloy.from_dlpack(x, device=alloy.gpu)
        assert g.device == alloy.gpu and g.tolist() == x.tolist()
        with pytest.raises(ValueError):
            alloy.from_dlpack(x, device=alloy.gpu, copy=False)


def test_kernel_outputs_evaluate_on_export():
    k = alloy.metal_kernel(name="iota", input_names=["a"], output_names=["out"], source="""
        uint elem = thread_position_in_grid.x;
        out[elem] = elem + a[0];
    """)
    out = k(inputs=[np.array([10], np.int32)], grid=(8, 1, 1), threadgroup=(8, 1, 1),
            output_shapes=[(8,)], output_dtypes=[alloy.int32], stream=alloy.cpu)[0]
    np.testing.assert_array_equal(np.from_dlpack(out), np.arange(10, 18))


# ---- PyTorch --------------------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def test_torch_cpu_round_trip(rng):
    torch = _torch()
    t = torch.from_numpy(rng.normal(size=(4, 5)).astype(np.float32))
    a = alloy.from_dlpack(t)
    assert a.device == alloy.cpu and a.shape == (4, 5)
    t[0, 0] = 42.0
    assert a[0, 0].item() == 42.0
    back = torch.from_dlpack(a)
    assert back.data_ptr() == t.data_ptr()
    tb = torch.randn(3, 3).to(torch.bfloat16)
    ab = alloy.from_dlpack(tb)
    assert ab.dtype == alloy.bfloat16
    np.testing.assert_array_equal(np.asarray(ab.astype(alloy.float32)), tb.float().numpy())
    assert torch.equal(torch.from_dlpack(ab), tb)


def _cuda_or_skip():
    if not alloy.is_available(alloy.gpu):
        pytest.skip("no CUDA GPU: " + (alloy.cuda.unavailable_reason() or "not available"))


def test_torch_cuda_round_trip(rng):
    _cuda_or_skip()
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    t = torch.randn(64, 33, device="cuda")
    a = alloy.from_dlpack(t)
    assert a.device == alloy.gpu and a.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(np.asarray(a), t.cpu().numpy())
    v = alloy.from_dlpack(t[1::2, ::3])  # strided CUDA view
    np.testing.assert_array_equal(np.asarray(v), t[1::2, ::3].cpu().numpy())
    back = torch.from_dlpack(a)
    assert back.device.type == "cuda" and back.data_ptr() == t.data_ptr()
    g = alloy.array(rng.normal(size=(8,)).astype(np.float32), device=alloy.gpu)
    tg = torch.from_dlpack(g)
    assert tg.device.type == "cuda"
    np.testing.assert_array_equal(tg.cpu().numpy(), np.asarray(g))


def test_torch_cuda_kernel_sees_pending_torch_work():
    """Work torch enqueued on its stream is ordered before the Alloy kernel that reads it."""
    _cuda_or_skip()
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    k = alloy.metal_kernel(name="plus_one", input_names=["a"], output_names=["out"], source="""
        uint elem = thread_position_in_grid.x;
        out[elem] = a[elem] + 1.0f;
    """)
    n = 1 << 22
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = torch.zeros(n, device="cuda")
        for _ in range(20):  # keep the torch stream busy
            t.add_(1.0)
        out = k(inputs=[t], grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)],
                output_dtypes=[alloy.float32], stream=alloy.gpu)[0]
        o = torch.from_dlpack(out)
        assert torch.all(o == 21.0).item()


def test_cupy_round_trip(rng):
    _cuda_or_skip()
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    x = cupy.asarray(rng.normal(size=(10, 3)).astype(np.float32))
    a = alloy.from_dlpack(x)
    assert a.device == alloy.gpu
    np.testing.assert_array_equal(np.asarray(a), cupy.asnumpy(x))
    back = cupy.from_dlpack(a)
    assert back.data.ptr == x.data.ptr


def test_import_calls_the_producers_dlpack_once():
    # A producer's __dlpack__ may be costly (PyTorch's is Python): a successful import calls it
    # once; the probe that keeps a failing producer's own exception runs only on failure.
    class Producer:
        def __init__(self, a):
            self.a, self.calls = a, 0

        def __dlpack__(self, **kwargs):
            self.calls += 1
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    values = np.random.default_rng(3).uniform(-1, 1, 7).astype(np.float32)
    p = Producer(values)
    x = alloy.from_dlpack(p)
    assert p.calls == 1
    np.testing.assert_array_equal(np.asarray(x), values)
