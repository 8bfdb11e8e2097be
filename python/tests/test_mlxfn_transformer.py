"""alloy.fast (rms_norm, layer_norm, rope, scaled_dot_product_attention) against MLX's own
mx.fast functions, and transformer blocks in MLX's .mlxfn format imported by Alloy:

- as mlx[cpu] records them (the fast ops' fallback compositions: Gather, Softmax, Arange, ...),
  exported by mlx 0.32.4 at test time;
- as MLX on Metal records them (the fast primitives RMSNorm, LayerNorm, RoPE,
  ScaledDotProductAttention with their state): no Mac here, so those rows are written with a
  writer of MLX's layout (MLX 0.32's mlx/export.cpp: name, then the state() fields, the fallback
  slot serializing nothing) and the results compared with MLX's functions on the same inputs.
"""
import struct

import numpy as np
import pytest

import alloy

mx = pytest.importorskip("mlx.core")

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def tol(dtype):
    return {np.float32: dict(rtol=2e-5, atol=2e-5), np.float16: dict(rtol=2e-3, atol=2e-3)}[dtype]


# ---- alloy.fast against mx.fast --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_matches_mlx(dtype, weighted):
    x, w = rand(3, 5, 24, dtype=dtype), rand(24, dtype=dtype)
    want = np.array(mx.fast.rms_norm(mx.array(x), mx.array(w) if weighted else None, 1e-5))
    got = alloy.fast.rms_norm(alloy.array(x), alloy.array(w) if weighted else None, 1e-5)
    assert np.asarray(got).dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want.astype(np.float64),
                               **tol(dtype))
    # float64 reference
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * (w if weighted else 1.0)
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), ref,
                               rtol=5e-3 if dtype == np.float16 else 1e-5, atol=5e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)])
def test_layer_norm_matches_mlx(dtype, affine):
    x, w, b = rand(4, 33, dtype=dtype, scale=3.0), rand(33, dtype=dtype), rand(33, dtype=dtype)
    mw = mx.array(w) if affine[0] else None
    mb = mx.array(b) if affine[1] else None
    want = np.array(mx.fast.layer_norm(mx.array(x) + 2.0, mw, mb, 1e-4))
    got = alloy.fast.layer_norm(alloy.array(x) + 2.0, alloy.array(w) if affine[0] else None,
                                alloy.array(b) if affine[1] else None, 1e-4)
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want.astype(np.float64),
                               **tol(dtype))


@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("dims", [16, 10])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rope_matches_mlx(traditional, dims, dtype):
    x = rand(2, 3, 7, 16, dtype=dtype)
    for offset in (0, 5):
        want = np.array(mx.fast.rope(mx.array(x), dims, traditional=traditional, base=10000.0,
                                     scale=0.5, offset=offset))
        got = alloy.fast.rope(alloy.array(x), dims, traditional=traditional, base=10000.0,
                              scale=0.5, offset=offset)
        np.testing.assert_allclose(np.asarray(got).astype(np.float64), want.astype(np.float64),
                                   rtol=2e-3 if dtype == np.float16 else 2e-5,
                                   atol=2e-3 if dtype == np.float16 else 2e-5)
    # 3-d input, one offset per batch entry, explicit frequencies
    x3 = rand(2, 6, 16, dtype=dtype)
    off = np.array([3, 11], dtype=np.int32)
    freqs = np.abs(rand(dims // 2)) + 0.5
    want = np.array(mx.fast.rope(mx.array(x3), dims, traditional=traditional, base=None,
                                 scale=1.0, offset=mx.array(off), freqs=mx.array(freqs)))
    got = alloy.fast.rope(alloy.array(x3), dims, traditional=traditional, base=None, scale=1.0,
                          offset=alloy.array(off), freqs=alloy.array(freqs))
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want.astype(np.float64),
                               rtol=2e-3 if dtype == np.float16 else 2e-5,
                               atol=2e-3 if dtype == np.float16 else 2e-5)


def sdpa_cases():
    # (Hq, Hkv, Lq, Lk, D, Dv, mask)
    return [(4, 4, 5, 5, 8, 8, None), (4, 2, 3, 7, 16, 12, "causal"), (2, 1, 6, 6, 8, 8, "bool"),
            (2, 2, 4, 9, 8, 8, "additive"), (6, 3, 1, 10, 32, 32, None)]


@pytest.mark.parametrize("case", sdpa_cases())
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_sdpa_matches_mlx(case, dtype):
    hq, hk, lq, lk, d, dv, mask = case
    q, k, v = rand(2, hq, lq, d, dtype=dtype), rand(2, hk, lk, d, dtype=dtype), \
        rand(2, hk, lk, dv, dtype=dtype)
    scale = d ** -0.5
    mmask = amask = mask
    if mask == "bool":
        m = RNG.random((lq, lk)) > 0.3
        m[:, 0] = True
        mmask, amask = mx.array(m), alloy.array(m)
    elif mask == "additive":
        m = rand(2, 1, lq, lk, dtype=dtype)
        mmask, amask = mx.array(m), alloy.array(m)
    want = np.array(mx.fast.scaled_dot_product_attention(
        mx.array(q), mx.array(k), mx.array(v), scale=scale, mask=mmask))
    got = alloy.fast.scaled_dot_product_attention(
        alloy.array(q), alloy.array(k), alloy.array(v), scale=scale, mask=amask)
    assert np.asarray(got).shape == want.shape
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want.astype(np.float64),
                               rtol=5e-3 if dtype == np.float16 else 2e-5,
                               atol=5e-3 if dtype == np.float16 else 2e-5)


def test_sdpa_sinks_matches_mlx():
    q, k, v = rand(1, 4, 3, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8)
    sinks = rand(4)
    want = np.array(mx.fast.scaled_dot_product_attention(
        mx.array(q), mx.array(k), mx.array(v), scale=0.3, mask="causal", sinks=mx.array(sinks)))
    got = alloy.fast.scaled_dot_product_attention(
        alloy.array(q), alloy.array(k), alloy.array(v), scale=0.3, mask="causal",
        sinks=alloy.array(sinks))
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)


def test_fast_bad_arguments():
    x = alloy.array(rand(2, 3, 8))
    with pytest.raises(ValueError):
        alloy.fast.rms_norm(x, alloy.array(rand(7)), 1e-5)
    with pytest.raises(ValueError):
        alloy.fast.rope(x, 7, traditional=False, base=10000.0, scale=1.0, offset=0)
    with pytest.raises(ValueError):
        alloy.fast.rope(alloy.array(rand(3, 8)), 8, traditional=False, base=10000.0, scale=1.0,
                        offset=0)
    with pytest.raises(ValueError):
        alloy.fast.scaled_dot_product_attention(x, x, x, scale=1.0)
    q = alloy.array(rand(1, 3, 2, 8))
    with pytest.raises(ValueError):  # 3 heads are not a multiple of 2
        alloy.fast.scaled_dot_product_attention(q, alloy.array(rand(1, 2, 2, 8)),
                                                alloy.array(rand(1, 2, 2, 8)), scale=1.0)


# ---- gradients against mx.grad ---------------------------------------------------------------


def test_fast_grads_match_mlx():
    x, w, b = rand(3, 16), rand(16), rand(16)
    q, k, v = rand(1, 4, 5, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8)
    cot = rand(3, 16)
    cases = [
        (lambda F, x, w: (F.rms_norm(x, w, 1e-5) * cot_of(F, cot)).sum(), [x, w]),
        (lambda F, x, w, b: (F.layer_norm(x, w, b, 1e-5) * cot_of(F, cot)).sum(), [x, w, b]),
        (lambda F, q: (F.rope(q, 8, traditional=False, base=100.0, scale=1.0, offset=2)
                       * q).sum(), [q]),
        (lambda F, q, k, v: (F.scaled_dot_product_attention(q, k, v, scale=0.4, mask="causal")
                             ** 2).sum(), [q, k, v]),
    ]
    for fn, args in cases:
        n = len(args)
        want = mx.grad(lambda *a: fn(mx.fast, *a), argnums=list(range(n)))(
            *[mx.array(a) for a in args])
        got = alloy.grad(lambda *a: fn(alloy.fast, *a), argnums=list(range(n)))(
            *[alloy.array(a) for a in args])
        want = list(want) if isinstance(want, (list, tuple)) else [want]
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        assert len(want) == len(got) == n
        for gw, gg in zip(want, got):
            np.testing.assert_allclose(np.asarray(gg), np.array(gw), rtol=1e-4, atol=1e-4)


def cot_of(F, c):
    return mx.array(c) if F is mx.fast else alloy.array(c)


# ---- .mlxfn files exported by mlx[cpu] --------------------------------------------------------

D, H, L, V, FF = 16, 2, 5, 11, 32
HD = D // H


def block(m, tokens, emb, wq, wk, wv, wo, n1, n2, w1, w3, w2):
    """A transformer block written against module m (mx or alloy): embedding, RMSNorm,
    attention with RoPE and causal SDPA, SwiGLU MLP."""
    F = m.fast
    x = m.expand_dims(m.take(emb, tokens, axis=0), 0)
    h = F.rms_norm(x, n1, 1e-5)

    def heads(t):
        return m.transpose(m.reshape(t, (1, L, H, HD)), (0, 2, 1, 3))

    q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
    q = F.rope(q, HD, traditional=False, base=10000.0, scale=1.0, offset=0)
    k = F.rope(k, HD, traditional=False, base=10000.0, scale=1.0, offset=0)
    a = F.scaled_dot_product_attention(q, k, v, scale=HD ** -0.5, mask="causal")
    x = x + m.reshape(m.transpose(a, (0, 2, 1, 3)), (1, L, D)) @ wo
    h = F.rms_norm(x, n2, 1e-5)
    g = h @ w1
    x = x + ((g * m.sigmoid(g)) * (h @ w3)) @ w2
    return m.softmax(x, axis=-1) * 3.0 + x


def block_args():
    shapes = [(V, D), (D, D), (D, D), (D, D), (D, D), (D,), (D,), (D, FF), (D, FF), (FF, D)]
    toks = RNG.integers(0, V, L).astype(np.int32)
    return [toks] + [rand(*s, scale=0.3) for s in shapes]


def test_mlxfn_transformer_block_from_mlx_cpu(tmp_path):
    path = str(tmp_path / "block.mlxfn")
    args = block_args()
    mx.export_function(path, lambda *a: block(mx, *a), *[mx.array(a) for a in args])
    g = alloy.import_function(path)
    args2 = block_args()  # new values
    want = np.array(block(mx, *[mx.array(a) for a in args2]))
    (got,) = g(*[alloy.array(a) for a in args2])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    # Alloy's own forward of the same block agrees too
    mine = block(alloy, *[alloy.array(a) for a in args2])
    np.testing.assert_allclose(np.asarray(mine), want, rtol=1e-4, atol=1e-5)


def attention_variant(m, x, w, b, wq, wkv, mask, sinks, off):
    """LayerNorm, traditional RoPE with per-batch offsets, grouped-query attention with a bool
    mask and sinks (mlx[cpu] records Unflatten / ExpandDims / Flatten / Select / Concatenate)."""
    F = m.fast
    h = F.layer_norm(x, w, b, 1e-5)                       # (2, 6, 16)
    q = m.transpose(m.reshape(h @ wq, (2, 6, 4, 4)), (0, 2, 1, 3))
    kv = m.transpose(m.reshape(h @ wkv, (2, 6, 2, 4)), (0, 2, 1, 3))
    q = F.rope(q, 4, traditional=True, base=500.0, scale=1.0, offset=off)
    k = F.rope(kv, 4, traditional=True, base=500.0, scale=1.0, offset=off)
    return F.scaled_dot_product_attention(q, k, kv, scale=0.5, mask=mask, sinks=sinks)


def test_mlxfn_gqa_layer_norm_from_mlx_cpu(tmp_path):
    def args():
        mask = RNG.random((6, 6)) > 0.4
        mask[:, 0] = True
        return [rand(2, 6, 16), rand(16), rand(16), rand(16, 16, scale=0.3),
                rand(16, 8, scale=0.3), mask, rand(4), np.array([2, 7], dtype=np.int32)]

    path = str(tmp_path / "gqa.mlxfn")
    mx.export_function(path, lambda *a: attention_variant(mx, *a), *[mx.array(a) for a in args()])
    g = alloy.import_function(path)
    a2 = args()
    want = np.array(attention_variant(mx, *[mx.array(a) for a in a2]))
    (got,) = g(*[alloy.array(a) for a in a2])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    mine = attention_variant(alloy, *[alloy.array(a) for a in a2])
    np.testing.assert_allclose(np.asarray(mine), want, rtol=1e-4, atol=1e-5)


def test_mlxfn_gather_scatter_from_mlx_cpu(tmp_path):
    a, upd = rand(9, 4), rand(3, 4)
    idx = np.array([1, 7, -2], dtype=np.int32)

    def f(a, i, u):
        s = a.at[i].add(u)                     # Scatter (Sum)
        t = mx.put_along_axis(s, mx.zeros((1, 4), dtype=mx.int32), u[:1], axis=0)  # ScatterAxis
        r = mx.take(t, i, axis=0)             # Gather
        c = mx.take_along_axis(t, mx.ones((2, 4), dtype=mx.int32), axis=0)  # GatherAxis
        z = mx.arange(4, dtype=mx.float32) * 0.5  # Arange
        return r + z, c, mx.softmax(t, axis=-1, precise=True)

    path = str(tmp_path / "gs.mlxfn")
    mx.export_function(path, f, mx.array(a), mx.array(idx), mx.array(upd))
    g = alloy.import_function(path)
    a2, upd2 = rand(9, 4), rand(3, 4)
    want = f(mx.array(a2), mx.array(idx), mx.array(upd2))
    got = g(alloy.array(a2), alloy.array(idx), alloy.array(upd2))
    for gv, wv in zip(got, want):
        np.testing.assert_allclose(np.asarray(gv), np.array(wv), rtol=2e-5, atol=1e-6)


# ---- .mlxfn rows of the fast primitives (as MLX on Metal writes them) --------------------------

MLX_DTYPES = {np.dtype(np.bool_): 0, np.dtype(np.int32): 7, np.dtype(np.float16): 9,
              np.dtype(np.float32): 10}


class MlxWriter:
    """Writes MLX 0.32's export stream (little-endian; mlx/export.cpp's serialize())."""

    def __init__(self):
        self.b = bytearray()

    def u64(self, v):
        self.b += struct.pack("<Q", v)
        return self

    def i32(self, v):
        self.b += struct.pack("<i", v)
        return self

    def f32(self, v):
        self.b += struct.pack("<f", v)
        return self

    def boolean(self, v):
        self.b += bytes([1 if v else 0])
        return self

    def string(self, s):
        self.u64(len(s))
        self.b += s.encode()
        return self

    def shape(self, s):
        self.u64(len(s))
        for d in s:
            self.i32(d)
        return self

    def dtype(self, dt):
        dt = np.dtype(dt)
        return self.i32(MLX_DTYPES[dt]).b.append(dt.itemsize) or self

    def ids(self, v):
        self.u64(len(v))
        for i in v:
            self.u64(i)
        return self


def write_mlxfn(path, inputs, entries, outputs):
    """inputs: [(id, shape, dtype)]; entries: tape entries after the inputs, each
    ("op", id, input ids, name, state writer, shape, dtype) or ("const", id, ndarray);
    outputs: ids. Primitives are recorded on the GPU stream, as on a Mac."""
    w = MlxWriter()
    w.string("0.32.4").i32(1).boolean(False).string("")
    w.u64(0)  # keyword names
    w.ids([i for i, _, _ in inputs])
    w.u64(len(inputs))
    for _, s, d in inputs:
        w.shape(s).dtype(d)
    w.ids(outputs)
    w.u64(len(inputs) + len(entries))
    for i, _, _ in inputs:
        w.u64(i).boolean(False).boolean(False)
    for e in entries:
        if e[0] == "const":
            _, i, arr = e
            w.u64(i).boolean(False).boolean(True).shape(arr.shape).dtype(arr.dtype)
            w.b += arr.tobytes()
            continue
        _, i, ins, name, state, s, d = e
        w.u64(i).boolean(True).ids(ins)
        w.i32(1).i32(1).i32(0)  # stream 1 on gpu 0
        w.string(name)
        state(w)
        w.u64(0).shape(s).dtype(d)
    with open(path, "wb") as f:
        f.write(bytes(w.b))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_mlxfn_fast_rows_match_mlx(tmp_path, dtype):
    x, w, b = rand(2, 3, 16, dtype=dtype), rand(16, dtype=dtype), rand(16, dtype=dtype)
    q, k, v = rand(1, 4, 6, 8, dtype=dtype), rand(1, 2, 6, 8, dtype=dtype), \
        rand(1, 2, 6, 8, dtype=dtype)
    xr = rand(1, 2, 6, 16, dtype=dtype)
    path = str(tmp_path / "fast.mlxfn")
    S = {"x": (1, x.shape), "w": (2, w.shape), "b": (3, b.shape), "q": (4, q.shape),
         "k": (5, k.shape), "v": (6, v.shape), "xr": (7, xr.shape)}
    inputs = [(i, s, dtype) for i, s in S.values()]
    off = np.array(3, dtype=np.int32)
    freqs = (np.abs(rand(4)) + 0.5).astype(np.float32)
    entries = [
        ("op", 20, [1, 2], "RMSNorm", lambda w_: w_.f32(1e-5), x.shape, dtype),
        ("op", 21, [1, 2, 3], "LayerNorm", lambda w_: w_.f32(1e-4), x.shape, dtype),
        ("const", 30, off),
        ("op", 22, [7, 30], "RoPE",
         lambda w_: w_.i32(12).boolean(False).f32(10000.0).f32(0.5).boolean(True), xr.shape, dtype),
        ("const", 31, freqs),
        ("op", 23, [7, 30, 31], "RoPE",
         lambda w_: w_.i32(8).boolean(True).f32(1.0).f32(1.0).boolean(True), xr.shape, dtype),
        ("op", 24, [4, 5, 6], "ScaledDotProductAttention",
         lambda w_: w_.f32(0.35).boolean(True).boolean(False).boolean(False), q.shape, dtype),
        ("op", 25, [4, 5, 6], "ScaledDotProductAttention",
         lambda w_: w_.f32(0.2).boolean(False).boolean(False).boolean(False), q.shape, dtype),
        ("op", 26, [22], "Softmax", lambda w_: w_.boolean(True), xr.shape, dtype),
    ]
    write_mlxfn(path, inputs, entries, [20, 21, 22, 23, 24, 25, 26])
    g = alloy.import_function(path)
    xs = [x, w, b, q, k, v, xr]
    got = [np.asarray(o).astype(np.float64) for o in g(*[alloy.array(a) for a in xs])]
    X = {n: mx.array(a) for n, a in zip(S, xs)}
    rope1 = mx.fast.rope(X["xr"], 12, traditional=False, base=10000.0, scale=0.5, offset=3)
    want = [
        mx.fast.rms_norm(X["x"], X["w"], 1e-5),
        mx.fast.layer_norm(X["x"], X["w"], X["b"], 1e-4),
        rope1,
        mx.fast.rope(X["xr"], 8, traditional=True, base=None, scale=1.0, offset=3,
                     freqs=mx.array(freqs)),
        mx.fast.scaled_dot_product_attention(X["q"], X["k"], X["v"], scale=0.35, mask="causal"),
        mx.fast.scaled_dot_product_attention(X["q"], X["k"], X["v"], scale=0.2),
        mx.softmax(rope1, axis=-1, precise=True),
    ]
    t = dict(rtol=5e-3, atol=5e-3) if dtype == np.float16 else dict(rtol=2e-5, atol=2e-5)
    for n, (gv, wv) in enumerate(zip(got, want)):
        np.testing.assert_allclose(gv, np.array(wv).astype(np.float64), err_msg=str(n), **t)


def test_mlxfn_sdpa_mask_and_sinks_rows(tmp_path):
    q, k, v = rand(1, 2, 4, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8)
    mask = rand(1, 2, 4, 5)
    sinks = rand(2)
    path = str(tmp_path / "sdpa.mlxfn")
    inputs = [(1, q.shape, np.float32), (2, k.shape, np.float32), (3, v.shape, np.float32),
              (4, mask.shape, np.float32), (5, sinks.shape, np.float32)]
    entries = [("op", 10, [1, 2, 3, 4, 5], "ScaledDotProductAttention",
                lambda w_: w_.f32(0.5).boolean(False).boolean(True).boolean(False), q.shape,
                np.float32)]
    write_mlxfn(path, inputs, entries, [10])
    g = alloy.import_function(path)
    (got,) = g(*[alloy.array(a) for a in (q, k, v, mask, sinks)])
    want = mx.fast.scaled_dot_product_attention(mx.array(q), mx.array(k), mx.array(v), scale=0.5,
                                                mask=mx.array(mask), sinks=mx.array(sinks))
    np.testing.assert_allclose(np.asarray(got), np.array(want), rtol=2e-5, atol=2e-5)


def test_mlxfn_fast_rows_bad_state(tmp_path):
    path = str(tmp_path / "bad.mlxfn")
    # RoPE with odd dims: a bad file, not a crash
    write_mlxfn(path, [(1, (1, 2, 3, 8), np.float32)],
                [("const", 2, np.array(0, dtype=np.int32)),
                 ("op", 3, [1, 2], "RoPE",
                  lambda w_: w_.i32(7).boolean(False).f32(1.0).f32(1.0).boolean(True),
                  (1, 2, 3, 8), np.float32)], [3])
    with pytest.raises(ValueError, match="RoPE"):
        alloy.import_function(path)
    # the training-mode attention (logsumexp output) is refused by name
    write_mlxfn(path, [(1, (1, 1, 2, 4), np.float32)],
                [("op", 3, [1, 1, 1], "ScaledDotProductAttention",
                  lambda w_: w_.f32(1.0).boolean(False).boolean(False).boolean(True),
                  (1, 1, 2, 4), np.float32)], [3])
    with pytest.raises(alloy.NotSupportedError, match="logsumexp"):
        alloy.import_function(path)
    # a hostile Arange: a huge constant is refused before anything is allocated
    write_mlxfn(path, [(1, (2,), np.float32)],
                [("op", 3, [], "Arange", lambda w_: w_.b.extend(struct.pack("<3d", 0, 2e9, 1)),
                  (2000000000,), np.float32)], [3])
    with pytest.raises(alloy.NotSupportedError, match="Arange"):
        alloy.import_function(path)
    write_mlxfn(path, [(1, (2,), np.float32)],
                [("op", 3, [], "Arange", lambda w_: w_.b.extend(struct.pack("<3d", 0, 5, 1)),
                  (4,), np.float32)], [3])
    with pytest.raises(ValueError, match="Arange"):
        alloy.import_function(path)
    # truncated state
    write_mlxfn(path, [(1, (2, 4), np.float32)],
                [("op", 3, [1, 1], "RMSNorm", lambda w_: w_.b.extend(b"\x00\x00"), (2, 4),
                  np.float32)], [3])
    with pytest.raises(ValueError):
        alloy.import_function(path)


# ---- Alloy's own format ---------------------------------------------------------------------


def test_fast_ops_round_trip_alloy_format(tmp_path):
    def f(x, w, q, k, v):
        h = alloy.fast.rms_norm(x, w, 1e-5) + alloy.fast.layer_norm(x, w, None, 1e-5)
        r = alloy.fast.rope(q, 8, traditional=True, base=500.0, scale=2.0, offset=1)
        return h, alloy.fast.scaled_dot_product_attention(r, k, v, scale=0.3, mask="causal")

    args = [rand(2, 16), rand(16), rand(1, 2, 3, 8), rand(1, 1, 4, 8), rand(1, 1, 4, 8)]
    path = str(tmp_path / "fast.alloy")
    alloy.export_function(path, f, *[alloy.array(a) for a in args])
    g = alloy.import_function(path)
    args2 = [rand(*a.shape) for a in args]
    got = g(*[alloy.array(a) for a in args2])
    want = f(*[alloy.array(a) for a in args2])
    for gv, wv in zip(got, want):
        np.testing.assert_allclose(np.asarray(gv), np.asarray(wv), rtol=1e-6, atol=1e-6)
