// DPRS solver. See dprs.hpp for the problem; this comment explains the method.
//
// Algorithm (SoftNeuro Algorithm 1, as a frontier DP)
// ---------------------------------------------------
// Layers are processed in the given topological order. A layer is *open*
// while some unprocessed layer still consumes its output (the paper's open
// constraint on a branching layer, and also the chain predecessor, whose
// schema the paper keeps as the lambda of S_{i-1}(lambda)). One DP table is
// carried between steps, keyed by the schemas of the open layers (the
// frontier F): table[lambda_F] = cheapest cost of all processed layers and
// of the adapts between them, given those schemas. Step i:
//   1. extends the table with layer i's schema: adds cost[i][lambda_i] and
//      the adapt of every in-edge (its producer is open, so its schema is a
//      key of the table) - line 12 of Algorithm 1;
//   2. relaxes (minimises out) every layer whose last consumer is i, and i
//      itself if it has no consumer - lines 15-23; keeping a back-pointer to
//      the argmin so that the assignment can be rebuilt at the end.
// Layer i stays open when it has consumers (lines 24-31). After the last
// layer nothing is open and the table holds the optimum (line 33).
//
// This is variable elimination in topological order, so it is exactly
// optimal for any DAG. Details the paper leaves open, chosen for exactness:
//   - The paper keeps one table per layer, S_i(lambda; lambda_C), and merges
//     the predecessors' subpaths as sets. As numbers, a union would count
//     twice the layers shared by two predecessors, and the constraint sets of
//     predecessors need not be equal in a general DAG. One joint table over
//     the frontier avoids both: each layer's cost is added once (when it is
//     processed) and each adapt once (when its consumer is processed).
//   - Relaxation: Proposition 3 relaxes a constraint at a layer all
//     downstream paths pass through. In a topological processing order, the
//     earliest moment at which no unprocessed layer depends on a schema is
//     after its last consumer; minimising a variable out then is exact
//     because no later term mentions it.
//   - Several inputs/outputs: the paper adds auxiliary input and output
//     layers with one zero-cost routine. Such a layer adds nothing to any
//     table (one schema, zero cost, zero adapts), so here a source simply
//     opens a new key at its step and a sink is minimised out at its own
//     step - the same optimum without the auxiliary layers.
//   - Ties: the first minimum in enumeration order is kept (lowest schema
//     indices), so results are deterministic.
//
// Domains. Before solving, each layer's schemas are reduced to those an
// optimum may use (reduce_domains: infinite costs, schemas no neighbour can
// adapt to, schemas another is never worse than), and the DP enumerates only
// those. The tuner offers every schema of every routine (ten with three
// dtypes), but a layer has measured routines in a few, and a recogniser with
// a frontier of seven layers needs 10^8 entries a step over all ten and a few
// million over its domains.
//
// Complexity. Let F_i be the open layers when layer i is processed, d_v the
// size of layer v's domain (at most S) and k = max_i |F_i|
// (Solution::max_open_constraints). Step i enumerates the prod_{F_i + {i}} d_v
// <= S^(k+1) assignments of F_i + {i}, each with 1 + indegree(i) additions
// (every producer of i is open, so a layer has at most |F_i| distinct
// producers): time O((N + E) * S^(k+1)), i.e. O(N * S^(k+1)) for bounded
// in-degree, and O(N * S^2) = O(N) for fixed S on a straight net. The carried
// table has at most S^k entries (layers closed at step i are minimised out
// while enumerating, the product is never stored); back-pointers take at
// most S^k entries per step. Reducing the domains costs
// O(rounds * sum_v d_v^2 * sum_{edges at v} d_other).
//
// Bounded work on dense graphs. Before solving, a symbolic pass computes the
// frontier of every step. If one step would enumerate (over the domains) more than
// Options::max_table_entries entries, or all steps together more than
// Options::max_total_entries, the solver falls back to a heuristic and
// reports exact = false:
//   - beam search over the same frontier: per step keep only the
//     beam_width cheapest partial assignments (partial assignments agreeing
//     on the still-open layers are merged exactly, as in the DP), then
//   - iterated conditional modes: change one layer's schema at a time to
//     the one minimising its own cost plus its incident adapts, sweeping
//     until no single-layer change lowers the total.
// The result is a valid assignment whose total is reported exactly, but it
// is not guaranteed optimal.

#include "dprs/dprs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace softneuro::dprs {

// ---------------------------------------------------------------- CostGraph

namespace {

void ensure_mask(CostGraph& g) {
  const auto S = static_cast<std::size_t>(std::max(g.num_schemas, 0));
  g.allowed.resize(g.node_cost.size());
  for (auto& row : g.allowed)
    if (row.size() != S) row.resize(S, char{1});
}

void check_node_index(const CostGraph& g, int node, const char* what) {
  if (node < 0 || node >= g.num_nodes())
    throw std::invalid_argument(std::string("dprs: ") + what + ": node " + std::to_string(node) +
                                " out of range [0, " + std::to_string(g.num_nodes()) + ")");
}

}  // namespace

int CostGraph::add_node(std::vector<double> cost) {
  node_cost.push_back(std::move(cost));
  if (!allowed.empty()) ensure_mask(*this);
  return num_nodes() - 1;
}

void CostGraph::add_edge(int from, int to, std::vector<double> adapt) {
  edges.push_back(Edge{from, to, std::move(adapt)});
}

void CostGraph::restrict_node(int node, const std::vector<char>& mask) {
  check_node_index(*this, node, "restrict_node");
  if (num_schemas < 1 || mask.size() != static_cast<std::size_t>(num_schemas))
    throw std::invalid_argument("dprs: restrict_node: mask has " + std::to_string(mask.size()) +
                                " flags, expected num_schemas = " + std::to_string(num_schemas));
  ensure_mask(*this);
  auto& row = allowed[static_cast<std::size_t>(node)];
  for (std::size_t s = 0; s < row.size(); ++s) row[s] = static_cast<char>(row[s] && mask[s]);
}

void CostGraph::pin(int node, int schema) {
  if (schema < 0 || schema >= num_schemas)
    throw std::invalid_argument("dprs: pin: schema " + std::to_string(schema) + " out of range [0, " +
                                std::to_string(num_schemas) + ")");
  std::vector<char> mask(static_cast<std::size_t>(num_schemas), char{0});
  mask[static_cast<std::size_t>(schema)] = 1;
  restrict_node(node, mask);
}

bool CostGraph::is_allowed(int node, int schema) const {
  if (allowed.empty()) return true;
  const auto n = static_cast<std::size_t>(node);
  const auto s = static_cast<std::size_t>(schema);
  return n < allowed.size() && s < allowed[n].size() && allowed[n][s] != 0;
}

// ---------------------------------------------------------------- validation

namespace {

void check_value(double v, const std::string& what) {
  if (std::isnan(v)) throw std::invalid_argument("dprs: " + what + " is NaN");
  if (v == -kInfinity) throw std::invalid_argument("dprs: " + what + " is -infinity");
}

}  // namespace

void validate(const CostGraph& g) {
  const int S = g.num_schemas;
  if (S < 1) throw std::invalid_argument("dprs: num_schemas must be >= 1, got " + std::to_string(S));
  const auto s_count = static_cast<std::size_t>(S);
  const int N = g.num_nodes();
  for (int n = 0; n < N; ++n) {
    const auto& row = g.node_cost[static_cast<std::size_t>(n)];
    if (row.size() != s_count)
      throw std::invalid_argument("dprs: node " + std::to_string(n) + " has " + std::to_string(row.size()) +
                                  " costs, expected num_schemas = " + std::to_string(S));
    for (std::size_t s = 0; s < s_count; ++s)
      check_value(row[s], "cost of node " + std::to_string(n) + " for schema " + std::to_string(s));
  }
  for (std::size_t i = 0; i < g.edges.size(); ++i) {
    const auto& e = g.edges[i];
    const std::string name = "edge " + std::to_string(i) + " (" + std::to_string(e.from) + " -> " +
                             std::to_string(e.to) + ")";
    if (e.from < 0 || e.from >= N || e.to < 0 || e.to >= N)
      throw std::invalid_argument("dprs: " + name + ": node index out of range [0, " + std::to_string(N) + ")");
    if (e.from == e.to) throw std::invalid_argument("dprs: " + name + " is a self loop");
    if (e.from > e.to)
      throw std::invalid_argument("dprs: " + name +
                                  " goes backwards: nodes must be given in a topological order");
    if (e.adapt.size() != s_count * s_count)
      throw std::invalid_argument("dprs: " + name + " has " + std::to_string(e.adapt.size()) +
                                  " adapt costs, expected num_schemas^2 = " + std::to_string(s_count * s_count));
    for (std::size_t k = 0; k < e.adapt.size(); ++k)
      check_value(e.adapt[k], "adapt cost of " + name + " from schema " + std::to_string(k / s_count) +
                                  " to schema " + std::to_string(k % s_count));
  }
  if (!g.allowed.empty()) {
    if (g.allowed.size() != static_cast<std::size_t>(N))
      throw std::invalid_argument("dprs: allowed mask has " + std::to_string(g.allowed.size()) +
                                  " rows, expected 0 or the number of nodes " + std::to_string(N));
    for (int n = 0; n < N; ++n)
      if (g.allowed[static_cast<std::size_t>(n)].size() != s_count)
        throw std::invalid_argument("dprs: allowed mask of node " + std::to_string(n) + " has " +
                                    std::to_string(g.allowed[static_cast<std::size_t>(n)].size()) +
                                    " flags, expected num_schemas = " + std::to_string(S));
  }
}

// ---------------------------------------------------------------- solver

namespace {

using Index = std::size_t;

// The validated graph in the shape the solver works on.
struct Problem {
  const CostGraph* graph = nullptr;
  Index S = 0;
  Index N = 0;
  std::vector<double> cost;                 // N*S; +infinity where the mask forbids the schema
  std::vector<std::vector<Index>> in_edges;  // edge indices, per consumer
  std::vector<std::vector<Index>> out_edges; // edge indices, per producer
  // The schemas each layer can take in an optimal path, ascending (see
  // reduce_domains); the DP enumerates these, not all S.
  std::vector<std::vector<Index>> dom;
  bool empty_domain = false;  // some layer has no schema: infeasible

  const double* adapt(Index e) const { return graph->edges[e].adapt.data(); }
  Index from(Index e) const { return static_cast<Index>(graph->edges[e].from); }
  Index to(Index e) const { return static_cast<Index>(graph->edges[e].to); }
};

Problem prepare(const CostGraph& g) {
  Problem p;
  p.graph = &g;
  p.S = static_cast<Index>(g.num_schemas);
  p.N = static_cast<Index>(g.num_nodes());
  p.cost.resize(p.N * p.S);
  for (Index n = 0; n < p.N; ++n)
    for (Index s = 0; s < p.S; ++s)
      p.cost[n * p.S + s] = g.is_allowed(static_cast<int>(n), static_cast<int>(s)) ? g.node_cost[n][s] : kInfinity;
  p.in_edges.resize(p.N);
  p.out_edges.resize(p.N);
  for (Index e = 0; e < g.edges.size(); ++e) {
    p.in_edges[p.to(e)].push_back(e);
    p.out_edges[p.from(e)].push_back(e);
  }
  p.dom.resize(p.N);
  for (Index n = 0; n < p.N; ++n)
    for (Index s = 0; s < p.S; ++s)
      if (p.cost[n * p.S + s] < kInfinity) p.dom[n].push_back(s);
  return p;
}

// Largest change of edge e's adapt cost, over the schemas its other end can
// take, when this end's schema goes from s to t: +infinity if t is
// incompatible where s was not, -infinity if s is compatible with nothing.
double worst_adapt_change(const Problem& p, Index e, bool this_end_is_consumer, Index s, Index t) {
  const double* adapt = p.adapt(e);
  const Index other = this_end_is_consumer ? p.from(e) : p.to(e);
  double worst = -kInfinity;
  for (Index o : p.dom[other]) {
    const double as = this_end_is_consumer ? adapt[o * p.S + s] : adapt[s * p.S + o];
    const double at = this_end_is_consumer ? adapt[o * p.S + t] : adapt[t * p.S + o];
    if (as == kInfinity) continue;  // s is infeasible beside o: nothing to compare
    if (at == kInfinity) return kInfinity;
    worst = std::max(worst, at - as);
  }
  return worst;
}

// Shrinks every layer's domain without changing the optimum, so that the
// exact DP fits where the full S^(k+1) enumeration would not (ten schemas
// over a frontier of seven layers is 10^8 entries a step; the schemas a
// layer can really take are usually a few):
//   - a schema is dropped when an edge's adapt from (or to) every schema the
//     other end can take is infinite (arc consistency), and
//   - a schema s is dropped when another, t, is never worse: t's cost minus
//     s's plus, per incident edge, the largest change of its adapt over the
//     other end's schemas is < 0, or == 0 with t < s (so ties still go to
//     the lowest schema). Every assignment using s then costs at least as
//     much with t, so an optimum without s exists.
// Repeated until nothing changes, since each removal can enable others.
void reduce_domains(Problem& p) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (Index n = 0; n < p.N; ++n) {
      auto& d = p.dom[n];
      for (std::size_t k = 0; k < d.size();) {
        const Index s = d[k];
        bool drop = false;
        for (Index t : d) {
          if (t == s) continue;
          double change = p.cost[n * p.S + t] - p.cost[n * p.S + s];
          for (Index e : p.in_edges[n]) {
            if (change == kInfinity || change == -kInfinity) break;
            change += worst_adapt_change(p, e, true, s, t);
          }
          for (Index e : p.out_edges[n]) {
            if (change == kInfinity || change == -kInfinity) break;
            change += worst_adapt_change(p, e, false, s, t);
          }
          if (change < 0 || (change == 0 && t < s)) {
            drop = true;
            break;
          }
        }
        // Arc consistency, also for a layer whose domain is a single schema.
        if (!drop)
          for (Index e : p.in_edges[n])
            if (std::none_of(p.dom[p.from(e)].begin(), p.dom[p.from(e)].end(),
                             [&](Index o) { return p.adapt(e)[o * p.S + s] < kInfinity; }))
              drop = true;
        if (!drop)
          for (Index e : p.out_edges[n])
            if (std::none_of(p.dom[p.to(e)].begin(), p.dom[p.to(e)].end(),
                             [&](Index o) { return p.adapt(e)[s * p.S + o] < kInfinity; }))
              drop = true;
        if (drop) {
          d.erase(d.begin() + static_cast<std::ptrdiff_t>(k));
          changed = true;
        } else {
          ++k;
        }
      }
      if (d.empty()) {
        p.empty_domain = true;
        return;
      }
    }
  }
}

double total_of(const Problem& p, const std::vector<int>& schema) {
  double total = 0;
  for (Index n = 0; n < p.N; ++n) total += p.cost[n * p.S + static_cast<Index>(schema[n])];
  for (Index e = 0; e < p.graph->edges.size(); ++e)
    total += p.adapt(e)[static_cast<Index>(schema[p.from(e)]) * p.S + static_cast<Index>(schema[p.to(e)])];
  return total;
}

// The product of the domain sizes of `layers` (and of `extra`, if any) if it
// is <= cap (no overflow for any cap).
bool domain_product(const Problem& p, const std::vector<Index>& layers, const Index* extra, Index cap, Index& out) {
  Index r = 1;
  auto times = [&](Index d) {
    if (d != 0 && r > cap / d) return false;
    r *= d;
    return true;
  };
  for (Index v : layers)
    if (!times(p.dom[v].size())) return false;
  if (extra && !times(p.dom[*extra].size())) return false;
  if (r > cap) return false;
  out = r;
  return true;
}

// One step of the frontier DP, computed symbolically before any arithmetic.
struct Step {
  std::vector<Index> open;    // F: layers open when this layer is processed
  std::vector<Index> closed;  // relaxed at this step (minimised out)
  std::vector<Index> kept;    // still open after it: F of the next step
};

struct Plan {
  std::vector<Step> steps;
  Index width = 0;    // k = max |F|
  bool fits = true;   // the exact DP is within the table limits
};

Plan make_plan(const Problem& p, const Options& opt, Index table_limit) {
  // A layer is relaxed at the step of its last consumer (or its own step
  // when it has none: a net output).
  std::vector<Index> close_at(p.N);
  for (Index n = 0; n < p.N; ++n) close_at[n] = n;
  for (Index e = 0; e < p.graph->edges.size(); ++e) close_at[p.from(e)] = std::max(close_at[p.from(e)], p.to(e));

  Plan plan;
  plan.steps.resize(p.N);
  std::vector<Index> open;
  Index total = 0;
  for (Index i = 0; i < p.N; ++i) {
    Step& st = plan.steps[i];
    st.open = open;
    plan.width = std::max(plan.width, open.size());
    for (Index v : open) (close_at[v] == i ? st.closed : st.kept).push_back(v);
    (close_at[i] == i ? st.closed : st.kept).push_back(i);
    Index work = 0;
    if (!domain_product(p, open, &i, table_limit, work) || work > opt.max_total_entries - total) {
      plan.fits = false;
    } else {
      total += work;
    }
    open = st.kept;
  }
  return plan;
}

// Exact frontier DP over the layers' domains; returns the argmin assignment.
// A table entry is indexed by the positions of its layers' schemas in their
// domains (mixed radix), not by the schemas themselves.
std::vector<int> solve_exact(const Problem& p, const Plan& plan) {
  const Index S = p.S;
  std::vector<double> table{0.0};                  // over the current frontier
  std::vector<std::vector<std::uint32_t>> back(p.N);  // argmin of the relaxed layers
  std::vector<Index> pos(p.N, 0);                  // position of a layer in `vars`
  std::vector<Index> vars, digit, radix, old_stride;
  std::vector<const Index*> schemas_of;            // per position: its layer's domain
  std::vector<std::pair<const double*, Index>> producers;  // (adapt, position of producer)

  for (Index i = 0; i < p.N; ++i) {
    const Step& st = plan.steps[i];
    // Enumeration order: relaxed layers are the low digits, so the entries
    // minimised together are contiguous and the kept part indexes the new table.
    vars = st.closed;
    vars.insert(vars.end(), st.kept.begin(), st.kept.end());
    const Index n = vars.size();
    radix.resize(n);
    schemas_of.resize(n);
    for (Index j = 0; j < n; ++j) {
      pos[vars[j]] = j;
      radix[j] = p.dom[vars[j]].size();
      schemas_of[j] = p.dom[vars[j]].data();
    }
    old_stride.assign(n + 1, 0);  // stride of each digit in the old table (0 for layer i)
    {
      Index stride = 1;
      for (Index v : st.open) {
        old_stride[pos[v]] = stride;
        stride *= p.dom[v].size();
      }
    }
    producers.clear();
    for (Index e : p.in_edges[i]) producers.emplace_back(p.adapt(e), pos[p.from(e)]);
    const Index pi = pos[i];
    const double* ci = &p.cost[i * S];

    Index n_closed = 1, n_kept = 1;
    for (Index v : st.closed) n_closed *= p.dom[v].size();
    for (Index v : st.kept) n_kept *= p.dom[v].size();

    std::vector<double> next(n_kept);
    auto& bp = back[i];
    if (!st.closed.empty()) bp.assign(n_kept, 0);  // nothing to remember otherwise
    digit.assign(n + 1, 0);
    Index old = 0;
    for (Index k = 0; k < n_kept; ++k) {
      double best = kInfinity;
      std::uint32_t arg = 0;
      for (Index d = 0; d < n_closed; ++d) {
        const Index si = schemas_of[pi][digit[pi]];
        double v = table[old] + ci[si];
        for (const auto& [adapt, pu] : producers) v += adapt[schemas_of[pu][digit[pu]] * S + si];
        if (v < best) {
          best = v;
          arg = static_cast<std::uint32_t>(d);
        }
        // Odometer over `vars`, keeping the old-table index in step.
        for (Index j = 0; j < n; ++j) {
          ++digit[j];
          old += old_stride[j];
          if (digit[j] < radix[j]) break;
          digit[j] = 0;
          old -= radix[j] * old_stride[j];
        }
      }
      next[k] = best;
      if (!bp.empty()) bp[k] = arg;
    }
    table = std::move(next);
  }

  // Rebuild backwards: the kept layers of step i are relaxed at later steps,
  // so their schemas (and positions in their domains) are known when step i
  // is visited.
  std::vector<int> schema(p.N, 0);
  std::vector<Index> at(p.N, 0);  // position of schema[v] in dom[v]
  for (Index i = p.N; i-- > 0;) {
    const Step& st = plan.steps[i];
    if (st.closed.empty()) continue;
    Index k = 0, m = 1;
    for (Index v : st.kept) {
      k += at[v] * m;
      m *= p.dom[v].size();
    }
    Index d = back[i][k];
    for (Index v : st.closed) {
      const Index r = p.dom[v].size();
      at[v] = d % r;
      schema[v] = static_cast<int>(p.dom[v][at[v]]);
      d /= r;
    }
  }
  return schema;
}

// Fallback, part 1: beam search over the frontier of the same plan.
std::vector<int> solve_beam(const Problem& p, const Plan& plan, Index beam) {
  const Index S = p.S;
  struct Candidate {
    double value;
    std::uint32_t parent;
    std::uint32_t schema;
  };
  std::vector<std::vector<std::uint32_t>> parent(p.N), choice(p.N);
  std::vector<std::uint32_t> digits;  // states x |open|: schemas of the open layers
  std::vector<double> value{0.0};
  std::vector<Index> pos(p.N, 0);
  std::vector<Candidate> cands;
  std::unordered_map<std::string, Index> by_key;
  std::vector<Index> order, key_src;
  std::vector<std::pair<const double*, Index>> producers;
  std::string key;

  for (Index i = 0; i < p.N; ++i) {
    const Step& st = plan.steps[i];
    const Index w = st.open.size();
    for (Index j = 0; j < w; ++j) pos[st.open[j]] = j;
    pos[i] = w;  // layer i is digit w of an extended state
    producers.clear();
    for (Index e : p.in_edges[i]) producers.emplace_back(p.adapt(e), pos[p.from(e)]);
    key_src.clear();
    for (Index v : st.kept) key_src.push_back(pos[v]);
    key.assign(key_src.size() * sizeof(std::uint32_t), '\0');

    cands.clear();
    by_key.clear();
    const Index states = value.size();
    for (Index b = 0; b < states; ++b) {
      const std::uint32_t* state = digits.data() + b * w;
      for (Index s : p.dom[i]) {
        double v = value[b] + p.cost[i * S + s];
        for (const auto& [adapt, pu] : producers) v += adapt[state[pu] * S + s];
        for (Index j = 0; j < key_src.size(); ++j) {
          const std::uint32_t d = key_src[j] == w ? static_cast<std::uint32_t>(s) : state[key_src[j]];
          std::memcpy(&key[j * sizeof d], &d, sizeof d);
        }
        // Same schemas on every still-open layer: only the cheapest matters.
        const auto [it, inserted] = by_key.try_emplace(key, cands.size());
        const Candidate c{v, static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(s)};
        if (inserted)
          cands.push_back(c);
        else if (v < cands[it->second].value)
          cands[it->second] = c;
      }
    }
    order.resize(cands.size());
    std::iota(order.begin(), order.end(), Index{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](Index a, Index b) { return cands[a].value < cands[b].value; });
    if (order.size() > beam) order.resize(beam);

    std::vector<std::uint32_t> next_digits(order.size() * key_src.size());
    std::vector<double> next_value(order.size());
    parent[i].resize(order.size());
    choice[i].resize(order.size());
    for (Index r = 0; r < order.size(); ++r) {
      const Candidate& c = cands[order[r]];
      const std::uint32_t* state = digits.data() + c.parent * w;
      for (Index j = 0; j < key_src.size(); ++j)
        next_digits[r * key_src.size() + j] = key_src[j] == w ? c.schema : state[key_src[j]];
      next_value[r] = c.value;
      parent[i][r] = c.parent;
      choice[i][r] = c.schema;
    }
    digits = std::move(next_digits);
    value = std::move(next_value);
  }

  std::vector<int> schema(p.N, 0);
  Index r = 0;  // the last step keeps nothing open: a single state
  for (Index i = p.N; i-- > 0;) {
    schema[i] = static_cast<int>(choice[i][r]);
    r = parent[i][r];
  }
  return schema;
}

// Fallback, part 2: iterated conditional modes. Each accepted change lowers
// the node's local cost (and so the total) or removes infinite terms; the
// sweep cap only guards against rounding-induced cycles.
void polish(const Problem& p, std::vector<int>& schema) {
  const Index S = p.S;
  auto local = [&](Index n, Index s) {
    double v = p.cost[n * S + s];
    for (Index e : p.in_edges[n]) v += p.adapt(e)[static_cast<Index>(schema[p.from(e)]) * S + s];
    for (Index e : p.out_edges[n]) v += p.adapt(e)[s * S + static_cast<Index>(schema[p.to(e)])];
    return v;
  };
  for (int sweep = 0; sweep < 1000; ++sweep) {
    bool improved = false;
    for (Index n = 0; n < p.N; ++n) {
      const auto current = static_cast<Index>(schema[n]);
      double best = local(n, current);
      Index best_s = current;
      for (Index s : p.dom[n]) {
        if (s == current) continue;
        const double v = local(n, s);
        if (v < best) {
          best = v;
          best_s = s;
        }
      }
      if (best_s != current) {
        schema[n] = static_cast<int>(best_s);
        improved = true;
      }
    }
    if (!improved) break;
  }
}

}  // namespace

Solution solve(const CostGraph& graph, const Options& options) {
  validate(graph);
  Solution sol;
  if (graph.num_nodes() == 0) {
    sol.feasible = true;
    sol.total = 0;
    return sol;
  }
  Problem p = prepare(graph);
  reduce_domains(p);
  if (p.empty_domain) {
    // No finite path: report the lowest allowed schemas (or 0), as before.
    sol.max_open_constraints = make_plan(p, options, 0).width;
    sol.schema.assign(p.N, 0);
    for (Index n = 0; n < p.N; ++n)
      for (Index s = 0; s < p.S; ++s)
        if (graph.is_allowed(static_cast<int>(n), static_cast<int>(s))) {
          sol.schema[n] = static_cast<int>(s);
          break;
        }
    sol.total = total_of(p, sol.schema);
    sol.feasible = false;
    return sol;
  }
  // Back-pointers are 32-bit: never enumerate more than 2^32 - 1 entries in a step.
  const Index table_limit = std::min<Index>(options.max_table_entries, UINT32_MAX);
  const Plan plan = make_plan(p, options, table_limit);
  sol.max_open_constraints = plan.width;
  if (plan.fits) {
    sol.exact = true;
    sol.schema = solve_exact(p, plan);
  } else {
    sol.exact = false;
    const Index beam = std::max<Index>(1, std::min<Index>(options.beam_width, table_limit / p.S));
    sol.schema = solve_beam(p, plan, beam);
    polish(p, sol.schema);
  }
  // Reported as evaluate() computes it, so evaluate(graph, sol.schema) == sol.total.
  sol.total = total_of(p, sol.schema);
  sol.feasible = sol.total < kInfinity;
  return sol;
}

std::vector<double> fold_childnet(const CostGraph& inner, int entry, int exit, const Options& options,
                                  bool* exact) {
  validate(inner);
  check_node_index(inner, entry, "fold_childnet entry");
  check_node_index(inner, exit, "fold_childnet exit");
  const auto S = static_cast<Index>(inner.num_schemas);
  const auto ue = static_cast<Index>(entry), ux = static_cast<Index>(exit);
  CostGraph g = inner;
  ensure_mask(g);
  const std::vector<char> entry_mask = g.allowed[ue], exit_mask = g.allowed[ux];
  std::vector<double> folded(S * S, kInfinity);
  bool all_exact = true;
  for (Index a = 0; a < S; ++a) {
    for (Index b = 0; b < S; ++b) {
      if (entry == exit && a != b) continue;  // one layer cannot have two schemas
      // Pin entry to a and exit to b, within the masks the caller already set
      // (when entry == exit, a == b here and both rows are the same row).
      g.allowed[ue].assign(S, char{0});
      g.allowed[ux].assign(S, char{0});
      g.allowed[ue][a] = entry_mask[a];
      g.allowed[ux][b] = exit_mask[b];
      const Solution sol = solve(g, options);
      all_exact = all_exact && sol.exact;
      folded[a * S + b] = sol.feasible ? sol.total : kInfinity;
    }
  }
  if (exact) *exact = all_exact;
  return folded;
}

bool dominated(const CostGraph& graph, int node, const std::vector<int>& options, const std::vector<int>& alternatives) {
  validate(graph);
  if (node < 0 || node >= graph.num_nodes()) throw std::invalid_argument("dominated: node out of range");
  const int S = graph.num_schemas;
  const auto& cost = graph.node_cost[static_cast<std::size_t>(node)];
  auto usable = [&](int n, int s) {
    return s >= 0 && s < S && graph.is_allowed(n, s) && graph.node_cost[static_cast<std::size_t>(n)][static_cast<std::size_t>(s)] < kInfinity;
  };
  // The most taking `a` instead of `o` can add on the node's edges: per edge,
  // over the schemas the neighbour may take (adapts both impossible: no term).
  auto worst_loss = [&](int a, int o) {
    double loss = 0;
    for (const auto& e : graph.edges) {
      if (e.from != node && e.to != node) continue;
      const int other = e.from == node ? e.to : e.from;
      double most = -kInfinity;
      for (int t = 0; t < S; ++t) {
        if (!usable(other, t)) continue;
        const auto at = [&](int mine) {
          const int f = e.from == node ? mine : t, to = e.from == node ? t : mine;
          return e.adapt[static_cast<std::size_t>(f * S + to)];
        };
        const double with_a = at(a), with_o = at(o);
        if (with_o == kInfinity) continue;  // o cannot be beside t at all
        most = std::max(most, with_a - with_o);
      }
      if (most > -kInfinity) loss += most;
    }
    return loss;
  };
  for (int a : alternatives) {
    if (!usable(node, a)) continue;
    bool beats_every = true;
    for (int o : options) {
      if (!usable(node, o)) continue;
      if (!(cost[static_cast<std::size_t>(a)] + worst_loss(a, o) <= cost[static_cast<std::size_t>(o)])) {
        beats_every = false;
        break;
      }
    }
    if (beats_every) return true;
  }
  return std::none_of(options.begin(), options.end(), [&](int o) { return usable(node, o); });
}

double evaluate(const CostGraph& graph, const std::vector<int>& schema) {
  validate(graph);
  if (schema.size() != static_cast<std::size_t>(graph.num_nodes()))
    throw std::invalid_argument("dprs: evaluate: assignment has " + std::to_string(schema.size()) +
                                " schemas, expected one per node (" + std::to_string(graph.num_nodes()) + ")");
  for (std::size_t n = 0; n < schema.size(); ++n)
    if (schema[n] < 0 || schema[n] >= graph.num_schemas)
      throw std::invalid_argument("dprs: evaluate: schema " + std::to_string(schema[n]) + " of node " +
                                  std::to_string(n) + " out of range [0, " + std::to_string(graph.num_schemas) +
                                  ")");
  return total_of(prepare(graph), schema);
}

std::vector<Solution> error_time_hull(const CostGraph& graph, const std::vector<std::vector<double>>& node_error,
                                      const Options& options, int max_solves) {
  if (node_error.size() != graph.node_cost.size()) throw std::invalid_argument("node_error: one row per node");
  double max_error = 0, min_error = kInfinity, time_scale = 0;
  for (std::size_t n = 0; n < node_error.size(); ++n) {
    if (node_error[n].size() != static_cast<std::size_t>(graph.num_schemas))
      throw std::invalid_argument("node_error: S entries per row");
    for (std::size_t s = 0; s < node_error[n].size(); ++s) {
      const double e = node_error[n][s];
      if (!(e >= 0) || e == kInfinity) throw std::invalid_argument("node_error: finite and >= 0");
      max_error = std::max(max_error, e);
      if (e > 0) min_error = std::min(min_error, e);
      const double c = graph.node_cost[n][s];
      if (c < kInfinity && c > 0) time_scale += c;
    }
  }
  struct Vertex {
    double lambda;
    Solution sol;
    double error;
  };
  int solves = 0;
  auto solve_at = [&](double lambda) {
    CostGraph g = graph;
    for (std::size_t n = 0; n < g.node_cost.size(); ++n)
      for (std::size_t s = 0; s < g.node_cost[n].size(); ++s) g.node_cost[n][s] += lambda * node_error[n][s];
    ++solves;
    Vertex v{lambda, solve(g, options), 0};
    if (v.sol.feasible) {
      v.sol.total = evaluate(graph, v.sol.schema);
      for (std::size_t n = 0; n < v.sol.schema.size(); ++n) v.error += node_error[n][static_cast<std::size_t>(v.sol.schema[n])];
    }
    return v;
  };
  std::vector<Vertex> found{solve_at(0)};
  if (!found[0].sol.feasible) return {};
  if (max_error > 0 && found[0].error > 0) {
    // Past this lambda, a unit of the least error outweighs every time there
    // is: the path of least error (errors far below the largest count as none).
    min_error = std::max(min_error, max_error * 1e-9);
    found.push_back(solve_at(4 * std::max(time_scale, 1.0) / min_error));
    // Between two vertices, where their lines cross: a vertex of its own, or none.
    std::vector<std::pair<std::size_t, std::size_t>> open{{0, 1}};
    while (!open.empty() && solves < max_solves) {
      const auto [a, b] = open.back();
      open.pop_back();
      const Vertex& va = found[a];
      const Vertex& vb = found[b];
      if (va.sol.schema == vb.sol.schema || !(va.error > vb.error)) continue;
      const double cross = (vb.sol.total - va.sol.total) / (va.error - vb.error);
      if (!(cross > va.lambda && cross < vb.lambda)) continue;
      Vertex m = solve_at(cross);
      if (!m.sol.feasible || m.sol.schema == va.sol.schema || m.sol.schema == vb.sol.schema) continue;
      // On the line between them (no lower there): not a new vertex.
      const double at_cross = va.sol.total + cross * va.error;
      if (m.sol.total + cross * m.error >= at_cross - 1e-12 * std::max(1.0, std::abs(at_cross))) continue;
      found.push_back(std::move(m));
      open.push_back({a, found.size() - 1});
      open.push_back({found.size() - 1, b});
    }
  }
  std::sort(found.begin(), found.end(), [](const Vertex& x, const Vertex& y) {
    return x.sol.total != y.sol.total ? x.sol.total < y.sol.total : x.error < y.error;
  });
  // Faster first, each with less error than every faster one.
  std::vector<Solution> hull;
  double least = kInfinity;
  for (auto& v : found)
    if (v.sol.feasible && v.error < least) {
      least = v.error;
      hull.push_back(std::move(v.sol));
    }
  return hull;
}

}  // namespace softneuro::dprs
