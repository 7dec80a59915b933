// A relu routine for the test plugins, named by its algorithm.
#pragma once

#include <softneuro/routine.hpp>

#include <algorithm>
#include <memory>
#include <string_view>

template <const char* Algorithm>
class TestRelu final : public softneuro::Routine {
 public:
  std::string_view layer_type() const override { return "relu"; }
  std::string_view algorithm() const override { return Algorithm; }
  softneuro::Support supports(const softneuro::LayerInfo&, const softneuro::Schema&) const override {
    return softneuro::Support::yes();
  }
  std::unique_ptr<softneuro::PreparedRoutine> prepare(const softneuro::LayerInfo&, const softneuro::Schema&,
                                                      const softneuro::RoutineParams&) const override {
    struct Run final : softneuro::PreparedRoutine {
      void run(const softneuro::RunArgs& a) override {
        const float* x = a.inputs[0]->data_as<float>();
        float* y = a.outputs[0]->data_as<float>();
        for (int64_t i = 0, n = a.inputs[0]->numel(); i < n; ++i) y[i] = std::max(x[i], 0.0f);
      }
    };
    return std::make_unique<Run>();
  }
};
