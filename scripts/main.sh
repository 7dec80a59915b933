#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build (Release), tune
# the bundled model on this machine (profile cache in build/profile-cache), then
# run the untuned and the tuned model, printing top-5 outputs and median latency.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
cmake --build build -j "$(nproc)"
# (into a file: piping into head would end inspect with SIGPIPE under pipefail)
./build/softneuro inspect build/models/demo.dnn > build/models/demo.inspect.txt
head -8 build/models/demo.inspect.txt
./build/softneuro tune build/models/demo.dnn -o build/models/demo.tuned.dnn --cache build/profile-cache \
  --report build/models/demo.tuning.txt --json build/models/demo.tuning.json
tail -3 build/models/demo.tuning.txt
echo "== untuned"
./build/softneuro run build/models/demo.dnn --repeat 50
echo "== tuned"
./build/softneuro run build/models/demo.tuned.dnn --repeat 50
