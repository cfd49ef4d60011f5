#include "plan/dry_run_command.h"

#include <fmt/format.h>

#include "checkpoint/sharded_checkpoint.h"
#include "common/errors.h"
#include "common/file_system.h"
#include "config/profile_args.h"
#include "plan/dry_run.h"
#include "plan/formula_compare.h"
#include "plan/memory_report.h"
#include "plan/report_json.h"
#include "plan/sim_trace.h"
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
  // --profile writes the simulated timeline of the one iteration, every
  // stage: the choices of a real run's profiler do not apply.
  const char* real_only = config::profiler_choice_set(args);
  if (args.profile && real_only)
    throw ConfigError(
        fmt::format("--{} with --dry_run: the simulated timeline is one iteration of every pipeline "
                    "stage, with no steps, ranks or detail levels to choose",
                    real_only),
        fmt::format("drop --{} (--profile --dry_run writes <--profile_save_path>/simulated_trace.json)", real_only));
  if (!args.precision_dump_path.empty())
    throw ConfigError("--precision_dump_path with --dry_run: a dry run computes no values to dump",
                      "drop --precision_dump_path or --dry_run");
}

int run_dry_run(const config::Args& args, std::ostream& out) {
  check_dry_run_flags(args);
  check_load(args);
  const DryRun r = dry_run(args);
  const StepTime t = step_time(r);
  if (args.json) {
    nlohmann::json j = dry_run_json(r, t);
    if (args.profile) j["simulated_trace"] = write_simulated_trace(r, t, args.profile_save_path);
    out << j.dump(2) << "\n" << std::flush;
    require_fit(r, args);
    return 0;
  }
  out << memory_report(r) << formula_comparison(r, args) << time_report(r, t);
  if (args.profile)
    out << "Simulated timeline (Chrome trace): " << write_simulated_trace(r, t, args.profile_save_path) << "\n";
  out << std::flush;
  require_fit(r, args);
  return 0;
}

}  // namespace mtrain::plan
