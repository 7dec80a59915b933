#!/bin/bash
# Packs this checkout's Release build (with the CUDA backend) for a GPU machine
# that has the NVIDIA driver and CUDA 13 libraries but not our Debian
# dependencies: the binaries, our libraries and every library they load from
# outside the C runtime, stripped, in .devpack/pack.tar.xz (git-ignored), plus
# the real models named. bench/gpu/device_check.sh unpacks and runs it there.
#   bench/gpu/pack.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/models" .devpack
bins=("$build/softneuro" "$build/softneuro_cuda_tests" "$build/cuda_bench")
cp "${bins[@]}" "$stage/bin/"
# Everything the loader resolves outside glibc/libstdc++ (the GPU machine has newer ones).
ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
models=${SOFTNEURO_REAL_MODELS:-$HOME/.cache/softneuro/real-models}
for m in ch_PP-OCRv4_rec_infer.onnx; do cp "$models/$m" "$stage/models/"; done
XZ_OPT="-T2 -3" tar -C "$stage" -cJf .devpack/pack.tar.xz .
ls -la .devpack/pack.tar.xz
