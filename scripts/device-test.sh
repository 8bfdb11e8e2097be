#!/usr/bin/env bash
# Builds Alloy with CUDA on the GPU machine and runs the whole C++ suite (every conformance kernel
# on the GPU), the demo, the Python suite and the benchmarks, in one call.
#
# The GPU machine has no package registry: the Debian -dev packages Alloy builds against travel as
# .deb files in .dev/debs (fetched here with scripts/fetch-device-debs.sh) and are unpacked into a
# private prefix, never into /.
#   usage: scripts/device-test.sh [tests|cpp|python|bench|all]   (default all; cpp: C++ tests + GPU
#   benchmarks, no Python; python: the Python suite only). BENCH_FILTER selects benchmarks (Google Benchmark regex),
#   GTEST_FILTER the C++ tests (a --gtest_filter pattern), SHARDS the number of test processes,
#   PYTEST_K a pytest -k expression for the Python suite (spaces allowed), PYTEST_ARGS more options.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/alloy-out}
mkdir -p "$OUT"
DEPS=/opt/alloy-deps
if [ -d .dev/debs ] && [ ! -f $DEPS/.done ]; then
  mkdir -p $DEPS
  for f in .dev/debs/*.deb; do dpkg -x "$f" $DEPS; done
  touch $DEPS/.done
fi
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CPATH=$DEPS/usr/include${CPATH:+:$CPATH}
export PATH=$DEPS/usr/bin:$PATH  # flatc (the export format's schema compiler)
export ALLOY_CACHE_DIR=${ALLOY_CACHE_DIR:-/tmp/alloy-cache}
# CPU matmul: OpenBLAS from the unpacked libopenblas0-pthread (dlopen'ed at run time).
blas=$DEPS/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0
[ -f "$blas" ] && export ALLOY_OPENBLAS=$blas
echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
nproc
gen=""; command -v ninja >/dev/null && gen="-G Ninja"
if [ "$what" != python ]; then
cmake -S . -B build-gpu $gen -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$DEPS/usr \
  -DXXHASH_INCLUDE_DIR=$DEPS/usr/include > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
echo "== built"
fi
rc=0
if [ "$what" = tests ] || [ "$what" = all ] || [ "$what" = cpp ]; then
  echo "== C++ tests (GPU present: CUDA variants run)"
  # SHARDS=N runs the suite as N gtest shards at once (the host has 16 cores; one GPU is shared).
  shards=${SHARDS:-1}
  pids=()
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i ./build-gpu/alloy_tests --gtest_brief=1 \
      --gtest_filter="${GTEST_FILTER:-*}" > "$OUT/tests-$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$OUT"/tests-*.log > "$OUT/tests.log"
  echo "C++ tests exit status: $rc"
  grep -E "^\[  FAILED|^\[  PASSED|^\[  SKIPPED|tests ran" "$OUT/tests.log" | tail -40
  echo "== demo on the GPU"
  ./build-gpu/alloy demo --device gpu 2>&1 | tee "$OUT/demo.log"
fi
if [ -f pyproject.toml ] && { [ "$what" = tests ] || [ "$what" = all ] || [ "$what" = python ]; }; then
  echo "== Python tests"
  # The module is built by the system's g++, not the GPU machine's default /opt/gcc wrapper: that
  # one links parts of libstdc++ statically, and a second copy of libstdc++'s locale code inside
  # _core.so, beside the shared libstdc++ NumPy 2 loads first, crashed the first float printed
  # (std::ostream << double -> codecvt, a null facet). tests/test_wheel.py checks for such a copy.
  [ -x /usr/bin/g++ ] && export CXX=/usr/bin/g++ CC=/usr/bin/gcc
  export CMAKE_PREFIX_PATH=$DEPS/usr  # test_wheel's own `pip wheel .` finds the unpacked packages
  python3 -m pip install -q --no-build-isolation --no-deps . -Cbuild-dir=build-python-device \
    -Ccmake.define.CMAKE_PREFIX_PATH=$DEPS/usr -Ccmake.define.XXHASH_INCLUDE_DIR=$DEPS/usr/include \
    > "$OUT/pip.log" 2>&1 || tail -20 "$OUT/pip.log"
  (cd python && python3 -X faulthandler -m pytest -q -rfE ${PYTEST_K:+-k "$PYTEST_K"} ${PYTEST_ARGS:-} tests > "$OUT/pytest.log" 2>&1; tail -25 "$OUT/pytest.log")
fi
if [ "$what" = bench ] || [ "$what" = all ] || [ "$what" = cpp ]; then
  echo "== benchmarks"
  ./build-gpu/alloy_bench --benchmark_filter="${BENCH_FILTER:-.}" --benchmark_counters_tabular=true --benchmark_out="$OUT/bench.json" \
    --benchmark_out_format=json > "$OUT/bench.txt" 2>&1
  cat "$OUT/bench.txt" | tail -60
  [ -f python/bench/bench_overhead.py ] && [ "$what" != cpp ] && python3 python/bench/bench_overhead.py 2>&1 | tee "$OUT/py_bench.txt"
fi
exit $rc
