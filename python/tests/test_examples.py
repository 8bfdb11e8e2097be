"""The runnable examples in examples/python: they pass their own NumPy checks, and their kernel
bodies are the text of examples/example_kernels.h."""

import importlib.util
import os
import subprocess
import sys

import pytest

import alloy
from conftest import REPO, example_kernels

EXAMPLES = REPO / "examples" / "python"
SCRIPTS = ["exp.py", "exp_strided.py", "grid_sample.py", "grid_sample_grad.py"]


def test_kernel_bodies_match_the_cpp_header():
    spec = importlib.util.spec_from_file_location("example_kernels_py", EXAMPLES / "kernels.py")
    py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(py)
    names = {"kExpSource": "EXP", "kExpStridedSource": "EXP_STRIDED",
             "kGridSampleSource": "GRID_SAMPLE",
             "kGridSampleReadThenMaskSource": "GRID_SAMPLE_READ_THEN_MASK",
             "kGridSampleGradSource": "GRID_SAMPLE_GRAD"}
    header = example_kernels()
    assert set(header) == set(names)
    for cpp, pyname in names.items():
        assert getattr(py, pyname) == header[cpp], pyname


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs(script, device):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, str(EXAMPLES / script), "--device", str(device.name)],
                       capture_output=True, text=True, timeout=600, env=env, cwd=str(REPO))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "error" in r.stdout
