// Childnet routines outside a net: a PreparedRoutine that runs a childnet
// routine's layer through its own small executor (which expands the childnet
// into its child steps), so a childnet routine can be prepared and run like any
// other (unit tests, benchmarks, constant folding). Inside a net the net's
// plan expands childnets into steps itself (core/plan.cpp).
#pragma once

#include "core/graph.hpp"

#include <softneuro/routine.hpp>

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace softneuro::core {

/// Prepares the layer with childnet routine `schema/algorithm` and `params`:
/// children chosen from `children` (by child layer name) or by default in
/// their childnet schema, their blobs planned once into an arena of its own.
/// The layer's inputs and outputs must be float32 nchw CPU blobs.
std::unique_ptr<PreparedRoutine> prepare_childnet(const LayerInfo& layer, const Schema& schema,
                                                  std::string_view algorithm, const RoutineParams& params,
                                                  const std::vector<RoutineChoice>& children = {});

/// What a childnet's child is told of its blobs, as its parent's plan tells it.
struct ChildShapes {
  std::vector<Shape> inputs, outputs;
  /// The parent's blobs' quantisation where the child reads or writes one of
  /// them (its inputs, its outputs); none on the childnet's own blobs.
  std::vector<QuantParams> input_quant, output_quant;
};
/// Each child's, in order: the parent's input shapes flow through the
/// children's shape inference. Throws Error naming the parent layer where a
/// child reads a blob no earlier child writes, the childnet is inconsistent
/// (counts of inputs, outputs, schemas), or a child writes one of the
/// parent's outputs at another shape. The plan and the tuner both read it.
std::vector<ChildShapes> child_shapes(const Childnet& cn, const LayerInfo& parent);

/// Base of a childnet routine: its childnet() says the children, and outside a
/// net it is prepared as that childnet (prepare_childnet).
class ChildnetRoutine : public Routine {
 public:
  std::optional<Childnet> childnet(const LayerInfo& layer, const Schema& schema,
                                   const RoutineParams& params) const override = 0;
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& layer, const Schema& schema,
                                           const RoutineParams& params) const override {
    return prepare_childnet(layer, schema, algorithm(), params);
  }
};

}  // namespace softneuro::core
