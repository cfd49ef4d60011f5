// `mtrain plan <model and batch flags> --nnodes N --nproc_per_node N
// [--top N] [--json]`: searches the layouts (search.h) and prints the best
// that fit, each with the flags to paste; nothing fits -> exit 6.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mtrain::plan {

struct PlanOptions {
  int nnodes = 1, nproc_per_node = 1, top = 5;
  bool json = false, help = false;
  std::vector<std::string> model_args;  // the rest: parsed as `mtrain pt` flags
};
// nnodes / nproc_per_node: the world when the flags do not give it (NNODES / NPROC_PER_NODE).
PlanOptions parse_plan_args(const std::vector<std::string>& args, int nnodes = 1, int nproc_per_node = 1);
std::string plan_help();
int run_plan_command(const PlanOptions& o, std::ostream& out);

}  // namespace mtrain::plan
