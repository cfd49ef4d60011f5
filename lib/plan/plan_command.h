// `mtrain plan [sft|pt] <the job's flags or YAML> --nnodes N --nproc_per_node N
// [--top N] [--json]`: searches the layouts (search.h) and prints the best
// that fit, each as the launch command to paste (the job's own flags verbatim,
// then the layout's); nothing fits -> exit 6.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace mtrain::plan {

struct PlanOptions {
  int nnodes = 1, nproc_per_node = 1, top = 5;
  bool nnodes_given = false, nproc_given = false;  // by plan's flags (else the variables, or the job's YAML)
  bool json = false, help = false;
  std::optional<double> memory_margin;  // --memory_margin: the share of HBM a plan leaves free (else the profile's)
  double margin = 0;                    // the margin the search used (run_plan_command)
  std::string command = "pt";           // the job planned: sft or pt (first argument; default pt)
  std::vector<std::string> model_args;  // the rest: parsed as `mtrain <command>` flags
  // --dry_run_lengths / --dry_run_samples with their values: what an sft job is planned on (the lengths in
  // place of a dataset, or N samples of each --dataset file); left out of the printed commands.
  std::vector<std::string> data_args;
};
// nnodes / nproc_per_node: the world when the flags do not give it (NNODES / NPROC_PER_NODE).
PlanOptions parse_plan_args(const std::vector<std::string>& args, int nnodes = 1, int nproc_per_node = 1);
std::string plan_help();
// `token` as one shell word: unchanged when it holds only safe characters, else single-quoted.
std::string shell_quote(const std::string& token);
int run_plan_command(const PlanOptions& o, std::ostream& out);

}  // namespace mtrain::plan
