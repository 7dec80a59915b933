// Adapt routines at a net's typed edges: a typed input (int64 token ids, a
// bool mask, float64 values...) into float32, the dtype routines compute in,
// and a float32 result into a typed output:
//   "cpu/io_cast"           from float64, int8 ... uint64 or bool
//   "<cpu:TYPE>/io_cast"    from float32 into TYPE
// Only values that convert exactly pass: an integer beyond float32's exact
// range (2^24), a float64 beyond float32's finite range, a result that is not
// an integer (or NaN) where the output is integer-typed, or one the type cannot
// hold, is an Error naming the blob, never a silently different number.
// bool: 0 or 1 in, any non-zero value true out. The narrow types (float8,
// float4e2m1, int4 ... uint2) convert exactly in (core/narrow_types.hpp) and
// out where the type holds the value (a Cast inside the net rounds onto it).
// Plain layout only (net edges).
#include <softneuro/routine.hpp>

#include "core/narrow_types.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>

namespace softneuro {
namespace {

bool typed(DType d) { return is_edge_type(d); }

template <class F>
decltype(auto) by_type(DType d, F&& f) {
  switch (d) {
    case DType::float64: return f(double{});
    case DType::int8: return f(int8_t{});
    case DType::uint8: return f(uint8_t{});
    case DType::int16: return f(int16_t{});
    case DType::uint16: return f(uint16_t{});
    case DType::int32: return f(int32_t{});
    case DType::uint32: return f(uint32_t{});
    case DType::int64: return f(int64_t{});
    case DType::uint64: return f(uint64_t{});
    default: return f(bool{});
  }
}

constexpr double kExactInteger = 16777216.0;  // 2^24: float32 holds every integer up to it

/// x as float32, or false where it does not convert exactly.
template <class T>
bool to_float(T x, float& y) {
  if constexpr (std::is_same_v<T, bool>) {
    y = x ? 1.0f : 0.0f;
    return true;
  } else if constexpr (std::is_same_v<T, double>) {
    y = static_cast<float>(x);
    return !(std::isfinite(x) && !std::isfinite(y));
  } else {
    y = static_cast<float>(x);
    return std::fabs(static_cast<double>(x)) <= kExactInteger;
  }
}

/// y as T, or false where T cannot hold it exactly.
template <class T>
bool from_float(float y, T& x) {
  if constexpr (std::is_same_v<T, bool>) {
    x = y != 0.0f;  // NaN too: ONNX's Cast to bool
    return true;
  } else if constexpr (std::is_same_v<T, double>) {
    x = y;
    return true;
  } else {
    const double v = y;
    if (!(v == std::trunc(v)) || v < static_cast<double>(std::numeric_limits<T>::min()) ||
        v > static_cast<double>(std::numeric_limits<T>::max()))
      return false;
    x = static_cast<T>(v);
    return true;
  }
}

/// Lowers `bad` to `first` where a chunk [.., e) found an element that does not convert.
void note_bad(std::atomic<int64_t>& bad, int64_t first, int64_t e) {
  if (first >= e) return;
  int64_t cur = bad.load();
  while (first < cur && !bad.compare_exchange_weak(cur, first)) {
  }
}

class IoCast final : public PreparedRoutine {
 public:
  IoCast(DType from, DType to, int64_t n, std::string blob) : from_(from), to_(to), n_(n), blob_(std::move(blob)) {}
  void run(const RunArgs& a) override {
    std::atomic<int64_t> bad{n_};  // the first index that does not convert
    const DType typed_type = to_ == DType::float32 ? from_ : to_;
    if (is_narrow(typed_type)) {
      a.pool->parallel_for(n_, 16384, [&](int64_t b, int64_t e) {
        int64_t first = e;
        if (to_ == DType::float32) {
          const auto* x = a.inputs[0]->data_as<uint8_t>();
          float* y = a.outputs[0]->data_as<float>();
          for (int64_t i = b; i < e; ++i) y[i] = narrow_value(from_, x[i]);
        } else {
          const float* y = a.inputs[0]->data_as<float>();
          auto* x = a.outputs[0]->data_as<uint8_t>();
          for (int64_t i = b; i < e; ++i)
            if (!core::exact_narrow_bits(to_, y[i], x[i]) && first == e) first = i;
        }
        note_bad(bad, first, e);
      });
    } else {
      by_type(typed_type, [&](auto t) {
        using T = decltype(t);
        a.pool->parallel_for(n_, 16384, [&](int64_t b, int64_t e) {
          int64_t first = e;
          if (to_ == DType::float32) {
            const T* x = a.inputs[0]->data_as<T>();
            float* y = a.outputs[0]->data_as<float>();
            for (int64_t i = b; i < e; ++i)
              if (!to_float(x[i], y[i]) && first == e) first = i;
          } else {
            const float* y = a.inputs[0]->data_as<float>();
            T* x = a.outputs[0]->data_as<T>();
            for (int64_t i = b; i < e; ++i)
              if (!from_float(y[i], x[i]) && first == e) first = i;
          }
          note_bad(bad, first, e);
        });
      });
    }
    const int64_t i = bad.load();
    if (i == n_) return;
    if (to_ == DType::float32) {
      const std::string value = by_type(from_, [&](auto t) {
        return fmt::format("{}", static_cast<decltype(t)>(a.inputs[0]->data_as<decltype(t)>()[i]));
      });
      throw Error(fmt::format("value {} (element {}) of {} '{}' has no exact float32 equivalent (integers up to 2^24, "
                              "float64 within float32's range)",
                              value, i, to_string(from_), blob_),
                  {}, {}, blob_);
    }
    throw Error(fmt::format("value {} (element {}) of the net's result '{}' is not a {}", a.inputs[0]->data_as<float>()[i], i,
                            blob_, to_string(to_)),
                {}, {}, blob_);
  }

 private:
  DType from_, to_;
  int64_t n_;
  std::string blob_;
};

class IoCastAdapt final : public Routine {
 public:
  std::string_view layer_type() const override { return "adapt"; }
  std::string_view algorithm() const override { return "io_cast"; }
  std::vector<Schema> schemas() const override {
    std::vector<Schema> out{Schema{}};
    for (int d = 0; d <= static_cast<int>(kLastDType); ++d)
      if (typed(static_cast<DType>(d))) out.push_back(Schema{Device::cpu, static_cast<DType>(d), Layout::nchw});
    return out;
  }
  Support supports(const LayerInfo& info, const Schema& to) const override {
    const Schema from = Schema::parse(info.layer->get_string("from"));
    if (from.device != Device::cpu || to.device != Device::cpu) return Support::no("casts on the CPU only");
    if (from.layout != Layout::nchw || to.layout != Layout::nchw) return Support::no("net edges are in plain layout");
    const bool in = typed(from.dtype) && to.dtype == DType::float32, out = from.dtype == DType::float32 && typed(to.dtype);
    if (!in && !out)
      return Support::no(fmt::format("casts between float32 and a typed input or output, not {} -> {}", to_string(from.dtype),
                                     to_string(to.dtype)));
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& to, const RoutineParams&) const override {
    const Schema from = Schema::parse(info.layer->get_string("from"));
    if (Support ok = supports(info, to); !ok)
      throw Error(fmt::format("{} cannot convert: {}", make_descriptor(to, "io_cast"), ok.reason));
    const std::string blob = info.layer->inputs.empty() ? std::string() : info.layer->inputs[0];
    return std::make_unique<IoCast>(from.dtype, to.dtype, info.input_shapes.at(0).numel(), blob);
  }
};

SOFTNEURO_REGISTER_ROUTINE(IoCastAdapt);

}  // namespace
}  // namespace softneuro
