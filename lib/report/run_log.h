// A run directory as `mtrain report` reads it: the logged rows of
// <output_dir>/logging.jsonl (train rows and validation rows, logger.h) and
// the resolved arguments of <output_dir>/args.json. Made to read a run that
// is still writing or was killed: a truncated last line is skipped and
// counted, a missing key is NaN (no point), a run without validation has no
// validation rows. A resumed run appends to the same file; its rows replace
// the earlier rows they repeat (iteration going back), as its checkpoint
// replaced that training.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mtrain::report {

// One training row (one logged interval). NaN: key absent or null.
struct TrainRow {
  int64_t iteration = 0;
  int64_t train_iters = 0;  // 0: unknown
  double loss = 0, learning_rate = 0, grad_norm = 0, loss_scale = 0;
  double skipped = 0, nans = 0;  // iterations skipped / with NaN in the interval
  double iteration_ms = 0, tokens_per_second = 0;
  // "memory/<category>" keys (bytes), category -> value, in the logger's order.
  std::vector<std::pair<std::string, double>> memory;
};

struct EvalRow {
  int64_t iteration = 0;
  double loss = 0;
};

struct RunLog {
  std::string dir;    // as given
  std::string label;  // the directory's name
  std::vector<TrainRow> train;
  std::vector<EvalRow> eval;
  nlohmann::json args;                // args.json; null when absent
  int64_t truncated_lines = 0;        // an unfinished last line (a writer killed or still writing)
  std::vector<std::string> warnings;  // "<file>:<line>: ..." for lines that were skipped
};

// Parses logging.jsonl text; `file` names it in warnings.
void parse_logging_jsonl(std::istream& in, const std::string& file, RunLog& log);

// Reads a run directory. Throws UsageError (exit 2) when `dir` is not a
// directory, DataError (exit 4) when it holds no logging.jsonl or no logged
// iteration, naming the path and what is missing.
RunLog read_run_dir(const std::string& dir);

// A value of args.json as text ("" when absent).
std::string arg_text(const nlohmann::json& args, const std::string& key);

}  // namespace mtrain::report
