// "<target schema>/chain": converts a (from, to) schema pair that no single
// adapt routine converts (e.g. cpu:float32:nchw8c -> cpu:qint8:nhwc) by
// composing registered single-step adapts: the shortest chains found by
// breadth-first search over the schemas the registered adapts produce, ordered
// by the size of their intermediate blobs; routine parameter "via" picks one,
// so the tuner measures each and keeps the cheapest.
// Each step is prepared once; intermediate blobs live in the workspace, so a
// run allocates nothing. Only CPU chains are composed (an intermediate blob
// lives in the CPU workspace). A pair some single adapt converts is left to
// it (this routine says no), so the executor and the tuner never see two
// routines for one conversion.
#include "core/registry.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace softneuro {
namespace {

constexpr int kMaxSteps = 4;

const std::vector<Schema>& chain_targets() {
  static const std::vector<Schema> targets = [] {
    std::vector<Schema> t;
    for (DType d : {DType::float32, DType::qint8, DType::float16, DType::bfloat16})
      for (Layout l : {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c}) t.push_back(Schema{Device::cpu, d, l});
    // A net's typed outputs (src/adapt/io_cast.cpp), in plain layout only.
    for (int d = 0; d <= static_cast<int>(kLastDType); ++d)
      if (is_edge_type(static_cast<DType>(d))) t.push_back(Schema{Device::cpu, static_cast<DType>(d), Layout::nchw});
    return t;
  }();
  return targets;
}

/// The registry the plan chooses from (the process's for a LayerInfo made by hand).
const core::RoutineRegistry& registry_of(const LayerInfo& info) {
  return info.routines ? *info.routines : core::RoutineRegistry::instance();
}

/// One registered single-step adapt routine and the schema it produces.
struct Step {
  const Routine* routine = nullptr;
  Schema to;
  std::string descriptor;
};

std::vector<Step> single_step_adapts(const core::RoutineRegistry& reg) {
  std::vector<Step> out;
  for (const auto& d : reg.descriptors("adapt")) {
    Schema s;
    const Routine* r = reg.find("adapt", d, &s);
    if (!r || r->algorithm() == "chain" || s.device != Device::cpu) continue;
    out.push_back({r, s, d});
  }
  return out;
}

/// A synthetic adapt layer converting `from` -> `to` for a blob of the given shape and quantisation.
struct StepLayer {
  Layer layer;
  LayerInfo info;
  StepLayer(const Schema& from, const Schema& to, const LayerInfo& base) {
    layer.name = base.layer->name;
    layer.type = "adapt";
    layer.inputs = base.layer->inputs;
    layer.outputs = base.layer->outputs;
    layer.params["from"] = from.to_string();
    layer.params["to"] = to.to_string();
    info = base;
    info.layer = &layer;
  }
  StepLayer(const StepLayer&) = delete;
};

bool converts(const Step& s, const Schema& from, const LayerInfo& base) {
  if (s.to == from) return false;
  StepLayer l(from, s.to, base);
  try {
    return s.routine->supports(l.info, s.to).ok;
  } catch (const std::exception&) {
    return false;
  }
}

constexpr std::size_t kMaxChains = 8;
using Chains = std::vector<std::vector<Step>>;

/// Every shortest chain of single-step adapts from -> to (none: empty; a
/// direct conversion: one chain of one step). Which adapts convert depends
/// on the schemas, the blob's rank and quantisation only, so the result
/// serves every shape of that rank (cached by ChainAdapt).
Chains search_chains(const Schema& from, const Schema& to, const LayerInfo& base) {
  const auto steps = single_step_adapts(registry_of(base));
  // Breadth-first over partial chains; a schema is not visited twice within a chain.
  struct Partial {
    std::vector<int> steps;
    Schema at;
  };
  std::vector<Partial> frontier{{{}, from}};
  Chains found;
  std::map<std::pair<std::string, std::size_t>, bool> can;  // (schema, step) -> converts
  auto converts_from = [&](const Schema& at, std::size_t k) {
    auto key = std::make_pair(at.to_string(), k);
    auto it = can.find(key);
    return it != can.end() ? it->second : (can[key] = converts(steps[k], at, base));
  };
  for (int depth = 0; depth < kMaxSteps && found.empty() && !frontier.empty(); ++depth) {
    std::vector<Partial> next;
    std::map<std::string, std::size_t> reaching;  // partial chains kept per schema reached
    for (const auto& p : frontier)
      for (std::size_t k = 0; k < steps.size(); ++k) {
        const Step& s = steps[k];
        if (s.to == from) continue;
        bool revisits = false;
        for (int i : p.steps) revisits = revisits || steps[static_cast<std::size_t>(i)].to == s.to;
        if (revisits || !converts_from(p.at, k)) continue;
        Partial q{p.steps, s.to};
        q.steps.push_back(static_cast<int>(k));
        if (s.to == to) {
          std::vector<Step> chain;
          for (int i : q.steps) chain.push_back(steps[static_cast<std::size_t>(i)]);
          found.push_back(std::move(chain));
        } else if (reaching[s.to.to_string()]++ < kMaxChains) {
          next.push_back(std::move(q));
        }
      }
    frontier = std::move(next);
  }
  return found;
}

/// The chains ordered by the bytes of their intermediate blobs at `shape`, then
/// by their text, so an index ("via") names one chain reproducibly at a shape;
/// at most kMaxChains.
Chains ordered(const Chains& chains, const Shape& shape) {
  std::vector<std::pair<std::size_t, const std::vector<Step>*>> keyed;
  for (const auto& c : chains) {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i + 1 < c.size(); ++i) bytes += storage_bytes(shape, c[i].to.dtype, c[i].to.layout);
    keyed.push_back({bytes, &c});
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    std::string ta, tb;
    for (const auto& s : *a.second) ta += s.descriptor + ' ';
    for (const auto& s : *b.second) tb += s.descriptor + ' ';
    return ta < tb;
  });
  Chains out;
  for (const auto& k : keyed)
    if (out.size() < kMaxChains) out.push_back(*k.second);
  return out;
}

/// The chain `via` names (the first when out of range), or empty.
std::vector<Step> pick_chain(const Chains& chains, int64_t via) {
  if (chains.empty()) return {};
  return chains[static_cast<std::size_t>(via >= 0 && via < static_cast<int64_t>(chains.size()) ? via : 0)];
}

class Chain final : public PreparedRoutine {
 public:
  struct Part {
    std::unique_ptr<StepLayer> layer;
    std::unique_ptr<PreparedRoutine> prepared;
    Blob out;  // intermediate (unused for the last step)
    std::size_t offset = 0;  // of `out` in the workspace
    const Blob* in_ptr[1] = {nullptr};
    Blob* out_ptr[1] = {nullptr};
  };
  std::vector<Part> parts;
  std::size_t scratch_offset = 0, bytes = 0;

  std::size_t workspace_bytes() const override { return bytes; }
  void run(const RunArgs& a) override {
    char* ws = static_cast<char*>(a.workspace);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Part& p = parts[i];
      p.in_ptr[0] = i == 0 ? a.inputs[0] : &parts[i - 1].out;
      if (i + 1 == parts.size()) {
        p.out_ptr[0] = a.outputs[0];
      } else {
        p.out.rebind(ws + p.offset);
        p.out_ptr[0] = &p.out;
      }
      RunArgs step{p.in_ptr, p.out_ptr, ws ? ws + scratch_offset : nullptr, a.pool};
      p.prepared->run(step);
    }
  }
};

std::string chain_text(const std::vector<Step>& chain) {
  std::string s;
  for (const auto& c : chain) s += (s.empty() ? "" : " -> ") + c.descriptor;
  return s;
}

class ChainAdapt final : public Routine {
 public:
  std::string_view layer_type() const override { return "adapt"; }
  std::string_view algorithm() const override { return "chain"; }
  std::vector<Schema> schemas() const override { return chain_targets(); }

  Support supports(const LayerInfo& info, const Schema& to) const override {
    const Schema from = Schema::parse(info.layer->get_string("from"));
    if (from == to) return Support::no("nothing to convert");
    if (from.device != Device::cpu) return Support::no("composes CPU adapts only");
    const auto chains = chains_of(info, from, to);
    if (chains->empty())
      return Support::no(fmt::format("no chain of at most {} adapts converts {} to {}", kMaxSteps, from.to_string(), to.to_string()));
    if (chains->front().size() == 1)
      return Support::no(fmt::format("a single adapt converts this pair ({})", chains->front()[0].descriptor));
    return Support::yes();
  }

  /// Several shortest chains (e.g. quantise then reorder, or reorder then
  /// quantise): the tuner measures each and keeps the cheapest.
  std::vector<RoutineParamSpec> param_space(const LayerInfo& info, const Schema& to) const override {
    const auto n = static_cast<int64_t>(
        std::min(kMaxChains, chains_of(info, Schema::parse(info.layer->get_string("from")), to)->size()));
    if (n < 2) return {};
    RoutineParamSpec via{"via", {}};
    for (int64_t i = 0; i < n; ++i) via.choices.push_back(i);
    return {via};
  }

  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& to, const RoutineParams& params) const override {
    const Schema from = Schema::parse(info.layer->get_string("from"));
    auto chain = pick_chain(ordered(*chains_of(info, from, to), info.input_shapes.at(0)), routine_param(params, "via", 0));
    if (chain.size() < 2)
      throw Error(fmt::format("no chain of adapts converts {} to {}", from.to_string(), to.to_string()));
    auto prepared = std::make_unique<Chain>();
    const Shape& shape = info.input_shapes.at(0);
    const QuantParams quant = !info.input_quant.empty() ? info.input_quant[0] : QuantParams{};
    Schema cur = from;
    std::size_t offset = 0, scratch = 0;
    for (std::size_t i = 0; i < chain.size(); ++i) {
      Chain::Part p;
      p.layer = std::make_unique<StepLayer>(cur, chain[i].to, info);
      p.prepared = chain[i].routine->prepare(p.layer->info, chain[i].to, {});
      if (p.prepared->workspace_device() != Device::cpu)
        throw Error(fmt::format("chain step {} wants device workspace", chain[i].descriptor));
      scratch = std::max(scratch, p.prepared->workspace_bytes());
      if (i + 1 < chain.size()) {
        p.out = Blob::view(nullptr, shape, chain[i].to.dtype, chain[i].to.layout);
        p.out.quant() = quant;
        p.offset = offset;
        offset += (storage_bytes(shape, chain[i].to.dtype, chain[i].to.layout) + 63) / 64 * 64;
      }
      cur = chain[i].to;
      prepared->parts.push_back(std::move(p));
    }
    prepared->scratch_offset = offset;
    prepared->bytes = offset + scratch;
    return prepared;
  }

  /// For messages and tests: the steps this routine would take.
  static std::string describe(const LayerInfo& info, const Schema& to, int64_t via = 0) {
    const Chains all = search_chains(Schema::parse(info.layer->get_string("from")), to, info);
    return chain_text(pick_chain(ordered(all, info.input_shapes.at(0)), via));
  }

 private:
  /// What a single adapt's supports() reads: the schemas, the blob's rank (not
  /// its dims: blocked layouts need a channel dim) and its quantisation. So one
  /// search serves a conversion at every shape (session creation of models of
  /// new shapes searched again: most of a .dnn fuzz input's time).
  static std::string cache_key(const LayerInfo& info, const Schema& from, const Schema& to) {
    std::string q = "-";
    if (!info.input_quant.empty()) {
      const QuantParams& p = info.input_quant[0];
      q = fmt::format("{}:{}:{}", p.axis, fmt::join(p.scales, ","), fmt::join(p.zero_points, ","));
    }
    return fmt::format("{}>{}|r{}|q{}|g{}", from.to_string(), to.to_string(), info.input_shapes.at(0).rank(), q,
                       registry_of(info).generation());
  }
  /// The shortest chains for this conversion (unordered), searched once per cache key
  /// (supports, param_space and prepare each searched again: a fifth of
  /// session creation for small models).
  std::shared_ptr<const Chains> chains_of(const LayerInfo& info, const Schema& from, const Schema& to) const {
    const std::string key = cache_key(info, from, to);
    {
      std::lock_guard lock(mutex_);
      if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    }
    // Not under our lock: the search calls other routines' supports().
    auto chains = std::make_shared<const Chains>(search_chains(from, to, info));
    std::lock_guard lock(mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();  // bounded over any number of quantisations
    cache_[key] = chains;
    return chains;
  }
  static constexpr std::size_t kCacheEntries = 4096;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const Chains>> cache_;
};

SOFTNEURO_REGISTER_ROUTINE(ChainAdapt);

}  // namespace
}  // namespace softneuro
