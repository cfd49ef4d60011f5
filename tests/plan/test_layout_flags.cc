// mtrain plan's one encoding of a layout (search.h): for every layout the
// search tries, the flags it prints, parsed by the real command line after
// the job's own flags, give exactly the Args it dry-runs (apply_layout, then
// validation), or both are refused; so the printed plan cannot drift from
// what was simulated.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/errors.h"
#include "config/json.h"
#include "config/validate.h"
#include "plan/plan_args.h"
#include "plan/search.h"

namespace mtrain::plan {
namespace {

struct Job {
  std::string name;
  std::vector<std::string> words;
  SearchOptions options;
};

std::vector<Job> jobs() {
  const std::vector<std::string> qwen = {"--model_preset", "qwen2.5-7b", "--global_batch_size", "8", "--seq_length",
                                         "1024",           "--bf16",     "--train_iters",       "1"};
  SearchOptions cp{4, 1, true};
  cp.min_cp_tokens = 256;
  return {{"qwen2.5-7b on 4 (uneven stages, VPP, recompute, distopt, SP)", qwen, {4, 1, true}},
          {"demo at 1024 tokens on 4 (CP, both algorithms)", demo("demo", 1024), cp},
          {"demo-moe on 4 (EP, ETP, dispatchers)", demo("demo-moe", 128), {4, 1, true}},
          {"demo-moe at 1024 tokens on 4 (CP with EP)", demo("demo-moe", 1024), cp}};
}

TEST(LayoutFlags, PrintedFlagsParseToTheSimulatedArgs) {
  for (const Job& job : jobs()) {
    const int world = job.options.nnodes * job.options.nproc_per_node;
    const config::Args base = parse_words(job.words, world);
    const std::vector<Layout> layouts = enumerate_layouts(base, job.options);
    int valid = 0, refused = 0;
    for (const Layout& l : layouts) {
      const std::string flags = layout_flags(l, base.num_layers);
      config::Args simulated = apply_layout(base, l);
      bool simulated_valid = true;
      try {
        config::validate(simulated, world);
      } catch (const ConfigError&) {
        simulated_valid = false;
      }
      bool printed_valid = true;
      config::Args printed;
      try {
        printed = parse_words(with_flags(job.words, flags), world);
      } catch (const ConfigError&) {
        printed_valid = false;
      }
      ASSERT_EQ(printed_valid, simulated_valid) << job.name << ": " << flags;
      if (!simulated_valid) {
        ++refused;
        continue;
      }
      ++valid;
      ASSERT_EQ(config::args_to_json(printed), config::args_to_json(simulated)) << job.name << ": " << flags;
    }
    EXPECT_GT(valid, 10) << job.name;
    EXPECT_GT(refused, 0) << job.name;  // the check covers refusals too
  }
}

// The list is what is printed: every entry as `--name value` (or `--name`), in order.
TEST(LayoutFlags, PrintedStringIsTheFlagList) {
  Layout l;
  l.tp = 2, l.pp = 2, l.vpp = 2, l.mbs = 2, l.recompute = "full", l.distopt = true, l.sp = true;
  l.cp = 2, l.cp_algo = "ulysses_cp_algo", l.overlap_grad_reduce = true;
  EXPECT_EQ(layout_flags(l, 8),
            "--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2 "
            "--num_layers_per_virtual_pipeline_stage 2 --context_parallel_size 2 --context_parallel_algo "
            "ulysses_cp_algo --micro_batch_size 2 --recompute_granularity full --recompute_method uniform "
            "--recompute_num_layers 1 --use_distributed_optimizer true --sequence_parallel true "
            "--overlap_grad_reduce");
}

}  // namespace
}  // namespace mtrain::plan
