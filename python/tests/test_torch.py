"""alloy.torch: Metal kernels as torch ops (CoreAI's TorchMetalKernel convention) and
torch.mps.compile_shader's interface, on CPU tensors and (where there is a GPU) CUDA tensors.

Skipped without torch (CI installs none; the GPU machine has it). Kernel names are op names,
which torch cannot unregister, so every test builds its kernels under fresh names.
"""

import itertools
import os
import pathlib
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import alloy  # noqa: E402
import alloy.torch as at  # noqa: E402
from alloy.torch import MetalParameter, TorchMetalKernel  # noqa: E402

_COUNTER = itertools.count()
REPO = pathlib.Path(__file__).resolve().parents[2]
TID = MetalParameter("i", "uint", "thread_position_in_grid")
GID2 = MetalParameter("gid", "uint2", "thread_position_in_grid")


def fresh(name):
    return f"{name}_{os.getpid()}_{next(_COUNTER)}"


def _cuda_reason():
    if not torch.cuda.is_available():
        return "torch has no CUDA"
    if not alloy.is_available(alloy.gpu):
        return "Alloy has no GPU: " + (alloy.cuda.unavailable_reason() or "")
    return None


@pytest.fixture(params=["cpu", "cuda"])
def dev(request):
    if request.param == "cuda" and _cuda_reason():
        pytest.skip(_cuda_reason())
    return torch.device(request.param)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def randn(gen, *shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).to(device)


def tol(dtype):
    return {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 2e-6,
            torch.float64: 1e-12}[dtype]


def assert_close(got, want64, dtype):
    np.testing.assert_allclose(got.detach().cpu().double().numpy(),
                               want64.detach().cpu().double().numpy(),
                               rtol=tol(dtype), atol=tol(dtype))


# --- kernels used by several tests ----------------------------------------------------------


def torch_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def make_add(**kw):
    return TorchMetalKernel(
        fresh("vector_add"), input_names=["x", "y"], result_names=["output"],
        src="if (i < x.get_extent(0)) output[i] = x[i] + y[i];", torch_defn=torch_add,
        metal_params=[TID], **kw)


def call_add(k, x, y, group=32):
    n = x.shape[0]
    return k(x, y, threads_per_grid=(n, 1, 1), threads_per_thread_group=(group, 1, 1),
             result_shapes=[list(x.shape)])


def torch_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


# CoreAI's tensor-style matmul: torch a (M, K), b (K, N) are Metal tensors A [K, M], B [N, K];
# the result C [N, M] is torch (M, N). Indices and extents innermost first.
MATMUL_SRC = """
    const uint K = A.get_extent(0);
    const uint M = A.get_extent(1);
    const uint N = B.get_extent(0);
    if (gid.x >= N || gid.y >= M) return;
    float acc = 0.0f;
    for (uint k = 0; k < K; ++k) {
        acc += float(A[k, gid.y]) * float(B[gid.x, k]);   // a[m, k] * b[k, n]
    }
    C[gid.x, gid.y] = acc;
"""


def make_matmul(**kw):
    return TorchMetalKernel(fresh("matmul"), ["A", "B"], ["C"], MATMUL_SRC, torch_matmul,
                            [GID2], **kw)


def call_matmul(k, a, b):
    m, n = a.shape[0], b.shape[1]
    return k(a, b, threads_per_grid=(n, m, 1), threads_per_thread_group=(8, 8, 1),
             result_shapes=[[m, n]])


# --- forward ------------------------------------------------------------------------------


def test_forward_matches_torch_defn(dev, gen):
    k = make_add()
    for n in (1, 37, 1000):
        x, y = randn(gen, n, device=dev), randn(gen, n, device=dev)
        out = call_add(k, x, y)
        assert out.device == x.device and out.dtype == torch.float32 and out.shape == (n,)
        assert_close(out, x.double() + y.double(), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_template_dtypes_follow_the_inputs(dev, gen, dtype):
    if dev.type == "cuda" and dtype == torch.float64:
        pytest.skip("float64 kernels are checked on the CPU")

    def scale(x: torch.Tensor, s: float) -> torch.Tensor:
        return (x.double() * s).to(x.dtype)

    k = TorchMetalKernel(fresh("scale"), ["x", "s"], ["y"],
                         "y[i] = T(x[i] * T(s));", scale, [TID], template_dtypes={"x": "T"})
    x = randn(gen, 257, dtype=dtype, device=dev)
    y = k(x, 1.75, threads_per_grid=(257, 1, 1), threads_per_thread_group=(64, 1, 1),
          result_shapes=[[257]])
    assert y.dtype == dtype
    want = (x.double() * 1.75).to(dtype)
    assert_close(y, want.double(), dtype)


def test_scalar_inputs_int_float_bool(dev, gen):
    def f(x: torch.Tensor, n: int, a: float, neg: bool) -> torch.Tensor:
        return torch.where(torch.tensor(neg), -x, x) * a + n

    src = "float v = neg ? -x[i] : x[i]; y[i] = v * a + float(n);"
    k = TorchMetalKernel(fresh("scalars"), ["x", "n", "a", "neg"], ["y"], src, f, [TID])
    x = randn(gen, 50, device=dev)
    for n, a, neg in ((3, 0.5, True), (-7, 2.25, False)):
        y = k(x, n, a, neg, threads_per_grid=(50, 1, 1), threads_per_thread_group=(50, 1, 1),
              result_shapes=[[50]])
        want = (-x.double() if neg else x.double()) * a + n
        assert_close(y, want, torch.float32)


def test_several_results_list_and_tuple(dev, gen):
    def sincos_list(x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.sin(x), torch.cos(x)]

    def sincos_tuple(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sin(x), torch.cos(x)

    src = "s[i] = metal::sin(x[i]); c[i] = metal::cos(x[i]);"
    x = randn(gen, 6, 7, device=dev)
    for defn, kind in ((sincos_list, list), (sincos_tuple, tuple)):
        k = TorchMetalKernel(fresh("sincos"), ["x"], ["s", "c"], src, defn, [TID])
        out = k(x, threads_per_grid=(42, 1, 1), threads_per_thread_group=(42, 1, 1),
                result_shapes=[[6, 7], [6, 7]])
        assert type(out) is kind and len(out) == 2
        assert out[0].shape == (6, 7) and out[1].shape == (6, 7)
        np.testing.assert_allclose(out[0].cpu().numpy(), np.sin(x.cpu().double().numpy()),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[1].cpu().numpy(), np.cos(x.cpu().double().numpy()),
                                   rtol=1e-5, atol=1e-6)


def test_eager_fast_path_and_dispatcher_agree(gen):
    k = make_add()
    x, y = randn(gen, 300), randn(gen, 300)
    fast = call_add(k, x, y)
    k.eager_fast_path = False
    slow = call_add(k, x, y)
    via_op = k.op(x, y, 300, 1, 1, 32, 1, 1, [300])
    assert torch.equal(fast, slow) and torch.equal(fast, via_op)
    assert torch.equal(getattr(torch.ops.alloy_metal, k.name)(x, y, 300, 1, 1, 32, 1, 1, [300]),
                       fast)


# --- tensor-style inputs ------------------------------------------------------------------------


def test_tensor_style_matmul(dev, gen):
    k = make_matmul()
    a, b = randn(gen, 13, 9, device=dev), randn(gen, 9, 6, device=dev)
    c = call_matmul(k, a, b)
    assert c.shape == (13, 6)
    assert_close(c, a.double() @ b.double(), torch.float32)
    # A transposed (non-contiguous) input: the kernel sees its logical shape.
    at_ = randn(gen, 9, 13, device=dev).t()
    assert not at_.is_contiguous()
    assert_close(call_matmul(k, at_, b), at_.double() @ b.double(), torch.float32)


def test_tensor_style_rank3_extents_and_array_index(dev, gen):
    # out[d0, d1, d2] (torch) = x[d0, d1, d2] * 100 + rank * 10 + extent checks, written through
    # a metal::array index and a 3-index subscript.
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    src = """
        if (gid.x >= x.get_extent(0) || gid.y >= x.get_extent(1) || gid.z >= x.get_extent(2))
            return;
        metal::array<uint, 3> at = {gid.x, gid.y, gid.z};
        float v = x[gid.x, gid.y, gid.z];
        y[at] = v + x[at] + float(x.get_rank() - 3) + float(y.get_extent(3) - 1);
    """
    g3 = MetalParameter("gid", "uint3", "thread_position_in_grid")
    k = TorchMetalKernel(fresh("rank3"), ["x"], ["y"], src, f, [g3])
    assert sorted(k.tensor_views) == ["x", "y"]
    x = randn(gen, 3, 4, 5, device=dev)
    y = k(x, threads_per_grid=(5, 4, 3), threads_per_thread_group=(5, 4, 1),
          result_shapes=[[3, 4, 5]])
    assert_close(y, x.double() * 2, torch.float32)


def test_tiled_metal_params(dev, gen):
    # threadgroup_position_in_grid and thread_position_in_threadgroup as uint2 names.
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()

    src = """
        uint c = tg.x * 4 + lid.x, r = tg.y * 4 + lid.y;
        if (c < x.get_extent(0) && r < x.get_extent(1)) y[r, c] = x[c, r];
    """
    k = TorchMetalKernel(
        fresh("transpose"), ["x"], ["y"], src, f,
        [MetalParameter("tg", "uint2", "threadgroup_position_in_grid"),
         MetalParameter("lid", "ushort2", "thread_position_in_threadgroup")])
    x = randn(gen, 10, 7, device=dev)
    y = k(x, threads_per_grid=(7, 10, 1), threads_per_thread_group=(4, 4, 1),
          result_shapes=[[7, 10]])
    assert torch.equal(y, x.t())


def test_multi_index_rewrite_leaves_comments_strings_and_other_names():
    src = """// A[k, m] in a comment
        const char* s = "A[1, 2]";
        int other[4]; other[0] = 1;
        C[gid.x, gid.y] = A[B[1, 2], gid.y] + other[min(1, 2)];"""
    out, used = at._rewrite_multi_index(src, {"A", "B", "C"})
    assert used == {"A", "B", "C"}
    assert "// A[k, m] in a comment" in out and '"A[1, 2]"' in out
    assert "C(gid.x, gid.y) = A(B(1, 2), gid.y) + other[min(1, 2)]" in out
    with pytest.raises(ValueError, match="unbalanced"):
        at._rewrite_multi_index("A[1, 2", {"A"})


@pytest.mark.skipif(not (REPO / "build" / "alloy").exists(), reason="no build/alloy CLI")
def test_tensor_views_compile_with_nvrtc(tmp_path):
    """The generated views (header + body) translate for CUDA and compile with NVRTC (sm_90),
    also without a GPU."""
    k = make_matmul()
    (tmp_path / "body.metal").write_text(k._body)
    (tmp_path / "header.metal").write_text(k._header)
    cmd = [str(REPO / "build" / "alloy"), "translate", "--target", "ptx", "--name", k.name,
           "--input", "alloy_in_A", "--input-dtype", "float32", "--input-shape", "5x7",
           "--input", "alloy_in_B", "--input-dtype", "float32", "--input-shape", "7x3",
           "--input", "alloy_shape_C", "--input-dtype", "int32", "--input-shape", "2",
           "--output", "alloy_out_C", "--output-dtype", "float32",
           "--source", str(tmp_path / "body.metal"), "--header", str(tmp_path / "header.metal")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and "NVRTC" in r.stderr and "not" in r.stderr:
        pytest.skip("NVRTC unavailable: " + r.stderr.strip()[:200])
    assert r.returncode == 0, r.stderr
    assert ".entry" in r.stdout


# --- torch.export / torch.compile ----------------------------------------------------------------


class AddTwice(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x, y):
        out = call_add(self.k, x, y)
        return out * 2


def _op_nodes(graph, name):
    return [n for n in graph.nodes
            if n.op == "call_function" and f"alloy_metal.{name}" in str(n.target)]


def test_export_keeps_the_op_with_a_traced_grid(gen, tmp_path):
    k = make_add()
    x, y = randn(gen, 16), randn(gen, 16)
    n = torch.export.Dim("n", min=2, max=1 << 20)
    ep = torch.export.export(AddTwice(k), (x, y), dynamic_shapes={"x": {0: n}, "y": {0: n}})
    for prog in (ep, ep.run_decompositions()):
        nodes = _op_nodes(prog.graph, k.name)
        assert len(nodes) == 1
        grid = nodes[0].args[2:5]
        assert isinstance(grid[0], torch.fx.Node), grid  # the grid follows the input's size
        assert tuple(grid[1:]) == (1, 1) and tuple(nodes[0].args[5:8]) == (32, 1, 1)
    x2, y2 = randn(gen, 333), randn(gen, 333)
    assert_close(ep.module()(x2, y2), 2 * (x2.double() + y2.double()), torch.float32)
    path = tmp_path / "add.pt2"
    torch.export.save(ep, path)
    loaded = torch.export.load(path)
    assert len(_op_nodes(loaded.graph, k.name)) == 1
    assert_close(loaded.module()(x2, y2), 2 * (x2.double() + y2.double()), torch.float32)


def test_export_of_tensor_style_kernel_save_load(gen, tmp_path):
    k = make_matmul()

    class M(torch.nn.Module):
        def forward(self, a, b):
            return call_matmul(k, a, b).relu()

    a, b = randn(gen, 8, 5), randn(gen, 5, 3)
    ep = torch.export.export(M(), (a, b)).run_decompositions()
    assert len(_op_nodes(ep.graph, k.name)) == 1
    torch.export.save(ep, tmp_path / "mm.pt2")
    loaded = torch.export.load(tmp_path / "mm.pt2")
    assert_close(loaded.module()(a, b), (a.double() @ b.double()).relu(), torch.float32)


def test_compile_treats_the_op_as_opaque(gen):
    k = make_add()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(AddTwice(k), backend=backend, fullgraph=True)
    x, y = randn(gen, 64), randn(gen, 64)
    assert_close(compiled(x, y), 2 * (x.double() + y.double()), torch.float32)
    assert len(graphs) == 1 and len(_op_nodes(graphs[0].graph, k.name)) == 1
    aot = torch.compile(AddTwice(k), backend="aot_eager", fullgraph=True)
    assert_close(aot(x, y), 2 * (x.double() + y.double()), torch.float32)


# --- autograd --------------------------------------------------------------------------------


def test_backward_in_torch_code_matches_finite_differences(gen):
    def cube(x: torch.Tensor, c: float) -> torch.Tensor:
        return x * x * x * c

    def backward(ctx, g):
        (x,), (c,) = ctx.saved_tensors, ctx.scalars
        return 3 * x * x * c * g, None

    k = TorchMetalKernel(fresh("cube"), ["x", "c"], ["y"], "y[i] = x[i] * x[i] * x[i] * c;",
                         cube, [TID], template_dtypes={"x": "T"}, backward=backward)
    x = randn(gen, 3, 5, dtype=torch.float64).requires_grad_()

    def f(x):
        return k(x, 0.75, threads_per_grid=(15, 1, 1), threads_per_thread_group=(15, 1, 1),
                 result_shapes=[[3, 5]])

    assert torch.autograd.gradcheck(f, (x,))


def test_backward_as_a_kernel(dev, gen):
    def swish(x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)

    def swish_grad(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(x)
        return g * (s + x * s * (1 - s))

    grad_k = TorchMetalKernel(
        fresh("swish_grad"), ["x", "g"], ["dx"],
        "float s = 1.0f / (1.0f + metal::exp(-x[i])); dx[i] = g[i] * (s + x[i] * s * (1 - s));",
        swish_grad, [TID])

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return grad_k(x, g.contiguous(), threads_per_grid=(x.numel(), 1, 1),
                      threads_per_thread_group=(64, 1, 1), result_shapes=[list(x.shape)])

    k = TorchMetalKernel(fresh("swish"), ["x"], ["y"],
                         "y[i] = x[i] / (1.0f + metal::exp(-x[i]));", swish, [TID])
    k.register_autograd(backward, setup_context=setup)
    x = randn(gen, 100, device=dev).requires_grad_()
    y = k(x, threads_per_grid=(100, 1, 1), threads_per_thread_group=(64, 1, 1),
          result_shapes=[[100]])
    w = randn(gen, 100, device=dev)
    (y * w).sum().backward()
    xr = x.detach().double().requires_grad_()
    (swish(xr) * w.double()).sum().backward()
    assert_close(x.grad, xr.grad, torch.float32)


def test_no_backward_is_an_error_not_a_silent_zero(gen):
    k = make_add()
    x = randn(gen, 8).requires_grad_()
    out = call_add(k, x, randn(gen, 8))
    with pytest.raises(alloy.NotSupportedError, match="no backward"):
        out.sum().backward()
    # Inputs that need no gradient: the kernel is a constant.
    out = call_add(k, x.detach(), randn(gen, 8))
    assert not out.requires_grad


# --- check mode ---------------------------------------------------------------------------------


def test_check_mode_catches_a_wrong_kernel(dev, gen):
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    wrong = TorchMetalKernel(fresh("wrong"), ["x"], ["y"],
                             "y[i] = x[i] * (i == 5 ? 3.0f : 2.0f);", f, [TID], check=True)
    x = randn(gen, 10, device=dev)
    with pytest.raises(alloy.CheckError, match="differs from torch_defn") as e:
        wrong(x, threads_per_grid=(10, 1, 1), threads_per_thread_group=(10, 1, 1),
              result_shapes=[[10]])
    assert e.value.kernel == wrong.name and e.value.output == "y"
    assert e.value.first_index == (5,)
    assert e.value.max_abs_error == pytest.approx(abs(float(x[5])), rel=1e-5)
    right = TorchMetalKernel(fresh("right"), ["x"], ["y"], "y[i] = x[i] * 2.0f;", f, [TID],
                             check=True)
    out = right(x, threads_per_grid=(10, 1, 1), threads_per_thread_group=(10, 1, 1),
                result_shapes=[[10]])
    assert torch.equal(out, x * 2)
    # Without check mode the wrong kernel's result comes back unchecked.
    wrong.check = False
    got = wrong(x, threads_per_grid=(10, 1, 1), threads_per_thread_group=(10, 1, 1),
                result_shapes=[[10]])
    assert float(got[5]) == pytest.approx(3 * float(x[5]), rel=1e-6)


# --- argument errors ------------------------------------------------------------------------------


def test_construction_errors():
    def one(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(TypeError, match="annotated"):
        TorchMetalKernel(fresh("e"), ["x"], ["y"], "", lambda x: x)
    with pytest.raises(ValueError, match="parameters but input_names"):
        TorchMetalKernel(fresh("e"), ["x", "z"], ["y"], "", one)
    with pytest.raises(ValueError, match="result_names has 2"):
        TorchMetalKernel(fresh("e"), ["x"], ["y", "w"], "", one)
    with pytest.raises(ValueError, match="both input_names and result_names"):
        TorchMetalKernel(fresh("e"), ["x"], ["x"], "", one)
    with pytest.raises(ValueError, match="unknown attribute"):
        TorchMetalKernel(fresh("e"), ["x"], ["y"], "", one,
                         [MetalParameter("i", "uint", "thread_position_in_universe")])
    with pytest.raises(ValueError, match="not supported"):
        TorchMetalKernel(fresh("e"), ["x"], ["y"], "", one,
                         [MetalParameter("i", "float", "thread_position_in_grid")])
    with pytest.raises(ValueError, match="template_dtypes"):
        TorchMetalKernel(fresh("e"), ["x"], ["y"], "", one, template_dtypes={"q": "T"})
    with pytest.raises(TypeError, match="list\\[torch.Tensor\\]"):
        def bad_ret(x: torch.Tensor) -> int:
            return 0
        TorchMetalKernel(fresh("e"), ["x"], ["y"], "", bad_ret)


def test_same_name_same_schema_takes_the_op_over_other_schema_raises(gen):
    name = fresh("renamed")

    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def g(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    TorchMetalKernel(name, ["x"], ["y"], "y[i] = x[i] + 1.0f;", f, [TID])
    k2 = TorchMetalKernel(name, ["x"], ["y"], "y[i] = x[i] + 2.0f;", f, [TID])
    x = randn(gen, 4)
    assert torch.equal(getattr(torch.ops.alloy_metal, name)(x, 4, 1, 1, 4, 1, 1, [4]), x + 2)
    assert torch.equal(k2(x, threads_per_grid=(4, 1, 1), threads_per_thread_group=(4, 1, 1),
                          result_shapes=[[4]]), x + 2)
    with pytest.raises(ValueError, match="schema"):
        TorchMetalKernel(name, ["x", "y"], ["z"], "", g)


def test_call_errors(gen):
    k = make_add()
    x = randn(gen, 8)
    with pytest.raises(ValueError, match="threads_per_grid"):
        k(x, x, threads_per_grid=(8, 1), threads_per_thread_group=(8, 1, 1), result_shapes=[[8]])
    with pytest.raises(ValueError, match="one shape per result"):
        k(x, x, threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1), result_shapes=[])
    with pytest.raises(TypeError, match="takes 2 inputs"):
        k(x, threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1), result_shapes=[[8]])
    with pytest.raises(ValueError, match="torch_defn gives"):
        k(x, x, threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1),
          result_shapes=[[9]])
    with pytest.raises(ValueError):
        k(x, x, threads_per_grid=(8, 1, 1), threads_per_thread_group=(2048, 1, 1),
          result_shapes=[[8]])


# --- compile_shader ---------------------------------------------------------------------------------

SHADERS = """
kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] += a * x[i];
}
kernel void fill2d(device float* out [[buffer(0)]], device int* count [[buffer(1)]],
                   constant uint& width [[buffer(2)]], uint2 p [[thread_position_in_grid]]) {
  out[p.y * width + p.x] = float(p.y * 100 + p.x);
  if (p.x == 0 && p.y == 0) count[0] += 1;
}
"""


def test_compile_shader_writes_in_place(dev, gen):
    lib = at.compile_shader(SHADERS)
    assert set(lib.kernel_names()) == {"axpy", "fill2d"}
    x, y = randn(gen, 1000, device=dev), randn(gen, 1000, device=dev)
    y0, ptr = y.clone(), y.data_ptr()
    assert lib.axpy(x, y, 2.5, threads=1000, group_size=128) is None
    assert y.data_ptr() == ptr
    assert_close(y, y0.double() + 2.5 * x.double(), torch.float32)
    out = torch.full((6, 9), -1.0, device=dev)
    count = torch.tensor([41], dtype=torch.int32, device=dev)
    lib.fill2d(out, count, 9, threads=(9, 6), group_size=(3, 2))
    want = torch.arange(6, dtype=torch.float64)[:, None] * 100 + torch.arange(9)[None, :]
    assert torch.equal(out.cpu().double(), want)
    assert int(count[0]) == 42


def test_compile_shader_errors():
    lib = at.compile_shader(SHADERS)
    with pytest.raises(AttributeError):
        lib.no_such_kernel
    with pytest.raises(TypeError):
        lib.axpy(torch.zeros(4), torch.zeros(4), 1.0, threads=4, bogus=1)


# --- CUDA: torch's current stream ---------------------------------------------------------------------


@pytest.mark.skipif(_cuda_reason() is not None, reason=str(_cuda_reason()))
def test_cuda_runs_on_torchs_current_stream(gen):
    k = make_add()
    s = torch.cuda.Stream()
    x = randn(gen, 1 << 20)
    y = randn(gen, 1 << 20)
    with torch.cuda.stream(s):
        xd, yd = x.cuda() * 3, y.cuda()  # torch's work on s
        out = call_add(k, xd, yd, group=256)  # the kernel, after it on s
        out2 = out * 2  # torch's work on s, after the kernel
    s.synchronize()
    assert_close(out2, 2 * (3 * x.double() + y.double()), torch.float32)
    assert at._alloy_stream(xd.device) is not None
    assert alloy.cuda.stream_handle(at._stream_cache[(0, s.cuda_stream)]) == s.cuda_stream


@pytest.mark.skipif(_cuda_reason() is not None, reason=str(_cuda_reason()))
def test_cuda_on_torchs_default_stream_orders_with_torch_work(gen):
    # torch's default (legacy) stream: Alloy wraps it as CU_STREAM_LEGACY, so the kernel runs
    # after torch's pending work and torch's later work runs after the kernel, with no sync.
    k = make_matmul()
    a = randn(gen, 512, 512, device="cuda")
    b = randn(gen, 512, 512, device="cuda")
    for _ in range(3):
        a2 = (a @ a) * 1e-2  # torch's work, still running when the kernel is queued
        c = call_matmul(k, a2, b)
        d = c + 1  # torch's work after the kernel
    torch.cuda.synchronize()
    want = ((a.double() @ a.double()) * 1e-2) @ b.double() + 1
    np.testing.assert_allclose(d.cpu().double().numpy(), want.cpu().numpy(), rtol=2e-3,
                               atol=2e-3)


@pytest.mark.skipif(_cuda_reason() is not None, reason=str(_cuda_reason()))
def test_cuda_compile_shader_on_a_side_stream(gen):
    lib = at.compile_shader(SHADERS)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = randn(gen, 4096, device="cuda")
        y = randn(gen, 4096, device="cuda")
        y0 = y.clone()
        lib.axpy(x, y, -1.5, threads=4096, group_size=256)
        z = y * 1
    s.synchronize()
    assert_close(z, y0.double() - 1.5 * x.double(), torch.float32)


def test_meta_tensors_run_the_fake_implementation():
    k = make_matmul()
    a = torch.empty(7, 3, device="meta")
    b = torch.empty(3, 5, device="meta")
    c = call_matmul(k, a, b)
    assert c.device.type == "meta" and c.shape == (7, 5)


def test_stream_ordered_import_shares_cpu_memory(gen):
    from torch.utils import dlpack

    t = randn(gen, 16)
    a = alloy._core._from_dlpack_stream_ordered(dlpack.to_dlpack(t))
    t[3] = 42.0
    assert float(np.asarray(a)[3]) == 42.0
    with pytest.raises(TypeError):
        alloy._core._from_dlpack_stream_ordered(t)


@pytest.mark.skipif(_cuda_reason() is not None, reason=str(_cuda_reason()))
def test_cuda_inductor_calls_the_op_as_an_extern_kernel(gen):
    k = make_add()
    compiled = torch.compile(AddTwice(k), backend="inductor", fullgraph=True)
    x, y = randn(gen, 5000, device="cuda"), randn(gen, 5000, device="cuda")
    assert_close(compiled(x, y), 2 * (x.double() + y.double()), torch.float32)
