// The command line, with CLI11 (the only place it is used): subcommands, and
// every name of the flag table registered as an option whose occurrences are
// recorded in order; the merge then applies preset < YAML < command line.
#include "config/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <memory>

#include "common/errors.h"
#include "config/flags.h"
#include "config/merge.h"
#include "config/validate.h"

namespace mtrain::config {

std::vector<CommandSpec> default_commands() {
  return {
      {"sft", {}, "supervised fine-tuning: loss on the answer tokens (Megatron-SWIFT `megatron sft`)", true},
      {"pt", {"pretrain"}, "pretraining: loss on all tokens (Megatron-SWIFT `megatron pt`)", true},
  };
}

namespace {

// Marks a boolean flag given without a value (CLI11 hands us its default_str).
constexpr const char* kBare =
    "\x01"
    "bare";

struct CommandState {
  const CommandSpec* spec = nullptr;
  CLI::App* app = nullptr;
  bool help = false;
  std::string config_option;
  std::vector<std::string> positionals;
  std::vector<std::string> passthrough;
  std::vector<detail::CliEvent> events;
};

// The command a token names (its name or an alias), or null.
const CommandSpec* command_named(const std::string& token, const std::vector<CommandSpec>& commands) {
  for (const CommandSpec& c : commands)
    if (c.name == token || std::find(c.aliases.begin(), c.aliases.end(), token) != c.aliases.end()) return &c;
  return nullptr;
}

// A flag (normalized name) whose next token is always its value.
bool takes_one_value(const std::string& name) {
  if (name == "config") return true;
  const std::optional<FlagMatch> m = find_flag(name);
  return m && !m->negated && !flag_is_bool(*m->spec) && !flag_is_list(*m->spec);
}

// Only flag *names* are normalized ("--foo-bar=v" -> "--foo_bar=v"); values
// are passed as typed, even one that begins with "--": as in argparse, the
// token after a flag that takes one value is that value. A command with its
// own parser (tokenizer, export, ...) gets its arguments exactly as typed.
// Remembers the original spelling of every rewritten flag for error messages.
std::vector<std::string> normalize_tokens(int argc, const char* const* argv, const std::vector<CommandSpec>& commands,
                                          std::map<std::string, std::string>& original) {
  std::vector<std::string> tokens;
  const CommandSpec* command = nullptr;
  bool value_next = false;
  for (int i = 1; i < argc; ++i) {
    std::string t = argv[i];
    const bool flag = t.size() > 2 && t.compare(0, 2, "--") == 0;
    const bool verbatim = value_next || (command && !command->training_flags);
    value_next = false;
    if (!command && !flag) command = command_named(t, commands);
    if (flag && !verbatim) {
      const size_t eq = t.find('=');
      const std::string name = normalize_flag_name(t.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
      original.emplace("--" + name, t.substr(0, eq));
      value_next = command && eq == std::string::npos && takes_one_value(name);
      t = "--" + name + (eq == std::string::npos ? "" : t.substr(eq));
    }
    tokens.push_back(std::move(t));
  }
  return tokens;
}

void register_flags(CommandState& st) {
  for (const auto& spec : flag_table()) {
    std::vector<std::pair<std::string, bool>> names = {{std::string(spec.name), false}};
    for (auto a : spec.aliases) names.emplace_back(std::string(a), false);
    for (const auto& n : negations_of(spec)) names.emplace_back(n, true);
    for (const auto& [name, negated] : names) {
      FlagMatch match{&spec, negated};
      auto* events = &st.events;
      auto* opt = st.app->add_option("--" + name, [events, match, name = name](const CLI::results_t& res) {
        detail::CliEvent ev{name, match, {}};
        if (res.size() == 1 && res.front() == kBare) {
          ev.value.bare = true;
        } else {
          ev.value.items = res;
        }
        events->push_back(std::move(ev));
        return true;
      });
      opt->trigger_on_parse()->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
      if (flag_is_bool(spec)) {
        opt->expected(0, 1)->default_str(kBare);
      } else if (flag_is_list(spec)) {
        opt->expected(1, CLI::detail::expected_max_vector_size)->allow_extra_args(true);
      } else {
        opt->expected(1);
      }
    }
  }
}

std::string spelled_like(const std::string& suggestion, const std::string& typed) {
  // Suggest in the user's style: hyphens if they typed hyphens.
  return typed.find('-', 2) != std::string::npos ? hyphen_spelling(suggestion) : "--" + suggestion;
}

[[noreturn]] void throw_unknown_flag(const std::string& token, const std::map<std::string, std::string>& original) {
  std::string flag = token.substr(0, token.find('='));
  auto it = original.find(flag);
  const std::string typed = it != original.end() ? it->second : flag;
  std::string msg = fmt::format("unknown flag {}", typed);
  auto candidates = all_flag_names();
  candidates.insert(candidates.end(), {"config", "help"});
  if (auto s = suggest_name(normalize_flag_name(flag), candidates); !s.empty()) {
    msg += fmt::format("; did you mean {}?", spelled_like(s, typed));
  }
  throw UsageError(msg, "`mtrain <command> --help` lists every flag (docs/FLAGS.md)");
}

std::string command_names(const std::vector<CommandSpec>& commands) {
  std::vector<std::string> names;
  for (const auto& c : commands) {
    names.push_back(c.name);
    names.insert(names.end(), c.aliases.begin(), c.aliases.end());
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

[[noreturn]] void throw_unknown_command(const std::string& token, const std::vector<CommandSpec>& commands) {
  std::vector<std::string> names;
  for (const auto& c : commands) names.push_back(c.name);
  std::string msg = token.rfind('-', 0) == 0 ? fmt::format("unknown option {} before the command", token)
                                             : fmt::format("unknown command '{}'", token);
  if (auto s = suggest_name(token, names); !s.empty() && token.rfind('-', 0) != 0) {
    msg += fmt::format("; did you mean '{}'?", s);
  }
  throw UsageError(msg, fmt::format("commands: {}; `mtrain --help` shows usage", command_names(commands)));
}

}  // namespace

namespace {

HelpStyle help_style(const ParseOptions& options) { return {options.help_width, options.config_dir}; }

// parse_command_line up to the merge: the command, help, or unvalidated Args.
Invocation parse_and_merge(int argc, const char* const* argv, const ParseOptions& options, bool apply_env) {
  std::map<std::string, std::string> original;
  std::vector<std::string> tokens = normalize_tokens(argc, argv, options.commands, original);

  CLI::App app{"mtrain", "mtrain"};
  app.set_help_flag();
  bool top_help = false, top_version = false;
  app.add_flag("-h,--help", top_help);
  app.add_flag("--version", top_version);
  app.require_subcommand(0, 1);
  app.allow_extras();

  std::vector<std::unique_ptr<CommandState>> states;
  for (const auto& c : options.commands) {
    auto st = std::make_unique<CommandState>();
    st->spec = &c;
    st->app = app.add_subcommand(c.name, c.description);
    for (const auto& a : c.aliases) st->app->alias(a);
    st->app->set_help_flag();
    st->app->allow_extras();
    if (c.training_flags) {
      st->app->add_flag("-h,--help", st->help);
      st->app->add_option("--config", st->config_option)->expected(1);
      st->app->add_option("CONFIG_YAML", st->positionals);
      register_flags(*st);
    } else {
      st->app->prefix_command();
    }
    states.push_back(std::move(st));
  }

  std::reverse(tokens.begin(), tokens.end());  // CLI11 consumes from the back
  try {
    app.parse(tokens);
  } catch (const CLI::ParseError& e) {
    throw UsageError(fmt::format("invalid command line: {}", e.what()), "`mtrain <command> --help` lists every flag");
  }

  CommandState* st = nullptr;
  for (auto& s : states) {
    if (s->app->parsed()) st = s.get();
  }
  Invocation inv;
  if (st == nullptr) {
    if (!app.remaining().empty()) throw_unknown_command(app.remaining().front(), options.commands);
    if (top_version) return {Invocation::Action::kVersion, "", {}, {}, {}, version_text() + "\n"};
    if (top_help)
      return {Invocation::Action::kHelp, "", {}, {}, {}, help_text("", options.commands, help_style(options))};
    throw UsageError(fmt::format("missing command (one of: {})", command_names(options.commands)),
                     "`mtrain --help` lists the commands; `mtrain sft --help` lists the flags");
  }
  inv.command = st->spec->name;
  if (!st->spec->training_flags) {
    inv.passthrough = st->app->remaining();
    return inv;
  }
  if (st->help) {
    inv.action = Invocation::Action::kHelp;
    inv.text = help_text(inv.command, options.commands, help_style(options));
    return inv;
  }
  for (const auto& extra : st->app->remaining()) {
    if (extra.rfind('-', 0) == 0 && extra != "-") throw_unknown_flag(extra, original);
  }
  detail::MergeInput in{inv.command, st->positionals, st->config_option, st->events, options.config_dir, apply_env};
  inv.args = detail::merge_sources(in, inv.warnings);
  return inv;
}

// A training command to run (not help, version or a command with its own parser).
bool runs_training(const Invocation& inv, const std::vector<CommandSpec>& commands) {
  if (inv.action != Invocation::Action::kRun) return false;
  for (const CommandSpec& c : commands)
    if (c.name == inv.command) return c.training_flags;
  return false;
}

}  // namespace

Invocation parse_command_line(int argc, const char* const* argv, const ParseOptions& options) {
  Invocation inv = parse_and_merge(argc, argv, options, /*apply_env=*/true);
  if (!runs_training(inv, options.commands)) return inv;
  auto warnings = validate(inv.args, options.world_size);
  inv.warnings.insert(inv.warnings.end(), warnings.begin(), warnings.end());
  detail::check_device_profile(inv.args, options.config_dir);
  return inv;
}

std::optional<Args> peek_args(int argc, const char* const* argv, const ParseOptions& options) {
  const Invocation inv = parse_and_merge(argc, argv, options, /*apply_env=*/false);
  if (!runs_training(inv, options.commands)) return std::nullopt;
  return inv.args;
}

}  // namespace mtrain::config
