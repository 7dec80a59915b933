#include "core/cpu_features.hpp"

#include <cpuinfo.h>

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
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace softneuro::core
