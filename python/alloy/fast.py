"""``alloy.fast``: the names MLX code spells ``mx.fast.*``.

``alloy.fast.metal_kernel`` is ``alloy.metal_kernel`` (MLX's calling convention), so code written as
``mx.fast.metal_kernel(...)`` reads the same with ``alloy`` in place of ``mx``. ``rms_norm``,
``layer_norm``, ``rope`` and ``scaled_dot_product_attention`` are MLX's transformer ops with MLX's
signatures (one primitive each: they export, import from ``.mlxfn`` files and differentiate;
docs/fast.md).
"""
from ._core import metal_kernel
from ._core import _fast

rms_norm = _fast.rms_norm
layer_norm = _fast.layer_norm
rope = _fast.rope
scaled_dot_product_attention = _fast.scaled_dot_product_attention

__all__ = ["metal_kernel", "rms_norm", "layer_norm", "rope", "scaled_dot_product_attention"]
