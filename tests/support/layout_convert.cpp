#include "support/layout_convert.hpp"

#include <softneuro/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace softneuro::test {
namespace {

int64_t block_of(Layout l) { return l == Layout::nchw8c ? 8 : l == Layout::nchw16c ? 16 : 1; }

/// The blob seen as [N, C, S]: S the product of the dims after C.
struct Nc {
  int64_t n = 1, c = 1, s = 1;
  explicit Nc(const Shape& sh) {
    if (sh.rank() >= 1) n = sh[0];
    if (sh.rank() >= 2) c = sh[1];
    for (int d = 2; d < sh.rank(); ++d) s *= sh[d];
  }
};

/// Offset of logical element (n, c, s) of a blob of `shape` in `layout`.
int64_t offset(const Nc& g, Layout layout, int64_t n, int64_t c, int64_t s) {
  switch (layout) {
    case Layout::nchw: return (n * g.c + c) * g.s + s;
    case Layout::nhwc: return (n * g.s + s) * g.c + c;
    case Layout::nchw8c:
    case Layout::nchw16c: {
      const int64_t b = block_of(layout), cb = (g.c + b - 1) / b;
      return ((n * cb + c / b) * g.s + s) * b + c % b;
    }
  }
  return 0;
}

void check(const Blob& b, const char* what) {
  if (b.dtype() != DType::float32 || b.device() != Device::cpu)
    throw Error(fmt::format("{}: float32 CPU blobs only", what));
  if (b.layout() == Layout::nhwc && b.shape().rank() != 4) throw Error(fmt::format("{}: nhwc needs rank 4", what));
  if ((b.layout() == Layout::nchw8c || b.layout() == Layout::nchw16c) && b.shape().rank() < 2)
    throw Error(fmt::format("{}: blocked layouts need rank >= 2", what));
}

}  // namespace

Blob to_layout(const Blob& plain, Layout layout) {
  check(plain, "to_layout");
  if (plain.layout() != Layout::nchw) throw Error("to_layout: the source must be plain");
  Blob out = Blob::allocate(plain.shape(), DType::float32, layout);  // zero-filled: padding is zero
  check(out, "to_layout");
  const Nc g(plain.shape());
  const float* x = plain.data_as<float>();
  float* y = out.data_as<float>();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t s = 0; s < g.s; ++s) y[offset(g, layout, n, c, s)] = x[offset(g, Layout::nchw, n, c, s)];
  return out;
}

Blob to_plain(const Blob& blob) {
  check(blob, "to_plain");
  Blob out = Blob::allocate(blob.shape());
  const Nc g(blob.shape());
  const float* x = blob.data_as<float>();
  float* y = out.data_as<float>();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t s = 0; s < g.s; ++s) y[offset(g, Layout::nchw, n, c, s)] = x[offset(g, blob.layout(), n, c, s)];
  return out;
}

bool padding_is_zero(const Blob& blob) {
  check(blob, "padding_is_zero");
  const int64_t b = block_of(blob.layout());
  if (b == 1) return true;
  const Nc g(blob.shape());
  const int64_t cb = (g.c + b - 1) / b;
  const float* x = blob.data_as<float>();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t s = 0; s < g.s; ++s)
      for (int64_t c = g.c; c < cb * b; ++c)
        if (x[((n * cb + c / b) * g.s + s) * b + c % b] != 0.0f) return false;
  return true;
}

void fill_bytes(Blob& blob, float value) {
  std::fill_n(blob.data_as<float>(), blob.byte_size() / sizeof(float), value);
}

}  // namespace softneuro::test
