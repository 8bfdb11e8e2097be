"""The installed package: type stubs and py.typed ship with it, every public name is documented."""

import inspect
import pathlib

import alloy


def test_stubs_and_marker_ship_with_the_package():
    root = pathlib.Path(alloy.__file__).parent
    stub = root / "_core.pyi"
    assert (root / "py.typed").exists()
    assert stub.exists(), "the generated type stub _core.pyi is missing"
    text = stub.read_text()
    for name in ("class array", "def metal_kernel(", "def __call__(self, *, inputs",
                 "def from_dlpack(", "class Dtype", "bfloat16"):
        assert name in text, name


def test_every_public_name_has_a_docstring():
    missing = []
    for name in alloy.__all__:
        obj = getattr(alloy, name)
        if isinstance(obj, (alloy.Dtype, alloy.DeviceType)):
            continue  # enum members: documented by their enum
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(name)
    for cls in (alloy.array, alloy.MetalKernel, alloy.Device, alloy.Stream):
        for attr, value in vars(cls).items():
            if attr.startswith("_") and attr not in ("__call__", "__init__", "__getitem__",
                                                     "__array__", "__dlpack__"):
                continue
            if callable(value) or isinstance(value, property):
                if not (inspect.getdoc(value) or "").strip():
                    missing.append(f"{cls.__name__}.{attr}")
    for name in alloy.cuda.__all__:
        if not (inspect.getdoc(getattr(alloy.cuda, name)) or "").strip():
            missing.append(f"cuda.{name}")
    assert not missing, missing
