"""Faults and load through Python (issue 16, docs/reliability.md): Ctrl-C stops a long CPU launch
at the next threadgroup boundary (NumPy, which swallows the buffer protocol's errors and tries
another protocol, must not run the interrupted launch again)."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import alloy

SPIN = """
uint i = thread_position_in_grid.x;
float a = x[0];
for (int k = 0; k < 200000; ++k) a = a * 0.999f + 1.0f;
{barrier}
y[i] = a;"""


@pytest.fixture
def sigint_raises():
    # A process started in the background (CI, `cmd &`) inherits SIGINT ignored.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("mode", ["loop", "fiber"])
def test_ctrl_c_interrupts_a_long_cpu_launch(mode, sigint_raises):
    barrier = "threadgroup_barrier(mem_flags::mem_none);" if mode == "fiber" else ""
    k = alloy.metal_kernel(name="spin_" + mode, input_names=["x"], output_names=["y"],
                           source=SPIN.format(barrier=barrier))
    x = np.array([0.5], np.float32)

    def run(n):
        return k(inputs=[x], grid=(n, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(n,)],
                 output_dtypes=[alloy.float32], stream=alloy.cpu)[0]

    small = np.asarray(run(64))  # compiled, and the reference for the good call below
    # 2**18 threads of 2e5 iterations: minutes of work on two cores.
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        np.asarray(run(1 << 18))
    elapsed = time.monotonic() - start
    timer.join()
    assert elapsed < 10, f"the launch went on for {elapsed:.1f} s after Ctrl-C"
    np.testing.assert_array_equal(np.asarray(run(64)), small)



def test_cpu_kernel_writing_past_its_output_is_a_kernel_error():
    # 4080 float32 + the allocator's slack fill 4 pages exactly: the next page is a guard page
    # (docs/reliability.md), so the stray writes fault and the launch ends with an error.
    n = 4080
    k = alloy.fast.metal_kernel(name="write_past_py", input_names=["x"], output_names=["y"],
                                source="uint i = thread_position_in_grid.x; y[i + 4080] = x[i];")
    x = np.random.default_rng(5).uniform(-1, 1, n).astype(np.float32)
    (y,) = k(inputs=[x], grid=(n, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(n,)],
             output_dtypes=[alloy.float32], stream=alloy.cpu)
    with pytest.raises(alloy.KernelError, match="write_past_py.*outside its buffers.*robust"):
        np.asarray(y)
    twice = alloy.fast.metal_kernel(name="after_fault_py", input_names=["x"], output_names=["y"],
                                    source="uint i = thread_position_in_grid.x; y[i] = 2 * x[i];")
    (z,) = twice(inputs=[x], grid=(n, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(n,)],
                 output_dtypes=[alloy.float32], stream=alloy.cpu)
    np.testing.assert_array_equal(np.asarray(z), 2 * x)
