// Adapt routines that change a float32 blob's layout on the CPU:
// nchw <-> nhwc <-> nchw8c <-> nchw16c, any pair in one pass.
//
// An adapt is a routine of layer type "adapt" whose layer carries the schemas
// `from` and `to`; its descriptor is the target schema + "/reorder", e.g.
// "cpu:float32:nchw8c/reorder". The executor inserts one on every edge whose
// producer and consumer schemas differ.
//
// Blobs of rank >= 2 are seen as [N, C, S] with S the product of the spatial
// dims; blocked layouts pad C up to the block and keep the padding zero.
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <cstring>

namespace softneuro {
namespace {

const Layout kLayouts[] = {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c};

int64_t block_of(Layout l) { return l == Layout::nchw8c ? 8 : l == Layout::nchw16c ? 16 : 0; }

// Offset of logical element (n, c, s) in a blob of [N, C, S] in `layout`.
struct Addressing {
  Layout layout;
  int64_t C, S, block, cb;  // cb: channel blocks
  Addressing(Layout l, int64_t c, int64_t s) : layout(l), C(c), S(s), block(block_of(l)), cb(block ? (c + block - 1) / block : 0) {}
  int64_t offset(int64_t n, int64_t c, int64_t s) const {
    switch (layout) {
      case Layout::nchw: return (n * C + c) * S + s;
      case Layout::nhwc: return (n * S + s) * C + c;
      default: return ((n * cb + c / block) * S + s) * block + c % block;
    }
  }
  int64_t per_image() const { return block ? cb * block * S : C * S; }
};

class Reorder final : public PreparedRoutine {
 public:
  Reorder(const Shape& shape, Layout from, Layout to) {
    n_ = shape.rank() >= 1 ? shape[0] : 1;
    c_ = shape.rank() >= 2 ? shape[1] : 1;
    s_ = 1;
    for (int i = 2; i < shape.rank(); ++i) s_ *= shape[i];
    if (shape.rank() < 2) { n_ = 1; c_ = 1; s_ = shape.numel(); }
    from_ = from;
    to_ = to;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const Addressing src(from_, c_, s_), dst(to_, c_, s_);
    if (dst.block) std::memset(y, 0, static_cast<std::size_t>(n_ * dst.per_image()) * sizeof(float));  // zero the padding
    // Parallel over (image, channel); the inner loop walks the spatial dim.
    const int64_t n = n_, c = c_, s = s_;
    a.pool->parallel_for(n * c, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        int64_t img = i / c, ch = i % c;
        int64_t si = src.offset(img, ch, 0), di = dst.offset(img, ch, 0);
        int64_t sstep = src.offset(img, ch, s > 1 ? 1 : 0) - si, dstep = dst.offset(img, ch, s > 1 ? 1 : 0) - di;
        for (int64_t k = 0; k < s; ++k) y[di + k * dstep] = x[si + k * sstep];
      }
    });
  }

 private:
  int64_t n_, c_, s_;
  Layout from_, to_;
};

class LayoutAdapt final : public Routine {
 public:
  std::string_view layer_type() const override { return "adapt"; }
  std::string_view algorithm() const override { return "reorder"; }
  std::vector<Schema> schemas() const override {
    std::vector<Schema> out;
    for (Layout l : kLayouts) out.push_back(Schema{Device::cpu, DType::float32, l});
    return out;
  }
  Support supports(const LayerInfo& info, const Schema& to) const override {
    Schema from = Schema::parse(info.layer->get_string("from"));
    if (from.device != Device::cpu || from.dtype != DType::float32)
      return Support::no(fmt::format("converts float32 CPU layouts only, not from {}", from.to_string()));
    if (from.layout == to.layout) return Support::no("nothing to convert");
    const Shape& s = info.input_shapes.at(0);
    if ((block_of(from.layout) || block_of(to.layout)) && s.rank() < 2)
      return Support::no(fmt::format("blocked layouts need a channel dim; shape {}", s.to_string()));
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& to, const RoutineParams&) const override {
    return std::make_unique<Reorder>(info.input_shapes.at(0), Schema::parse(info.layer->get_string("from")).layout, to.layout);
  }
};

SOFTNEURO_REGISTER_ROUTINE(LayoutAdapt);

}  // namespace
}  // namespace softneuro
