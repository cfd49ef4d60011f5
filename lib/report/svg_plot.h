// Line plots rendered as inline SVG text, for the run report (report.h):
// axis ranges and ticks on "nice" 1-2-5 steps, a log10 axis with ticks at
// powers of ten, series as polylines (a gap where a value is missing, not
// finite, or not positive on a log axis), marker sets (clipped steps,
// skipped iterations) and horizontal reference lines (the clip threshold).
// Every series path carries its data (data-x, data-y) so that the report's
// hover code and the tests read the numbers it was drawn from.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mtrain::report {

// An axis range and its ticks.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
};

// Linear axis over [lo, hi]: a 1-2-5 step giving about `target` intervals,
// the range widened out to whole steps. lo == hi is widened around the value.
Axis linear_axis(double lo, double hi, int target = 5);
// log10 axis: lo, hi > 0 widened to whole decades (at least one); a tick per
// decade, or every 2nd/3rd... when there are more than `max_ticks` decades.
Axis log_axis(double lo, double hi, int max_ticks = 8);
// Tick label: as few digits as the step needs ("0.25", "1e-05", "2000").
std::string tick_label(double v, const Axis& axis);
// Pixel position of v on [p0, p1] (p1 < p0 is fine: SVG's y grows downwards).
double axis_position(const Axis& axis, double v, double p0, double p1);

struct Series {
  std::string label;
  std::vector<double> x, y;
  int color = 0;  // index into the palette
  bool dashed = false;
};

struct MarkerSet {
  std::string label;
  std::string color;  // CSS colour
  std::vector<std::pair<double, double>> points;
};

struct HLine {
  double y = 0;
  std::string label;
};

struct Plot {
  std::string id;  // file name stem and HTML id: "loss", "grad_norm", ...
  std::string title, y_label, x_label = "iteration";
  std::vector<Series> series;
  std::vector<MarkerSet> markers;
  std::vector<HLine> hlines;
  bool log_toggle = false;  // the report offers a log-scale view
};
Plot make_plot(std::string id, std::string title, std::string y_label);

// Whether any series has a point to draw (on a log axis: a positive one).
bool has_points(const Plot& plot, bool log_y);
// One standalone <svg> element (also valid as a file with an XML header).
std::string render_svg(const Plot& plot, bool log_y);
// Text safe inside XML/HTML text and attribute values.
std::string xml_escape(const std::string& s);

}  // namespace mtrain::report
