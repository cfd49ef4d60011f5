#include "report/report.h"

#include <fmt/format.h>

#include <filesystem>

#include "common/atomic_file.h"
#include "common/errors.h"
#include "common/file_system.h"
#include "config/flags.h"
#include "report/report_html.h"
#include "report/report_plots.h"
#include "report/run_log.h"

namespace mtrain::report {

namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage = "mtrain report <output_dir> [--compare <output_dir2> ...] [--out FILE]";

[[noreturn]] void usage(const std::string& what) { throw UsageError(what, std::string("usage: ") + kUsage); }

void write_text(FileSystem& fs, const std::string& path, const std::string& text) {
  try {
    write_file_atomic(fs, path, text);
  } catch (const IoError& e) {
    throw ConfigError(fmt::format("mtrain report: cannot write {}: {}", path, e.what()),
                      "choose a writable --out (or run directory)");
  }
}

}  // namespace

std::string report_help() {
  return fmt::format(
      "usage: {}\n\n"
      "Writes a self-contained HTML report of a training run (opens offline): loss (training, validation;\n"
      "log scale option), learning rate, grad norm with the clipped steps, loss scale with skipped and NaN\n"
      "iterations, tokens/s, iteration time, simulated NPU memory by category, layout and key arguments.\n"
      "Works on a finished, running or crashed run (it reads <output_dir>/logging.jsonl and args.json).\n\n"
      "  <output_dir>          the run's --output_dir (--save)\n"
      "  --compare DIR ...     overlay further runs (e.g. the same job at TP=2, or in bf16)\n"
      "  --out FILE            the HTML file (default <output_dir>/report.html); one SVG per plot goes\n"
      "                        to a report/ folder beside it\n",
      kUsage);
}

ReportOptions parse_report_args(const std::vector<std::string>& args) {
  ReportOptions o;
  std::vector<std::string> positional;
  bool in_compare = false;  // `--compare A B` takes every directory up to the next option
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 && a != "-h") {
      (in_compare ? o.compare : positional).push_back(a);
      continue;
    }
    in_compare = false;
    if (a == "-h" || a == "--help") {
      o.help = true;
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = config::normalize_flag_name(a.substr(2, eq == std::string::npos ? a.npos : eq - 2));
    if (name != "compare" && name != "out") {
      std::string msg = fmt::format("unknown option --{} for mtrain report", name);
      if (const std::string s = config::suggest_name(name, {"compare", "out", "help"}); !s.empty())
        msg += fmt::format("; did you mean --{}?", s);
      usage(msg);
    }
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      value = args[++i];
    } else {
      usage(fmt::format("--{} needs a value", name));
    }
    if (name == "out") {
      o.out = value;
    } else {
      o.compare.push_back(value);
      in_compare = true;
    }
  }
  if (o.help) return o;
  if (positional.size() != 1)
    usage(positional.empty() ? "mtrain report needs a run directory"
                             : fmt::format("mtrain report takes one run directory, got {} ({}, ...); overlay the "
                                           "others with --compare",
                                           positional.size(), positional[0]));
  o.run_dir = positional[0];
  if (o.out.empty()) o.out = (fs::path(o.run_dir) / "report.html").string();
  return o;
}

ReportFiles write_report(const ReportOptions& options) {
  std::vector<RunLog> runs = {read_run_dir(options.run_dir)};
  for (const std::string& d : options.compare) runs.push_back(read_run_dir(d));
  // Runs named alike (runs/tp1/out, runs/tp2/out) are labelled by the path given.
  std::vector<bool> shared(runs.size());
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = 0; j < runs.size(); ++j) shared[i] = shared[i] || (i != j && runs[i].label == runs[j].label);
  for (size_t i = 0; i < runs.size(); ++i)
    if (shared[i]) runs[i].label = runs[i].dir;
  const std::vector<Plot> plots = build_plots(runs);
  ReportFiles files;
  for (const RunLog& run : runs) files.warnings.insert(files.warnings.end(), run.warnings.begin(), run.warnings.end());
  PosixFileSystem posix;
  const fs::path html = options.out.empty() ? fs::path(options.run_dir) / "report.html" : fs::path(options.out);
  const fs::path svg_dir = html.parent_path() / "report";
  try {
    posix.create_dirs(svg_dir.string());
  } catch (const IoError& e) {
    throw ConfigError(fmt::format("mtrain report: cannot create {}: {}", svg_dir.string(), e.what()),
                      "choose a writable --out (or run directory)");
  }
  // The standalone files: the linear view, and the log view where the report offers one.
  for (const Plot& p : plots) {
    const std::string header = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    files.svgs.push_back((svg_dir / (p.id + ".svg")).string());
    write_text(posix, files.svgs.back(), header + render_svg(p, false) + "\n");
    if (!p.log_toggle) continue;
    files.svgs.push_back((svg_dir / (p.id + "_log.svg")).string());
    write_text(posix, files.svgs.back(), header + render_svg(p, true) + "\n");
  }
  files.html = html.string();
  write_text(posix, files.html, render_report_html(runs, plots));
  return files;
}

int run_report_command(const ReportOptions& options, std::ostream& out) {
  const ReportFiles files = write_report(options);
  for (const std::string& w : files.warnings) fmt::print(stderr, "mtrain report: warning: {}\n", w);
  out << fmt::format("report: {} ({} plots, SVG files in {})\n", files.html, files.svgs.size(),
                     (fs::path(files.html).parent_path() / "report").string());
  return 0;
}

}  // namespace mtrain::report
