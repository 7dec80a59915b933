#include "core/cpu_features.hpp"

#include "core/log.hpp"

#include <cpuinfo.h>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>

namespace softneuro::core {
namespace {

void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
#else
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

unsigned long long xgetbv0() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
#else
  return 0;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  if (!cpuinfo_initialize()) return f;  // unknown CPU: only scalar routines
#if defined(__x86_64__) || defined(__i386__)
  // cpuinfo already checks that the OS saves ymm/zmm state for these.
  f.avx = cpuinfo_has_x86_avx();
  f.avx2 = cpuinfo_has_x86_avx2();
  f.fma = cpuinfo_has_x86_fma3();
  f.f16c = cpuinfo_has_x86_f16c();
  f.avx512f = cpuinfo_has_x86_avx512f();
  f.avx512bw = cpuinfo_has_x86_avx512bw();
  f.avx512vl = cpuinfo_has_x86_avx512vl();
  f.avx512dq = cpuinfo_has_x86_avx512dq();
  f.avx512_vnni = cpuinfo_has_x86_avx512vnni();
  f.avx512_bf16 = cpuinfo_has_x86_avx512bf16();
  // Newer than Debian's cpuinfo: read CPUID leaf 7 directly.
  unsigned r0[4], r1[4], max[4];
  cpuid(0, 0, max);
  if (max[0] >= 7) {
    cpuid(7, 0, r0);
    cpuid(7, 1, r1);
    const unsigned long long xcr0 = f.avx ? xgetbv0() : 0;  // AVX implies OSXSAVE here
    const bool zmm_state = (xcr0 & 0xe6) == 0xe6;
    const bool tile_state = (xcr0 & 0x60000) == 0x60000;  // XTILECFG and XTILEDATA
    f.avx_vnni = f.avx2 && ((r1[0] >> 4) & 1u);
    f.avx512_fp16 = zmm_state && f.avx512f && ((r0[3] >> 23) & 1u);
    f.amx_bf16 = tile_state && ((r0[3] >> 22) & 1u);
    f.amx_tile = tile_state && ((r0[3] >> 24) & 1u);
    f.amx_int8 = tile_state && ((r0[3] >> 25) & 1u);
  }
#elif defined(__aarch64__)
  f.neon = cpuinfo_has_arm_neon();
  f.dotprod = cpuinfo_has_arm_neon_dot();
  f.fp16_arith = cpuinfo_has_arm_neon_fp16_arith();
  f.bf16 = cpuinfo_has_arm_bf16();
  f.sve = cpuinfo_has_arm_sve();
  f.sve2 = cpuinfo_has_arm_sve2();
  // Newer than Debian's cpuinfo: the kernel's HWCAP2_I8MM bit.
  f.i8mm = (getauxval(AT_HWCAP2) >> 13) & 1u;
#endif
  return f;
}

constexpr std::array<std::pair<CpuIsa, std::string_view>, 8> kIsaNames{{{CpuIsa::sse41, "sse41"},
                                                                          {CpuIsa::avx2, "avx2"},
                                                                          {CpuIsa::avx2_vnni, "avx2_vnni"},
                                                                          {CpuIsa::avx512_core, "avx512_core"},
                                                                          {CpuIsa::avx512_core_vnni, "avx512_core_vnni"},
                                                                          {CpuIsa::avx512_core_bf16, "avx512_core_bf16"},
                                                                          {CpuIsa::avx512_core_amx, "avx512_core_amx"},
                                                                          {CpuIsa::all, "all"}}};

}  // namespace

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& [isa, n] : kIsaNames)
    if (n == lower) return isa;
  return std::nullopt;
}

std::string_view cpu_isa_name(CpuIsa isa) {
  for (const auto& [i, n] : kIsaNames)
    if (i == isa) return n;
  return "?";
}

CpuFeatures cap_cpu_features(CpuFeatures f, CpuIsa max) {
  auto below = [&](CpuIsa level) { return max < level; };
  if (below(CpuIsa::avx2)) f.avx = f.avx2 = f.fma = f.f16c = false;
  if (below(CpuIsa::avx2_vnni)) f.avx_vnni = false;
  if (below(CpuIsa::avx512_core)) f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = false;
  if (below(CpuIsa::avx512_core_vnni)) f.avx512_vnni = false;
  if (below(CpuIsa::avx512_core_bf16)) f.avx512_bf16 = false;
  // Sapphire Rapids brought AMX and AVX-512 FP16 together.
  if (below(CpuIsa::avx512_core_amx)) f.amx_tile = f.amx_int8 = f.amx_bf16 = f.avx512_fp16 = false;
  return f;
}

CpuIsa max_cpu_isa() {
  static const CpuIsa cap = [] {
    const char* env = std::getenv("SOFTNEURO_MAX_CPU_ISA");
    if (!env || !*env) return CpuIsa::all;
    if (auto isa = parse_cpu_isa(env)) return *isa;
    std::string names;
    for (const auto& [i, n] : kIsaNames) names += (names.empty() ? "" : ", ") + std::string(n);
    warn("SOFTNEURO_MAX_CPU_ISA={}: unknown level, ignored (levels: {})", env, names);
    return CpuIsa::all;
  }();
  return cap;
}

namespace {
const CpuFeatures& detected() {
  static const CpuFeatures f = detect();
  return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    const CpuIsa cap = max_cpu_isa();
    if (cap != CpuIsa::all) info("SOFTNEURO_MAX_CPU_ISA={}: routines dispatch as on a CPU without more", cpu_isa_name(cap));
    return cap_cpu_features(detected(), cap);
  }();
  return features;
}

bool cpu_features_capped() {
  static const bool capped = !(detected() == cpu_features());
  return capped;
}

bool amx_tiles_permitted() {
  static const bool ok = [] {
    if (!cpu_features().amx_tile) return false;
#if defined(__linux__) && defined(__x86_64__)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

CpuFeatures CpuFeatures::every() {
  CpuFeatures f;
  f.avx = f.avx2 = f.fma = f.f16c = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  f.avx512_vnni = f.avx512_bf16 = f.avx512_fp16 = f.avx_vnni = true;
  f.amx_tile = f.amx_int8 = f.amx_bf16 = true;
  f.neon = f.dotprod = f.i8mm = f.fp16_arith = f.bf16 = f.sve = f.sve2 = true;
  return f;
}

}  // namespace softneuro::core
