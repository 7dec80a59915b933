#include "core/childnet.hpp"

#include "core/executor.hpp"
#include "core/layer_types.hpp"

#include <map>

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

std::vector<ChildShapes> child_shapes(const Childnet& cn, const LayerInfo& parent) {
  const std::string& name = parent.layer->name;
  if (cn.inputs.size() != parent.input_shapes.size() || cn.outputs.size() != parent.output_shapes.size() ||
      cn.schemas.size() != cn.layers.size())
    throw Error(fmt::format("an inconsistent childnet ({} inputs, {} outputs, {} layers, {} schemas)", cn.inputs.size(),
                            cn.outputs.size(), cn.layers.size(), cn.schemas.size()),
                {}, name, "routine");
  std::map<std::string, Shape> shape;
  std::map<std::string, QuantParams> quant;  // of the parent's inputs
  for (std::size_t i = 0; i < cn.inputs.size(); ++i) {
    shape[cn.inputs[i]] = parent.input_shapes[i];
    if (i < parent.input_quant.size()) quant[cn.inputs[i]] = parent.input_quant[i];
  }
  std::vector<ChildShapes> out(cn.layers.size());
  for (std::size_t k = 0; k < cn.layers.size(); ++k) {
    const Layer& child = cn.layers[k];
    ChildShapes& c = out[k];
    for (const auto& i : child.inputs) {
      auto it = shape.find(i);
      if (it == shape.end())
        throw Error(fmt::format("child layer '{}' reads blob '{}' that no earlier child writes", child.name, i), {}, name,
                    "routine");
      c.inputs.push_back(it->second);
      auto q = quant.find(i);
      c.input_quant.push_back(q == quant.end() ? QuantParams{} : q->second);
    }
    c.outputs = infer_layer_shapes(child, c.inputs);
    // The parent's outputs keep their shapes and quantisation; internal blobs have none.
    c.output_quant.resize(child.outputs.size());
    for (std::size_t o = 0; o < child.outputs.size(); ++o) {
      shape[child.outputs[o]] = c.outputs[o];
      for (std::size_t j = 0; j < cn.outputs.size(); ++j)
        if (cn.outputs[j] == child.outputs[o]) {
          if (c.outputs[o] != parent.output_shapes[j])
            throw Error(fmt::format("child layer '{}' writes {} for the layer's output {}", child.name,
                                    c.outputs[o].to_string(), parent.output_shapes[j].to_string()),
                        {}, name, "routine");
          if (j < parent.output_quant.size()) c.output_quant[o] = parent.output_quant[j];
        }
    }
  }
  return out;
}

std::unique_ptr<PreparedRoutine> prepare_childnet(const LayerInfo& layer, const Schema& schema, std::string_view algorithm,
                                                  const RoutineParams& params, const std::vector<RoutineChoice>& children) {
  return std::make_unique<PreparedChildnet>(layer, schema, algorithm, params, children);
}

}  // namespace softneuro::core
