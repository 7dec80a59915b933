// The tuning report as text and JSON.
#include <softneuro/tune.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace softneuro {
namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += fmt::format("\\u{:04x}", static_cast<int>(c));
    else o += c;
  }
  return o;
}

}  // namespace

std::string TuneReport::to_text() const {
  std::string s;
  if (!input_shapes.empty()) {
    s += "input shapes:";
    for (const auto& [name, shape] : input_shapes) s += fmt::format(" {}={}", name, shape.to_string());
    s += "\n";
  }
  s += fmt::format("device: {}\nthreads: {}\nOpenMP wait: {}\n", device_fingerprint, threads, openmp_wait);
  std::size_t wn = 5, wd = 7;
  for (const auto& l : layers) {
    wn = std::max(wn, l.layer.size());
    wd = std::max(wd, l.descriptor.size() + (l.routine_params.empty() ? 0 : l.routine_params.size() + 3));
  }
  s += fmt::format("\n{:<{}}  {:<12} {:<{}}  {:>10}  {:>10}  {:>5}\n", "layer", wn, "type", "routine", wd, "unit ms", "in-net ms", "cands");
  for (const auto& l : layers)
    s += fmt::format("{:<{}}  {:<12} {:<{}}  {:>10.4f}  {:>10.4f}  {:>5}{}\n", l.layer, wn, l.type,
                     l.descriptor + (l.routine_params.empty() ? "" : " (" + l.routine_params + ")"), wd, l.unit_ms,
                     l.integrated_ms, l.candidates, l.fused_into.empty() ? "" : "  computed by " + l.fused_into + "'s step");
  double adapt_ms = 0;
  for (const auto& a : adapts) adapt_ms += a.ms;
  s += fmt::format("\n{} adapts, {:.4f} ms in all\n", adapts.size(), adapt_ms);
  for (const auto& a : adapts)
    s += fmt::format("  {} -> {}: {} -> {} by {} ({:.4f} ms)\n", a.blob, a.consumer, a.from_schema, a.to_schema, a.descriptor, a.ms);
  s += fmt::format("\npredicted (DPRS{}) {:.3f} ms, measured {:.3f} ms end to end\n", exact ? "" : ", heuristic fallback",
                   predicted_ms, measured_ms);
  if (default_ms > 0)
    s += kept_default ? fmt::format("the untuned default measured {:.3f} ms beside it: its routines are kept\n", default_ms)
                      : fmt::format("the untuned default measured {:.3f} ms beside it\n", default_ms);
  if (earlier_paths > 0)
    s += fmt::format("{} path{} earlier tunings kept measured beside it, the fastest {:.3f} ms{}\n", earlier_paths,
                     earlier_paths == 1 ? "" : "s", earlier_ms, earlier_taken ? ": taken" : "");
  if (std::any_of(layers.begin(), layers.end(), [](const LayerLine& l) { return l.sensitivity >= 0; })) {
    s += "accuracy lost with the layer alone in qint8 (the budget's metric), and the dtype chosen:\n";
    for (const auto& l : layers)
      if (l.sensitivity >= 0)
        s += fmt::format("  {:<{}} {:.5f}  {}\n", l.layer, wn, l.sensitivity,
                         l.descriptor.find("qint8") != std::string::npos ? "qint8" : "float");
  }
  if (!accuracy_budget.empty()) {
    const std::string on = fmt::format("{} {} sample{}", validation_samples, validation_synthetic ? "synthetic" : "validation",
                                       validation_samples == 1 ? "" : "s");
    if (reduced_not_worth)
      s += fmt::format("accuracy budget {}: not needed: the fastest path below float32 was predicted {:.1f}% faster than "
                       "float32's, under the {:.1f}% it must gain (min_reduced_gain), so float32 is kept{}\n",
                       accuracy_budget, 100 * reduced_gain, 100 * min_reduced_gain,
                       provisional_samples > 0 ? fmt::format(" (qint8 timed under scales from {} calibration samples)",
                                                             provisional_samples)
                                               : "");
    else if (accuracy_budget == "none")
      s += "accuracy budget none: not checked\n";
    else if (reduced_refused)
      s += fmt::format("accuracy budget {}: no samples of your own to check it on, so nothing below float32 is "
                       "chosen (give --calibration DIR, or --accuracy none to allow it unchecked)\n",
                       accuracy_budget);
    else if (accuracy < 0)
      s += fmt::format("accuracy budget {}: the path runs nothing below float32\n", accuracy_budget);
    else
      s += fmt::format("accuracy budget {}: measured {:.4f} on {} against float32{}{}\n", accuracy_budget, accuracy, on,
                       accuracy_confirmed >= 0 ? fmt::format(", {:.4f} on the calibration samples", accuracy_confirmed) : "",
                       accuracy_missed ? ": missed, a float32 path is kept" : "");
    if (!accuracy_note.empty()) s += fmt::format("  ({})\n", accuracy_note);
  }
  if (!range_methods.empty()) {
    s += fmt::format("range method {} kept; the chosen path measured", range_method);
    for (const auto& [m, v] : range_methods) s += fmt::format(" {} {:.4f}", m, v);
    s += "\n";
  } else if (!range_method.empty()) {
    s += fmt::format("range method {}\n", range_method);
  }
  if (bias_corrected_accuracy >= 0)
    s += fmt::format("bias correction {}: the chosen path measured {:.4f} with it\n", bias_correction ? "kept" : "not kept",
                     bias_corrected_accuracy);
  if (int8_weight_layers > 0)
    s += fmt::format("weights stored as int8: {} layer{} running in qint8, {:.2f} MiB of float32 -> {:.2f} MiB\n",
                     int8_weight_layers, int8_weight_layers == 1 ? "" : "s", double(int8_weight_float_bytes) / 1048576.0,
                     double(int8_weight_float_bytes) / 4.0 / 1048576.0);
  s += fmt::format("tuned in {:.2f} s: {} measurements, {} from the profile cache{}\n", tuning_s, measurements, cache_hits,
                   cache_remeasured ? fmt::format(", {} cached measured again", cache_remeasured) : "");
  if (sensitivities_cached + sensitivities_measured + sensitivities_dominated > 0)
    s += fmt::format("layer sensitivities: {} measured, {} from the profile cache{}\n", sensitivities_measured,
                     sensitivities_cached,
                     sensitivities_dominated
                         ? fmt::format(", {} not needed (float32 as fast there, whatever its neighbours take)", sensitivities_dominated)
                         : "");
  if (cache_drift != 1)
    s += fmt::format("cached times read scaled by {:.3f}: the spot-checked candidates ran {} now\n", cache_drift,
                     cache_drift < 1 ? "faster" : "slower");
  if (others_cpus >= 0) s += fmt::format("other processes meanwhile: {:.2f} CPUs busy on average\n", others_cpus);
  for (const auto& [stage, secs] : stage_s) s += fmt::format("  {:<22} {:8.2f} s\n", stage, secs);
  for (const auto& o : other_shapes) {
    s += '\n';  // (not "\n" + text: GCC 12's -Wrestrict misreads that temporary)
    s += o.to_text();
  }
  return s;
}

std::string TuneReport::to_json() const {
  std::string s = fmt::format("{{\n  \"device_fingerprint\": \"{}\",\n  \"threads\": {},\n  \"openmp_wait\": \"{}\",\n"
                              "  \"predicted_ms\": {},\n  \"measured_ms\": {},\n  \"default_ms\": {},\n  \"kept_default\": {},\n"
                              "  \"earlier_paths\": {},\n  \"earlier_ms\": {},\n  \"earlier_taken\": {},\n"
                              "  \"accuracy_budget\": \"{}\",\n  \"accuracy\": {},\n  \"validation_samples\": {},\n"
                              "  \"validation_synthetic\": {},\n  \"reduced_refused\": {},\n  \"reduced_gain\": {},\n  \"min_reduced_gain\": {},\n  \"reduced_not_worth\": {},\n  \"provisional_samples\": {},\n  \"accuracy_missed\": {},\n  \"accuracy_confirmed\": {},\n  \"accuracy_note\": \"{}\",\n"
                              "  \"int8_weight_layers\": {},\n  \"int8_weight_float_bytes\": {},\n  \"range_method\": \"{}\",\n"
                              "  \"bias_correction\": {},\n"
                              "  \"tuning_s\": {},\n  \"measurements\": {},\n  \"cache_hits\": {},\n  \"cache_remeasured\": {},\n  \"sensitivities_cached\": {},\n  \"sensitivities_measured\": {},\n  \"sensitivities_dominated\": {},\n  \"cache_drift\": {},\n  \"exact\": {},\n"
                              "  \"others_cpus\": {},\n  \"layers\": [",
                              json_escape(device_fingerprint), threads, json_escape(openmp_wait), predicted_ms, measured_ms, default_ms, kept_default,
                              earlier_paths, earlier_ms, earlier_taken, json_escape(accuracy_budget), accuracy, validation_samples, validation_synthetic, reduced_refused, reduced_gain, min_reduced_gain, reduced_not_worth, provisional_samples, accuracy_missed,
                              accuracy_confirmed, json_escape(accuracy_note),
                              int8_weight_layers, int8_weight_float_bytes, json_escape(range_method), bias_correction, tuning_s, measurements,
                              cache_hits, cache_remeasured, sensitivities_cached, sensitivities_measured, sensitivities_dominated, cache_drift, exact,
                              others_cpus);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    s += fmt::format("{}\n    {{\"layer\": \"{}\", \"type\": \"{}\", \"descriptor\": \"{}\", \"routine_params\": \"{}\", "
                     "\"unit_ms\": {}, \"integrated_ms\": {}, \"candidates\": {}, \"sensitivity\": {}, \"quant\": \"{}\", \"fused_into\": \"{}\"}}",
                     i ? "," : "", json_escape(l.layer), json_escape(l.type), json_escape(l.descriptor),
                     json_escape(l.routine_params), l.unit_ms, l.integrated_ms, l.candidates, l.sensitivity,
                     json_escape(l.quant), json_escape(l.fused_into));
  }
  s += "\n  ],\n  \"stages\": [";
  for (std::size_t i = 0; i < stage_s.size(); ++i)
    s += fmt::format("{}{{\"stage\": \"{}\", \"s\": {}}}", i ? ", " : "", json_escape(stage_s[i].first), stage_s[i].second);
  s += "],\n  \"adapts\": [";
  for (std::size_t i = 0; i < adapts.size(); ++i) {
    const auto& a = adapts[i];
    s += fmt::format("{}\n    {{\"blob\": \"{}\", \"consumer\": \"{}\", \"from\": \"{}\", \"to\": \"{}\", \"descriptor\": \"{}\", \"ms\": {}}}",
                     i ? "," : "", json_escape(a.blob), json_escape(a.consumer), json_escape(a.from_schema),
                     json_escape(a.to_schema), json_escape(a.descriptor), a.ms);
  }
  s += "\n  ],\n  \"input_shapes\": {";
  std::size_t k = 0;
  for (const auto& [name, shape] : input_shapes)
    s += fmt::format("{}\"{}\": [{}]", k++ ? ", " : "", json_escape(name), fmt::join(shape.to_vector(), ", "));
  s += "},\n  \"other_shapes\": [";
  for (std::size_t i = 0; i < other_shapes.size(); ++i) s += (i ? ",\n" : "\n") + other_shapes[i].to_json();
  s += "]\n}\n";
  return s;
}

}  // namespace softneuro
