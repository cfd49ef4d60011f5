// The command line: `mtrain <command> [CONFIG.yaml] [--config FILE] [--flags ...]`.
//
// parse_command_line() turns argv into an Invocation: the subcommand and a
// fully merged (preset < YAML < command line), validated Args. Rules follow
// Megatron-SWIFT (HfArgumentParser): `--foo_bar` == `--foo-bar`, `--x=v`,
// booleans as `--flag`, `--flag true|false|yes|no|t|f|y|n|1|0` or `--no_flag`,
// list flags take several values. Errors:
//   UsageError  (exit 2): unknown flag (with did-you-mean), bad command-line value;
//   ConfigError (exit 3): YAML problems (file:line:col), validation failures.
// Side effect: the YAML `ENV:` map is applied with setenv() (variables that
// are already set are kept, with a warning in Invocation::warnings).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/args.h"

namespace mtrain::config {

// A subcommand. Training commands (sft, pt) parse every flag into Args;
// others (an app's `tokenizer`, `export`, ...) get their arguments verbatim.
struct CommandSpec {
  std::string name;
  std::vector<std::string> aliases;
  std::string description;
  // true: every flag is parsed, merged and validated like a training run
  // (loss_scale defaults to "all" for pt, "default" otherwise);
  // false: the arguments are passed through unparsed in Invocation::passthrough.
  bool training_flags = true;
};

// sft, and pt (alias pretrain).
std::vector<CommandSpec> default_commands();

struct ParseOptions {
  std::vector<CommandSpec> commands = default_commands();
  int world_size = 1;      // for validation (DP = world / (TP*PP*CP))
  std::string config_dir;  // "" = find_config_dir()
  int help_width = 80;     // columns of --help (main passes stdout_help_width())
};

struct Invocation {
  enum class Action { kRun, kHelp, kVersion };
  Action action = Action::kRun;
  std::string command;                   // canonical name ("pt" for pretrain); "" for top-level help/version
  Args args;                             // merged and validated (training commands with kRun only)
  std::vector<std::string> passthrough;  // arguments of a command with training_flags == false
  std::vector<std::string> warnings;     // to print (e.g. sequence parallel disabled, ENV already set)
  std::string text;                      // help or version text to print when action != kRun
};

Invocation parse_command_line(int argc, const char* const* argv, const ParseOptions& options = {});

// What the launcher must know before it decides to start ranks (--dry_run,
// --nnodes, --nproc_per_node): a training command's Args merged from the same
// sources as parse_command_line (preset < YAML < command line, YAML errors
// with file:line:col) but not validated (the world is not known yet) and
// without applying the YAML ENV block. nullopt for other commands, help and version.
std::optional<Args> peek_args(int argc, const char* const* argv, const ParseOptions& options = {});

struct HelpStyle {
  int width = 80;          // columns the help is wrapped to
  std::string config_dir;  // where the listed presets and device profiles are read; "" = find_config_dir()
};
// `mtrain --help` (commands) or `mtrain <command> --help` (the common flags,
// then every other flag by group; flags.h), wrapped to style.width.
std::string help_text(const std::string& command = "", const std::vector<CommandSpec>& commands = default_commands(),
                      const HelpStyle& style = {});
// The width of --help on this process's stdout: on a terminal $COLUMNS, else
// the terminal's width (TIOCGWINSZ), at least 40; 80 when stdout is not a
// terminal, so redirected help is the same everywhere.
int stdout_help_width();
// The rule behind it, for tests: `columns_env` is $COLUMNS (or null),
// `terminal_columns` the width the terminal reports (0: unknown).
int help_width(bool stdout_is_tty, const char* columns_env, int terminal_columns);
// "mtrain 0.1.0".
std::string version_text();
// docs/FLAGS.md, generated from the flag table and the YAML names in
// `config_dir` ("" = find_config_dir()).
std::string flags_markdown(const std::string& config_dir = "");

}  // namespace mtrain::config
