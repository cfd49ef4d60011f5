// `mtrain report <output_dir> [--compare <output_dir2> ...] [--out FILE]`:
// reads the run directories (run_log.h), builds the plots (report_plots.h)
// and writes one self-contained report.html (report_html.h) plus one SVG per
// plot in a report/ folder beside it (loss.svg, loss_log.svg, ...). The
// trainer calls write_report at the end of a run (--report, default true).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mtrain::report {

struct ReportOptions {
  std::string run_dir;
  std::vector<std::string> compare;  // further runs overlaid on run_dir's
  std::string out;                   // empty: <run_dir>/report.html
  bool help = false;
};

// Throws UsageError (exit 2) for a bad command line.
ReportOptions parse_report_args(const std::vector<std::string>& args);
std::string report_help();

struct ReportFiles {
  std::string html;
  std::vector<std::string> svgs;
  std::vector<std::string> warnings;  // lines of logging.jsonl that were skipped
};

// Reads the runs and writes the files (atomically, so a report being
// rewritten is never half-read). Throws UsageError / DataError for a
// directory that is not a run, ConfigError (exit 3) when a file cannot be written.
ReportFiles write_report(const ReportOptions& options);

// The command: writes the report and says where it is.
int run_report_command(const ReportOptions& options, std::ostream& out);

}  // namespace mtrain::report
