#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, build (Release)
# and run every test under CTest; then rebuild with AddressSanitizer + UBSan and
# run the unit and importer tests and the fuzz regression inputs again under it;
# then rebuild with ThreadSanitizer and run the concurrency tests (sessions of
# one model in several threads) under it; then fuzz each reader of untrusted
# bytes for a minute (docs/fuzzing.md).
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

# ASan + UBSan: every unit and importer test, the unit tests again as on an
# AVX2-only CPU (but the direct convolution's parameter sweeps, which run the
# same uninstrumented tiles), and every input fuzzing once crashed with. Not
# here: the CLI and out-of-tree plugin tests and the SSE4.1 rerun (CTest runs
# them on the Release build); the per-ISA kernel files are not instrumented
# (CMakeLists.txt: one took 9 minutes to compile so).
# -O1 and line tables only (the stage's build took 30 minutes at -O2 -g on 2
# cores, 13 so); the CUDA backend's tests skip here without a GPU anyway.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DSOFTNEURO_ASAN=ON -DSOFTNEURO_CUDA=OFF
cmake --build build-asan -j "$jobs" --target softneuro_tests softneuro_import_tests softneuro_fuzz_regressions
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The direct convolution's sweeps keep both cores busy; the rest of the suite
# runs on one, so the run as on an AVX2-only CPU goes beside it (into a file).
./build-asan/tests/softneuro_tests "[direct]"
SOFTNEURO_MAX_CPU_ISA=avx2 ./build-asan/tests/softneuro_tests "~[direct]" > build-asan/tests_at_avx2.log 2>&1 &
at_avx2=$!
./build-asan/tests/softneuro_tests "~[direct]"
wait "$at_avx2" || { cat build-asan/tests_at_avx2.log; echo "ASan run at avx2 failed" >&2; exit 1; }
tail -n 2 build-asan/tests_at_avx2.log
./build-asan/softneuro_import_tests
SOFTNEURO_LOG=error ./build-asan/fuzz/softneuro_fuzz_regressions fuzz/regressions
unset ASAN_OPTIONS UBSAN_OPTIONS

# ThreadSanitizer: -O1 (builds faster; TSan's advice), and only the test files
# that hold the concurrency tests. They run sessions at one thread each: libgomp
# is not instrumented, so a team's fork and join are invisible to TSan and a
# parallel region would report false races.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DSOFTNEURO_TSAN=ON -DBUILD_TESTING=ON \
  -DSOFTNEURO_CUDA=OFF
cmake --build build-tsan -j "$jobs" --target softneuro_concurrency_tests
TSAN_OPTIONS=halt_on_error=1:abort_on_error=1 ./build-tsan/tests/softneuro_concurrency_tests "[concurrency]"

# Fuzzing: each harness for a minute (clang-14, ASan + UBSan, build-fuzz/).
./scripts/fuzz.sh 60
