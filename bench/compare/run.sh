#!/usr/bin/env bash
# The peer benchmark in one command (issue 7):
#
#   bench/compare/run.sh [--models resnet50,mobilenet_v2|all] [--threads T] [--runs 20] [--rounds 5]
#                        [--skip CONTENDER|GROUP ...] [--quick] [--reuse]
#
# 1. Debian packages and bench/.venv (bench/install-bench-deps.sh: PyTorch, torchvision,
#    onnx from Debian; ONNX Runtime from pip into the venv, which sees
#    Debian's packages). The system Python is never pip-installed into.
# 2. What onnxruntime.quantization needs beyond Debian's onnx 1.12 (onnx >= 1.16,
#    ml_dtypes), into bench/.venv, with NumPy pinned to Debian's version: Debian's
#    PyTorch is built against NumPy 1.x and breaks if pip brings NumPy 2.
# 3. TensorFlow Lite: a bounded try (10 minutes) at tensorflow-cpu + onnx2tf +
#    ai-edge-litert from pip into a venv of its own, bench/compare/.venv-tflite (they
#    need NumPy 2). On failure the reason goes to bench/compare/.venv-tflite.failed and
#    the TFLite contenders are reported as skipped; delete that file to try again.
#    Skipped when the arguments contain `tflite` (e.g. --skip tflite).
# 4. Builds build/softneuro if it is missing (Release, Ninja).
# 5. bench/compare/compare.py with the arguments given: exports missing zoo models,
#    tunes, runs every contender interleaved, writes bench/results/compare.{md,json,svg}
#    (compare.py --chart-only draws compare.svg again from compare.json, in the
#    interpreter that has the softneuro package).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$ROOT/bench/.venv"
TFL="$HERE/.venv-tflite"
cd "$ROOT"

say() { printf '== %s\n' "$*"; }

# 1. Debian packages + bench/.venv with onnxruntime
say "dependencies (bench/install-bench-deps.sh)"
"$ROOT/bench/install-bench-deps.sh"

# 2. onnxruntime.quantization's needs, NumPy pinned to Debian's
if ! "$VENV/bin/python" -c "import onnxruntime.quantization" >/dev/null 2>&1; then
  say "onnx >= 1.16 and ml_dtypes into bench/.venv (for onnxruntime.quantization)"
  CONSTRAINTS="$(mktemp)"
  /usr/bin/python3 -c 'import numpy; print("numpy==" + numpy.__version__)' >"$CONSTRAINTS"
  "$VENV/bin/pip" install -q -c "$CONSTRAINTS" "onnx>=1.16" ml_dtypes
  rm -f "$CONSTRAINTS"
  "$VENV/bin/python" -c "import onnxruntime.quantization, numpy, torch; torch.from_numpy(numpy.zeros(1))"
fi

# 3. TensorFlow Lite (bounded try, own venv)
want_tflite=1
for arg in "$@"; do
  if [ "$arg" = tflite ]; then want_tflite=0; fi
done
if [ "$want_tflite" = 1 ] && [ ! -e "$TFL.failed" ] \
   && ! "$TFL/bin/python" -c "import tensorflow, onnx2tf, ai_edge_litert" >/dev/null 2>&1; then
  say "TensorFlow Lite: tensorflow-cpu, onnx2tf, ai-edge-litert into bench/compare/.venv-tflite (at most 10 minutes)"
  rm -rf "$TFL"
  LOG="$(mktemp)"
  if /usr/bin/python3 -m venv "$TFL" >"$LOG" 2>&1 \
     && timeout 600 "$TFL/bin/pip" install -q tensorflow-cpu onnx2tf onnx onnx_graphsurgeon sng4onnx sne4onnx \
          psutil tf_keras ai-edge-litert >>"$LOG" 2>&1 \
     && TF_CPP_MIN_LOG_LEVEL=3 "$TFL/bin/python" -c "import tensorflow, onnx2tf, ai_edge_litert" >>"$LOG" 2>&1; then
    say "TensorFlow Lite ready"
  else
    rc=$?
    { [ "$rc" = 124 ] && echo "pip install did not finish within 10 minutes"; grep -v '^\s*$' "$LOG" | tail -n 3; } \
      | tr '\n' ' ' >"$TFL.failed"
    say "TensorFlow Lite setup failed (TFLite contenders will be skipped): $(cat "$TFL.failed")"
  fi
  rm -f "$LOG"
fi

# 4. softneuro: the CLI, and the Python package in build/python-venv as
#    scripts/main.sh installs it (compare.svg is drawn by its chart code)
if [ ! -x "$ROOT/build/softneuro" ]; then
  say "building softneuro"
  rm -rf build/.cmake
  cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$(nproc)"
fi
if ! build/python-venv/bin/python -c "import softneuro" 2>/dev/null; then
  say "the softneuro Python package into build/python-venv"
  if [ ! -x build/python-venv/bin/python ]; then python3 -m venv build/python-venv; fi
  build/python-venv/bin/pip install -q "scikit-build-core>=0.10" "nanobind>=2.0"
  build/python-venv/bin/pip install -q --no-build-isolation .
  rm -rf build/.cmake  # scikit-build-core's File API query breaks a plain configure of build/
fi

# 5. the benchmark
say "compare.py $*"
export COMPARE_COMMAND="bench/compare/run.sh $*"
exec "$VENV/bin/python" "$HERE/compare.py" "$@"
