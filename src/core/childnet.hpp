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
