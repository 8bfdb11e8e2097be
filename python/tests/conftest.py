"""Shared fixtures: where kernels run and what kind of arrays feed them.

Every kernel test runs once per *target*: the CPU with NumPy inputs, and, where a CUDA GPU is
there, the GPU with alloy arrays, PyTorch CUDA tensors and CuPy arrays as inputs. Targets that
cannot run here are skipped with the reason.
"""

import os
import pathlib
import re
import sys

import numpy as np
import pytest

# The tests exercise the installed package: drop python/ (which holds the package's sources but
# not its compiled extension) from the import path when pytest was started from there.
_SOURCES = pathlib.Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if pathlib.Path(p or os.getcwd()).resolve() != _SOURCES]

import alloy  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]


def example_kernels():
    """The Metal bodies of examples/example_kernels.h (name -> source), read from the header so
    that the Python tests run exactly the text the C++ side runs."""
    text = (REPO / "examples" / "example_kernels.h").read_text()
    found = re.findall(r'constexpr const char\* (\w+) = R"\((.*?)\)";', text, re.S)
    return dict(found)


def _gpu_reason():
    if alloy.is_available(alloy.gpu):
        return None
    return "no CUDA GPU: " + (alloy.cuda.unavailable_reason() or "not available")


class Target:
    """Where a kernel runs (`stream`) and how inputs are made (`put`)."""

    def __init__(self, name, stream, put):
        self.name = name
        self.stream = stream
        self._put = put

    def put(self, x):
        """`x` (NumPy) as an input of this target."""
        return self._put(np.ascontiguousarray(x) if x.ndim else x)

    def __repr__(self):
        return self.name


def _torch_cuda(x):
    import torch

    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.astype(np.float32)).to("cuda", torch.bfloat16)
    return torch.from_numpy(x).to("cuda")


def _cupy(x):
    import cupy

    if x.dtype.name == "bfloat16":  # CuPy has no bfloat16
        return alloy.array(x, device=alloy.gpu)
    return cupy.asarray(x)


def _make_target(name):
    if name == "cpu":
        return Target("cpu", alloy.cpu, lambda x: x)
    reason = _gpu_reason()
    if reason:
        pytest.skip(reason)
    if name == "gpu":
        return Target("gpu", alloy.gpu, lambda x: alloy.array(x, device=alloy.gpu))
    if name == "torch-cuda":
        torch = pytest.importorskip("torch", reason="PyTorch is not installed")
        if not torch.cuda.is_available():
            pytest.skip("PyTorch has no CUDA device")
        return Target("torch-cuda", alloy.gpu, _torch_cuda)
    if name == "cupy":
        pytest.importorskip("cupy", reason="CuPy is not installed")
        return Target("cupy", alloy.gpu, _cupy)
    raise ValueError(name)


@pytest.fixture(params=["cpu", "gpu", "torch-cuda", "cupy"])
def target(request):
    return _make_target(request.param)


@pytest.fixture(params=["cpu", "gpu"])
def device(request):
    if request.param == "gpu":
        reason = _gpu_reason()
        if reason:
            pytest.skip(reason)
        return alloy.gpu
    return alloy.cpu


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def kernels():
    return example_kernels()
