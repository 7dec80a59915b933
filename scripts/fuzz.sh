#!/usr/bin/env bash
# Fuzzing (docs/fuzzing.md): builds the libFuzzer harnesses of fuzz/ with clang,
# ASan and UBSan in build-fuzz/, seeds their corpora with the files the test
# suite writes (ONNX models, .dnn files, .npy/.npz samples, cache files) and
# runs each harness for a bounded time, from the corpora carried in fuzz/corpus/
# (scripts/fuzz_campaign.sh minimises and updates them). Inputs stay under 64 KiB: mutants of a
# whole model (the bundled one is 180 KiB) ran 40 times slower.
#
#   scripts/fuzz.sh [SECONDS [HARNESS...]]  each (or the named) harness for SECONDS (default 60)
#   scripts/fuzz.sh --runs N [HARNESS]      each (or one) harness for N executions
#
# serve_request (fuzz/serve_request.py, atheris: examples/serve's .npz request
# reader) runs only where named, in build/python-venv (atheris installed there
# on first use; the venv scripts/test.sh made, with Ray Serve).
#
# Needs the Release build (build/, scripts/test.sh or main.sh made it) for the
# seeds. A crash, leak, timeout (30 s) or allocation over 2 GiB fails the
# script; the input is kept in build-fuzz/crashes/<harness>/ and becomes a
# regression input (fuzz/regressions/<harness>/, run by the fuzz_regressions test).
set -euo pipefail
cd "$(dirname "$0")/.."
harnesses=(dnn_load onnx_import tflite_import npy_read cache_read)
if [ "${1:-}" = "--runs" ]; then
  limit=(-runs="$2")
  [ -n "${3:-}" ] && harnesses=("$3")
else
  limit=(-max_total_time="${1:-60}")
  [ $# -gt 1 ] && harnesses=("${@:2}")
fi
native=()
for h in "${harnesses[@]}"; do [ "$h" = serve_request ] || native+=("$h"); done

# Line tables only: a sanitizer's report needs no more, and they build faster.
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DSOFTNEURO_FUZZ=ON -DBUILD_TESTING=OFF -DSOFTNEURO_CUDA=OFF > /dev/null
[ ${#native[@]} -eq 0 ] || cmake --build build-fuzz -j "$(nproc)" --target "${native[@]/#/fuzz_}"
if [ ${#native[@]} -lt ${#harnesses[@]} ]; then
  [ -x build/python-venv/bin/python ] || { echo "fuzz.sh: serve_request needs build/python-venv (scripts/test.sh)" >&2; exit 1; }
  build/python-venv/bin/python -c "import atheris" 2>/dev/null || build/python-venv/bin/pip install -q atheris
  # An executable to run it by: libFuzzer's -merge=1 starts argv[0] again.
  mkdir -p build-fuzz/fuzz
  printf '#!/bin/sh\nSOFTNEURO_FUZZ_SELF="$0" exec "%s/build/python-venv/bin/python" "%s/fuzz/serve_request.py" "$@"\n' \
    "$PWD" "$PWD" \
    > build-fuzz/fuzz/fuzz_serve_request
  chmod +x build-fuzz/fuzz/fuzz_serve_request
fi

# Seeds: the files two test binaries write, kept in a folder of their own.
seeds=build-fuzz/seeds
if [ ! -d "$seeds" ]; then
  [ -x build/softneuro_import_tests ] && [ -x build/tests/softneuro_tests ] ||
    { echo "fuzz.sh: build the tests first (scripts/test.sh)" >&2; exit 1; }
  written="$(mktemp -d)"
  # ctest, the gate, ran these tests already: a failure here (another order, one
  # process) is printed in full, never silent, and the files written still seed.
  seeds_log=build-fuzz/seeds.log
  if ! (export TMPDIR="$written" SOFTNEURO_TEST_KEEP_FILES=1 SOFTNEURO_LOG=error OMP_WAIT_POLICY=passive rc=0
        ./build/softneuro_import_tests || rc=1
        ./build/tests/softneuro_tests "[dnn],[net],[session],[npy],[calibrate],[tune]" || rc=1
        exit $rc) > "$seeds_log" 2>&1; then
    grep -B 4 -A 30 -E "FAILED|due to unexpected exception|fatal error condition" "$seeds_log" | head -n 200 >&2 || tail -n 60 "$seeds_log" >&2
    echo "fuzz.sh: warning: a test failed while writing the seeds in one process (ctest passed them one by one); full output in $seeds_log" >&2
  fi
  mkdir -p "$seeds.tmp"/{dnn_load,onnx_import,tflite_import,npy_read,cache_read,serve_request}
  n=0
  while IFS= read -r -d '' f; do
    n=$((n + 1))
    case "$f" in
      *.dnn) cp "$f" "$seeds.tmp/dnn_load/$n.dnn" ;;
      *.onnx) cp "$f" "$seeds.tmp/onnx_import/$n.onnx" ;;
      *.tflite) cp "$f" "$seeds.tmp/tflite_import/$n.tflite" ;;
      *.npy | *.npz) cp "$f" "$seeds.tmp/npy_read/$n.${f##*.}" ;;
      */profiles.tsv) { printf '\0\0'; cat "$f"; } > "$seeds.tmp/cache_read/$n.profiles" ;;
      */calibration/*.tsv) { printf '\1\0'; head -n -1 "$f"; } > "$seeds.tmp/cache_read/$n.calibration" ;;
    esac
  done < <(find "$written" -type f -size -64k -print0)
  rm -rf "$written"
  mv "$seeds.tmp" "$seeds"
fi
if [ ${#native[@]} -lt ${#harnesses[@]} ] && [ -z "$(ls -A "$seeds/serve_request" 2>/dev/null)" ]; then
  build/python-venv/bin/python fuzz/serve_request.py --seeds "$seeds/serve_request"
fi

# The corpora carried in the repository (fuzz/corpus/<harness>.tar.xz, minimised
# by scripts/fuzz_campaign.sh): campaigns on other machines start where the last stopped.
for h in "${harnesses[@]}"; do
  rm -rf "build-fuzz/carried/$h"
  mkdir -p "build-fuzz/carried/$h"
  [ -f "fuzz/corpus/$h.tar.xz" ] && tar -xJf "fuzz/corpus/$h.tar.xz" -C "build-fuzz/carried/$h" --strip-components=1
done

# The harnesses write each input to a file: in memory where /dev/shm is.
# oneDNN keeps up to 1024 compiled primitives by default: over a million
# inputs, each of other shapes, their code outgrew the 2 GiB limit.
[ -w /dev/shm ] && export TMPDIR=/dev/shm
# One process per harness, as many at a time as there are cores (each is one thread).
fuzz_one() {
  local h="$1" log="build-fuzz/fuzz_$1.log"
  rm -f "$log.summary"
  mkdir -p "build-fuzz/corpus/$h" "build-fuzz/crashes/$h"
  # Models up to 64 KiB; cache files are read line by line: 4 KiB hold many.
  local max_len=65536
  [ "$h" = cache_read ] && max_len=4096
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    SOFTNEURO_LOG=error OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 ONEDNN_PRIMITIVE_CACHE_CAPACITY=16 \
    "./build-fuzz/fuzz/fuzz_$h" "build-fuzz/corpus/$h" "build-fuzz/carried/$h" "$seeds/$h" "${limit[@]}" \
    -entropic=0 -max_len="$max_len" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=30 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/crashes/$h/" > "$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz_$h found a crash (log $log, input in build-fuzz/crashes/$h/)" >&2
    return 1
  fi
  { echo "fuzz_$h: $(ls "$seeds/$h" | wc -l) seeds, $(ls "build-fuzz/carried/$h" | wc -l) carried inputs, ${limit[*]}"
    grep -E "INITED|stat::number_of_executed_units|stat::peak_rss|Done" "$log" | sed "s/^/  /"; } > "$log.summary"
}
# In batches of as many harnesses as there are cores.
failed=0 batch=()
run_batch() {
  local pids=() h i
  for h in "${batch[@]}"; do fuzz_one "$h" & pids+=($!); done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed=1
    cat "build-fuzz/fuzz_${batch[$i]}.log.summary" 2>/dev/null || true
  done
  batch=()
}
for h in "${harnesses[@]}"; do
  batch+=("$h")
  [ "${#batch[@]}" -ge "$(nproc)" ] && run_batch
done
[ "${#batch[@]}" -gt 0 ] && run_batch
exit "$failed"
