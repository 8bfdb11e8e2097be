"""A catalogue of bad calls through the Python API (issue 16, docs/reliability.md).

Each entry names what is wrong; the test asserts the exception type the API documents, the key
words of its message, and that the next good call still works. The C++ side is
tests/test_bad_input.cpp."""

import numpy as np
import pytest

import alloy

COPY = "uint i = thread_position_in_grid.x; y[i] = x[i];"
AXPY = """
kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] += a * x[i];
}"""
TG = """
kernel void tg(device float* y [[buffer(0)]], threadgroup float* s [[threadgroup(0)]],
               uint i [[thread_position_in_grid]]) { s[0] = 1; y[i] = s[0]; }"""

X = np.array([1.5, -2.25, 3.0, 0.125], np.float32)


def metal(source=COPY, header="", inputs=None, **kw):
    k = alloy.metal_kernel(name="py_bad", input_names=["x"], output_names=["y"], source=source,
                           header=header)
    args = dict(inputs=[X] if inputs is None else inputs, grid=(4, 1, 1), threadgroup=(4, 1, 1),
                output_shapes=[(4,)], output_dtypes=[alloy.float32], stream=alloy.cpu)
    args.update(kw)
    return np.asarray(k(**args)[0])


def lib_call(source=AXPY, kernel="axpy", args=(), **kw):
    lib = alloy.compile_shader(source, name="py_bad_lib")
    out = getattr(lib, kernel)(*args, stream=alloy.cpu, **kw)
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


class Producer:
    """A DLPack producer whose __dlpack__ raises its own exception."""

    def __dlpack__(self, stream=None, max_version=None):
        raise RuntimeError("producer is out of order")

    def __dlpack_device__(self):
        return (1, 0)


def used_capsule():
    cap = np.arange(3, dtype=np.float32).__dlpack__()
    alloy.array(cap)
    return cap


CASES = [
    # ---- metal_kernel: call options
    ("output_shapes of the wrong length", lambda: metal(output_shapes=[(4,), (4,)]),
     ValueError, ["output_shapes"]),
    ("output_dtypes of the wrong length", lambda: metal(output_dtypes=[]),
     ValueError, ["output_dtypes"]),
    ("negative grid", lambda: metal(grid=(-4, 1, 1)), ValueError, ["grid", "-4"]),
    ("threadgroup of 0", lambda: metal(threadgroup=(0, 1, 1)), ValueError, ["threadgroup"]),
    ("threadgroup over 1024", lambda: metal(threadgroup=(64, 32, 1)), ValueError, ["1024"]),
    ("grid past the thread limit", lambda: metal(grid=(2**31 - 1,) * 3),
     ValueError, ["ALLOY_MAX_GRID_THREADS"]),
    ("output shape whose element count overflows", lambda: metal(output_shapes=[(2**62, 4)]),
     ValueError, ["overflows"]),
    ("negative output dimension", lambda: metal(output_shapes=[(-3,)]),
     ValueError, ["negative dimension"]),
    ("4 EiB output", lambda: metal(output_shapes=[(2**60,)]),
     MemoryError, ["cannot allocate", "4611686018427387904 bytes"]),
    ("wrong number of inputs", lambda: metal(inputs=[X, X]), ValueError, ["inputs"]),
    ("unknown dtype", lambda: metal(output_dtypes=["float128"]), ValueError, ["float128"]),
    ("input that is not an array", lambda: metal(inputs=[object()]),
     TypeError, ["cannot make an alloy array", "object"]),
    ("bad math_mode", lambda: alloy.metal_kernel(
        name="k", input_names=["x"], output_names=["y"], source=COPY,
        compile_options={"math_mode": "reckless"}), ValueError, ["math_mode"]),
    # ---- metal_kernel: sources
    ("unclosed [[ in a body", lambda: metal("uint i [[thread_position_in_grid;\ny[0] = x[0];"),
     ValueError, ["unterminated [[attribute]]"]),
    ("unterminated /* in a body", lambda: metal("y[0] = x[0]; /* never closed"),
     ValueError, ["unterminated /* comment"]),
    ("undeclared identifier", lambda: metal("y[0] = x[0] + nope;"),
     alloy.CompileError, ["py_bad", "nope"]),
    ("texture in a body", lambda: metal("texture2d<float> t; y[0] = x[0];"),
     alloy.NotSupportedError, ["not supported", "textures"]),
    ("#include of a user header", lambda: metal(header='#include "mine.h"\n'),
     alloy.NotSupportedError, ["mine.h"]),
    ("macro bomb under a small compile memory limit", None,
     alloy.CompileError, ["compile memory limit", "ALLOY_COMPILE_MEMORY_MB"]),
    # ---- compile_shader: sources
    ("no kernel in a library", lambda: alloy.compile_shader("float f(float x) { return x; }"),
     ValueError, ["no kernel function found"]),
    ("two parameters on [[buffer(0)]]", lambda: alloy.compile_shader(
        "kernel void k(device float* a [[buffer(0)]], device float* b [[buffer(0)]]) {}"),
     ValueError, ["[[buffer(0)]]", "once"]),
    ("[[buffer(99)]]", lambda: alloy.compile_shader(
        "kernel void k(device float* a [[buffer(99)]]) {}"), ValueError, ["between 0 and 47"]),
    ("max_total_threads_per_threadgroup(99999999999)", lambda: alloy.compile_shader(
        "[[kernel]] [[max_total_threads_per_threadgroup(99999999999)]] "
        "void k(device float* a [[buffer(0)]]) {}"),
     ValueError, ["max_total_threads_per_threadgroup", "between 1 and 1024"]),
    ("max_total_threads_per_threadgroup(abc)", lambda: alloy.compile_shader(
        "[[kernel]] [[max_total_threads_per_threadgroup(abc)]] "
        "void k(device float* a [[buffer(0)]]) {}"),
     ValueError, ["(abc)", "integer"]),
    ("unterminated /* in a library", lambda: alloy.compile_shader(
        "/* a comment\nkernel void k(device float* y [[buffer(0)]]) {}"),
     ValueError, ["unterminated /* comment"]),
    ("unclosed [[ in a library", lambda: alloy.compile_shader(
        "kernel void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid) {}"),
     ValueError, ["unterminated"]),
    ("kernel returning int", lambda: alloy.compile_shader(
        "kernel int k(device float* y [[buffer(0)]]) { return 0; }"),
     ValueError, ["must return void"]),
    ("compile error in a library", lambda: lib_call(  # compiles at evaluation (lazy)
        "kernel void k(device float* y [[buffer(0)]]) { y[0] = zzz; }", "k",
        (np.zeros(4, np.float32),)),
     alloy.CompileError, ["zzz"]),
    # ---- library calls
    ("unknown kernel", lambda: lib_call(kernel="axpby", args=(X, X, 2.0)),
     AttributeError, ["axpby"]),
    ("unexpected keyword", lambda: lib_call(args=(X, X, 2.0), alpha=3),
     TypeError, ["unexpected keyword argument 'alpha'"]),
    ("negative threads", lambda: lib_call(args=(X, X, 2.0), threads=-1),
     ValueError, ["threads"]),
    ("group_size of 0", lambda: lib_call(args=(X, X, 2.0), group_size=0),
     ValueError, ["group_size"]),
    ("threads past the thread limit",
     lambda: lib_call(args=(X, X, 2.0), threads=(2**31 - 1, 2**31 - 1, 1)),
     ValueError, ["ALLOY_MAX_GRID_THREADS"]),
    ("threadgroup_memory={'a': 1}",
     lambda: lib_call(TG, "tg", (np.zeros(4, np.float32),), threadgroup_memory={"a": 1}),
     TypeError, ["threadgroup_memory", "keys must be ints", "str"]),
    ("threadgroup_memory={0: 'big'}",
     lambda: lib_call(TG, "tg", (np.zeros(4, np.float32),), threadgroup_memory={0: "big"}),
     TypeError, ["threadgroup_memory", "values must be ints"]),
    ("threadgroup_memory={9: 16}",
     lambda: lib_call(TG, "tg", (np.zeros(4, np.float32),), threadgroup_memory={9: 16}),
     ValueError, ["threadgroup_memory", "0 to 7"]),
    ("threadgroup_memory={0: -1}",
     lambda: lib_call(TG, "tg", (np.zeros(4, np.float32),), threadgroup_memory={0: -1}),
     ValueError, ["threadgroup_memory", ">= 0"]),
    ("threadgroup_memory as a list",
     lambda: lib_call(TG, "tg", (np.zeros(4, np.float32),), threadgroup_memory=[16]),
     TypeError, ["threadgroup_memory", "dict"]),
    # ---- arrays and interop
    ("zeros((2**32, 2**32, 4))", lambda: alloy.zeros((2**32, 2**32, 4)),
     ValueError, ["overflows", "(4294967296, 4294967296, 4)"]),
    ("zeros with a negative dimension", lambda: alloy.zeros((2, -1)),
     ValueError, ["negative dimension"]),
    ("a reused DLPack capsule", lambda: alloy.array(used_capsule()),
     ValueError, ["DLPack capsule", "already"]),
    ("a capsule that is not DLPack", lambda: alloy.array(
        __import__("datetime").datetime_CAPI), TypeError, ["PyCapsule", "not a DLPack tensor"]),
    ("a producer whose __dlpack__ raises", lambda: alloy.array(Producer()),
     TypeError, ["__dlpack__()", "RuntimeError"]),
]


def good_call():
    np.testing.assert_array_equal(metal(), X)


def _macro_bomb(monkeypatch):
    header = "#define X0 1\n" + "".join(
        f"#define X{i} X{i - 1}+X{i - 1}\n" for i in range(1, 35))
    monkeypatch.setenv("ALLOY_COMPILE_MEMORY_MB", "1000")
    metal("y[0] = x[0] + X34;", header=header)


def test_catalogue_size():
    assert len(CASES) >= 40


@pytest.mark.parametrize("what,call,exc,words", CASES, ids=[c[0] for c in CASES])
def test_bad_call(what, call, exc, words, monkeypatch):
    with pytest.raises(exc) as info:
        if call is None:
            _macro_bomb(monkeypatch)
        else:
            call()
    message = str(info.value)
    for w in words:
        assert w in message, f"{w!r} not in {message!r}"
    monkeypatch.undo()
    good_call()


def test_producer_exception_is_chained():
    with pytest.raises(TypeError) as info:
        alloy.array(Producer())
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "producer is out of order" in str(info.value.__cause__)
    good_call()
