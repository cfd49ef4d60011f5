// The subcommands with their own parser, as one table (commands.cc): adding a
// command is one entry. Each entry is its line in `mtrain --help`, its parser
// (which may also place this rank's device), its --help text, whether it runs
// as one process only, whether its long work shows a progress line, and what
// it runs. The training commands (sft, pt: config::default_commands) are not
// in the table: they are main.cc's default path, the dry run or the training run.
#pragma once

#include <any>
#include <functional>
#include <string>
#include <vector>

#include "mtrain/launch/launch_devices.h"
#include "mtrain/launch/launch_env.h"
#include "mtrain/launch/rendezvous.h"

namespace mtrain::app {

// What a parser sees besides the command's arguments.
struct ParseContext {
  const launch::Env& env;
  const launch::WorldInfo& world;
  launch::DevicePlacement* placement;  // set by a command that runs on this rank's NPU
  std::vector<std::string>* warnings;  // printed once by rank 0
};

// What a command's run sees.
struct RunContext {
  const launch::Env& env;
  const launch::WorldInfo& world;
  launch::MpiWorld* mpi;  // null: not under mpirun
  const launch::DevicePlacement& placement;
};

// A command's parsed arguments, type-erased (each command's own options struct).
struct ParsedCommand {
  std::any options;
  bool help = false;  // -h / --help: print the command's help and run nothing
};

struct Subcommand {
  std::string name;
  std::string description;  // its line in `mtrain --help`
  // Refuses a launch of several ranks (unless asked for --help): it works on files alone.
  bool single_process = false;
  bool shows_progress = false;  // its long work draws a progress line on a terminal
  std::function<ParsedCommand(const std::vector<std::string>& args, const ParseContext&)> parse;
  std::function<std::string()> help;
  std::function<int(const std::any& options, const RunContext&)> run;
};

// In `mtrain --help` order.
const std::vector<Subcommand>& subcommands();
// The entry named `name`, or null (a training command).
const Subcommand* find_subcommand(const std::string& name);

}  // namespace mtrain::app
