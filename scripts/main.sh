#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build (Release), tune
# the bundled model on this machine (profile cache in build/profile-cache), then
# run the untuned and the tuned model, printing top-5 outputs and median latency,
# then both again in fresh processes, interleaved (one run of each on a shared
# VM differed by 8% with the very same routines).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# `pip install .` leaves scikit-build-core's CMake File API query in build/.cmake;
# with it, a plain configure of build/ failed on the CUDA backend (the query's
# reply asks for every target's compile features: "CUDA20" unknown to CMake 3.25).
rm -rf build/.cmake
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DSOFTNEURO_PYTHON=OFF
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
echo "== untuned against tuned: fresh processes, interleaved, 7 rounds of 50 runs"
median_of() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
untuned=() tuned=()
for round in 1 2 3 4 5 6 7; do
  untuned+=("$(./build/softneuro run build/models/demo.dnn --repeat 50 --top 0 | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')")
  tuned+=("$(./build/softneuro run build/models/demo.tuned.dnn --repeat 50 --top 0 | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')")
done
echo "untuned: median $(printf '%s\n' "${untuned[@]}" | median_of) ms (rounds: ${untuned[*]})"
echo "tuned:   median $(printf '%s\n' "${tuned[@]}" | median_of) ms (rounds: ${tuned[*]})"
# The Python package, into build/python-venv (pip install . reuses build/: only its module compiles).
if [ ! -x build/python-venv/bin/python ]; then python3 -m venv build/python-venv; fi
# Without build isolation (its tools installed into the venv once): an isolated
# build runs from a new temporary folder each time, and scikit-build-core then
# clears build/CMakeFiles, objects included, so a second `pip install .`
# rebuilt the whole library (413 s on 2 cores; without isolation: 5 s).
build/python-venv/bin/pip install -q "scikit-build-core>=0.10" "nanobind>=2.0"
build/python-venv/bin/pip install -q --no-build-isolation .
build/python-venv/bin/python -c "import softneuro; print('python: import softneuro', softneuro.version(), '(build/python-venv)')"
