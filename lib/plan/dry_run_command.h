// `mtrain sft|pt ... --dry_run`: checks what a real run would fail on before
// training (a --load without a checkpoint), dry-runs every rank class, prints
// the memory report and ends with exit 6 when the plan does not fit.
#pragma once

#include <ostream>

#include "config/args.h"

namespace mtrain::plan {

// args: validated for the whole planned world (args.world_size ranks).
int run_dry_run(const config::Args& args, std::ostream& out);

}  // namespace mtrain::plan
