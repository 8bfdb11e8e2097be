"""alloy.grad and alloy.value_and_grad: Python closures over the function (include/alloy/transforms.h
does the work, through alloy._core._grad_call).

They are closures rather than C++ function objects so that Python's garbage collector sees the
reference to ``fun``: a gradient function defined at module level reaches itself through
``fun.__globals__``, a cycle that only the collector can free.
"""

import functools

from . import _core


def _wrap(fun, argnums, argnames, grad_only):
    name = "grad" if grad_only else "value_and_grad"
    if not callable(fun):
        raise TypeError(f"{name}: fun is not callable")
    spec = _core._GradSpec(argnums, argnames, name)  # bad argnums/argnames raise here

    def wrapper(*args, **kwargs):
        return _core._grad_call(fun, spec, grad_only, args, kwargs)

    try:
        functools.update_wrapper(wrapper, fun)
    except AttributeError:  # a callable object without a __dict__: keep the wrapper's names
        pass
    return wrapper


def value_and_grad(fun, argnums=None, argnames=()):
    """A function returning ``(value, grad)``: ``fun``'s result and the gradient of its output
    (a scalar array, or the first element of a returned list/tuple) with respect to the
    positional arguments ``argnums`` (default 0) and keyword arguments ``argnames``. Arguments
    may be nested lists, tuples and dicts of arrays; each gradient has its argument's structure.
    ``argnums`` an int: that argument's gradient; a sequence: a tuple of them; with
    ``argnames``: ``(positional, {name: gradient})``. As ``mlx.core.value_and_grad``."""
    return _wrap(fun, argnums, argnames, False)


def grad(fun, argnums=None, argnames=()):
    """The gradient function of ``fun``: ``value_and_grad`` without the value. As
    ``mlx.core.grad``."""
    return _wrap(fun, argnums, argnames, True)
