"""Streams as MLX has them: new_stream / default_stream / synchronize(stream) / stream= on calls,
async_eval handing CPU work to a stream's worker, cross-stream dependencies, errors of queued
work surfacing at synchronize, and external CUDA streams (PyTorch's current stream)."""

import numpy as np
import pytest

import alloy

AXPB = """
    uint i = thread_position_in_grid.x;
    out[i] = a[i] * 2.0f + b[i];
"""


def axpb(a, b, stream):
    k = alloy.metal_kernel(name="axpb", input_names=["a", "b"], output_names=["out"], source=AXPB)
    return k(inputs=[a, b], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
             output_shapes=[a.shape], output_dtypes=[alloy.float32], stream=stream)[0]


def test_streams_are_mlx_like():
    d = alloy.default_stream(alloy.cpu)
    assert d.device == alloy.cpu and alloy.default_stream(alloy.cpu) == d
    s = alloy.new_stream(alloy.cpu)
    assert s != d and s.device == alloy.cpu and hash(s) != hash(d)
    assert isinstance(alloy.Stream(alloy.cpu), alloy.Stream)
    assert "Stream(" in repr(s)


def test_two_cpu_streams_with_cross_dependencies(rng):
    a, b, c = (rng.uniform(-2, 2, size=(1 << 15,)).astype(np.float32) for _ in range(3))
    s1, s2 = alloy.new_stream(alloy.cpu), alloy.new_stream(alloy.cpu)
    x = axpb(alloy.array(a), alloy.array(b), s1)
    y = axpb(alloy.array(c), x, s2)
    z = axpb(y, x, s1)
    alloy.async_eval(z)
    rx = a.astype(np.float64) * 2 + b
    ry = c.astype(np.float64) * 2 + rx
    np.testing.assert_allclose(np.asarray(z), ry * 2 + rx, rtol=1e-5, atol=1e-5)
    alloy.synchronize(s1)
    alloy.synchronize(s2)


def test_failing_kernel_surfaces_at_synchronize_and_stream_stays_usable(rng):
    bad = alloy.metal_kernel(name="broken_on_stream", input_names=["a"], output_names=["out"],
                             source="uint i = thread_position_in_grid.x; out[i] = a[i] + nope;")
    s = alloy.new_stream(alloy.cpu)
    a = rng.uniform(-1, 1, size=(64,)).astype(np.float32)
    out = bad(inputs=[a], grid=(64, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(64,)],
              output_dtypes=[alloy.float32], stream=s)[0]
    alloy.async_eval(out)
    with pytest.raises(alloy.CompileError, match="broken_on_stream"):
        alloy.synchronize(s)
    alloy.synchronize(s)  # reported once
    with pytest.raises(alloy.CompileError):
        np.asarray(out)
    good = axpb(alloy.array(a), alloy.array(a), s)
    alloy.async_eval(good)
    alloy.synchronize(s)
    np.testing.assert_allclose(np.asarray(good), a.astype(np.float64) * 3, rtol=1e-6)


@pytest.mark.skipif(not alloy.is_available(alloy.gpu), reason="no CUDA GPU")
def test_gpu_and_cpu_streams_with_cross_dependencies(rng):
    a, b = (rng.uniform(-2, 2, size=(1 << 15,)).astype(np.float32) for _ in range(2))
    g = alloy.new_stream(alloy.gpu)
    c = alloy.new_stream(alloy.cpu)
    x = axpb(alloy.array(a, device=alloy.gpu), alloy.array(b, device=alloy.gpu), g)
    xc = x.to(alloy.cpu)
    y = axpb(xc, xc, c)
    w = axpb(y.to(alloy.gpu), x, None)
    alloy.async_eval(w)
    rx = a.astype(np.float64) * 2 + b
    np.testing.assert_allclose(np.asarray(w), (rx * 3) * 2 + rx, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not alloy.is_available(alloy.gpu), reason="no CUDA GPU")
def test_external_torch_stream(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    ts = torch.cuda.Stream()
    s = alloy.cuda.stream_from_handle(ts.cuda_stream)
    assert alloy.cuda.stream_handle(s) == ts.cuda_stream
    a = rng.uniform(-1, 1, size=(4096,)).astype(np.float32)
    with torch.cuda.stream(ts):
        t = torch.from_numpy(a).cuda() * 3  # torch's work on ts
        out = axpb(alloy.from_dlpack(t), alloy.from_dlpack(t), s)  # Alloy's, after it on ts
        alloy.eval(out)
    ts.synchronize()
    np.testing.assert_allclose(np.asarray(out), a.astype(np.float64) * 9, rtol=1e-5)


def test_gpu_indices_follow_what_cuda_shows():
    n = alloy.cuda.device_count()
    assert alloy.is_available(alloy.Device(alloy.gpu, 0)) == (n > 0)
    missing = alloy.Device(alloy.gpu, n)
    assert not alloy.is_available(missing)
    for call in (lambda: alloy.new_stream(missing), lambda: alloy.default_stream(missing),
                 lambda: alloy.set_default_device(missing),
                 lambda: alloy.array(np.ones(3, np.float32), device=missing)):
        with pytest.raises(ValueError, match="not available|no GPU"):
            call()


@pytest.mark.skipif(alloy.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpus(rng):
    g0, g1 = alloy.Device(alloy.gpu, 0), alloy.Device(alloy.gpu, 1)
    a, b = (rng.uniform(-2, 2, size=(1 << 14,)).astype(np.float32) for _ in range(2))
    x1 = axpb(alloy.array(a, device=g0).to(g1), alloy.array(b, device=g1), alloy.new_stream(g1))
    assert x1.device == g1
    x0 = axpb(x1.to(g0), alloy.array(a, device=g0), None)
    r1 = a.astype(np.float64) * 2 + b
    np.testing.assert_allclose(np.asarray(x0), r1 * 2 + a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(x1), r1, rtol=1e-5, atol=1e-5)
    assert alloy.cuda.memory_stats(1)["active_bytes"] > 0
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() >= 2:  # a tensor on cuda:1 in, on its own stream
        t = torch.from_numpy(a).to("cuda:1")
        with torch.cuda.device(1):
            s = alloy.cuda.stream_from_handle(torch.cuda.current_stream(1).cuda_stream, 1)
            out = axpb(alloy.from_dlpack(t), alloy.from_dlpack(t), s)
            assert out.device == g1
            np.testing.assert_allclose(np.asarray(out), a.astype(np.float64) * 3, rtol=1e-5)


WORKER_RELEASE = r"""
import sys, time
import numpy as np
import alloy
k = alloy.metal_kernel(name="twice", input_names=["x"], output_names=["y"],
                       source="uint i = thread_position_in_grid.x; y[i] = x[i] * 2.0f;")
s = alloy.new_stream(alloy.cpu)
n = 64
kw = dict(grid=(n, 1, 1), threadgroup=(n, 1, 1), output_shapes=[(n,)],
          output_dtypes=[alloy.float32], stream=s)
lazy = k(inputs=[alloy.array(np.ones(n, np.float32))], **kw)[0]  # never evaluated
rng = np.random.default_rng(int(sys.argv[2]))
t0, i, last = time.time(), 0, None
while time.time() - t0 < float(sys.argv[1]):
    x = rng.uniform(-1, 1, n).astype(np.float32)  # imported without a copy
    out = k(inputs=[x], **kw)[0]
    alloy.async_eval(out)  # run by the stream's worker
    if i % 1000 == 0:
        last = (out, x.astype(np.float64) * 2)
    del x, out  # the op holds the last reference to the imported memory
    for _ in range(20):
        lazy.shape  # the graph mutex, taken with the GIL held
    i += 1
alloy.synchronize(s)
np.testing.assert_allclose(np.asarray(last[0]), last[1], rtol=1e-6)
print("calls", i)
"""


def test_worker_releasing_imported_inputs_while_python_reads_shapes(tmp_path, rng):
    """A stream worker dropping the last reference to a NumPy input (which takes the GIL) while
    the main thread, holding the GIL, reads `.shape` of a lazy array (the graph mutex): the
    worker releases inputs after the graph mutex, so this does not deadlock (it did within a
    second before). Run in a child process so that a deadlock fails the test instead of hanging
    it."""
    import subprocess
    import sys

    script = tmp_path / "worker_release.py"
    script.write_text(WORKER_RELEASE)
    r = subprocess.run([sys.executable, str(script), "3", str(int(rng.integers(1 << 30)))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.split()[-1]) > 0


EXIT_WITH_QUEUED_WORK = """
import sys
import numpy as np
import alloy

k = alloy.fast.metal_kernel(name="exit_queued", input_names=["inp"], output_names=["out"],
                            source="uint i = thread_position_in_grid.x; out[i] = exp(inp[i]) * 2.0f;")
s = alloy.new_stream(alloy.cpu)
rng = np.random.default_rng(int(sys.argv[1]))
n = 1 << 21
for _ in range(30):
    x = rng.uniform(-1, 1, n).astype(np.float32)  # its only reference goes to the queued op
    o = k(inputs=[x], grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)],
          output_dtypes=[alloy.float32], stream=s)[0]
    alloy.async_eval(o)
print("exiting")
"""


def test_exit_with_queued_work_on_imported_inputs(tmp_path, rng):
    """A process that exits while a CPU stream still runs work whose inputs were imported from
    NumPy: the work finishes before the interpreter finalizes (an atexit drain), and what is
    released later is left to the process's end. Before, a worker releasing such an input during
    finalization took the GIL, and CPython's forced unwind of that thread aborted the process
    ("terminate called without an active exception", 3 of 4 runs)."""
    import subprocess
    import sys

    script = tmp_path / "exit_queued.py"
    script.write_text(EXIT_WITH_QUEUED_WORK)
    for _ in range(3):
        r = subprocess.run([sys.executable, str(script), str(int(rng.integers(1 << 30)))],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split()[-1] == "exiting"
        assert "terminate called" not in r.stderr


# Issue 14's tiny call: `.eval()` of a cached one-group CPU kernel on evaluated inputs runs on the
# calling thread with the GIL held (alloy.eval_inline in C++; docs/architecture.md, "The GIL and
# evaluation"). This stress runs that path in several threads next to everything that takes the
# GIL from other threads (a stream worker releasing NumPy inputs, pool launches, a Python
# reference kernel's warning) or the graph mutex with the GIL held (`.shape` of lazy arrays).
INLINE_STRESS = r"""
import sys, threading, time, warnings
import numpy as np
import alloy

duration, seed = float(sys.argv[1]), int(sys.argv[2])
src = "uint i = thread_position_in_grid.x; y[i] = x[i] * 2.0f + 0.5f;"
k = alloy.metal_kernel(name="inline_stress", input_names=["x"], output_names=["y"], source=src)
stream = alloy.new_stream(alloy.cpu)
stop = time.time() + duration
errors, counts = [], {}


def ref(x):
    return x.astype(np.float64) * 2 + 0.5


def check(y, x, what):
    if not np.allclose(np.asarray(y), ref(x), rtol=1e-6):
        errors.append(what)


def run(name, body):
    def go():
        rng, n = np.random.default_rng([seed, len(name)]), 0
        try:
            while time.time() < stop:
                body(rng)
                n += 1
        except BaseException as e:
            errors.append(f"{name}: {e!r}")
        counts[name] = n
    return threading.Thread(target=go, name=name)


def call(x, n, tg=None, stream=alloy.cpu):  # (the default device may be a GPU)
    return k(inputs=[x], grid=(n, 1, 1), threadgroup=(tg or n, 1, 1), output_shapes=[(n,)],
             output_dtypes=[alloy.float32], stream=stream)[0]


def tiny(rng):  # NumPy memory imported without a copy, dropped right after: released inline
    x = rng.uniform(-1, 1, 32).astype(np.float32)
    y = call(x, 32)
    y.eval()
    check(y, x, "tiny")


def tiny_alloy(rng):  # alloy inputs, evaluated already or lazy (then the general path first)
    x = rng.uniform(-1, 1, 64).astype(np.float32)
    a = alloy.array(x, device=alloy.cpu)
    y = call(a, 64)
    if rng.integers(2):
        y = call(y, 64)
        x = ref(x).astype(np.float32)
    alloy.eval(y)
    check(y, x, "tiny_alloy")


ones = alloy.array(np.ones(64, np.float32), device=alloy.cpu)
lazy = call(ones, 64, stream=stream)  # never evaluated


def worker_releases(rng):  # the stream's worker drops the last reference to NumPy memory
    x = rng.uniform(-1, 1, 64).astype(np.float32)
    out = call(x, 64, stream=stream)
    alloy.async_eval(out)
    del x, out
    for _ in range(10):
        lazy.shape


def wide(rng):  # launches shared with the pool (the GIL released)
    x = rng.uniform(-1, 1, 1 << 16).astype(np.float32)
    y = call(x, 1 << 16, 256)
    check(y, x, "wide")


threads = [run("tiny", tiny), run("tiny2", tiny), run("tiny_alloy", tiny_alloy),
           run("worker_releases", worker_releases), run("wide", wide)]
for t in threads:
    t.start()
for t in threads:
    t.join()
alloy.synchronize(stream)
assert not errors, errors[:3]
print(" ".join(f"{n}={counts[n]}" for n in sorted(counts)))
print("ok", min(counts.values()))
"""


def test_inline_evaluation_with_threads_and_imported_inputs(tmp_path, rng):
    """Threads evaluating tiny CPU calls inline (the GIL held) on NumPy-imported inputs, while a
    stream worker releases other imported inputs (taking the GIL), pool launches run and lazy
    arrays' shapes are read: no deadlock, every result right. In a child process with a timeout,
    so that a deadlock fails the test instead of hanging it."""
    import subprocess
    import sys

    script = tmp_path / "inline_stress.py"
    script.write_text(INLINE_STRESS)
    r = subprocess.run([sys.executable, str(script), "4", str(int(rng.integers(1 << 30)))],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-2] == "ok" and int(r.stdout.split()[-1]) > 0, r.stdout


def test_inline_evaluation_matches_the_general_path(rng):
    """A cached CPU call evaluated inline computes what the general path computes when the
    arguments change between calls (lengths, groups, inputs lazy or imported, other streams,
    a stream with queued work, a new kernel whose compile is pending)."""
    src = "uint i = thread_position_in_grid.x; y[i] = x[i] * s + 1.0f;"
    k = alloy.metal_kernel(name="inline_vs_general", input_names=["x", "s"], output_names=["y"],
                           source=src)
    busy = alloy.new_stream(alloy.cpu)
    other = alloy.new_stream(alloy.cpu)
    big = rng.uniform(-1, 1, 1 << 20).astype(np.float32)
    cpu = alloy.cpu  # every call on the CPU (the default device may be a GPU)
    for i in range(60):
        n = int(rng.choice([1, 7, 32, 64, 512, 1000]))
        tg = int(rng.choice([1, 32, 1024]))
        x = rng.uniform(-1, 1, n).astype(np.float32)
        s = float(rng.choice([2.0, -0.5, 3.0]))
        ref = x.astype(np.float64) * s + 1.0
        kind = i % 5
        if kind == 0:
            inp = x  # imported per call
        elif kind == 1:
            inp = alloy.array(x, device=cpu)
        elif kind == 2:  # lazy: produced by the kernel itself (the general path runs it first)
            inp = k(inputs=[alloy.array(x, device=cpu), 1.0], grid=(n, 1, 1),
                    threadgroup=(tg, 1, 1), output_shapes=[(n,)], output_dtypes=[alloy.float32],
                    stream=cpu)[0]
            ref = (x.astype(np.float64) + 1.0) * s + 1.0
        elif kind == 3:  # produced on another stream, still running there
            slow = k(inputs=[big, 1.0], grid=(big.size, 1, 1), threadgroup=(256, 1, 1),
                     output_shapes=[big.shape], output_dtypes=[alloy.float32], stream=other)[0]
            alloy.async_eval(slow)
            inp = slow[:n]
            ref = (big[:n].astype(np.float64) + 1.0) * s + 1.0
        else:  # the call's own stream has queued work
            alloy.async_eval(k(inputs=[big, 1.0], grid=(big.size, 1, 1), threadgroup=(256, 1, 1),
                               output_shapes=[big.shape], output_dtypes=[alloy.float32],
                               stream=busy)[0])
            inp = alloy.array(x, device=cpu)
        y = k(inputs=[inp, s], grid=(n, 1, 1), threadgroup=(tg, 1, 1), output_shapes=[(n,)],
              output_dtypes=[alloy.float32], stream=busy if kind == 4 else cpu)[0]
        y.eval()
        np.testing.assert_allclose(np.asarray(y).astype(np.float64), ref, rtol=1e-6, atol=1e-6)
    alloy.synchronize(alloy.cpu)
    # A new kernel: its first evaluation waits for the compile (not inline), the next is inline;
    # both give the same values.
    fresh = alloy.metal_kernel(name="inline_fresh", input_names=["x", "s"], output_names=["y"],
                               source=src.replace("1.0f", f"{int(rng.integers(1 << 20))}.0f"))
    x = rng.uniform(-1, 1, 32).astype(np.float32)
    outs = [fresh(inputs=[x, 2.0], grid=(32, 1, 1), threadgroup=(32, 1, 1),
                  output_shapes=[(32,)], output_dtypes=[alloy.float32], stream=alloy.cpu)[0]
            for _ in range(2)]
    for y in outs:
        y.eval()
    np.testing.assert_array_equal(np.asarray(outs[0]), np.asarray(outs[1]))


def test_inline_evaluation_fails_as_the_general_path(rng):
    """A kernel that faults: the evaluation inline (a cached call) raises what the first one
    (compiling, the general path) raised, and reading the output again raises it again."""
    k = alloy.metal_kernel(name="inline_fault", input_names=["x"], output_names=["y"],
                           source="uint i = thread_position_in_grid.x; y[i] = x[i + 0x40000000u];")
    x = alloy.array(rng.uniform(-1, 1, 32).astype(np.float32), device=alloy.cpu)

    def failure(y):
        with pytest.raises(alloy.KernelError) as e:
            y.eval()
        return type(e.value), str(e.value)

    kw = dict(grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(32,)],
              output_dtypes=[alloy.float32], stream=alloy.cpu)
    first = failure(k(inputs=[x], **kw)[0])
    y = k(inputs=[x], **kw)[0]
    assert failure(y) == first
    assert failure(y) == first


EVAL_INLINE_SWITCH = """
import numpy as np
import alloy
k = alloy.metal_kernel(name="inline_switch", input_names=["x"], output_names=["y"],
                       source="uint i = thread_position_in_grid.x; y[i] = x[i] * 2.0f + 1.0f;")
x = np.random.default_rng(5).uniform(-1, 1, 16).astype(np.float32)
y = k(inputs=[x], grid=(16, 1, 1), threadgroup=(16, 1, 1), output_shapes=[(16,)],
      output_dtypes=[alloy.float32])[0]
np.testing.assert_allclose(np.asarray(y), x.astype(np.float64) * 2 + 1, rtol=1e-6)
print("ok")
"""


@pytest.mark.parametrize("value", ["0", "1", "off", "bogus"])
def test_eval_inline_switch_uses_the_flag_grammar(tmp_path, value):
    """ALLOY_EVAL_INLINE is read by alloy::eval_inline with the library's flag grammar: 0 / 1 /
    off evaluate as usual (the switch only picks the path), a value that is not a flag fails the
    evaluation naming the variable (the binding took any text but `0` as on)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "inline_switch.py"
    script.write_text(EVAL_INLINE_SWITCH)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "ALLOY_EVAL_INLINE": value})
    if value == "bogus":
        assert r.returncode != 0
        assert "ALLOY_EVAL_INLINE" in r.stderr, r.stderr[-2000:]
    else:
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split()[-1] == "ok"
