// Small nets built in code for tests.
#pragma once

#include "core/graph.hpp"
#include "core/registry.hpp"

#include <map>
#include <memory>
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
/// A registry of a test's own: the process's routines and orders, and `extra`
/// (the process's stays as every other test reads it). Models get it through
/// detail::make_model(graph, file, registry).
std::shared_ptr<core::RoutineRegistry> registry_with(std::vector<std::unique_ptr<Routine>> extra = {});
template <class... R>
std::shared_ptr<core::RoutineRegistry> registry_with(std::unique_ptr<R>... extra) {
  std::vector<std::unique_ptr<Routine>> v;
  (v.push_back(std::move(extra)), ...);
  return registry_with(std::move(v));
}
/// Serialises and loads a graph through the public API (as a file in `dir`).
std::string temp_path(const std::string& name);

}  // namespace softneuro::test
