"""``alloy.compile``: MLX's ``mx.compile`` for Alloy.

The arguments are flattened (nested tuples, lists and dicts); alloy arrays and NumPy arrays are
the traced inputs, every other leaf (Python numbers, strings, None, ...) is a constant that
selects a separate trace, as in MLX. The arrays go through ``_CompiledArrays`` (C++: trace per
signature of dtypes, devices and shapes unless ``shapeless``; constant folding, common
subexpressions, dead code and elementwise fusion; replay). See docs/compile.md.
"""
import functools
import sys

from ._core import _CompiledArrays, array as _array

__all__ = ["compile"]

_ARRAY = object()  # marks an array leaf in a flattened structure


def _flatten(tree, arrays):
    """Appends the arrays of ``tree`` to ``arrays`` and returns a hashable description of the
    rest (its structure and constant leaves)."""
    if isinstance(tree, _array):
        arrays.append(tree)
        return _ARRAY
    # NumPy is optional for alloy: a NumPy array can only be given where NumPy is imported.
    np = sys.modules.get("numpy")
    if np is not None and isinstance(tree, np.ndarray):
        arrays.append(_array(tree))
        return _ARRAY
    if isinstance(tree, (list, tuple)):
        return (type(tree).__name__, tuple(_flatten(t, arrays) for t in tree))
    if isinstance(tree, dict):
        return ("dict", tuple((k, _flatten(tree[k], arrays)) for k in sorted(tree, key=repr)))
    try:
        hash(tree)
    except TypeError:
        raise TypeError(
            f"compile: argument of type {type(tree).__name__} is neither an array nor hashable; "
            "non-array arguments are constants of the trace and must be hashable"
        ) from None
    return ("const", type(tree).__name__, tree)


def _unflatten(desc, arrays):
    """The structure ``desc`` with its array leaves taken from the iterator ``arrays``."""
    if desc is _ARRAY:
        return next(arrays)
    kind = desc[0]
    if kind == "const":
        return desc[2]
    if kind == "dict":
        return {k: _unflatten(d, arrays) for k, d in desc[1]}
    items = [_unflatten(d, arrays) for d in desc[1]]
    return tuple(items) if kind == "tuple" else items


def _flatten_outputs(out, arrays):
    if isinstance(out, _array):
        arrays.append(out)
        return _ARRAY
    if isinstance(out, (list, tuple)):
        return (type(out).__name__, tuple(_flatten_outputs(o, arrays) for o in out))
    if isinstance(out, dict):
        return ("dict", tuple((k, _flatten_outputs(out[k], arrays)) for k in out))
    raise TypeError(
        f"compile: the function returned a {type(out).__name__}; it must return arrays (or "
        "nested tuples, lists and dicts of arrays)"
    )


@functools.lru_cache(maxsize=None)
def _positional_arrays(n):
    """What _flatten gives for ``n`` positional arrays and no keywords."""
    return ("tuple", (("tuple", (_ARRAY,) * n), ("dict", ())))


class _Compiled:
    def __init__(self, fn, shapeless):
        self._fn = fn
        self._shapeless = bool(shapeless)
        self._by_structure = {}  # argument structure + constants -> (_CompiledArrays, outputs)
        functools.update_wrapper(self, fn)

    def _entry(self, args, kwargs):
        if not kwargs and all(type(a) is _array for a in args):
            # The common call (positional arrays only): no walk over the arguments.
            arrays = list(args)
            desc = _positional_arrays(len(args))
        else:
            arrays = []
            desc = _flatten((args, kwargs), arrays)
        entry = self._by_structure.get(desc)
        if entry is None:
            outputs = {}
            fn = self._fn

            def traced(inputs):
                a, kw = _unflatten(desc, iter(inputs))
                flat = []
                outputs["desc"] = _flatten_outputs(fn(*a, **kw), flat)
                return flat

            entry = (_CompiledArrays(self._shapeless), outputs, traced)
            self._by_structure[desc] = entry
        return entry, arrays

    def __call__(self, *args, **kwargs):
        (compiled, outputs, traced), arrays = self._entry(args, kwargs)
        results = compiled(arrays, traced)  # traces first when the signature is new
        return _unflatten(outputs["desc"], iter(results))

    @property
    def trace_count(self):
        """How many times the function has been traced (one per new input signature)."""
        return sum(entry[0].trace_count for entry in self._by_structure.values())

    def graph(self, *args, **kwargs):
        """The primitives of the compiled graph for these arguments (traced if needed), by label:
        ``["Fused(multiply,exp)"]`` for one fused elementwise chain."""
        (compiled, _, traced), arrays = self._entry(args, kwargs)
        return compiled.graph(arrays, traced)

    def constant_count(self, *args, **kwargs):
        """Number of constants (captured or folded arrays) of the compiled graph."""
        (compiled, _, traced), arrays = self._entry(args, kwargs)
        return compiled.constant_count(arrays, traced)

    def __get__(self, obj, objtype=None):  # methods: bind like a function
        return self if obj is None else functools.partial(self, obj)


def compile(fn=None, shapeless=False):
    """Compile ``fn``: trace it once per input signature into a graph, optimize the graph (constant
    folding, common subexpressions, dead code, chains of elementwise ops fused into one generated
    kernel) and replay it on later calls without calling ``fn`` again.

    Args:
      fn (callable): A function of arrays (and nested tuples, lists and dicts of them; other
        arguments are constants: a new value traces again) returning arrays (or nested tuples,
        lists and dicts of arrays).
      shapeless (bool): One trace serves inputs of any shape (of the same ranks): custom kernels
        must then give their geometry as functions of the input shapes (see ``alloy.ShapeExpr``);
        one with a constant grid raises ``NotSupportedError`` naming it when shapes change. A
        function whose trace holds shapes of its call (it read ``x.shape``, reshapes to a shape,
        slices with negative bounds, takes a gradient of a reduction...) is traced again for
        each new set of shapes, so results always equal calling ``fn``.

    Returns:
      A callable like ``fn`` (``trace_count``, ``graph(...)`` and ``constant_count(...)`` tell
      what was compiled). Usable as a decorator: ``@alloy.compile`` or
      ``@alloy.compile(shapeless=True)``.
    """
    if fn is None:
        return lambda f: _Compiled(f, shapeless)
    if not callable(fn):
        raise TypeError(f"compile: expected a function, got {type(fn).__name__}")
    return _Compiled(fn, shapeless)
