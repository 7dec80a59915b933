// What stands behind softneuro::Model, Session and Net; shared with the importer and the tuner.
#pragma once

#include "core/executor.hpp"
#include "core/graph.hpp"
#include "core/weight_store.hpp"

#include <softneuro/net.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace softneuro::detail {

/// A model: checked, sorted, shapes inferred; nothing prepared.
struct ModelImpl {
  core::Graph graph;
  std::map<std::string, Shape> shapes;
  std::vector<TensorInfo> inputs, outputs;
  std::string file;  ///< where it was loaded from, for messages
  /// Derived weights, shared by every executor of this model.
  std::shared_ptr<core::WeightStore> weights = std::make_shared<core::WeightStore>();

  /// Checks the DAG, sorts it and infers shapes. Errors name `file` (when not
  /// empty) and the layer at fault.
  void build(core::Graph g, const std::string& from);
  /// A fresh executor of this model (prepared routines, planned memory).
  std::unique_ptr<core::Executor> prepare() const;
};

/// A Net: a model it may change (tune, calibrate) and its one executor, prepared on first use.
struct NetImpl : ModelImpl {
  mutable std::unique_ptr<core::Executor> executor;

  static std::unique_ptr<NetImpl> build(core::Graph graph, const std::string& file = {});
  /// The executor, prepared now if it was not.
  core::Executor& prepared() const;
  /// After the graph changed (routine path, quantisation): the executor is
  /// dropped and derived weights are no longer shared with earlier models.
  void changed();
};

class SessionImpl {
 public:
  SessionImpl(const Model& model, const SessionOptions& options);
  Model model;
  SessionOptions options;
  std::unique_ptr<core::Executor> executor;
};

}  // namespace softneuro::detail
