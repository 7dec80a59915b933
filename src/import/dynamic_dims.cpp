#include "import/dynamic_dims.hpp"

#include "core/graph.hpp"
#include "core/layer_types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace softneuro::onnx_import {

int64_t SymbolicDim::size_at(const std::map<std::string, int64_t>& sizes) const {
  int64_t n = offset;
  for (const auto& [name, k] : terms)
    if (auto it = sizes.find(name); it != sizes.end()) n += k * it->second;
  return n;
}

SymbolicDim parse_dim_param(const std::string& text, const std::string& fallback) {
  SymbolicDim d;
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  // No name, or one that names no size ("?", "-1", "None": some exporters'
  // spelling of unknown): a size of its own.
  if (t.empty() || t == "?" || t == "-1" || t == "None") {
    d.terms[fallback] = 1;
    return d;
  }
  auto is_name = [](const std::string& w) {
    if (w.empty() || std::isdigit(static_cast<unsigned char>(w[0]))) return false;
    for (char c : w)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
    return true;
  };
  auto is_number = [](const std::string& w) {
    return !w.empty() && w.size() < 10 && std::all_of(w.begin(), w.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  // Terms separated by + and -, each a number, a name, or number*name.
  bool parsed = true;
  std::size_t at = 0;
  while (parsed && at < t.size()) {
    int64_t sign = 1;
    if (t[at] == '+' || t[at] == '-') {
      sign = t[at] == '-' ? -1 : 1;
      ++at;
    } else if (at != 0) {
      parsed = false;
      break;
    }
    const std::size_t end = t.find_first_of("+-", at);
    const std::string term = t.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? t.size() : end;
    const std::size_t star = term.find('*');
    if (is_number(term)) {
      d.offset += sign * std::stoll(term);
    } else if (is_name(term)) {
      d.terms[term] += sign;
    } else if (star != std::string::npos && is_number(term.substr(0, star)) && is_name(term.substr(star + 1))) {
      d.terms[term.substr(star + 1)] += sign * std::stoll(term.substr(0, star));
    } else {
      parsed = false;
    }
  }
  for (const auto& [name, k] : d.terms) parsed = parsed && k != 0;
  if (!parsed || d.terms.empty()) {  // an expression this does not read: one name
    d = SymbolicDim{};
    d.terms[t] = 1;
  }
  return d;
}

void SizeSpec::apply(Layer& layer) const {
  for (const auto& [name, values] : params) {
    if (values.empty()) layer.params.erase(name);
    else layer.params[name] = values;
  }
}

namespace {

bool same_blob(const Blob& a, const Blob& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.layout() != b.layout() || a.quant() != b.quant()) return false;
  const std::size_t n = a.byte_size();
  return n == b.byte_size() && (n == 0 || std::memcmp(a.data(), b.data(), n) == 0);
}

/// Why two layers at the same place differ otherwise than in a reshape target; empty: they do not.
std::string compare_layers(const Layer& a, const Layer& b) {
  if (a.name != b.name || a.type != b.type) return fmt::format("layer '{}' ({}) becomes '{}' ({})", a.name, a.type, b.name, b.type);
  if (a.inputs != b.inputs || a.outputs != b.outputs) return fmt::format("layer '{}' reads or writes other blobs", a.name);
  for (const auto& [k, v] : a.params) {
    auto it = b.params.find(k);
    // (A target read when a session plans holds the value at the import size.)
    const bool planned = (a.type == "reshape" && (k == "shape" || k == "copy_dims")) || (a.type == "split" && k == "split") ||
                         (a.type == "slice" && a.inputs.size() == 2 && (k == "starts" || k == "ends")) ||
                         (a.type == "pad" && a.inputs.size() == 2 && k == "pads") ||
                         (a.type == "loop" && k == "trip_count" && a.get_int("m_input", 0) == 1);
    if (it == b.params.end() || (it->second != v && !planned))
      return fmt::format("layer '{}' ({}) parameter '{}' changes", a.name, a.type, k);
  }
  if (a.params.size() != b.params.size()) return fmt::format("layer '{}' ({}) gains a parameter", a.name, a.type);
  if (a.weights.size() != b.weights.size()) return fmt::format("layer '{}' ({}) gains a weight", a.name, a.type);
  for (const auto& [k, w] : a.weights) {
    auto it = b.weights.find(k);
    if (a.type == "loop" && k == "body" && it != b.weights.end()) {  // the same layers; its inputs' sizes may differ
      const core::Graph x = core::loop_body(a), y = core::loop_body(b);
      if (x.layers.size() != y.layers.size() || x.outputs != y.outputs || x.inputs.size() != y.inputs.size())
        return fmt::format("layer '{}' (loop): its body changes", a.name);
      for (std::size_t i = 0; i < x.layers.size(); ++i)
        if (auto why = compare_layers(x.layers[i], y.layers[i]); !why.empty())
          return fmt::format("layer '{}' (loop): in its body, {}", a.name, why);
      continue;
    }
    if (it == b.weights.end() || !same_blob(w, it->second))
      return fmt::format("layer '{}' ({}) weight '{}' changes", a.name, a.type, k);
  }
  return {};
}

/// The target (shape and copy_dims of the reshape layer) that turns `in[g]`
/// into `out[g]` in every graph g, or why there is none. A dim that changes is
/// copied from the input dim that changes alike (the same index first), else inferred.
std::string reshape_spec(const std::vector<Shape>& in, const std::vector<Shape>& out, std::vector<int64_t>& shape,
                         std::vector<int64_t>& copy) {
  const int rank = out[0].rank();
  for (std::size_t g = 0; g < out.size(); ++g)
    if (out[g].rank() != rank || in[g].rank() != in[0].rank()) return "its rank changes";
  shape.assign(static_cast<std::size_t>(rank), 0);
  copy.assign(static_cast<std::size_t>(rank), -1);
  auto copies = [&](int i, int k) {
    if (k >= in[0].rank()) return false;
    for (std::size_t g = 0; g < out.size(); ++g)
      if (in[g][k] != out[g][i]) return false;
    return true;
  };
  int inferred = -1;
  for (int i = 0; i < rank; ++i) {
    bool constant = true;
    for (const auto& o : out) constant = constant && o[i] == out[0][i];
    if (constant) {
      if (out[0][i] == 0) return "it makes an empty dim";
      shape[static_cast<std::size_t>(i)] = out[0][i];
      continue;
    }
    int from = copies(i, i) ? i : -1;
    for (int k = 0; from < 0 && k < in[0].rank(); ++k)
      if (copies(i, k)) from = k;
    if (from >= 0) {
      copy[static_cast<std::size_t>(i)] = from;
      shape[static_cast<std::size_t>(i)] = 1;
      continue;
    }
    if (inferred >= 0) return fmt::format("its dims {} and {} both change unlike any input dim", inferred, i);
    inferred = i;
    shape[static_cast<std::size_t>(i)] = -1;
  }
  bool copied = false;
  for (auto k : copy) copied = copied || k >= 0;
  if (!copied) copy.clear();
  return {};
}

/// The sizes of split `l` that give its outputs' shapes in every import
/// (`all`): the parts that keep their size, -1 for the one that changes.
std::string split_spec(const Layer& l, const std::vector<BlobShapes>& all, std::vector<int64_t>& spec) {
  const Shape& whole = all[0].at(l.inputs[0]);
  const int axis = core::normalize_axis(l, "axis", l.get_int("axis", 0), whole.rank());
  spec.clear();
  int changing = -1;
  for (std::size_t p = 0; p < l.outputs.size(); ++p) {
    const int64_t size = all[0].at(l.outputs[p])[axis];
    bool same = true;
    for (const auto& s : all) same = same && s.at(l.outputs[p])[axis] == size;
    if (same) {
      spec.push_back(size);
      continue;
    }
    if (changing >= 0) return fmt::format("its parts {} and {} both change", changing, p);
    changing = static_cast<int>(p);
    spec.push_back(-1);
  }
  return {};
}

}  // namespace

std::string generalize(const core::Graph& base, const core::Graph& probe, std::vector<BlobShapes>& sizes,
                       SizeSpecs& specs) {
  if (probe.layers.size() != base.layers.size())
    return fmt::format("the graph has {} layers at one size and {} at another", base.layers.size(), probe.layers.size());
  if (probe.outputs != base.outputs) return "the net's outputs change";
  for (std::size_t i = 0; i < base.layers.size(); ++i)
    if (auto why = compare_layers(base.layers[i], probe.layers[i]); !why.empty()) return why;
  std::vector<BlobShapes> all = sizes;
  all.push_back(core::infer_shapes(probe));
  SizeSpecs found;
  for (std::size_t i = 0; i < base.layers.size(); ++i) {
    const Layer& l = base.layers[i];
    if (l.type == "split" && l.inputs.size() == 1 && l.params.count("split")) {
      if (l.get_ints("split") == probe.layers[i].get_ints("split")) continue;
      std::vector<int64_t> sizes;
      if (auto why = split_spec(l, all, sizes); !why.empty())
        return fmt::format("the sizes of split '{}' depend on the size and {}", l.name, why);
      found[i].params["split"] = std::move(sizes);
      continue;
    }
    if (l.type != "reshape" || l.inputs.size() != 1) continue;  // a target read from shape_math holds at any size
    std::vector<Shape> in, out;
    for (const auto& s : all) {
      in.push_back(s.at(l.inputs[0]));
      out.push_back(s.at(l.outputs[0]));
    }
    bool differs = false;
    for (const auto& o : out) differs = differs || o != out[0];
    if (!differs) continue;
    std::vector<int64_t> shape, copy_dims;
    if (auto why = reshape_spec(in, out, shape, copy_dims); !why.empty())
      return fmt::format("the target of reshape '{}' depends on the size and {}", l.name, why);
    SizeSpec spec;
    spec.params["shape"] = std::move(shape);
    spec.params["copy_dims"] = std::move(copy_dims);
    // The spec must give every size's shape (a -1 infers from the element count).
    Layer generic = l;
    spec.apply(generic);
    for (std::size_t g = 0; g < in.size(); ++g) {
      std::vector<Shape> got;
      try {
        got = core::infer_layer_shapes(generic, std::span<const Shape>(&in[g], 1));
      } catch (const Error&) {
        got.clear();
      }
      if (got.size() != 1 || got[0] != out[g])
        return fmt::format("the target of reshape '{}' depends on the size in a way 0 and -1 do not express", l.name);
    }
    found[i] = std::move(spec);
  }
  sizes = std::move(all);
  specs = std::move(found);
  return {};
}

}  // namespace softneuro::onnx_import
