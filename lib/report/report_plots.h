// The run report's plots from one or more runs (run_log.h): loss (training and
// validation, log-scale view), learning rate, grad norm with the clipped
// steps marked against the run's --clip_grad, loss scale with skipped and NaN
// iterations marked, tokens/s, iteration time and the simulated NPU's memory
// by category. Several runs are overlaid, one colour per run, labelled by
// their directory name.
#pragma once

#include <vector>

#include "report/run_log.h"
#include "report/svg_plot.h"

namespace mtrain::report {

// Plots with at least one point; a plot no run has data for is left out
// (e.g. memory for a run logged before the memory keys existed).
std::vector<Plot> build_plots(const std::vector<RunLog>& runs);

// The run's --clip_grad from args.json; 0 (no clipping) when absent.
double clip_threshold(const RunLog& run);

}  // namespace mtrain::report
