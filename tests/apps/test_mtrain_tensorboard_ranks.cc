// --log_params_norm and --log_num_zeros_in_grad under TP=2, PP=2 and DP=2
// with the distributed optimizer (two ranks through mpirun, label mpi) equal
// the single-device run's, and only the last rank writes an event file.
// Tolerance: the layouts sum in another order, so after a step each weight
// may differ by a few fp32 ulps (2^-23 relative each); the norm's relative
// difference is bounded by the largest one: 1e-6 allows 8 ulps. The zeros
// are structural (embedding rows of tokens absent from the batch get no
// gradient in any layout): whole rows of hidden_size elements, the same rows
// in every layout. Beside them a gradient element can be exactly zero by
// cancellation, and whether a sum cancels exactly depends on its order (TP
// all-reduces partial sums): seen on a Zen 3 machine, TP 2 had 937 rows + 1
// such element where one device had 937 rows. So the rows are compared
// exactly (count / hidden_size), and the scattered rest must stay below one row.
#include <cmath>

#include "mtrain_runner.h"
#include "tensorboard/event_file_reader.h"

namespace mtrain::functional {
namespace {

std::vector<std::string> job(const fs::path& out) {
  return concat(words("sft configs/sft_demo.yaml --lr_decay_iters 2400 --log_interval 1 --num_threads 1 "
                      "--num_generate_samples 0 --train_iters 2 --eval_interval 0 --log_params_norm "
                      "--log_num_zeros_in_grad --output_dir"),
                {out.string()});
}

// configs/models/demo.yaml's hidden_size: the length of an embedding row.
constexpr int64_t kHidden = 256;

class TensorBoardRanks : public MtrainTest {};

TEST_F(TensorBoardRanks, ParamsNormAndZerosOfEveryLayoutEqualOneDevices) {
  const RunResult one = run(job(tmp_ / "one"), "one");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  const auto want = train_rows(tmp_ / "one");
  ASSERT_EQ(want.size(), 2u);
  RunOptions two;
  two.env = {{"NPROC_PER_NODE", "2"}};
  for (const std::string layout :
       {"--tensor_model_parallel_size 2", "--pipeline_model_parallel_size 2", "--use_distributed_optimizer"}) {
    const fs::path out = tmp_ / std::to_string(layout.size());
    const RunResult r = run(concat(job(out), words(layout)), "layout", two);
    ASSERT_EQ(r.exit_code, 0) << layout << "\n" << r.describe();
    const auto rows = train_rows(out);
    ASSERT_EQ(rows.size(), want.size()) << layout;
    for (size_t i = 0; i < rows.size(); ++i) {
      const double norm = want[i].at("params_norm").get<double>();
      EXPECT_NEAR(rows[i].at("params_norm").get<double>(), norm, 1e-6 * norm) << layout << " iteration " << i + 1;
      const int64_t zeros = rows[i].at("num_zeros").get<int64_t>(), want_zeros = want[i].at("num_zeros").get<int64_t>();
      EXPECT_EQ(zeros / kHidden, want_zeros / kHidden) << layout << " iteration " << i + 1 << ": zero rows";
      EXPECT_LT(std::abs(zeros - want_zeros), kHidden) << layout << " iteration " << i + 1;
    }
    EXPECT_EQ(tbtest::event_files(out / "runs").size(), 1u) << layout << ": the last rank alone writes";
  }
}

}  // namespace
}  // namespace mtrain::functional
