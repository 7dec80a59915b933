// cpu:float32:nchw16c/direct, nchw8c/direct and nhwc/direct (first layers) against cpu/ref: randomised
// shapes (batch 1 and 4, groups with whole channel blocks, strides 1-3,
// dilations, asymmetric pads, odd sizes, channel counts not multiples of the
// vector width), every routine parameter combination on some cases.
#include "routines/f32_check.hpp"

#include <softneuro/session.hpp>

#include "core/layer_types.hpp"
#include "core/registry.hpp"

#include <set>
#include <sstream>
#include <tuple>

using namespace softneuro;
using namespace softneuro::test::f32;

TEST_CASE("direct conv2 matches cpu/ref", "[direct][conv2]") {
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  const int64_t v = descriptor.find("16c") != std::string::npos ? 16 : 8;
  std::mt19937 rng(4321);
  // Parameter combinations of the routine (the profiler's cross product).
  std::vector<RoutineParams> combos;
  for (int64_t ocb : {1, 2, 4})
    for (int64_t w : (v == 16 ? std::vector<int64_t>{6, 7, 14, 28} : std::vector<int64_t>{4, 6, 7, 14}))
      for (int64_t icb : {0, 1})
        for (int64_t ohb : {1, 0})
          for (int64_t pad_copy : {1, 0})
            combos.push_back({{"oc_block", ocb}, {"ow_tile", w}, {"ic_block", icb}, {"oh_block", ohb},
                              {"input_mode", (w + icb + ohb) % 2 ? 2 : pad_copy},
                              {"w_prefetch", (ocb + w + icb + ohb + pad_copy) % 2}, {"compact", (ocb + icb) % 2}});
  int supported = 0;
  std::string reason;
  for (int t = 0; t < 40; ++t) {
    const int64_t n = t % 4 == 3 ? 4 : 1;
    int64_t group = 1, c, oc;
    if (t % 5 == 4) {
      group = pick(rng, 2, 3);
      c = group * v * pick(rng, 1, 2);
      oc = group * v * pick(rng, 1, 4);
    } else if (t % 2) {
      c = pick(rng, 1, 40);
      oc = pick(rng, 1, 70);
    } else {
      c = v * pick(rng, 1, 4);
      oc = v * pick(rng, 1, 8);
    }
    const int64_t kh = std::vector<int64_t>{1, 3, 5, 3, 7}[static_cast<std::size_t>(pick(rng, 0, 4))];
    const int64_t kw = t % 7 == 6 ? pick(rng, 1, 4) : kh;
    const int64_t sh = pick(rng, 1, 3), sw = t % 6 == 5 ? pick(rng, 1, 3) : sh;
    const int64_t dh = t % 4 == 1 ? 2 : 1, dw = t % 8 == 1 ? 1 : dh;
    const int64_t ph = std::min<int64_t>(3, (kh - 1) * dh), pw = std::min<int64_t>(3, (kw - 1) * dw);
    const int64_t pt = pick(rng, 0, int(ph)), pl = pick(rng, 0, int(pw));
    const int64_t pb = t % 2 ? pick(rng, 0, int(ph)) : pt, pr = t % 2 ? pick(rng, 0, int(pw)) : pl;
    const int64_t h = std::max<int64_t>(pick(rng, 3, 31), (kh - 1) * dh + 1);
    const int64_t w = std::max<int64_t>(pick(rng, 3, 40), (kw - 1) * dw + 1);
    Layer l = conv_layer(c, oc, group, kh, kw, sh, sw, dh, dw, {pt, pl, pb, pr}, t % 3 != 2, rng);
    set_act(l, kActs[t % 5], rng);
    std::ostringstream label;
    label << "case " << t << ": n" << n << " c" << c << " oc" << oc << " g" << group << " k" << kh << "x" << kw
          << " s" << sh << "x" << sw << " d" << dh << "x" << dw << " pads " << pt << "," << pl << "," << pb << ","
          << pr << " in " << h << "x" << w << " act " << kActs[t % 5];
    INFO(label.str());
    const Blob x = random_blob({n, c, h, w}, rng);
    // Defaults, plus a few combinations per case (all of them over the cases).
    std::string why;
    if (!check_case(l, {x}, descriptor, {}, &why)) {
      if (isa_missing(why)) {
        WARN(descriptor << " skipped: " << why);
        return;
      }
      FAIL("unsupported: " << why);
    }
    ++supported;
    for (int j = 0; j < 3; ++j) {
      const RoutineParams& p = combos[static_cast<std::size_t>((t * 3 + j) % combos.size())];
      INFO("oc_block " << p[0].second << " ow_tile " << p[1].second << " ic_block " << p[2].second << " oh_block "
                        << p[3].second << " input_mode " << p[4].second << " w_prefetch " << p[5].second << " compact "
                        << p[6].second);
      check_case(l, {x}, descriptor, p);
    }
  }
  CHECK(supported == 40);
}

TEST_CASE("direct conv2 on real model shapes (resnet/vgg 3x3, every parameter combination)", "[direct][conv2][sweep]") {
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  std::mt19937 rng(77);
  const int64_t v = descriptor.find("16c") != std::string::npos ? 16 : 8;
  // 40 and 20 channels: a partial last ic block (the assembly tiles skip its padded channels).
  // Planes of 7 and 5 pixels: two-row tiles (ow_tile >= 2 rows, oc_block 2 on
  // AVX-512, 1 on AVX2); 24 output channels: a partial last oc block (their stack copy);
  // 7 and 5 rows: a pair, then a single row. 48 and 144 output channels (3 and 9
  // blocks of 16): oc_block 4 takes the 3-block tiles.
  for (auto [c, oc, s, hw] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 64, 1, 14}, {128, 128, 2, 15}, {3, 64, 1, 9},
                              {40, 64, 1, 11}, {20, 32, 2, 13}, {64, 64, 1, 7}, {48, 24, 2, 13}, {40, 32, 1, 5},
                              {32, 48, 1, 9}, {24, 144, 2, 11}}) {
    Layer l = conv_layer(c, oc, 1, 3, 3, s, s, 1, 1, {1, 1, 1, 1}, true, rng);
    set_act(l, "relu", rng);
    const Blob x = random_blob({1, c, hw, hw}, rng);
    for (int64_t ocb : {1, 2, 4})
      for (int64_t w : (v == 16 ? std::vector<int64_t>{6, 7, 14, 28} : std::vector<int64_t>{4, 6, 7, 14}))
        for (int64_t icb : {0, 2, 1024})
          for (int64_t pad_copy : {0, 1})
            for (int64_t w_prefetch : {0, 1}) {  // AVX2's two forms of every assembly tile
              const int64_t ohb = icb == 2 ? 3 : icb == 0 ? 0 : 1;
              const int64_t span = pad_copy ^ w_prefetch;  // both values at each pad_copy
              INFO("c" << c << " oc" << oc << " s" << s << " hw" << hw << " oc_block " << ocb << " ow_tile " << w
                       << " ic_block " << icb << " input_mode " << (span ? 2 : pad_copy) << " w_prefetch " << w_prefetch);
              if (!check_or_skip(l, {x}, descriptor, {{"oc_block", ocb}, {"ow_tile", w}, {"ic_block", icb}, {"oh_block", ohb},
                                                      {"input_mode", span ? 2 : pad_copy}, {"w_prefetch", w_prefetch}}))
                return;
            }
  }
}

TEST_CASE("direct conv2 on first-layer shapes (1-4 input channels: the narrow kernels)", "[direct][conv2]") {
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  std::mt19937 rng(99);
  for (int64_t c = 1; c <= 5; ++c)  // 5: just past the narrow kernels
    for (auto [k, s, pad, n] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 1, 1, 1}, {7, 2, 3, 2}, {3, 2, 0, 1}}) {
      const int64_t oc = c == 3 ? 64 : 8 * c + 3;
      Layer l = conv_layer(c, oc, 1, k, k, s, s, 1, 1, {pad, pad, pad, pad}, true, rng);
      set_act(l, "relu", rng);
      const Blob x = random_blob({n, c, 23, 30}, rng);
      for (int64_t ocb : {1, 2, 4})
        for (int64_t w : {4, 7, 14}) {
          INFO("c" << c << " oc" << oc << " k" << k << " s" << s << " n" << n << " oc_block " << ocb << " ow_tile " << w);
          if (!check_or_skip(l, {x}, descriptor, {{"oc_block", ocb}, {"ow_tile", w}, {"ic_block", 0}, {"oh_block", 4}})) return;
        }
    }
}

TEST_CASE("direct conv2 on 1x1 unpadded shapes (pointwise kernels, flat planes)", "[direct][conv2]") {
  // Stride 1: each plane walked as one run of pixels, tiles spanning rows, the
  // plane's last tile partial (its reads past the plane must see zeros);
  // 40, 24, 20 channels: a partial last ic block.
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  std::mt19937 rng(123);
  const int64_t v = descriptor.find("16c") != std::string::npos ? 16 : 8;
  for (auto [c, oc, s, h, w, n] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{64, 64, 1, 7, 7, 1},
                                   {48, 80, 1, 5, 9, 2}, {40, 37, 1, 14, 14, 1}, {64, 128, 2, 14, 14, 1},
                                   {32, 48, 2, 9, 7, 2}, {24, 40, 3, 10, 11, 2}, {24, 144, 1, 12, 12, 1}, {20, 32, 1, 6, 6, 2}}) {
    Layer l = conv_layer(c, oc, 1, 1, 1, s, s, 1, 1, {0, 0, 0, 0}, true, rng);
    set_act(l, "relu", rng);
    const Blob x = random_blob({n, c, h, w}, rng);
    for (int64_t ocb : {1, 2, 4})
      for (int64_t tw : (v == 16 ? std::vector<int64_t>{6, 7, 14, 28} : std::vector<int64_t>{4, 7, 14}))
        for (int64_t icb : {0, 1})
          for (int64_t w_prefetch : {0, 1}) {
            // Strided: compact (the pixels read copied, then a flat stride-1 walk) or in place.
            const int64_t compact = (icb + w_prefetch + ocb) % 2;
            // input_mode 2 (spanned): tiles of even widths (with a row jump in place at a stride: split tiles).
            const int64_t span = (tw + icb) % 2;
            INFO("c" << c << " oc" << oc << " s" << s << " " << h << "x" << w << " n" << n << " oc_block " << ocb
                     << " ow_tile " << tw << " ic_block " << icb << " w_prefetch " << w_prefetch << " compact " << compact
                     << " input_mode " << 2 * span);
            if (!check_or_skip(l, {x}, descriptor, {{"oc_block", ocb}, {"ow_tile", tw}, {"ic_block", icb}, {"oh_block", icb ? 2 : 0},
                                                    {"w_prefetch", w_prefetch}, {"compact", compact}, {"input_mode", 2 * span}}))
              return;
          }
  }
}

TEST_CASE("direct conv2: planes walked across their rows (input_mode 2: split tiles)", "[direct][conv2]") {
  // A run of tiles over the whole plane, a tile reaching past its row's end
  // split across two rows (the next row's input x_row2 further): every split
  // point of the 2 x 4 and 2 x 6 tiles (rows of 4 to 17 pixels), strides 1 to 3
  // (3: the intrinsic kernels, the mode ignored), dilation 2, padded (a copy)
  // and unpadded (in place) inputs, a partial last ic block, tasks of a few
  // runs (oh_block 2) and of whole planes, batch 2, each fused activation.
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  std::mt19937 rng(202);
  struct Case { int64_t c, oc, k, s, d, pad, h, w, n; };
  int t = 0;
  for (Case cs : {Case{16, 32, 3, 1, 1, 1, 7, 7, 1}, Case{40, 32, 3, 1, 1, 1, 5, 4, 2}, Case{24, 32, 3, 2, 1, 1, 14, 14, 1},
                  Case{16, 48, 3, 1, 1, 0, 11, 13, 1}, Case{16, 32, 3, 1, 2, 2, 9, 10, 2}, Case{32, 32, 1, 2, 1, 0, 11, 11, 1},
                  Case{16, 32, 3, 2, 1, 1, 17, 23, 1}, Case{16, 32, 5, 1, 1, 2, 8, 8, 1}, Case{16, 32, 3, 3, 1, 1, 13, 13, 1},
                  Case{48, 32, 3, 1, 1, 1, 15, 17, 1}}) {
    Layer l = conv_layer(cs.c, cs.oc, 1, cs.k, cs.k, cs.s, cs.s, cs.d, cs.d, {cs.pad, cs.pad, cs.pad, cs.pad}, true, rng);
    set_act(l, kActs[t == 8 ? 3 : t % 3], rng);  // hardswish: not the tiles' own epilogue (no span)
    ++t;
    const Blob x = random_blob({cs.n, cs.c, cs.h, cs.w}, rng);
    for (int64_t tw : {4, 6, 5})
      for (int64_t ohb : {0, 2})
        for (int64_t w_prefetch : {0, 1}) {
          INFO("c" << cs.c << " oc" << cs.oc << " k" << cs.k << " s" << cs.s << " d" << cs.d << " pad " << cs.pad << " "
                   << cs.h << "x" << cs.w << " n" << cs.n << " ow_tile " << tw << " oh_block " << ohb << " w_prefetch " << w_prefetch);
          if (!check_or_skip(l, {x}, descriptor, {{"oc_block", 2}, {"ow_tile", tw}, {"ic_block", ohb ? 1 : 0}, {"oh_block", ohb},
                                                  {"w_prefetch", w_prefetch}, {"input_mode", 2}}))
            return;
        }
  }
}

TEST_CASE("direct conv2: edge tiles over many channel blocks, rows of padding only", "[direct][conv2]") {
  // Edge tiles copy their columns zero-padded, a few ic blocks at a time
  // (nchw16c: 256 channels at stride 2 take two copies per pass); a 1x1
  // convolution padded by 2 has output rows and columns that see no input
  // (32 channels on a 3x3 input: two-row tiles whose rows both see none).
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  std::mt19937 rng(31);
  struct Case { int64_t c, oc, k, s, pad, hw; };
  for (Case cs : {Case{256, 32, 3, 2, 1, 9}, Case{320, 64, 3, 1, 1, 6}, Case{24, 40, 1, 1, 2, 5}, Case{40, 16, 1, 2, 2, 7},
                  Case{24, 32, 1, 1, 2, 3}}) {
    Layer l = conv_layer(cs.c, cs.oc, 1, cs.k, cs.k, cs.s, cs.s, 1, 1, {cs.pad, cs.pad, cs.pad, cs.pad}, true, rng);
    set_act(l, "relu", rng);
    const Blob x = random_blob({1, cs.c, cs.hw, cs.hw}, rng);
    for (int64_t ocb : {1, 2, 4})
      for (int64_t icb : {0, 1024})
        for (int64_t pad_copy : {0, 1}) {
          INFO("c" << cs.c << " oc" << cs.oc << " k" << cs.k << " s" << cs.s << " pad " << cs.pad << " oc_block " << ocb
                   << " ic_block " << icb << " input_mode " << pad_copy);
          if (!check_or_skip(l, {x}, descriptor, {{"oc_block", ocb}, {"ow_tile", 28}, {"ic_block", icb}, {"oh_block", 0},
                                                  {"input_mode", pad_copy}}))
            return;
        }
  }
}

TEST_CASE("direct conv2: edge tiles in place (input_mode 0: columns outside the input read zeros)", "[direct][conv2]") {
  // Pads up to the stride: a tile's first and last columns read zeros through
  // the assembly tiles' tap flags, two-row tiles (rows of <= 7 pixels) pair the
  // rows that see the same kernel rows, unpadded planes take them with no copy.
  // Dilation 2 with pad 2 puts two columns outside: the intrinsic edge tiles.
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  std::mt19937 rng(57);
  struct Case { int64_t c, oc, s, d, pt, pl, pb, pr, h, w; };
  for (Case cs : {Case{64, 32, 2, 1, 1, 1, 1, 1, 14, 14}, Case{40, 32, 2, 1, 1, 1, 1, 1, 13, 13},
                  Case{48, 32, 1, 1, 1, 1, 1, 1, 7, 7}, Case{32, 48, 1, 1, 0, 0, 0, 0, 9, 9},
                  Case{32, 32, 1, 2, 2, 2, 2, 2, 11, 11}, Case{24, 32, 1, 1, 1, 1, 0, 0, 8, 8},
                  Case{32, 32, 1, 1, 1, 1, 1, 1, 3, 1}, Case{32, 64, 1, 1, 1, 1, 1, 1, 5, 2},
                  Case{32, 32, 2, 1, 0, 1, 2, 0, 10, 15}}) {
    Layer l = conv_layer(cs.c, cs.oc, 1, 3, 3, cs.s, cs.s, cs.d, cs.d, {cs.pt, cs.pl, cs.pb, cs.pr}, true, rng);
    set_act(l, "relu", rng);
    const Blob x = random_blob({1, cs.c, cs.h, cs.w}, rng);
    for (int64_t ocb : {1, 2, 4})
      for (int64_t w : {6, 7, 14, 28})
        for (int64_t ohb : {0, 1, 3}) {
          INFO("c" << cs.c << " oc" << cs.oc << " s" << cs.s << " d" << cs.d << " pads " << cs.pt << "," << cs.pl << ","
                   << cs.pb << "," << cs.pr << " in " << cs.h << "x" << cs.w << " oc_block " << ocb << " ow_tile " << w
                   << " oh_block " << ohb);
          if (!check_or_skip(l, {x}, descriptor, {{"oc_block", ocb}, {"ow_tile", w}, {"ic_block", ohb == 3 ? 1 : 1024},
                                                  {"oh_block", ohb}, {"input_mode", 0}}))
            return;
        }
  }
}

TEST_CASE("direct conv2: task_order 1 (row blocks outermost, each for every OC group)", "[direct][conv2]") {
  // Another order of the tasks and, with oh_block 0, one block of rows per
  // thread: every output row of every OC group is still computed exactly once.
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  std::mt19937 rng(77);
  struct Case {
    int64_t c, oc, k, s, pad, n, h, w;
  };
  for (Case cs : {Case{64, 96, 3, 1, 1, 1, 14, 14}, Case{48, 64, 3, 2, 1, 2, 13, 13}, Case{64, 128, 1, 2, 0, 1, 14, 14},
                  Case{32, 64, 1, 1, 0, 1, 9, 9}, Case{64, 64, 3, 1, 1, 1, 7, 7}}) {
    Layer l = conv_layer(cs.c, cs.oc, 1, cs.k, cs.k, cs.s, cs.s, 1, 1, {cs.pad, cs.pad, cs.pad, cs.pad}, true, rng);
    set_act(l, "relu", rng);
    const Blob x = random_blob({cs.n, cs.c, cs.h, cs.w}, rng);
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      for (int64_t ohb : {0, 1, 3})
        for (int64_t ocb : {1, 2}) {
          INFO("c" << cs.c << " oc" << cs.oc << " k" << cs.k << " s" << cs.s << " pad " << cs.pad << " n" << cs.n << " in "
                   << cs.h << "x" << cs.w << " threads " << threads << " oh_block " << ohb << " oc_block " << ocb);
          if (!check_or_skip(l, {x}, descriptor, {{"oc_block", ocb}, {"ow_tile", 14}, {"ic_block", 1024}, {"oh_block", ohb},
                                                  {"task_order", 1}})) {
            set_num_threads(0);
            return;
          }
        }
    }
  }
  set_num_threads(0);
}

TEST_CASE("direct conv2: 1x1 stride-1 convolutions padded only below or right", "[direct][conv2]") {
  // Their output plane is not the input's (no flat walk: that corrupted the
  // heap), and rows or columns of padding only read nothing (not the pointwise
  // kernels, which read every tap: wrong sums on nchw8c).
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct");
  INFO(descriptor);
  std::mt19937 rng(8);
  for (auto [pb, pr, hw] : {std::tuple<int64_t, int64_t, int64_t>{1, 0, 6}, {0, 1, 5}, {2, 1, 3}}) {
    Layer l = conv_layer(32, 32, 1, 1, 1, 1, 1, 1, 1, {0, 0, pb, pr}, true, rng);
    set_act(l, "relu", rng);
    const Blob x = random_blob({1, 32, hw, hw}, rng);
    for (int64_t w : {14, 28})
      for (int64_t pad_copy : {0, 1}) {
        INFO("pads 0,0," << pb << "," << pr << " in " << hw << "x" << hw << " ow_tile " << w << " pad_copy " << pad_copy);
        if (!check_or_skip(l, {x}, descriptor, {{"oc_block", 2}, {"ow_tile", w}, {"ic_block", 1024}, {"oh_block", 0},
                                                {"pad_copy", pad_copy}}))
          return;
      }
  }
}

TEST_CASE("nhwc direct conv2 on first layers (1-4 input channels read in place, RGB in assembly)", "[direct][conv2]") {
  const std::string descriptor = "cpu:float32:nhwc/direct";
  std::mt19937 rng(2026);
  // (c, oc, kh, kw, stride, dilation h, pads t/l/b/r, batch, act): the stems of
  // MobileNetV2 (3x3 s2), ResNet50 (7x7 s2 pad 3), VGG16 (3x3 s1); stride 3,
  // a kernel row dilation, asymmetric pads, padding wider than the kernel
  // reaches (rows that see no input), every activation, 1, 2 and 4 channels.
  struct Case {
    int64_t c, oc, kh, kw, s, dh, pt, pl, pb, pr, n;
    const char* act;
  };
  const Case cases[] = {
      {3, 32, 3, 3, 2, 1, 1, 1, 1, 1, 1, "relu"},      {3, 64, 7, 7, 2, 1, 3, 3, 3, 3, 2, "relu"},
      {3, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, "none"},      {3, 48, 3, 3, 1, 1, 0, 2, 1, 0, 1, "clip"},
      {3, 16, 5, 5, 3, 1, 2, 2, 2, 2, 1, "hardswish"}, {3, 32, 3, 3, 1, 2, 2, 1, 2, 1, 2, "relu"},
      {3, 16, 3, 3, 2, 1, 4, 4, 4, 4, 1, "relu"},      {1, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, "relu"},
      {2, 16, 5, 3, 2, 1, 2, 1, 2, 1, 1, "none"},      {4, 64, 3, 3, 2, 1, 1, 1, 1, 1, 2, "hardsigmoid"},
  };
  for (const Case& k : cases) {
    Layer l = conv_layer(k.c, k.oc, 1, k.kh, k.kw, k.s, k.s, k.dh, 1, {k.pt, k.pl, k.pb, k.pr}, true, rng);
    set_act(l, k.act, rng);
    // 61 columns: rows end in a narrow tile; 60 (3x3 pad 1: 60 pixels, whole tiles
    // of 3 and 6): in a full edge tile after the inner tiles' run.
    for (int64_t width : {61, 60}) {
      const Blob x = random_blob({k.n, k.c, 29, width}, rng);
      for (int64_t ocb : {1, 2, 4})
        for (int64_t w : {6, 7, 14, 28}) {
          INFO("c" << k.c << " oc" << k.oc << " k" << k.kh << "x" << k.kw << " s" << k.s << " dh" << k.dh << " pads "
                   << k.pt << "," << k.pl << "," << k.pb << "," << k.pr << " n" << k.n << " act " << k.act
                   << " width " << width << " oc_block " << ocb << " ow_tile " << w);
          if (!check_or_skip(l, {x}, descriptor, {{"oc_block", ocb}, {"ow_tile", w}, {"ic_block", 0}, {"oh_block", 4}}))
            return;
        }
    }
  }
}

TEST_CASE("direct conv2 applies an affine after its activation (PP-LCNetV3's act_scale, act_shift)", "[direct][conv2]") {
  // The recogniser's convolutions all carry one: cpu/direct refused them and
  // oneDNN ran every 1x1 layer. AVX2's assembly tiles end such sums in C; the
  // AVX-512 tiles apply the affine themselves.
  std::mt19937 rng(77);
  struct Case {
    const char* descriptor;
    int64_t c, oc, k, s;
    const char* act;
  };
  const Case cases[] = {
      {"cpu:float32:nchw16c/direct", 48, 40, 1, 1, "relu"},      {"cpu:float32:nchw16c/direct", 32, 32, 3, 1, "none"},
      {"cpu:float32:nchw16c/direct", 32, 48, 3, 2, "clip"},      {"cpu:float32:nchw16c/direct", 64, 32, 1, 2, "hardswish"},
      {"cpu:float32:nchw16c/direct", 3, 32, 3, 2, "relu"},       {"cpu:float32:nchw8c/direct", 24, 20, 1, 1, "relu"},
      {"cpu:float32:nchw8c/direct", 16, 16, 3, 1, "hardsigmoid"}, {"cpu:float32:nhwc/direct", 3, 32, 3, 2, "relu"},
      {"cpu:float32:nhwc/direct", 3, 16, 3, 1, "none"},
  };
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const Case& k : cases) {
    Layer l = conv_layer(k.c, k.oc, 1, k.k, k.k, k.s, k.s, 1, 1, std::vector<int64_t>(4, k.k / 2), true, rng);
    set_act(l, k.act, rng);
    l.params["act_scale"] = 1.0 + 0.5 * u(rng);
    l.params["act_shift"] = 0.5 * u(rng);
    const Blob x = random_blob({1, k.c, 13, 30}, rng);
    auto every_param = [&] {
      for (int64_t ocb : {1, 2})
        for (int64_t w : {6, 14})
          for (int64_t mode : {0, 1, 2}) {
            INFO(k.descriptor << " c" << k.c << " oc" << k.oc << " k" << k.k << " s" << k.s << " act " << k.act
                              << " oc_block " << ocb << " ow_tile " << w << " input_mode " << mode);
            if (!check_or_skip(l, {x}, k.descriptor, {{"oc_block", ocb}, {"ow_tile", w}, {"input_mode", mode}})) return;
          }
    };
    every_param();  // (the next case where this CPU lacks the layout's ISA)
  }
}

TEST_CASE("direct conv2's tiles compute hardswish and the affine as the C epilogue does, NaN and infinities too",
          "[direct][conv2]") {
  // On AVX-512 the assembly tiles apply hardswish and act_scale/act_shift
  // themselves (PP-OCRv4's recogniser: 12% of its 1x1 layers' time was the C
  // pass over their sums); the same operations in the same order, so the
  // output equals cpu/ref's to rounding and its NaN and infinities land alike.
  std::mt19937 rng(91);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t k : {1, 3})
    for (bool affine : {false, true}) {
      Layer l = conv_layer(16, 48, 1, k, k, 1, 1, 1, 1, std::vector<int64_t>(4, k / 2), true, rng);
      set_act(l, "hardswish", rng);
      if (affine) l.params["act_scale"] = 0.75, l.params["act_shift"] = -0.25;
      Blob x = random_blob({1, 16, 4, 30}, rng);
      float* px = x.data_as<float>();
      px[5] = nan;             // channel 0, row 0
      px[120 + 7] = inf;       // channel 1, row 0
      px[2 * 120 + 40] = -inf; // channel 2, row 1
      px[3 * 120 + 90] = 1e30f;
      for (int64_t ow : {6, 14}) {
        INFO("k " << k << " affine " << affine << " ow_tile " << ow);
        Outcome got = run_in_schema(l, {x}, "cpu:float32:nchw16c/direct", {{"oc_block", 1}, {"ow_tile", ow}});
        if (!got.support) {
          REQUIRE(isa_missing(got.support.reason));
          continue;
        }
        const Blob want = test::run_layer(l, {x}, "cpu/ref")[0];
        const float* g = got.outputs[0].data_as<float>();
        const float* w = want.data_as<float>();
        int64_t non_finite = 0;
        for (int64_t i = 0; i < want.numel(); ++i) {
          if (!std::isfinite(w[i])) {
            ++non_finite;
            CHECK((std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i]));
          } else {
            CHECK(std::abs(g[i] - w[i]) <= 1e-4f * std::max(1.0f, std::abs(w[i])));
          }
        }
        CHECK(non_finite > 0);
      }
    }
}

TEST_CASE("nhwc direct conv2 refuses all but first layers, saying why", "[direct][conv2]") {
  std::mt19937 rng(5);
  const Routine* r = core::RoutineRegistry::instance().find("conv2", "cpu:float32:nhwc/direct", nullptr);
  REQUIRE(r != nullptr);
  const Schema nhwc = Schema::parse("cpu:float32:nhwc");
  auto support = [&](int64_t c, int64_t oc, int64_t dw) {
    Layer l = conv_layer(c, oc, 1, 3, 3, 1, 1, 1, dw, {1, 1, 1, 1}, true, rng);
    LayerInfo info;
    info.layer = &l;
    info.input_shapes = {Shape{1, c, 20, 20}};
    info.output_shapes = core::infer_layer_shapes(l, info.input_shapes);
    return r->supports(info, nhwc);
  };
  const Support ok = support(3, 32, 1);
  if (!ok && isa_missing(ok.reason)) {
    WARN("nhwc/direct skipped: " << ok.reason);
    return;
  }
  CHECK(ok);
  for (const Support& s : {support(5, 32, 1), support(16, 32, 1), support(3, 20, 1), support(3, 32, 2)}) {
    CHECK_FALSE(s);
    CHECK(s.reason.find("first layers only") != std::string::npos);
  }
}

TEST_CASE("direct conv2: the parameter space lists only distinct configurations", "[direct][conv2]") {
  // oc_block choices reducing to the same blocks, and ow_tile choices picking
  // the same tile, measure one configuration twice; pad_copy and span_rows
  // (span forced the copy) became one input_mode listing the modes that apply.
  std::mt19937 rng(5);
  for (const std::string descriptor : {"cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct"}) {
    Schema schema;
    const Routine* r = core::RoutineRegistry::instance().find("conv2", descriptor, &schema);
    REQUIRE(r);
    const int64_t v = descriptor.find("16c") != std::string::npos ? 16 : 8;
    for (auto [c, oc, k, pad, hw] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{144, 144, 3, 1, 14},
                                     {64, 64, 3, 1, 7}, {256, 512, 1, 0, 28}, {96, 24, 1, 0, 56}}) {
      Layer l = conv_layer(c, oc, 1, k, k, 1, 1, 1, 1, {pad, pad, pad, pad}, true, rng);
      LayerInfo info;
      info.layer = &l;
      info.input_shapes = {Shape{1, c, hw, hw}};
      info.output_shapes = core::infer_layer_shapes(l, info.input_shapes);
      if (!r->supports(info, schema)) continue;  // an ISA this CPU lacks
      INFO(descriptor << " " << c << "->" << oc << " k" << k << " @" << hw);
      const auto space = r->param_space(info, schema);
      const int64_t blocks = (oc + v - 1) / v;
      for (const auto& p : space) {
        CHECK(p.name != "pad_copy");
        CHECK(p.name != "span_rows");
        std::set<int64_t> distinct(p.choices.begin(), p.choices.end());
        CHECK(distinct.size() == p.choices.size());
        if (p.name == "oc_block") {
          std::set<int64_t> runs;  // the blocks each choice runs (the largest of 4, 3, 2, 1 at most it dividing `blocks`)
          for (int64_t want : p.choices)
            for (int64_t b : {4, 3, 2, 1})
              if (b <= want && blocks % b == 0) {
                runs.insert(b);
                break;
              }
          CHECK(runs.size() == p.choices.size());
        }
      }
    }
  }
}
