// The routine path as a picture: one row per step in execution order, boxes
// coloured by the schema their routine computes in, adapts as diamonds with
// their cost, edges between the steps that produce and read each blob, and a
// bar per step of the time the tuner measured (or predicted).
#include <softneuro/tune.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>

namespace softneuro {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

/// The schema part of a descriptor ("cpu:qint8:nhwc/onednn" -> "cpu:qint8:nhwc"; "cpu/ref" -> "cpu").
std::string schema_of(const std::string& descriptor) { return descriptor.substr(0, descriptor.find('/')); }

const char* colour_of(const std::string& schema) {
  if (schema.rfind("cuda", 0) == 0) return "#e15759";
  if (schema.find("qint8") != std::string::npos || schema.find("quint8") != std::string::npos) return "#f28e2b";
  if (schema.find("bfloat16") != std::string::npos || schema.find("float16") != std::string::npos) return "#59a14f";
  if (schema.find("nhwc") != std::string::npos) return "#b07aa1";
  if (schema.find("nchw16c") != std::string::npos || schema.find("nchw8c") != std::string::npos) return "#76b7b2";
  return "#4e79a7";  // float32 nchw
}

}  // namespace

std::string path_svg(std::span<const LayerSummary> steps, const std::string& title) {
  constexpr int kRow = 20, kTop = 70, kLanes = 150, kBoxX = kLanes + 10, kBoxW = 560, kBarX = kBoxX + kBoxW + 20,
                kBarW = 260;
  const int width = kBarX + kBarW + 90;
  const int height = kTop + static_cast<int>(steps.size()) * kRow + 30;
  double max_ms = 0, total_ms = 0, adapt_ms = 0;
  auto ms_of = [](const LayerSummary& s) { return s.measured_ms > 0 ? s.measured_ms : s.predicted_ms; };
  for (const auto& s : steps) {
    max_ms = std::max(max_ms, ms_of(s));
    total_ms += ms_of(s);
    if (s.name.rfind("adapt:", 0) == 0) adapt_ms += ms_of(s);
  }
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"DejaVu Sans, sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
  out += fmt::format("<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", escape(title));
  out += fmt::format("<text x=\"10\" y=\"38\">{} steps; {:.3f} ms in all ({:.3f} ms in adapts), as the tuner measured "
                     "(predicted where not measured)</text>\n",
                     steps.size(), total_ms, adapt_ms);
  // Legend: the schemas present.
  std::map<std::string, const char*> legend;
  for (const auto& s : steps) legend.emplace(schema_of(s.descriptor), colour_of(schema_of(s.descriptor)));
  int lx = 10;
  for (const auto& [schema, colour] : legend) {
    out += fmt::format("<rect x=\"{}\" y=\"46\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"56\">{}</text>\n",
                       lx, colour, lx + 16, escape(schema));
    lx += 24 + static_cast<int>(schema.size()) * 7;
  }
  // Edges: from the row producing a blob to each row reading it.
  std::map<std::string, int> producer;
  for (std::size_t r = 0; r < steps.size(); ++r) {
    const int y = kTop + static_cast<int>(r) * kRow + kRow / 2;
    for (const auto& in : steps[r].inputs) {
      auto p = producer.find(in);
      if (p == producer.end()) continue;
      const int y0 = kTop + p->second * kRow + kRow / 2, span = static_cast<int>(r) - p->second;
      if (span == 1) {
        out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>\n", kBoxX + 8, y0 + 7,
                           kBoxX + 8, y - 7);
      } else {  // an arc through the lanes, further out the longer it is
        const int bulge = std::max(10, kBoxX - 8 - std::min(kLanes - 10, 6 * span));
        out += fmt::format("<path d=\"M {} {} C {} {} {} {} {} {}\" fill=\"none\" stroke=\"#bbb\"/>\n", kBoxX, y0, bulge, y0,
                           bulge, y, kBoxX, y);
      }
    }
    for (const auto& o : steps[r].outputs) producer[o] = static_cast<int>(r);
  }
  for (std::size_t r = 0; r < steps.size(); ++r) {
    const LayerSummary& s = steps[r];
    const int y = kTop + static_cast<int>(r) * kRow;
    const std::string schema = schema_of(s.descriptor);
    const bool adapt = s.name.rfind("adapt:", 0) == 0;
    const bool fused = !s.fused_into.empty();
    std::string label = adapt ? fmt::format("{} ({})", s.name, s.descriptor)
                              : fmt::format("{} · {} · {}{}", s.name, s.type, s.descriptor,
                                            s.routine_params.empty() ? "" : " [" + s.routine_params + "]");
    if (fused) label += " (computed by " + s.fused_into + ")";
    if (label.size() > 92) label = label.substr(0, 89) + "...";
    if (adapt) {
      const int cx = kBoxX + 8, cy = y + kRow / 2;
      out += fmt::format("<polygon points=\"{},{} {},{} {},{} {},{}\" fill=\"{}\" stroke=\"black\"/>\n", cx, cy - 8, cx + 8,
                         cy, cx, cy + 8, cx - 8, cy, colour_of(schema));
      out += fmt::format("<text x=\"{}\" y=\"{}\" font-style=\"italic\">{}</text>\n", kBoxX + 22, y + 14, escape(label));
    } else {
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\" fill=\"{}\" fill-opacity=\"{}\"/>\n",
                         kBoxX, y + 2, kBoxW, kRow - 4, colour_of(schema), fused ? "0.35" : "0.85");
      out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"white\">{}</text>\n", kBoxX + 6, y + 14, escape(label));
    }
    const double ms = ms_of(s);
    if (ms > 0) {
      const int w = std::max(1, static_cast<int>(kBarW * ms / max_ms));
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", kBarX, y + 4, w, kRow - 8,
                         adapt ? "#444" : colour_of(schema));
      out += fmt::format("<text x=\"{}\" y=\"{}\">{:.3f} ms</text>\n", kBarX + w + 4, y + 14, ms);
    }
  }
  out += "</svg>\n";
  return out;
}

}  // namespace softneuro
