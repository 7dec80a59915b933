// The ONNX importer's internal entry points (import_onnx in <softneuro/import.hpp>
// is these plus detail::make_model).
#pragma once

#include "core/graph.hpp"

#include <softneuro/import.hpp>

#include <map>
#include <string>

namespace softneuro::onnx_import {

/// Reads the model at `path` and translates it into a graph, before any pass.
/// Throws softneuro::Error naming the file, the ONNX node and the field.
/// `probe_sizes`: the sizes symbolic input dims take while translating
/// (default: 1 for a leading dim, 64 for others); they stay symbolic.
core::Graph import_graph(const std::string& path, const ImportOptions& options = {},
                         const std::map<std::string, Shape>* probe_sizes = nullptr);

}  // namespace softneuro::onnx_import
