# Cross build for 64-bit ARM Linux (scripts/arm64.sh): Debian's cross compiler
# (g++-aarch64-linux-gnu) over a sysroot of Debian's arm64 packages
# (SOFTNEURO_ARM64_SYSROOT: what scripts/arm64.sh extracts from their .deb files),
# programs and tests run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR: ctest too).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(NOT SOFTNEURO_ARM64_SYSROOT)
  set(SOFTNEURO_ARM64_SYSROOT "$ENV{SOFTNEURO_ARM64_SYSROOT}")
endif()
if(NOT IS_DIRECTORY "${SOFTNEURO_ARM64_SYSROOT}/usr/include")
  message(FATAL_ERROR "SOFTNEURO_ARM64_SYSROOT='${SOFTNEURO_ARM64_SYSROOT}' is not a sysroot of Debian's arm64 packages "
                      "(scripts/arm64.sh makes one)")
endif()
set(SOFTNEURO_ARM64_SYSROOT "${SOFTNEURO_ARM64_SYSROOT}" CACHE PATH "the arm64 sysroot")
set(CMAKE_SYSROOT "${SOFTNEURO_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${SOFTNEURO_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # flatc, protoc, Python: the host's
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Shared libraries' own dependencies (libprotobuf's zlib, oneDNN's libgomp) resolve in the sysroot.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${SOFTNEURO_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu -Wl,-rpath-link,${SOFTNEURO_ARM64_SYSROOT}/lib/aarch64-linux-gnu")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${CMAKE_EXE_LINKER_FLAGS_INIT}")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L "${SOFTNEURO_ARM64_SYSROOT}")
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")  # GCC notes an ABI change of GCC 10 on every std::pair<float, float> argument
