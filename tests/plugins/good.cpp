// A well-formed test plugin: a relu routine, "cpu/plugin_relu", and a dense
// routine whose transposed weights are prepared weights a tuned file stores,
// "cpu/plugin_dense".
#include "relu_routine.hpp"

#include <softneuro/plugin.hpp>

#include <cstring>
#include <optional>
#include <vector>

namespace {

constexpr char kName[] = "plugin_relu";

/// y = x Wᵀ + b over the last axis, with Wᵀ derived once per model.
class PluginDense final : public softneuro::Routine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "plugin_dense"; }
  softneuro::Support supports(const softneuro::LayerInfo& info, const softneuro::Schema&) const override {
    const softneuro::Layer& l = *info.layer;
    if (!l.find_weight("weight") || !l.find_weight("bias") || l.get_string("act", "none") != "none")
      return softneuro::Support::no("a test routine: weight and bias, no activation");
    return softneuro::Support::yes();
  }
  std::unique_ptr<softneuro::PreparedRoutine> prepare(const softneuro::LayerInfo& info, const softneuro::Schema&,
                                                      const softneuro::RoutineParams&) const override {
    const softneuro::Blob& w = info.layer->weight("weight");
    const int64_t n = w.shape()[0], k = w.shape()[1];
    using Transposed = std::vector<float>;
    auto wt = softneuro::prepared_weights<Transposed>(
        info, "transposed",
        [&] {
          Transposed t(static_cast<std::size_t>(n * k));
          for (int64_t o = 0; o < n; ++o)
            for (int64_t i = 0; i < k; ++i) t[static_cast<std::size_t>(i * n + o)] = w.data_as<float>()[o * k + i];
          return t;
        },
        [](const Transposed& t) {
          softneuro::Blob bytes = softneuro::Blob::allocate(softneuro::Shape{static_cast<int64_t>(t.size() * sizeof(float))},
                                                            softneuro::DType::uint8);
          std::memcpy(bytes.data(), t.data(), t.size() * sizeof(float));
          return bytes;
        },
        [&](const softneuro::Blob& bytes) -> std::optional<Transposed> {
          if (bytes.byte_size() != static_cast<std::size_t>(n * k) * sizeof(float)) return std::nullopt;
          Transposed t(static_cast<std::size_t>(n * k));
          std::memcpy(t.data(), bytes.data(), bytes.byte_size());
          return t;
        });
    struct Run final : softneuro::PreparedRoutine {
      std::shared_ptr<const Transposed> wt;
      const softneuro::Blob* bias;
      int64_t n, k;
      void run(const softneuro::RunArgs& a) override {
        const float* x = a.inputs[0]->data_as<float>();
        float* y = a.outputs[0]->data_as<float>();
        for (int64_t r = 0, rows = a.inputs[0]->numel() / k; r < rows; ++r)
          for (int64_t o = 0; o < n; ++o) {
            float s = bias->data_as<float>()[o];
            for (int64_t i = 0; i < k; ++i) s += x[r * k + i] * (*wt)[static_cast<std::size_t>(i * n + o)];
            y[r * n + o] = s;
          }
      }
    };
    auto run = std::make_unique<Run>();
    run->wt = std::move(wt);
    run->bias = &info.layer->weight("bias");
    run->n = n;
    run->k = k;
    return run;
  }
};

void add_routines(softneuro::PluginRegistrar& r) {
  r.add(std::make_unique<TestRelu<kName>>());
  r.add(std::make_unique<PluginDense>());
}

}  // namespace

SOFTNEURO_PLUGIN(add_routines)
