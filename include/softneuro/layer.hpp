// softneuro/layer.hpp — what a layer is: its type, parameters, weights and the
// blobs it reads and writes. Apps that build a model in code (Model::build)
// and routine authors both use it; it knows nothing of routines.
#pragma once

#include <softneuro/blob.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace softneuro {

/// A layer parameter: an integer, a float, a string, or a list of integers or floats.
using Attr = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

/// What to compute: a type ("conv2", "relu", ...), layer parameters, weights,
/// and the names of the blobs it reads and writes. Knows nothing of routines.
struct Layer {
  std::string name;
  std::string type;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::map<std::string, Attr> params;
  std::map<std::string, Blob> weights;

  bool has(const std::string& key) const { return params.count(key) != 0; }
  /// Typed parameter access; a missing (without default) or mistyped value
  /// throws softneuro::Error naming this layer and the field.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> get_ints(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key, std::vector<int64_t> fallback) const;
  std::vector<double> get_floats(const std::string& key) const;
  std::vector<double> get_floats(const std::string& key, std::vector<double> fallback) const;

  /// The weight or an Error naming this layer and the weight.
  const Blob& weight(const std::string& key) const;
  /// The weight or nullptr.
  const Blob* find_weight(const std::string& key) const;
};

}  // namespace softneuro
