// Exact vpmaddubsw on 8-bit weights (AVX2 without VNNI): u8 x s8 products
// summed in pairs into int16, which saturates. A pair of weights is safe when
// its same-sign weights sum to at most 128 in magnitude (255 x 128 = 32640
// fits int16). Packing cuts the larger weight of each unsafe pair until it is
// safe and keeps what it cut as a fix (PairFix), which the GEMM tile adds back
// to its int32 sums from the u8 activations: the results are the exact
// integer dot products. Which K indices form a pair is free within each group
// of 16 (the tile's rows are permuted by pshufb first): pair_block pairs the
// large weights of a block of 16 output channels with small ones, so few
// fixes remain (a trained ResNet50's QDQ weights: 1 in 5,000, against 1 in 130
// with K's own order). Used by cpu:qint8 (conv2, dense) and cpu/dynamic_int8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace softneuro::pair_fix {

/// What packing cut off a weight of an unsafe pair, added back by the tile.
struct PairFix {
  int32_t k;     ///< the weight's K position (after the block's pairing)
  int16_t lane;  ///< its output channel within the block (0..15)
  int16_t d;     ///< the weight minus the packed value (|d| <= 128)
};

/// A packing keeps the u8 form while at most one weight in this many needs a
/// fix (a fix costs a multiply-add per row; past that the exact int16 form is faster).
inline constexpr int64_t kMaxFixShare = 256;
/// Whether `nfix` fixes among `weights` weights are few enough for the u8 form.
constexpr bool few_fixes(std::size_t nfix, int64_t weights) {
  return static_cast<int64_t>(nfix) * kMaxFixShare <= weights;
}

/// Makes the pair (a, b) safe: where its same-sign weights sum past 128 in
/// magnitude, the larger is cut to 128 minus the other. da, db: what was cut.
void make_pair_safe(int32_t& a, int32_t& b, int32_t& da, int32_t& db);

/// One block of `lanes` (<= 16) output channels' int8 weights (rows of k, `ld`
/// apart, K order) paired within each group of 16 K indices: `perm` (k16 =
/// k rounded up to 16 bytes) says which index of its group each position
/// reads (pshufb's controls), `out` (16 rows of k16) holds the weights in that
/// order with the unsafe pairs cut (zeros past k and past `lanes`), and the
/// cuts are appended to `fixes` (k: the position). False where the pairing
/// is K's own order everywhere (the tile reads the rows as they are).
bool pair_block(const int8_t* w, int64_t ld, int lanes, int64_t k, int8_t* out, uint8_t* perm, std::vector<PairFix>& fixes);

/// Whether a packing's fixes (from a file) are in range and in order: starts
/// (blocks + 1 of them, block b's fixes in [starts[b], starts[b + 1])) from 0
/// to the number of fixes, positions below k, lanes below 16, |d| <= 128.
bool fixes_valid(const std::vector<int32_t>& starts, const std::vector<PairFix>& fixes, int64_t k);

/// Whether `perm` (groups of 16) permutes each group.
bool pairing_valid(const std::vector<uint8_t>& perm);

}  // namespace softneuro::pair_fix
