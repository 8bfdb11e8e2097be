#!/usr/bin/env bash
# Installs what Alloy needs on a Debian 12 machine (root): Debian -dev packages and Python tools.
# Idempotent: only missing packages are installed, so `make demo`/`make test` stay quick.
set -euo pipefail
DEB_PKGS=(cmake g++ make pkg-config libfmt-dev libxxhash-dev libcli11-dev libboost-context-dev
          libtbb-dev libgtest-dev libgmock-dev libbenchmark-dev clang-format python3-dev
          clang libclang-rt-14-dev)  # clang + its sanitizer/libFuzzer runtimes: ci-sanitizers.sh
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
PY_PKGS=(numpy pytest nanobind scikit-build-core ml_dtypes)
need=()
for p in "${PY_PKGS[@]}"; do
  $PY -c "import ${p//-/_}" 2>/dev/null || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: pip install ${need[*]}"
  $PY -m pip install -q "${need[@]}"
fi
