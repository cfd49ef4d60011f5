// mtrain: the command-line entry point. Parses the command line (flags, YAML,
// presets), then runs the subcommand; every mtrain::Error becomes its
// message, a hint and the exit code of its class (README "Exit codes").
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "common/errors.h"
#include "config/cli.h"
#include "train/run.h"

int main(int argc, char** argv) {
  using mtrain::ExitCode;
  try {
    const mtrain::config::Invocation inv = mtrain::config::parse_command_line(argc, argv);
    for (const std::string& w : inv.warnings) fmt::print(stderr, "mtrain: warning: {}\n", w);
    if (inv.action != mtrain::config::Invocation::Action::kRun) {
      fmt::print("{}", inv.text);
      return 0;
    }
    return mtrain::train::run_training(inv.args);
  } catch (const mtrain::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "{}\n", mtrain::format_error(e));
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "mtrain: internal error: {}\n  hint: this is a bug in mtrain; please report it with the "
               "command line\n", e.what());
    return static_cast<int>(ExitCode::kInternal);
  }
}
