#!/usr/bin/env bash
# Issue 52's must-show figures in one run, for an AVX2 machine (a Zen 3): every
# contender interleaved, 2 threads, batch 1. On a machine with AVX-512 the
# peers pick their own kernels and cannot be capped (no CPUID faulting; OpenVINO
# fails with ONEDNN_MAX_CPU_ISA=AVX2), so there the script stops unless --anyway.
#
#   bench/issue52_avx2.sh [--out DIR] [--anyway] [--only STEP ...]
#
# Steps (each writes DIR/STEP.md or .txt; DIR default bench/results/issue52_<host>_<date>):
#   per_layer   the four trained models float32-tuned against ONNX Runtime and OpenVINO
#               (PP-OCRv4 recogniser 1x3x48x320, detector 640, YOLOv8n 320 and 640)
#   qdq         quantize_static QDQ ResNet50, MobileNetV2, YOLOv8n 320: untuned and tuned
#               against ONNX Runtime and OpenVINO on the same file (bench/real/qdq_speed.py --tune)
#   compare     ResNet50 and MobileNetV2: our hybrid against ONNX Runtime int8 (bench/compare/run.sh)
#   ocr         the recogniser's hybrid under its default budget on rendered lines (ocr_accuracy.py)
#   contention  ResNet50, MobileNetV2 and the recogniser with both cores busy (contention.py)
#   load        a tuned ResNet50 to the first run possible, and the files' sizes (load_bench)
# Needs the Release build (scripts/main.sh), bench/.venv (bench/install-bench-deps.sh) and the
# trained models in ~/.cache/softneuro/real-models (shared/real-models/fetch.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/bench/.venv/bin/python
CLI=$ROOT/build/softneuro
MODELS=${SOFTNEURO_REAL_MODELS:-$HOME/.cache/softneuro/real-models}
out="" anyway=0 only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --anyway) anyway=1; shift ;;
    --only) only+=("$2"); shift 2 ;;
    *) echo "unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ ${#only[@]} -eq 0 ] && only=(per_layer qdq compare ocr contention load)
out=${out:-bench/results/issue52_$(hostname -s)_$(date +%Y-%m-%d)}
case "$out" in /*) ;; *) out=$ROOT/$out ;; esac
if grep -qw avx512f /proc/cpuinfo && [ $anyway -eq 0 ]; then
  echo "this CPU has AVX-512: the peers cannot be capped to AVX2 here (--anyway runs it all the same)" >&2
  exit 3
fi
for f in "$CLI" "$PY" "$MODELS/ch_PP-OCRv4_rec_infer.onnx" "$MODELS/ch_PP-OCRv4_det_infer.onnx" "$MODELS/320n.onnx"; do
  [ -e "$f" ] || { echo "missing $f" >&2; exit 2; }
done
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{ grep -m1 'model name' /proc/cpuinfo; nproc; git rev-parse --short HEAD; date -u; } > "$out/machine.txt"

# A float32-tuned .dnn of MODEL at SHAPE (input NAME).
tuned() {  # NAME MODEL INPUT SHAPE
  "$CLI" import "$2" -o "$work/$1.dnn" --input-shape "$3=$4" > /dev/null
  "$CLI" tune "$work/$1.dnn" -o "$work/$1.t.dnn" --threads 2 > "$out/tune_$1.txt" 2>&1
  echo "$work/$1.t.dnn"
}

for step in "${only[@]}"; do
  echo "== $step" >&2
  case "$step" in
    per_layer)
      for spec in rec:ch_PP-OCRv4_rec_infer.onnx:x:1x3x48x320 det:ch_PP-OCRv4_det_infer.onnx:x:1x3x640x640 \
                  yolo320:320n.onnx:images:1x3x320x320 yolo640:320n.onnx:images:1x3x640x640; do
        IFS=: read -r name model input shape <<< "$spec"
        dnn=$(tuned "$name" "$MODELS/$model" "$input" "$shape")
        "$PY" bench/compare/per_layer.py "$MODELS/$model" --dnn "tuned=$dnn" --input "$input=$shape" \
          --runs 10 --rounds 5 --top 20 --out "$out/per_layer_$name.md" > /dev/null
      done ;;
    qdq)
      "$PY" bench/real/qdq_speed.py resnet50 mobilenet_v2 "$MODELS/320n.onnx:1x3x320x320" --rounds 5 --tune \
        > "$out/qdq.md" ;;
    compare)
      bench/compare/run.sh --models resnet50,mobilenet_v2 --threads 2 --rounds 5 --results "$out" \
        > "$out/compare.txt" 2>&1 ;;
    ocr)
      "$PY" bench/real/ocr_accuracy.py --out "$out/ocr.md" > /dev/null ;;
    contention)
      for spec in resnet50:bench/models/zoo/resnet50.onnx:input:1x3x224x224 \
                  mobilenet_v2:bench/models/zoo/mobilenet_v2.onnx:input:1x3x224x224 \
                  rec:$MODELS/ch_PP-OCRv4_rec_infer.onnx:x:1x3x48x320; do
        IFS=: read -r name model input shape <<< "$spec"
        dnn=$(tuned "c_$name" "$model" "$input" "$shape")
        for busy in 0 2; do
          "$PY" bench/compare/contention.py "$model" "$dnn" "$busy" 7 "$shape" "$work/c_$name.dnn" >> "$out/contention.txt"
        done
      done ;;
    load)
      "$CLI" import bench/models/zoo/resnet50.onnx -o "$work/r50.dnn" > /dev/null
      "$CLI" tune "$work/r50.dnn" -o "$work/r50_f32.dnn" --threads 2 > /dev/null 2>&1
      "$CLI" tune "$work/r50.dnn" -o "$work/r50_hyb.dnn" --threads 2 --schemas 'cpu:float32:*,cpu:qint8:*' \
        --accuracy none > /dev/null 2>&1
      {
        ls -l "$work"/r50_f32.dnn "$work"/r50_hyb.dnn
        for f in r50_f32 r50_hyb; do for _ in 1 2 3; do build/load_bench "$work/$f.dnn" 2; done; done
      } > "$out/load.txt" 2>&1 ;;
    *) echo "unknown step '$step'" >&2; exit 2 ;;
  esac
done
echo "wrote $out" >&2
