// Tests' shorthand for tuning a model variable in place.
#pragma once

#include <softneuro/tune.hpp>

namespace softneuro {

/// `model` = tune(model, options); returns the report.
inline TuneReport tune_and_keep(Model& model, const TuneOptions& options = {}) {
  TuneReport report;
  model = tune(model, options, &report);
  return report;
}

}  // namespace softneuro
