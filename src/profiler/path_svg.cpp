// The routine path as a picture: one row per step in execution order, boxes
// coloured by the schema their routine computes in, adapts as diamonds with
// their cost, edges between the steps that produce and read each blob, and a
// bar per step of the time the tuner measured (or predicted). And the
// benchmark's chart (bench/compare), drawn with the same frame and bars.
#include <softneuro/tune.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

/// The picture's frame: the <svg> element on white, and its title.
std::string svg_begin(int width, int height, const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"DejaVu Sans, sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
      width, height, escape(title));
}

/// A horizontal bar (`fill`: a colour or a pattern's url()).
std::string bar(double x, int y, double w, int h, const std::string& fill, const char* opacity = "1") {
  return fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" fill-opacity=\"{}\"/>\n", x, y,
                     std::max(1.0, w), h, fill, opacity);
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
  std::string out = svg_begin(width, height, title);
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
      out += bar(kBarX, y + 4, w, kRow - 8, adapt ? "#444" : colour_of(schema));
      out += fmt::format("<text x=\"{}\" y=\"{}\">{:.3f} ms</text>\n", kBarX + w + 4, y + 14, ms);
    }
  }
  out += "</svg>\n";
  return out;
}

std::string chart_svg(const BarChart& chart) {
  // Panels in a grid of up to three columns; in each, a bar per entry on a
  // log scale from the decade below the fastest to past the slowest.
  constexpr int kPanelW = 400, kLabelW = 150, kRow = 18, kPanelTitle = 22, kAxis = 34, kGap = 24, kTop = 40;
  const int cols = static_cast<int>(std::min<std::size_t>(3, std::max<std::size_t>(1, chart.panels.size())));
  std::size_t most = 1;
  for (const auto& p : chart.panels) most = std::max(most, p.bars.size());
  const int panel_h = kPanelTitle + static_cast<int>(most) * kRow + kAxis;
  const int rows = static_cast<int>((chart.panels.size() + cols - 1) / cols);
  const int width = 10 + cols * (kPanelW + kGap), height = kTop + std::max(1, rows) * (panel_h + kGap) + 10;
  std::string out = svg_begin(width, height, chart.title);
  out += "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
         "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"white\"/>"
         "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"black\" stroke-opacity=\"0.35\" stroke-width=\"3\"/>"
         "</pattern></defs>\n";
  for (std::size_t i = 0; i < chart.panels.size(); ++i) {
    const BarChart::Panel& panel = chart.panels[i];
    const int px = 10 + static_cast<int>(i % cols) * (kPanelW + kGap);
    const int py = kTop + static_cast<int>(i / cols) * (panel_h + kGap);
    const int ax = px + kLabelW, aw = kPanelW - kLabelW - 50;
    double lo = 1e300, hi = 0;
    for (const auto& b : panel.bars)
      if (b.median > 0) lo = std::min(lo, b.min > 0 ? b.min : b.median), hi = std::max(hi, std::max(b.max, b.median));
    if (hi <= 0) lo = 0.1, hi = 1;
    lo = std::pow(10.0, std::floor(std::log10(lo * 0.8)));
    hi = std::max(hi * 1.5, lo * 10);
    auto xof = [&](double v) { return ax + aw * (std::log10(std::max(v, lo)) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)); };
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"13\" font-weight=\"bold\">{}</text>\n", px, py + 14,
                       escape(panel.title));
    const int by = py + kPanelTitle, bottom = by + static_cast<int>(panel.bars.size()) * kRow;
    for (double d = lo; d <= hi * 1.0001; d *= 10) {  // decades
      const double x = xof(d);
      out += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#ddd\"/>\n", x, by, x, bottom);
      out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{:g}</text>\n", x, bottom + 12, d);
    }
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"9\" fill=\"#555\">{}, log scale (median; whiskers: min-max)</text>\n",
                       ax, bottom + 26, escape(chart.unit));
    for (std::size_t k = 0; k < panel.bars.size(); ++k) {
      const BarChart::Bar& b = panel.bars[k];
      const int y = by + static_cast<int>(k) * kRow;
      out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"10\">{}</text>\n", ax - 6, y + 12,
                         escape(b.label));
      if (!(b.median > 0)) {
        out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"grey\">{}</text>\n", ax + 4, y + 12,
                           escape(b.note.empty() ? "no result" : b.note));
        continue;
      }
      const double x1 = xof(b.median);
      out += bar(ax, y + 3, x1 - ax, kRow - 6, b.colour, b.hatched ? "0.6" : "0.95");
      if (b.hatched) out += bar(ax, y + 3, x1 - ax, kRow - 6, "url(#hatch)", "0.5");
      double right = x1;
      if (b.min > 0 && b.max >= b.min) {  // whiskers
        const double w0 = xof(b.min), w1 = xof(b.max), cy = y + kRow / 2.0;
        out += fmt::format("<path d=\"M {0:.1f} {1:.1f} H {2:.1f} M {0:.1f} {3:.1f} V {4:.1f} M {2:.1f} {3:.1f} V {4:.1f}\" "
                           "stroke=\"black\" stroke-width=\"0.8\"/>\n",
                           w0, cy, w1, cy - 3, cy + 3);
        right = std::max(right, w1);
      }
      out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"9\">{}</text>\n", right + 4, y + 12,
                         b.median >= 100 ? fmt::format("{:.0f}", b.median) : b.median >= 10 ? fmt::format("{:.1f}", b.median)
                                                                                            : fmt::format("{:.2f}", b.median));
    }
  }
  out += "</svg>\n";
  return out;
}

}  // namespace softneuro
