#include "plan/dry_run_lengths.h"

#include <fmt/format.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include "common/errors.h"

namespace mtrain::plan {

namespace {

constexpr int64_t kMaxSamples = 10'000'000;

std::optional<int64_t> positive(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 1) return std::nullopt;
  return v;
}

// One LENGTH/COUNT pair split at `sep` (' ': the first space or tab); `where` names it in errors.
void add_pair(std::string_view pair, char sep, const std::string& where, int64_t max_length,
              std::vector<int64_t>& out) {
  const size_t at = sep == ' ' ? pair.find_first_of(" \t") : pair.find(sep);
  const std::optional<int64_t> length = at == std::string_view::npos ? std::nullopt : positive(pair.substr(0, at));
  const std::optional<int64_t> count = at == std::string_view::npos ? std::nullopt : positive(pair.substr(at + 1));
  if (!length || !count)
    throw ConfigError(fmt::format("--dry_run_lengths: {}: expected LENGTH{}COUNT, two whole numbers above 0", where,
                                  sep == ' ' ? " " : std::string(1, sep)),
                      "e.g. --dry_run_lengths 512:900,2048:100 (900 samples of 512 tokens, 100 of 2048)");
  if (*length > max_length)
    throw ConfigError(fmt::format("--dry_run_lengths: {}: a sample of {} tokens is longer than --max_length {}", where,
                                  *length, max_length),
                      "give the lengths the run keeps after --truncation_strategy (at most --max_length)");
  if (static_cast<int64_t>(out.size()) + *count > kMaxSamples)
    throw ConfigError(fmt::format("--dry_run_lengths: more than {} samples in all", kMaxSamples),
                      "a dry run steps one global batch: scale the counts down, keeping their proportions");
  out.insert(out.end(), static_cast<size_t>(*count), *length);
}

}  // namespace

std::vector<int64_t> parse_dry_run_lengths(const std::string& spec, int64_t max_length) {
  std::vector<int64_t> out;
  if (spec.rfind("mean:", 0) == 0 || spec.find(",max:") != std::string::npos || spec.rfind("max:", 0) == 0)
    throw ConfigError(
        fmt::format("--dry_run_lengths {}: a mean and a maximum do not say how long each sample is", spec),
        "give the lengths as a histogram: LENGTH:COUNT pairs (e.g. 512:900,2048:100) or a file of "
        "'LENGTH COUNT' lines (a length histogram of your data)");
  if (std::filesystem::is_regular_file(spec)) {
    std::ifstream in(spec);
    if (!in) throw ConfigError(fmt::format("--dry_run_lengths {}: cannot read the file", spec));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::string_view v = line;
      if (const size_t hash = v.find('#'); hash != std::string_view::npos) v = v.substr(0, hash);
      if (v.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      v.remove_prefix(v.find_first_not_of(" \t"));
      const char sep = v.find(',') != std::string_view::npos ? ',' : v.find(':') != std::string_view::npos ? ':' : ' ';
      add_pair(v, sep, fmt::format("{}:{}", spec, n), max_length, out);
    }
  } else if (spec.find(':') == std::string::npos) {
    throw ConfigError(fmt::format("--dry_run_lengths {}: no such file", spec),
                      "give a file of 'LENGTH COUNT' lines, or the histogram inline: LENGTH:COUNT[,LENGTH:COUNT...]");
  } else {
    std::string_view rest = spec;
    for (int i = 1; !rest.empty(); ++i) {
      const size_t comma = rest.find(',');
      const std::string_view pair = rest.substr(0, comma);
      add_pair(pair, ':', fmt::format("entry {} '{}'", i, pair), max_length, out);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
  }
  if (out.empty())
    throw ConfigError(fmt::format("--dry_run_lengths {}: no samples", spec),
                      "give at least one LENGTH:COUNT pair (or a file with one 'LENGTH COUNT' line)");
  return out;
}

}  // namespace mtrain::plan
