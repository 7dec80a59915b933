// Symbolic input dims kept dynamic. The importer translates at one size of
// each symbolic dim; values computed from shapes stay shape_math layers
// (core/shape_plan.hpp), but a layer parameter derived from a shape at import
// (a Slice's end, Resize sizes) holds that size. Importing again with one
// symbolic dim at another size and comparing the two graphs shows which
// parameters depend on it; where each is a reshape target that ONNX's 0 (copy
// the input dim), -1 (infer) and copies of other input dims express for every
// size tried, or a split whose one changing part is the rest of the dim
// (x[:, 1:], x[..., :-1]), the dim stays dynamic.
#pragma once

#include "core/graph.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace softneuro::onnx_import {

/// One symbolic input dim as a sum of named sizes plus a constant: ONNX's
/// dim_param ("sequence", "past_sequence + 1", "s0 + s1"; any other text is
/// one opaque name; a dim without a name gets a name of its own). Dims that
/// name the same size vary together.
struct SymbolicDim {
  std::string input;
  int dim = 0;
  std::map<std::string, int64_t> terms;  ///< name -> coefficient
  int64_t offset = 0;
  std::string param;  ///< the dim_param as the file writes it
  /// The dim's size where the named sizes are `sizes` (missing names count 0).
  int64_t size_at(const std::map<std::string, int64_t>& sizes) const;
};
/// Parses a dim_param; `fallback`: the name of an unnamed dim.
SymbolicDim parse_dim_param(const std::string& text, const std::string& fallback);

/// The symbolic dims of a model's inputs and the size each name takes.
struct InputSymbols {
  std::vector<SymbolicDim> dims;
  std::map<std::string, int64_t> sizes;
  /// dim_params read as another expression (an offset the graph contradicts
  /// read as a size: import_first), for every import of the model.
  std::map<std::string, std::string> read_as;
};

/// Parameters of one layer that hold for every size tried: a reshape's
/// target (`shape`, `copy_dims`), a split's sizes with -1 for the part that
/// takes the rest of the dim.
struct SizeSpec {
  std::map<std::string, std::vector<int64_t>> params;  ///< set; an empty list removes the parameter
  void apply(Layer& layer) const;
};
/// By layer index.
using SizeSpecs = std::map<std::size_t, SizeSpec>;
/// The blob shapes of one import, by blob name.
using BlobShapes = std::map<std::string, Shape>;

/// Compares `base` with `probe`, the same model imported with other input
/// sizes. `sizes` holds the blob shapes of base and of every probe accepted so
/// far. Where every difference is a reshape target that one spec of 0s, -1 and
/// constants resolves to at every size, or a split's sizes of which one part
/// takes what the others leave, appends the probe's shapes to `sizes`, fills
/// `specs` and returns an empty string; otherwise returns why not (the first
/// layer that differs otherwise) and changes neither.
std::string generalize(const core::Graph& base, const core::Graph& probe, std::vector<BlobShapes>& sizes,
                       SizeSpecs& specs);

}  // namespace softneuro::onnx_import
