#!/usr/bin/env bash
# Downloads (does not install) the Debian packages that scripts/device-test.sh unpacks on the GPU
# machine, which has no package registry, into .dev/debs (ignored by git; carried by the device tool).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .dev/debs && cd .dev/debs
apt-get download libfmt-dev libfmt9 libxxhash-dev libcli11-dev libboost-context1.74-dev \
  libboost-context1.74.0 libboost1.74-dev libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 \
  libhwloc15 libgtest-dev libbenchmark-dev libbenchmark1debian libflatbuffers-dev \
  flatbuffers-compiler libopenblas0-pthread libgfortran5 libssl-dev  # libssl-dev: headers + link name (the machine has libcrypto.so.3)
