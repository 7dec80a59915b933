// DPRS: dynamic programming for routine selection (SoftNeuro, section IV,
// Algorithm 1).
//
// The solver is pure: it sees a cost graph, never a routine or a blob.
//   - node  = a layer; node_cost[n][s] is the time of the fastest routine of
//             layer n with schema s (F_n(s) in the paper), +infinity when the
//             layer has no routine for that schema;
//   - edge  = a blob from producer to consumer; adapt[su*S + sv] is the time
//             of the adapt routine converting that blob from the producer's
//             schema su to the consumer's schema sv (+infinity: impossible).
// It picks one schema per layer minimising
//   sum_n node_cost[n][schema[n]] + sum_e adapt_e[schema[from] * S + schema[to]],
// i.e. the optimal routine path (Definition 2). A branching layer has one
// schema seen by all its consumers; merges (add, concat) have several
// in-edges. Several net inputs and outputs are allowed (see solve()).
//
// Includes only the C++ standard library, by design (DESIGN.md: src/dprs
// depends on nothing else in the project).
#pragma once

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <vector>

namespace softneuro::dprs {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

/// The optimisation problem. Nodes must be given in a topological order:
/// every edge goes from a lower to a higher index.
struct CostGraph {
  struct Edge {
    int from = 0;
    int to = 0;
    /// S*S row-major: adapt[from_schema * S + to_schema]. The diagonal is
    /// usually 0 (no adapt needed) but may hold anything.
    std::vector<double> adapt;
  };

  int num_schemas = 0;                          ///< S, the same for every node.
  std::vector<std::vector<double>> node_cost;   ///< N rows of S costs.
  std::vector<Edge> edges;                      ///< parallel edges are allowed.
  /// Optional allowed-schema mask: empty (everything allowed) or N rows of S
  /// flags; a 0 flag forbids that schema for that node whatever its cost.
  /// Used to pin layers (the tuner) and to fold childnets.
  std::vector<std::vector<char>> allowed;

  int num_nodes() const { return static_cast<int>(node_cost.size()); }

  /// Appends a node, returns its index.
  int add_node(std::vector<double> cost);
  /// Appends an edge (adapt is S*S row-major).
  void add_edge(int from, int to, std::vector<double> adapt);
  /// Restricts `node` to the schemas whose flag in `mask` (S flags) is set,
  /// on top of any restriction already there. Creates the mask if needed.
  void restrict_node(int node, const std::vector<char>& mask);
  /// Restricts `node` to exactly `schema` (on top of any earlier restriction).
  void pin(int node, int schema);
  /// True when `schema` is allowed for `node` by the mask.
  bool is_allowed(int node, int schema) const;
};

struct Options {
  /// Largest number of DP table entries one step may enumerate: the product
  /// of the domain sizes of the k open layers and the layer's own (at most
  /// S^(k+1)). Beyond it the solver falls back to the
  /// heuristic and reports exact = false.
  std::size_t max_table_entries = std::size_t{1} << 22;
  /// Bound on the sum over all steps of the entries enumerated (which is
  /// also a bound on the memory kept for back-pointers). Beyond it: fallback.
  std::size_t max_total_entries = std::size_t{1} << 26;
  /// Number of partial assignments the fallback beam search keeps per step
  /// (further capped to max_table_entries / S so that the fallback does no
  /// more work per step than the exact solver was allowed to).
  std::size_t beam_width = std::size_t{1} << 12;
};

struct Solution {
  /// A finite-cost assignment was found. With exact == true and
  /// feasible == false, none exists.
  bool feasible = false;
  /// The result is proven optimal (exact DP). false: fallback heuristic.
  bool exact = true;
  /// Total cost of `schema` (+infinity when infeasible).
  double total = kInfinity;
  /// One schema per node (filled even when infeasible, then meaningless).
  std::vector<int> schema;
  /// Frontier width k: the largest number of layers whose schema was still
  /// needed by an unprocessed consumer when a layer was processed (the
  /// paper's open constraints plus the chain predecessor).
  std::size_t max_open_constraints = 0;
};

/// Throws std::invalid_argument naming the first problem: sizes, NaN or
/// -infinity costs, node indices, self loops, edges that go backwards (nodes
/// not in topological order), mask shape.
void validate(const CostGraph& graph);

/// Optimal routine path of `graph` (exact DP when the frontier fits the
/// limits of `options`, else the stated heuristic with exact = false).
/// Throws std::invalid_argument on a malformed graph.
Solution solve(const CostGraph& graph, const Options& options = {});

/// Childnet folding ("childnets solved innermost-first"): for every pair
/// (a, b) the best total of `inner` with node `entry` fixed to schema a and
/// node `exit` fixed to schema b; returns S*S row-major [a * S + b],
/// +infinity where no finite assignment exists. When entry == exit only the
/// diagonal can be finite. `exact` (optional) receives false if any of the
/// inner solves used the fallback heuristic.
///
/// To use it in the outer graph: when the childnet's input and output share
/// the outer layer's schema, the outer node cost is cost[s] = M[s * S + s];
/// when it may change schema between input and output, represent the layer
/// by two zero-cost nodes (entry, exit) joined by an edge whose adapt matrix
/// is M, so that outer in-edges see the entry schema and out-edges the exit
/// schema.
std::vector<double> fold_childnet(const CostGraph& inner, int entry, int exit,
                                  const Options& options = {}, bool* exact = nullptr);

/// The paths on the lower convex hull of (error, time): each optimal for
/// node_cost + lambda * node_error at some lambda >= 0 (N rows of S errors,
/// finite, >= 0), from lambda = 0 (the fastest path) to the least error;
/// sorted by time, so by decreasing error. Found exactly (each vertex from
/// its neighbours' intersection), at most `max_solves` DPRS solves.
std::vector<Solution> error_time_hull(const CostGraph& graph, const std::vector<std::vector<double>>& node_error,
                                      const Options& options = {}, int max_solves = 400);

/// How solve_under_budget searches.
struct BudgetSearch {
  int max_checks = 12;                ///< calls of `meets` at most
  double faster_than = kInfinity;     ///< a passing path known elsewhere (another search's): slower ones are never checked
  /// Paths less than this fraction faster than one that passed (or than
  /// faster_than) are not checked (0: the hull's every path; the tuner's
  /// times are no finer).
  double resolution = 0;
};

/// The fastest path that passes `meets` (the tuner: its accuracy measured on
/// validation samples): node_error estimates what each layer costs in
/// accuracy in each schema; the hull's paths (error_time_hull) are checked
/// fastest first, then by bisection over them (more error, less time: a path
/// passing means every slower one would). Returns the fastest that passed, or
/// an infeasible Solution when none did (e.g. even the least-error path
/// failed). Not always the constrained optimum (a passing path above the hull
/// is out of reach); exact for additive errors where the budget falls on a
/// hull vertex.
template <class Meets>
Solution solve_under_budget(const CostGraph& graph, const std::vector<std::vector<double>>& node_error,
                            Meets&& meets, const BudgetSearch& search = {}, const Options& options = {});
/// Total cost of an assignment (+infinity if any term is infinite or a
/// schema is not allowed by the mask). Throws std::invalid_argument on a
/// malformed graph or assignment.
double evaluate(const CostGraph& graph, const std::vector<int>& schema);

/// Whether `node` taking a schema of `options` can never make an assignment
/// cheaper than taking one of `alternatives`, whatever schemas the other nodes
/// take: some alternative a has, against every option o, its own cost plus
/// on each edge of the node the most a could lose to o there (over the
/// neighbour's allowed schemas) no higher than o's cost. Then every option
/// can be dropped: replacing it by a never costs more. (The tuner measures no
/// accuracy of a layer's reduced-precision schemas where float32 dominates
/// them.) Options or alternatives the mask forbids or that cost +infinity do
/// not count; with no option left it is true, with no alternative false.
bool dominated(const CostGraph& graph, int node, const std::vector<int>& options, const std::vector<int>& alternatives);

// ------------------------------------------------------------ implementation

template <class Meets>
Solution solve_under_budget(const CostGraph& graph, const std::vector<std::vector<double>>& node_error,
                            Meets&& meets, const BudgetSearch& search, const Options& options) {
  std::vector<Solution> hull = error_time_hull(graph, node_error, options);
  std::size_t n = 0;  // the hull's paths faster than search.faster_than by the resolution: a prefix
  while (n < hull.size() && hull[n].total < search.faster_than * (1 - search.resolution)) ++n;
  if (n == 0 || search.max_checks <= 0) return Solution{};
  int checks = 0;
  auto passes = [&](std::size_t i) { return ++checks, static_cast<bool>(meets(static_cast<const Solution&>(hull[i]))); };
  if (passes(0)) return hull[0];
  // lo failed; hi passed (hi == n: none yet); the answer is in (lo, hi].
  std::size_t lo = 0, hi = n;
  while (hi - lo > 1 && checks < search.max_checks &&
         !(hi < n && hull[lo + 1].total >= hull[hi].total * (1 - search.resolution))) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (passes(mid) ? hi : lo) = mid;
  }
  return hi < n ? hull[hi] : Solution{};
}

}  // namespace softneuro::dprs
