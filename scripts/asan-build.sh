#!/usr/bin/env bash
# The sanitizer build (docs/fuzzing.md): clang-14 at -O1 with line tables,
# AddressSanitizer + UBSan, and libFuzzer's coverage instrumentation, in
# build-fuzz/. One build serves both the libFuzzer harnesses (scripts/fuzz.sh)
# and the unit and importer tests under ASan (scripts/test.sh): building the
# library once for both saved a whole compile of it in CI.
#
#   scripts/asan-build.sh TARGET...    configure build-fuzz/ and build the targets
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: scripts/asan-build.sh TARGET..." >&2; exit 2; }
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DSOFTNEURO_FUZZ=ON -DBUILD_TESTING=ON -DSOFTNEURO_CUDA=OFF > /dev/null
cmake --build build-fuzz -j "$(nproc)" --target "$@"
