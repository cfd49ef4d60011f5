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
#include <png.h>

#include <cmath>
#include <map>
#include <regex>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr int kIters = 8;

// The browser: $MTRAIN_CHROMIUM, else the first of Debian's two packages on PATH.
std::string find_chromium() {
  if (const char* e = std::getenv("MTRAIN_CHROMIUM"); e && *e) return e;
  for (const char* name : {"chromium-headless-shell", "chromium"}) {
    const std::string probe = std::string("command -v ") + name + " > /dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return name;
  }
  return "";
}

// A shell word: '...' with each ' written as '\''.
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  q += '\'';
  return q;
}

struct Page {
  std::string dom, console;  // --dump-dom output; the browser's stderr log
};

// Opens `url` headless; with `screenshot`, also writes a PNG of the page. As
// root (CI containers) Chromium needs --no-sandbox.
Page open_page(const std::string& url, const fs::path& work, const std::string& tag, const fs::path& screenshot = {}) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    ADD_FAILURE() << "no headless Chromium found: install Debian's chromium-headless-shell (scripts/install_deps.sh "
                     "does) or set MTRAIN_CHROMIUM to the browser";
    return {};
  }
  std::string cmd = "timeout 120 " + quote(chromium) +
                    " --headless --no-sandbox --disable-gpu --no-first-run --force-device-scale-factor=1 "
                    "--window-size=1500,3600 --enable-logging=stderr --v=0 --user-data-dir=" +
                    quote((work / ("profile_" + tag)).string());
  cmd += screenshot.empty() ? " --dump-dom" : " --screenshot=" + quote(screenshot.string());
  cmd += " " + quote(url) + " > " + quote((work / (tag + ".dom")).string()) + " 2> " +
         quote((work / (tag + ".log")).string());
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << read_text(work / (tag + ".log"));
  return {read_text(work / (tag + ".dom")), read_text(work / (tag + ".log"))};
}

std::string attr(const std::string& tag, const std::string& name) {
  std::smatch m;
  if (std::regex_search(tag, m, std::regex(" " + name + "=\"([^\"]*)\""))) return m[1];
  return "";
}

std::vector<std::string> tags(const std::string& html, const std::string& open) {
  std::vector<std::string> out;
  const std::regex re("<" + open + "[^>]*>");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(it->str());
  return out;
}

// One <svg class="plot"> of the DOM and the series paths inside it.
struct SvgPlot {
  std::string tag;
  std::vector<std::string> paths;
  std::string id() const { return attr(tag, "data-plot"); }
  bool log() const { return attr(tag, "data-log") == "1"; }
};

std::vector<SvgPlot> plots_of(const std::string& dom) {
  std::vector<SvgPlot> out;
  size_t at = 0;
  while ((at = dom.find("<svg ", at)) != std::string::npos) {
    const size_t end = dom.find("</svg>", at);
    const std::string body = dom.substr(at, end - at);
    SvgPlot p;
    p.tag = body.substr(0, body.find('>') + 1);
    for (const std::string& t : tags(body, "path class=\"series\"")) p.paths.push_back(t);
    if (attr(p.tag, "class") == "plot") out.push_back(p);
    at = end;
  }
  return out;
}

std::vector<double> numbers(const std::string& csv) {
  std::vector<double> v;
  std::stringstream s(csv);
  std::string item;
  while (std::getline(s, item, ',')) v.push_back(item == "NaN" ? std::nan("") : std::stod(item));
  return v;
}

int path_points(const std::string& path) {
  const std::string d = attr(path, "d");
  return static_cast<int>(std::count(d.begin(), d.end(), 'M') + std::count(d.begin(), d.end(), 'L'));
}

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

// RGB pixels of a PNG (libpng's simplified API).
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

Image read_png(const fs::path& path) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  Image out;
  if (!png_image_begin_read_from_file(&img, path.c_str())) return out;
  img.format = PNG_FORMAT_RGB;
  out.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr)) return {};
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  return out;
}

// Whether pixel p is colour c drawn over white with some coverage a (an
// anti-aliased line pixel): p = a c + (1 - a) 255 with one a for every
// channel (channels where c is near white say nothing about a). Grey grid
// lines, the frame and text give very different a per channel for a colour.
bool is_colour_over_white(const uint8_t* p, const int c[3]) {
  double lo = 1e9, hi = -1e9;
  for (int k = 0; k < 3; ++k) {
    if (255 - c[k] < 40) {
      if (p[k] < 200) return false;
      continue;
    }
    const double a = (255.0 - p[k]) / (255.0 - c[k]);
    lo = std::min(lo, a);
    hi = std::max(hi, a);
  }
  return lo >= 0.3 && hi <= 1.1 && hi - lo <= 0.2;
}

// Pixels inside `rect` ("left,top,width,height" in page pixels) painted in
// `hex` ("#1f77b4"), anti-aliased ones included.
int pixels_of_colour(const Image& img, const std::string& rect, const std::string& hex) {
  const std::vector<double> r = numbers(rect);
  if (r.size() != 4 || hex.size() != 7) return -1;
  const int c[3] = {std::stoi(hex.substr(1, 2), nullptr, 16), std::stoi(hex.substr(3, 2), nullptr, 16),
                    std::stoi(hex.substr(5, 2), nullptr, 16)};
  int n = 0;
  for (int y = std::max(0, int(r[1])); y < std::min(img.height, int(r[1] + r[3])); ++y)
    for (int x = std::max(0, int(r[0])); x < std::min(img.width, int(r[0] + r[2])); ++x)
      n += is_colour_over_white(&img.rgb[(size_t(y) * img.width + x) * 3], c);
  return n;
}

const std::vector<std::string> kPlotIds = {
    "loss", "learning_rate", "grad_norm", "loss_scale", "tokens_per_second", "iteration_time", "memory"};

// The page rectangle of a plot's data area (inside the axes: no legend, no
// title): the svg's place on the page, as the page recorded it, plus the
// frame the svg declares (data-px0/px1 left and right, data-py1/py0 top and bottom).
std::string plot_area(const SvgPlot& p) {
  const std::vector<double> r = numbers(attr(p.tag, "data-rendered-rect"));
  if (r.size() != 4) return "";
  const double scale = r[2] / std::stod(attr(p.tag, "width"));
  const double x0 = std::stod(attr(p.tag, "data-px0")), x1 = std::stod(attr(p.tag, "data-px1"));
  const double top = std::stod(attr(p.tag, "data-py1")), bottom = std::stod(attr(p.tag, "data-py0"));
  std::ostringstream area;  // 1 px inside the frame's border
  area << r[0] + x0 * scale + 1 << ',' << r[1] + top * scale + 1 << ',' << (x1 - x0) * scale - 2 << ','
       << (bottom - top) * scale - 2;
  return area.str();
}

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
class Report : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new fs::path(make_temp_dir("report")); }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (::testing::UnitTest::GetInstance()->Failed())
      std::fprintf(stderr, "[ kept ] captured runs in %s\n", dir_->c_str());
    else
      fs::remove_all(*dir_, ec);
    delete dir_;
  }
  static fs::path dir() { return *dir_; }
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

  static fs::path* dir_;
  static int64_t params_a_;  // run a's parameter count, as it printed it
};
fs::path* Report::dir_ = nullptr;
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

  const Page page = open_page("file://" + html.string() + "#log", dir(), "cmp");
  expect_no_js_errors(page);
  const std::vector<SvgPlot> plots = plots_of(page.dom);
  expect_rendered(plots, {"loss", "loss_scale"}, true);  // #log shows the log views
  expect_rendered(plots, {"learning_rate", "grad_norm", "memory"}, false);
  const auto rows_a = train_rows(dir() / "a"), rows_b = train_rows(dir() / "b");
  expect_values(plots, "loss", "a training", column(rows_a, "loss"));
  expect_values(plots, "loss", "b training", column(rows_b, "loss"));
  expect_values(plots, "loss_scale", "b", column(rows_b, "loss_scale"));
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
