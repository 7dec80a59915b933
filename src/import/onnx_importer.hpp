// The ONNX importer's internal entry points (import_onnx in <softneuro/import.hpp>
// is these plus detail::make_model).
#pragma once

#include "core/graph.hpp"
#include "import/dynamic_dims.hpp"

#include <softneuro/import.hpp>

#include <map>
#include <string>

namespace softneuro::onnx_import {

/// Reads the model at `path` and translates it into a graph, before any pass.
/// Throws softneuro::Error naming the file, the ONNX node and the field.
/// `symbol_sizes`: the sizes named symbolic input dims take while translating
/// (default: 1 for a name that is an input's leading dim, 64 for others); they
/// stay symbolic. `symbols`, where given, receives the inputs' symbolic dims.
/// `read_as`: dim_params read as other expressions (InputSymbols::read_as).
/// `map_weights`: external data mapped, not read (TensorSource::mapped): for a
/// graph that is compared and dropped, which must not outlive a change to the files.
core::Graph import_graph(const std::string& path, const ImportOptions& options = {},
                         const std::map<std::string, int64_t>* symbol_sizes = nullptr, InputSymbols* symbols = nullptr,
                         const std::map<std::string, std::string>* read_as = nullptr, bool map_weights = false);

}  // namespace softneuro::onnx_import
