// Small nets built in code for tests.
#pragma once

#include "core/graph.hpp"

#include <map>
#include <string>
#include <vector>

namespace softneuro::test {

/// A layer of `type` reading `in`, writing `out`.
Layer layer(std::string name, std::string type, std::vector<std::string> in, std::vector<std::string> out,
            std::map<std::string, Attr> params = {}, std::map<std::string, Blob> weights = {});

/// input [1,4,8,8] -> conv -> relu -> ... a chain of `length` layers -> output "out".
core::Graph chain_graph(int length, int64_t channels = 4, int64_t size = 8);
/// Two inputs, a branch and a merge, two outputs (and a split): a small DAG.
core::Graph multi_io_graph();
/// Serialises and loads a graph through the public API (as a file in `dir`).
std::string temp_path(const std::string& name);

}  // namespace softneuro::test
