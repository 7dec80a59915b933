// The planner: the cost graph DPRS solves, built from the profiles and the
// adapt costs, and the complete routine path read back from a solution
// (every layer's routine and every adapt, with the schema each converts from).
#pragma once

#include "dprs/dprs.hpp"
#include "profiler/unit_profile.hpp"

#include <string>
#include <vector>

namespace softneuro::profiler {

struct Plan {
  dprs::CostGraph graph;
  std::vector<Schema> schemas;  ///< by index; 0 is the net's I/O schema
  std::vector<int> node_of;     ///< per profile, its node
  struct Edge {
    std::string blob;
    std::string consumer;  ///< a layer, "output", or "" for the blob's shared copy
    std::vector<AdaptPick> picks;  ///< S*S, as in graph.edges
    /// Where the edge runs from the layer profiled before `consumer_profile`
    /// to it: per pair of schemas (S*S, as the adapt costs), the fused pair
    /// that prices it (nullptr: apart).
    int consumer_profile = -1;
    std::vector<const FusedPair*> fused;
    /// Per pair of schemas, where the two best candidates would run as one
    /// step: the fastest two that run apart, where cheaper than any pair.
    std::vector<std::pair<const Measured*, const Measured*>> apart;
  };
  std::vector<Edge> edges;  ///< parallel to graph.edges
};

/// The cost graph: a node per profiled layer (its best time per schema), net
/// inputs, constants and net outputs as zero-cost nodes fixed to the schema
/// they have at run time (the paper's auxiliary nodes), an edge per blob read
/// with its adapt costs. A blob several layers read gets a node of its own,
/// its shared copy: converted once, read by every consumer, as the executor
/// runs it. `step_ms` is added to every layer and adapt (each step's dispatch
/// beyond its own time, measured in context). Two consecutive layers a
/// routine runs as one step (LayerProfile::fused_with_previous) are priced so:
/// their edge's cost for a pair of schemas (the same, or two a routine
/// computes across: a bfloat16 convolution and a float32 add) becomes the
/// pair's time less the two layers' best candidates apart there, where that
/// is less than the adapt between them.
Plan build_plan(const detail::WorkingModel& net, const std::vector<LayerProfile>& profiles, Profiler& profiler,
                bool integrated, double step_ms = 0, const Profiler::Progress& progress = {});

struct PlannedPath {
  core::RoutinePath path;               ///< routines and adapts
  std::vector<const Measured*> picks;   ///< per profile
  double predicted_ms = 0;              ///< the solution's total, each distinct conversion counted once
};

/// The routine path of a solution: each layer's best candidate in its schema
/// (or, where the solution took a fused pair's price, the pair's candidates),
/// and every adapt the solution implies (a conversion several edges need, the
/// same blob from and to the same schemas, runs once and is counted once).
PlannedPath read_path(const Plan& plan, const dprs::Solution& solution, const std::vector<LayerProfile>& profiles,
                      bool integrated, const std::string& device_fingerprint);

}  // namespace softneuro::profiler
