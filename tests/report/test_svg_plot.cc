// Axis ranges, ticks (linear 1-2-5 and log10), tick labels and the pixel
// mapping of render_svg. Expected values follow from the rules by hand: a
// 1-2-5 step is the smallest of {1, 2, 5, 10} x 10^k at least span / target.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "report/svg_plot.h"

namespace mtrain::report {
namespace {

void expect_ticks(const Axis& a, const std::vector<double>& want) {
  ASSERT_EQ(a.ticks.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)  // k x step in fp64: within a few ulps of the decimal
    EXPECT_NEAR(a.ticks[i], want[i], 1e-12 * std::max(1.0, std::fabs(want[i]))) << "tick " << i;
}

TEST(LinearAxis, StepIsOneTwoFiveAndTheRangeEndsOnWholeSteps) {
  // span 7 / 5 = 1.4 -> step 2; 0.016 rounds down to 0, 7 up to 8.
  const Axis a = linear_axis(0.016, 7.0, 5);
  EXPECT_FALSE(a.log);
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 8);
  expect_ticks(a, {0, 2, 4, 6, 8});
  // span 2400 / 8 = 300 -> step 500.
  expect_ticks(linear_axis(5, 2400, 8), {0, 500, 1000, 1500, 2000, 2500});
  // A tick value itself is not widened by rounding: 0.3 / 0.1 is 2.9999999999999996.
  expect_ticks(linear_axis(0.1, 0.3, 2), {0.1, 0.2, 0.3});
}

TEST(LinearAxis, SmallValuesAndNegativeValues) {
  // span 2.99e-3 / 5 = 5.98e-4 -> step 1e-3.
  expect_ticks(linear_axis(1e-5, 3e-3, 5), {0, 1e-3, 2e-3, 3e-3});
  // span 3 / 5 = 0.6 -> step 1.
  expect_ticks(linear_axis(-1.5, 1.5, 5), {-2, -1, 0, 1, 2});
}

TEST(LinearAxis, AFlatSeriesIsWidenedAroundItsValue) {
  // 1 +- 10%: span 0.2 / 5 = 0.04 -> step 0.05.
  expect_ticks(linear_axis(1.0, 1.0, 5), {0.9, 0.95, 1.0, 1.05, 1.1});
  // 0 +- 1: span 2 / 5 = 0.4 -> step 0.5.
  expect_ticks(linear_axis(0, 0, 5), {-1, -0.5, 0, 0.5, 1});
}

TEST(LogAxis, WholeDecadesWithOneTickEach) {
  const Axis a = log_axis(0.016, 7.0);
  EXPECT_TRUE(a.log);
  EXPECT_NEAR(a.lo, 0.01, 1e-15);
  EXPECT_EQ(a.hi, 10);
  expect_ticks(a, {0.01, 0.1, 1, 10});
}

TEST(LogAxis, FewDecadesGetTwoAndFiveTicks) {
  expect_ticks(log_axis(2, 7), {1, 2, 5, 10});
  expect_ticks(log_axis(1, 1), {1, 2, 5, 10});  // a constant: one decade above it
  expect_ticks(log_axis(0.3, 8), {0.1, 0.2, 0.5, 1, 2, 5, 10});
  expect_ticks(log_axis(0.3, 40), {0.1, 1, 10, 100});  // three decades: decade ticks only
}

TEST(LogAxis, ManyDecadesAreThinned) {
  // 16 decades, at most 8 ticks: every 2nd decade.
  expect_ticks(log_axis(1e-3, 1e13, 8), {1e-3, 1e-1, 1e1, 1e3, 1e5, 1e7, 1e9, 1e11, 1e13});
}

TEST(AxisPosition, LinearAndLogMapping) {
  const Axis lin = linear_axis(0, 10, 5);
  EXPECT_DOUBLE_EQ(axis_position(lin, 5, 100, 300), 200);
  EXPECT_DOUBLE_EQ(axis_position(lin, 10, 300, 0), 0);  // y grows downwards
  const Axis log = log_axis(0.01, 10);
  // log10(1) is 2 of the 3 decades above 0.01.
  EXPECT_NEAR(axis_position(log, 1, 0, 300), 200, 1e-9);
  EXPECT_NEAR(axis_position(log, 1, 300, 0), 100, 1e-9);
}

TEST(TickLabel, AsManyDigitsAsTheStepNeeds) {
  const Axis a = linear_axis(0.016, 7.0, 5);
  EXPECT_EQ(tick_label(0, a), "0");
  EXPECT_EQ(tick_label(6, a), "6");
  EXPECT_EQ(tick_label(0.95, linear_axis(1, 1, 5)), "0.95");
  EXPECT_EQ(tick_label(2e-3, linear_axis(1e-5, 3e-3, 5)), "0.002");
  // Below 1e-4 or from 1e6: scientific, with the step's digits.
  EXPECT_EQ(tick_label(1.5e-5, linear_axis(0, 2e-5, 4)), "1.5e-05");
  EXPECT_EQ(tick_label(2e6, linear_axis(0, 2.5e6, 5)), "2.0e+06");
  EXPECT_EQ(tick_label(0.01, log_axis(0.016, 7)), "0.01");
  EXPECT_EQ(tick_label(1e13, log_axis(1e-3, 1e13)), "1e+13");
}

Series series(const std::string& label, std::vector<double> x, std::vector<double> y) {
  Series s;
  s.label = label;
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

std::vector<std::string> paths_d(const std::string& svg) {
  std::vector<std::string> out;
  const std::regex re("<path class=\"series\" d=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(RenderSvg, PointsLandOnTheAxesCorners) {
  // x 0..10 (step 2), y 0..8 (step 2): (0,0) is the plot's bottom left, (10,8) its top right.
  Plot p = make_plot("t", "T", "y");
  p.series.push_back(series("a", {0, 10}, {0, 8}));
  const std::string svg = render_svg(p, false);
  const auto d = paths_d(svg);
  ASSERT_EQ(d.size(), 1u);
  // Plot area: x 74..704, y 34 (top)..252 (bottom) (svg_plot.cc layout).
  EXPECT_EQ(d[0], "M74.00 252.00 L704.00 34.00 ");
  EXPECT_NE(svg.find("data-x=\"0,10\" data-y=\"0,8\""), std::string::npos) << svg;
}

TEST(RenderSvg, MissingAndNonPositiveValuesBreakTheLine) {
  Plot p = make_plot("t", "T", "y");
  const double nan = std::nan("");
  p.series.push_back(series("a", {1, 2, 3, 4, 5}, {1, 2, nan, 0, 3}));
  // Linear: the NaN breaks the line, 0 is a point.
  EXPECT_EQ(std::regex_replace(paths_d(render_svg(p, false))[0], std::regex("[^ML]"), ""), "MLML");
  // Log: 0 has no place either; 3 alone gets a circle.
  const std::string log = render_svg(p, true);
  EXPECT_EQ(std::regex_replace(paths_d(log)[0], std::regex("[^ML]"), ""), "MLM");
  EXPECT_NE(log.find("<circle"), std::string::npos);
  EXPECT_NE(log.find("data-y=\"1,2,NaN,0,3\""), std::string::npos);
  EXPECT_TRUE(has_points(p, true));
  Plot empty = make_plot("e", "E", "y");
  empty.series.push_back(series("none", {1, 2}, {nan, -1}));
  EXPECT_FALSE(has_points(empty, true));
  EXPECT_TRUE(has_points(empty, false));
}

TEST(RenderSvg, LabelsAreEscapedAndMarkersDrawn) {
  Plot p = make_plot("t", "a<b & \"c\"", "y");
  p.series.push_back(series("run<1>", {1, 2}, {1, 2}));
  MarkerSet clipped;
  clipped.label = "clipped";
  clipped.color = "#d62728";
  clipped.points = {{2, 2}};
  p.markers.push_back(clipped);
  p.hlines.push_back({1.5, "clip_grad 1.5"});
  const std::string svg = render_svg(p, false);
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("data-label=\"run&lt;1&gt;\""), std::string::npos);
  EXPECT_EQ(svg.find("run<1>"), std::string::npos);
  EXPECT_NE(svg.find("<circle cx=\"704.00\" cy=\"34.00\" r=\"4\" data-x=\"2\" data-y=\"2\"/>"), std::string::npos)
      << svg;
  EXPECT_NE(svg.find("clip_grad 1.5"), std::string::npos);
}

}  // namespace
}  // namespace mtrain::report
