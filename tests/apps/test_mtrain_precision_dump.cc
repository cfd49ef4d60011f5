// `--precision_dump_path` and `mtrain compare` end to end: a TP=2 run (two
// ranks under mpirun) compares clean with the single-device run at fp32
// tolerances; a different seed diverges (exit 9); the fusion warning; bad
// arguments get their exit codes.
#include <gtest/gtest.h>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

std::vector<std::string> dump_job(const fs::path& out, const fs::path& dump, const std::string& extra = "") {
  return concat(concat(words("sft configs/sft_demo.yaml --train_iters 2 --lr 3e-4 --micro_batch_size 2 "
                             "--global_batch_size 4 --log_interval 1 --num_threads 1 --num_generate_samples 0 "
                             "--save_interval 100 --lr_decay_iters 2400 --precision_dump_level mix"),
                       words(extra)),
                {"--output_dir", out.string(), "--precision_dump_path", dump.string()});
}

TEST(MtrainPrecisionDump, TensorParallelRunComparesCleanWithOneDevice) {
  const fs::path tmp = make_temp_dir("pdump_tp");
  const RunResult one = run_mtrain(dump_job(tmp / "out1", tmp / "dump1", "--precision_dump_steps 1"), tmp, "tp1");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  EXPECT_TRUE(contains(one.err,
                       "turn the fusions off: --bias_dropout_fusion false --bias_swiglu_fusion false "
                       "--cross_entropy_loss_fusion false"))
      << one.err;
  ASSERT_TRUE(fs::exists(tmp / "dump1" / "step1" / "rank0" / "dump.json"));
  EXPECT_FALSE(fs::exists(tmp / "dump1" / "step2"));

  const RunResult two =
      run_mtrain(dump_job(tmp / "out2", tmp / "dump2", "--precision_dump_steps 1 --tensor_model_parallel_size 2"), tmp,
                 "tp2", launch_ranks(2));
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  ASSERT_TRUE(fs::exists(tmp / "dump2" / "step1" / "rank1" / "dump.json"));

  const RunResult cmp = run_mtrain({"compare", (tmp / "dump1").string(), (tmp / "dump2").string()}, tmp, "cmp");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.describe();
  EXPECT_TRUE(contains(cmp.out, "no divergence beyond tolerance")) << cmp.out;
  EXPECT_FALSE(contains(cmp.out, "skipped")) << cmp.out;
  EXPECT_TRUE(contains(cmp.out, "compared 240 records")) << cmp.out;

  // Two pipeline stages: the stages join into the one-device order.
  const RunResult pp =
      run_mtrain(dump_job(tmp / "out4", tmp / "dump4", "--precision_dump_steps 1 --pipeline_model_parallel_size 2"),
                 tmp, "pp2", launch_ranks(2));
  ASSERT_EQ(pp.exit_code, 0) << pp.describe();
  const RunResult cmp_pp = run_mtrain({"compare", (tmp / "dump4").string(), (tmp / "dump1").string()}, tmp, "cmp_pp");
  EXPECT_EQ(cmp_pp.exit_code, 0) << cmp_pp.describe();
  EXPECT_TRUE(contains(cmp_pp.out, "compared 240 records")) << cmp_pp.out;

  // Another seed: other weights, so the very first record differs.
  const RunResult seed =
      run_mtrain(dump_job(tmp / "out3", tmp / "dump3", "--precision_dump_steps 1 --seed 7"), tmp, "seed");
  ASSERT_EQ(seed.exit_code, 0) << seed.describe();
  const RunResult cmp2 =
      run_mtrain({"compare", (tmp / "dump1").string(), (tmp / "dump3" / "step1").string(), "--show", "3"}, tmp, "cmp2");
  EXPECT_EQ(cmp2.exit_code, 9) << cmp2.describe();
  EXPECT_TRUE(contains(cmp2.out, "first divergence: embedding.forward.0 (module embedding)")) << cmp2.out;
}

// With the fusions off the inner steps are records too (forward and
// backward, the vocab-parallel cross-entropy's under TP=2 as well), and they
// still line up with the single-device run; a dump missing a TP shard is
// refused instead of merging into wrong statistics.
TEST(MtrainPrecisionDump, UnfusedStepsLineUpAcrossTensorParallelSizes) {
  const fs::path tmp = make_temp_dir("pdump_unfused");
  const std::string unfused =
      "--precision_dump_steps 1 --bias_dropout_fusion false --bias_swiglu_fusion false "
      "--cross_entropy_loss_fusion false";
  const RunResult one = run_mtrain(dump_job(tmp / "out1", tmp / "dump1", unfused), tmp, "tp1");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  const RunResult two = run_mtrain(dump_job(tmp / "out2", tmp / "dump2", unfused + " --tensor_model_parallel_size 2"),
                                   tmp, "tp2", launch_ranks(2));
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  const std::string dump = read_text(tmp / "dump1" / "step1" / "rank0" / "dump.json");
  for (const char* step : {"activation_func.mul.backward.0", "activation_func.silu.backward.0",
                           "cross_entropy.log_softmax.forward.0", "mlp_bda.residual_add.forward.0"})
    EXPECT_TRUE(contains(dump, step)) << step;
  const RunResult cmp = run_mtrain({"compare", (tmp / "dump1").string(), (tmp / "dump2").string()}, tmp, "cmp");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.describe();
  EXPECT_FALSE(contains(cmp.out, "skipped")) << cmp.out;

  fs::remove_all(tmp / "dump2" / "step1" / "rank1");
  const RunResult part = run_mtrain({"compare", (tmp / "dump1").string(), (tmp / "dump2").string()}, tmp, "part");
  EXPECT_EQ(part.exit_code, 4) << part.describe();
  EXPECT_TRUE(contains(part.err, "no dump of the rank at tensor-parallel rank 1, pipeline stage 0")) << part.err;
}

TEST(MtrainPrecisionDump, BadArgumentsGetTheirExitCodes) {
  const fs::path tmp = make_temp_dir("pdump_args");
  RunResult r = run_mtrain({"compare", (tmp / "nope").string(), tmp.string()}, tmp, "missing");
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_TRUE(contains(r.err, "no such directory")) << r.err;
  r = run_mtrain({"compare", tmp.string(), tmp.string()}, tmp, "not_dump");
  EXPECT_EQ(r.exit_code, 4) << r.describe();
  EXPECT_TRUE(contains(r.err, "not a precision dump")) << r.err;
  r = run_mtrain(dump_job(tmp / "out", tmp / "dump", "--precision_dump_ranks 1"), tmp, "rank");
  EXPECT_EQ(r.exit_code, 3) << r.describe();
  EXPECT_TRUE(contains(r.err, "--precision_dump_ranks 1: no such rank in a world of 1 rank")) << r.err;
  r = run_mtrain({"compare", "--help"}, tmp, "help");
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "usage: mtrain compare")) << r.out;
}

}  // namespace
}  // namespace mtrain::functional
