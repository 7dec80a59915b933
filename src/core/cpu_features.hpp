// CPU instruction-set features, detected once at run time (cpuinfo, plus CPUID
// for what Debian's cpuinfo predates). Routines whose instructions the CPU or
// the OS (saved register state) lacks say unsupported, so a binary built on one
// machine runs correctly on another.
#pragma once

namespace softneuro::core {

struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
  bool avx_vnni = false;            ///< VEX-encoded VNNI (Alder Lake, Sapphire Rapids)
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;

  /// AVX2 with FMA: the baseline of our vectorised float32 kernels.
  bool avx2_fma() const { return avx2 && fma; }
  /// AVX-512 F+BW+VL+DQ ("avx512_core"), what our 512-bit kernels use.
  bool avx512_core() const { return avx512f && avx512bw && avx512vl && avx512dq; }
};

/// The features of the CPU running this process (detected on first call, thread-safe).
const CpuFeatures& cpu_features();

}  // namespace softneuro::core
