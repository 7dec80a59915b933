// cpu/resample — resize (ONNX Resize, nearest or bilinear) from index tables:
// where each output row and column reads, and with which weights, is computed
// once in prepare (the coordinate transform, rounding and clamping of
// core::ResizeAxis), so a run only gathers (nearest) or blends two rows and two
// columns (bilinear), rows in parallel. Float32, NCHW or NHWC (whole pixels:
// an NHWC chain, XNNPACK's on ARM, keeps its layout through a nearest resize);
// qint8 too where the resize only moves values (nearest, one quantisation in
// and out: a QDQ YOLOv8's upsampling stays int8).
#include "core/layer_types.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <memory>
#include <vector>

namespace softneuro {
namespace {

/// Where one output index reads: two source indices and their weights (nearest:
/// i1 = i0, w1 = 0); `outside`: tf_crop_and_resize extrapolates there.
struct Tap {
  int64_t i0 = 0, i1 = 0;
  float w0 = 1, w1 = 0;
  bool outside = false;
};

std::vector<Tap> taps(const core::ResizeAxis& a, bool linear) {
  std::vector<Tap> t(static_cast<std::size_t>(a.out));
  for (int64_t x = 0; x < a.out; ++x) {
    Tap& tap = t[static_cast<std::size_t>(x)];
    const double src = a.source(x);
    tap.outside = a.outside(src);
    if (!linear) {
      tap.i0 = tap.i1 = a.nearest(src);
      continue;
    }
    const double c = a.clamped(src);
    tap.i0 = static_cast<int64_t>(c);
    tap.i1 = std::min(tap.i0 + 1, a.in - 1);
    tap.w1 = static_cast<float>(c - static_cast<double>(tap.i0));
    tap.w0 = 1.0f - tap.w1;
  }
  return t;
}

class PreparedResample final : public PreparedRoutine {
 public:
  PreparedResample(const LayerInfo& info, bool nhwc, bool int8)
      : g_(checked_geometry(info)),
        nhwc_(nhwc),
        int8_(int8),
        channels_(info.input_shapes[0][1]),
        planes_(info.input_shapes[0][0] * info.input_shapes[0][1]),
        rows_(taps(g_.h, g_.linear)),
        cols_(taps(g_.w, g_.linear)) {
    // Columns as plain arrays for the inner loops.
    for (const Tap& c : cols_) {
      col0_.push_back(c.i0);
      col1_.push_back(c.i1);
      cw1_.push_back(c.w1);
      any_outside_ = any_outside_ || c.outside;
    }
    for (const Tap& r : rows_) any_outside_ = any_outside_ || r.outside;
  }

  /// The geometry, once the tables for it are known to fit the memory limit
  /// (an output [1,1,2^31,1] asks for 86 GB of row taps).
  static core::ResizeGeometry checked_geometry(const LayerInfo& info) {
    core::ResizeGeometry g = core::resize_geometry(*info.layer, info.input_shapes[0], info.output_shapes[0]);
    const auto rows = static_cast<std::size_t>(g.h.out), cols = static_cast<std::size_t>(g.w.out);
    check_prepare_bytes(info, (rows + cols) * sizeof(Tap) + cols * (2 * sizeof(int64_t) + sizeof(float)),
                        "cpu/resample's index tables");
    return g;
  }

  void run(const RunArgs& a) override {
    if (int8_) return nhwc_ ? run_nhwc<int8_t>(a) : run_nchw<int8_t>(a);
    return nhwc_ ? run_nhwc<float>(a) : run_nchw<float>(a);
  }

 private:
  // T: float, or int8_t (nearest and nothing outside: supports() refuses the rest).
  template <typename T>
  void run_nchw(const RunArgs& a) {
    const T* x = a.inputs[0]->data_as<T>();
    T* y = a.outputs[0]->data_as<T>();
    const int64_t ih = g_.h.in, iw = g_.w.in, oh = g_.h.out, ow = g_.w.out;
    const int64_t* c0 = col0_.data();
    const int64_t* c1 = col1_.data();
    const float* w1 = cw1_.data();
    a.pool->parallel_for(planes_ * oh, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, ow)), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t p = row / oh, i = row % oh;
        const Tap& r = rows_[static_cast<std::size_t>(i)];
        T* out = y + row * ow;
        const T* top = x + (p * ih + r.i0) * iw;
        if (!g_.linear) {
          for (int64_t j = 0; j < ow; ++j) out[j] = top[c0[j]];
        } else if constexpr (std::is_same_v<T, float>) {
          const float* bottom = x + (p * ih + r.i1) * iw;
          const float wt = r.w0, wb = r.w1;
          for (int64_t j = 0; j < ow; ++j) {
            const float left = wt * top[c0[j]] + wb * bottom[c0[j]];
            const float right = wt * top[c1[j]] + wb * bottom[c1[j]];
            out[j] = left + w1[j] * (right - left);
          }
        }
        if constexpr (std::is_same_v<T, float>) {
          if (any_outside_)
            for (int64_t j = 0; j < ow; ++j)
              if (r.outside || cols_[static_cast<std::size_t>(j)].outside) out[j] = g_.extrapolation_value;
        }
      }
    });
  }

  /// [N,H,W,C]: each output pixel gathers (nearest) or blends four input pixels
  /// of C channels; output rows in parallel.
  template <typename T>
  void run_nhwc(const RunArgs& a) {
    const T* x = a.inputs[0]->data_as<T>();
    T* y = a.outputs[0]->data_as<T>();
    const int64_t ih = g_.h.in, iw = g_.w.in, oh = g_.h.out, ow = g_.w.out, c = channels_;
    const int64_t batch = planes_ / c;
    a.pool->parallel_for(batch * oh, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, ow * c)), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / oh, i = row % oh;
        const Tap& r = rows_[static_cast<std::size_t>(i)];
        const T* top = x + (n * ih + r.i0) * iw * c;
        const T* bottom = x + (n * ih + r.i1) * iw * c;
        for (int64_t j = 0; j < ow; ++j) {
          T* out = y + (row * ow + j) * c;
          const Tap& t = cols_[static_cast<std::size_t>(j)];
          const T* tl = top + col0_[static_cast<std::size_t>(j)] * c;
          if constexpr (std::is_same_v<T, float>) {
            if (r.outside || t.outside) {
              std::fill(out, out + c, g_.extrapolation_value);
              continue;
            }
          }
          if (!g_.linear) {
            std::memcpy(out, tl, static_cast<std::size_t>(c) * sizeof(T));
            continue;
          }
          if constexpr (std::is_same_v<T, float>) {
            const float* tr = top + col1_[static_cast<std::size_t>(j)] * c;
            const float* bl = bottom + col0_[static_cast<std::size_t>(j)] * c;
            const float* br = bottom + col1_[static_cast<std::size_t>(j)] * c;
            const float wt = r.w0, wb = r.w1, w1 = cw1_[static_cast<std::size_t>(j)];
            for (int64_t k = 0; k < c; ++k) {
              const float left = wt * tl[k] + wb * bl[k];
              const float right = wt * tr[k] + wb * br[k];
              out[k] = left + w1 * (right - left);
            }
          }
        }
      }
    });
  }

  core::ResizeGeometry g_;
  bool nhwc_, int8_;
  int64_t channels_;
  int64_t planes_;
  std::vector<Tap> rows_, cols_;
  std::vector<int64_t> col0_, col1_;
  std::vector<float> cw1_;
  bool any_outside_ = false;
};

class Resample final : public Routine {
 public:
  std::string_view layer_type() const override { return "resize"; }
  std::string_view algorithm() const override { return "resample"; }
  std::vector<Schema> schemas() const override { return {Schema{}, kNhwc, kInt8, kInt8Nhwc}; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == Schema{}) && !(schema == kNhwc) && !(schema == kInt8) && !(schema == kInt8Nhwc))
      return Support::no(fmt::format("cpu/resample computes in cpu, {}, {} or {}, not {}", kNhwc.to_string(),
                                     kInt8.to_string(), kInt8Nhwc.to_string(), schema.to_string()));
    if (!info.layer || info.input_shapes.size() != 1 || info.input_shapes[0].rank() != 4)
      return Support::no("resize needs an input [N,C,H,W]");
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("TensorFlow Lite's int8 bilinear blends with 11-bit weights in integers (cpu/ref does)");
    const std::string mode = info.layer->get_string("mode", "nearest");
    if (mode == "cubic") return Support::no("cpu/resample has no cubic mode (cpu/ref has)");
    if (mode != "nearest" && info.layer->get_int("antialias", 0))
      return Support::no("cpu/resample has no antialias (cpu/ref has)");
    if (schema.dtype == DType::qint8) {
      // Only moving int8 values is exact: no blend, no extrapolation value, no requantisation.
      if (mode != "nearest") return Support::no(fmt::format("in qint8 only a nearest resize, not {}", mode));
      if (info.layer->get_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize")
        return Support::no("in qint8 not tf_crop_and_resize (its extrapolation value)");
      if (info.input_quant.empty() || info.output_quant.empty() || info.input_quant[0].scales.size() != 1 ||
          !(info.input_quant[0].scales == info.output_quant[0].scales &&
            info.input_quant[0].zero_points == info.output_quant[0].zero_points))
        return Support::no("in qint8 the input and output need one quantisation (per tensor)");
    }
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& schema, const RoutineParams&) const override {
    if (Support ok = supports(info, schema); !ok) throw Error(fmt::format("cpu/resample cannot run this resize: {}", ok.reason));
    return std::make_unique<PreparedResample>(info, schema.layout == Layout::nhwc, schema.dtype == DType::qint8);
  }

 private:
  static constexpr Schema kNhwc{Device::cpu, DType::float32, Layout::nhwc};
  static constexpr Schema kInt8{Device::cpu, DType::qint8, Layout::nchw};
  static constexpr Schema kInt8Nhwc{Device::cpu, DType::qint8, Layout::nhwc};
};

SOFTNEURO_REGISTER_ROUTINE(Resample);

}  // namespace
}  // namespace softneuro
