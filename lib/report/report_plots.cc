#include "report/report_plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace mtrain::report {

namespace {

using RowValue = std::function<double(const TrainRow&)>;

MarkerSet marker_set(std::string label, std::string color) {
  MarkerSet m;
  m.label = std::move(label);
  m.color = std::move(color);
  return m;
}

// "training" for one run, "<run> training" when several are overlaid.
std::string name_of(const std::vector<RunLog>& runs, size_t i, const std::string& what) {
  if (runs.size() == 1) return what;
  return what.empty() ? runs[i].label : runs[i].label + " " + what;
}

Series train_series(const RunLog& run, const RowValue& value) {
  Series s;
  for (const TrainRow& r : run.train) {
    s.x.push_back(static_cast<double>(r.iteration));
    s.y.push_back(value(r));
  }
  return s;
}

// One series per run of one training-row value.
Plot per_run_plot(const std::vector<RunLog>& runs, const std::string& id, const std::string& title,
                  const std::string& y_label, const RowValue& value) {
  Plot p = make_plot(id, title, y_label);
  for (size_t i = 0; i < runs.size(); ++i) {
    Series s = train_series(runs[i], value);
    s.label = name_of(runs, i, "");
    if (s.label.empty()) s.label = y_label;
    s.color = static_cast<int>(i);
    p.series.push_back(std::move(s));
  }
  return p;
}

Plot loss_plot(const std::vector<RunLog>& runs) {
  Plot p = make_plot("loss", "Loss", "lm loss");
  p.log_toggle = true;
  for (size_t i = 0; i < runs.size(); ++i) {
    Series train = train_series(runs[i], [](const TrainRow& r) { return r.loss; });
    train.label = name_of(runs, i, "training");
    train.color = static_cast<int>(i);
    p.series.push_back(std::move(train));
    if (runs[i].eval.empty()) continue;
    Series val;
    val.label = name_of(runs, i, "validation");
    val.color = static_cast<int>(i);
    val.dashed = true;
    for (const EvalRow& e : runs[i].eval) {
      val.x.push_back(static_cast<double>(e.iteration));
      val.y.push_back(e.loss);
    }
    p.series.push_back(std::move(val));
  }
  return p;
}

// The logged grad norm is the pre-clip norm: above --clip_grad, the step was clipped.
Plot grad_norm_plot(const std::vector<RunLog>& runs) {
  Plot p = per_run_plot(runs, "grad_norm", "Gradient norm (before clipping)", "grad norm",
                        [](const TrainRow& r) { return r.grad_norm; });
  MarkerSet clipped = marker_set("clipped (grad norm > clip_grad)", "#d62728");
  std::vector<double> thresholds;
  for (const RunLog& run : runs) {
    const double clip = clip_threshold(run);
    if (clip <= 0) continue;
    if (std::find(thresholds.begin(), thresholds.end(), clip) == thresholds.end()) thresholds.push_back(clip);
    for (const TrainRow& r : run.train)
      if (r.grad_norm > clip) clipped.points.emplace_back(static_cast<double>(r.iteration), r.grad_norm);
  }
  for (double t : thresholds) p.hlines.push_back({t, fmt::format("clip_grad {}", t)});
  if (!clipped.points.empty()) p.markers.push_back(std::move(clipped));
  return p;
}

// Skipped (fp16 overflow) and NaN iterations of each logged interval, marked on the loss scale.
Plot loss_scale_plot(const std::vector<RunLog>& runs) {
  Plot p = per_run_plot(runs, "loss_scale", "Loss scale, skipped and NaN iterations", "loss scale",
                        [](const TrainRow& r) { return r.loss_scale; });
  p.log_toggle = true;
  MarkerSet skipped = marker_set("interval with skipped iterations", "#ff7f0e");
  MarkerSet nans = marker_set("interval with NaN iterations", "#d62728");
  for (const RunLog& run : runs)
    for (const TrainRow& r : run.train) {
      const double x = static_cast<double>(r.iteration);
      if (r.skipped > 0) skipped.points.emplace_back(x, r.loss_scale);
      if (r.nans > 0) nans.points.emplace_back(x, r.loss_scale);
    }
  if (!skipped.points.empty()) p.markers.push_back(std::move(skipped));
  if (!nans.points.empty()) p.markers.push_back(std::move(nans));
  return p;
}

// The categories any run logged with a nonzero value, in first-seen order
// (communication buffers are zero without DP overlap, "other" mostly is).
std::vector<std::string> memory_categories(const std::vector<RunLog>& runs) {
  std::vector<std::string> names;
  for (const RunLog& run : runs)
    for (const TrainRow& r : run.train)
      for (const auto& [name, bytes] : r.memory)
        if (bytes != 0 && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  return names;
}

Plot memory_plot(const std::vector<RunLog>& runs) {
  Plot p = make_plot("memory", "Simulated NPU memory by category (at each logged step)", "MiB");
  const std::vector<std::string> names = memory_categories(runs);
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t c = 0; c < names.size(); ++c) {
      Series s = train_series(runs[i], [&](const TrainRow& r) {
        for (const auto& [name, bytes] : r.memory)
          if (name == names[c]) return bytes / double(1 << 20);
        return std::nan("");
      });
      s.label = name_of(runs, i, names[c]);
      s.color = static_cast<int>(i * names.size() + c);
      s.dashed = i % 2 == 1;  // a second run's categories stay apart from the first's
      p.series.push_back(std::move(s));
    }
  return p;
}

}  // namespace

double clip_threshold(const RunLog& run) {
  if (!run.args.is_object()) return 0;
  const auto it = run.args.find("clip_grad");
  return it != run.args.end() && it->is_number() ? it->get<double>() : 0;
}

std::vector<Plot> build_plots(const std::vector<RunLog>& runs) {
  std::vector<Plot> all = {
      loss_plot(runs),
      per_run_plot(runs, "learning_rate", "Learning rate", "learning rate",
                   [](const TrainRow& r) { return r.learning_rate; }),
      grad_norm_plot(runs),
      loss_scale_plot(runs),
      per_run_plot(runs, "tokens_per_second", "Throughput", "tokens/s",
                   [](const TrainRow& r) { return r.tokens_per_second; }),
      per_run_plot(runs, "iteration_time", "Elapsed time per iteration (mean over the interval)", "ms",
                   [](const TrainRow& r) { return r.iteration_ms; }),
      memory_plot(runs),
  };
  std::vector<Plot> kept;
  for (Plot& p : all)
    if (has_points(p, false)) kept.push_back(std::move(p));
  return kept;
}

}  // namespace mtrain::report
