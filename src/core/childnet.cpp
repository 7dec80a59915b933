#include "core/childnet.hpp"

#include "core/executor.hpp"

#include <fmt/format.h>

namespace softneuro::core {
namespace {

class PreparedChildnet final : public PreparedRoutine {
 public:
  PreparedChildnet(const LayerInfo& info, const Schema& schema, std::string_view algorithm, const RoutineParams& params,
                   const std::vector<RoutineChoice>& children) {
    const Layer& l = *info.layer;
    graph_.name = l.name;
    for (std::size_t i = 0; i < l.inputs.size(); ++i) {
      graph_.inputs.push_back({l.inputs[i], info.input_shapes[i], schema.dtype, {}});
      shapes_[l.inputs[i]] = info.input_shapes[i];
    }
    for (std::size_t i = 0; i < l.outputs.size(); ++i) shapes_[l.outputs[i]] = info.output_shapes[i];
    graph_.outputs = l.outputs;
    graph_.layers = {l};
    RoutineChoice rc{l.name, make_descriptor(schema, algorithm), params, 0, 0, children};
    Tuning tuning;
    tuning.routine_path.routines = {rc};
    for (std::size_t i = 0; i < info.output_quant.size(); ++i)
      if (!info.output_quant[i].scales.empty()) tuning.blob_quant[l.outputs[i]] = info.output_quant[i];
    // Inputs and outputs in the parent's schema (its caller's blobs are); the
    // children chosen from the parent plan's routines, which that plan keeps
    // alive as long as this prepared routine (not owned here).
    PlanOptions options;
    options.io_schema = schema;
    options.threads = info.threads;  // the parent step's team
    if (info.routines) options.registry = std::shared_ptr<const RoutineRegistry>(std::shared_ptr<void>{}, info.routines);
    executor_ = std::make_unique<Executor>(build_plan(graph_, tuning, shapes_, nullptr, std::move(options)));
    for (const auto& step : executor_->steps())
      if (step->parent != l.name && step->layer->type != "adapt")
        throw Error(fmt::format("{} is not a childnet routine here", rc.descriptor), {}, l.name, "routine");
    for (std::size_t i = 0; i < l.inputs.size(); ++i)
      ins_.push_back({l.inputs[i], Blob::view(nullptr, info.input_shapes[i], schema.dtype, schema.layout, schema.device)});
    for (std::size_t i = 0; i < l.outputs.size(); ++i)
      outs_.push_back({l.outputs[i], Blob::view(nullptr, info.output_shapes[i], schema.dtype, schema.layout, schema.device)});
  }
  void run(const RunArgs& a) override {
    for (std::size_t i = 0; i < ins_.size(); ++i) ins_[i].blob.rebind(const_cast<void*>(a.inputs[i]->data()));
    for (std::size_t i = 0; i < outs_.size(); ++i) outs_[i].blob.rebind(a.outputs[i]->data());
    executor_->run(ins_, outs_);
  }

 private:
  Graph graph_;
  std::map<std::string, Shape> shapes_;
  std::unique_ptr<Executor> executor_;
  std::vector<NamedBlob> ins_, outs_;
};

}  // namespace

std::unique_ptr<PreparedRoutine> prepare_childnet(const LayerInfo& layer, const Schema& schema, std::string_view algorithm,
                                                  const RoutineParams& params, const std::vector<RoutineChoice>& children) {
  return std::make_unique<PreparedChildnet>(layer, schema, algorithm, params, children);
}

}  // namespace softneuro::core
