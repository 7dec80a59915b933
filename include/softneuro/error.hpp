// softneuro/error.hpp — the one error type of libsoftneuro.
#pragma once

#include <stdexcept>
#include <string>

namespace softneuro {

/// Every failure at the public boundary is thrown as a softneuro::Error.
/// what() reads "FILE: layer 'L': field 'F': message" with the parts that are
/// known; the parts are also available separately so tools can point at them.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string message, std::string file = {}, std::string layer = {},
                 std::string field = {});

  const std::string& message() const noexcept { return message_; }
  /// The model or data file at fault, empty if none.
  const std::string& file() const noexcept { return file_; }
  /// The layer at fault, empty if none.
  const std::string& layer() const noexcept { return layer_; }
  /// The field (parameter, weight, input, header entry) at fault, empty if none.
  const std::string& field() const noexcept { return field_; }

  /// A copy of this error with the file set (keeps layer and field).
  Error with_file(std::string file) const;
  /// A copy of this error with the layer set if it had none.
  Error with_layer(std::string layer) const;

 private:
  std::string message_, file_, layer_, field_;
};

}  // namespace softneuro
