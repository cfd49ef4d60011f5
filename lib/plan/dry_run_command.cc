#include "plan/dry_run_command.h"

#include <fmt/format.h>

#include "checkpoint/sharded_checkpoint.h"
#include "common/errors.h"
#include "common/file_system.h"
#include "plan/dry_run.h"
#include "plan/memory_report.h"
#include "plan/step_time.h"
#include "train/checkpointing.h"

namespace mtrain::plan {

// A real run starts from random weights when --load has no checkpoint; a plan
// of a resumed job that names a missing one is a mistake found now. Opening
// reads the tracker and the manifest only.
static void check_load(const config::Args& args) {
  if (!args.load) return;
  PosixFileSystem fs;
  const train::LoadSettings s = train::load_settings(args);
  if (!s.iteration && !fs.exists(s.dir + "/" + checkpoint::kTrackerFileName))
    throw CheckpointError(
        fmt::format("--load {}: no checkpoint there ({} is missing)", s.dir, checkpoint::kTrackerFileName),
        "point --load at the --save directory of a run that saved, or drop --load");
  checkpoint::CheckpointReader::open(fs, s.dir, s.iteration);
}

// Flags whose output a dry run cannot give yet are refused, not ignored.
static void check_dry_run_flags(const config::Args& args) {
  if (args.profile)
    throw ConfigError("--profile with --dry_run (a simulated timeline) is not implemented yet",
                      "drop --profile to get the memory plan, or drop --dry_run to profile a real run");
  if (!args.precision_dump_path.empty())
    throw ConfigError("--precision_dump_path with --dry_run: a dry run computes no values to dump",
                      "drop --precision_dump_path or --dry_run");
}

int run_dry_run(const config::Args& args, std::ostream& out) {
  check_dry_run_flags(args);
  check_load(args);
  const DryRun r = dry_run(args);
  out << memory_report(r) << time_report(r, step_time(r)) << std::flush;
  require_fit(r, args);
  return 0;
}

}  // namespace mtrain::plan
