#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, build (Release)
# and run every test under CTest; then rebuild with AddressSanitizer + UBSan and
# run the file-damage, net and plugin tests again under it.
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
