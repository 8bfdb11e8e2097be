"""MLX on Linux: ``mx.fast.metal_kernel`` runs through Alloy in MLX builds without Metal.

    import alloy.mlx          # installs: mx.fast.metal_kernel now builds Alloy kernels
    import mlx.core as mx

    kernel = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                                  source='''
        uint elem = thread_position_in_grid.x;
        T tmp = inp[elem];
        out[elem] = metal::exp(tmp);
    ''')
    a = mx.random.normal((4, 16)).astype(mx.float16)
    out = kernel(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1),
                 threadgroup=(256, 1, 1), output_shapes=[a.shape],
                 output_dtypes=[a.dtype])[0]          # an mx.array

Importing this module calls :func:`install`, which replaces the attribute ``metal_kernel`` of
``mlx.core.fast`` (so ``mx.fast.metal_kernel`` and a later ``from mlx.core.fast import
metal_kernel`` see Alloy's) and the same name in already imported modules that hold MLX's own
function (``from mlx.core.fast import metal_kernel`` done before). Kernels that MLX itself
constructed before the install stay MLX's: import ``alloy.mlx`` before the model code that builds
kernels at import time. In builds with Metal (macOS) nothing is replaced unless ``force=True``.

Semantics (see docs/mlx.md):

- A call evaluates its MLX inputs, runs the kernel at once and returns ``mx.array`` outputs
  (not lazy). Inputs are shared with Alloy without a copy (DLPack); outputs are copied once into
  MLX memory, because MLX cannot adopt memory it did not allocate (``mx.from_dlpack(...,
  copy=False)`` refuses CPU memory in mlx 0.32).
- Device rule: ``stream=mx.gpu`` (or a GPU stream/device) and no ``stream`` run on Alloy's GPU
  when there is one, else on the CPU; ``stream=mx.cpu`` runs on the CPU.
- Errors are MLX's types: ``ValueError`` for bad arguments (a threadgroup above the kernel's
  limit included), ``TypeError`` for wrong argument types, ``RuntimeError`` (``alloy.KernelError``)
  when a kernel does not compile or fails.
- Under ``mx.compile`` or ``mx.vmap`` tracing, where inputs have no values yet, a call raises
  ``alloy.NotSupportedError`` naming the kernel. ``mx.grad`` / ``mx.vjp`` through
  ``mx.custom_function`` with a kernel-based vjp work; differentiating through a bare kernel
  call raises ``alloy.NotSupportedError`` (a kernel has no derivative, as in MLX).
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import mlx.core as mx

from . import _core

__all__ = ["MetalKernel", "metal_kernel", "install", "uninstall", "installed", "device_for"]

# mx.Dtype -> alloy.Dtype (MLX has no float64 on the GPU, but the CPU build has it).
_DTYPES = {
    mx.bool_: _core.bool_,
    mx.int8: _core.int8,
    mx.int16: _core.int16,
    mx.int32: _core.int32,
    mx.int64: _core.int64,
    mx.uint8: _core.uint8,
    mx.uint16: _core.uint16,
    mx.uint32: _core.uint32,
    mx.uint64: _core.uint64,
    mx.float16: _core.float16,
    mx.bfloat16: _core.bfloat16,
    mx.float32: _core.float32,
    mx.float64: _core.float64,
    mx.complex64: _core.complex64,
}

# The message MLX raises when something evaluates during compile/vmap tracing.
_TRACING_MESSAGE = "function transformations"


def _to_alloy_dtype(dtype: Any, what: str) -> Any:
    try:
        return _DTYPES[dtype]
    except (KeyError, TypeError):
        raise TypeError(
            f"[metal_kernel] Expected `{what}` to hold mlx.core.Dtype values, got "
            f"{type(dtype).__name__} ({dtype!r})."
        ) from None


def device_for(stream: Any = None) -> Any:
    """The Alloy device a kernel call with MLX's ``stream`` argument runs on.

    ``mx.gpu``, a GPU ``mx.Device`` or ``mx.Stream``, and ``None`` give Alloy's GPU when one is
    available, else the CPU (MLX code passes ``mx.gpu`` for "the accelerator", also in builds
    where MLX has none); ``mx.cpu`` and CPU devices/streams give the CPU.
    """
    if stream is None:
        kind = mx.DeviceType.gpu
    elif isinstance(stream, mx.DeviceType):
        kind = stream
    elif isinstance(stream, mx.Device):
        kind = stream.type
    elif isinstance(stream, mx.Stream):
        kind = stream.device.type
    else:
        raise TypeError(
            "[metal_kernel] Expected `stream` to be an mlx.core.Stream, Device or DeviceType "
            f"(mx.gpu, mx.cpu), got {type(stream).__name__}."
        )
    if kind == mx.DeviceType.gpu and _core.is_available(_core.gpu):
        return _core.gpu
    return _core.cpu


def _to_mlx(out: Any) -> mx.array:
    """An mx.array holding the values of the (evaluated) Alloy array `out`: one copy."""
    if out.device.type != _core.DeviceType.cpu:
        out = out.to(_core.cpu)
    return mx.from_dlpack(out)


class MetalKernel:
    """What ``mx.fast.metal_kernel`` returns once :func:`install` ran: call it with MLX's keywords.

    Wraps an :class:`alloy.MetalKernel` (``.kernel``), which compiles once per dtypes and template
    arguments and caches the result.
    """

    __slots__ = ("kernel", "name")

    def __init__(self, kernel: Any, name: str):
        self.kernel = kernel
        self.name = name

    def __repr__(self) -> str:
        return f"alloy.mlx.MetalKernel(name={self.name!r})"

    def __call__(
        self,
        *,
        inputs: Sequence[Any],
        output_shapes: Sequence[Sequence[int]],
        output_dtypes: Sequence[mx.Dtype],
        grid: tuple[int, int, int],
        threadgroup: tuple[int, int, int],
        template: Sequence[tuple[str, Any]] | None = None,
        init_value: float | None = None,
        verbose: bool = False,
        stream: Any = None,
    ) -> list[mx.array]:
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(
                "[metal_kernel] Expected `inputs` to be a list of arrays or scalars, got "
                f"{type(inputs).__name__}."
            )
        pending = [x for x in inputs if isinstance(x, mx.array)]
        if pending:
            try:
                mx.eval(pending)
            except ValueError as e:
                if _TRACING_MESSAGE not in str(e):
                    raise
                raise _core.NotSupportedError(
                    f"[metal_kernel] not supported: kernel '{self.name}' called under "
                    "mx.compile or mx.vmap tracing. alloy.mlx runs kernels eagerly and the "
                    "traced inputs have no values yet; call it outside the compiled function "
                    "(see docs/mlx.md)."
                ) from None
        if not isinstance(output_dtypes, (list, tuple)):
            raise TypeError("[metal_kernel] Expected `output_dtypes` to be a list of dtypes.")
        dtypes = [_to_alloy_dtype(d, "output_dtypes") for d in output_dtypes]
        args = None
        if template is not None:
            args = []
            for item in template:
                if not isinstance(item, (list, tuple)) or len(item) != 2:
                    raise TypeError(
                        "[metal_kernel] Expected `template` to be a list of (name, value) tuples."
                    )
                name, value = item
                # As MLX: bool before int (True is an int), then Dtype.
                if isinstance(value, (bool, int)):
                    args.append((name, value))
                elif isinstance(value, mx.Dtype):
                    args.append((name, _DTYPES[value]))
                else:
                    raise ValueError(
                        "[metal_kernel] Invalid template argument. Must be `mlx.core.Dtype`, "
                        "`int` or `bool`."
                    )
        outs = self.kernel(
            inputs=inputs,
            output_shapes=output_shapes,
            output_dtypes=dtypes,
            grid=grid,
            threadgroup=threadgroup,
            template=args,
            init_value=init_value,
            verbose=verbose,
            stream=device_for(stream),
        )
        _core.eval(outs)
        results = [_to_mlx(o) for o in outs]
        if not pending:
            return results
        # Tie the outputs to the inputs in MLX's graph through a function whose vjp/jvp raise:
        # differentiating through the kernel without a custom vjp is an error naming it (MLX
        # raises there too: its CustomKernel primitive has no vjp), not a silent zero gradient.
        # Inside mx.custom_function the user's vjp replaces this one.
        tied = mx.custom_function(lambda *_: results)
        tied.vjp(self._no_derivative)
        tied.jvp(self._no_derivative)
        return tied(*pending)

    def _no_derivative(self, *_):
        raise _core.NotSupportedError(
            f"[metal_kernel] not supported: differentiating through kernel '{self.name}'. A "
            "custom kernel has no derivative (as in MLX): wrap the call in mx.custom_function "
            "and give it a vjp (see docs/mlx.md)."
        )


def metal_kernel(
    name: str,
    input_names: Sequence[str],
    output_names: Sequence[str],
    source: str,
    header: str = "",
    ensure_row_contiguous: bool = True,
    atomic_outputs: bool = False,
    compile_options: dict[str, str] | None = None,
) -> MetalKernel:
    """``mx.fast.metal_kernel`` with Alloy underneath: same arguments, same call convention."""
    kernel = _core.metal_kernel(
        name,
        list(input_names),
        list(output_names),
        source,
        header,
        ensure_row_contiguous,
        atomic_outputs,
        compile_options,
    )
    return MetalKernel(kernel, name)


_original: Any = None  # MLX's own metal_kernel while installed


def installed() -> bool:
    """Whether ``mx.fast.metal_kernel`` is currently Alloy's."""
    return mx.fast.metal_kernel is metal_kernel


def install(force: bool = False) -> bool:
    """Makes ``mx.fast.metal_kernel`` Alloy's, unless MLX has Metal (then only with ``force``).

    Replaces the attribute of ``mlx.core.fast`` and, in every module already imported, a global
    that *is* MLX's function (left by ``from mlx.core.fast import metal_kernel``). Kernel objects
    that MLX built before this call cannot be converted (MLX keeps no source in them): build
    kernels after the install. Returns True when Alloy's function is installed.
    """
    global _original
    if installed():
        return True
    if mx.metal.is_available() and not force:
        return False
    _original = mx.fast.metal_kernel
    _replace(_original, metal_kernel)
    return True


def uninstall() -> None:
    """Puts MLX's own ``metal_kernel`` back where :func:`install` replaced it."""
    global _original
    if _original is None:
        return
    _replace(metal_kernel, _original)
    _original = None


def _replace(old: Any, new: Any) -> None:
    mx.fast.metal_kernel = new
    for module in list(sys.modules.values()):
        if module is None or module is sys.modules[__name__]:
            continue
        namespace = getattr(module, "__dict__", None)
        if namespace is not None and namespace.get("metal_kernel", None) is old:
            namespace["metal_kernel"] = new


install()
