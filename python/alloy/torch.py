"""PyTorch: Metal kernels as torch ops, on CPU and CUDA tensors.

    import torch
    from alloy.torch import TorchMetalKernel, MetalParameter

    def torch_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    custom_add = TorchMetalKernel(
        "vector_add", input_names=["x", "y"], result_names=["output"],
        src="if (id < x.get_extent(0)) output[id] = x[id] + y[id];",
        torch_defn=torch_add,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])

    z = custom_add(x, y, threads_per_grid=(x.shape[0], 1, 1),
                   threads_per_thread_group=(256, 1, 1), result_shapes=[list(x.shape)])

CoreAI's ``TorchMetalKernel`` convention (constructor and call), with the kernel running through
Alloy on the tensors' device instead of only being a conversion-time artifact:

- Construction registers the ``torch.library`` operator ``alloy_metal::<name>``: its fake
  (meta) implementation is ``torch_defn``, its CPU and CUDA implementations run the Metal kernel.
  ``torch.export.export`` keeps the op, also after ``run_decompositions()``, with the grid,
  threadgroup and result shapes as (Sym)int list arguments; ``torch.compile`` treats it as opaque;
  an exported program holding it saves, reloads (in a process that constructed the kernel) and
  runs.
- A call runs on the device of its tensors: the CPU, or CUDA on torch's current stream. Inputs
  reach Alloy without a copy (DLPack capsules); outputs are Alloy's memory handed to torch
  without a copy.
- ``backward=`` (or :meth:`TorchMetalKernel.register_autograd`) registers a backward with
  ``torch.library.register_autograd``: torch code, or other kernels.
- ``check=True`` (or ``ALLOY_CHECK=1``) runs ``torch_defn`` after each kernel call and raises
  ``alloy.CheckError`` when they differ.
- Tensor-style inputs as Metal 4's tensor types: ``A.get_extent(d)``, ``A.get_rank()``,
  ``A[k, m]`` and ``A[metal::array<uint, N>]``, extents and indices innermost first; one index
  ``A[i]`` is the flat (row-major) element index.

:func:`compile_shader` mirrors ``torch.mps.compile_shader``. See docs/torch.md.
"""

from __future__ import annotations

import atexit
import inspect
import os
import re
import threading
import typing
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.utils import dlpack as _tdl

from . import _core

__all__ = ["MetalParameter", "TorchMetalKernel", "compile_shader", "ShaderLibrary", "ShaderKernel",
           "NAMESPACE"]

#: The torch.library namespace of the ops: ``torch.ops.alloy_metal.<name>``.
NAMESPACE = "alloy_metal"

_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")

_DTYPES: dict[torch.dtype, Any] = {
    torch.bool: _core.bool_,
    torch.int8: _core.int8,
    torch.int16: _core.int16,
    torch.int32: _core.int32,
    torch.int64: _core.int64,
    torch.uint8: _core.uint8,
    torch.float16: _core.float16,
    torch.bfloat16: _core.bfloat16,
    torch.float32: _core.float32,
    torch.float64: _core.float64,
    torch.complex64: _core.complex64,
}
for _name, _dt in (("uint16", _core.uint16), ("uint32", _core.uint32), ("uint64", _core.uint64)):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _dt

# Metal thread attributes and their types in the generated signature (MLX's).
_VECTOR_ATTRIBUTES = {
    "dispatch_threads_per_threadgroup", "grid_origin", "grid_size",
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threadgroups_per_grid", "threads_per_grid", "threads_per_threadgroup",
}
_SCALAR_ATTRIBUTES = {
    "dispatch_simdgroups_per_threadgroup", "quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup", "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
    "thread_execution_width", "thread_index_in_quadgroup", "thread_index_in_simdgroup",
    "thread_index_in_threadgroup", "threads_per_simdgroup",
}
_ATTRIBUTE_TYPES = re.compile(r"^(u?int|u?short|u?long)([23]?)$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Tensor views for tensor-style inputs and results (Metal 4 tensor conventions: extents and
# multi-indices innermost first). `shape` is the torch shape (outermost first), as MLX's
# `<name>_shape` parameters hold it; the data is row-major contiguous.
_TENSOR_HEADER = r"""
template <class P, class S>
struct alloy_tensor_view {
  P alloy_data;
  S alloy_shape;
  int alloy_rank;
  int get_rank() const { return alloy_rank; }
  int get_extent(int d) const {
    return d >= 0 && d < alloy_rank ? int(alloy_shape[alloy_rank - 1 - d]) : 1;
  }
  template <class I>
  decltype(auto) operator[](I i) const { return alloy_data[i]; }
  template <class T, size_t N>
  decltype(auto) operator[](const metal::array<T, N>& idx) const {
    long off = 0, stride = 1;
    for (size_t d = 0; d < N; ++d) {
      off += long(idx[d]) * stride;
      stride *= long(alloy_shape[alloy_rank - 1 - int(d)]);
    }
    return alloy_data[off];
  }
  template <class... I>
  decltype(auto) operator()(I... idx) const {
    long off = 0, stride = 1;
    int d = 0;
    ((off += long(idx) * stride, stride *= long(alloy_shape[alloy_rank - 1 - d]), ++d), ...);
    return alloy_data[off];
  }
};
template <class P, class S>
alloy_tensor_view<P, S> alloy_make_tensor_view(P p, S s, int rank) {
  return alloy_tensor_view<P, S>{p, s, rank};
}
"""

# Check mode's default: ALLOY_CHECK=1 in the environment when alloy.torch is imported.
_CHECK_DEFAULT = os.environ.get("ALLOY_CHECK", "") == "1"

_is_compiling = torch.compiler.is_compiling
_tracing_state = torch._C._get_tracing_state
_function_mode_on = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_on = torch._C._are_functorch_transforms_active
_grad_on = torch.is_grad_enabled


def _plain_eager(args: Sequence[Any]) -> bool:
    """True when calling the op would do nothing but run its CPU/CUDA implementation: plain
    tensors (no fake/functional/subclass tensors), no autograd to record, no tracing (dynamo,
    jit), no torch-function or dispatch mode, no functorch transform."""
    grad = _grad_on()
    for a in args:
        if isinstance(a, torch.Tensor):
            if type(a) is not torch.Tensor or a.is_meta or (grad and a.requires_grad):
                return False
    return not (_is_compiling() or _tracing_state() is not None or _function_mode_on()
                or _dispatch_modes() or _functorch_on())


@dataclass(frozen=True)
class MetalParameter:
    """A thread attribute bound to a name in the kernel body, as CoreAI's ``MetalParameter``:
    ``MetalParameter("gid", "uint2", "thread_position_in_grid")`` gives the body
    ``uint2 gid`` = the first two components of ``thread_position_in_grid``."""

    name: str
    type: str
    attribute: str


# ---------------------------------------------------------------------------------------------
# Source generation
# ---------------------------------------------------------------------------------------------

_TOKENS = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|[A-Za-z_][A-Za-z0-9_]*|.",
    re.S,
)


def _rewrite_multi_index(src: str, names: set[str]) -> tuple[str, set[str]]:
    """``A[i, j]`` -> ``A(i, j)`` for tensor names (same length: nested subscripts keep their
    positions). Returns the new source and the names written with a multi-index."""
    chars = list(src)
    tokens = [(m.start(), m.group()) for m in _TOKENS.finditer(src)]
    used: set[str] = set()
    pending: list[tuple[str, int]] = []  # tensor name, position of its '['
    for k, (pos, tok) in enumerate(tokens):
        if tok in names:
            j = k + 1
            while j < len(tokens) and tokens[j][1].isspace():
                j += 1
            if j < len(tokens) and tokens[j][1] == "[":
                pending.append((tok, tokens[j][0]))
    index_of = {pos: k for k, (pos, _) in enumerate(tokens)}
    for name, open_pos in pending:
        depth = 0
        comma = False
        close = -1
        for pos, tok in tokens[index_of[open_pos]:]:
            if tok in "([{":
                depth += 1
            elif tok in ")]}":
                depth -= 1
                if depth == 0:
                    close = pos
                    break
            elif tok == "," and depth == 1:
                comma = True
        if close < 0:
            raise ValueError(f"[TorchMetalKernel] unbalanced '[' after '{name}' in the kernel source")
        if comma:
            chars[open_pos], chars[close] = "(", ")"
            used.add(name)
    return "".join(chars), used


def _uses_member(src: str, name: str) -> bool:
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"\s*\.", src) is not None


def _uses_array_index(src: str, name: str, arrays: set[str]) -> bool:
    for m in re.finditer(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"\s*\[\s*([A-Za-z_]\w*)\s*\]",
                         src):
        if m.group(1) in arrays:
            return True
    return False


def _param_prelude(params: Sequence[MetalParameter]) -> list[str]:
    lines = []
    for p in params:
        if not isinstance(p, MetalParameter):
            raise TypeError(
                f"[TorchMetalKernel] metal_params must hold MetalParameter values, got "
                f"{type(p).__name__}")
        if not _IDENT.match(p.name):
            raise ValueError(f"[TorchMetalKernel] MetalParameter name {p.name!r} is not an identifier")
        m = _ATTRIBUTE_TYPES.match(p.type.strip())
        if not m:
            raise ValueError(
                f"[TorchMetalKernel] MetalParameter {p.name!r}: type {p.type!r} is not supported "
                "(uint, uint2, uint3, ushort, ushort2, ushort3, int...)")
        width = int(m.group(2) or 1)
        attr = p.attribute
        if attr in _VECTOR_ATTRIBUTES:
            comps = [f"{attr}.{c}" for c in "xyz"[:width]]
        elif attr in _SCALAR_ATTRIBUTES:
            if width != 1:
                raise ValueError(
                    f"[TorchMetalKernel] MetalParameter {p.name!r}: attribute {attr!r} is a "
                    f"scalar, the type {p.type!r} is a vector")
            comps = [attr]
        else:
            raise ValueError(
                f"[TorchMetalKernel] MetalParameter {p.name!r}: unknown attribute {attr!r}; "
                f"supported: {', '.join(sorted(_VECTOR_ATTRIBUTES | _SCALAR_ATTRIBUTES))}")
        if p.name == attr:
            natural = "uint3" if attr in _VECTOR_ATTRIBUTES else "uint"
            if p.type.strip() != natural:
                raise ValueError(
                    f"[TorchMetalKernel] MetalParameter {p.name!r} shadows its attribute with "
                    f"type {p.type!r}: name it differently, or use type {natural!r}")
            continue
        base = m.group(1)
        if width == 1:
            lines.append(f"const {p.type} {p.name} = static_cast<{base}>({comps[0]});")
        else:
            cast = ", ".join(f"static_cast<{base}>({c})" for c in comps)
            lines.append(f"const {p.type} {p.name} = {p.type}({cast});")
    return lines


# ---------------------------------------------------------------------------------------------
# Per-call conversions
# ---------------------------------------------------------------------------------------------

_CU_STREAM_LEGACY = 0x1
# The current stream's handle without making a torch.cuda.Stream object (what Inductor calls).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_stream_cache: dict[tuple[int, int], Any] = {}
_stream_lock = threading.Lock()


def _alloy_stream(device: torch.device) -> Any:
    """Alloy's stream for work on `device`: the CPU, or torch's current CUDA stream (wrapped
    once per handle)."""
    if device.type == "cpu":
        return _core.cpu
    if device.type != "cuda":
        raise _core.NotSupportedError(
            f"[alloy.torch] not supported: tensors on device '{device}' (only cpu and cuda)")
    index = device.index if device.index is not None else torch.cuda.current_device()
    handle = _raw_stream(index) if _raw_stream else torch.cuda.current_stream(index).cuda_stream
    key = (index, handle)
    s = _stream_cache.get(key)
    if s is None:
        with _stream_lock:
            s = _stream_cache.get(key)
            if s is None:
                # Handle 0 is CUDA's legacy default stream (torch's default): wrap it as
                # CU_STREAM_LEGACY (0x1), which orders with it; Alloy's own default stream is
                # non-blocking and would not.
                s = _core.cuda_stream_from_handle(handle if handle else _CU_STREAM_LEGACY, index)
                _stream_cache[key] = s
    return s


_import_stream_ordered = _core._from_dlpack_stream_ordered


def _to_alloy(t: torch.Tensor) -> Any:
    """`t` for Alloy without a copy: a DLPack capsule (CPU), or an Alloy array over it (CUDA)
    that does not synchronize when released: Alloy runs on torch's current stream, and torch's
    caching allocator reuses the memory only in that stream's order."""
    cap = _tdl.to_dlpack(t.detach() if t.requires_grad else t)
    return _import_stream_ordered(cap) if t.is_cuda else cap


def _to_torch(a: Any) -> torch.Tensor:
    """A torch tensor over Alloy's (evaluated) output memory, without a copy. stream=-1: Alloy
    ran on torch's stream, so no synchronization is needed."""
    return _tdl.from_dlpack(a.__dlpack__(stream=-1))


def _alloy_dtype(dt: torch.dtype, what: str) -> Any:
    try:
        return _DTYPES[dt]
    except KeyError:
        raise TypeError(f"[alloy.torch] {what}: Alloy has no dtype for {dt}") from None


def _default_tolerance(dt: torch.dtype) -> tuple[float, float]:
    if dt in (torch.float16,):
        return 1e-3, 1e-3
    if dt == torch.bfloat16:
        return 1.6e-2, 1e-2
    if dt in (torch.float32, torch.complex64):
        return 1.3e-6 * 10, 1e-5
    if dt == torch.float64:
        return 1e-7, 1e-7
    return 0.0, 0.0


def _check_outputs(name: str, result_names: Sequence[str], got: Sequence[torch.Tensor],
                   want: Sequence[torch.Tensor], rtol: float | None, atol: float | None) -> None:
    if len(got) != len(want):
        raise _core.CheckError(
            f"[TorchMetalKernel] check mode: kernel '{name}' has {len(got)} results, its "
            f"torch_defn returns {len(want)}")
    for rname, g, w in zip(result_names, got, want):
        if tuple(g.shape) != tuple(w.shape):
            err = _core.CheckError(
                f"[TorchMetalKernel] check mode: kernel '{name}', result '{rname}': the kernel's "
                f"shape {tuple(g.shape)} differs from torch_defn's {tuple(w.shape)}")
            raise err
        r0, a0 = _default_tolerance(g.dtype)
        r = r0 if rtol is None else rtol
        a = a0 if atol is None else atol
        gd = g.detach().to(torch.float64) if not g.is_complex() else g.detach().to(torch.complex128)
        wd = w.detach().to(gd.dtype).to(gd.device)
        diff = (gd - wd).abs()
        bad = (diff > a + r * wd.abs()) | (gd.isnan() != wd.isnan())
        if bool(bad.any()):
            flat = int(bad.flatten().nonzero()[0])
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), g.shape)) \
                if g.dim() else ()
            finite = diff[~diff.isnan()]
            max_abs = float(finite.max()) if finite.numel() else float("nan")
            rel = (diff / wd.abs().clamp_min(1e-300))
            rel = rel[~rel.isnan()]
            max_rel = float(rel.max()) if rel.numel() else float("nan")
            err = _core.CheckError(
                f"[TorchMetalKernel] check mode: kernel '{name}', result '{rname}' differs from "
                f"torch_defn: max |error| {max_abs:.3g}, max relative error {max_rel:.3g}, first "
                f"at index {index}: kernel {gd.flatten()[flat].item()!r}, torch_defn "
                f"{wd.flatten()[flat].item()!r} (rtol {r:g}, atol {a:g})")
            err.kernel = name
            err.output = rname
            err.max_abs_error = max_abs
            err.max_rel_error = max_rel
            err.first_index = index
            raise err


# ---------------------------------------------------------------------------------------------
# TorchMetalKernel
# ---------------------------------------------------------------------------------------------

_ALLOWED_SCALARS = {int: "int", float: "float", bool: "bool"}



@dataclass
class _OpState:
    """One registered op: its schema and the kernel object its implementations call now (a
    kernel constructed again under the same name and schema takes the op over; torch cannot
    unregister an op)."""

    schema: str
    kernel: "TorchMetalKernel"


_ops: dict[str, _OpState] = {}
_ops_lock = threading.Lock()


@atexit.register
def _release_kernels() -> None:
    """torch's op registry keeps the implementations (and through them the kernels) until the
    process ends, after Python's finalisation: drop the kernels at exit so that they are freed
    while the extension is still alive (nanobind reported them as leaked otherwise)."""
    with _ops_lock:
        for state in _ops.values():
            state.kernel = None  # type: ignore[assignment]
    _stream_cache.clear()


def _annotation_kind(ann: Any) -> str | None:
    if ann is torch.Tensor:
        return "Tensor"
    return _ALLOWED_SCALARS.get(ann)


class TorchMetalKernel:
    """A Metal kernel body as a ``torch.library`` custom op (CoreAI's ``TorchMetalKernel``).

    Args:
      name: The op's name: ``torch.ops.alloy_metal.<name>``. One kernel per name in a process.
      input_names: Names of the kernel's inputs in the body, in ``torch_defn``'s parameter order.
        Parameters annotated ``torch.Tensor`` are device buffers (tensor views when the body
        uses them tensor-style), ``int``/``float``/``bool`` ones are ``constant`` scalars.
      result_names: Names of the results in the body (device buffers).
      src: The body of the ``[[kernel]]`` function (its signature is generated).
      torch_defn: The reference: annotated parameters (``torch.Tensor``, ``int``, ``float``,
        ``bool``), returns ``torch.Tensor``, ``tuple[torch.Tensor, ...]`` (a concrete count) or
        ``list[torch.Tensor]``. It is the op's fake implementation (shapes and dtypes under
        ``torch.export``/``torch.compile``), gives the result dtypes, and is compared with the
        kernel in check mode.
      metal_params: Thread attributes bound to names (:class:`MetalParameter`).
      helper_src: Metal code placed before the kernel (functions, structs).
      template_dtypes: ``{input_name: placeholder}``: the identifier ``placeholder`` in the body
        is the Metal type of that input's dtype in each call (``float``, ``half``, ``bfloat``...).
      backward, setup_context: Registered with ``torch.library.register_autograd`` (see
        :meth:`register_autograd`).
      check: Check mode for every call (default: ``ALLOY_CHECK=1`` in the environment).
      rtol, atol: Check-mode tolerances (default per dtype).
    """

    def __init__(
        self,
        name: str,
        input_names: list[str],
        result_names: list[str],
        src: str,
        torch_defn: Callable[..., Any],
        metal_params: list[MetalParameter] | None = None,
        helper_src: str | None = None,
        template_dtypes: dict[str, str] | None = None,
        *,
        backward: Callable[..., Any] | None = None,
        setup_context: Callable[..., Any] | None = None,
        check: bool | None = None,
        rtol: float | None = None,
        atol: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not _IDENT.match(name):
            raise ValueError(f"[TorchMetalKernel] the name must be an identifier, got {name!r}")
        input_names, result_names = list(input_names), list(result_names)
        if not result_names:
            raise ValueError("[TorchMetalKernel] result_names must contain at least one entry")
        for label, names in (("input", input_names), ("result", result_names)):
            for n in names:
                if not isinstance(n, str) or not _IDENT.match(n):
                    raise ValueError(f"[TorchMetalKernel] {label} name {n!r} is not an identifier")
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"[TorchMetalKernel] duplicate {label} names: {dup}")
        overlap = sorted(set(input_names) & set(result_names))
        if overlap:
            raise ValueError(
                f"[TorchMetalKernel] names in both input_names and result_names: {overlap}")
        self.name = name
        self.input_names = input_names
        self.result_names = result_names
        self.src = src
        self.torch_defn = torch_defn
        self.metal_params = list(metal_params or [])
        self.helper_src = helper_src or ""
        self.template_dtypes = dict(template_dtypes or {})
        self.check = check
        self.rtol, self.atol = rtol, atol
        for k in self.template_dtypes:
            if k not in input_names:
                raise ValueError(
                    f"[TorchMetalKernel] template_dtypes names '{k}', which is not an input")

        sig = inspect.signature(torch_defn, eval_str=True)
        kinds = []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(
                    "[TorchMetalKernel] torch_defn may not have variadic parameters (*args / "
                    f"**kwargs); got '{p.name}'")
            kind = _annotation_kind(p.annotation)
            if kind is None:
                raise TypeError(
                    "[TorchMetalKernel] torch_defn's parameters must be annotated torch.Tensor, "
                    f"int, float or bool; '{p.name}' is {p.annotation!r}")
            kinds.append(kind)
        if len(kinds) != len(input_names):
            raise ValueError(
                f"[TorchMetalKernel] torch_defn has {len(kinds)} parameters but input_names has "
                f"{len(input_names)}")
        self._kinds = kinds
        self._returns_list = self._check_returns(sig.return_annotation)
        for k, ph in self.template_dtypes.items():
            if kinds[input_names.index(k)] != "Tensor":
                raise ValueError(f"[TorchMetalKernel] template_dtypes: input '{k}' is a scalar")
            if not _IDENT.match(ph):
                raise ValueError(f"[TorchMetalKernel] template_dtypes placeholder {ph!r} is not "
                                 "an identifier")

        self._build_source()
        self._kernel = _core.metal_kernel(
            name, self._mlx_inputs, self._mlx_outputs, self._body, self._header)
        self._n_in, self._n_out = len(input_names), len(result_names)
        self._backward: Callable[..., Any] | None = None
        self._setup_context: Callable[..., Any] | None = None
        #: Run eager calls without torch's dispatcher when nothing else would happen there.
        self.eager_fast_path = True
        self._dtype_cache: dict[tuple, tuple] = {}
        self._shape_arrays: dict[tuple[int, ...], Any] = {}
        self._define_op()
        if backward is not None:
            self.register_autograd(backward, setup_context=setup_context)

    # -- construction helpers ------------------------------------------------------------------

    def _check_returns(self, ann: Any) -> bool:
        n = len(self.result_names)
        if ann is torch.Tensor:
            if n != 1:
                raise ValueError(
                    f"[TorchMetalKernel] torch_defn returns one torch.Tensor but result_names has "
                    f"{n} entries")
            return False
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if origin is list and args == (torch.Tensor,):
            return True
        if origin is tuple and args and all(a is torch.Tensor for a in args):
            if len(args) != n:
                raise ValueError(
                    f"[TorchMetalKernel] torch_defn returns {len(args)} tensors but result_names "
                    f"has {n} entries")
            return False
        raise TypeError(
            "[TorchMetalKernel] torch_defn must be annotated to return torch.Tensor, "
            f"list[torch.Tensor] or tuple[torch.Tensor, ...] (a concrete count); got {ann!r}")

    def _build_source(self) -> None:
        tensor_inputs = [n for n, k in zip(self.input_names, self._kinds) if k == "Tensor"]
        candidates = set(tensor_inputs) | set(self.result_names)
        body, multi = _rewrite_multi_index(self.src, candidates)
        arrays = set(re.findall(r"array\s*<[^;{}]*?>\s*([A-Za-z_]\w*)", self.src))
        views = {n for n in candidates
                 if n in multi or _uses_member(body, n) or _uses_array_index(body, n, arrays)}
        self.tensor_views = sorted(views)
        self._mlx_inputs = []
        prelude = _param_prelude(self.metal_params)
        names = set(self.input_names) | set(self.result_names)
        for p in self.metal_params:
            if p.name in names:
                raise ValueError(
                    f"[TorchMetalKernel] MetalParameter name '{p.name}' is also an input/result")
        for n in self.input_names:
            if n in views:
                buf = f"alloy_in_{n}"
                self._mlx_inputs.append(buf)
                prelude.append(
                    f"const auto {n} = alloy_make_tensor_view({buf}, {buf}_shape, {buf}_ndim);")
            else:
                self._mlx_inputs.append(n)
        self._result_shape_inputs = [n for n in self.result_names if n in views]
        self._mlx_outputs = []
        for n in self.result_names:
            if n in views:
                buf, shp = f"alloy_out_{n}", f"alloy_shape_{n}"
                self._mlx_inputs.append(shp)
                self._mlx_outputs.append(buf)
                prelude.append(
                    f"const auto {n} = alloy_make_tensor_view({buf}, {shp}, int({shp}_shape[0]));")
            else:
                self._mlx_outputs.append(n)
        self._body = "\n".join(prelude) + ("\n" if prelude else "") + body
        self._header = (_TENSOR_HEADER if views else "") + self.helper_src

    def _schema(self) -> str:
        args = [f"{k} {n}" for k, n in zip(self._kinds, self.input_names)]
        # The grid and threadgroup as six SymInt scalars, not lists: torch's autograd wrapper
        # walks list arguments on every call (docs/performance.md).
        args += [f"SymInt threads_per_grid_{c}" for c in "xyz"]
        args += [f"SymInt threads_per_thread_group_{c}" for c in "xyz"]
        args += [f"SymInt[] result_shape_{n}" for n in self.result_names]
        n = len(self.result_names)
        ret = "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
        return f"{self.name}({', '.join(args)}) -> {ret}"

    def _define_op(self) -> None:
        schema = self._schema()
        name = self.name
        with _ops_lock:
            state = _ops.get(name)
            if state is not None:
                if state.schema != schema:
                    raise ValueError(
                        f"[TorchMetalKernel] the op {NAMESPACE}::{name} exists with the schema "
                        f"'{state.schema}'; this kernel's is '{schema}'. Kernel names are op "
                        "names, which torch cannot unregister: choose another name")
                state.kernel = self  # the newest kernel of this name serves the op
                self.op = getattr(getattr(torch.ops, NAMESPACE), name).default
                return
            _LIB.define(schema)
            state = _ops[name] = _OpState(schema, self)
        n_in = len(self.input_names)

        def fake(*args: Any) -> Any:
            res = state.kernel.torch_defn(*args[:n_in])
            res = [res] if isinstance(res, torch.Tensor) else list(res)
            outs = [torch.empty_like(r, memory_format=torch.contiguous_format) for r in res]
            return outs[0] if len(outs) == 1 else tuple(outs)

        def impl(*args: Any) -> Any:
            return state.kernel._run(args)

        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIB)
        if "Tensor" in self._kinds:
            _LIB.impl(name, impl, "CPU")
            _LIB.impl(name, impl, "CUDA")
        else:
            # No tensor argument to dispatch on: runs on the CPU.
            _LIB.impl(name, impl, "CompositeExplicitAutograd")
        self._install_autograd(state)
        self.op = getattr(getattr(torch.ops, NAMESPACE), name).default

    # -- running -----------------------------------------------------------------------------

    def _signature(self, args: Sequence[Any], shapes: Sequence[tuple[int, ...]]) -> tuple:
        """Per input-dtype signature, cached: the result dtypes (from ``torch_defn`` run once on
        meta tensors, which also checks ``result_shapes``) and the template arguments."""
        key = tuple(a.dtype if isinstance(a, torch.Tensor) else type(a) for a in args)
        sig = self._dtype_cache.get(key)
        if sig is not None:
            return sig
        meta = [torch.empty(a.shape, dtype=a.dtype, device="meta")
                if isinstance(a, torch.Tensor) else a for a in args]
        with torch.no_grad():
            res = self.torch_defn(*meta)
        res = [res] if isinstance(res, torch.Tensor) else list(res)
        if len(res) != len(self.result_names):
            raise ValueError(
                f"[TorchMetalKernel] kernel '{self.name}': torch_defn returns {len(res)} "
                f"tensors, result_names has {len(self.result_names)}")
        for r, s, n in zip(res, shapes, self.result_names):
            if tuple(r.shape) != tuple(s):
                raise ValueError(
                    f"[TorchMetalKernel] kernel '{self.name}': result_shapes gives result '{n}' "
                    f"the shape {tuple(s)}, torch_defn gives {tuple(r.shape)}")
        dtypes = [_alloy_dtype(r.dtype, f"result of kernel '{self.name}'") for r in res]
        template = None
        if self.template_dtypes:
            template = [(ph, _alloy_dtype(args[self.input_names.index(k)].dtype, f"input '{k}'"))
                        for k, ph in self.template_dtypes.items()]
        sig = (dtypes, template)
        self._dtype_cache[key] = sig
        return sig

    def _shape_array(self, shape: tuple[int, ...]) -> Any:
        a = self._shape_arrays.get(shape)
        if a is None:
            import numpy as np

            a = _core.array(np.asarray(shape if shape else (1,), dtype=np.int32))
            _core.eval(a)
            if len(self._shape_arrays) < 256:
                self._shape_arrays[shape] = a
        return a

    def _run(self, args: Sequence[Any]) -> Any:
        n_in = self._n_in
        kargs = args[:n_in]
        shapes = [tuple(s) for s in args[n_in + 6:]]
        first = None  # the first tensor input: its device is the call's
        inputs = []
        for a in kargs:
            if isinstance(a, torch.Tensor):
                if first is None:
                    first = a
                elif a.is_cuda != first.is_cuda or (a.is_cuda and a.device != first.device):
                    raise ValueError(
                        f"[TorchMetalKernel] kernel '{self.name}': inputs on {first.device} and "
                        f"{a.device}; all tensors of a call must be on one device")
                cap = _tdl.to_dlpack(a.detach() if a.requires_grad else a)
                inputs.append(_import_stream_ordered(cap) if a.is_cuda else cap)
            else:
                inputs.append(a)
        dtypes, template = self._signature(kargs, shapes)
        for n in self._result_shape_inputs:
            inputs.append(self._shape_array(shapes[self.result_names.index(n)]))
        outs = self._kernel(
            inputs=inputs, output_shapes=shapes, output_dtypes=dtypes, grid=tuple(args[n_in:n_in + 3]),
            threadgroup=tuple(args[n_in + 3:n_in + 6]), template=template,
            stream=_alloy_stream(first.device) if first is not None and first.is_cuda
            else _core.cpu)
        results = [_tdl.from_dlpack(o.__dlpack__(stream=-1)) for o in outs]
        check = _CHECK_DEFAULT if self.check is None else self.check
        if check:
            with torch.no_grad():
                want = self.torch_defn(*kargs)
            want = [want] if isinstance(want, torch.Tensor) else list(want)
            _check_outputs(self.name, self.result_names, results, want, self.rtol, self.atol)
        return results[0] if len(results) == 1 else tuple(results)

    def __call__(
        self,
        *args: Any,
        threads_per_grid: Sequence[int],
        threads_per_thread_group: Sequence[int],
        result_shapes: Sequence[Sequence[int]],
    ) -> Any:
        """Runs the op: ``kernel(*inputs, threads_per_grid=(x, y, z),
        threads_per_thread_group=(x, y, z), result_shapes=[shape, ...])``. The grid counts
        threads (Metal's ``dispatchThreads``). Returns a tensor, or a list (tuple when
        ``torch_defn`` is annotated with a tuple) of them.

        In plain eager mode (no tracing, compiling, dispatch/function modes, functorch
        transforms or gradients to record) the call runs the kernel without going through
        torch's dispatcher; otherwise it calls ``self.op``, which does the same."""
        if len(threads_per_grid) != 3:
            raise ValueError(
                f"[TorchMetalKernel] threads_per_grid must have 3 elements, got "
                f"{threads_per_grid!r}")
        if len(threads_per_thread_group) != 3:
            raise ValueError(
                "[TorchMetalKernel] threads_per_thread_group must have 3 elements, got "
                f"{threads_per_thread_group!r}")
        if len(result_shapes) != self._n_out:
            raise ValueError(
                "[TorchMetalKernel] result_shapes must contain one shape per result; expected "
                f"{self._n_out} (for {self.result_names}), got {len(result_shapes)}")
        if len(args) != self._n_in:
            raise TypeError(
                f"[TorchMetalKernel] kernel '{self.name}' takes {self._n_in} inputs "
                f"({', '.join(self.input_names)}), got {len(args)}")
        if self.eager_fast_path and _plain_eager(args):
            out = self._run((*args, *threads_per_grid, *threads_per_thread_group, *result_shapes))
        else:
            out = self.op(*args, *threads_per_grid, *threads_per_thread_group,
                          *[list(s) for s in result_shapes])
        if self._n_out == 1:
            return out
        return list(out) if self._returns_list else tuple(out)

    # -- autograd ------------------------------------------------------------------------------

    def register_autograd(self, backward: Callable[..., Any],
                          setup_context: Callable[..., Any] | None = None) -> None:
        """Registers a backward with ``torch.library.register_autograd``.

        ``setup_context(ctx, inputs, output)`` receives the kernel's inputs only (not the grid
        arguments); without it the tensor inputs are saved with ``ctx.save_for_backward`` (read
        them back as ``ctx.saved_tensors``) and the scalar inputs as ``ctx.scalars``.
        ``backward(ctx, *grads)`` returns one gradient (or None) per kernel input; it may call
        torch ops or other kernels."""
        if not callable(backward) or (setup_context is not None and not callable(setup_context)):
            raise TypeError("[TorchMetalKernel] backward and setup_context must be callable")
        self._backward, self._setup_context = backward, setup_context

    def _install_autograd(self, state: _OpState) -> None:
        """Registers the op's autograd wrappers once: they call the backward of the op's current
        kernel, and raise NotSupportedError when it has none (never a silent zero gradient)."""
        n_in = self._n_in
        n_extra = 6 + self._n_out
        name = self.name

        def setup(ctx: Any, inputs: tuple, output: Any) -> None:
            kernel = state.kernel
            kin = inputs[:n_in]
            if kernel._setup_context is not None:
                kernel._setup_context(ctx, kin, output)
            else:
                ctx.save_for_backward(*[a for a, k in zip(kin, kernel._kinds) if k == "Tensor"])
                ctx.scalars = [a for a, k in zip(kin, kernel._kinds) if k != "Tensor"]

        def bwd(ctx: Any, *grads: Any) -> tuple:
            kernel = state.kernel
            if kernel._backward is None:
                raise _core.NotSupportedError(
                    f"[TorchMetalKernel] not supported: differentiating kernel '{name}', which "
                    "has no backward (pass backward= or call register_autograd)")
            g = kernel._backward(ctx, *grads)
            if not isinstance(g, (tuple, list)):
                g = (g,)
            if len(g) != n_in:
                raise ValueError(
                    f"[TorchMetalKernel] the backward of '{name}' returned {len(g)} gradients; "
                    f"the kernel has {n_in} inputs")
            return (*g, *([None] * n_extra))

        torch.library.register_autograd(f"{NAMESPACE}::{name}", bwd, setup_context=setup,
                                        lib=_LIB)

    def metal_source(self) -> str:
        """The body and header Alloy compiles (after tensor-style rewriting)."""
        return self._header + "\n// kernel body\n" + self._body

    def __repr__(self) -> str:
        return f"alloy.torch.TorchMetalKernel({self.name!r}, op=torch.ops.{NAMESPACE}.{self.name})"


# ---------------------------------------------------------------------------------------------
# compile_shader (torch.mps.compile_shader)
# ---------------------------------------------------------------------------------------------


class ShaderKernel:
    """One kernel of a :class:`ShaderLibrary`: ``lib.name(*args, threads=, group_size=)``."""

    __slots__ = ("_kernel", "_writable", "name")

    def __init__(self, kernel: Any):
        self._kernel = kernel
        self.name = kernel.name
        self._writable = [p["writable"] for p in kernel.params
                          if p["kind"] in ("buffer", "scalar")]

    def __call__(self, *args: Any, threads: int | Sequence[int] | None = None,
                 group_size: int | Sequence[int] | None = None, **kwargs: Any) -> None:
        """Runs the kernel on torch tensors (and Python numbers for scalars) and writes the new
        contents of the writable buffers into the tensors given, as torch.mps does."""
        device = None
        conv = []
        for a in args:
            if isinstance(a, torch.Tensor):
                if device is None:
                    device = a.device
                elif a.device != device:
                    raise ValueError(
                        f"[compile_shader] kernel '{self.name}': tensors on {device} and "
                        f"{a.device}; all tensors of a call must be on one device")
                conv.append(_to_alloy(a))
            else:
                conv.append(a)
        if device is None:
            device = torch.device("cpu")
        if threads is None and args and isinstance(args[0], torch.Tensor):
            threads = args[0].numel()
        outs = self._kernel(*conv, threads=threads, group_size=group_size,
                            stream=_alloy_stream(device), **kwargs)
        if outs is None:
            return None
        if not isinstance(outs, tuple):
            outs = (outs,)
        targets = [a for a, w in zip(args, self._writable) if w]
        with torch.no_grad():
            for t, o in zip(targets, outs):
                if isinstance(t, torch.Tensor):
                    t.copy_(_to_torch(o).view(t.shape))
        return None

    def __repr__(self) -> str:
        return f"<alloy.torch.ShaderKernel {self._kernel.signature}>"


class ShaderLibrary:
    """What :func:`compile_shader` returns: its kernels are attributes."""

    def __init__(self, library: Any):
        self._library = library
        self._kernels: dict[str, ShaderKernel] = {}

    def __getattr__(self, name: str) -> ShaderKernel:
        if name.startswith("__"):
            raise AttributeError(name)
        k = self._kernels.get(name)
        if k is None:
            k = ShaderKernel(getattr(self._library, name))
            self._kernels[name] = k
        return k

    def __dir__(self) -> list[str]:
        return list(self._library.kernel_names())

    def kernel_names(self) -> list[str]:
        return list(self._library.kernel_names())

    @property
    def library(self) -> Any:
        """The underlying :class:`alloy.Library`."""
        return self._library


def compile_shader(source: str, **options: Any) -> ShaderLibrary:
    """``torch.mps.compile_shader`` on CPU and CUDA tensors: compiles a Metal library (Alloy's
    :func:`alloy.compile_shader`, same keyword options) whose kernels are called by name with
    torch tensors, ``threads=`` (total threads, an int or up to 3) and ``group_size=``, and
    write into the tensors given."""
    return ShaderLibrary(_core.compile_shader(source, **options))
