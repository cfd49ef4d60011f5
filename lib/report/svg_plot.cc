#include "report/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace mtrain::report {

namespace {

// Colours that stay apart for up to 10 overlaid series (matplotlib's tab10).
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// Layout of one plot (px). The legend rows go below the x-axis label.
constexpr double kWidth = 720, kPlotHeight = 300;
constexpr double kLeft = 74, kRight = 16, kTop = 34, kBottom = 48;
constexpr double kLegendRow = 16;

const char* color_of(int i) { return kPalette[static_cast<size_t>(i) % std::size(kPalette)]; }

bool drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

struct Bounds {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// Round-trip text of a value for data attributes (the hover code and tests read it).
std::string exact(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "NaN"; }

struct Frame {
  Axis x, y;
  double x0 = kLeft, x1 = kWidth - kRight, y0 = kTop + (kPlotHeight - kTop - kBottom), y1 = kTop;
  double px(double v) const { return axis_position(x, v, x0, x1); }
  double py(double v) const { return axis_position(y, v, y0, y1); }
};

Frame frame_of(const Plot& p, bool log_y) {
  Bounds bx, by;
  for (const Series& s : p.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && drawable(s.y[i], log_y)) {
        bx.add(s.x[i]);
        by.add(s.y[i]);
      }
  for (const HLine& h : p.hlines)
    if (drawable(h.y, log_y)) by.add(h.y);
  for (const MarkerSet& m : p.markers)
    for (const auto& [x, y] : m.points)
      if (std::isfinite(x) && drawable(y, log_y)) {
        bx.add(x);
        by.add(y);
      }
  if (bx.empty()) bx.add(0), bx.add(1);
  if (by.empty()) log_y ? (by.add(1), by.add(10)) : (by.add(0), by.add(1));
  Frame f;
  f.x = linear_axis(bx.lo, bx.hi, 8);
  f.y = log_y ? log_axis(by.lo, by.hi) : linear_axis(by.lo, by.hi);
  return f;
}

void draw_axes(std::string& s, const Plot& p, const Frame& f) {
  s += "<g class=\"axes\" stroke=\"#ddd\">";
  for (double t : f.y.ticks)
    s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>", f.x0, f.x1, f.py(t), f.py(t));
  for (double t : f.x.ticks)
    s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>", f.px(t), f.px(t), f.y0, f.y1);
  s += "</g><g class=\"ticks\" fill=\"#333\">";
  for (double t : f.y.ticks)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", f.x0 - 5, f.py(t) + 4,
                     tick_label(t, f.y));
  for (double t : f.x.ticks)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", f.px(t), f.y0 + 15,
                     tick_label(t, f.x));
  s += "</g>";
  s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#888\"/>",
                   f.x0, f.y1, f.x1 - f.x0, f.y0 - f.y1);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", (f.x0 + f.x1) / 2, f.y0 + 32,
                   xml_escape(p.x_label));
  s += fmt::format("<text transform=\"translate(14 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
                   (f.y0 + f.y1) / 2, xml_escape(p.y_label));
  s += fmt::format("<text x=\"{:.1f}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>", f.x0,
                   xml_escape(p.title));
}

// The path of a series: "M" starts each run of drawable points; a run of
// one point (nothing to draw a line to) also gets a dot.
void draw_series(std::string& s, const Series& series, const Frame& f, bool log_y) {
  std::string d, xs, ys, dots;
  int run = 0;  // points in the current run
  double last_x = 0, last_y = 0;
  const char* color = color_of(series.color);
  const auto end_run = [&] {
    if (run == 1)
      dots += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"2.5\" fill=\"{}\"/>", last_x, last_y, color);
    run = 0;
  };
  for (size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
    if (i) xs += ',', ys += ',';
    xs += exact(series.x[i]);
    ys += exact(series.y[i]);
    if (!std::isfinite(series.x[i]) || !drawable(series.y[i], log_y)) {
      end_run();
      continue;
    }
    last_x = f.px(series.x[i]);
    last_y = f.py(series.y[i]);
    d += fmt::format("{}{:.2f} {:.2f} ", run ? "L" : "M", last_x, last_y);
    ++run;
  }
  end_run();
  s += fmt::format(
      "<path class=\"series\" d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{} data-label=\"{}\" "
      "data-color=\"{}\" data-x=\"{}\" data-y=\"{}\"/>",
      d, color, series.dashed ? " stroke-dasharray=\"6 3\"" : "", xml_escape(series.label), color, xs, ys);
  s += dots;
}

void draw_marks(std::string& s, const Plot& p, const Frame& f, bool log_y) {
  for (const HLine& h : p.hlines) {
    if (!drawable(h.y, log_y)) continue;
    s += fmt::format(
        "<g class=\"hline\"><line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"#555\" "
        "stroke-dasharray=\"3 3\"/><text x=\"{:.1f}\" y=\"{:.2f}\" text-anchor=\"end\" fill=\"#555\">{}</text></g>",
        f.x0, f.x1, f.py(h.y), f.py(h.y), f.x1 - 4, f.py(h.y) - 4, xml_escape(h.label));
  }
  for (const MarkerSet& m : p.markers) {
    s += fmt::format("<g class=\"markers\" data-label=\"{}\" fill=\"{}\">", xml_escape(m.label), m.color);
    for (const auto& [x, y] : m.points)
      if (std::isfinite(x) && drawable(y, log_y))
        s += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"4\" data-x=\"{}\" data-y=\"{}\"/>", f.px(x), f.py(y),
                         exact(x), exact(y));
    s += "</g>";
  }
}

// Legend entries left to right, wrapped; returns the rows used.
int draw_legend(std::string& s, const Plot& p, double top) {
  std::vector<std::pair<std::string, std::string>> entries;  // label, colour
  for (const Series& series : p.series) entries.emplace_back(series.label, color_of(series.color));
  for (const MarkerSet& m : p.markers) entries.emplace_back(m.label, m.color);
  double x = kLeft;
  int row = 0;
  for (const auto& [label, color] : entries) {
    const double w = 30 + 6.5 * static_cast<double>(label.size());  // ~6.5 px per character at 11 px
    if (x + w > kWidth - kRight && x > kLeft) x = kLeft, ++row;
    const double y = top + row * kLegendRow;
    s += fmt::format(
        "<g class=\"legend\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"4\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text></g>",
        x, y - 4, color, x + 18, y, xml_escape(label));
    x += w;
  }
  return entries.empty() ? 0 : row + 1;
}

}  // namespace

Axis linear_axis(double lo, double hi, int target) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / mag;
  constexpr double kEps = 1e-9;  // raw / mag is 5.000000000000001 for 2e-5 / 4
  const double step = (n <= 1 + kEps ? 1 : n <= 2 + kEps ? 2 : n <= 5 + kEps ? 5 : 10) * mag;
  // 1e-9: a value within rounding of a step is that step, not one more.
  const int64_t k0 = static_cast<int64_t>(std::floor(lo / step + 1e-9));
  const int64_t k1 = static_cast<int64_t>(std::ceil(hi / step - 1e-9));
  Axis a;
  a.lo = static_cast<double>(k0) * step;
  a.hi = static_cast<double>(k1) * step;
  for (int64_t k = k0; k <= k1; ++k) a.ticks.push_back(static_cast<double>(k) * step);
  return a;
}

Axis log_axis(double lo, double hi, int max_ticks) {
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  if (e1 <= e0) e1 = e0 + 1;
  Axis a;
  a.log = true;
  a.lo = std::pow(10.0, e0);
  a.hi = std::pow(10.0, e1);
  const int decades = e1 - e0;
  const int stride = std::max(1, (decades + max_ticks - 1) / std::max(1, max_ticks));
  for (int e = e0; e <= e1; e += stride) {
    a.ticks.push_back(std::pow(10.0, e));
    // Few decades: 2x and 5x ticks too, or a narrow range would show two ticks.
    if (decades <= 2 && e < e1) {
      a.ticks.push_back(2 * std::pow(10.0, e));
      a.ticks.push_back(5 * std::pow(10.0, e));
    }
  }
  return a;
}

std::string tick_label(double v, const Axis& axis) {
  if (axis.log) return fmt::format("{:g}", v);
  const double step = axis.ticks.size() > 1 ? axis.ticks[1] - axis.ticks[0] : std::fabs(v);
  if (std::fabs(v) < step * 1e-6) return "0";
  const int e_step = static_cast<int>(std::floor(std::log10(step) + 1e-9));
  const double largest = std::max(std::fabs(axis.lo), std::fabs(axis.hi));
  const int e_max = static_cast<int>(std::floor(std::log10(largest) + 1e-9));
  if (e_max >= 6 || e_max <= -4) return fmt::format("{:.{}e}", v, std::max(0, e_max - e_step));
  return fmt::format("{:.{}f}", v, std::max(0, -e_step));
}

double axis_position(const Axis& axis, double v, double p0, double p1) {
  const double t = axis.log ? (std::log10(v) - std::log10(axis.lo)) / (std::log10(axis.hi) - std::log10(axis.lo))
                            : (v - axis.lo) / (axis.hi - axis.lo);
  return p0 + t * (p1 - p0);
}

Plot make_plot(std::string id, std::string title, std::string y_label) {
  Plot p;
  p.id = std::move(id);
  p.title = std::move(title);
  p.y_label = std::move(y_label);
  return p;
}

bool has_points(const Plot& plot, bool log_y) {
  for (const Series& s : plot.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && drawable(s.y[i], log_y)) return true;
  return false;
}

std::string render_svg(const Plot& p, bool log_y) {
  const Frame f = frame_of(p, log_y);
  std::string body;
  draw_axes(body, p, f);
  for (const Series& s : p.series) draw_series(body, s, f, log_y);
  draw_marks(body, p, f, log_y);
  const int rows = draw_legend(body, p, kPlotHeight + 4);
  const double height = kPlotHeight + rows * kLegendRow + 6;
  // The hover code maps the pointer through data-px0/px1/xlo/xhi to an iteration.
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" data-plot=\"{}\" data-log=\"{}\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"11\" data-px0=\"{}\" "
      "data-px1=\"{}\" data-xlo=\"{}\" data-xhi=\"{}\" data-py0=\"{}\" data-py1=\"{}\">"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>{}"
      "<text class=\"hover\" x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#000\"></text></svg>",
      xml_escape(p.id), log_y ? 1 : 0, kWidth, height, kWidth, height, f.x0, f.x1, f.x.lo, f.x.hi, f.y0, f.y1, body,
      f.x1 - 4, kTop - 6);
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace mtrain::report
