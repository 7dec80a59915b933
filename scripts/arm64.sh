#!/usr/bin/env bash
# The aarch64 build, tested under emulation (docs/arm.md):
#
#   scripts/arm64.sh PROGRAM [ARGS...]    e.g. scripts/arm64.sh softneuro routines conv2
#                                              scripts/arm64.sh softneuro_tests "[routines]"
#   scripts/arm64.sh                       make the sysroot and the build only
#
# 1. Host tools (Debian): the cross compiler g++-aarch64-linux-gnu, qemu-user-static,
#    and the arm64 architecture in dpkg (apt-get download reads its package lists).
# 2. A sysroot (build-arm64/sysroot) of Debian's arm64 packages of our dependencies
#    and everything they depend on, extracted from their .deb files (apt-get download,
#    dpkg -x): XNNPACK's arm64 package cannot be installed beside the amd64 one.
#    Made again when the package versions change (build-arm64/sysroot.stamp).
# 3. The same CMake project configured with cmake/aarch64-linux-gnu.cmake in
#    build-arm64/ and built (targets as needed: ninja does nothing when fresh).
# 4. PROGRAM (a name in build-arm64/ or below) runs under qemu-aarch64 with ARGS, on an
#    emulated Neoverse N1 unless QEMU_CPU names another CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="$ROOT/build-arm64"
SYSROOT="$OUT/sysroot"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
say() { printf '== arm64.sh: %s\n' "$*" >&2; }

# 1. Host tools.
host=(g++-aarch64-linux-gnu qemu-user-static ninja-build cmake flatbuffers-compiler protobuf-compiler)
missing=()
for p in "${host[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  say "adding the arm64 architecture to dpkg"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# 2. The sysroot: our dependencies' arm64 packages (scripts/install-deps.sh's
#    libraries) and their dependencies, the C and C++ runtimes included.
deps=(libdnnl-dev libxnnpack-dev libpthreadpool-dev libcpuinfo-dev libflatbuffers-dev libfmt-dev
      libonnx-dev libprotobuf-dev zlib1g-dev catch2 libgomp1 libstdc++-12-dev libc6-dev)
arch_all=(libeigen3-dev)
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "${deps[@]/%/:arm64}" 2>/dev/null | grep -E '^[a-z0-9].*:arm64$' | sort -u
}
pkgs=($(closure) "${arch_all[@]}")
stamp="$(apt-cache policy "${pkgs[@]}" | awk '/^[^ ]/ {p = $1} /Candidate/ {print p, $2}')"
if [ ! -f "$OUT/sysroot.stamp" ] || [ "$(cat "$OUT/sysroot.stamp")" != "$stamp" ]; then
  say "making the sysroot from ${#pkgs[@]} arm64 packages"
  rm -rf "$SYSROOT" "$OUT/debs"
  mkdir -p "$SYSROOT" "$OUT/debs"
  (cd "$OUT/debs" && apt-get download -q "${pkgs[@]}" >/dev/null)
  for deb in "$OUT"/debs/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
  # Absolute symbolic links in the packages (libfoo.so -> /lib/...) point into the sysroot.
  find "$SYSROOT" -type l -lname '/*' | while read -r link; do
    ln -sfn "$SYSROOT$(readlink "$link")" "$link"
  done
  echo "$stamp" > "$OUT/sysroot.stamp"
fi

# 3. The build.
if [ ! -f "$OUT/build.ninja" ]; then
  say "configuring build-arm64"
  cmake -S "$ROOT" -B "$OUT" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON \
    -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" -DSOFTNEURO_ARM64_SYSROOT="$SYSROOT" \
    -DSOFTNEURO_CUDA=OFF -DSOFTNEURO_PYTHON=OFF >&2
fi
jobs="$(nproc)"
if [ $# -eq 0 ]; then
  cmake --build "$OUT" -j "$jobs" >&2
  exit 0
fi

# 4. The program, built (with what it needs) and run under emulation.
prog="$1"
shift
cmake --build "$OUT" -j "$jobs" --target "$prog" >&2
path="$(find "$OUT" -path "$SYSROOT" -prune -o -type f -name "$prog" -perm -u+x -print | head -n 1)"
if [ -z "$path" ]; then
  echo "arm64.sh: no program '$prog' in build-arm64" >&2
  exit 2
fi
# The emulated CPU: a Neoverse N1 (Armv8.2: Advanced SIMD, dotprod, fp16; no SVE), the
# class of the boards and servers users have (Raspberry Pi 5's Cortex-A76, Graviton2,
# Jetson Orin's A78AE), unless QEMU_CPU says otherwise (QEMU_CPU=max: SVE2, i8mm, bf16).
export QEMU_CPU="${QEMU_CPU:-neoverse-n1}"
# Tests whose premise is a real CPU's timing (a cache's drift) skip their timing checks under it.
export SOFTNEURO_EMULATED=qemu
exec qemu-aarch64-static -L "$SYSROOT" "$path" "$@"
