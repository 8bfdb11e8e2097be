#!/usr/bin/env bash
# Sanitizer and fuzzing runs of CI (docs/reliability.md), after `make test`:
#   1. an ASan+UBSan build (clang) running the C++ tests;
#   2. the libFuzzer targets (fuzz/) of that build, FUZZ_SECONDS (60) each, seeded from the
#      conformance kernels (fuzz/make_corpus.py) and, for the importer, exported files;
#   3. a ThreadSanitizer build running the load test: 8 threads x 1,000 launches of loop- and
#      fiber-mode kernels while new kernels compile.
# Needs clang and libclang-rt-14-dev (scripts/install-deps.sh). Build folders: build-asan,
# build-tsan. Exits non-zero on the first failure or sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
unset ALLOY_WERROR  # -Werror is the gcc build's; clang's warning set differs
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang
        -DALLOY_BUILD_BENCH=OFF -DALLOY_BUILD_TOOLS=OFF "${launcher[@]}"
        -DALLOY_TYPED=OFF)  # no libclang in sanitizer builds (docs/architecture.md, Typed front end)
t0=$SECONDS
stamp() { echo "ci-sanitizers: $1 ($((SECONDS - t0)) s)"; }
# Time left of CI's limit (.ci/run sets ALLOY_CI_START): a stage that needs more than what is left
# is skipped with a message instead of running CI past its limit.
ci_start=${ALLOY_CI_START:-$(date +%s)}
ci_limit=${ALLOY_CI_LIMIT_S:-5100}  # 85 of CI's 90 minutes
seconds_left() { echo $((ci_limit - ($(date +%s) - ci_start))); }
fits() {  # fits NAME SECONDS_NEEDED
  local left
  left=$(seconds_left)
  if [ "$left" -lt "$2" ]; then
    echo "ci-sanitizers: SKIPPED $1: it needs about $2 s, $left s of CI's time are left"
    return 1
  fi
}
# bounded NAME COMMAND...: runs COMMAND, stopped when CI's time runs out: a hang fails the stage
# with its name instead of running CI past its limit.
bounded() {
  local name=$1 left rc=0
  shift
  left=$(seconds_left)
  timeout -k 10 "$left" "$@" || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "ci-sanitizers: FAILED $name: still running after $left s, when CI's time ran out"
  fi
  return "$rc"
}

# ---- 1. ASan + UBSan: the C++ tests
fits "the ASan+UBSan build and tests" 2400 || exit 0
asan_flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-asan "${common[@]}" -DALLOY_BUILD_FUZZERS=ON \
  -DCMAKE_CXX_FLAGS="$asan_flags -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build build-asan -j "$JOBS"
stamp "ASan+UBSan build"
# Boost.Context switches stacks without telling ASan: its stack-use-after-return check would see
# fiber stacks as foreign, so that one check is off. allocator_may_return_null: the tests ask for
# 4 EiB on purpose and expect alloy::OutOfMemory, not an abort. detect_leaks=0: LeakSanitizer's
# tracer crashes at exit in this process (fiber stacks, forked compilers); leaks are not checked.
export ASAN_OPTIONS=detect_stack_use_after_return=0:detect_leaks=0:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ALLOY_CACHE_DIR="$PWD/build-asan/test-cache" bounded "the C++ tests under ASan+UBSan" \
  build-asan/alloy_tests --gtest_brief=1
stamp "C++ tests under ASan+UBSan"

# ---- 2. fuzzing, seeded from the conformance kernels
corpus=build-asan/fuzz-corpus
rm -rf "$corpus"
python3 fuzz/make_corpus.py "$corpus"
# The importer's seeds: files written by Alloy's own exporter and an MLX-layout stream, made by
# the fuzz binary itself (fuzz/fuzz_export.cpp).
ALLOY_FUZZ_WRITE_SEEDS="$corpus/export" build-asan/fuzz_export
for target in translate library signature export; do
  fits "fuzz_$target" $((FUZZ_SECONDS + 60)) || continue
  mkdir -p "$corpus/$target-new" "build-asan/fuzz-artifacts/$target"
  build-asan/fuzz_$target -max_total_time="$FUZZ_SECONDS" -max_len=8192 -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="build-asan/fuzz-artifacts/$target/" \
    "$corpus/$target-new" "$corpus/$target" 2>&1 | tail -n 12
  stamp "fuzz_$target"
done

# ---- 3. ThreadSanitizer: the load test
fits "the TSan build and load test" 900 || exit 0
cmake -S . -B build-tsan "${common[@]}" -DALLOY_BUILD_TESTS=OFF -DALLOY_BUILD_STRESS=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" > /dev/null
cmake --build build-tsan -j "$JOBS" --target alloy_stress
stamp "TSan build"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions="$PWD/scripts/tsan.supp" ALLOY_STRESS_LAUNCHES=1000 \
  ALLOY_CACHE_DIR="$PWD/build-tsan/test-cache" bounded "the load test under TSan" build-tsan/alloy_stress
stamp "load test under TSan"
