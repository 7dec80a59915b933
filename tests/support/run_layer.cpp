#include "support/run_layer.hpp"

#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace softneuro::test {

std::vector<Blob> run_layer(const Layer& layer, const std::vector<Blob>& inputs, std::string_view descriptor,
                            const core::RoutineRegistry* registry) {
  if (!registry) registry = &core::RoutineRegistry::instance();
  LayerInfo info;
  info.layer = &layer;
  info.routines = registry;
  for (const Blob& b : inputs) info.input_shapes.push_back(b.shape());
  info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);

  Schema schema;
  const Routine* routine = registry->find(layer.type, descriptor, &schema);
  if (!routine)
    throw Error(fmt::format("no routine {} for layer type {}", descriptor, layer.type), {}, layer.name, "type");
  for (const Blob& b : inputs)
    if (b.dtype() != schema.dtype || b.device() != schema.device)
      throw Error(fmt::format("input blob is {}, routine {} reads {}", to_string(b.dtype()), descriptor,
                              schema.to_string()),
                  {}, layer.name, "inputs");
  Support s = routine->supports(info, schema);
  if (!s) throw Error(fmt::format("{} does not support this layer: {}", descriptor, s.reason), {}, layer.name);

  std::unique_ptr<PreparedRoutine> prepared = routine->prepare(info, schema, {});
  return run_prepared(*prepared, inputs, info.output_shapes, schema);
}

std::vector<Blob> run_prepared(PreparedRoutine& prepared, const std::vector<Blob>& inputs,
                               const std::vector<Shape>& output_shapes, const Schema& schema) {
  std::vector<Blob> outputs;
  for (const Shape& shape : output_shapes) outputs.push_back(Blob::allocate(shape, schema.dtype, schema.layout));

  std::size_t ws_bytes = prepared.workspace_bytes();
  std::unique_ptr<void, void (*)(void*)> workspace(
      ws_bytes ? std::aligned_alloc(64, (ws_bytes + 63) / 64 * 64) : nullptr, std::free);

  std::vector<const Blob*> in_ptrs;
  for (const Blob& b : inputs) in_ptrs.push_back(&b);
  std::vector<Blob*> out_ptrs;
  for (Blob& b : outputs) out_ptrs.push_back(&b);
  RunArgs args;
  args.inputs = in_ptrs;
  args.outputs = out_ptrs;
  args.workspace = workspace.get();
  args.pool = &core::global_pool();
  prepared.run(args);
  return outputs;
}

Blob make_blob(const Shape& shape, const std::vector<float>& vals) {
  if (static_cast<int64_t>(vals.size()) != shape.numel())
    throw Error(fmt::format("make_blob: {} values for shape {}", vals.size(), shape.to_string()));
  Blob b = Blob::allocate(shape);
  if (!vals.empty()) std::memcpy(b.data(), vals.data(), vals.size() * sizeof(float));
  return b;
}

Blob iota_blob(const Shape& shape, float scale, float offset) {
  Blob b = Blob::allocate(shape);
  float* p = b.data_as<float>();
  for (int64_t i = 0; i < shape.numel(); ++i) p[i] = static_cast<float>(i) * scale + offset;
  return b;
}

std::vector<float> values(const Blob& blob) {
  if (blob.dtype() != DType::float32) throw Error("values: not a float32 blob");
  const float* p = blob.data_as<float>();
  return std::vector<float>(p, p + blob.numel());
}

Layer make_layer(std::string type, std::map<std::string, Attr> params, std::map<std::string, Blob> weights,
                 int num_inputs, int num_outputs, std::string name) {
  Layer l;
  l.name = std::move(name);
  l.type = std::move(type);
  for (int i = 0; i < num_inputs; ++i) l.inputs.push_back(fmt::format("x{}", i));
  for (int i = 0; i < num_outputs; ++i) l.outputs.push_back(fmt::format("y{}", i));
  l.params = std::move(params);
  l.weights = std::move(weights);
  return l;
}

}  // namespace softneuro::test
