// The run report as one self-contained HTML page: the runs, their state and
// layout, every plot as inline SVG (log-scale plots twice, switched by a
// checkbox), then the key arguments (one column per run, differing rows
// marked) and a little inline script for the switch and hover values. No
// external resource: it opens offline. The script also records any
// JavaScript error in the root element's data-js-errors attribute, and the
// rendered length and box of every visible series in data-rendered-length /
// data-rendered-box, which the headless-browser test reads from the DOM.
// Opening it as report.html#log shows every log-scale view, #hover=N the
// values nearest iteration N as pointing there would (both: #log,hover=N).
#pragma once

#include <string>
#include <vector>

#include "report/run_log.h"
#include "report/svg_plot.h"

namespace mtrain::report {

std::string render_report_html(const std::vector<RunLog>& runs, const std::vector<Plot>& plots);

// The layout of a run in one line: "TP 2 · PP 1 · CP 1 · EP 1 · DP 1 (2 ranks) · bf16".
std::string layout_summary(const RunLog& run);

}  // namespace mtrain::report
