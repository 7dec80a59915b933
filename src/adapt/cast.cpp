// Adapt routines that cast between float32 and the 16-bit floats on the CPU,
// in any layout (the layout stays; blocked layouts' zero padding stays zero):
//   "<cpu:float16[:layout]>/cast", "<cpu:bfloat16[:layout]>/cast"   from float32
//   "<cpu[:float32:layout]>/cast"                                   from float16 or bfloat16
// float16: IEEE binary16, round to nearest even, overflow to infinity,
// subnormals kept; with F16C (checked at run time) vcvtps2ph/vcvtph2ps,
// otherwise a scalar conversion with the same results.
// bfloat16: the upper half of a float32, round to nearest even; NaN stays a
// (quiet) NaN; from float32 16 values a step with AVX-512 BW, 8 with AVX2.
#include "adapt/cast.hpp"

#include "core/cpu_features.hpp"
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#include <cmath>
#include <cstring>

namespace softneuro {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------------------
// Scalar conversions (the definition; the vector paths give the same bits).

uint16_t f32_to_f16(float f) {
  const uint32_t x = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN, quieted
  if (ax >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16 (and inf): infinity
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): a multiple of 2^-24, rounded to nearest even.
    float scaled = float_of(ax) * 16777216.0f;  // exact: a power-of-two scaling
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  uint32_t h = ((((ax >> 23) - 127u + 15u) << 10) | ((ax >> 13) & 0x3ffu));
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right (up to infinity)
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24
    return sign ? -v : v;
  }
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));  // NaN: quieted, as vcvtph2ps
  return float_of(sign | ((e - 15u + 127u) << 23) | (m << 13));
}

using adapt::f32_to_bf16;
float bf16_to_f32(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

// ---------------------------------------------------------------------------
// Vector paths.

#if defined(__x86_64__)
bool has_f16c() {
  return core::cpu_features().f16c && core::cpu_features().avx;
}
bool has_avx2() {
  return core::cpu_features().avx2;
}
bool has_avx512bw() {
  return core::cpu_features().avx512f && core::cpu_features().avx512bw;
}

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

__attribute__((target("avx2"))) void f32_to_bf16_avx2(const float* x, uint16_t* y, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x400000);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int k = 0; k < 2; ++k) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8 * k));
      __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs_mask), inf);
      __m256i rounded = _mm256_add_epi32(v, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(v, 16), one)));
      r[k] = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(v, quiet), nan), 16);
    }
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), packed);
  }
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}
__attribute__((target("avx512f,avx512bw"))) void f32_to_bf16_avx512(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), adapt::f32x16_to_bf16(_mm512_loadu_si512(x + i)));
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}
__attribute__((target("avx2"))) void bf16_to_f32_avx2(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_slli_epi32(v, 16));
  }
  for (; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}
#endif

}  // namespace

namespace adapt {

void cast_values(DType from, DType to, const void* x, void* y, int64_t n) {
  const auto* f = static_cast<const float*>(x);
  const auto* h = static_cast<const uint16_t*>(x);
  auto* fo = static_cast<float*>(y);
  auto* ho = static_cast<uint16_t*>(y);
  if (from == DType::float32 && to == DType::float16) {
#if defined(__x86_64__)  // elsewhere the scalar loop (vectorised for the baseline)
    if (has_f16c()) return f32_to_f16_f16c(f, ho, n);
#endif
    for (int64_t i = 0; i < n; ++i) ho[i] = f32_to_f16(f[i]);
  } else if (from == DType::float16) {
#if defined(__x86_64__)  // elsewhere the scalar loop (vectorised for the baseline)
    if (has_f16c()) return f16_to_f32_f16c(h, fo, n);
#endif
    for (int64_t i = 0; i < n; ++i) fo[i] = f16_to_f32(h[i]);
  } else if (to == DType::bfloat16) {
#if defined(__x86_64__)  // elsewhere the scalar loop (vectorised for the baseline)
    if (has_avx512bw()) return f32_to_bf16_avx512(f, ho, n);
    if (has_avx2()) return f32_to_bf16_avx2(f, ho, n);
#endif
    for (int64_t i = 0; i < n; ++i) ho[i] = f32_to_bf16(f[i]);
  } else {
#if defined(__x86_64__)  // elsewhere the scalar loop (vectorised for the baseline)
    if (has_avx2()) return bf16_to_f32_avx2(h, fo, n);
#endif
    for (int64_t i = 0; i < n; ++i) fo[i] = bf16_to_f32(h[i]);
  }
}

}  // namespace adapt

namespace {

class Cast final : public PreparedRoutine {
 public:
  Cast(DType from, DType to, int64_t n) : from_(from), to_(to), n_(n) {}
  void run(const RunArgs& a) override {
    const auto* x = static_cast<const char*>(a.inputs[0]->data());
    auto* y = static_cast<char*>(a.outputs[0]->data());
    const std::size_t in_size = dtype_size(from_), out_size = dtype_size(to_);
    a.pool->parallel_for(n_, 16384, [&](int64_t b, int64_t e) {
      adapt::cast_values(from_, to_, x + b * static_cast<int64_t>(in_size), y + b * static_cast<int64_t>(out_size), e - b);
    });
  }

 private:
  DType from_, to_;
  int64_t n_;
};

bool is_half(DType d) { return d == DType::float16 || d == DType::bfloat16; }

class CastAdapt final : public Routine {
 public:
  std::string_view layer_type() const override { return "adapt"; }
  std::string_view algorithm() const override { return "cast"; }
  std::vector<Schema> schemas() const override {
    std::vector<Schema> out;
    for (DType d : {DType::float32, DType::float16, DType::bfloat16})
      for (Layout l : {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c}) out.push_back(Schema{Device::cpu, d, l});
    return out;
  }
  Support supports(const LayerInfo& info, const Schema& to) const override {
    Schema from = Schema::parse(info.layer->get_string("from"));
    if (from.device != Device::cpu || to.device != Device::cpu) return Support::no("casts on the CPU only");
    if (from.layout != to.layout)
      return Support::no(fmt::format("keeps the layout ({} -> {}: a reorder's work)", to_string(from.layout), to_string(to.layout)));
    const bool ok = (from.dtype == DType::float32 && is_half(to.dtype)) || (is_half(from.dtype) && to.dtype == DType::float32);
    if (!ok) return Support::no(fmt::format("casts float32 <-> float16/bfloat16, not {} -> {}", to_string(from.dtype), to_string(to.dtype)));
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& to, const RoutineParams&) const override {
    Schema from = Schema::parse(info.layer->get_string("from"));
    Support ok = supports(info, to);
    if (!ok) throw Error(fmt::format("{} cannot convert: {}", make_descriptor(to, "cast"), ok.reason));
    // Elements in memory, padding of blocked layouts included.
    const int64_t n = static_cast<int64_t>(storage_bytes(info.input_shapes.at(0), from.dtype, from.layout) / dtype_size(from.dtype));
    return std::make_unique<Cast>(from.dtype, to.dtype, n);
  }
};

SOFTNEURO_REGISTER_ROUTINE(CastAdapt);

}  // namespace
}  // namespace softneuro
