#!/usr/bin/env bash
# The test stages apart from CI (scripts/test.sh runs the rest): the
# concurrency tests under ThreadSanitizer, the aarch64 cross build's tests
# under qemu-aarch64 (docs/arm.md), then each fuzzing harness for half a minute
# (docs/fuzzing.md). About 30 minutes on 2 cores; run it after changes to
# threads, sessions or the plan's concurrency, to portable kernels or anything
# compiled differently for aarch64, and to readers of files. Needs what
# scripts/test.sh installs (run that first on a fresh machine). Prints each
# stage's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
stage_name="" stage_start=$SECONDS stage_times=""
stage() {
  [ -z "$stage_name" ] || {
    stage_times+="$(printf '%-34s %5d s' "$stage_name" $((SECONDS - stage_start)))"$'\n'
    echo "== test_platforms.sh: $stage_name took $((SECONDS - stage_start)) s; next: $1"; }
  stage_name="$1" stage_start=$SECONDS
}
jobs="$(nproc)"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

# ThreadSanitizer: -O1 (builds faster; TSan's advice), and only the test files
# that hold the concurrency tests. They run sessions at one thread each: libgomp
# is not instrumented, so a team's fork and join are invisible to TSan and a
# parallel region would report false races.
stage "tsan build + tests"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DSOFTNEURO_TSAN=ON -DBUILD_TESTING=ON \
  -DSOFTNEURO_CUDA=OFF
cmake --build build-tsan -j "$jobs" --target softneuro_concurrency_tests
TSAN_OPTIONS=halt_on_error=1:abort_on_error=1 ./build-tsan/tests/softneuro_concurrency_tests "[concurrency]"

# aarch64 under emulation (docs/arm.md): the cross build (a sysroot of Debian's
# arm64 packages, build-arm64/), then the unit tests and the importer's tests
# under qemu-aarch64 on an emulated Neoverse N1 (no SVE). [direct]: the x86
# direct convolution's sweeps, which say unsupported there. Then the routine
# generator and the NaN tests on an SVE-512 CPU (qemu's max), where oneDNN runs
# its SVE jit kernels (half a minute).
# On an aarch64 machine scripts/test.sh ran these natively.
stage "arm64 build + tests (qemu)"
if [ "$(uname -m)" = x86_64 ]; then
  ./scripts/arm64.sh softneuro_tests "~[direct]"
  ./scripts/arm64.sh softneuro_import_tests
  QEMU_CPU=max ./scripts/arm64.sh softneuro_tests "[generator],[nan],[arm]"
  # CTest's other entries (the CLI end to end, layering, the DPRS tests), as a
  # board's CTest runs them: the whole build, the tests under the emulator.
  ./scripts/arm64.sh
  QEMU_CPU=neoverse-n1 ctest --test-dir build-arm64 -j "$jobs" -E ' ' --output-on-failure --no-tests=error
else
  echo "test_platforms.sh: $(uname -m) host: scripts/test.sh ran the unit and importer tests natively (CTest, ASan)"
fi

# Fuzzing: each harness for half a minute (clang-14, ASan + UBSan, build-fuzz/);
# the long campaigns are scripts/fuzz_campaign.sh's.
stage "fuzz build + runs"
./scripts/fuzz.sh 30

stage "done"
printf '%s' "$stage_times"
echo "test_platforms.sh: all stages passed in $SECONDS s"
