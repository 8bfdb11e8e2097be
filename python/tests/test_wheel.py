"""The wheel installs anywhere: `pip wheel .` gives a wheel whose extension needs nothing beyond
the manylinux baseline, and that wheel, installed into a fresh virtual environment (no system
site-packages, no repository on the path), imports and runs a kernel.

The wheel is built with `--no-build-isolation` from the same build folder that `pip install .`
(`make python`) uses, so after that install it is an incremental build of a few seconds.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

# What every manylinux system provides (PEP 600 / auditwheel's policy list, the part that
# matters for a C++ extension). Anything else must come from inside the wheel.
BASELINE = re.compile(
    r"^(linux-vdso|ld-linux-x86-64|ld-linux-aarch64|libc|libm|libdl|libpthread|librt|libgcc_s|"
    r"libstdc\+\+)\.so")

SMOKE = r"""
import sys, alloy
assert alloy.__file__.startswith(sys.prefix), alloy.__file__
k = alloy.metal_kernel(name="twice_plus", input_names=["a", "b"], output_names=["out"],
                       source="uint i = thread_position_in_grid.x; out[i] = 2 * a[i] + b;")
a = alloy.arange(9, alloy.float32)  # (alloy.array(list) would need NumPy, not installed here)
out = k(inputs=[a, 0.25], grid=(9, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(9,)],
        output_dtypes=[alloy.float32], stream=alloy.cpu)[0]
print(out.tolist())
"""


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    command = " ".join(map(str, cmd))
    assert r.returncode == 0, f"{command} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def _assert_libraries_bundled_or_baseline(binary, bundle_dir):
    """Every shared library `binary` needs resolves to the wheel's own copies (in `bundle_dir`)
    or is one of the baseline's."""
    for line in _run(["ldd", str(binary)]).splitlines():
        m = re.match(r"\s*(\S+)(?: => (\S+))?", line)
        name, path = m.group(1), m.group(2)
        if "not found" in line:
            pytest.fail(f"{name} not found: {line}")
        if path and pathlib.Path(path).parent == bundle_dir:
            continue
        assert BASELINE.match(pathlib.Path(name).name), f"{binary.name} needs {line.strip()}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("scikit_build_core", reason="the wheel build needs scikit-build-core")
    pytest.importorskip("nanobind", reason="the wheel build needs nanobind")
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
          "--no-build-isolation", "--no-deps", "-w", str(out), str(REPO)], timeout=1800)
    (found,) = out.glob("alloy-*.whl")
    return found


def test_wheel_bundles_its_libraries(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(re.match(r"alloy/_core\..*\.so$", n) for n in names)
    for lib in ("libtbb.so", "libfmt.so", "libboost_context.so"):
        assert any(n.startswith("alloy/" + lib) for n in names), (lib, names)
    # The NVRTC compile worker, beside the extension where it looks (docs/nvrtc-workers.md).
    assert "alloy/alloy-nvrtc-worker" in names, names
    # Not the C++ package: the wheel holds the Python package only.
    assert not any(n.endswith(".a") or "/cmake/" in n or n.endswith(".h") for n in names)


def test_auditwheel_show(wheel):
    if shutil.which("auditwheel") is None:
        auditwheel = [sys.executable, "-m", "auditwheel"]
        pytest.importorskip("auditwheel", reason="auditwheel is not installed")
    else:
        auditwheel = ["auditwheel"]
    report = _run([*auditwheel, "show", str(wheel)])
    text = " ".join(report.split())
    # Consistent with a manylinux tag, and no system library other than the baseline.
    assert re.search(r'consistent with the following platform tag: "manylinux_2_\d+_', text), text
    assert "external shared libraries" not in text, text


def test_fresh_venv_imports_and_runs(wheel, tmp_path):
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    import pip

    if tuple(int(p) for p in pip.__version__.split(".")[:2]) >= (22, 3):
        # No pip inside (Debian ships ensurepip separately): the outer pip installs into it.
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
        pip_cmd = [sys.executable, "-m", "pip", "--python", str(python)]
    else:
        _run([sys.executable, "-m", "venv", str(venv)])
        pip_cmd = [str(python), "-m", "pip"]
    # --no-deps: NumPy (a dependency for array conversions) is left out so that nothing but the
    # wheel is there; --no-index: nothing is downloaded.
    _run([*pip_cmd, "install", "--quiet", "--disable-pip-version-check", "--no-deps",
          "--no-index", str(wheel)])
    # The extension's shared libraries resolve to the wheel's own copies or to the baseline.
    (core,) = (venv / "lib").glob("python*/site-packages/alloy/_core*.so")
    _assert_libraries_bundled_or_baseline(core, core.parent)
    # The NVRTC worker: beside the extension (where the library looks), executable, its libraries
    # the wheel's or the baseline, and it runs: it greets on stdout when its stdin is a pipe
    # (frame: u32 length, then 'H' and the protocol version).
    worker = core.parent / "alloy-nvrtc-worker"
    assert worker.is_file() and os.access(worker, os.X_OK), worker
    _assert_libraries_bundled_or_baseline(worker, core.parent)
    hello = subprocess.run([str(worker)], input=b"", capture_output=True, timeout=60).stdout
    assert hello[4:5] == b"H" and int.from_bytes(hello[5:9], sys.byteorder) == 1, hello[:64]
    # Isolated (-I): no user site, no PYTHONPATH; started outside the repository.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["ALLOY_CACHE_DIR"] = str(tmp_path / "cache")
    out = _run([str(python), "-I", "-c", SMOKE], cwd=tmp_path, env=env)
    values = [float(v) for v in out.strip().strip("[]").split(",")]
    assert values == [2 * x + 0.25 for x in range(9)]


def test_module_carries_no_copy_of_libstdcxx():
    """The extension uses the process's shared libstdc++, never a copy linked in (as a compiler
    wrapper adding -static-libstdc++ does): with NumPy 2 (C++, shared libstdc++) imported first,
    such a copy's locale code found null facets and the first float printed crashed the process
    (seen on the GPU machine; scripts/device-test.sh builds with the system g++ since)."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("binutils' nm is not installed")
    import alloy._core as core

    defined = ""
    for flags in (["--defined-only"], ["-D", "--defined-only"]):
        r = subprocess.run([nm, *flags, core.__file__], capture_output=True, text=True)
        defined += r.stdout
    # std::locale's members and the ostream inserter of double live in libstdc++.so only.
    copies = sorted({m for m in re.findall(r" [TtWw] (_ZNSt6locale\w*|_ZNSo9_M_insertIdE\w*)",
                                           defined)})
    assert not copies, f"{core.__file__} holds its own copy of libstdc++: {copies[:5]}"
