// Small nets built in code for tests.
#pragma once

#include "core/graph.hpp"

#include <string>

namespace softneuro::test {

/// input [1,4,8,8] -> conv -> relu -> ... a chain of `length` layers -> output "out".
core::Graph chain_graph(int length);
/// Two inputs, a branch and a merge, two outputs (and a split): a small DAG.
core::Graph multi_io_graph();
/// Serialises and loads a graph through the public API (as a file in `dir`).
std::string temp_path(const std::string& name);

}  // namespace softneuro::test
