#!/usr/bin/env bash
# The AddressSanitizer + UBSan build of the tests (scripts/test.sh; docs/fuzzing.md):
# clang-14 at -O1 with line tables, in build-asan/. clang: its objects took 1,458
# CPU-s against GCC's 2,293 on 2 cores (10.8 minutes), its tests 7.3 minutes
# against 5. Not the fuzzing build (build-fuzz/, scripts/fuzz.sh): libFuzzer's
# coverage instrumentation made the same tests take 18.5 minutes.
#
#   scripts/asan-build.sh TARGET...    configure build-asan/ and build the targets
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: scripts/asan-build.sh TARGET..." >&2; exit 2; }
CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DSOFTNEURO_ASAN=ON -DBUILD_TESTING=ON -DSOFTNEURO_CUDA=OFF > /dev/null
cmake --build build-asan -j "$(nproc)" --target "$@"
