// The dry run's first pipeline stage beside the published formulas
// (docs: estimator-formulas.md): Megatron-LM's theoretical_memory_usage for
// weights + gradients + optimizer states (most loaded shard, bf16 params,
// fp32 grads, fp32 master and Adam), and its activation formula (Korthikanti
// et al. 2022, Table 2) when it applies (sequence parallel + selective
// recompute). The difference is printed and its terms named, so a user who
// knows Megatron's printout sees why mtrain's number is what it is.
#pragma once

#include <string>

#include "config/args.h"
#include "plan/dry_run.h"

namespace mtrain::plan {

// Megatron's formulas for `args` (validated, vocab_size set), in bytes.
struct MegatronFormulas {
  double states = 0;       // weights + grads + optimizer of the most loaded shard
  double activations = 0;  // first stage; 0 when the formula does not apply
  double logits = 0;       // the fp32 logits term inside `activations` (p == 1 only)
};
MegatronFormulas megatron_formulas(const config::Args& args);

// The report's "vs Megatron's formulas" section for stage 0; "" when the
// formulas' assumptions (bf16 with fp32 grads, a known vocabulary) do not hold.
std::string formula_comparison(const DryRun& r, const config::Args& args);

}  // namespace mtrain::plan
