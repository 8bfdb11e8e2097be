#!/usr/bin/env bash
# The long fuzzing run of docs/reliability.md on the GPU machine's 16 cores: the ASan+UBSan
# libFuzzer binaries of CI's sanitizer build (scripts/ci-sanitizers.sh, build-asan/fuzz_*),
# built here and carried in .fuzz/ with the three shared libraries the device lacks, each
# target in libFuzzer's fork mode with WORKERS processes for SECONDS, seeded from
# fuzz/make_corpus.py (and the exporter's own files). Prints each target's final statistics.
#   usage: scripts/device-fuzz.sh   (env: SECONDS_EACH=480, WORKERS=4; OUT: where logs go)
set -uo pipefail
secs=${SECONDS_EACH:-480}
workers=${WORKERS:-4}
OUT=${OUT:-/tmp/fuzz-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.fuzz/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ASAN_OPTIONS=detect_stack_use_after_return=0:detect_leaks=0:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
pids=()
for t in translate library signature export; do
  mkdir -p "/tmp/fuzz-new/$t" "$OUT/artifacts/$t"
  .fuzz/bin/fuzz_$t -fork="$workers" -ignore_crashes=1 -max_total_time="$secs" -max_len=8192 \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$t/" \
    "/tmp/fuzz-new/$t" ".fuzz/corpus/$t" > "$OUT/fuzz_$t.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for t in translate library signature export; do
  echo "== fuzz_$t"
  grep -E "^#[0-9]+" "$OUT/fuzz_$t.log" | tail -2
  grep -E "INFO: fuzzed for|crash|deadly|ERROR|SUMMARY" "$OUT/fuzz_$t.log" | tail -5
  ls "$OUT/artifacts/$t" | head
done
