// An example routine plugin: a relu routine "cpu/example_relu" that the tuner
// can weigh against the built-in ones. Copy this file to start your own.
#include <softneuro/plugin.hpp>

#include <algorithm>

namespace {

class ExampleRelu final : public softneuro::Routine {
 public:
  std::string_view layer_type() const override { return "relu"; }
  std::string_view algorithm() const override { return "example_relu"; }
  // Decline with a reason, so verbose modes can explain the choice.
  softneuro::Support supports(const softneuro::LayerInfo& layer, const softneuro::Schema&) const override {
    if (layer.input_shapes.at(0).numel() == 0) return softneuro::Support::no("empty input");
    return softneuro::Support::yes();
  }
  std::unique_ptr<softneuro::PreparedRoutine> prepare(const softneuro::LayerInfo&, const softneuro::Schema&,
                                                      const softneuro::RoutineParams&) const override {
    struct Prepared final : softneuro::PreparedRoutine {
      void run(const softneuro::RunArgs& args) override {
        const float* x = args.inputs[0]->data_as<float>();
        float* y = args.outputs[0]->data_as<float>();
        args.pool->parallel_for(args.inputs[0]->numel(), 4096, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) y[i] = std::max(x[i], 0.0f);
        });
      }
    };
    return std::make_unique<Prepared>();
  }
};

void add_routines(softneuro::PluginRegistrar& registrar) {
  registrar.add(std::make_unique<ExampleRelu>());
}

}  // namespace

SOFTNEURO_PLUGIN(add_routines)
