// The 32-channel bfloat16 depthwise kernels (conv_kernels_bf16_32.inl) for
// CPUs with AVX512_BF16: their outputs rounded by vcvtne2ps2bf16. See
// conv_kernels.hpp; conv_kernels.cpp checks the CPU before calling in here.
// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define SN_F32_AVX512 1
#define SN_BF16_NATIVE 1
#include "routines/cpu/conv_kernels.hpp"
#include "routines/cpu/f32_simd.hpp"

#include <algorithm>

namespace softneuro::cpu::SN_F32_NS {
namespace {
#include "routines/cpu/conv_kernels_bf16_32.inl"
}  // namespace
}  // namespace softneuro::cpu::SN_F32_NS

namespace softneuro::cpu::conv {
void unchecked_native_bf16_kernels(Kernels& k) {
  k.depthwise_block_nhwc_bf16_32[0][0] = &avx512::depthwise_block_bf16_32<3, 1>;
  k.depthwise_block_nhwc_bf16_32[0][1] = &avx512::depthwise_block_bf16_32<3, 2>;
  k.depthwise_block_nhwc_bf16_32[1][0] = &avx512::depthwise_block_bf16_32<5, 1>;
  k.depthwise_block_nhwc_bf16_32[1][1] = &avx512::depthwise_block_bf16_32<5, 2>;
}
}  // namespace softneuro::cpu::conv
