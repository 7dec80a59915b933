#!/usr/bin/env bash
# Installs every build and test dependency of libsoftneuro from Debian's packages.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(
  build-essential cmake pkg-config ninja-build ccache  # ccache: the sanitizer and fuzzing rebuilds (CMakeLists.txt)
  libeigen3-dev libdnnl-dev libxnnpack-dev libpthreadpool-dev libcpuinfo-dev
  flatbuffers-compiler libflatbuffers-dev libfmt-dev catch2
  libonnx-dev libprotobuf-dev protobuf-compiler
  python3-numpy zlib1g-dev
  python3-venv python3-pip  # the ONNX node tests' venv (tests/onnx_node/run.py: onnx from the package index)
  python3-dev  # the Python package's module (pip install .: scikit-build-core and nanobind from the package index)
  clang-14 libclang-rt-14-dev  # the fuzzing build (libFuzzer, scripts/fuzz.sh)
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
