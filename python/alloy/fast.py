"""``alloy.fast``: the names MLX code spells ``mx.fast.*``.

``alloy.fast.metal_kernel`` is ``alloy.metal_kernel`` (MLX's calling convention), so code written as
``mx.fast.metal_kernel(...)`` reads the same with ``alloy`` in place of ``mx``.
"""
from ._core import metal_kernel

__all__ = ["metal_kernel"]
