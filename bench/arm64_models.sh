#!/usr/bin/env bash
# The zoo and the trained models imported and run by the aarch64 build under
# qemu (scripts/arm64.sh), each output against ONNX Runtime run natively on this
# x86 machine, and a QDQ model against ONNX Runtime's int8 (issue 54; docs/arm.md):
#
#   bench/arm64_models.sh            # ResNet50, MobileNetV2, the PP-OCR models, YOLOv8n
#
# The rest of the aarch64 checks beside CI's (scripts/test.sh runs the unit and
# importer tests under qemu): about 5 minutes on 2 cores. Makes the bench venv,
# the zoo and the real models when missing (bench/install-bench-deps.sh,
# bench/models/export_zoo.py, bench/real/real_models.py).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
bash bench/install-bench-deps.sh >/dev/null
PY=bench/.venv/bin/python
for m in resnet50 mobilenet_v2; do
  [ -f "bench/models/zoo/$m.onnx" ] || /usr/bin/python3 bench/models/export_zoo.py "$m"
done
scripts/arm64.sh softneuro --version >/dev/null  # the sysroot and the CLI, built when missing or stale
# The aarch64 CLI as one program for the checks' --cli: qemu through scripts/arm64.sh.
cli="$ROOT/build-arm64/softneuro-qemu"
printf '#!/bin/sh\nexec "%s/scripts/arm64.sh" softneuro "$@"\n' "$ROOT" > "$cli"
chmod +x "$cli"
status=0
"$PY" bench/check_zoo.py resnet50 mobilenet_v2 --cli "$cli" || status=1
"$PY" bench/real/check_real.py --cli "$cli" || status=1
"$PY" bench/real/check_quantized.py --cli "$cli" --model mobilenet_v2 --inputs 5 2>&1 | grep -v "onnxruntime:" || status=1
exit $status
