// What stands behind softneuro::Net; shared with the importer and the tuner.
#pragma once

#include "core/executor.hpp"
#include "core/graph.hpp"

#include <softneuro/net.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace softneuro::detail {

struct NetImpl {
  core::Graph graph;
  std::map<std::string, Shape> shapes;
  std::vector<TensorInfo> inputs, outputs;
  std::unique_ptr<core::Executor> executor;
  std::string file;  ///< where it was loaded from, for messages

  /// Checks the DAG, sorts it, infers shapes, chooses and prepares routines.
  /// Errors name `file` (when not empty) and the layer at fault.
  static std::unique_ptr<NetImpl> build(core::Graph graph, const std::string& file = {});
};

}  // namespace softneuro::detail
