// `mtrain report` end to end, in a real headless browser (Debian's
// chromium-headless-shell, installed by scripts/install_deps.sh; a missing
// browser fails the suite, it does not skip). Two short training runs of the
// demo job (one fp32 with a low --clip_grad so steps are clipped, one fp16
// whose first steps overflow and are skipped, --report false) write their
// logs; the report of the first is written by the training itself, a
// comparison by `mtrain report`. Chromium opens both: every plot's series
// must be laid out (the page's script records each path's rendered length
// and box) and painted (its colour in the screenshot's plot area), the
// numbers behind every series must be logging.jsonl's, and no JavaScript
// error may reach the page's error record or the console.

#include <cmath>
#include <map>
#include <regex>

#include "headless_browser.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr int kIters = 8;

// Every plot in `ids` shown in the view (`log`) is laid out by the browser:
// a series with >= 2 points has a rendered length and a box of nonzero width.
void expect_rendered(const std::vector<SvgPlot>& plots, const std::vector<std::string>& ids, bool log) {
  for (const std::string& id : ids) {
    const auto it =
        std::find_if(plots.begin(), plots.end(), [&](const SvgPlot& p) { return p.id() == id && p.log() == log; });
    ASSERT_NE(it, plots.end()) << "no " << (log ? "log" : "linear") << " plot " << id;
    int drawn = 0;
    for (const std::string& path : it->paths) {
      if (path_points(path) < 2) continue;
      ++drawn;
      EXPECT_GT(std::stod(attr(path, "data-rendered-length") + "0"), 0) << id << ": " << path.substr(0, 300);
      const std::string box = attr(path, "data-rendered-box");
      EXPECT_GT(box.empty() ? 0 : std::stod(box.substr(0, box.find('x'))), 0) << id << ": " << box;
    }
    EXPECT_GE(drawn, 1) << id << ": no series with two points";
  }
}

void expect_no_js_errors(const Page& page) {
  const std::vector<std::string> root = tags(page.dom, "html");
  ASSERT_FALSE(root.empty()) << page.dom.substr(0, 500);
  EXPECT_EQ(attr(root[0], "data-report-ready"), "1") << "the page's script did not finish";
  EXPECT_EQ(root[0].find("data-js-errors"), std::string::npos) << attr(root[0], "data-js-errors");
  EXPECT_EQ(page.console.find(":CONSOLE"), std::string::npos) << page.console;
}

// The series' numbers (data-y) are logging.jsonl's.
void expect_values(const std::vector<SvgPlot>& plots, const std::string& id, const std::string& label,
                   const std::vector<double>& want) {
  for (const SvgPlot& p : plots) {
    if (p.id() != id || p.log()) continue;
    for (const std::string& path : p.paths) {
      if (attr(path, "data-label") != label) continue;
      const std::vector<double> got = numbers(attr(path, "data-y"));
      ASSERT_EQ(got.size(), want.size()) << id << " / " << label;
      for (size_t i = 0; i < want.size(); ++i)
        if (std::isnan(want[i]))
          EXPECT_TRUE(std::isnan(got[i])) << id << " / " << label << " [" << i << "]";
        else
          EXPECT_EQ(got[i], want[i]) << id << " / " << label << " [" << i << "]";
      return;
    }
  }
  ADD_FAILURE() << "no series '" << label << "' in plot " << id;
}

std::vector<double> column(const std::vector<nlohmann::json>& rows, const std::string& key) {
  std::vector<double> v;
  for (const auto& r : rows) v.push_back(r.contains(key) && r[key].is_number() ? r[key].get<double>() : std::nan(""));
  return v;
}

const std::vector<std::string> kPlotIds = {
    "loss", "learning_rate", "grad_norm", "loss_scale", "tokens_per_second", "iteration_time", "memory"};

// Each series with a line is painted: its colour appears in its plot's
// rectangle (recorded by the page in `page`, the same window size).
void expect_painted(const Page& page, const fs::path& html, const fs::path& dir) {
  const fs::path png = dir / "a.png";
  open_page("file://" + html.string(), dir, "a_png", png);
  const Image img = read_png(png);
  ASSERT_GT(img.width, 0) << "no readable screenshot " << png;
  int checked = 0;
  for (const SvgPlot& p : plots_of(page.dom)) {
    if (p.log()) continue;
    const std::string rect = plot_area(p);
    for (size_t i = 0; i < p.paths.size(); ++i) {
      const std::string& path = p.paths[i];
      if (path_points(path) < 2) continue;
      // Equal series (fp32 gradients take what the weights take) lie under the last one drawn.
      const auto same = [&](const std::string& later) { return attr(later, "data-y") == attr(path, "data-y"); };
      if (std::any_of(p.paths.begin() + i + 1, p.paths.end(), same)) continue;
      // A line across the plot paints well over 20 pixels in its colour.
      EXPECT_GE(pixels_of_colour(img, rect, attr(path, "data-color")), 20)
          << p.id() << " / " << attr(path, "data-label") << " in " << rect;
      ++checked;
    }
  }
  EXPECT_GE(checked, static_cast<int>(kPlotIds.size()));
}

// The runs are made on first use (ctest runs each case in its own process).
class Report : public SuiteTest {
 protected:
  static void SetUpTestSuite() { make_suite_dir("report"); }
  static fs::path dir() { return suite_dir(); }
  // a: fp32, clipped at 0.5 (the demo's first grad norms are above it); the training writes the report.
  static void train_a() {
    const RunResult r =
        run_mtrain(concat(demo_sft_args(kIters, dir() / "a"), words("--eval_interval 4 --clip_grad 0.5")), dir(), "a");
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const fs::path html = dir() / "a" / "report.html";
    EXPECT_TRUE(contains(r.out, " > report: " + html.string())) << r.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("number of parameters on .*: (\\d+)"))) << r.out;
    params_a_ = std::stoll(m[1]);
  }
  // b: fp16 from a loss scale that overflows at first (skipped iterations); no report at the end.
  static void train_b() {
    const RunResult r = run_mtrain(
        concat(demo_sft_args(kIters, dir() / "b"),
               words("--eval_interval 4 --fp16 --initial_loss_scale 4294967296 --hysteresis 1 --report false")),
        dir(), "b");
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_FALSE(fs::exists(dir() / "b" / "report.html")) << "--report false wrote a report";
  }

  static int64_t params_a_;  // run a's parameter count, as it printed it
};
int64_t Report::params_a_ = 0;

TEST_F(Report, TrainingWritesItsReportAndTheBrowserRendersAndPaintsEveryPlot) {
  ASSERT_NO_FATAL_FAILURE(train_a());
  const fs::path html = dir() / "a" / "report.html";
  ASSERT_TRUE(fs::exists(html));
  // Self-contained: no URL but the SVG namespace name (which loads nothing).
  const std::string text = std::regex_replace(read_text(html), std::regex("xmlns=\"http://www.w3.org/2000/svg\""), "");
  EXPECT_EQ(text.find("http"), std::string::npos) << "the report must not load anything";
  EXPECT_EQ(text.find(" src="), std::string::npos);

  const Page page = open_page("file://" + html.string(), dir(), "a");
  expect_no_js_errors(page);
  const std::vector<SvgPlot> plots = plots_of(page.dom);
  expect_rendered(plots, kPlotIds, false);
  expect_painted(page, html, dir());

  const auto rows = train_rows(dir() / "a");
  ASSERT_EQ(rows.size(), static_cast<size_t>(kIters));
  expect_values(plots, "loss", "training", column(rows, "loss"));
  std::vector<nlohmann::json> evals;  // every validation row, the final one too
  for (const auto& row : read_jsonl(dir() / "a" / "logging.jsonl"))
    if (row.contains("eval_loss")) evals.push_back(row);
  ASSERT_EQ(evals.size(), 3u);  // iterations 4 and 8, and the final evaluation
  expect_values(plots, "loss", "validation", column(evals, "eval_loss"));
  expect_values(plots, "learning_rate", "learning rate", column(rows, "learning_rate"));
  expect_values(plots, "grad_norm", "grad norm", column(rows, "grad_norm"));
  expect_values(plots, "tokens_per_second", "tokens/s", column(rows, "tokens_per_second"));
  expect_values(plots, "iteration_time", "ms", column(rows, "elapsed_time_per_iteration_ms"));
  // The memory keys: fp32 weights and gradients 4 bytes per parameter, Adam's two fp32 states 8.
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("memory/weights").get<int64_t>(), 4 * params_a_);
    EXPECT_EQ(row.at("memory/gradients").get<int64_t>(), 4 * params_a_);
    EXPECT_EQ(row.at("memory/optimizer_states").get<int64_t>(), 8 * params_a_);
    EXPECT_GT(row.at("memory/activations").get<int64_t>(), 0);
  }
  std::vector<double> weights_mib;
  for (double b : column(rows, "memory/weights")) weights_mib.push_back(b / double(1 << 20));
  expect_values(plots, "memory", "weights", weights_mib);
  // Each step above --clip_grad 0.5 is marked.
  int clipped = 0;
  for (double g : column(rows, "grad_norm")) clipped += g > 0.5;
  EXPECT_GT(clipped, 0);
  const std::string grad_svg = read_text(dir() / "a" / "report" / "grad_norm.svg");
  const size_t marks = grad_svg.find("data-label=\"clipped (grad norm &gt; clip_grad)\"");
  ASSERT_NE(marks, std::string::npos) << grad_svg;
  const std::string mark_group = grad_svg.substr(marks, grad_svg.find("</g>", marks) - marks);
  EXPECT_EQ(static_cast<int>(tags(mark_group, "circle").size()), clipped);
}

TEST_F(Report, CompareOverlaysRunsAndTheLogViewRenders) {
  ASSERT_NO_FATAL_FAILURE(train_a());
  ASSERT_NO_FATAL_FAILURE(train_b());
  const fs::path html = dir() / "cmp" / "index.html";
  const RunResult r = run_mtrain(
      {"report", (dir() / "a").string(), "--compare", (dir() / "b").string(), "--out", html.string()}, dir(), "cmp");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "report: " + html.string())) << r.out;
  for (const char* svg : {"loss.svg", "loss_log.svg", "grad_norm.svg", "memory.svg", "loss_scale_log.svg"})
    EXPECT_TRUE(fs::exists(dir() / "cmp" / "report" / svg)) << svg;

  const Page page = open_page("file://" + html.string() + "#log,hover=4", dir(), "cmp");
  expect_no_js_errors(page);
  const std::vector<SvgPlot> plots = plots_of(page.dom);
  expect_rendered(plots, {"loss", "loss_scale"}, true);  // #log shows the log views
  expect_rendered(plots, {"learning_rate", "grad_norm", "memory"}, false);
  const auto rows_a = train_rows(dir() / "a"), rows_b = train_rows(dir() / "b");
  expect_values(plots, "loss", "a training", column(rows_a, "loss"));
  // An interval whose iterations were all skipped has no lm loss (Megatron prints none; the JSON says 0).
  std::vector<double> loss_b = column(rows_b, "loss");
  for (size_t i = 0; i < loss_b.size(); ++i)
    if (loss_b[i] == 0 && rows_b[i].at("skipped_iterations").get<int>() > 0) loss_b[i] = std::nan("");
  expect_values(plots, "loss", "b training", loss_b);
  expect_values(plots, "loss_scale", "b", column(rows_b, "loss_scale"));
  // Hovering at iteration 4 shows each run's value there (JavaScript's toPrecision(5) is C's %.5g here).
  for (const SvgPlot& p : plots) {
    if (p.id() != "loss" || p.log()) continue;
    for (const auto& [run, loss] : {std::pair{"a", column(rows_a, "loss")}, std::pair{"b", loss_b}}) {
      if (std::isnan(loss[3])) continue;  // the nearest logged loss is elsewhere
      char want[96];
      std::snprintf(want, sizeof want, "%s training: %.5g @ 4", run, loss[3]);
      EXPECT_TRUE(contains(p.hover, want)) << "'" << want << "' not in '" << p.hover << "'";
    }
  }
  // fp16's skipped iterations are marked on the loss scale, one mark per interval with skips.
  int skipped = 0;
  for (double s : column(rows_b, "skipped_iterations")) skipped += s > 0;
  EXPECT_GT(skipped, 0) << "the fp16 run skipped no iteration";
  const std::string dom = page.dom;
  const size_t marks = dom.find("data-label=\"interval with skipped iterations\"");
  ASSERT_NE(marks, std::string::npos);
  EXPECT_EQ(static_cast<int>(tags(dom.substr(marks, dom.find("</g>", marks) - marks), "circle").size()), skipped);
  // The arguments that differ are marked.
  EXPECT_TRUE(std::regex_search(dom, std::regex("<tr class=\"differs\"><td>fp16</td>"))) << "fp16 row not marked";
}

TEST_F(Report, ACrashedRunWithoutValidationStillGetsItsReport) {
  ASSERT_NO_FATAL_FAILURE(train_a());
  // a's log without its validation rows, cut in the middle of the last row (a killed writer).
  const fs::path run = dir() / "crashed";
  fs::create_directories(run);
  fs::copy_file(dir() / "a" / "args.json", run / "args.json");
  std::string text;
  for (const auto& row : train_rows(dir() / "a")) text += row.dump() + "\n";
  text.resize(text.size() - 40);
  write_text(run / "logging.jsonl", text);
  const RunResult r = run_mtrain({"report", run.string()}, dir(), "crashed");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string html = read_text(run / "report.html");
  EXPECT_NE(html.find("an unfinished last line of logging.jsonl was skipped"), std::string::npos);
  EXPECT_NE(html.find("at iteration " + std::to_string(kIters - 1) + " of " + std::to_string(kIters)),
            std::string::npos);
  EXPECT_EQ(html.find("data-label=\"validation\""), std::string::npos);
  const std::vector<SvgPlot> plots = plots_of(html);
  ASSERT_FALSE(plots.empty());
  EXPECT_EQ(path_points(plots[0].paths[0]), kIters - 1);
}

TEST_F(Report, ADirectoryThatIsNotARunIsRefused) {
  fs::create_directories(dir() / "a");
  write_text(dir() / "a" / "args.json", "{}");
  const fs::path missing = dir() / "no_such_run";
  const RunResult r1 = run_mtrain({"report", missing.string()}, dir(), "missing");
  EXPECT_EQ(r1.exit_code, 2) << r1.describe();
  EXPECT_TRUE(contains(r1.err, missing.string() + ": no such directory")) << r1.err;
  const fs::path not_run = dir() / "not_a_run";
  fs::create_directories(not_run);
  fs::copy_file(dir() / "a" / "args.json", not_run / "args.json");
  const RunResult r2 = run_mtrain({"report", not_run.string()}, dir(), "not_run");
  EXPECT_EQ(r2.exit_code, 4) << r2.describe();
  EXPECT_TRUE(contains(r2.err, not_run.string() + " is not a run directory: it has no logging.jsonl")) << r2.err;
  const RunResult r3 = run_mtrain({"report", (dir() / "a").string(), (dir() / "b").string()}, dir(), "two");
  EXPECT_EQ(r3.exit_code, 2) << r3.describe();
  EXPECT_TRUE(contains(r3.err, "overlay the others with --compare")) << r3.err;
}

}  // namespace
}  // namespace mtrain::functional
