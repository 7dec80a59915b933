// AMX kernels of cpu:bfloat16/tile_attention and cpu[:bfloat16]/tile_dense
// (tile_kernels.hpp). Tiles 0-3 accumulate a 32x32 block (two row tiles by
// two column tiles), 4-5 hold the A rows and 6-7 the B columns of one step
// (32 bf16 or 64 int8 deep): four tile products per four loads, oneDNN's
// brgemm blocking.
#include "routines/cpu/tile_kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace softneuro::cpu::tile {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

uint16_t round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__mmask16 first(int64_t n) { return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1u); }

}  // namespace

void configure_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  // GCC 12's _tile_loadconfig names only the first 8 bytes as read: the
  // stores to the rest could be dropped. The whole struct is the operand here.
  __asm__ volatile("ldtilecfg %0" ::"m"(c));
}

void release_tiles() { _tile_release(); }

namespace {

/// rows[i] (16 uint32 each) transposed in place: rows[i][j] <-> rows[j][i].
void transpose_16x16(__m512i* rows) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[4a + c]: rows 4a..4a+3's columns c, c + 4, c + 8, c + 12 (one 128-bit lane each).
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c) {
      t[8 * a + c] = _mm512_shuffle_i32x4(u[8 * a + c], u[8 * a + 4 + c], 0x88);
      t[8 * a + 4 + c] = _mm512_shuffle_i32x4(u[8 * a + c], u[8 * a + 4 + c], 0xdd);
    }
  for (int c = 0; c < 8; ++c) {
    rows[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
    rows[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
  }
}

}  // namespace

void pack_keys(const uint16_t* k, int64_t key_stride, int64_t dim_stride, int64_t keys, int64_t d, int64_t keys_pad,
               int64_t d_pad, uint16_t* out) {
  const int64_t steps = d_pad / 32;
  // A tile's row r is dims 2r and 2r + 1 (one uint32) of its 16 keys: the
  // transpose of the keys' 32-dim rows read as 16 uint32 each.
  if (dim_stride == 1) {
    for (int64_t kb = 0; kb < keys_pad / 16; ++kb)
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t dims = std::min<int64_t>(32, std::max<int64_t>(0, d - s * 32));
        const __mmask32 m = dims >= 32 ? ~__mmask32{0} : (__mmask32{1} << dims) - 1;
        __m512i rows[16];
        for (int64_t n = 0; n < 16; ++n) {
          const int64_t key = kb * 16 + n;
          rows[n] = key < keys ? _mm512_maskz_loadu_epi16(m, k + key * key_stride + s * 32) : _mm512_setzero_si512();
        }
        transpose_16x16(rows);
        uint16_t* tile = out + (kb * steps + s) * kTileElems;
        for (int r = 0; r < 16; ++r) _mm512_storeu_si512(tile + r * 32, rows[r]);
      }
    return;
  }
  for (int64_t kb = 0; kb < keys_pad / 16; ++kb)
    for (int64_t s = 0; s < steps; ++s) {
      uint16_t* tile = out + (kb * steps + s) * kTileElems;
      for (int64_t n = 0; n < 16; ++n) {
        const int64_t key = kb * 16 + n;
        const uint16_t* row = k + key * key_stride;
        for (int64_t e = 0; e < 32; ++e) {  // element (r = e / 2, n, t = e % 2)
          const int64_t dim = s * 32 + e;
          tile[(e / 2) * 32 + n * 2 + (e % 2)] = key < keys && dim < d ? row[dim * dim_stride] : uint16_t{0};
        }
      }
    }
}

void pack_values(const uint16_t* v, int64_t key_stride, int64_t col_stride, int64_t keys, int64_t dv, int64_t keys_pad,
                 int64_t dv_pad, uint16_t* out) {
  const int64_t steps = keys_pad / 32;
  // out[2n] = row a's column n, out[2n + 1] = row b's.
  alignas(64) uint16_t pairs[32];
  for (int i = 0; i < 16; ++i) {
    pairs[2 * i] = static_cast<uint16_t>(i);
    pairs[2 * i + 1] = static_cast<uint16_t>(32 + i);
  }
  const __m512i index = _mm512_load_si512(pairs);
  for (int64_t g = 0; g < dv_pad / 16; ++g) {
    const int64_t c0 = g * 16, cols = dv - c0 >= 16 ? 16 : (dv > c0 ? dv - c0 : 0);
    for (int64_t ks = 0; ks < steps; ++ks) {
      uint16_t* tile = out + (g * steps + ks) * kTileElems;
      for (int64_t r = 0; r < 16; ++r) {
        const int64_t key = ks * 32 + 2 * r;
        __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
        if (col_stride == 1) {
          if (key < keys) a = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(first(cols), v + key * key_stride + c0));
          if (key + 1 < keys)
            b = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(first(cols), v + (key + 1) * key_stride + c0));
        } else {
          alignas(32) uint16_t ra[16] = {}, rb[16] = {};
          for (int64_t n = 0; n < cols; ++n) {
            if (key < keys) ra[n] = v[key * key_stride + (c0 + n) * col_stride];
            if (key + 1 < keys) rb[n] = v[(key + 1) * key_stride + (c0 + n) * col_stride];
          }
          a = _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(ra)));
          b = _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(rb)));
        }
        _mm512_storeu_si512(tile + r * 32, _mm512_permutex2var_epi16(a, index, b));
      }
    }
  }
}

namespace {

/// C[32, 32] (float32, row stride ldc) = A[32, steps * 32] · B: A bf16 rows of
/// stride lda (elements), B two packed column tile streams b0, b1 (tile st at
/// st * kTileElems).
void bf16_block(const uint16_t* a, int64_t lda, const uint16_t* b0, const uint16_t* b1, int64_t steps, float* c,
                int64_t ldc) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t st = 0; st < steps; ++st) {
    _tile_loadd(4, a + st * 32, lda * 2);
    _tile_loadd(5, a + 16 * lda + st * 32, lda * 2);
    _tile_loadd(6, b0 + st * kTileElems, 64);
    _tile_loadd(7, b1 + st * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

}  // namespace

void scores(const uint16_t* q, int64_t d_pad, const uint16_t* k_packed, int64_t keys, float* s, int64_t lds,
            int64_t max_keys, float* row_max) {
  const int64_t steps = d_pad / 32;
  __m512 m[32];
  if (row_max)
    for (__m512& v : m) v = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < keys; j += 32) {  // keys j..j+15 and j+16..j+31: packed key blocks j/16 and j/16 + 1
    const uint16_t* b0 = k_packed + (j / 16) * steps * kTileElems;
    bf16_block(q, d_pad, b0, b0 + steps * kTileElems, steps, s + j, lds);
    if (!row_max) continue;
    // Each row's largest score while the block is in L1 (keys past max_keys left out).
    const __mmask16 k0 = first(max_keys - j), k1 = first(max_keys - j - 16);
    for (int r = 0; r < 32; ++r) {
      const float* row = s + r * lds + j;
      m[r] = _mm512_mask_max_ps(m[r], k0, m[r], _mm512_maskz_loadu_ps(k0, row));
      m[r] = _mm512_mask_max_ps(m[r], k1, m[r], _mm512_maskz_loadu_ps(k1, row + 16));
    }
  }
  if (row_max)
    for (int r = 0; r < 32; ++r) row_max[r] = _mm512_reduce_max_ps(m[r]);
}

void values(const uint16_t* p, int64_t ldp, const uint16_t* v_packed, int64_t keys, int64_t keys_pad, int64_t dv_pad,
            float* o) {
  const int64_t steps = keys_pad / 32;
  for (int64_t c = 0; c < dv_pad; c += 32) {  // columns c..c+31: packed column groups c/16 and c/16 + 1
    const uint16_t* b0 = v_packed + (c / 16) * steps * kTileElems;
    bf16_block(p, ldp, b0, b0 + steps * kTileElems, keys / 32, o + c, dv_pad);
  }
}

float softmax_row(const float* s, const float* bias, float add, int64_t n, float scale, uint16_t* p, int64_t n_pad,
                  float* max_out, const float* score_max) {
  // The largest t: without a bias row and with a positive scale, the largest
  // score's (one max a vector). A NaN among the scores need not reach the max:
  // it reaches the sum below, and the caller then computes the row as softmax does.
  float mx;
  if (score_max && !bias && scale > 0) {
    mx = *score_max * scale + add;
  } else if (!bias && scale > 0) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = first(n - j);
      m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, s + j));
    }
    mx = _mm512_reduce_max_ps(m) * scale + add;
  } else {
    const __m512 vs = _mm512_set1_ps(scale), va = _mm512_set1_ps(add);
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = first(n - j);
      const __m512 b = bias ? _mm512_maskz_loadu_ps(k, bias + j) : va;
      m = _mm512_mask_max_ps(m, k, m, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, s + j), vs, b));
    }
    mx = _mm512_reduce_max_ps(m);
  }
  *max_out = mx;
  // exp(t - mx) = 2^u, u = (t - mx) log2 e = floor(u) + f, 0 <= f < 1 (vreduceps):
  // 2^f by a degree-3 polynomial fitted to its relative error (at most 7.5e-5,
  // against bf16's rounding of 2e-3), times 2^floor(u) (vscalefps); u below
  // -126 gives 0, not a subnormal; NaN passes to the sum.
  const float log2e = 1.44269504088896341f;
  const __m512 us = _mm512_set1_ps(scale * log2e), ua = _mm512_set1_ps((add - mx) * log2e),
               l2 = _mm512_set1_ps(log2e), off = _mm512_set1_ps(-mx * log2e), low = _mm512_set1_ps(-126.0f);
  const __m512 c0 = _mm512_set1_ps(0.99992514f), c1 = _mm512_set1_ps(0.695834f), c2 = _mm512_set1_ps(0.22606708f),
               c3 = _mm512_set1_ps(0.07802404f);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = first(n - j);
    const __m512 x = _mm512_maskz_loadu_ps(k, s + j);
    const __m512 u = bias ? _mm512_fmadd_ps(x, us, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, bias + j), l2, off))
                          : _mm512_fmadd_ps(x, us, ua);
    const __m512 f = _mm512_reduce_ps(u, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 q = _mm512_fmadd_ps(c3, f, c2);
    q = _mm512_fmadd_ps(q, f, c1);
    q = _mm512_fmadd_ps(q, f, c0);
    const __m512 e = _mm512_maskz_scalef_ps(k & _mm512_cmp_ps_mask(u, low, _CMP_NLT_UQ), q, u);
    sum = _mm512_add_ps(sum, e);
    const __m256bh h = _mm512_cvtneps_pbh(e);
    _mm256_mask_storeu_epi16(p + j, k, reinterpret_cast<const __m256i&>(h));
  }
  const int64_t done = n < 0 ? 0 : n;
  if (n_pad > done) std::memset(p + done, 0, sizeof(uint16_t) * (n_pad - done));
  return _mm512_reduce_add_ps(sum);
}

void to_bf16(const float* x, uint16_t* y, int64_t n, int64_t n_pad) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(y + i, reinterpret_cast<const __m512i&>(h));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = first(n - i);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(y + i, m, reinterpret_cast<const __m256i&>(h));
  }
  if (n_pad > n) std::memset(y + n, 0, sizeof(uint16_t) * (n_pad - n));
}

void scaled_to_bf16(const float* x, float scale, uint16_t* y, int64_t stride, int64_t n) {
  if (stride != 1) {
    for (int64_t i = 0; i < n; ++i) y[i * stride] = round_bf16(x[i] * scale);
    return;
  }
  const __m512 by = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first(n - i);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), by));
    _mm256_mask_storeu_epi16(y + i, m, reinterpret_cast<const __m256i&>(h));
  }
}

void from_bf16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first(n - i);
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
}

float quantize_row(const float* x, int64_t k, int8_t* q, int64_t k_pad, int64_t chunk_stride) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 bad = 0;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)), inf = _mm512_set1_ps(INFINITY);
  for (int64_t j = 0; j < k; j += 16) {
    const __mmask16 v = first(k - j);
    const __m512 a = _mm512_and_ps(_mm512_maskz_loadu_ps(v, x + j), abs_mask);
    bad |= _mm512_mask_cmp_ps_mask(v, a, inf, _CMP_NLT_UQ);  // NaN or inf
    m = _mm512_max_ps(m, a);
  }
  if (bad) return NAN;
  const float mx = _mm512_reduce_max_ps(m);
  const float s = mx / 127.0f;
  const __m512 by = _mm512_set1_ps(mx > 0 ? 127.0f / mx : 0.0f);
  for (int64_t j = 0; j < k_pad; j += 16) {
    const __mmask16 v = j < k ? first(k - j) : __mmask16(0);
    const __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(v, x + j), by));  // nearest, ties to even
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + (j / kDepth) * chunk_stride + j % kDepth), _mm512_cvtsepi32_epi8(i));
  }
  return s;
}

namespace {

/// One strip's products into c (32 x 32 int32, row stride 32): rows <= 16 the first 16 only.
void strip_products(const int8_t* a, int64_t k_pad, int64_t rows, const int8_t* b0, const int8_t* b1, int32_t* c) {
  const int64_t steps = k_pad / kDepth;
  _tile_zero(0);
  _tile_zero(1);
  if (rows > 16) {
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t ks = 0; ks < steps; ++ks) {
      _tile_loadd(4, a + ks * 32 * kDepth, kDepth);
      _tile_loadd(5, a + ks * 32 * kDepth + 16 * kDepth, kDepth);
      _tile_loadd(6, b0 + ks * 1024, 64);
      _tile_loadd(7, b1 + ks * 1024, 64);
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(2, c + 16 * 32, 128);
    _tile_stored(3, c + 16 * 32 + 16, 128);
  } else {
    for (int64_t ks = 0; ks < steps; ++ks) {
      _tile_loadd(4, a + ks * 32 * kDepth, kDepth);
      _tile_loadd(6, b0 + ks * 1024, 64);
      _tile_loadd(7, b1 + ks * 1024, 64);
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
    }
  }
  _tile_stored(0, c, 128);
  _tile_stored(1, c + 16, 128);
}

}  // namespace

namespace {

__m512 apply(const Epilogue& e, __m512 v) {
  const __m512 zero = _mm512_setzero_ps();
  switch (e.act) {
    case Act::none: break;
    case Act::relu: v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, zero); break;
    case Act::clip: v = _mm512_min_ps(_mm512_set1_ps(e.p1), _mm512_max_ps(_mm512_set1_ps(e.p0), v)); break;
    case Act::hardswish:
      v = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(zero, _mm512_add_ps(v, _mm512_set1_ps(3.0f))))),
                        _mm512_set1_ps(1.0f / 6.0f));
      break;
    case Act::hardsigmoid:
      v = _mm512_min_ps(_mm512_set1_ps(1.0f), _mm512_max_ps(zero, _mm512_fmadd_ps(_mm512_set1_ps(e.p0), v, _mm512_set1_ps(e.p1))));
      break;
  }
  return _mm512_fmadd_ps(v, _mm512_set1_ps(e.scale), _mm512_set1_ps(e.shift));
}

/// One strip's sums to the output rows.
void strip_epilogue(const int32_t* c, int64_t rows, const float* xs, const float* ws, const float* bias, int64_t cols,
                    const Epilogue& e, void* y, int64_t ldy, bool bf16, float* stage) {
  const __mmask16 m0 = first(cols), m1 = cols > 16 ? first(cols - 16) : __mmask16(0);
  const __m512 w0 = _mm512_loadu_ps(ws), w1 = _mm512_loadu_ps(ws + 16);
  const __m512 z0 = _mm512_loadu_ps(bias), z1 = _mm512_loadu_ps(bias + 16);
  if (e.activate) {  // the strip's values, then the routine's activation over all of them
    for (int64_t r = 0; r < rows; ++r) {
      const __m512 x = _mm512_set1_ps(xs[r]);
      const int32_t* cr = c + r * 32;
      _mm512_storeu_ps(stage + r * 32, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(cr)), _mm512_mul_ps(x, w0), z0));
      _mm512_storeu_ps(stage + r * 32 + 16,
                       _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(cr + 16)), _mm512_mul_ps(x, w1), z1));
    }
    e.activate(e.context, stage, rows * 32);
  }
  for (int64_t r = 0; r < rows; ++r) {
    __m512 v0, v1;
    if (e.activate) {
      v0 = _mm512_loadu_ps(stage + r * 32);
      v1 = _mm512_loadu_ps(stage + r * 32 + 16);
    } else {
      const __m512 x = _mm512_set1_ps(xs[r]);
      const int32_t* cr = c + r * 32;
      v0 = apply(e, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(cr)), _mm512_mul_ps(x, w0), z0));
      v1 = apply(e, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(cr + 16)), _mm512_mul_ps(x, w1), z1));
    }
    if (bf16) {
      uint16_t* yr = static_cast<uint16_t*>(y) + r * ldy;
      const __m256bh h0 = _mm512_cvtneps_pbh(v0), h1 = _mm512_cvtneps_pbh(v1);
      _mm256_mask_storeu_epi16(yr, m0, reinterpret_cast<const __m256i&>(h0));
      if (m1) _mm256_mask_storeu_epi16(yr + 16, m1, reinterpret_cast<const __m256i&>(h1));
    } else {
      float* yr = static_cast<float*>(y) + r * ldy;
      _mm512_mask_storeu_ps(yr, m0, v0);
      if (m1) _mm512_mask_storeu_ps(yr + 16, m1, v1);
    }
  }
}

}  // namespace

void dense_panel(const int8_t* a, int64_t m, int64_t k_pad, const int8_t* b0, const int8_t* b1, const float* xs,
                 const float* ws, const float* bias, int64_t cols, const Epilogue& e, void* y, int64_t ldy, bool bf16,
                 int32_t* scratch) {
  const int64_t esize = bf16 ? 2 : 4;
  int64_t prev = -1;
  for (int64_t r0 = 0; r0 < m; r0 += 32) {
    const int64_t rows = m - r0 < 32 ? m - r0 : 32;
    int32_t* c = scratch + ((r0 / 32) % 2) * 1024;
    strip_products(a + r0 * k_pad, k_pad, rows, b0, b1, c);
    if (prev >= 0) {
      const int64_t prows = m - prev < 32 ? m - prev : 32;
      strip_epilogue(scratch + ((prev / 32) % 2) * 1024, prows, xs + prev, ws, bias, cols, e,
                     static_cast<char*>(y) + prev * ldy * esize, ldy, bf16, reinterpret_cast<float*>(scratch + 2048));
    }
    prev = r0;
  }
  if (prev >= 0) {
    const int64_t prows = m - prev < 32 ? m - prev : 32;
    strip_epilogue(scratch + ((prev / 32) % 2) * 1024, prows, xs + prev, ws, bias, cols, e,
                   static_cast<char*>(y) + prev * ldy * esize, ldy, bf16, reinterpret_cast<float*>(scratch + 2048));
  }
}

}  // namespace softneuro::cpu::tile
