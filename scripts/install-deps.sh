#!/usr/bin/env bash
# Installs what Alloy needs on a Debian 12 machine (root): Debian -dev packages and Python tools.
# Idempotent: only missing packages are installed, so `make demo`/`make test` stay quick.
set -euo pipefail
DEB_PKGS=(cmake g++ make pkg-config libfmt-dev libxxhash-dev libcli11-dev libboost-context-dev
          libtbb-dev libflatbuffers-dev flatbuffers-compiler libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
          clang-format python3-dev
          libopenblas0-pthread  # matmul on the CPU: dlopen("libopenblas.so.0") at run time
          clang libclang-rt-14-dev  # clang + its sanitizer/libFuzzer runtimes: ci-sanitizers.sh
          libclang-14-dev libclang-cpp14-dev llvm-14-dev)  # the typed front end (src/typed)
missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "install-deps: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
PY=${PYTHON:-python3}
# pip requirement, then the check that it is there (default: import the name with - as _).
# mlx[cpu] (PyPI's MLX without Metal, ~38 MB installed) is what alloy.mlx's tests run against.
# auditwheel: python/tests/test_wheel.py checks the wheel's manylinux policy with `auditwheel show`.
PY_PKGS=(numpy pytest nanobind scikit-build-core ml_dtypes auditwheel
         "mlx[cpu]==0.32.4|import mlx.core, importlib.metadata as m; assert m.version('mlx') == '0.32.4'")
need=()
for entry in "${PY_PKGS[@]}"; do
  req=${entry%%|*}
  check="import ${req//-/_}"
  [ "$entry" != "$req" ] && check=${entry#*|}
  $PY -c "$check" 2>/dev/null || need+=("$req")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: pip install ${need[*]}"
  $PY -m pip install -q "${need[@]}"
fi
