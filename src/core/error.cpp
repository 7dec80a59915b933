#include <softneuro/error.hpp>

#include <fmt/format.h>

namespace softneuro {
namespace {
std::string compose(const std::string& msg, const std::string& file, const std::string& layer,
                    const std::string& field) {
  std::string s;
  if (!file.empty()) s += file + ": ";
  if (!layer.empty()) s += fmt::format("layer '{}': ", layer);
  if (!field.empty()) s += fmt::format("field '{}': ", field);
  return s + msg;
}
}  // namespace

Error::Error(std::string message, std::string file, std::string layer, std::string field)
    : std::runtime_error(compose(message, file, layer, field)),
      message_(std::move(message)), file_(std::move(file)), layer_(std::move(layer)),
      field_(std::move(field)) {}

Error Error::with_file(std::string file) const { return Error(message_, std::move(file), layer_, field_); }

Error Error::with_layer(std::string layer) const {
  if (!layer_.empty()) return *this;
  return Error(message_, file_, std::move(layer), field_);
}

}  // namespace softneuro
