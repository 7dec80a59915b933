// Tests of the DPRS solver: exhaustive search as the oracle on random DAGs,
// and hand-built nets (the paper's nets A to D) with known optima.
#include <catch2/catch.hpp>

#include "dprs/dprs.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

using softneuro::dprs::CostGraph;
using softneuro::dprs::evaluate;
using softneuro::dprs::fold_childnet;
using softneuro::dprs::kInfinity;
using softneuro::dprs::Options;
using softneuro::dprs::Solution;
using softneuro::dprs::solve;

namespace {

constexpr double inf = kInfinity;

bool same_total(double a, double b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

// S*S adapt matrix: `diag` on the diagonal, `off` elsewhere.
std::vector<double> uniform_adapt(int S, double off, double diag = 0) {
  std::vector<double> m(static_cast<std::size_t>(S * S), off);
  for (int s = 0; s < S; ++s) m[static_cast<std::size_t>(s * S + s)] = diag;
  return m;
}

// Total of an assignment, computed independently of the library.
double direct_total(const CostGraph& g, const std::vector<int>& a) {
  const auto S = static_cast<std::size_t>(g.num_schemas);
  auto at = [&](int n) { return static_cast<std::size_t>(a[static_cast<std::size_t>(n)]); };
  double t = 0;
  for (int n = 0; n < g.num_nodes(); ++n) {
    if (!g.is_allowed(n, static_cast<int>(at(n)))) return inf;
    t += g.node_cost[static_cast<std::size_t>(n)][at(n)];
  }
  for (const auto& e : g.edges) t += e.adapt[at(e.from) * S + at(e.to)];
  return t;
}

// Exhaustive search over every assignment of allowed schemas: the oracle.
// Flat arrays and raw pointers keep it affordable in unoptimised builds.
double brute_force(const CostGraph& g, std::vector<int>* best_assignment = nullptr) {
  const int N = g.num_nodes(), S = g.num_schemas;
  std::vector<double> cost;  // N*S, +infinity where the mask forbids the schema
  std::vector<std::vector<int>> choices(static_cast<std::size_t>(N));  // allowed schemas per node
  for (int n = 0; n < N; ++n)
    for (int s = 0; s < S; ++s) {
      cost.push_back(g.is_allowed(n, s) ? g.node_cost[static_cast<std::size_t>(n)][static_cast<std::size_t>(s)] : inf);
      if (g.is_allowed(n, s)) choices[static_cast<std::size_t>(n)].push_back(s);
    }
  for (const auto& c : choices)
    if (c.empty()) return inf;
  std::vector<int> ends;             // from, to per edge
  std::vector<const double*> adapt;  // per edge
  for (const auto& e : g.edges) {
    ends.push_back(e.from);
    ends.push_back(e.to);
    adapt.push_back(e.adapt.data());
  }
  const double* c = cost.data();
  const int* ep = ends.data();
  const double* const* ap = adapt.data();
  const int E = static_cast<int>(adapt.size());
  std::vector<int> a(static_cast<std::size_t>(N)), at(static_cast<std::size_t>(N), 0);
  for (int n = 0; n < N; ++n) a[static_cast<std::size_t>(n)] = choices[static_cast<std::size_t>(n)][0];
  int* x = a.data();
  double best = inf;
  while (true) {
    double t = 0;
    for (int n = 0; n < N; ++n) t += c[n * S + x[n]];
    for (int e = 0; e < E; ++e) t += ap[e][x[ep[2 * e]] * S + x[ep[2 * e + 1]]];
    if (t < best) {
      best = t;
      if (best_assignment) *best_assignment = a;
    }
    int j = 0;
    for (; j < N; ++j) {
      const auto& cj = choices[static_cast<std::size_t>(j)];
      auto& k = at[static_cast<std::size_t>(j)];
      if (++k < static_cast<int>(cj.size())) {
        x[j] = cj[static_cast<std::size_t>(k)];
        break;
      }
      k = 0;
      x[j] = cj[0];
    }
    if (j == N) break;
  }
  return best;
}

void check_consistent(const CostGraph& g, const Solution& sol) {
  REQUIRE(sol.schema.size() == static_cast<std::size_t>(g.num_nodes()));
  for (int s : sol.schema) REQUIRE((s >= 0 && s < g.num_schemas));
  REQUIRE(evaluate(g, sol.schema) == sol.total);
  REQUIRE(same_total(direct_total(g, sol.schema), sol.total));
  REQUIRE(sol.feasible == (sol.total < inf));
}

// ---- random cost graphs

struct Rng {
  std::mt19937 gen;
  explicit Rng(unsigned seed) : gen(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }
  bool chance(double p) { return uniform(0, 1) < p; }
  // Zeros, small integers (ties), some infinities, otherwise reals.
  double cost(double p_inf) {
    const double r = uniform(0, 1);
    if (r < p_inf) return inf;
    if (r < p_inf + 0.12) return 0;
    if (r < p_inf + 0.40) return integer(1, 3);
    return uniform(0, 10);
  }
};

std::vector<double> random_adapt(Rng& rng, int S) {
  std::vector<double> m(static_cast<std::size_t>(S * S));
  for (int a = 0; a < S; ++a)
    for (int b = 0; b < S; ++b)
      m[static_cast<std::size_t>(a * S + b)] = (a == b && rng.chance(0.8)) ? 0.0 : rng.cost(0.06);
  return m;
}

int add_random_node(CostGraph& g, Rng& rng) {
  std::vector<double> c(static_cast<std::size_t>(g.num_schemas));
  for (auto& v : c) v = rng.cost(0.06);
  return g.add_node(std::move(c));
}

// DAG with local and long-range edges: chains, branches (nested by
// chance), merges of 2-3 inputs, parallel edges, several sources and sinks.
CostGraph random_dag(Rng& rng, int S, int N) {
  CostGraph g;
  g.num_schemas = S;
  for (int v = 0; v < N; ++v) {
    add_random_node(g, rng);
    if (v == 0) continue;
    const double r = rng.uniform(0, 1);
    const int inputs = r < 0.15 ? 0 : r < 0.65 ? 1 : r < 0.9 ? 2 : 3;
    std::vector<int> used;
    for (int k = 0; k < inputs; ++k) {
      const int u = rng.chance(0.6) ? std::max(0, v - rng.integer(1, 3)) : rng.integer(0, v - 1);
      if (std::find(used.begin(), used.end(), u) != used.end() && !rng.chance(0.2)) continue;
      used.push_back(u);
      g.add_edge(u, v, random_adapt(rng, S));
    }
  }
  return g;
}

// Series-parallel block (nested branches): returns its exit node.
int sp_block(CostGraph& g, Rng& rng, int from, int& budget, int depth) {
  auto node_after = [&](int u) {
    const int v = add_random_node(g, rng);
    --budget;
    if (u >= 0) g.add_edge(u, v, random_adapt(rng, g.num_schemas));
    return v;
  };
  if (budget < 4 || depth > 2 || rng.chance(0.3)) {
    int v = node_after(from);
    if (budget > 0 && rng.chance(0.5)) v = node_after(v);
    return v;
  }
  const int branches = rng.integer(2, 3);
  std::vector<int> exits;
  for (int b = 0; b < branches && budget > 1; ++b) exits.push_back(sp_block(g, rng, from, budget, depth + 1));
  const int merge = add_random_node(g, rng);
  --budget;
  for (int e : exits) g.add_edge(e, merge, random_adapt(rng, g.num_schemas));
  return merge;
}

CostGraph random_series_parallel(Rng& rng, int S, int N) {
  CostGraph g;
  g.num_schemas = S;
  int budget = N;
  int last = -1;
  while (budget > 0) last = sp_block(g, rng, rng.chance(0.2) ? -1 : last, budget, 0);
  // A second net input joining late, or an extra net output, now and then.
  const int n = g.num_nodes();
  if (n >= 3 && rng.chance(0.3)) g.add_edge(rng.integer(0, n / 2), rng.integer(n / 2 + 1, n - 1), random_adapt(rng, S));
  return g;
}

void maybe_restrict(CostGraph& g, Rng& rng) {
  if (!rng.chance(0.15)) return;
  const int n = rng.integer(0, g.num_nodes() - 1);
  std::vector<char> mask(static_cast<std::size_t>(g.num_schemas));
  for (auto& m : mask) m = static_cast<char>(rng.chance(0.6));
  g.restrict_node(n, mask);
}

// Largest N for which S^N brute force stays cheap.
int max_nodes(int S) { return S == 2 ? 12 : S == 3 ? 9 : 8; }

}  // namespace

// ------------------------------------------------------------ brute force

TEST_CASE("DPRS equals brute force on random DAGs", "[dprs][random]") {
  Rng rng(20240611u);
  const auto start = std::chrono::steady_clock::now();
  int checked = 0, infeasible = 0, multi_source = 0, multi_sink = 0, branching = 0, merging = 0;
  std::size_t widest = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const int S = rng.integer(2, 4);
    const int N = rng.integer(1, max_nodes(S));
    CostGraph g = iter % 2 == 0 ? random_dag(rng, S, N) : random_series_parallel(rng, S, N);
    maybe_restrict(g, rng);
    INFO("iteration " << iter << ", S = " << S << ", N = " << g.num_nodes());

    const Solution sol = solve(g);
    const double best = brute_force(g);
    REQUIRE(sol.exact);
    REQUIRE(same_total(sol.total, best));
    check_consistent(g, sol);
    ++checked;

    std::vector<int> in(static_cast<std::size_t>(g.num_nodes())), out(in.size());
    for (const auto& e : g.edges) ++out[static_cast<std::size_t>(e.from)], ++in[static_cast<std::size_t>(e.to)];
    infeasible += !sol.feasible;
    multi_source += std::count(in.begin(), in.end(), 0) > 1;
    multi_sink += std::count(out.begin(), out.end(), 0) > 1;
    branching += std::any_of(out.begin(), out.end(), [](int d) { return d > 1; });
    merging += std::any_of(in.begin(), in.end(), [](int d) { return d > 1; });
    widest = std::max(widest, sol.max_open_constraints);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("dprs: %d random DAGs checked against brute force in %.2f s (%d infeasible, %d multi-input, "
              "%d multi-output, %d with branches, %d with merges, widest frontier %zu)\n",
              checked, seconds, infeasible, multi_source, multi_sink, branching, merging, widest);
  REQUIRE(checked == 2000);
  REQUIRE(infeasible < checked / 4);  // the generator mostly makes feasible problems
  REQUIRE(branching > checked / 4);
  REQUIRE(merging > checked / 4);
}

TEST_CASE("fallback heuristic is valid and never beats the optimum", "[dprs][random][fallback]") {
  Rng rng(7u);
  int inexact = 0;
  for (int iter = 0; iter < 500; ++iter) {
    const int S = rng.integer(2, 4);
    const int N = rng.integer(1, max_nodes(S));
    CostGraph g = iter % 2 == 0 ? random_dag(rng, S, N) : random_series_parallel(rng, S, N);
    INFO("iteration " << iter);
    Options tiny;
    tiny.max_table_entries = 1;  // only steps where every layer has one schema left fit
    const Solution sol = solve(g, tiny);
    const Solution opt = solve(g);
    check_consistent(g, sol);
    REQUIRE(sol.max_open_constraints == opt.max_open_constraints);
    if (sol.exact) REQUIRE(same_total(sol.total, opt.total));
    inexact += !sol.exact;
    if (sol.feasible) REQUIRE(sol.total >= opt.total - 1e-9 * std::max(1.0, std::fabs(opt.total)));
    if (!opt.feasible) REQUIRE(!sol.feasible);
  }
  REQUIRE(inexact > 300);
}

// ------------------------------------------------------------ hand-built nets

TEST_CASE("net A: straight net", "[dprs][paper]") {
  // Schemas: 0 = alpha (say cpu:float32), 1 = beta (say cpu:qint8).
  // The middle layers are cheap in beta, the ends in alpha.
  CostGraph g;
  g.num_schemas = 2;
  g.node_cost = {{1, 5}, {4, 1}, {4, 1}, {1, 5}};
  SECTION("cheap adapts: switch to beta in the middle") {
    for (int i = 0; i + 1 < 4; ++i) g.add_edge(i, i + 1, uniform_adapt(2, 1));
    // alpha beta beta alpha: 1+1+1+1 + two adapts of 1 = 6 (all alpha: 10, all beta: 12).
    const Solution sol = solve(g);
    REQUIRE(sol.exact);
    REQUIRE(sol.feasible);
    REQUIRE(sol.total == 6);
    REQUIRE(sol.schema == std::vector<int>{0, 1, 1, 0});
    REQUIRE(sol.max_open_constraints == 1);
  }
  SECTION("expensive adapts: stay in alpha") {
    for (int i = 0; i + 1 < 4; ++i) g.add_edge(i, i + 1, uniform_adapt(2, 5));
    // alpha beta beta alpha now costs 4 + 10 = 14; all alpha is 10.
    const Solution sol = solve(g);
    REQUIRE(sol.total == 10);
    REQUIRE(sol.schema == std::vector<int>{0, 0, 0, 0});
  }
}

TEST_CASE("long straight net matches a direct Viterbi pass", "[dprs]") {
  Rng rng(3u);
  const int S = 8, N = 2000;
  CostGraph g;
  g.num_schemas = S;
  for (int i = 0; i < N; ++i) {
    add_random_node(g, rng);
    if (i > 0) g.add_edge(i - 1, i, random_adapt(rng, S));
  }
  // Equation (3) of the paper, written out.
  std::vector<double> row(g.node_cost[0]);
  for (int i = 1; i < N; ++i) {
    std::vector<double> next(static_cast<std::size_t>(S), inf);
    for (int b = 0; b < S; ++b)
      for (int a = 0; a < S; ++a)
        next[static_cast<std::size_t>(b)] =
            std::min(next[static_cast<std::size_t>(b)],
                     row[static_cast<std::size_t>(a)] + g.edges[static_cast<std::size_t>(i - 1)].adapt[static_cast<std::size_t>(a * S + b)] +
                         g.node_cost[static_cast<std::size_t>(i)][static_cast<std::size_t>(b)]);
    row = next;
  }
  const Solution sol = solve(g);
  REQUIRE(sol.exact);
  REQUIRE(same_total(sol.total, *std::min_element(row.begin(), row.end())));
  check_consistent(g, sol);
}

TEST_CASE("net B: one branching layer", "[dprs][paper]") {
  // L0 branches to L1 -> L2 and to L3; L4 merges L2 and L3.
  CostGraph g;
  g.num_schemas = 2;
  g.node_cost = {{1, 1.5}, {5, 1}, {5, 1}, {1, 6}, {1, 1.5}};
  for (auto [u, v] : {std::pair{0, 1}, {0, 3}, {1, 2}, {2, 4}, {3, 4}}) g.add_edge(u, v, uniform_adapt(2, 2));
  // Branch L1-L2 in beta, L3 in alpha, L0 and L4 in alpha: 5 x 1 + two adapts = 9.
  const Solution sol = solve(g);
  REQUIRE(sol.total == 9);
  REQUIRE(sol.schema == std::vector<int>{0, 1, 1, 0, 0});
  REQUIRE(sol.total == brute_force(g));
  REQUIRE(sol.max_open_constraints == 2);
}

TEST_CASE("a branching layer has one schema for all its consumers", "[dprs]") {
  // L1 only has alpha routines, L2 only beta; one of the two adapts must be paid.
  CostGraph g;
  g.num_schemas = 2;
  g.node_cost = {{0, 0}, {1, inf}, {inf, 1}};
  g.add_edge(0, 1, uniform_adapt(2, 10));
  g.add_edge(0, 2, uniform_adapt(2, 10));
  const Solution sol = solve(g);
  REQUIRE(sol.total == 12);
  REQUIRE(sol.schema == std::vector<int>{0, 0, 1});  // tie on L0: the lowest schema wins
}

TEST_CASE("net C: nested branches", "[dprs][paper]") {
  // The paper's layers 1..8 as 0..7: L0 branches to L1 and L5; L1 branches to
  // L2 and L3, merged by L4; L5 -> L6; L7 merges L4 and L6.
  CostGraph g;
  g.num_schemas = 2;
  g.node_cost = {{1, 3}, {1, 3}, {10, 1}, {10, 1}, {1, 3}, {1, 3}, {1, 3}, {1, 3}};
  for (auto [u, v] : {std::pair{0, 1}, {0, 5}, {1, 2}, {1, 3}, {2, 4}, {3, 4}, {4, 7}, {5, 6}, {6, 7}})
    g.add_edge(u, v, uniform_adapt(2, 1));
  // Only L2 and L3 go to beta: 8 layers at cost 1 + four adapts = 12.
  const Solution sol = solve(g);
  REQUIRE(sol.total == 12);
  REQUIRE(sol.schema == std::vector<int>{0, 0, 1, 1, 0, 0, 0, 0});
  REQUIRE(sol.total == brute_force(g));
  // While L3 is processed, L0 (for L5), L1 (for L3) and L2 (for L4) are open.
  REQUIRE(sol.max_open_constraints == 3);
}

TEST_CASE("net D: several inputs and outputs, with and without auxiliary layers", "[dprs][paper]") {
  // in_a(0), in_b(1) -> conv_a(2), conv_b(3) -> add(4) -> out0(5), out1(6);
  // conv_a also feeds out2(7). out1 has only a beta routine.
  auto build = [](bool auxiliary) {
    CostGraph g;
    g.num_schemas = 2;
    const int o = auxiliary ? 1 : 0;
    if (auxiliary) g.add_node({0, 0});
    for (const auto& c : std::vector<std::vector<double>>{{0, 0}, {0, 0}, {2, 1}, {2, 1}, {1, 1}, {1, 3}, {inf, 1}, {1, 1}})
      g.add_node(c);
    for (auto [u, v] : {std::pair{0, 2}, {1, 3}, {2, 4}, {3, 4}, {4, 5}, {4, 6}, {2, 7}})
      g.add_edge(u + o, v + o, uniform_adapt(2, 1));
    if (auxiliary) {
      // The paper's auxiliary input and output layers: zero cost, no adapt cost.
      const int out = g.add_node({0, 0});
      for (int v : {0, 1}) g.add_edge(0, v + o, uniform_adapt(2, 0));
      for (int v : {5, 6, 7}) g.add_edge(v + o, out, uniform_adapt(2, 0));
    }
    return g;
  };
  // Everything in beta except out0 (alpha, one adapt): 0+0+1+1+1+(1+1)+1+1 = 7.
  const Solution plain = solve(build(false));
  REQUIRE(plain.total == 7);
  REQUIRE(plain.schema == std::vector<int>{1, 1, 1, 1, 1, 0, 1, 1});
  const Solution aux = solve(build(true));
  REQUIRE(aux.total == 7);
  REQUIRE(std::vector<int>(aux.schema.begin() + 1, aux.schema.end() - 1) == plain.schema);
}

TEST_CASE("infeasible graphs are reported", "[dprs]") {
  SECTION("no adapt between the only routines") {
    CostGraph g;
    g.num_schemas = 2;
    g.node_cost = {{1, inf}, {inf, 1}};
    g.add_edge(0, 1, {0, inf, inf, 0});
    const Solution sol = solve(g);
    REQUIRE(sol.exact);
    REQUIRE(!sol.feasible);
    REQUIRE(sol.total == inf);
    REQUIRE(sol.schema.size() == 2);
  }
  SECTION("a layer with no routine at all") {
    CostGraph g;
    g.num_schemas = 3;
    g.node_cost = {{1, 2, 3}, {inf, inf, inf}};
    const Solution sol = solve(g);
    REQUIRE(!sol.feasible);
    REQUIRE(sol.exact);
  }
  SECTION("empty graph is trivially feasible") {
    CostGraph g;
    g.num_schemas = 2;
    const Solution sol = solve(g);
    REQUIRE(sol.feasible);
    REQUIRE(sol.total == 0);
    REQUIRE(sol.schema.empty());
  }
}

TEST_CASE("pinned layers", "[dprs]") {
  CostGraph g;
  g.num_schemas = 2;
  g.node_cost = {{1, 2}, {1, 5}, {1, 2}};
  g.add_edge(0, 1, uniform_adapt(2, 1));
  g.add_edge(1, 2, uniform_adapt(2, 1));
  REQUIRE(solve(g).total == 3);
  SECTION("pin the middle layer to beta") {
    g.pin(1, 1);
    // beta in the middle: 1 + 5 + 1 + two adapts = 9, or 2 + 5 + 2 = 9 all beta; the lowest schemas win.
    const Solution sol = solve(g);
    REQUIRE(sol.total == 9);
    REQUIRE(sol.schema[1] == 1);
    REQUIRE(sol.total == brute_force(g));
    REQUIRE(g.is_allowed(1, 1));
    REQUIRE(!g.is_allowed(1, 0));
    REQUIRE(g.is_allowed(0, 0));
  }
  SECTION("pin to a schema without routine") {
    g.node_cost[1][1] = inf;
    g.pin(1, 1);
    REQUIRE(!solve(g).feasible);
  }
  SECTION("restrictions accumulate") {
    g.pin(0, 1);
    g.restrict_node(0, {1, 0});
    REQUIRE(!solve(g).feasible);
  }
  SECTION("a node added after a mask is unrestricted") {
    g.pin(0, 1);
    const int n = g.add_node({1, 1});
    g.add_edge(2, n, uniform_adapt(2, 1));
    const Solution sol = solve(g);
    REQUIRE(sol.schema[0] == 1);
    REQUIRE(sol.total == brute_force(g));
  }
}

TEST_CASE("childnet folding", "[dprs][childnet]") {
  // A Winograd routine as a childnet: wgenc -> wgconv -> wgdec.
  CostGraph inner;
  inner.num_schemas = 2;
  inner.node_cost = {{1, 2}, {3, 1}, {1, 2}};
  inner.add_edge(0, 1, uniform_adapt(2, 0.5));
  inner.add_edge(1, 2, uniform_adapt(2, 0.5));
  bool exact = false;
  const std::vector<double> m = fold_childnet(inner, 0, 2, {}, &exact);
  REQUIRE(exact);
  // [a][b]: wgconv goes to beta whenever that is cheaper, paying its adapts.
  REQUIRE(m == std::vector<double>{4, 4.5, 4.5, 5});

  SECTION("folded childnet in the outer net equals the flat net") {
    // Outer: in -> [childnet] -> out. Flat: in -> wgenc -> wgconv -> wgdec -> out.
    const std::vector<double> in_cost{1, 3}, out_cost{2, 1};
    CostGraph flat;
    flat.num_schemas = 2;
    flat.node_cost = {in_cost, {1, 2}, {3, 1}, {1, 2}, out_cost};
    flat.add_edge(0, 1, uniform_adapt(2, 1));
    flat.add_edge(1, 2, uniform_adapt(2, 0.5));
    flat.add_edge(2, 3, uniform_adapt(2, 0.5));
    flat.add_edge(3, 4, uniform_adapt(2, 1));
    // The childnet layer as two zero-cost nodes (its entry and exit) joined by the fold.
    CostGraph outer;
    outer.num_schemas = 2;
    outer.node_cost = {in_cost, {0, 0}, {0, 0}, out_cost};
    outer.add_edge(0, 1, uniform_adapt(2, 1));
    outer.add_edge(1, 2, m);
    outer.add_edge(2, 3, uniform_adapt(2, 1));
    const Solution a = solve(flat), b = solve(outer);
    REQUIRE(same_total(a.total, b.total));
    REQUIRE(a.total == brute_force(flat));
    REQUIRE(a.schema[1] == b.schema[1]);
    REQUIRE(a.schema[3] == b.schema[2]);
  }
  SECTION("as one node when the layer keeps its schema") {
    CostGraph outer;
    outer.num_schemas = 2;
    outer.node_cost = {{1, 3}, {m[0], m[3]}, {2, 1}};
    outer.add_edge(0, 1, uniform_adapt(2, 1));
    outer.add_edge(1, 2, uniform_adapt(2, 1));
    // alpha alpha beta: 1 + 4 + 1 + 1 = 7.
    REQUIRE(solve(outer).total == 7);
  }
  SECTION("masks of the inner net are kept") {
    CostGraph pinned = inner;
    pinned.pin(0, 0);
    const std::vector<double> p = fold_childnet(pinned, 0, 2);
    REQUIRE(p == std::vector<double>{4, 4.5, inf, inf});
  }
  SECTION("entry == exit gives only the diagonal") {
    const std::vector<double> d = fold_childnet(inner, 1, 1);
    // wgconv = a: best of its neighbours given a. a=0: 1+3+1 = 5; a=1: 1+1+1+0.5+0.5 = 4.
    REQUIRE(d == std::vector<double>{5, inf, inf, 4});
  }
  SECTION("fold equals brute force over constrained assignments") {
    Rng rng(11u);
    for (int iter = 0; iter < 50; ++iter) {
      const int S = rng.integer(2, 3);
      CostGraph g = random_series_parallel(rng, S, rng.integer(2, 7));
      const int entry = 0, exit = g.num_nodes() - 1;
      const std::vector<double> f = fold_childnet(g, entry, exit);
      for (int a = 0; a < S; ++a)
        for (int b = 0; b < S; ++b) {
          CostGraph c = g;
          c.pin(entry, a);
          c.pin(exit, b);
          REQUIRE(same_total(f[static_cast<std::size_t>(a * S + b)], brute_force(c)));
        }
    }
  }
}

TEST_CASE("dense graph: exact within the limit, heuristic beyond it", "[dprs][fallback]") {
  Rng rng(5u);
  const int S = 3, N = 9;
  CostGraph g;
  g.num_schemas = S;
  for (int v = 0; v < N; ++v) {
    g.add_node({rng.uniform(0, 10), rng.uniform(0, 10), rng.uniform(0, 10)});
    for (int u = 0; u < v; ++u) g.add_edge(u, v, random_adapt(rng, S));  // every pair: frontier of 8
  }
  const double best = brute_force(g);
  const Solution full = solve(g);
  REQUIRE(full.exact);
  REQUIRE(full.max_open_constraints == static_cast<std::size_t>(N - 1));
  REQUIRE(same_total(full.total, best));

  Options tiny;
  tiny.max_table_entries = 27;  // S^(k+1) <= 27 allows only 2 open layers
  const Solution heur = solve(g, tiny);
  REQUIRE(!heur.exact);
  check_consistent(g, heur);
  REQUIRE(heur.feasible);
  REQUIRE(heur.total >= best - 1e-9 * best);

  Options budget;
  budget.max_total_entries = 1000;  // the total-work bound triggers the fallback too
  REQUIRE(!solve(g, budget).exact);

  SECTION("large dense graph falls back quickly") {
    CostGraph big;
    big.num_schemas = 4;
    for (int v = 0; v < 40; ++v) {
      add_random_node(big, rng);
      for (int u = 0; u < v; ++u) big.add_edge(u, v, uniform_adapt(4, rng.uniform(0, 2)));
    }
    for (auto& row : big.node_cost)
      for (auto& c : row)
        if (c == inf) c = 20;
    const auto start = std::chrono::steady_clock::now();
    const Solution sol = solve(big);
    REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
    REQUIRE(!sol.exact);
    REQUIRE(sol.feasible);
    check_consistent(big, sol);
    // No single-layer change improves the result (iterated conditional modes).
    for (int n = 0; n < big.num_nodes(); ++n)
      for (int s = 0; s < 4; ++s) {
        std::vector<int> other = sol.schema;
        other[static_cast<std::size_t>(n)] = s;
        REQUIRE(direct_total(big, other) >= sol.total - 1e-9 * sol.total);
      }
  }
}

TEST_CASE("exact where each layer can take a few of many schemas", "[dprs][domains]") {
  // Every pair of layers joined: a frontier of N - 1, so S^N entries per step
  // in the last ones, far over the table limit with 10 schemas. The DP runs
  // over the schemas each layer can take, so it stays exact.
  Rng rng(11u);
  const int S = 10, N = 11;
  SECTION("a few schemas allowed per layer") {
    for (int iter = 0; iter < 5; ++iter) {
      CostGraph g;
      g.num_schemas = S;
      for (int v = 0; v < N; ++v) {
        add_random_node(g, rng);
        std::vector<char> mask(static_cast<std::size_t>(S), 0);
        for (int k = rng.integer(1, 3); k > 0; --k) mask[static_cast<std::size_t>(rng.integer(0, S - 1))] = 1;
        g.restrict_node(v, mask);
        for (int u = 0; u < v; ++u)
          if (rng.chance(0.7)) g.add_edge(u, v, random_adapt(rng, S));
      }
      INFO("iteration " << iter);
      const Solution sol = solve(g);
      REQUIRE(sol.exact);
      REQUIRE(same_total(sol.total, brute_force(g)));
      check_consistent(g, sol);
    }
  }
  SECTION("schemas that are never worth it are pruned") {
    // Schemas 3..9 cost 1000 more at every layer; a layer's adapts change by
    // at most 10 x 10 when its schema changes, so an optimum uses only 0..2
    // and the oracle may search those.
    for (int iter = 0; iter < 3; ++iter) {
      CostGraph g;
      g.num_schemas = S;
      for (int v = 0; v < N; ++v) {
        std::vector<double> c(static_cast<std::size_t>(S));
        for (int s = 0; s < S; ++s) c[static_cast<std::size_t>(s)] = rng.uniform(0, 10) + (s >= 3 ? 1000 : 0);
        g.add_node(std::move(c));
        for (int u = 0; u < v; ++u) {
          std::vector<double> m(static_cast<std::size_t>(S * S));
          for (auto& x : m) x = rng.uniform(0, 10);
          g.add_edge(u, v, std::move(m));
        }
      }
      CostGraph few = g;
      for (int v = 0; v < N; ++v) {
        std::vector<char> mask(static_cast<std::size_t>(S), 0);
        mask[0] = mask[1] = mask[2] = 1;
        few.restrict_node(v, mask);
      }
      INFO("iteration " << iter);
      const Solution sol = solve(g);
      REQUIRE(sol.exact);
      REQUIRE(same_total(sol.total, brute_force(few)));
      check_consistent(g, sol);
    }
  }
}

TEST_CASE("malformed graphs are rejected", "[dprs][validate]") {
  CostGraph g;
  g.num_schemas = 2;
  g.node_cost = {{1, 2}, {1, 2}, {1, 2}};
  g.add_edge(0, 1, uniform_adapt(2, 1));
  REQUIRE_NOTHROW(solve(g));
  using Catch::Contains;
  SECTION("edge going backwards") {
    g.add_edge(2, 1, uniform_adapt(2, 1));
    REQUIRE_THROWS_WITH(solve(g), Contains("topological order"));
  }
  SECTION("self loop") {
    g.add_edge(1, 1, uniform_adapt(2, 1));
    REQUIRE_THROWS_WITH(solve(g), Contains("self loop"));
  }
  SECTION("node index out of range") {
    g.add_edge(1, 3, uniform_adapt(2, 1));
    REQUIRE_THROWS_WITH(solve(g), Contains("out of range"));
  }
  SECTION("wrong adapt size") {
    g.add_edge(1, 2, {0, 1, 1});
    REQUIRE_THROWS_WITH(solve(g), Contains("adapt costs"));
  }
  SECTION("wrong cost size") {
    g.node_cost[2] = {1, 2, 3};
    REQUIRE_THROWS_WITH(solve(g), Contains("node 2 has 3 costs"));
  }
  SECTION("NaN and -infinity") {
    g.node_cost[1][0] = std::nan("");
    REQUIRE_THROWS_WITH(solve(g), Contains("NaN"));
    g.node_cost[1][0] = -inf;
    REQUIRE_THROWS_WITH(solve(g), Contains("-infinity"));
  }
  SECTION("no schemas") {
    g.num_schemas = 0;
    REQUIRE_THROWS_AS(solve(g), std::invalid_argument);
  }
  SECTION("mask shape") {
    g.allowed = {{1, 1}};
    REQUIRE_THROWS_WITH(solve(g), Contains("allowed mask"));
  }
  SECTION("bad pin, bad fold ends, bad assignment") {
    REQUIRE_THROWS_AS(g.pin(0, 2), std::invalid_argument);
    REQUIRE_THROWS_AS(g.pin(5, 0), std::invalid_argument);
    REQUIRE_THROWS_AS(fold_childnet(g, 0, 3), std::invalid_argument);
    REQUIRE_THROWS_AS(evaluate(g, {0, 1}), std::invalid_argument);
    REQUIRE_THROWS_AS(evaluate(g, {0, 1, 2}), std::invalid_argument);
  }
}

TEST_CASE("evaluate sums layer and adapt costs", "[dprs]") {
  CostGraph g;
  g.num_schemas = 2;
  g.node_cost = {{1, 2}, {4, 8}};
  g.add_edge(0, 1, {0, 16, 32, 0});
  g.add_edge(0, 1, {0, 64, 128, 0});  // parallel edge, e.g. add(x, x)
  REQUIRE(evaluate(g, {0, 0}) == 5);
  REQUIRE(evaluate(g, {0, 1}) == 1 + 8 + 16 + 64);
  REQUIRE(evaluate(g, {1, 0}) == 2 + 4 + 32 + 128);
  g.pin(0, 0);
  REQUIRE(evaluate(g, {1, 1}) == inf);
}

// ------------------------------------------------------------ accuracy budget

// A random graph whose float32 schema (0) always has a path, with no adapt
// within a schema, and each node's estimated error in the reduced ones.
struct BudgetCase {
  CostGraph g;
  std::vector<std::vector<double>> err;
};
BudgetCase random_budget_case(Rng& rng, int iter) {
  BudgetCase c;
  const int S = rng.integer(2, 3);
  const int N = rng.integer(1, max_nodes(S) - 2);
  c.g = iter % 2 == 0 ? random_dag(rng, S, N) : random_series_parallel(rng, S, N);
  for (auto& row : c.g.node_cost) row[0] = rng.uniform(1, 10);
  for (auto& e : c.g.edges)
    for (int a = 0; a < S; ++a) e.adapt[static_cast<std::size_t>(a * S + a)] = 0;
  c.err.assign(static_cast<std::size_t>(c.g.num_nodes()), std::vector<double>(static_cast<std::size_t>(S), 0));
  for (auto& row : c.err)
    for (int s = 1; s < S; ++s) row[static_cast<std::size_t>(s)] = rng.chance(0.2) ? 0 : rng.uniform(0, 1);
  return c;
}

// The Lagrangian search of the accuracy budget against brute force: schema 0
// is error-free (float32), the others carry a random per-node error (a
// layer's sensitivity), a path passes when its summed error is within the
// budget. Every passing path is a candidate for brute force.
TEST_CASE("the budget search against brute force on random graphs with error costs", "[dprs][random][budget]") {
  Rng rng(20261123u);
  int checked = 0, optimal = 0, unconstrained_passed = 0, all_calls = 0;
  for (int iter = 0; iter < 600; ++iter) {
    auto [g, err] = random_budget_case(rng, iter);
    const int S = g.num_schemas;
    const double budget = rng.uniform(0, 1.5);
    auto error_of = [&](const std::vector<int>& a) {
      double e = 0;
      for (std::size_t n = 0; n < a.size(); ++n) e += err[n][static_cast<std::size_t>(a[n])];
      return e;
    };
    INFO("iteration " << iter << ", S = " << S << ", N = " << g.num_nodes() << ", budget " << budget);
    // Brute force: the fastest path within the budget, and the fastest of all.
    double best_within = inf, best_any = inf;
    std::vector<int> a(static_cast<std::size_t>(g.num_nodes()), 0), any_path;
    while (true) {
      const double t = evaluate(g, a);
      if (t < best_any) best_any = t, any_path = a;
      if (t < inf && error_of(a) <= budget + 1e-12) best_within = std::min(best_within, t);
      int k = 0;
      while (k < g.num_nodes() && ++a[static_cast<std::size_t>(k)] == S) a[static_cast<std::size_t>(k++)] = 0;
      if (k == g.num_nodes()) break;
    }
    REQUIRE(best_within < inf);  // the error-free path
    int calls = 0;
    const Solution sol = solve_under_budget(g, err, [&](const Solution& s) {
      ++calls;
      return error_of(s.schema) <= budget + 1e-12;
    }, {.max_checks = 64});
    REQUIRE(sol.feasible);
    CHECK(error_of(sol.schema) <= budget + 1e-12);
    CHECK(same_total(sol.total, evaluate(g, sol.schema)));
    CHECK(sol.total >= best_within - 1e-9);
    CHECK(calls <= 64);
    all_calls += calls;
    // Where the fastest path of all is within the budget, it is the answer.
    if (error_of(any_path) <= budget + 1e-12 || same_total(best_any, best_within)) {
      ++unconstrained_passed;
      CHECK(same_total(sol.total, best_within));
    }
    optimal += same_total(sol.total, best_within);
    ++checked;
  }
  std::printf("budget search: %d random graphs, the constrained optimum found in %d (%d where the fastest path passed), "
              "%d checks in all\n", checked, optimal, unconstrained_passed, all_calls);
  // A convex-hull method: a passing path above the hull of (error, time) is
  // out of its reach (472 of 600 optimal when written), never worse than float32.
  CHECK(optimal >= checked * 3 / 4);
}

// A path known from another search bounds this one: nothing as slow is ever
// validated, and what the search would have found faster than it, it finds.
TEST_CASE("the budget search validates only paths faster than a known one", "[dprs][random][budget]") {
  Rng rng(20261202u);
  int bounded_skipped = 0;
  for (int iter = 0; iter < 300; ++iter) {
    auto [g, err] = random_budget_case(rng, iter);
    const double budget = rng.uniform(0, 1.5);
    auto meets = [&](const Solution& s) {
      double e = 0;
      for (std::size_t n = 0; n < s.schema.size(); ++n) e += err[n][static_cast<std::size_t>(s.schema[n])];
      return e <= budget + 1e-12;
    };
    int free_calls = 0;
    const Solution free = solve_under_budget(g, err, [&](const Solution& s) { return ++free_calls, meets(s); }, {.max_checks = 64});
    REQUIRE(free.feasible);
    const double known = free.total * rng.uniform(0.8, 1.3);
    INFO("iteration " << iter << ", unbounded " << free.total << ", known " << known);
    int calls = 0;
    const Solution bounded = solve_under_budget(g, err, [&](const Solution& s) {
      ++calls;
      CHECK(s.total < known);
      return meets(s);
    }, {.max_checks = 64, .faster_than = known});
    bounded_skipped += calls < free_calls;
    if (bounded.feasible) {
      CHECK(meets(bounded));
      CHECK(bounded.total < known);
    }
    if (free.total < known) {
      REQUIRE(bounded.feasible);
      CHECK(bounded.total <= free.total + 1e-9);
    }
    // At a resolution of 5%: a passing path at most that much slower than the answer.
    const Solution coarse = solve_under_budget(g, err, meets, {.max_checks = 64, .resolution = 0.05});
    REQUIRE(coarse.feasible);
    CHECK(meets(coarse));
    CHECK(coarse.total * 0.95 <= free.total + 1e-9);
  }
  CHECK(bounded_skipped > 0);
}

TEST_CASE("the budget search returns nothing when no path passes", "[dprs][budget]") {
  CostGraph g;
  g.num_schemas = 2;
  g.add_node({5, 1});
  g.add_node({5, 4});
  g.add_edge(0, 1, {0, 0, 0, 0});
  std::vector<std::vector<double>> err{{0, 0.5}, {0, 0.5}};
  int calls = 0;
  const Solution none = solve_under_budget(g, err, [&](const Solution&) { return ++calls, false; });
  CHECK_FALSE(none.feasible);
  CHECK(calls >= 2);  // the fastest path, then the error-free one
  const Solution one = solve_under_budget(g, err, [&](const Solution& s) { return s.schema[0] + s.schema[1] <= 1; });
  REQUIRE(one.feasible);
  REQUIRE(one.feasible);
  CHECK(one.schema == std::vector<int>{1, 0});  // (error, time): (1, 5) fails, (0.5, 6) passes, (0, 10)
  CHECK(one.total == 6);
  CHECK_THROWS_AS(solve_under_budget(g, {{0, 1}}, [](const Solution&) { return true; }), std::invalid_argument);
}

TEST_CASE("a dominated node's options never make an assignment cheaper than an alternative", "[dprs][random][dominated]") {
  Rng rng(20261203u);
  int proven = 0, refused = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const int S = rng.integer(2, 4);
    const int N = rng.integer(1, std::min(6, max_nodes(S)));
    CostGraph g = iter % 2 == 0 ? random_dag(rng, S, N) : random_series_parallel(rng, S, N);
    maybe_restrict(g, rng);
    const int node = rng.integer(0, g.num_nodes() - 1);
    std::vector<int> options, alternatives;
    for (int s = 0; s < S; ++s) (rng.chance(0.5) ? options : alternatives).push_back(s);
    // Often far slower options: the case the tuner prunes.
    if (rng.chance(0.6))
      for (int o : options) g.node_cost[static_cast<std::size_t>(node)][static_cast<std::size_t>(o)] += rng.uniform(5, 40);
    INFO("iteration " << iter << ", S = " << S << ", node " << node);
    if (!dominated(g, node, options, alternatives)) {
      ++refused;
      continue;
    }
    ++proven;
    // Every assignment giving the node an option costs no less than the same
    // assignment with some alternative there.
    std::vector<int> a(static_cast<std::size_t>(g.num_nodes()), 0);
    while (true) {
      const int mine = a[static_cast<std::size_t>(node)];
      const double total = direct_total(g, a);
      if (std::find(options.begin(), options.end(), mine) != options.end() && total < inf) {
        double best = inf;
        for (int alt : alternatives) {
          a[static_cast<std::size_t>(node)] = alt;
          best = std::min(best, direct_total(g, a));
        }
        a[static_cast<std::size_t>(node)] = mine;
        REQUIRE(best <= total + 1e-9);
      }
      int j = 0;
      for (; j < g.num_nodes(); ++j) {
        if (++a[static_cast<std::size_t>(j)] < S) break;
        a[static_cast<std::size_t>(j)] = 0;
      }
      if (j == g.num_nodes()) break;
    }
  }
  CHECK(proven > 200);
  CHECK(refused > 200);
}

TEST_CASE("dominance: an option beside a cheap adapt only it avoids is kept", "[dprs][dominated]") {
  // Node 1 between nodes 0 and 2, which take schema 1 only. Schema 1 at node 1
  // costs 3 more than schema 0, but schema 0 pays an adapt of 2 on each side.
  CostGraph g;
  g.num_schemas = 2;
  g.add_node({inf, 1});
  g.add_node({1, 4});
  g.add_node({inf, 1});
  g.add_edge(0, 1, {0, inf, 2, 0});
  g.add_edge(1, 2, {0, 2, inf, 0});
  CHECK_FALSE(dominated(g, 1, {1}, {0}));  // 1 + 2 + 2 > 4: schema 1 may pay
  g.node_cost[1][1] = 6;
  CHECK(dominated(g, 1, {1}, {0}));        // 1 + 2 + 2 <= 6
  CHECK_FALSE(dominated(g, 1, {1}, {}));   // no alternative
  g.node_cost[1][1] = inf;
  CHECK(dominated(g, 1, {1}, {0}));        // no option left to keep
  CHECK_THROWS_AS(dominated(g, 3, {1}, {0}), std::invalid_argument);
}
