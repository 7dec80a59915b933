// A well-formed test plugin: a relu routine, "cpu/plugin_relu", and a dense
// routine that packs its transposed weights (Routine::pack), which a tuned
// file stores, "cpu/plugin_dense".
#include "relu_routine.hpp"

#include <softneuro/plugin.hpp>

#include <cstring>
#include <optional>
#include <vector>

namespace {

constexpr char kName[] = "plugin_relu";

/// Wᵀ, packed once per model (Routine::pack) and stored in tuned files.
struct Transposed final : softneuro::PackedWeights {
  std::vector<float> t;
  softneuro::Blob save() const override {
    softneuro::Blob bytes = softneuro::Blob::allocate(softneuro::Shape{static_cast<int64_t>(t.size() * sizeof(float))},
                                                      softneuro::DType::uint8);
    std::memcpy(bytes.data(), t.data(), t.size() * sizeof(float));
    return bytes;
  }
};

/// y = x Wᵀ + b over the last axis.
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
  std::shared_ptr<const softneuro::PackedWeights> pack(const softneuro::PackInfo& info, const softneuro::Schema&,
                                                       const softneuro::RoutineParams&) const override {
    const softneuro::Blob& w = info.layer->weight("weight");
    const int64_t n = w.shape()[0], k = w.shape()[1];
    auto wt = std::make_shared<Transposed>();
    wt->t.resize(static_cast<std::size_t>(n * k));
    for (int64_t o = 0; o < n; ++o)
      for (int64_t i = 0; i < k; ++i) wt->t[static_cast<std::size_t>(i * n + o)] = w.data_as<float>()[o * k + i];
    return wt;
  }
  std::shared_ptr<const softneuro::PackedWeights> unpack(const softneuro::Blob& bytes, const softneuro::PackInfo& info,
                                                         const softneuro::Schema&,
                                                         const softneuro::RoutineParams&) const override {
    const softneuro::Blob& w = info.layer->weight("weight");
    const auto floats = static_cast<std::size_t>(w.shape()[0] * w.shape()[1]);
    if (bytes.byte_size() != floats * sizeof(float)) return nullptr;
    auto wt = std::make_shared<Transposed>();
    wt->t.resize(floats);
    std::memcpy(wt->t.data(), bytes.data(), bytes.byte_size());
    return wt;
  }
  std::unique_ptr<softneuro::PreparedRoutine> plan(const softneuro::LayerInfo& info, const softneuro::Schema&,
                                                   const softneuro::RoutineParams&,
                                                   std::shared_ptr<const softneuro::PackedWeights> packed) const override {
    const softneuro::Blob& w = info.layer->weight("weight");
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
            for (int64_t i = 0; i < k; ++i) s += x[r * k + i] * wt->t[static_cast<std::size_t>(i * n + o)];
            y[r * n + o] = s;
          }
      }
    };
    auto run = std::make_unique<Run>();
    run->wt = std::static_pointer_cast<const Transposed>(std::move(packed));
    run->bias = &info.layer->weight("bias");
    run->n = w.shape()[0];
    run->k = w.shape()[1];
    return run;
  }
};

void add_routines(softneuro::PluginRegistrar& r) {
  r.add(std::make_unique<TestRelu<kName>>());
  r.add(std::make_unique<PluginDense>());
}

}  // namespace

SOFTNEURO_PLUGIN(add_routines)
