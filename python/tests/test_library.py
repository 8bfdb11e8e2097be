"""alloy.compile_shader: whole Metal libraries through Python, against NumPy references.

The library is the one tests/test_library.cpp runs (read from that file, so both sides run the
same text): an elementwise kernel with a scalar, a templated reduction with two host_name
instantiations (one through an MLX-style instantiate_kernel macro), dynamic [[threadgroup(0)]]
memory, shared helpers and a struct parameter, an atomic counter, a 2-D kernel, an in-place
kernel, and a kernel using a feature Alloy does not support (it runs its reference)."""

import re

import numpy as np
import pytest

import alloy
from conftest import REPO


def _cpp_source(name):
    text = (REPO / "tests" / "test_library.cpp").read_text()
    found = re.search(r'constexpr const char\* ' + name + r' = R"\((.*?)\)";', text, re.S)
    assert found, name
    return found.group(1)


LIBRARY = _cpp_source("kLibrarySource")
WRONG = _cpp_source("kWrongSource")
PLACEHOLDER = _cpp_source("kPlaceholderSource")
BROKEN = _cpp_source("kBrokenSource")


def _double(x, y):
    return 2 * np.asarray(x, dtype=np.float32)


@pytest.fixture(scope="module")
def lib():
    return alloy.compile_shader(LIBRARY, references={"sampled_double": _double},
                                name="py_library")


def nan(n, dtype=np.float32):
    return np.full(n, np.nan, dtype=dtype)


def run(kernel, device, *args, **kwargs):
    return kernel(*args, stream=device, **kwargs)


# ---- reflection ------------------------------------------------------------------------------


def test_kernel_names_and_params(lib):
    assert lib.kernel_names() == [
        "scale_add", "row_sum_float", "row_sum_half", "reverse_blocks", "affine_softplus",
        "squash_all", "count_threads", "transpose2d", "clamp_inplace", "sampled_double"]
    assert "scale_add" in lib and "nope" not in lib
    k = lib.scale_add
    assert k.name == "scale_add"
    assert k.arg_names == ["a", "b", "out", "alpha"]
    kinds = [(p["name"], p["kind"], p["dtype"], p["writable"]) for p in k.params]
    assert kinds == [("a", "buffer", alloy.float32, False), ("b", "buffer", alloy.float32, False),
                     ("out", "buffer", alloy.float32, True),
                     ("alpha", "scalar", alloy.float32, False), ("i", "attribute", None, False)]
    assert lib.row_sum_half.function == "row_sum<half>"
    assert lib.row_sum_half.params[0]["dtype"] == alloy.float16
    assert lib["reverse_blocks"].params[2]["kind"] == "threadgroup"
    assert "constant float& alpha [[buffer(3)]]" in k.signature
    with pytest.raises(AttributeError, match="no kernel named 'scale_ad'.*scale_add"):
        lib.scale_ad


# ---- the kernels -----------------------------------------------------------------------------


def test_elementwise_with_scalar(lib, target, rng):
    n = 1000  # not a multiple of the group: a partial last threadgroup
    a = rng.uniform(-2, 2, n).astype(np.float32)
    b = rng.uniform(-2, 2, n).astype(np.float32)
    out = target.put(nan(n))
    r = lib.scale_add(target.put(a), target.put(b), out, 1.5, threads=[n, 1, 1],
                      group_size=[256, 1, 1], stream=target.stream)
    np.testing.assert_allclose(np.asarray(r), 1.5 * a.astype(np.float64) + b, rtol=2e-6, atol=1e-6)
    # Copy-on-write: the array given for `out` is unchanged.
    assert np.isnan(np.asarray(alloy.array(out))).all()
    # Defaults: threads = size of the first array, arguments by name, ints converted.
    r2 = lib.scale_add(target.put(a), target.put(b), alpha=2, out=out, stream=target.stream)
    np.testing.assert_allclose(np.asarray(r2), 2 * a.astype(np.float64) + b, rtol=2e-6, atol=1e-6)
    # NumPy scalars are numbers too.
    r3 = lib.scale_add(a, b, out, np.float32(0.5), stream=target.stream)
    np.testing.assert_allclose(np.asarray(r3), 0.5 * a.astype(np.float64) + b, rtol=2e-6,
                               atol=1e-6)


@pytest.mark.parametrize("name,dtype", [("row_sum_float", np.float32), ("row_sum_half", np.float16)])
def test_templated_reduction(lib, device, rng, name, dtype):
    rows, cols = 5, 300
    x = rng.uniform(-1, 1, (rows, cols)).astype(dtype)
    for group in (256, 96):
        out = run(getattr(lib, name), device, x, nan(rows), cols, threads=(group, rows),
                  group_size=group)
        np.testing.assert_allclose(np.asarray(out), x.astype(np.float64).sum(axis=1), rtol=1e-5,
                                   atol=1e-5)


def test_dynamic_threadgroup_memory(lib, device, rng):
    n, g = 1000, 128
    x = rng.uniform(-1, 1, n).astype(np.float32)
    y = run(lib.reverse_blocks, device, x, nan(n), threads=n, group_size=g,
            threadgroup_memory={0: g * 4})
    want = np.concatenate([x[b:b + g][::-1] for b in range(0, n, g)])
    np.testing.assert_array_equal(np.asarray(y), want)
    with pytest.raises(ValueError, match=r"threadgroup_memory\[0\]"):
        run(lib.reverse_blocks, device, x, nan(n), threads=n, group_size=g)


def test_shared_helpers_and_struct(lib, device, rng):
    n = 777
    x = rng.uniform(-3, 3, n).astype(np.float32)
    params = np.array([0.5, -0.25], dtype=np.float32)  # struct Affine {scale, shift}
    y = run(lib.affine_softplus, device, x, nan(n), params, group_size=64)
    np.testing.assert_allclose(np.asarray(y), np.log1p(np.exp(0.5 * x.astype(np.float64) - 0.25)),
                               rtol=1e-5, atol=1e-6)
    z = run(lib.squash_all, device, x, nan(n))
    np.testing.assert_allclose(np.asarray(z), x, rtol=1e-4, atol=1e-5)


def test_two_dimensional_grid(lib, device, rng):
    rows, cols = 37, 53
    x = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    y = run(lib.transpose2d, device, x, nan((cols, rows)), rows, cols, threads=(cols, rows),
            group_size=(16, 8))
    np.testing.assert_array_equal(np.asarray(y), x.T)


def test_in_place_kernel(lib, device):
    x = np.array([-7, -3, 0, 2, 5, 9, 100, -100], dtype=np.int32)
    r = run(lib.clamp_inplace, device, x, -3, 5)
    np.testing.assert_array_equal(np.asarray(r), np.clip(x, -3, 5))
    assert x[0] == -7  # unchanged
    r2 = run(lib.clamp_inplace, device, r, 0, 3)  # chained, lazily
    np.testing.assert_array_equal(np.asarray(r2), np.clip(x, 0, 3))


# ---- dispatch --------------------------------------------------------------------------------


def test_threads_are_total_threads_not_groups(lib, device):
    """torch.mps.compile_shader's documented pitfall: `threads` counts threads
    (dispatchThreads), not threadgroups."""
    n = 1000
    counter, hits = run(lib.count_threads, device, np.zeros(1, np.uint32),
                        np.zeros(n, np.uint32), threads=n, group_size=256)
    assert int(np.asarray(counter)[0]) == n
    np.testing.assert_array_equal(np.asarray(hits), np.ones(n))
    groups = (n + 255) // 256
    counter, hits = run(lib.count_threads, device, np.zeros(1, np.uint32),
                        np.zeros(n, np.uint32), threads=groups, group_size=256)
    assert int(np.asarray(counter)[0]) == groups  # only 4 threads ran
    assert np.asarray(hits)[groups:].sum() == 0


# ---- errors ----------------------------------------------------------------------------------


def test_argument_errors(lib):
    f32 = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match=r"takes 4 argument\(s\), 2 given"):
        lib.scale_add(f32, f32, stream=alloy.cpu)
    with pytest.raises(ValueError,
                       match="expected an array of float32, got an array of float16"):
        lib.scale_add(f32, f32.astype(np.float16), f32, 1.0, stream=alloy.cpu)
    with pytest.raises(ValueError, match="-1 does not fit in uint"):
        lib.row_sum_float(f32, np.zeros(1, np.float32), -1, stream=alloy.cpu)
    with pytest.raises(TypeError, match="unexpected keyword argument 'beta'"):
        lib.scale_add(f32, f32, f32, beta=1.0, stream=alloy.cpu)
    with pytest.raises(ValueError, match="group_size"):
        lib.scale_add(f32, f32, f32, 1.0, threads=8, group_size=2048, stream=alloy.cpu)
    with pytest.raises(ValueError, match="only a kernel with a reference can infer it"):
        lib.scale_add(f32, f32, None, 1.0, stream=alloy.cpu)


# ---- placeholders ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dtype_placeholders(device, rng, dtype):
    lib = alloy.compile_shader(PLACEHOLDER, template_dtypes={"x": "TYPE"})
    assert lib.axpby.params[0]["placeholder"] == "TYPE"
    n = 500
    x = rng.uniform(-1, 1, n).astype(dtype)
    y = rng.uniform(-1, 1, n).astype(dtype)
    out = run(lib.axpby, device, x, y, np.zeros(n, dtype), 2.0, -0.5, group_size=128)
    assert out.dtype == (alloy.float32 if dtype == np.float32 else alloy.float16)
    want = 2 * x.astype(np.float64) - 0.5 * y.astype(np.float64)
    tol = 2e-6 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(np.asarray(out).astype(np.float64), want, rtol=tol, atol=tol)
    with pytest.raises(ValueError, match="expected an array of float16, got an array of float32"):
        run(lib.axpby, device, x.astype(np.float16), y.astype(np.float32), None, 1.0, 1.0)


# ---- references ------------------------------------------------------------------------------


def test_reference_infers_omitted_outputs(device, rng):
    lib = alloy.compile_shader(LIBRARY, references={"sampled_double": _double},
                               name="py_infer")

    def scale_add_ref(a, b, out, alpha):
        assert out is None
        return np.asarray(alpha) * np.asarray(a) + np.asarray(b)

    lib.scale_add.set_reference(scale_add_ref)
    assert lib.scale_add.has_reference
    a = rng.uniform(-1, 1, 300).astype(np.float32)
    b = rng.uniform(-1, 1, 300).astype(np.float32)
    r = run(lib.scale_add, device, a, b, None, 3.0, group_size=32)
    assert r.shape == (300,) and r.dtype == alloy.float32
    np.testing.assert_allclose(np.asarray(r), 3 * a.astype(np.float64) + b, rtol=2e-6, atol=1e-6)
    r = run(lib.scale_add, device, a, b, alpha=3.0)  # trailing or named: `out` left out
    np.testing.assert_allclose(np.asarray(r), 3 * a.astype(np.float64) + b, rtol=2e-6, atol=1e-6)


def test_fallback_for_unsupported_kernel(device, rng):
    lib = alloy.compile_shader(LIBRARY, references={"sampled_double": _double},
                               name="py_fallback_" + str(device))
    x = rng.uniform(-1, 1, 100).astype(np.float32)
    y = run(lib.sampled_double, device, x, nan(100))
    # Fallback is evaluation-time policy: the reference (and its warning) runs when y is read.
    with pytest.warns(RuntimeWarning, match="sampled_double.*not supported: samplers"):
        y = np.asarray(y)
    np.testing.assert_allclose(np.asarray(y), 2 * x)
    with pytest.raises(alloy.NotSupportedError, match="samplers"):
        run(lib.sampled_double, device, x, nan(100), fallback=False)
    # The library's other kernels run.
    r = run(lib.scale_add, device, x, x, nan(100), 1.0)
    np.testing.assert_allclose(np.asarray(r), 2 * x, rtol=1e-6)
    with pytest.raises(alloy.NotSupportedError):
        alloy.compile_shader(LIBRARY)  # no reference: nothing could run that kernel


def test_fallback_for_kernel_that_does_not_compile(device):
    # Compilation is lazy: the error shows in precompile() or at the kernel's evaluation.
    plain = alloy.compile_shader(BROKEN, name="py_broken_plain")
    with pytest.raises(alloy.CompileError, match="line 8"):
        plain.precompile(stream=device)
    with pytest.raises(alloy.CompileError, match="line 8"):
        np.asarray(run(plain.broken, device, np.arange(4, dtype=np.float32), nan(4)))
    lib = alloy.compile_shader(BROKEN, references={"broken": _double}, name="py_broken")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(run(lib.good, device, x, nan(4))), x + 1)
    # The kernel compiles when it is evaluated: the fallback (and its warning) happens there.
    with pytest.warns(RuntimeWarning, match="no_such_function"):
        y = np.asarray(run(lib.broken, device, x, nan(4)))
    np.testing.assert_array_equal(y, 2 * x)


def test_check_mode(device, rng, monkeypatch):
    lib = alloy.compile_shader(WRONG, references={"twice": _double, "twice_right": _double})
    x = rng.uniform(1, 2, 64).astype(np.float32)
    np.asarray(run(lib.twice, device, x, nan(64), group_size=32))  # wrong, unchecked
    # Check mode is evaluation-time policy: the call records it, reading the result checks.
    checked = run(lib.twice, device, x, nan(64), group_size=32, check=True)
    with pytest.raises(alloy.CheckError) as info:
        np.asarray(checked)
    e = info.value
    assert isinstance(e, alloy.KernelError)
    assert e.kernel == "twice" and e.output == "y" and e.first_index == (37,)
    assert abs(e.max_abs_error - 0.5) < 1e-6
    assert "index (37,)" in str(e)
    np.asarray(run(lib.twice_right, device, x, nan(64), check=True))
    np.asarray(run(lib.twice, device, x, nan(64), check=True, atol=1.0))  # looser tolerance
    monkeypatch.setenv("ALLOY_CHECK", "1")
    with pytest.raises(alloy.CheckError):
        np.asarray(run(lib.twice, device, x, nan(64)))


def test_robust_library_reports_parameter_names():
    src = """
#include <metal_stdlib>
using namespace metal;
[[kernel]] void shift(const device float* src [[buffer(0)]], device float* dst [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
  dst[i] = src[i + 2];
}
"""
    lib = alloy.compile_shader(src, robust=True, name="robust_py")
    alloy.take_out_of_range_reports()
    src_arr = alloy.array(np.array([1, 2, 3, 4], dtype=np.float32))
    dst_arr = alloy.array(np.full(4, 9, dtype=np.float32))
    out = lib.shift(src_arr, dst_arr, threads=[4, 1, 1], group_size=[4, 1, 1], stream=alloy.cpu)
    assert np.asarray(out).tolist() == [3, 4, 0, 0]
    reports = alloy.take_out_of_range_reports()
    assert len(reports) == 2
    assert all(r["buffer"] == "src" for r in reports)


# ---- lazy compilation ------------------------------------------------------------------------


def _many_kernels(count, tag):
    lines = [f"constant int tag = {tag};",
             "template <int N>",
             "[[kernel]] void add_n(device const float* x [[buffer(0)]],",
             "                      device float* y [[buffer(1)]],",
             "                      uint i [[thread_position_in_grid]]) {",
             "  y[i] = x[i] + float(N) + float(tag - tag);",
             "}"]
    lines += [f'template [[host_name("add_{n}")]] [[kernel]] decltype(add_n<{n}>) add_n<{n}>;'
              for n in range(count)]
    return "\n".join(lines)


def test_precompile_and_lazy_first_call(rng):
    tag = int(rng.integers(0, 1 << 30))
    lib = alloy.compile_shader(_many_kernels(300, tag), name="py_lazy")
    assert len(lib.kernel_names()) == 300
    assert [p["name"] for p in lib.add_7.params] == ["x", "y", "i"]  # reflection: no compile
    with pytest.raises(ValueError, match="expected an array of float32"):
        lib.add_7(np.zeros(4, np.int32), nan(4), stream=alloy.cpu)
    x = rng.uniform(-1, 1, 50).astype(np.float32)
    y = np.asarray(lib.add_7(x, nan(50), stream=alloy.cpu))
    np.testing.assert_allclose(y, x + 7, rtol=1e-6)
    small = alloy.compile_shader(_many_kernels(4, tag + 1), name="py_precompiled")
    small.precompile(stream=alloy.cpu)
    small.precompile(stream=alloy.cpu, background=True)  # nothing left to do
    for n in range(4):
        y = np.asarray(getattr(small, f"add_{n}")(x, nan(50), stream=alloy.cpu))
        np.testing.assert_allclose(y, x + n, rtol=1e-6)
    with pytest.raises(ValueError, match="not a dtype placeholder"):
        small.precompile(stream=alloy.cpu, placeholders={"T": alloy.float16})


# A kernel template declared `[[kernel, max_total_threads_per_threadgroup(n)]]` (as MLX's steel and
# winograd kernels are) is a kernel like a `[[kernel]]` one: the unit compiled for some kernels
# leaves the library's others out, so one that cannot compile is not compiled with them.
ATTRIBUTE_LISTS = """
template <typename T, int N>
[[kernel, max_total_threads_per_threadgroup(64)]] void add_n(
    device const T* x [[buffer(0)]], device T* y [[buffer(1)]],
    uint i [[thread_position_in_grid]]) {
  y[i] = x[i] + T(N) + T(tag - tag);
}
template <typename T>
[[kernel, max_total_threads_per_threadgroup(32)]] void never(
    device const T* x [[buffer(0)]], device T* y [[buffer(1)]],
    uint i [[thread_position_in_grid]]) {
  static_assert(sizeof(T) == 0, "compiled though not asked for");
  y[i] = x[i];
}
template [[host_name("add_3")]] [[kernel]] decltype(add_n<float, 3>) add_n<float, 3>;
template [[host_name("add_5")]] [[kernel]] decltype(add_n<float, 5>) add_n<float, 5>;
template [[host_name("never_float")]] [[kernel]] decltype(never<float>) never<float>;
"""


def test_attribute_list_kernels_compile_alone(device, rng):
    tag = int(rng.integers(0, 1 << 30))  # a source of this run: the compile cache holds none
    lib = alloy.compile_shader(f"constant int tag = {tag};\n" + ATTRIBUTE_LISTS,
                               name="py_attribute_lists")
    assert sorted(lib.kernel_names()) == ["add_3", "add_5", "never_float"]
    lib.precompile(stream=device, kernels=["add_3"])
    x = rng.uniform(-1, 1, 100).astype(np.float32)
    for n in (3, 5):  # add_5 compiles at its first call, also without never_float
        y = np.asarray(run(getattr(lib, f"add_{n}"), device, x, nan(100), threads=100,
                           group_size=64))
        np.testing.assert_allclose(y, x + n, rtol=1e-6)
    with pytest.raises(alloy.CompileError, match="compiled though not asked for"):
        lib.precompile(stream=device, kernels=["never_float"])
