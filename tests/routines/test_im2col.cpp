// cpu/im2col, cpu/gemm1x1 and cpu:float32:nhwc/gemm1x1 against cpu/ref, and
// the packed GEMM (routines/cpu/gemm.hpp) of every ISA this CPU has (AVX2,
// AVX-512; Advanced SIMD on aarch64) against a
// plain triple loop.
#include "routines/cpu/gemm.hpp"
#include "routines/f32_check.hpp"

#include <sstream>

using namespace softneuro;
using namespace softneuro::test::f32;

TEST_CASE("packed gemm with epilogue matches a plain loop", "[gemm]") {
  namespace gemm = softneuro::cpu::gemm;
  std::mt19937 rng(11);
  for (const gemm::Kernel* k : {gemm::kernel_avx2(), gemm::kernel_avx512(), gemm::kernel_neon()}) {
    if (!k) {
      WARN("a GEMM kernel is not available on this CPU (skipped)");
      continue;
    }
    INFO(k->isa);
    for (int t = 0; t < 12; ++t) {
      const int64_t m = pick(rng, 1, 70), n = pick(rng, 1, 90), kk = pick(rng, 1, 600);
      const int64_t kc = t % 2 ? 64 : 256;
      const bool ta = t % 3 == 1, tb = t % 4 == 2;
      std::vector<float> a(m * kk), b(kk * n), bm(m), bn(n), c(m * n, 0.5f), want(m * n);
      std::uniform_real_distribution<float> u(-1, 1);
      for (auto* vec : {&a, &b, &bm, &bn})
        for (float& x : *vec) x = u(rng);
      // a as stored (trans: K x M), b as stored (trans: N x K).
      auto A = [&](int64_t i, int64_t j) { return ta ? a[j * m + i] : a[i * kk + j]; };
      auto B = [&](int64_t i, int64_t j) { return tb ? b[j * kk + i] : b[i * n + j]; };
      gemm::Epilogue ep;
      ep.bias_m = t % 2 ? bm.data() : nullptr;
      ep.bias_n = t % 3 ? bn.data() : nullptr;
      ep.act = static_cast<gemm::Act>(t % 5);
      ep.lo = -0.3f;
      ep.hi = 0.4f;
      ep.alpha = 0.2f;
      ep.beta = 0.5f;
      ep.accumulate = t % 4 == 3;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = ep.accumulate ? 0.5 : 0.0;
          for (int64_t x = 0; x < kk; ++x) s += double(A(i, x)) * B(x, j);
          float f = static_cast<float>(s) + (ep.bias_m ? bm[i] : 0.f) + (ep.bias_n ? bn[j] : 0.f);
          core::Activation act;
          act.kind = std::vector<core::Activation::Kind>{core::Activation::none, core::Activation::relu,
                                                          core::Activation::clip, core::Activation::hardswish,
                                                          core::Activation::hardsigmoid}[t % 5];
          act.min = ep.lo;
          act.max = ep.hi;
          act.alpha = ep.alpha;
          act.beta = ep.beta;
          want[i * n + j] = core::apply_activation(act, f);
        }
      std::vector<float> pa(gemm::packed_a_size(*k, m, kk)), pb(gemm::packed_b_size(*k, kk, n));
      gemm::pack_a(*k, m, kk, kc, a.data(), ta ? m : kk, ta, pa.data());
      gemm::pack_b(*k, kk, n, kc, b.data(), tb ? kk : n, tb, pb.data());
      gemm::gemm(*k, &core::global_pool(), m, n, kk, kc, pa.data(), pb.data(), c.data(), n, ep);
      double err = 0;
      for (int64_t i = 0; i < m * n; ++i) err = std::max(err, double(std::abs(c[i] - want[i])));
      INFO("case " << t << " m" << m << " n" << n << " k" << kk);
      CHECK(err <= 1e-4 * std::sqrt(double(kk)) + 1e-5);
    }
  }
}

TEST_CASE("im2col and gemm1x1 conv2 match cpu/ref", "[im2col][gemm1x1][conv2]") {
  std::mt19937 rng(99);
  int supported = 0;
  for (int t = 0; t < 30; ++t) {
    const int64_t n = t % 4 == 3 ? 4 : 1;
    const int64_t group = t % 5 == 4 ? pick(rng, 2, 4) : t % 7 == 6 ? 0 : 1;  // 0: depthwise
    int64_t c = pick(rng, 1, 40), oc = pick(rng, 1, 50);
    int64_t g = group;
    if (group == 0) {
      g = c;
      oc = c;
    } else {
      c = (c + g - 1) / g * g;
      oc = (oc + g - 1) / g * g;
    }
    const bool pointwise = t % 3 == 0;
    const int64_t kh = pointwise ? 1 : std::vector<int64_t>{1, 3, 5, 3, 7}[static_cast<std::size_t>(pick(rng, 0, 4))];
    const int64_t kw = t % 7 == 5 ? pick(rng, 1, 4) : kh;
    const int64_t sh = pointwise ? 1 : pick(rng, 1, 3), sw = t % 6 == 5 ? pick(rng, 1, 3) : sh;
    const int64_t dh = !pointwise && t % 4 == 1 ? 2 : 1, dw = dh;
    const int64_t ph = std::min<int64_t>(2, (kh - 1) * dh), pw = std::min<int64_t>(2, (kw - 1) * dw);
    const int64_t pt = pick(rng, 0, int(ph)), pl = pick(rng, 0, int(pw));
    const int64_t pb = t % 2 ? pick(rng, 0, int(ph)) : pt, pr = t % 2 ? pick(rng, 0, int(pw)) : pl;
    const int64_t h = std::max<int64_t>(pick(rng, 1, 30), (kh - 1) * dh + 1);
    const int64_t w = std::max<int64_t>(pick(rng, 1, 30), (kw - 1) * dw + 1);
    Layer l = conv_layer(c, oc, g, kh, kw, sh, sw, dh, dw, {pt, pl, pb, pr}, t % 3 != 2, rng);
    set_act(l, kActs[t % 5], rng);
    std::ostringstream label;
    label << "case " << t << ": n" << n << " c" << c << " oc" << oc << " g" << g << " k" << kh << "x" << kw << " s"
          << sh << "x" << sw << " d" << dh << " pads " << pt << "," << pl << "," << pb << "," << pr << " in " << h
          << "x" << w << " act " << kActs[t % 5];
    INFO(label.str());
    const Blob x = random_blob({n, c, h, w}, rng);
    if (!check_or_skip(l, {x}, "cpu/im2col", {{"p_block", t % 2 ? 64 : 256}})) return;
    std::string why;
    ++supported;
    const bool gemm1x1 = check_case(l, {x}, "cpu/gemm1x1", {{"p_block", 128}}, &why);
    const bool nhwc = check_case(l, {x}, "cpu:float32:nhwc/gemm1x1", {{"m_block", t % 2 ? 48 : 192}}, &why);
    const bool is1x1 = kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt + pl + pb + pr == 0;
    CHECK(gemm1x1 == is1x1);
    CHECK(nhwc == is1x1);
  }
  CHECK(supported == 30);
}
