// The blocked Winograd children (wgencb, wgconvb, wgdecb in nchw16c with
// AVX-512 and nchw8c with AVX2) each against its cpu/ref on its own: random
// inputs in the blocked layout, padded channel lanes must come out zero. The
// whole childnet against conv2's cpu/ref is in test_winograd.cpp.
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "routines/cpu/winograd_blocked.hpp"
#include "routines/f32_check.hpp"

#include <cstdint>

using namespace softneuro;
using namespace softneuro::test::f32;

TEST_CASE("blocked Winograd children match their cpu/ref", "[winograd][routines]") {
  std::mt19937 rng(31);
  for (const std::string desc : {"cpu:float32:nchw16c/winograd", "cpu:float32:nchw8c/winograd"}) {
    INFO(desc);
    for (auto [n, c, k, h, w, m] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{1, 3, 5, 8, 8, 2},
                                     {2, 17, 24, 9, 13, 4}, {1, 40, 9, 14, 14, 6}, {1, 16, 16, 5, 7, 4},
                                     // wgconvb on AVX-512 (the direct convolution's assembly tiles): 4
                                     // tiles, groups of 4 and 3 output vectors, two input-channel chunks,
                                     // a last block of 8 channels; 9 tiles, groups of 2 and 1 vectors,
                                     // two chunks, a last block of 4 channels; 16 tiles in one row
                                     // tile of 1-vector groups over 44 input blocks in one chunk, a
                                     // last block of 12 channels.
                                     {1, 200, 112, 4, 4, 2}, {1, 340, 40, 6, 6, 2}, {1, 700, 20, 7, 7, 2},
                                     // AVX2: U over 4 MB (kAsmGemmBytes) takes the assembly tiles, 16
                                     // tiles in row tiles of 6, 6, 4 prefetching the next panel (groups
                                     // of 2 vectors; the last group 1 vector: no split forms), two chunks.
                                     {1, 660, 104, 7, 7, 2}}) {
      INFO("n" << n << " c" << c << " k" << k << " " << h << "x" << w << " tile " << m);
      const wg::WinogradTiles t = wg::winograd_tiles(m, n, h, w);  // pads 1: output h x w
      const int64_t p = (m + 2) * (m + 2);
      Layer enc = test::make_layer("wgencb", {{"tile", m}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}, {});
      Layer mul = test::make_layer("wgconvb", {}, {{"weight", random_blob(Shape{p, c, k}, rng)}});
      Layer dec = test::make_layer("wgdecb", {{"tile", m}, {"out_shape", std::vector<int64_t>{n, k, h, w}},
                                              {"act", std::string("hardsigmoid")}},
                                   {{"bias", random_blob(Shape{k}, rng)}});
      if (!check_or_skip(enc, {random_blob(Shape{n, c, h, w}, rng)}, desc, {})) break;
      CHECK(check_case(mul, {random_blob(Shape{p, c, t.t, 1}, rng)}, desc));
      CHECK(check_case(dec, {random_blob(Shape{p, k, t.t, 1}, rng)}, desc));
    }
  }
}

// A childnet routine prepared on its own (conv_bench, run_layer) takes and
// gives blobs in its own schema: before, its inner net expected plain nchw and
// refused (or misread) the blocked blobs its caller passed.
TEST_CASE("blocked Winograd prepared on its own reads and writes the blocked layout", "[winograd][childnet]") {
  std::mt19937 rng(41);
  for (const std::string desc : {"cpu:float32:nchw16c/winograd", "cpu:float32:nchw8c/winograd"}) {
    INFO(desc);
    for (auto [c, k] : {std::pair<int64_t, int64_t>{5, 19}, {32, 16}}) {
      Layer l = conv_layer(c, k, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, rng);
      set_act(l, "relu", rng);
      for (int64_t m : {2, 4, 6}) {
        INFO("c" << c << " k" << k << " tile " << m);
        if (!check_or_skip(l, {random_blob(Shape{2, c, 9, 11}, rng)}, desc, {{"tile", m}})) break;
      }
    }
  }
}

// U's vectors are read with 64-byte loads on every GEMM: a packing in a plain
// std::vector (16-byte aligned from malloc) split every one across two lines.
TEST_CASE("packed Winograd kernels are 64-byte aligned", "[winograd]") {
  std::vector<float> u(static_cast<std::size_t>(16 * 40 * 24), 0.5f);
  for (const wg::blocked::Kernels* k : {wg::blocked::kernels_avx512(), wg::blocked::kernels_avx2()}) {
    if (!k) continue;
    for (int64_t t : {4, 16, 49}) {
      const wg::blocked::PackedU pk = k->pack(u.data(), 16, 40, 24, t);
      CHECK(reinterpret_cast<std::uintptr_t>(pk.data.data()) % 64 == 0);
    }
  }
  if (core::cpu_features().avx2_fma()) CHECK(reinterpret_cast<std::uintptr_t>(wg::avx2::pack(u.data(), 16, 40, 24).data.data()) % 64 == 0);
  if (core::cpu_features().avx512_core())
    CHECK(reinterpret_cast<std::uintptr_t>(wg::avx512::pack(u.data(), 16, 40, 24).data.data()) % 64 == 0);
}

TEST_CASE("our float32 convolutions apply a fused silu and sigmoid (YOLOv8's activation)", "[winograd][direct][routines]") {
  // (Refused before, "fused silu is not in our epilogues": every YOLOv8
  // convolution ran on oneDNN, and none on our Winograd.)
  std::mt19937 rng(31);
  struct Use {
    const char* descriptor;
    int64_t k, group;
  };
  const Use uses[] = {{"cpu:float32:nhwc/winograd", 3, 1},  {"cpu:float32:nchw16c/winograd", 3, 1},
                      {"cpu:float32:nchw8c/winograd", 3, 1}, {"cpu/winograd", 3, 1},
                      {"cpu:float32:nchw16c/direct", 3, 1},  {"cpu:float32:nchw8c/direct", 3, 1},
                      {"cpu:float32:nhwc/gemm1x1", 1, 1},    {"cpu/im2col", 3, 1},
                      {"cpu:float32:nhwc/depthwise", 3, 16}};
  for (const Use& u : uses)
    for (const char* act : {"silu", "sigmoid"}) {
      INFO(u.descriptor << " " << act);
      Layer l = conv_layer(16, 16, u.group, u.k, u.k, 1, 1, 1, 1, {u.k / 2, u.k / 2, u.k / 2, u.k / 2}, true, rng);
      l.params["act"] = std::string(act);
      Blob x = random_blob(Shape{1, 16, 9, 10}, rng, -6.0f, 6.0f);  // some sums far below zero: exp's clamp
      check_or_skip(l, {x}, u.descriptor);
    }
}
