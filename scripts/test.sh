#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, build (Release)
# and run every test under CTest; then rebuild with AddressSanitizer + UBSan and
# run the file-damage, net and plugin tests again under it; then rebuild with
# ThreadSanitizer and run the concurrency tests (sessions of one model in
# several threads) under it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs="$(nproc)"
# Tests run side by side on few cores: idle OpenMP workers (oneDNN) must not
# spin against the other test processes (a spinning barrier costs whole time slices).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# BUILD_TESTING=ON explicitly: scripts/main.sh configures the same folder without tests.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON
cmake --build build -j "$jobs"
ctest --test-dir build -j "$jobs" --output-on-failure --no-tests=error

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSOFTNEURO_ASAN=ON
cmake --build build-asan -j "$jobs" --target softneuro_tests
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ./build-asan/tests/softneuro_tests "[dnn],[net],[plugin],[basics]"

# ThreadSanitizer: -O1 (builds faster; TSan's advice). The concurrency tests run
# sessions at one thread each: libgomp is not instrumented, so a team's fork and
# join are invisible to TSan and a parallel region would report false races.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DSOFTNEURO_TSAN=ON -DBUILD_TESTING=ON
cmake --build build-tsan -j "$jobs" --target softneuro_tests softneuro_import_tests
TSAN_OPTIONS=halt_on_error=1:abort_on_error=1 ./build-tsan/tests/softneuro_tests "[concurrency]"
TSAN_OPTIONS=halt_on_error=1:abort_on_error=1 ./build-tsan/softneuro_import_tests "[concurrency]"
