// Flag table assembly, name lookup and did-you-mean.
#include "config/flags.h"

#include <algorithm>
#include <unordered_map>

#include "config/flag_table_parts.h"

namespace mtrain::config {

const char* flag_group_name(FlagGroup g) {
  switch (g) {
    case FlagGroup::kModel:
      return "Model";
    case FlagGroup::kParallel:
      return "Parallelism and recomputation";
    case FlagGroup::kFusions:
      return "Fusions and kernels";
    case FlagGroup::kTraining:
      return "Training and optimizer";
    case FlagGroup::kLora:
      return "LoRA (--train_type lora)";
    case FlagGroup::kPrecision:
      return "Mixed precision";
    case FlagGroup::kData:
      return "Data";
    case FlagGroup::kLogging:
      return "Logging, evaluation, output and device";
    case FlagGroup::kCheckpoint:
      return "Checkpointing";
    case FlagGroup::kDebug:
      return "Precision debugging";
    case FlagGroup::kProfile:
      return "Profiling";
  }
  return "?";
}

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = [] {
    std::vector<FlagSpec> all;
    for (auto part : {detail::model_flags, detail::parallel_flags, detail::fusion_flags, detail::training_flags,
                      detail::lora_flags, detail::moe_flags, detail::moe_router_flags, detail::precision_flags,
                      detail::data_flags, detail::logging_flags, detail::tensorboard_flags, detail::checkpoint_flags,
                      detail::debug_flags, detail::profile_flags}) {
      for (auto& spec : part()) all.push_back(std::move(spec));
    }
    return all;
  }();
  return table;
}

const std::vector<std::string_view>& common_flag_names() {
  static const std::vector<std::string_view> names = {
      "model_preset",      "model",       "tokenizer",        "dataset", "data_path",  "micro_batch_size",
      "global_batch_size", "train_iters", "num_train_epochs", "lr",      "output_dir", "load",
      "train_type"};
  return names;
}

std::vector<FlagSection> flag_sections() {
  const auto& common = common_flag_names();
  std::vector<FlagSection> sections;
  FlagSection first{"Common flags", {}};
  for (std::string_view name : common) first.flags.push_back(find_flag(name)->spec);
  sections.push_back(std::move(first));
  for (FlagGroup g : kAllFlagGroups) {
    FlagSection section{flag_group_name(g), {}};
    for (const FlagSpec& spec : flag_table())
      if (spec.group == g && std::find(common.begin(), common.end(), spec.name) == common.end())
        section.flags.push_back(&spec);
    sections.push_back(std::move(section));
  }
  return sections;
}

std::vector<std::string> negations_of(const FlagSpec& spec) {
  std::vector<std::string> out;
  if (!flag_is_bool(spec)) return out;
  if (std::get<bool Args::*>(spec.field) != nullptr && Args{}.*std::get<bool Args::*>(spec.field)) {
    out.push_back("no_" + std::string(spec.name));
  }
  for (auto n : spec.negations) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.emplace_back(n);
  }
  return out;
}

namespace {

using NameMap = std::unordered_map<std::string, FlagMatch>;

NameMap build_name_map() {
  NameMap map;
  for (const auto& spec : flag_table()) {
    map.emplace(std::string(spec.name), FlagMatch{&spec, false});
    for (auto a : spec.aliases) map.emplace(std::string(a), FlagMatch{&spec, false});
    for (const auto& n : negations_of(spec)) map.emplace(n, FlagMatch{&spec, true});
  }
  return map;
}

const NameMap& name_map() {
  static const NameMap map = build_name_map();
  return map;
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<FlagMatch> find_flag(std::string_view name) {
  const auto& map = name_map();
  auto it = map.find(std::string(name));
  if (it == map.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> all_flag_names() {
  std::vector<std::string> names;
  for (const auto& spec : flag_table()) {
    names.emplace_back(spec.name);
    for (auto a : spec.aliases) names.emplace_back(a);
    for (const auto& n : negations_of(spec)) names.push_back(n);
  }
  return names;
}

std::string suggest_name(std::string_view unknown, const std::vector<std::string>& candidates) {
  const size_t limit = unknown.size() <= 4 ? 1 : unknown.size() <= 10 ? 2 : 3;
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    size_t d = edit_distance(unknown, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string normalize_flag_name(std::string_view name) {
  while (!name.empty() && name.front() == '-') name.remove_prefix(1);
  std::string out(name);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

std::string hyphen_spelling(std::string_view name) {
  std::string out = "--" + std::string(name);
  std::replace(out.begin() + 2, out.end(), '_', '-');
  return out;
}

}  // namespace mtrain::config
