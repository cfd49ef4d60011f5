// --help, --version and docs/FLAGS.md, all generated from the flag table.
#include <fmt/format.h>

#include "config/cli.h"
#include "config/flags.h"

#ifndef MTRAIN_VERSION
#define MTRAIN_VERSION "unknown"
#endif

namespace mtrain::config {

namespace {

constexpr const char* kConventions =
    "Every flag accepts both spellings (--num_layers / --num-layers) and --flag=value.\n"
    "Booleans: --flag, --flag true|false (also yes/no, t/f, y/n, 1/0), and --no_flag where listed.\n"
    "List flags take several values: --dataset a.jsonl b.jsonl.\n"
    "Precedence: defaults < --model_preset < YAML config < command line.\n";

// "--x_y / --x-y" (one spelling when they coincide).
std::string both_spellings(std::string_view name) {
  std::string underscore = "--" + std::string(name);
  std::string hyphen = hyphen_spelling(name);
  return underscore == hyphen ? underscore : underscore + " / " + hyphen;
}

std::string other_names(const FlagSpec& spec, const char* sep, bool markdown) {
  std::vector<std::string> parts;
  auto fmt_name = [&](std::string_view n) { return markdown ? fmt::format("`--{}`", n) : both_spellings(n); };
  for (auto a : spec.aliases) parts.push_back(fmt_name(a));
  for (const auto& n : negations_of(spec)) parts.push_back(fmt_name(n) + (markdown ? " (negation)" : " (sets false)"));
  return fmt::format("{}", fmt::join(parts, sep));
}

// Markdown table cell: no raw '<', '>' (HTML) or '|' (column break).
std::string md_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '|')
      out += "\\|";
    else
      out += c;
  }
  return out;
}

std::string find_description(const std::string& command, const std::vector<CommandSpec>& commands) {
  for (const auto& c : commands) {
    if (c.name == command) return c.description;
  }
  return "";
}

}  // namespace

std::string version_text() { return fmt::format("mtrain {}", MTRAIN_VERSION); }

std::string help_text(const std::string& command, const std::vector<CommandSpec>& commands) {
  std::string out;
  if (command.empty()) {
    out += fmt::format("{}: Megatron-style LLM training on simulated Ascend NPUs\n\n", version_text());
    out += "usage: mtrain <command> [CONFIG.yaml] [--config FILE] [--flag value ...]\n";
    out += "       mtrain --version | --help\n\ncommands:\n";
    for (const auto& c : commands) {
      std::string names = c.name;
      for (const auto& a : c.aliases) names += " | " + a;
      out += fmt::format("  {:<16} {}\n", names, c.description);
    }
    out += "\n`mtrain <command> --help` lists every flag with its default and meaning.\n";
    return out;
  }
  out += fmt::format("usage: mtrain {} [CONFIG.yaml] [--config FILE] [--flag value ...]\n\n", command);
  out += find_description(command, commands) + "\n\n" + kConventions;
  out += "\nGeneral:\n";
  out +=
      "  CONFIG.yaml (first argument) / --config FILE\n      YAML job config: keys are flag names, lists as "
      "YAML sequences, an ENV: mapping sets environment variables that are not set yet, include: pulls in "
      "presets or other YAML files.\n";
  out += "  -h / --help\n      This help.\n";
  for (FlagGroup g : kAllFlagGroups) {
    out += fmt::format("\n{}:\n", flag_group_name(g));
    for (const auto& spec : flag_table()) {
      if (spec.group != g) continue;
      out += fmt::format("  {} {}  (default: {})\n", both_spellings(spec.name), flag_type_text(spec),
                         flag_default_text(spec));
      out += fmt::format("      {}\n", spec.help);
      if (auto others = other_names(spec, ", ", false); !others.empty()) out += fmt::format("      also: {}\n", others);
    }
  }
  return out;
}

std::string flags_markdown() {
  std::string out =
      "# mtrain flags\n\n"
      "Generated from the flag table in `lib/config/flag_table_*.cc` (the test `test_flags_doc` fails when this "
      "file is stale; regenerate with `MTRAIN_UPDATE_FLAGS_MD=1 build-config/tests/config/test_flags_doc`).\n\n"
      "Usage: `mtrain sft|pt|pretrain [CONFIG.yaml] [--config FILE] [--flag value ...]`\n\n";
  out += kConventions;
  out +=
      "\nA YAML config maps flag names (either spelling, any alias) to values; `ENV:` sets environment variables "
      "that are not already set; `include:` (a preset name, a file, or a list) is read first. "
      "Defaults are Megatron-SWIFT's where it differs from Megatron-LM (the help says so).\n";
  for (FlagGroup g : kAllFlagGroups) {
    out += fmt::format("\n## {}\n\n| flag | type | default | description | other names |\n|---|---|---|---|---|\n",
                       flag_group_name(g));
    for (const auto& spec : flag_table()) {
      if (spec.group != g) continue;
      std::string type = flag_type_text(spec);
      for (auto& c : type) {
        if (c == '|') c = '/';
      }
      out += fmt::format("| `--{}` | `{}` | `{}` | {} | {} |\n", spec.name, type, flag_default_text(spec),
                         md_escape(spec.help), other_names(spec, ", ", true));
    }
  }
  return out;
}

}  // namespace mtrain::config
