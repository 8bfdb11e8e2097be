"""Random numbers with explicit keys, as ``mlx.core.random`` (MLX's values bit for bit:
threefry 2x32 in MLX's counter layout; ``normal`` within the last bits of erfinv).

    k = alloy.random.key(0)
    k1, k2 = alloy.random.split(k)
    x = alloy.random.normal((3, 4), key=k1)
"""

from ._core import random as _random

seed = _random.seed
key = _random.key
split = _random.split
uniform = _random.uniform
normal = _random.normal
bernoulli = _random.bernoulli
randint = _random.randint
bits = _random.bits

__all__ = ["seed", "key", "split", "uniform", "normal", "bernoulli", "randint", "bits"]
