// `mtrain infer` end to end on a checkpoint of the demo job: batch inference
// writes swift's JSONL and answers exactly what the training-side greedy
// generation (--num_generate_samples, no KV cache) answered for the same
// prompts; the terminal chat (stdin piped) keeps a multi-turn history,
// forgets it on `clear`, ends on `exit`, and streams the same text; bad input
// ends with one clear error and the README's exit code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class MtrainInfer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(make_temp_dir("infer"));
    run_ = *dir_ / "run";
    // 30 iterations with a validation pass at the end; then greedy answers to the first 3 training prompts.
    train_ = new RunResult(run_mtrain(
        concat(demo_sft_args(30, run_), words("--num_generate_samples 3 --max_new_tokens 12 --eval_interval 30")),
        *dir_, "train"));
    // The same 3 records as a validation file.
    std::istringstream all(read_text(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/sft.jsonl"));
    std::string rows, line;
    for (int i = 0; i < 3 && std::getline(all, line); ++i) rows += line + "\n";
    write_text(*dir_ / "val.jsonl", rows);
  }
  static void TearDownTestSuite() {
    delete train_;
    delete dir_;
  }
  void SetUp() override { ASSERT_EQ(train_->exit_code, 0) << train_->describe(); }

  // The "mtrain:" answers of the training run's closing sample (indentation undone).
  static std::vector<std::string> training_answers() {
    std::vector<std::string> out;
    const std::string& s = train_->out;
    const std::string key = "  mtrain:    ";
    for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + 1)) {
      const std::string printed = s.substr(p + key.size(), s.find("\n\n", p) - p - key.size());
      const std::vector<std::string> lines = lines_of(printed);
      std::string a = lines.empty() ? "" : lines[0];
      for (size_t i = 1; i < lines.size(); ++i) a.append("\n").append(lines[i], 13);  // continuation indent
      out.push_back(a);
    }
    return out;
  }

  static inline fs::path* dir_ = nullptr;
  static inline fs::path run_;
  static inline RunResult* train_ = nullptr;
};

TEST_F(MtrainInfer, BatchInferenceWritesJsonlAndAnswersLikeTheTrainingRunsGreedyGeneration) {
  const fs::path result = *dir_ / "batch.jsonl";
  const RunResult r = run_mtrain({"infer", "--load", run_.string(), "--val_dataset", (*dir_ / "val.jsonl").string(),
                                  "--max_new_tokens", "12", "--result_path", result.string(), "--num_threads", "1"},
                                 *dir_, "batch");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<nlohmann::json> rows = read_jsonl(result);
  const std::vector<std::string> expect = training_answers();
  ASSERT_EQ(expect.size(), 3u) << train_->out;
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["labels"], "HAT");
  EXPECT_EQ(rows[1]["messages"].back()["content"], "What colour is a leaf?");
  EXPECT_EQ(rows[1]["messages"].back()["role"], "user");
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i]["response"].get<std::string>(), expect[i]) << i;
  // --stream true prints every answer as it is decoded, one after the other.
  const RunResult s =
      run_mtrain({"infer", "--load", run_.string(), "--val_dataset", (*dir_ / "val.jsonl").string(), "--max_new_tokens",
                  "12", "--result_path", (*dir_ / "stream.jsonl").string(), "--num_threads", "1", "--stream", "true"},
                 *dir_, "batch_stream");
  ASSERT_EQ(s.exit_code, 0) << s.describe();
  size_t at = s.out.find("loaded checkpoint");
  for (const std::string& answer : expect) {  // in order, each on its own line
    at = s.out.find(answer, at);
    ASSERT_NE(at, std::string::npos) << answer << "\n" << s.out;
    at = s.out.find('\n', at);
  }
}

TEST_F(MtrainInfer, ChatKeepsHistoryClearsItAndStreamsTheSameText) {
  write_text(*dir_ / "chat.txt",
             "What colour is a leaf?\nWhich day follows Friday?\nclear\nWhich day follows "
             "Friday?\nexit\nnever read\n");
  std::vector<std::string> outs;
  for (const char* stream : {"false", "true"}) {
    const fs::path result = *dir_ / (std::string("chat_") + stream + ".jsonl");
    RunOptions o;
    o.stdin_path = (*dir_ / "chat.txt").string();
    const RunResult r = run_mtrain({"infer", "--load", run_.string(), "--max_new_tokens", "12", "--stream", stream,
                                    "--result_path", result.string(), "--num_threads", "1"},
                                   *dir_, std::string("chat_") + stream, o);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const std::vector<nlohmann::json> rows = read_jsonl(result);
    ASSERT_EQ(rows.size(), 3u) << r.out;  // three queries; `clear` and `exit` are commands
    // Second query: with the first round as history; after `clear`: alone
    // (the demo's chatml template has no default system prompt).
    ASSERT_EQ(rows[1]["messages"].size(), 3u);  // user, assistant, user
    EXPECT_EQ(rows[1]["messages"][1]["content"], rows[0]["response"]);
    EXPECT_EQ(rows[2]["messages"].size(), 1u);  // user
    EXPECT_EQ(r.out.find("never read"), std::string::npos);
    std::string responses;
    for (const auto& row : rows) responses += row["response"].get<std::string>() + "|";
    outs.push_back(responses);
    // Each answer is printed after the prompt.
    EXPECT_NE(r.out.find("<<< " + rows[0]["response"].get<std::string>()), std::string::npos) << r.out;
  }
  EXPECT_EQ(outs[0], outs[1]);
}

TEST_F(MtrainInfer, ChatResetSystemAndMultiLineInputAsSwift) {
  write_text(*dir_ / "commands.txt",
             "reset-system\nYou are a pirate.\nmulti-line\nWhat colour\nis a leaf?#\nsingle-line#\n"
             "What colour is a leaf?\nreset-system\ndefault-system\nHi\nquit\n");
  const fs::path result = *dir_ / "commands.jsonl";
  RunOptions o;
  o.stdin_path = (*dir_ / "commands.txt").string();
  const RunResult r = run_mtrain({"infer", "--load", run_.string(), "--max_new_tokens", "4", "--result_path",
                                  result.string(), "--num_threads", "1"},
                                 *dir_, "commands", o);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("<<<[S] "), std::string::npos) << r.out;  // awaiting the system prompt
  EXPECT_NE(r.out.find("<<<[M] "), std::string::npos) << r.out;  // multi-line mode
  const std::vector<nlohmann::json> rows = read_jsonl(result);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  const nlohmann::json system = {{"role", "system"}, {"content", "You are a pirate."}};
  EXPECT_EQ(rows[0]["messages"],
            nlohmann::json::array({system, {{"role", "user"}, {"content", "What colour\nis a leaf?"}}}));
  ASSERT_EQ(rows[1]["messages"].size(), 4u);  // system, the first round, the single-line query
  EXPECT_EQ(rows[1]["messages"][0], system);
  EXPECT_EQ(rows[1]["messages"][3]["content"], "What colour is a leaf?");
  // default-system: the template's (chatml: none), and a fresh history.
  EXPECT_EQ(rows[2]["messages"], nlohmann::json::array({{{"role", "user"}, {"content", "Hi"}}}));
}

TEST_F(MtrainInfer, HfModelDirectoryAnswersLikeItsCheckpointAndHonoursGenerationConfig) {
  const fs::path hf = *dir_ / "hf";
  const RunResult e =
      run_mtrain({"export", "--to_hf", "--load", run_.string(), "--output_dir", hf.string()}, *dir_, "export");
  ASSERT_EQ(e.exit_code, 0) << e.describe();
  fs::copy_file(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/tokenizer.json", hf / "tokenizer.json");
  const auto infer = [&](const std::string& tag, const std::vector<std::string>& extra) {
    const fs::path result = *dir_ / (tag + ".jsonl");
    const RunResult r =
        run_mtrain(concat({"infer", "--model", hf.string(), "--val_dataset", (*dir_ / "val.jsonl").string(),
                           "--max_new_tokens", "12", "--result_path", result.string(), "--num_threads", "1"},
                          extra),
                   *dir_, tag);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    std::vector<std::string> out;
    for (const nlohmann::json& row : read_jsonl(result)) out.push_back(row["response"]);
    return out;
  };
  const std::vector<std::string> expect = training_answers();
  EXPECT_EQ(infer("hf_greedy", {}), expect);
  // A checkpoint without the run's args.json: --model supplies the shape and tokenizer, --load the weights.
  const fs::path bare = *dir_ / "bare_ckpt";
  fs::create_directories(bare);
  for (const auto& e : fs::directory_iterator(run_))
    if (e.path().filename() != "args.json") fs::copy(e.path(), bare / e.path().filename(), fs::copy_options::recursive);
  EXPECT_EQ(infer("bare_ckpt", {"--load", bare.string()}), expect);
  // HF's GenerationConfig: do_sample with a hot temperature is the default now; --temperature 0 is greedy again.
  write_text(hf / "generation_config.json", R"({"do_sample": true, "temperature": 50.0, "top_k": 0})");
  EXPECT_NE(infer("hf_sampled", {}), expect);
  EXPECT_EQ(infer("hf_flag_greedy", {"--temperature", "0"}), expect);
}

TEST_F(MtrainInfer, LoadDataArgsAnswersTheTrainingRunsHeldOutRecordsIntoSwiftsDefaultPath) {
  const RunResult r = run_mtrain(
      {"infer", "--load", run_.string(), "--load_data_args", "true", "--max_new_tokens", "4", "--num_threads", "1"},
      *dir_, "load_data_args");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // <load>/infer_result/<YYYYmmdd-HHMMSS>.jsonl
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(run_ / "infer_result")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(std::regex_match(files[0].filename().string(), std::regex(R"(\d{8}-\d{6}\.jsonl)")));
  // As many records as the training run held out (configs/sft_demo.yaml: split_dataset_ratio 0.02) ...
  std::smatch m;
  ASSERT_TRUE(std::regex_search(train_->out, m, std::regex(R"((\d+) validation samples)"))) << train_->out;
  const std::vector<nlohmann::json> rows = read_jsonl(files[0]);
  EXPECT_EQ(rows.size(), std::stoul(m[1])) << r.out;
  // ... each one of the demo records, with its answer as the reference.
  std::set<std::string> outputs;
  for (const std::string& line : lines_of(read_text(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/sft.jsonl"))) {
    const nlohmann::json rec = nlohmann::json::parse(line);  // alpaca, or messages ending with the answer
    outputs.insert(rec.contains("output") ? rec["output"] : rec["messages"].back()["content"]);
  }
  for (const nlohmann::json& row : rows) EXPECT_TRUE(outputs.count(row["labels"].get<std::string>())) << row.dump();

  // Exactly the held-out records, in order: as a --val_dataset of the same weights they give the training run's
  // validation loss. (Weights kept: --finetune, one step at lr 1e-30 moves no weight by one ulp; another set of 9
  // records differs by ~1e-1, so a 1e-6 relative bound tells them apart with a wide margin either side.)
  std::string records;
  for (const nlohmann::json& row : rows) {
    nlohmann::json msgs = row["messages"];
    msgs.push_back({{"role", "assistant"}, {"content", row["labels"]}});
    records += nlohmann::json{{"messages", msgs}}.dump() + "\n";
  }
  write_text(*dir_ / "held_out.jsonl", records);
  const fs::path again = *dir_ / "eval_again";
  const RunResult e = run_mtrain(
      concat(words("sft configs/sft_demo.yaml --finetune --lr 1e-30 --min_lr 0 --lr_warmup_iters 0 --train_iters 1 "
                   "--eval_interval 1 --split_dataset_ratio 0 --num_threads 1 --num_generate_samples 0"),
             {"--load", run_.string(), "--val_dataset", (*dir_ / "held_out.jsonl").string(), "--output_dir",
              again.string()}),
      *dir_, "eval_again");
  ASSERT_EQ(e.exit_code, 0) << e.describe();
  const auto eval_loss = [](const fs::path& run) {
    double loss = -1;
    for (const nlohmann::json& j : read_jsonl(run / "logging.jsonl"))
      if (j.contains("eval_loss")) loss = j["eval_loss"];
    return loss;
  };
  const double trained = eval_loss(run_);
  ASSERT_GT(trained, 0);
  EXPECT_NEAR(eval_loss(again), trained, 1e-6 * trained);
}

TEST_F(MtrainInfer, BatchInferenceShowsAProgressLineOnATerminal) {
  if (std::system("command -v script > /dev/null 2>&1") != 0) GTEST_SKIP() << "util-linux `script` is not installed";
  const fs::path out = *dir_ / "tty.out";
  const std::string cmd = std::string(MTRAIN_BIN) + " infer --load " + run_.string() + " --val_dataset " +
                          (*dir_ / "val.jsonl").string() + " --max_new_tokens 4 --num_threads 1 --result_path " +
                          (*dir_ / "tty.jsonl").string();
  // script(1) runs the command on a pseudo-terminal.
  const std::string shell =
      "cd " MTRAIN_SOURCE_DIR " && script -qec '" + cmd + "' /dev/null > " + out.string() + " 2>&1";
  ASSERT_EQ(std::system(shell.c_str()), 0) << read_text(out);
  const std::string text = read_text(out);
  EXPECT_NE(text.find("\rinfer: 3/3 records"), std::string::npos) << text;
  // The chat on a terminal: the typed lines are echoed, the commands still work.
  write_text(*dir_ / "tty_chat.txt", "What colour is a leaf?\nclear\nWhich day follows Friday?\nexit\n");
  const std::string chat = "cd " MTRAIN_SOURCE_DIR " && script -qec '" MTRAIN_BIN " infer --load " + run_.string() +
                           " --max_new_tokens 4 --stream true --num_threads 1' /dev/null < " +
                           (*dir_ / "tty_chat.txt").string() + " > " + out.string() + " 2>&1";
  ASSERT_EQ(std::system(chat.c_str()), 0) << read_text(out);
  const std::string chat_out = read_text(out);
  size_t prompts = 0;
  for (size_t p = chat_out.find("<<< "); p != std::string::npos; p = chat_out.find("<<< ", p + 1)) ++prompts;
  EXPECT_EQ(prompts, 4u) << chat_out;  // query, clear, query, exit
  // Not on a pipe (the other tests): no progress line in a log file.
  const std::vector<std::string> argv = words(cmd);
  const RunResult r = run_mtrain(std::vector<std::string>(argv.begin() + 1, argv.end()), *dir_, "no_tty");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.find("records,"), std::string::npos) << r.out;
}

TEST_F(MtrainInfer, BadInputEndsWithOneClearErrorAndTheExitCode) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string message;
  };
  std::string long_query;
  for (int i = 0; i < 200; ++i) long_query += "word ";
  const std::string long_record = nlohmann::json{{"instruction", long_query}, {"output", "x"}}.dump() + "\n";
  write_text(*dir_ / "long.jsonl", long_record);
  const fs::path empty = *dir_ / "empty_ckpt";
  fs::create_directories(empty);
  const std::vector<Case> cases = {
      {{"infer"}, 2, "mtrain infer needs a model: --model"},
      {{"infer", "--load", empty.string()}, 5, "no args.json there"},
      {{"infer", "--load", (*dir_ / "nowhere").string()}, 5, "nowhere: no such directory"},
      {{"infer", "--model", (*dir_ / "nowhere").string()}, 3, "nowhere: not a directory"},
      {{"infer", "--load", run_.string(), "--template", "nope"}, 2, "--template nope: unknown template"},
      {{"infer", "--load", run_.string(), "--adapters", (*dir_ / "nowhere").string()}, 5, "nowhere: no such directory"},
      {{"infer", "--load", run_.string(), "--adapters", run_.string()}, 5, "neither a PEFT adapter directory nor"},
      {{"infer", "--load", run_.string(), "--merge_lora", "true"}, 2, "--merge_lora true merges LoRA adapters, but"},
      {{"infer", "--load", run_.string(), "--top_p", "0"}, 2, "--top_p 0: expected a probability in (0, 1]"},
      {{"infer", "--load", run_.string(), "--val_dataset", (*dir_ / "missing.jsonl").string()}, 4, "missing.jsonl"},
      {{"infer", "--load", run_.string(), "--ckpt_step", "7"}, 5, "iter_0000007"},
      {{"infer", "--load", run_.string(), "--val_dataset", (*dir_ / "long.jsonl").string()},
       4,
       "long.jsonl:1: the request has"},
      {{"infer", "--load", run_.string(), "--temprature", "1"}, 2, "did you mean --temperature?"},
  };
  for (const Case& c : cases) {
    const RunResult r = run_mtrain(c.args, *dir_, "bad");
    EXPECT_EQ(r.exit_code, c.code) << join(c.args) << "\n" << r.describe();
    EXPECT_NE(r.err.find(c.message), std::string::npos) << join(c.args) << "\n" << r.err;
  }
  // In the chat an over-long conversation is reported and the chat goes on.
  write_text(*dir_ / "long_chat.txt", long_query + "\nWhat colour is a leaf?\n");
  RunOptions o;
  o.stdin_path = (*dir_ / "long_chat.txt").string();
  const RunResult r = run_mtrain({"infer", "--load", run_.string(), "--max_new_tokens", "4"}, *dir_, "long_chat", o);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("`clear` forgets the history"), std::string::npos) << r.out;
  // Three prompts: the long query, the next one (answered), the end of input.
  EXPECT_NE(r.out.find("history\n<<< "), std::string::npos) << r.out;
  size_t prompts = 0;
  for (size_t p = r.out.find("<<< "); p != std::string::npos; p = r.out.find("<<< ", p + 1)) ++prompts;
  EXPECT_EQ(prompts, 3u) << r.out;
  EXPECT_EQ(r.out.size() - r.out.rfind("<<< "), 4u) << r.out;
}

}  // namespace
}  // namespace mtrain::functional
