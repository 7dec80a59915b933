// cpu:float32:{nhwc,nchw16c,nchw8c}/depthwise against cpu/ref: 3x3 and 5x5,
// strides 1 and 2 (and 3), dilations, asymmetric pads, batch 1 and 4, channel
// counts not multiples of the vector width, odd sizes, every activation.
#include "routines/f32_check.hpp"

#include <sstream>

using namespace softneuro;
using namespace softneuro::test::f32;

TEST_CASE("depthwise conv2 matches cpu/ref", "[depthwise][conv2]") {
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nhwc/depthwise",
                                          "cpu:float32:nchw16c/depthwise", "cpu:float32:nchw8c/depthwise");
  INFO(descriptor);
  std::mt19937 rng(555);
  for (int t = 0; t < 30; ++t) {
    const int64_t n = t % 4 == 3 ? 4 : 1;
    const int64_t c = t % 3 == 0 ? 16 * pick(rng, 1, 4) : pick(rng, 1, 70);
    const int64_t k = t % 2 ? 3 : 5;
    const int64_t s = t % 9 == 8 ? 3 : pick(rng, 1, 2);
    const int64_t d = t % 5 == 4 ? 2 : 1;
    const int64_t reach = (k - 1) * d;
    const int64_t pt = pick(rng, 0, int(reach / 2 + 1)), pl = pick(rng, 0, int(reach / 2 + 1));
    const int64_t pb = t % 2 ? pick(rng, 0, int(reach / 2)) : pt, pr = t % 2 ? pick(rng, 0, int(reach / 2)) : pl;
    const int64_t h = std::max<int64_t>(pick(rng, 1, 29), reach + 1), w = std::max<int64_t>(pick(rng, 1, 37), reach + 1);
    Layer l = conv_layer(c, c, c, k, k, s, s, d, d, {pt, pl, pb, pr}, t % 3 != 2, rng);
    set_act(l, kActs[t % 5], rng);
    std::ostringstream label;
    label << "case " << t << ": n" << n << " c" << c << " k" << k << " s" << s << " d" << d << " pads " << pt << ","
          << pl << "," << pb << "," << pr << " in " << h << "x" << w << " act " << kActs[t % 5];
    INFO(label.str());
    if (!check_or_skip(l, {random_blob({n, c, h, w}, rng)}, descriptor, {})) return;
  }
  // 5x5 at stride 1 over four vectors or more (in nhwc, the row-block kernels
  // on the whole vectors and rows on a partial last one): PP-OCR's layers.
  for (const int64_t c : {64, 70, 80, 240}) {
    for (const int64_t n : {1, 2}) {
      Layer l = conv_layer(c, c, c, 5, 5, 1, 1, 1, 1, {2, 2, 2, 2}, true, rng);
      set_act(l, kActs[static_cast<std::size_t>(c + n) % 5], rng);
      INFO("5x5 c" << c << " n" << n);
      if (!check_or_skip(l, {random_blob({n, c, 7, 13}, rng)}, descriptor, {})) return;
    }
  }
  // Refused: not depthwise, 7x7.
  Layer g2 = conv_layer(8, 8, 4, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, false, rng);
  CHECK_FALSE(run_in_schema(g2, {random_blob({1, 8, 5, 5}, rng)}, descriptor).support.ok);
  Layer k7 = conv_layer(8, 8, 8, 7, 7, 1, 1, 1, 1, {3, 3, 3, 3}, false, rng);
  CHECK_FALSE(run_in_schema(k7, {random_blob({1, 8, 9, 9}, rng)}, descriptor).support.ok);
}
