// `mtrain sft` on data users bring, through the real binary: alpaca JSONL +
// ShareGPT JSON + CSV files (written here from the demo records) with `#N`
// sampling, the " > data:" line's exact counts with and without --packing,
// --template, --strict false with its report, bad input with exit 4, and an
// exact resume (10 + resume + 10 == 20 straight, bit for bit) of a packed run
// over two sampled datasets.
#include <gtest/gtest.h>

#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

constexpr int kData = 4;

class SftData : public MtrainTest {
 protected:
  // Demo records [from, to) as alpaca {"instruction", "input", "output"} objects.
  static std::vector<nlohmann::json> alpaca_records(size_t from, size_t to) {
    std::vector<nlohmann::json> out;
    for (const std::string& line : lines_of(read_text(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/sft.jsonl"))) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("instruction")) out.push_back(j);
    }
    return std::vector<nlohmann::json>(out.begin() + from, out.begin() + to);
  }
  static std::string user_text(const nlohmann::json& r) {
    const std::string input = r.at("input");
    return r.at("instruction").get<std::string>() + (input.empty() ? "" : "\n" + input);
  }
  static std::string csv_cell(const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  }
  // alpaca.jsonl (40), sharegpt.json (30), alpaca.csv (20): distinct demo records.
  void write_datasets() {
    std::string jsonl;
    for (const auto& r : alpaca_records(0, 40)) jsonl += r.dump() + "\n";
    write_text(tmp_ / "alpaca.jsonl", jsonl);
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : alpaca_records(40, 70)) {
      list.push_back({{"conversations",
                       {{{"from", "system"}, {"value", "Answer briefly."}},
                        {{"from", "human"}, {"value", user_text(r)}},
                        {{"from", "gpt"}, {"value", r.at("output")}}}}});
    }
    write_text(tmp_ / "sharegpt.json", list.dump(1));
    std::string csv = "instruction,input,output\n";
    for (const auto& r : alpaca_records(70, 90))
      csv += csv_cell(r.at("instruction")) + "," + csv_cell(r.at("input")) + "," + csv_cell(r.at("output")) + "\n";
    write_text(tmp_ / "alpaca.csv", csv);
  }
  std::vector<std::string> job(const std::string& datasets, const std::string& extra, const std::string& out) {
    return concat(concat(words("sft --model_preset demo --tokenizer configs/demo/tokenizer.json --max_length 128 "
                               "--micro_batch_size 2 --global_batch_size 4 --lr 1e-3 --log_interval 1 "
                               "--num_threads 1 --num_generate_samples 0 --dataset"),
                         words(datasets + " " + extra)),
                  {"--output_dir", (tmp_ / out).string()});
  }
  std::string path(const std::string& name) const { return (tmp_ / name).string(); }
};

TEST_F(SftData, AlpacaShareGptAndCsvTrainTogether) {
  write_datasets();
  const RunResult r = run(job(path("alpaca.jsonl") + "#25 " + path("sharegpt.json") + "#45 " + path("alpaca.csv"),
                              "--num_train_epochs 1", "out"));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // 25 + 45 (30 + 15) + 20 = 90 samples; swift's rule: 90 // 2 * 2 * 1 // 4 = 22 iterations.
  EXPECT_TRUE(contains(r.out, " > data: 90 training samples, 0 validation samples, ")) << r.out;
  EXPECT_TRUE(contains(r.out, "; 22 iterations of 4 samples (0.98 epochs)")) << r.out;
  const auto rows = train_rows(tmp_ / "out");
  ASSERT_EQ(rows.size(), 22u);
  EXPECT_LT(rows.back().at("loss").get<double>(), rows.front().at("loss").get<double>());
}

TEST_F(SftData, PackingStatesRowsAndEpochsCountRows) {
  write_datasets();
  const std::string data = path("alpaca.jsonl") + " " + path("alpaca.csv");
  const RunResult packed =
      run(job(data, "--packing true --num_train_epochs 2 --split_dataset_ratio 0.1", "packed"), "packed");
  ASSERT_EQ(packed.exit_code, 0) << packed.describe();
  const std::regex line(R"( > data: 54 training samples, (\d+) validation rows, (\d+) tokens; packed into (\d+) rows )"
                        R"(of <= 128 tokens; (\d+) iterations of 4 rows \((2\.00|1\.\d\d) epochs\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(packed.out, m, line)) << packed.out;
  const int rows = std::stoi(m[3]);
  EXPECT_LT(rows, 54 / 3) << "short demo samples: several per 128-token row";
  EXPECT_EQ(std::stoi(m[4]), rows / 2 * 2 * 2 / 4);  // swift's rule over packed rows
  EXPECT_EQ(static_cast<int>(train_rows(tmp_ / "packed").size()), std::stoi(m[4]));
}

TEST_F(SftData, TemplateFlagOverridesTheTokenizerConfig) {
  write_datasets();
  const RunResult r = run(job(path("alpaca.csv"), "--train_iters 1 --template llama3", "llama"));
  EXPECT_EQ(r.exit_code, kData) << r.describe();
  EXPECT_TRUE(contains(r.err, "has no <|begin_of_text|> token, which the llama3 template needs")) << r.err;
  const RunResult qwen = run(job(path("alpaca.csv"), "--train_iters 1 --template qwen", "qwen"), "qwen");
  ASSERT_EQ(qwen.exit_code, 0) << qwen.describe();
  const RunResult bad = run(job(path("alpaca.csv"), "--train_iters 1 --template vicuna", "bad"), "bad");
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();  // a bad command-line value is a usage error
  EXPECT_TRUE(contains(bad.err, "invalid value for --template: invalid choice: 'vicuna'")) << bad.err;
}

TEST_F(SftData, NonStrictSkipsMalformedRecordsAndSaysHowMany) {
  write_datasets();
  std::string text = read_text(tmp_ / "alpaca.jsonl");
  text += "{\"instruction\": \"cut short\n{\"question\": \"no format\"}\n";
  write_text(tmp_ / "broken.jsonl", text);
  const RunResult strict = run(job(path("broken.jsonl"), "--train_iters 1", "strict"), "strict");
  EXPECT_EQ(strict.exit_code, kData) << strict.describe();
  EXPECT_TRUE(contains(strict.err, path("broken.jsonl") + ":41:")) << strict.err;

  const RunResult skip = run(job(path("broken.jsonl"), "--train_iters 1 --strict false", "skip"), "skip");
  ASSERT_EQ(skip.exit_code, 0) << skip.describe();
  EXPECT_TRUE(contains(skip.out, " > data: 40 training samples")) << skip.out;
  EXPECT_TRUE(contains(skip.out, "(2 malformed records skipped (--strict false, --max_malformed 100), the first: " +
                                     path("broken.jsonl") + ":41:"))
      << skip.out;
  const RunResult capped =
      run(job(path("broken.jsonl"), "--train_iters 1 --strict false --max_malformed 1", "capped"), "capped");
  EXPECT_EQ(capped.exit_code, kData) << capped.describe();
  EXPECT_TRUE(contains(capped.err, path("broken.jsonl") + ":42: unknown sample format")) << capped.err;
  EXPECT_TRUE(contains(capped.err, "more than --max_malformed 1")) << capped.err;
}

TEST_F(SftData, BadInputExits4NamingThePath) {
  write_text(tmp_ / "data.txt", "hello\n");
  const RunResult unknown = run(job(path("data.txt"), "--train_iters 1", "unknown"), "unknown");
  EXPECT_EQ(unknown.exit_code, kData) << unknown.describe();
  EXPECT_TRUE(contains(unknown.err, path("data.txt") + ": unknown dataset format '.txt'")) << unknown.err;
  fs::create_directories(tmp_ / "empty_dir");
  const RunResult folder = run(job(path("empty_dir"), "--train_iters 1", "folder"), "folder");
  EXPECT_EQ(folder.exit_code, kData) << folder.describe();
  EXPECT_TRUE(contains(folder.err, path("empty_dir") + ": the folder has no dataset files")) << folder.err;
  write_text(tmp_ / "empty.csv", "instruction,output\n");
  const RunResult empty = run(job(path("empty.csv"), "--train_iters 1", "empty"), "empty");
  EXPECT_EQ(empty.exit_code, kData) << empty.describe();
  EXPECT_TRUE(contains(empty.err, path("empty.csv") + ": the dataset has no samples")) << empty.err;
}

TEST_F(SftData, PackedTwoDatasetRunResumesBitForBit) {
  write_datasets();
  const std::string data = path("alpaca.jsonl") + "#60 " + path("sharegpt.json") + "#12";
  const std::string extra =
      "--packing true --train_iters 20 --save_interval 10 --split_dataset_ratio 0.1 "
      "--eval_interval 10 --eval_iters 1";
  const RunResult straight = run(job(data, extra, "straight"), "straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  fs::create_directories(tmp_ / "resumed");
  fs::copy(tmp_ / "straight" / "iter_0000010", tmp_ / "resumed" / "iter_0000010", fs::copy_options::recursive);
  write_text(tmp_ / "resumed" / "latest_checkpointed_iteration.txt", "10");
  const RunResult resumed = run(concat(job(data, extra, "resumed"), {"--load", path("resumed")}), "resumed");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  const auto a = train_rows(tmp_ / "straight"), b = train_rows(tmp_ / "resumed");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].at("iteration"), a[i + 10].at("iteration"));
    EXPECT_EQ(b[i].at("consumed_samples"), a[i + 10].at("consumed_samples")) << "iteration " << i + 11;
    EXPECT_EQ(b[i].at("loss"), a[i + 10].at("loss")) << "iteration " << i + 11;
    EXPECT_EQ(b[i].at("grad_norm"), a[i + 10].at("grad_norm")) << "iteration " << i + 11;
  }
  const auto ea = eval_rows(tmp_ / "straight"), eb = eval_rows(tmp_ / "resumed");
  ASSERT_EQ(ea.size(), 2u);
  ASSERT_EQ(eb.size(), 1u);
  EXPECT_EQ(eb[0].at("eval_loss"), ea[1].at("eval_loss"));
}

}  // namespace
}  // namespace mtrain::functional
