// Reading a measured run: arguments, iteration times, the median step (measured_run.h).
#include "calibrate/measured_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "calibrate/megatron_args.h"
#include "common/errors.h"
#include "config/cli.h"
#include "config/json.h"
#include "config/validate.h"

namespace mtrain::calibrate {

namespace fs = std::filesystem;

namespace {

constexpr const char* kRunsHint =
    "--runs takes mtrain run directories (args.json + logging.jsonl) or Megatron-LM stdout logs (the arguments "
    "block and the 'elapsed time per iteration (ms)' lines)";

std::vector<std::string> read_lines(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw DataError(fmt::format("{}: cannot read", file), kRunsHint);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(std::move(l));
  return lines;
}

// The one *.log / *.txt file of a run directory.
std::string log_in(const std::string& dir) {
  std::vector<std::string> logs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".log" || e.path().extension() == ".txt"))
      logs.push_back(e.path().string());
  std::sort(logs.begin(), logs.end());
  if (logs.size() == 1) return logs[0];
  throw DataError(fmt::format("{}: {} log files (*.log, *.txt) and no logging.jsonl", dir,
                              logs.empty() ? "no" : std::to_string(logs.size())),
                  "give the log file itself in --runs");
}

// One iteration line: " iteration  N/  M | ... elapsed time per iteration (ms): X |". False: not one.
bool iteration_line(const std::string& l, const std::string& file, int line_no, int& iteration, double& ms) {
  static constexpr std::string_view kElapsed = "elapsed time per iteration (ms):";
  const size_t e = l.find(kElapsed);
  if (e == std::string::npos) return false;
  const size_t it = l.rfind("iteration ", e);
  char* end = nullptr;
  const char* p = l.c_str() + e + kElapsed.size();
  ms = std::strtod(p, &end);
  if (end == p || it == std::string::npos)
    throw DataError(fmt::format("{}:{}: an 'elapsed time per iteration (ms)' line without {}", file, line_no,
                                end == p ? "its number" : "its iteration"),
                    "Megatron's format: ' iteration 10/ 100 | ... | elapsed time per iteration (ms): 1234.6 |'");
  iteration = std::atoi(l.c_str() + it + 10);
  if (!(ms > 0) || iteration < 1)
    throw DataError(fmt::format("{}:{}: iteration {} with elapsed time {} ms", file, line_no, iteration, ms),
                    "an iteration number >= 1 and a positive time per iteration");
  return true;
}

void add_lines_from_log(const std::vector<std::string>& lines, const std::string& file, MeasuredRun& run) {
  for (size_t i = 0; i < lines.size(); ++i) {
    int it = 0;
    double ms = 0;
    if (iteration_line(lines[i], file, static_cast<int>(i) + 1, it, ms)) {
      run.iterations.push_back(it);
      run.iteration_ms.push_back(ms);
    }
  }
}

void add_lines_from_jsonl(const std::string& file, MeasuredRun& run) {
  const std::vector<std::string> lines = read_lines(file);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(lines[i]);
    } catch (const nlohmann::json::parse_error& e) {
      throw DataError(fmt::format("{}:{}: not JSON: {}", file, i + 1, e.what()), "one JSON object per line");
    }
    // Training records: "iteration": "10/100" (validation records have an integer iteration).
    if (!j.is_object() || !j.contains("elapsed_time_per_iteration_ms") || !j["iteration"].is_string()) continue;
    const std::string it = j["iteration"].get<std::string>();
    const auto& ms = j["elapsed_time_per_iteration_ms"];
    if (!ms.is_number() || !(ms.get<double>() > 0) || std::atoi(it.c_str()) < 1)
      throw DataError(
          fmt::format("{}:{}: iteration '{}' with elapsed_time_per_iteration_ms {}", file, i + 1, it, ms.dump()),
          "an iteration 'N/M' with N >= 1 and a positive time");
    run.iterations.push_back(std::atoi(it.c_str()));
    run.iteration_ms.push_back(ms.get<double>());
  }
}

// Whether `text` holds `name` as a whole word (not inside a longer name).
bool names_word(const std::string& text, const std::string& name) {
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const size_t end = at + name.size();
    if ((at == 0 || !word(text[at - 1])) && (end == text.size() || !word(text[end]))) return true;
  }
  return false;
}

// The Megatron log's arguments as validated Args; errors name the log line of the flag they concern.
config::Args args_from_block(const std::vector<std::string>& lines, const std::string& file) {
  const std::vector<MegatronArgument> block = read_arguments_block(lines, file);
  if (block.empty())
    throw DataError(fmt::format("{}: no Megatron arguments block ('-- arguments --' ... 'end of arguments')", file),
                    "give the log from the start of the run, or an mtrain run directory with args.json");
  const MappedArguments m = map_megatron_arguments(block, file);
  if (m.world_size == 0)
    throw DataError(fmt::format("{}: the arguments block has no world_size", file),
                    "Megatron prints world_size in the block; give the whole block");
  std::vector<std::string> tokens = {"mtrain", "pt"};
  tokens.insert(tokens.end(), m.flags.begin(), m.flags.end());
  std::vector<const char*> argv;
  for (const std::string& t : tokens) argv.push_back(t.c_str());
  config::ParseOptions po;
  po.world_size = m.world_size;
  try {
    return config::parse_command_line(static_cast<int>(argv.size()), argv.data(), po).args;
  } catch (const Error& e) {
    // Name the block's line of the flag the message is about, when it names one.
    const std::string what = e.what();
    for (size_t i = 0; i < m.flags.size(); ++i) {
      const std::string& f = m.flags[i];
      if (f.rfind("--", 0) == 0 && names_word(what, f.substr(2)))
        throw Error(e.code(), fmt::format("{}:{}: {}", file, m.flag_lines[i], what), e.hint());
    }
    throw Error(e.code(), fmt::format("{}: in the arguments block: {}", file, what), e.hint());
  }
}

config::Args args_from_json_file(const std::string& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  try {
    config::Args args = config::args_from_json(text.str());
    config::validate(args, args.world_size);
    return args;
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", file, e.what()), e.hint());
  }
}

}  // namespace

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

MeasuredRun read_measured_run(const std::string& path, const ReadOptions& options) {
  MeasuredRun run;
  run.source = path;
  if (!fs::exists(path)) throw DataError(fmt::format("{}: no such file or directory", path), kRunsHint);
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    const bool has_args = fs::is_regular_file(dir / "args.json");
    const bool has_jsonl = fs::is_regular_file(dir / "logging.jsonl");
    run.log = has_jsonl ? (dir / "logging.jsonl").string() : log_in(path);
    if (has_args) {
      run.format = "mtrain";
      run.args = args_from_json_file((dir / "args.json").string());
    }
  } else {
    run.log = path;
  }
  if (run.log.size() >= 6 && run.log.compare(run.log.size() - 6, 6, ".jsonl") == 0) {
    add_lines_from_jsonl(run.log, run);
  } else {
    const std::vector<std::string> lines = read_lines(run.log);
    if (run.format.empty()) {
      run.format = "megatron";
      run.args = args_from_block(lines, run.log);
    }
    add_lines_from_log(lines, run.log, run);
  }
  if (!options.device_profile.empty()) run.args.device_profile = options.device_profile;
  // A line averages the iterations since the previous line (the first: since 0).
  std::vector<double> used;
  for (size_t i = 0; i < run.iterations.size(); ++i) {
    const int window_begin = i == 0 ? 0 : run.iterations[i - 1];
    if (window_begin >= options.skip_iters) used.push_back(run.iteration_ms[i]);
  }
  if (used.empty())
    throw DataError(fmt::format("{}: {} iteration line(s), none after the first {} iterations (--skip_iters)", run.log,
                                run.iterations.size(), options.skip_iters),
                    "give a log of more iterations, or a lower --skip_iters");
  run.used_lines = static_cast<int>(used.size());
  run.measured_s = median(used) / 1e3;
  return run;
}

std::string layout_summary(const config::Args& a) {
  std::string s = fmt::format("TP {}, PP {}", a.tensor_model_parallel_size, a.pipeline_model_parallel_size);
  if (a.virtual_pipeline_model_parallel_size) s += fmt::format(" (VPP {})", *a.virtual_pipeline_model_parallel_size);
  if (a.context_parallel_size > 1) s += fmt::format(", CP {}", a.context_parallel_size);
  if (a.expert_model_parallel_size > 1) s += fmt::format(", EP {}", a.expert_model_parallel_size);
  s += fmt::format(", DP {}, {} devices, GBS {}, MBS {}", a.data_parallel_size, a.world_size, a.global_batch_size,
                   a.micro_batch_size);
  if (a.sequence_parallel) s += ", SP";
  s += a.recompute_granularity ? fmt::format(", {} recompute", *a.recompute_granularity) : ", no recompute";
  return s;
}

}  // namespace mtrain::calibrate
