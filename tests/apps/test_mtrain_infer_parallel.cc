// `mtrain infer` under model parallelism answers exactly as one device: a
// checkpoint of the demo job, batch inference over 4 records with greedy
// decoding at TP 1, then 2 ranks at TP 2 and at PP 2, and the chat at TP 2
// (label mpi: mpirun).
#include <gtest/gtest.h>

#include <algorithm>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

std::vector<std::string> responses(const fs::path& jsonl) {
  std::vector<std::string> out;
  for (const nlohmann::json& row : read_jsonl(jsonl)) out.push_back(row["response"].get<std::string>());
  return out;
}

TEST(MtrainInferParallel, Tp2AndPp2AnswerLikeOneDevice) {
  const fs::path dir = make_temp_dir("infer_parallel");
  const fs::path run = dir / "run";
  const RunResult train = run_mtrain(demo_sft_args(30, run), dir, "train");
  ASSERT_EQ(train.exit_code, 0) << train.describe();
  std::istringstream all(read_text(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/sft.jsonl"));
  std::string rows, line;
  for (int i = 0; i < 4 && std::getline(all, line); ++i) rows += line + "\n";
  write_text(dir / "val.jsonl", rows);
  const auto infer = [&](const std::string& tag, int ranks, const std::string& layout) {
    const fs::path result = dir / (tag + ".jsonl");
    const RunResult r =
        run_mtrain(concat({"infer", "--load", run.string(), "--val_dataset", (dir / "val.jsonl").string(),
                           "--max_new_tokens", "16", "--result_path", result.string(), "--num_threads", "1"},
                          words(layout)),
                   dir, tag, launch_ranks(ranks));
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return responses(result);
  };
  const std::vector<std::string> one = infer("tp1", 1, "");
  ASSERT_EQ(one.size(), 4u);
  EXPECT_EQ(infer("tp2", 2, "--tensor_model_parallel_size 2"), one);
  EXPECT_EQ(infer("pp2", 2, "--pipeline_model_parallel_size 2"), one);

  // The chat: rank 0 reads stdin (mpirun forwards it) and shares each query with the other rank.
  write_text(dir / "chat.txt", "What colour is a leaf?\nWhich day follows Friday?\nexit\n");
  const auto chat = [&](const std::string& tag, int ranks, const std::string& layout) {
    RunOptions o = launch_ranks(ranks);
    o.stdin_path = (dir / "chat.txt").string();
    const RunResult r = run_mtrain(
        concat({"infer", "--load", run.string(), "--max_new_tokens", "16", "--num_threads", "1"}, words(layout)), dir,
        tag, o);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return r.out.substr(std::min(r.out.size(), r.out.find("<<< ")));
  };
  const std::string chat_one = chat("chat_tp1", 1, "");
  size_t prompts = 0;
  for (size_t p = chat_one.find("<<< "); p != std::string::npos; p = chat_one.find("<<< ", p + 1)) ++prompts;
  EXPECT_EQ(prompts, 3u) << chat_one;  // two queries answered, then `exit`
  EXPECT_EQ(chat("chat_tp2", 2, "--tensor_model_parallel_size 2"), chat_one);
}

}  // namespace
}  // namespace mtrain::functional
