#include "report/run_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/errors.h"

namespace mtrain::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double number(const json& row, const char* key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<double>() : kNaN;
}

// "iteration" is "N/T" in training rows (ms-swift's), a number in validation rows.
bool read_iteration(const json& row, int64_t* iteration, int64_t* total) {
  const auto it = row.find("iteration");
  if (it == row.end()) return false;
  if (it->is_number_integer()) {
    *iteration = it->get<int64_t>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string s = it->get<std::string>();
  long long n = 0, t = 0;
  if (std::sscanf(s.c_str(), "%lld/%lld", &n, &t) < 1) return false;
  *iteration = n;
  *total = t;
  return true;
}

TrainRow train_row(const json& row, int64_t iteration, int64_t total) {
  TrainRow r;
  r.iteration = iteration;
  r.train_iters = total;
  r.loss = number(row, "loss");
  r.learning_rate = number(row, "learning_rate");
  r.grad_norm = number(row, "grad_norm");
  r.loss_scale = number(row, "loss_scale");
  r.skipped = number(row, "skipped_iterations");
  r.nans = number(row, "nan_iterations");
  // An interval whose every iteration was skipped has no loss; the logger writes 0 (Megatron prints none).
  if (r.loss == 0 && r.skipped > 0) r.loss = kNaN;
  r.iteration_ms = number(row, "elapsed_time_per_iteration_ms");
  r.tokens_per_second = number(row, "tokens_per_second");
  for (const auto& [key, value] : row.items())
    if (key.rfind("memory/", 0) == 0 && value.is_number()) r.memory.emplace_back(key.substr(7), value.get<double>());
  return r;
}

// A resumed run starts again from its checkpoint: its first row replaces the
// rows from that iteration on.
void add_train_row(RunLog& log, TrainRow r) {
  const int64_t it = r.iteration;
  if (!log.train.empty() && it <= log.train.back().iteration) {
    std::erase_if(log.train, [it](const TrainRow& t) { return t.iteration >= it; });
    std::erase_if(log.eval, [it](const EvalRow& e) { return e.iteration >= it; });
  }
  log.train.push_back(std::move(r));
}

// One line; false when it is not JSON.
bool add_line(RunLog& log, const std::string& line) {
  json row;
  try {
    row = json::parse(line);
  } catch (const json::parse_error&) {
    return false;
  }
  if (!row.is_object()) return false;
  int64_t iteration = 0, total = 0;
  if (!read_iteration(row, &iteration, &total)) return true;  // not a row the report plots
  if (row.contains("eval_loss")) {
    log.eval.push_back({iteration, number(row, "eval_loss")});
  } else if (row.contains("loss")) {
    add_train_row(log, train_row(row, iteration, total));
  }
  return true;
}

}  // namespace

void parse_logging_jsonl(std::istream& in, const std::string& file, RunLog& log) {
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  size_t start = 0;
  int64_t line_no = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const bool finished = end != std::string::npos;  // a writer ends every row with '\n'
    if (!finished) end = text.size();
    const std::string line = text.substr(start, end - start);
    ++line_no;
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (add_line(log, line)) continue;
    if (!finished) {
      ++log.truncated_lines;  // cut short by a killed (or still running) writer
    } else {
      log.warnings.push_back(fmt::format("{}:{}: not a JSON object, skipped", file, line_no));
    }
  }
}

std::string arg_text(const json& args, const std::string& key) {
  if (!args.is_object()) return "";
  const auto it = args.find(key);
  if (it == args.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string s;
    for (const json& v : *it) {
      if (!s.empty()) s += ' ';
      s += v.is_string() ? v.get<std::string>() : v.dump();
    }
    return s;
  }
  return it->dump();
}

static json read_args(const fs::path& path, RunLog& log) {
  std::ifstream f(path);
  if (!f) return nullptr;
  try {
    return json::parse(f);
  } catch (const json::parse_error& e) {
    log.warnings.push_back(fmt::format("{}: not valid JSON ({}); the arguments are left out", path.string(), e.what()));
    return nullptr;
  }
}

RunLog read_run_dir(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::exists(d, ec))
    throw UsageError(fmt::format("mtrain report: {}: no such directory", dir),
                     "give the --output_dir (--save) of a training run");
  if (!fs::is_directory(d, ec))
    throw UsageError(fmt::format("mtrain report: {} is not a directory", dir),
                     "give the --output_dir (--save) of a training run, not a file in it");
  RunLog log;
  log.dir = dir;
  log.label = fs::weakly_canonical(d, ec).filename().string();
  if (log.label.empty()) log.label = dir;
  const fs::path jsonl = d / "logging.jsonl";
  const bool has_args = fs::exists(d / "args.json", ec);
  std::ifstream in(jsonl);
  if (!in)
    throw DataError(fmt::format("mtrain report: {} is not a run directory: it has no logging.jsonl{}", dir,
                                has_args ? " (args.json is there: the run has not logged an iteration yet)" : ""),
                    "give the --output_dir (--save) of a training run; a run writes logging.jsonl at each "
                    "--log_interval");
  parse_logging_jsonl(in, jsonl.string(), log);
  if (log.train.empty())
    throw DataError(fmt::format("mtrain report: {} holds no logged training iteration yet", jsonl.string()),
                    "a run writes a row every --log_interval iterations; try again after the first one");
  log.args = read_args(d / "args.json", log);
  return log;
}

}  // namespace mtrain::report
