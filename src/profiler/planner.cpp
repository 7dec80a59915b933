#include "profiler/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace softneuro::profiler {

Plan build_plan(const detail::WorkingModel& net, const std::vector<LayerProfile>& profiles, Profiler& profiler,
                bool integrated, double step_ms, const Profiler::Progress& progress) {
  Plan plan;
  auto index = [&](const Schema& s) {
    auto it = std::find(plan.schemas.begin(), plan.schemas.end(), s);
    if (it != plan.schemas.end()) return static_cast<int>(it - plan.schemas.begin());
    plan.schemas.push_back(s);
    return static_cast<int>(plan.schemas.size()) - 1;
  };
  index(Schema{});
  for (const auto& p : profiles)
    for (const auto& m : p.measured) index(m.cand.schema);
  const int S = static_cast<int>(plan.schemas.size());
  auto& g = plan.graph;
  g.num_schemas = S;

  std::map<std::string, int> readers;  // blob -> edges reading it
  for (const auto& p : profiles)
    for (const auto& i : p.layer->inputs) ++readers[i];
  for (const auto& o : net.graph.outputs) ++readers[o];
  int edges_total = 0, edges_done = 0;
  for (const auto& [blob, n] : readers) edges_total += n + (n > 1);

  // Adapt costs by (shape, quantisation, from, to): many blobs share them.
  std::map<std::string, AdaptPick> adapt_memo;
  auto adapt = [&](const Shape& shape, const QuantParams& q, int a, int b) {
    std::string key = fmt::format("{}|{}|{}|{}|{}", shape.to_string(), q.axis, q.scales.size(), a, b);
    auto it = adapt_memo.find(key);
    if (it == adapt_memo.end())
      it = adapt_memo.emplace(key, profiler.adapt_cost(shape, q, plan.schemas[static_cast<std::size_t>(a)],
                                                       plan.schemas[static_cast<std::size_t>(b)])).first;
    return it->second;
  };
  // The executor converts a constant once, when a session is made: its
  // conversions cost a run nothing, but must exist.
  std::set<std::string> constants;
  for (const auto& l : net.graph.layers)
    if (l.type == "constant") constants.insert(l.outputs[0]);
  auto add_edge = [&](const std::string& blob, int from, int to, const std::string& consumer) {
    if (progress && !integrated) progress("adapts", edges_done++, edges_total, blob + " -> " + consumer);
    const auto& [shape, q] = profiler.planned_blob(blob);
    const bool constant = constants.count(blob) > 0;
    std::vector<double> cost(static_cast<std::size_t>(S * S));
    std::vector<AdaptPick> picks(static_cast<std::size_t>(S * S));
    // Only schemas both ends can take: the others' conversions are never chosen.
    const auto& from_cost = g.node_cost[static_cast<std::size_t>(from)];
    const auto& to_cost = g.node_cost[static_cast<std::size_t>(to)];
    for (int a = 0; a < S; ++a)
      for (int b = 0; b < S; ++b) {
        auto& p = picks[static_cast<std::size_t>(a * S + b)];
        if (from_cost[static_cast<std::size_t>(a)] == kInf || to_cost[static_cast<std::size_t>(b)] == kInf) {
          cost[static_cast<std::size_t>(a * S + b)] = kInf;
          continue;
        }
        p = adapt(shape, q, a, b);
        if (integrated && !constant && a != b && p.ms < kInf)
          if (auto in_context = profiler.adapt_in_context(blob, consumer, plan.schemas[static_cast<std::size_t>(a)],
                                                          plan.schemas[static_cast<std::size_t>(b)]))
            p.ms = *in_context;
        if (constant && p.ms < kInf) p.ms = 0;
        cost[static_cast<std::size_t>(a * S + b)] = p.ms + (a != b && p.ms < kInf && !constant ? step_ms : 0);
      }
    g.add_edge(from, to, std::move(cost));
    plan.edges.push_back({blob, consumer, std::move(picks), -1, {}, {}});
  };
  std::map<std::string, int> source;  // blob -> the node its readers read it from
  auto produced = [&](const std::string& blob, int node) {
    auto r = readers.find(blob);
    if (r == readers.end() || r->second < 2) {
      source[blob] = node;
      return;
    }
    // Converted once per target schema and shared, as the executor runs it:
    // a node of its own whose schema is the copy's.
    int shared = g.add_node(std::vector<double>(static_cast<std::size_t>(S), 0.0));
    add_edge(blob, node, shared, "");
    source[blob] = shared;
  };
  auto fixed_node = [&](const Schema& s) {
    std::vector<double> cost(static_cast<std::size_t>(S), kInf);
    cost[static_cast<std::size_t>(index(s))] = 0;
    return g.add_node(std::move(cost));
  };
  for (const auto& in : net.graph.inputs) produced(in.name, fixed_node(Schema{}));
  for (const auto& l : net.graph.layers)
    if (l.type == "constant")
      produced(l.outputs[0], fixed_node(Schema{Device::cpu, l.weight("value").dtype(), Layout::nchw}));
  // Per profile and schema, its best candidate's cost (kInf: none).
  std::vector<std::vector<double>> best(profiles.size(), std::vector<double>(static_cast<std::size_t>(S), kInf));
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    const auto& p = profiles[i];
    for (const auto& m : p.measured) {
      auto& c = best[i][static_cast<std::size_t>(index(m.cand.schema))];
      c = std::min(c, p.cost(m, integrated));
    }
    std::vector<double> cost = best[i];
    for (double& c : cost) c += step_ms;
    const int node = g.add_node(std::move(cost));
    plan.node_of.push_back(node);
    for (const auto& in : p.layer->inputs) {
      add_edge(in, source.at(in), node, p.layer->name);
      if (p.fused_with_previous.empty() || i == 0 || profiles[i - 1].layer->outputs.size() != 1 ||
          profiles[i - 1].layer->outputs[0] != in || source.at(in) != plan.node_of[i - 1])
        continue;
      // One step instead of two (and no adapt between them): the pair's cost
      // against the two best apart and a step's dispatch, where less than the
      // edge's; and always where the two best are such a pair, which the plan
      // runs as one step whatever it costs (a plain nchw convolution summing
      // onto the residual: 0.6 ms apart, 6 as one step in a ResNet50 tuning).
      auto& edge = plan.edges.back();
      auto& cost = g.edges.back().adapt;
      const LayerProfile& q = profiles[i - 1];
      edge.consumer_profile = static_cast<int>(i);
      edge.fused.assign(static_cast<std::size_t>(S * S), nullptr);
      edge.apart.assign(static_cast<std::size_t>(S * S), {nullptr, nullptr});
      for (int a = 0; a < S; ++a)
        for (int b = 0; b < S; ++b) {
          const std::size_t k = static_cast<std::size_t>(a * S + b);
          const Schema &sa = plan.schemas[static_cast<std::size_t>(a)], &sb = plan.schemas[static_cast<std::size_t>(b)];
          if (cost[k] == kInf) continue;
          const FusedPair* f = p.fused_pair(q.best_in(sa, integrated), p.best_in(sb, integrated));
          if (!f) continue;
          const double base = best[i - 1][static_cast<std::size_t>(a)] + best[i][static_cast<std::size_t>(b)];
          // The fastest two apart: the edge's adapt and their extra over the two best.
          double apart_ms = kInf;
          for (const auto& x : q.measured) {
            if (!(x.cand.schema == sa)) continue;
            for (const auto& y : p.measured)
              if (y.cand.schema == sb && q.cost(x, integrated) + p.cost(y, integrated) < apart_ms && !p.fused_pair(&x, &y)) {
                apart_ms = q.cost(x, integrated) + p.cost(y, integrated);
                edge.apart[k] = {&x, &y};
              }
          }
          const double fused_d = p.cost(*f, integrated) - base - step_ms;
          if (apart_ms < kInf && cost[k] + apart_ms - base <= fused_d) {
            cost[k] += apart_ms - base;
          } else {
            cost[k] = fused_d;
            edge.fused[k] = f;
            edge.apart[k] = {nullptr, nullptr};
          }
        }
      for (const auto& f : p.fused_with_previous) {
        if (!profiles[i - 1].find(f.previous_descriptor, f.previous_params) || !p.find(f.descriptor, f.params)) continue;
        const auto a = static_cast<std::size_t>(index(f.previous_schema)), b = static_cast<std::size_t>(index(f.schema));
        const std::size_t k = a * static_cast<std::size_t>(S) + b;
        if (cost[k] == kInf) continue;
        const double d = p.cost(f, integrated) - best[i - 1][a] - best[i][b] - step_ms;
        if (d < cost[k]) {
          cost[k] = d;
          edge.fused[k] = &f;
          edge.apart[k] = {nullptr, nullptr};
        }
      }
    }
    for (const auto& o : p.layer->outputs) produced(o, node);
  }
  for (const auto& o : net.graph.outputs) add_edge(o, source.at(o), fixed_node(Schema{}), "output");
  return plan;
}

PlannedPath read_path(const Plan& plan, const dprs::Solution& solution, const std::vector<LayerProfile>& profiles,
                      bool integrated, const std::string& device_fingerprint) {
  PlannedPath out;
  out.path.device_fingerprint = device_fingerprint;
  const auto schema_of = [&](int node) { return solution.schema[static_cast<std::size_t>(node)]; };
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    const Measured* m = profiles[i].best_in(plan.schemas[static_cast<std::size_t>(schema_of(plan.node_of[i]))], integrated);
    out.picks.push_back(m);
    out.path.routines.push_back({profiles[i].layer->name, m->cand.descriptor, m->params, profiles[i].cost(*m, integrated), 0,
                                 m->children});
  }
  out.predicted_ms = solution.total;
  const int S = plan.graph.num_schemas;
  // The fused pairs whose price the solution took: their candidates, the pair's time on the second.
  for (std::size_t e = 0; e < plan.edges.size(); ++e) {
    const auto& edge = plan.edges[e];
    if (edge.consumer_profile < 0) continue;
    const int a = schema_of(plan.graph.edges[e].from), b = schema_of(plan.graph.edges[e].to);
    const FusedPair* f = edge.fused[static_cast<std::size_t>(a * S + b)];
    const auto i = static_cast<std::size_t>(edge.consumer_profile);
    if (const auto [x, y] = edge.apart[static_cast<std::size_t>(a * S + b)]; x && y) {
      // The two best would run as one step, slower than these two apart.
      out.picks[i - 1] = x;
      out.picks[i] = y;
      out.path.routines[i - 1] = {profiles[i - 1].layer->name, x->cand.descriptor, x->params,
                                  profiles[i - 1].cost(*x, integrated), 0, x->children};
      out.path.routines[i] = {profiles[i].layer->name, y->cand.descriptor, y->params, profiles[i].cost(*y, integrated), 0,
                              y->children};
      continue;
    }
    if (!f) continue;
    const Measured* previous = profiles[i - 1].find(f->previous_descriptor, f->previous_params);
    const Measured* mine = profiles[i].find(f->descriptor, f->params);
    out.picks[i - 1] = previous;
    out.picks[i] = mine;
    out.path.routines[i - 1] = {profiles[i - 1].layer->name, previous->cand.descriptor, previous->params, 0, 0, {}};
    out.path.routines[i] = {profiles[i].layer->name, mine->cand.descriptor, mine->params, profiles[i].cost(*f, integrated), 0, {}};
  }
  std::set<std::tuple<std::string, int, int>> converted;
  for (std::size_t e = 0; e < plan.graph.edges.size(); ++e) {
    const auto& edge = plan.graph.edges[e];
    const int a = schema_of(edge.from), b = schema_of(edge.to);
    if (a == b) continue;
    // An adapt a fused pair makes unneeded: its time is in the pair's. Where
    // the edge took two candidates apart instead of the two best, their extra
    // is in the layers' times, not the adapt's.
    const auto k = static_cast<std::size_t>(a * S + b);
    const bool fused = !plan.edges[e].fused.empty() && plan.edges[e].fused[k];
    double ms = fused ? 0 : edge.adapt[k];
    if (!plan.edges[e].apart.empty())
      if (const auto [x, y] = plan.edges[e].apart[k]; x && y) {
        const auto i = static_cast<std::size_t>(plan.edges[e].consumer_profile);
        const LayerProfile &q = profiles[i - 1], &p = profiles[i];
        ms -= q.cost(*x, integrated) + p.cost(*y, integrated) -
              q.cost(*q.best_in(x->cand.schema, integrated), integrated) - p.cost(*p.best_in(y->cand.schema, integrated), integrated);
      }
    // The executor converts a blob from one schema to another once, whoever reads it.
    if (!converted.insert({plan.edges[e].blob, a, b}).second) {
      out.predicted_ms -= ms;
      ms = 0;
    }
    const AdaptPick& pick = plan.edges[e].picks[static_cast<std::size_t>(a * S + b)];
    out.path.adapts.push_back({plan.edges[e].blob, plan.edges[e].consumer, plan.schemas[static_cast<std::size_t>(a)].to_string(),
                               plan.schemas[static_cast<std::size_t>(b)].to_string(), {pick.descriptor}, ms, pick.params});
  }
  return out;
}

}  // namespace softneuro::profiler
