#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build (Release), then
# load the bundled model and run it, printing its top-5 output and median latency.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
cmake --build build -j "$(nproc)"
./build/softneuro inspect build/models/demo.dnn | head -8
./build/softneuro run build/models/demo.dnn --repeat 50
