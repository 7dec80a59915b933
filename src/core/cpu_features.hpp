// CPU instruction-set features, detected once at run time (cpuinfo, plus CPUID
// for what Debian's cpuinfo predates). Routines whose instructions the CPU or
// the OS (saved register state) lacks say unsupported, so a binary built on one
// machine runs correctly on another.
//
// SOFTNEURO_MAX_CPU_ISA caps what is detected (oneDNN's DNNL_MAX_CPU_ISA names
// and order): a machine then dispatches as one with less would, so an AVX2
// target's routine choice, tuning and test suite can be reproduced on an
// AVX-512 machine. oneDNN is capped with it; XNNPACK, which picks its kernels
// itself, stays out (its routines say unsupported under a cap).
#pragma once

#include <optional>
#include <string_view>

namespace softneuro::core {

struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
  bool avx_vnni = false;            ///< VEX-encoded VNNI (Alder Lake, Sapphire Rapids)
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
  // 64-bit ARM (aarch64): Advanced SIMD (every aarch64 CPU), the int8 dot
  // products (SDOT/UDOT) and matrix multiply (SMMLA), half-precision
  // arithmetic, BF16, SVE and SVE2. SOFTNEURO_MAX_CPU_ISA caps x86 only.
  bool neon = false, dotprod = false, i8mm = false, fp16_arith = false, bf16 = false, sve = false, sve2 = false;

  /// AVX2 with FMA: the baseline of our vectorised float32 kernels.
  bool avx2_fma() const { return avx2 && fma; }
  /// AVX-512 F+BW+VL+DQ ("avx512_core"), what our 512-bit kernels use.
  bool avx512_core() const { return avx512f && avx512bw && avx512vl && avx512dq; }
  bool operator==(const CpuFeatures&) const = default;
  /// Every feature set (what a cap leaves of a CPU that has everything).
  static CpuFeatures every();
};

/// Instruction-set levels, each including those before it (oneDNN's order).
enum class CpuIsa { sse41, avx2, avx2_vnni, avx512_core, avx512_core_vnni, avx512_core_bf16, avx512_core_amx, all };

/// The level named `name` (as SOFTNEURO_MAX_CPU_ISA spells it, any case), or none.
std::optional<CpuIsa> parse_cpu_isa(std::string_view name);
std::string_view cpu_isa_name(CpuIsa isa);
/// `f` without the features above `max` (pure: the test of the cap).
CpuFeatures cap_cpu_features(CpuFeatures f, CpuIsa max);
/// The cap from SOFTNEURO_MAX_CPU_ISA (read once; `all` when unset, or unknown: then a warning).
CpuIsa max_cpu_isa();

/// The features of the CPU running this process, within max_cpu_isa()
/// (detected on first call, thread-safe).
const CpuFeatures& cpu_features();
/// Whether max_cpu_isa() takes away an instruction set this CPU has: code that
/// picks its kernels itself (XNNPACK) must then stay out.
bool cpu_features_capped();
/// Whether this process may use the AMX tile registers: the CPU has them
/// (within max_cpu_isa()) and the operating system granted their state (Linux
/// grants it to a process that asks; asked once, for every thread).
bool amx_tiles_permitted();

}  // namespace softneuro::core
