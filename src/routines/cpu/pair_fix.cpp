#include "routines/cpu/pair_fix.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <numeric>

#include <emmintrin.h>  // SSE2: every x86-64 (the only CPUs that build this file)

namespace softneuro::pair_fix {

namespace {

bool unsafe(int32_t a, int32_t b) {
  return std::max(a, 0) + std::max(b, 0) > 128 || std::max(-a, 0) + std::max(-b, 0) > 128;
}

constexpr int kGroup = 16;
using Cost = std::array<std::array<uint8_t, kGroup>, kGroup>;  ///< lanes where the pair (i, j) is unsafe

int32_t cost_of(const Cost& c, const std::array<uint8_t, kGroup>& order) {
  int32_t total = 0;
  for (int p = 0; p < kGroup; p += 2) total += c[order[p]][order[p + 1]];
  return total;
}

/// Of the indices not in `used`, the one with the fewest unsafe lanes beside
/// index i (row: c[i]), of those the most loaded, of those the first.
int cheapest_partner(const uint8_t* row, const uint8_t* loads, uint32_t used) {
  const __m128i bit = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  // 0xff where used: the byte of `used` for each half, tested against each lane's bit.
  const __m128i halves = _mm_unpacklo_epi64(_mm_set1_epi8(static_cast<char>(used & 0xffu)),
                                            _mm_set1_epi8(static_cast<char>(used >> 8 & 0xffu)));
  const __m128i taken = _mm_cmpeq_epi8(_mm_and_si128(halves, bit), bit);
  auto hmin = [](__m128i v) {
    v = _mm_min_epu8(v, _mm_srli_si128(v, 8));
    v = _mm_min_epu8(v, _mm_srli_si128(v, 4));
    v = _mm_min_epu8(v, _mm_srli_si128(v, 2));
    v = _mm_min_epu8(v, _mm_srli_si128(v, 1));
    return _mm_set1_epi8(static_cast<char>(_mm_cvtsi128_si32(v) & 0xff));
  };
  const __m128i cost = _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)), taken);  // used: 0xff
  const __m128i cheapest = _mm_andnot_si128(taken, _mm_cmpeq_epi8(cost, hmin(cost)));
  // Of those, the most loaded: the least of 255 - load.
  const __m128i unload = _mm_or_si128(_mm_andnot_si128(cheapest, _mm_set1_epi8(-1)),
                                      _mm_subs_epu8(_mm_set1_epi8(-1), _mm_load_si128(reinterpret_cast<const __m128i*>(loads))));
  const __m128i pick = _mm_and_si128(cheapest, _mm_cmpeq_epi8(unload, hmin(unload)));
  return std::countr_zero(static_cast<uint32_t>(_mm_movemask_epi8(pick)));
}

/// A pairing of the 16 indices with few unsafe pairs: by load (unsafe pairs
/// an index is in), highest first, each index takes its cheapest partner, of
/// those the most loaded (two troublesome indices that are safe together
/// leave the harmless ones to the rest); then each unsafe pair swaps partners
/// with another pair while that lowers the cost (2-opt). K's own order where
/// it is no worse. (ResNet50's QDQ weights: 636 unsafe pairs of 23.5 M
/// weights, 1,530 without the swaps, 14,430 preferring the least loaded.)
std::array<uint8_t, kGroup> pairing(const Cost& c) {
  std::array<uint8_t, kGroup> natural;
  std::iota(natural.begin(), natural.end(), uint8_t{0});
  const int32_t natural_cost = cost_of(c, natural);
  if (natural_cost == 0) return natural;
  alignas(16) uint8_t load[kGroup] = {};  // at most 15 partners x 16 lanes
  for (int i = 0; i < kGroup; ++i)
    for (int j = 0; j < kGroup; ++j) load[i] = static_cast<uint8_t>(load[i] + c[i][j]);
  std::array<uint8_t, kGroup> by_load = natural;  // by load, highest first (insertion sort: stable)
  for (int i = 1; i < kGroup; ++i)
    for (int j = i; j > 0 && load[by_load[j]] > load[by_load[j - 1]]; --j) std::swap(by_load[j], by_load[j - 1]);
  uint32_t used = 0;
  std::array<uint8_t, kGroup> order{};
  int n = 0;
  for (uint8_t i : by_load) {
    if (used >> i & 1u) continue;
    used |= 1u << i;
    int best = std::countr_zero(~used);  // what is left is in no unsafe pair: any partner
    if (load[i] > 0) best = cheapest_partner(c[i].data(), load, used);
    used |= 1u << best;
    order[n++] = i;
    order[n++] = static_cast<uint8_t>(best);
  }
  for (bool better = true; better;) {  // ends: every swap lowers the (integer) cost
    better = false;
    for (int p = 0; p < kGroup; p += 2) {
      if (c[order[p]][order[p + 1]] == 0) continue;
      for (int q = 0; q < kGroup; q += 2) {
        if (q == p) continue;
        const uint8_t a = order[p], b = order[p + 1], x = order[q], y = order[q + 1];
        const int32_t now = c[a][b] + c[x][y];
        if (c[a][x] + c[b][y] < now) {
          order[p + 1] = x, order[q] = b, order[q + 1] = y;
          better = true;
        } else if (c[a][y] + c[b][x] < now) {
          order[p + 1] = y, order[q] = x, order[q + 1] = b;
          better = true;
        }
        if (c[order[p]][order[p + 1]] == 0) break;
      }
    }
  }
  return cost_of(c, order) < natural_cost ? order : natural;
}

inline void cut_pair(int32_t& a, int32_t& b, int32_t& da, int32_t& db) {
  da = db = 0;
  if (!unsafe(a, b)) return;  // same sign: both positive or both negative
  const bool a_larger = std::abs(a) >= std::abs(b);
  int32_t& big = a_larger ? a : b;
  const int32_t small = a_larger ? b : a;
  const int32_t kept = (big > 0 ? 1 : -1) * (128 - std::abs(small));
  (a_larger ? da : db) = big - kept;
  big = kept;
}

/// Bit j: v[j] > t (below: v[j] < t), t within int8.
uint32_t above(const int8_t* v, int t) {
  return static_cast<uint32_t>(_mm_movemask_epi8(
      _mm_cmpgt_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)), _mm_set1_epi8(static_cast<char>(t)))));
}
uint32_t below(const int8_t* v, int t) {
  return static_cast<uint32_t>(_mm_movemask_epi8(
      _mm_cmplt_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)), _mm_set1_epi8(static_cast<char>(t)))));
}

}  // namespace

void make_pair_safe(int32_t& a, int32_t& b, int32_t& da, int32_t& db) { cut_pair(a, b, da, db); }

bool pair_block(const int8_t* w, int64_t ld, int lanes, int64_t k, int8_t* out, uint8_t* perm, std::vector<PairFix>& fixes) {
  const int64_t k16 = (k + kGroup - 1) / kGroup * kGroup;
  bool permuted = false;
  for (int64_t g = 0; g < k16; g += kGroup) {
    int8_t v[kGroup][kGroup] = {};  // [lane][index in the group]
    const int64_t n = std::min<int64_t>(kGroup, k - g);
    for (int l = 0; l < lanes; ++l) std::copy_n(w + l * ld + g, n, v[l]);
    // Only a weight past 64 in magnitude can make a pair unsafe: for each, the
    // partners that do (a pair of two such counted from its first).
    Cost c{};
    bool any = false;
    uint32_t lanes_big = 0;  // bit l: lane l has such a weight
    for (int l = 0; l < lanes; ++l) {
      const uint32_t big = above(v[l], 64) | below(v[l], -64);
      lanes_big |= static_cast<uint32_t>(big != 0) << l;
      for (uint32_t bits = big; bits; bits &= bits - 1) {
        const int i = std::countr_zero(bits);
        const int a = v[l][i];
        uint32_t m = (a > 0 ? above(v[l], 128 - a) : below(v[l], -128 - a)) & ~(big & ((2u << i) - 1));
        any = any || m;
        for (; m; m &= m - 1) {
          const int j = std::countr_zero(m);
          ++c[i][j];
          ++c[j][i];
        }
      }
    }
    std::array<uint8_t, kGroup> order;
    std::iota(order.begin(), order.end(), uint8_t{0});
    if (any) order = pairing(c);
    bool natural = true;
    for (int p = 0; p < kGroup; ++p) {
      perm[g + p] = order[p];
      natural = natural && order[p] == p;
    }
    permuted = permuted || !natural;
    uint32_t unsafe_pairs = 0;  // bit p: the pair at positions p, p + 1 is unsafe in some lane
    for (int p = 0; any && p < kGroup; p += 2) unsafe_pairs |= static_cast<uint32_t>(c[order[p]][order[p + 1]] != 0) << p;
    for (int l = 0; l < kGroup; ++l) {
      int8_t* dst = out + l * k16 + g;
      if (natural) std::copy_n(v[l], kGroup, dst);
      else
        for (int p = 0; p < kGroup; ++p) dst[p] = v[l][order[p]];
      if (!(lanes_big >> l & 1u)) continue;  // no pair of this lane can be unsafe
      for (uint32_t bits = unsafe_pairs; bits; bits &= bits - 1) {
        const int p = std::countr_zero(bits);
        int32_t a = dst[p], b = dst[p + 1], da = 0, db = 0;
        cut_pair(a, b, da, db);
        if (!(da | db)) continue;
        dst[p] = static_cast<int8_t>(a);
        dst[p + 1] = static_cast<int8_t>(b);
        if (da) fixes.push_back({static_cast<int32_t>(g + p), static_cast<int16_t>(l), static_cast<int16_t>(da)});
        if (db) fixes.push_back({static_cast<int32_t>(g + p + 1), static_cast<int16_t>(l), static_cast<int16_t>(db)});
      }
    }
  }
  return permuted;
}

bool fixes_valid(const std::vector<int32_t>& starts, const std::vector<PairFix>& fixes, int64_t k) {
  if (starts.empty() || starts.front() != 0 || starts.back() != static_cast<int64_t>(fixes.size())) return false;
  for (std::size_t b = 1; b < starts.size(); ++b)
    if (starts[b] < starts[b - 1]) return false;
  for (const PairFix& f : fixes)
    if (f.k < 0 || f.k >= k || f.lane < 0 || f.lane >= 16 || f.d < -128 || f.d > 128) return false;
  return true;
}

bool pairing_valid(const std::vector<uint8_t>& perm) {
  if (perm.size() % kGroup != 0) return false;
  for (std::size_t g = 0; g < perm.size(); g += kGroup) {
    unsigned seen = 0;
    for (int p = 0; p < kGroup; ++p) {
      if (perm[g + p] >= kGroup) return false;
      seen |= 1u << perm[g + p];
    }
    if (seen != 0xffffu) return false;
  }
  return true;
}

}  // namespace softneuro::pair_fix
