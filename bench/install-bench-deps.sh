#!/usr/bin/env bash
# Installs what the benchmarks in bench/ need, beyond scripts/install-deps.sh:
#  - Debian's PyTorch, torchvision and onnx for /usr/bin/python3 (the model zoo export);
#  - ONNX Runtime from pip, into a virtual environment bench/.venv that also sees
#    Debian's packages (--system-site-packages), never into the system Python.
# Idempotent: packages already present are skipped.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(python3-torch python3-torchvision python3-onnx python3-numpy python3-venv python3-pip)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Debian's interpreter, not whatever python3 comes first on PATH.
if [ ! -x "$HERE/.venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$HERE/.venv"
fi
"$HERE/.venv/bin/python" -c "import onnxruntime" 2>/dev/null || "$HERE/.venv/bin/pip" install -q onnxruntime
# ONNX Runtime's quantisation tools (bench/real/check_quantized.py) need ml_dtypes
# and onnx.reference (onnx >= 1.13; Debian's is 1.12): both into the venv only.
"$HERE/.venv/bin/python" -c "import ml_dtypes, onnx.reference" 2>/dev/null || "$HERE/.venv/bin/pip" install -q ml_dtypes "onnx>=1.16"
# onnx-ir: ONNX Runtime's weight-only quantizer (MatMulNBitsQuantizer, gpt2_kv.py --nbits) imports it.
"$HERE/.venv/bin/python" -c "import onnx_ir" 2>/dev/null || "$HERE/.venv/bin/pip" install -q onnx-ir
# Hugging Face transformers for bench/transformers/ (hf_models.py, gpt2_kv.py): 4.36.2, which
# exports with Debian's torch 1.13 (hf_models.py checked with it on 2026-12-03).
"$HERE/.venv/bin/python" -c "import transformers" 2>/dev/null || "$HERE/.venv/bin/pip" install -q "transformers==4.36.2"
"$HERE/.venv/bin/python" -c "import onnxruntime, torch, torchvision, onnx; print('onnxruntime', onnxruntime.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'onnx', onnx.__version__)"
