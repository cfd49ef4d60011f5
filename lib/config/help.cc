// --help, --version and docs/FLAGS.md, all generated from the flag table:
// the common flags first, then one section per group (flags.h); --help wraps
// to a width, and the preset and device-profile lists are read from configs/.
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "config/cli.h"
#include "config/flags.h"
#include "config/profiles.h"

#ifndef MTRAIN_VERSION
#define MTRAIN_VERSION "unknown"
#endif

namespace mtrain::config {

namespace {

constexpr int kMinHelpWidth = 40;

constexpr const char* kConventions =
    "Every flag accepts both spellings (--num_layers / --num-layers) and --flag=value.\n"
    "Booleans: --flag, --flag true|false (also yes/no, t/f, y/n, 1/0), and --no_flag where listed.\n"
    "List flags take several values: --dataset a.jsonl b.jsonl.\n"
    "Precedence: defaults < --model_preset < YAML config < command line.\n";

constexpr const char* kConfigFileHelp =
    "YAML job config: keys are flag names, lists as YAML sequences, an ENV: mapping sets environment variables "
    "that are not set yet, include: pulls in presets or other YAML files.";

// Lays out `units` (words, or names that must not be split) separated by
// spaces in lines of at most `width` columns: the first line starts with
// `first` (its first unit right after it), the others with `indent`. A unit
// wider than a line gets one of its own.
std::string wrap_units(const std::vector<std::string>& units, const std::string& first, const std::string& indent,
                       int width) {
  std::string out = first;
  size_t column = first.size();
  bool line_empty = true;
  for (const std::string& unit : units) {
    if (!line_empty && column + 1 + unit.size() > static_cast<size_t>(width)) {
      out += '\n';
      out += indent;
      column = indent.size();
      line_empty = true;
    }
    if (!line_empty) out += ' ', ++column;
    out += unit;
    column += unit.size();
    line_empty = false;
  }
  out += '\n';
  return out;
}

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    const size_t end = std::min(text.find(' ', i), text.size());
    if (end > i) out.emplace_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

// Each line of `text` wrapped with `indent` on every line.
std::string wrap_text(std::string_view text, const std::string& indent, int width) {
  std::string out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    out += wrap_units(words(text.substr(0, nl)), indent, indent, width);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
  }
  return out;
}

// "--x_y / --x-y" (one spelling when they coincide).
std::string both_spellings(std::string_view name) {
  std::string underscore = "--" + std::string(name);
  std::string hyphen = hyphen_spelling(name);
  return underscore == hyphen ? underscore : underscore + " / " + hyphen;
}

// Aliases and negations, one item each.
std::vector<std::string> other_names(const FlagSpec& spec, bool markdown) {
  std::vector<std::string> parts;
  auto fmt_name = [&](std::string_view n) { return markdown ? fmt::format("`--{}`", n) : both_spellings(n); };
  for (auto a : spec.aliases) parts.push_back(fmt_name(a));
  for (const auto& n : negations_of(spec)) parts.push_back(fmt_name(n) + (markdown ? " (negation)" : " (sets false)"));
  return parts;
}

// The flag's help, with the names in its configs/ subdirectory when it lists one.
std::string help_of(const FlagSpec& spec, const std::string& config_dir) {
  std::string help(spec.help);
  if (spec.lists.empty()) return help;
  const std::string dir = config_dir.empty() ? find_config_dir() : config_dir;
  const std::vector<std::string> names =
      dir.empty() ? std::vector<std::string>{} : yaml_names_in(fmt::format("{}/{}", dir, spec.lists));
  if (names.empty()) return help + fmt::format(" None found in configs/{}/ (set MTRAIN_CONFIG_DIR).", spec.lists);
  return help + fmt::format(" Available: {}.", fmt::join(names, ", "));
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

// "usage: mtrain <command> [CONFIG.yaml] ...", its parts under each other when it does not fit.
std::string usage_lines(const std::string& command, int width) {
  const std::string first = fmt::format("usage: mtrain {} ", command);
  return wrap_units({"[CONFIG.yaml]", "[--config FILE]", "[--flag value ...]"}, first, std::string(first.size(), ' '),
                    width);
}

std::string top_level_help(const std::vector<CommandSpec>& commands, int width) {
  std::string out =
      wrap_text(fmt::format("{}: Megatron-style LLM training on simulated Ascend NPUs", version_text()), "", width);
  out += '\n';
  out += usage_lines("<command>", width);
  out += "       mtrain --version | --help\n\ncommands:\n";
  for (const auto& c : commands) {
    std::string names = c.name;
    for (const auto& a : c.aliases) names += " | " + a;
    out += wrap_units(words(c.description), fmt::format("  {:<16} ", names), std::string(19, ' '), width);
  }
  out += '\n';
  out += wrap_text("`mtrain <command> --help` lists every flag with its default and meaning.", "", width);
  return out;
}

// One flag: names, type and default (the default on a line of its own when
// they do not fit), its help and its other names, wrapped.
std::string flag_help(const FlagSpec& spec, const HelpStyle& style) {
  const std::string head = fmt::format("  {} {}", both_spellings(spec.name), flag_type_text(spec));
  const std::string deflt = fmt::format("(default: {})", flag_default_text(spec));
  const bool fits = head.size() + 2 + deflt.size() <= static_cast<size_t>(style.width);
  std::string out = fits ? fmt::format("{}  {}\n", head, deflt) : fmt::format("{}\n      {}\n", head, deflt);
  out += wrap_text(help_of(spec, style.config_dir), "      ", style.width);
  std::vector<std::string> others = other_names(spec, false);
  for (size_t i = 0; i + 1 < others.size(); ++i) others[i] += ",";
  if (!others.empty()) out += wrap_units(others, "      also: ", "            ", style.width);
  return out;
}

}  // namespace

int help_width(bool stdout_is_tty, const char* columns_env, int terminal_columns) {
  if (!stdout_is_tty) return 80;
  int width = 0;
  if (columns_env != nullptr && *columns_env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(columns_env, &end, 10);
    if (*end == '\0' && v > 0 && v < 10000) width = static_cast<int>(v);
  }
  if (width == 0) width = terminal_columns;
  if (width <= 0) return 80;
  return std::max(width, kMinHelpWidth);
}

int stdout_help_width() {
  const bool tty = isatty(STDOUT_FILENO) != 0;
  winsize w{};
  const int columns = tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 ? w.ws_col : 0;
  return help_width(tty, std::getenv("COLUMNS"), columns);
}

std::string version_text() { return fmt::format("mtrain {}", MTRAIN_VERSION); }

std::string help_text(const std::string& command, const std::vector<CommandSpec>& commands, const HelpStyle& style) {
  if (command.empty()) return top_level_help(commands, style.width);
  std::string out = usage_lines(command, style.width) + "\n";
  out += wrap_text(find_description(command, commands), "", style.width);
  out += '\n';
  out += wrap_text(kConventions, "", style.width);
  const std::vector<FlagSection> sections = flag_sections();
  for (const FlagSection& section : sections) {
    out += fmt::format("\n{}:\n", section.title);
    if (&section == &sections.front()) {  // the job file and this help, before the common flags
      out += "  CONFIG.yaml (first argument) / --config FILE\n";
      out += wrap_text(kConfigFileHelp, "      ", style.width);
      out += "  -h / --help\n      This help.\n";
    }
    for (const FlagSpec* spec : section.flags) out += flag_help(*spec, style);
  }
  return out;
}

std::string flags_markdown(const std::string& config_dir) {
  std::string out =
      "# mtrain flags\n\n"
      "Generated from the flag table in `lib/config/flag_table_*.cc` and the presets and device profiles in "
      "`configs/` (the test `test_flags_doc` fails when this file is stale; regenerate with "
      "`MTRAIN_UPDATE_FLAGS_MD=1 build/tests/config/test_flags_doc`).\n\n"
      "Usage: `mtrain sft|pt|pretrain [CONFIG.yaml] [--config FILE] [--flag value ...]`\n\n";
  out += kConventions;
  out +=
      "\nA YAML config maps flag names (either spelling, any alias) to values; `ENV:` sets environment variables "
      "that are not already set; `include:` (a preset name, a file, or a list) is read first. "
      "Defaults are Megatron-SWIFT's where it differs from Megatron-LM (the help says so).\n";
  for (const FlagSection& section : flag_sections()) {
    out += fmt::format("\n## {}\n\n| flag | type | default | description | other names |\n|---|---|---|---|---|\n",
                       section.title);
    for (const FlagSpec* spec : section.flags) {
      std::string type = flag_type_text(*spec);
      for (auto& c : type) {
        if (c == '|') c = '/';
      }
      out += fmt::format("| `--{}` | `{}` | `{}` | {} | {} |\n", spec->name, type, flag_default_text(*spec),
                         md_escape(help_of(*spec, config_dir)), fmt::join(other_names(*spec, true), ", "));
    }
  }
  return out;
}

}  // namespace mtrain::config
