// Megatron indexed pretraining data through the real binary: `mtrain
// preprocess_data` writes .bin/.idx that lib/data reads back, refuses a
// malformed line naming file:line; `mtrain pt --data_path` trains on it,
// builds the sample indices once and reads them from the cache afterwards;
// and 10 + resume + 10 iterations equal 20 straight ones bit for bit (also
// resumed under DP = 2, within reduction-order rounding).
#include <gtest/gtest.h>

#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

class IndexedData : public MtrainTest {
 protected:
  // The demo corpus (paragraphs of configs/demo/pt.txt) as JSONL, preprocessed
  // to <tmp>/demo_text_document.
  std::string prepare() {
    const std::string text = read_text(fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/pt.txt");
    std::string jsonl;
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find("\n\n", at);
      if (end == std::string::npos) end = text.size();
      const std::string para = text.substr(at, end - at);
      if (para.find_first_not_of(" \n") != std::string::npos) jsonl += nlohmann::json{{"text", para}}.dump() + "\n";
      at = end + 2;
    }
    write_text(tmp_ / "pt.jsonl", jsonl);
    const RunResult r =
        run({"preprocess_data", "--input", (tmp_ / "pt.jsonl").string(), "--output-prefix", (tmp_ / "demo").string(),
             "--tokenizer", "configs/demo/tokenizer.json", "--append_eod", "--log_interval", "500"},
            "preprocess");
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_TRUE(contains(r.out, "Processed 500 documents (")) << r.out;
    return (tmp_ / "demo_text_document").string();
  }

  std::vector<std::string> pt_job(const std::string& prefix, const fs::path& out, const std::string& extra = "") {
    return concat(concat(words("pt --model_preset demo --tokenizer configs/demo/tokenizer.json --split 98,2,0 "
                               "--micro_batch_size 2 --global_batch_size 8 --lr 1e-3 --lr_warmup_iters 2 "
                               "--lr_decay_iters 40 --log_interval 1 --num_threads 1 --train_iters 20 "
                               "--save_interval 10 --seed 1234"),
                         words(extra)),
                  {"--data_path", prefix, "--output_dir", out.string()});
  }
};

TEST_F(IndexedData, PreprocessWritesAMegatronIndexedDataset) {
  const std::string prefix = prepare();
  const data::IndexedDataset ds(prefix);
  const int32_t eod =
      data::Tokenizer::load(std::string(MTRAIN_SOURCE_DIR) + "/configs/demo/tokenizer.json").special().eod;
  EXPECT_EQ(ds.dtype(), data::IndexedDType::kUInt16);  // vocab 1024
  EXPECT_GT(ds.num_documents(), 1000);
  EXPECT_EQ(ds.num_sequences(), ds.num_documents());
  for (int64_t s = 0; s < ds.num_sequences(); ++s) {
    const std::vector<int32_t> t = ds.get(s);
    ASSERT_FALSE(t.empty());
    ASSERT_EQ(t.back(), eod) << "document " << s << " ends with <|endoftext|> (--append_eod)";
  }
}

TEST_F(IndexedData, MalformedLineIsADataErrorNamingFileAndLine) {
  write_text(tmp_ / "bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": 3}\n");
  const RunResult r = run({"preprocess_data", "--input", (tmp_ / "bad.jsonl").string(), "--output_prefix",
                           (tmp_ / "bad").string(), "--tokenizer", "configs/demo/tokenizer.json"});
  EXPECT_EQ(r.exit_code, 4) << r.describe();
  EXPECT_TRUE(contains(r.err, (tmp_ / "bad.jsonl").string() + ":2: no string field 'text'")) << r.err;
  write_text(tmp_ / "bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \n");
  const RunResult j = run({"preprocess_data", "--input", (tmp_ / "bad.jsonl").string(), "--output_prefix",
                           (tmp_ / "bad").string(), "--tokenizer", "configs/demo/tokenizer.json"});
  EXPECT_EQ(j.exit_code, 4) << j.describe();
  EXPECT_TRUE(contains(j.err, (tmp_ / "bad.jsonl").string() + ":2:")) << j.err;
  const RunResult u = run({"preprocess_data", "--input", "x.jsonl"});
  EXPECT_EQ(u.exit_code, 2) << u.describe();
}

TEST_F(IndexedData, PtTrainsAndTheSecondRunReadsTheIndexCache) {
  const std::string prefix = prepare();
  const RunResult first = run(pt_job(prefix, tmp_ / "a", "--eval_interval 10 --eval_iters 1"), "first");
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  EXPECT_TRUE(contains(first.out, "160 training samples (0 index set(s) read from the cache, 1 built), 8 validation"))
      << first.out;
  EXPECT_TRUE(fs::exists(tmp_ / "cache" / "GPTDataset_indices"));
  const auto rows = train_rows(tmp_ / "a");
  ASSERT_EQ(rows.size(), 20u);
  EXPECT_LT(rows.back().at("loss").get<double>(), rows.front().at("loss").get<double>() - 1.0);

  const RunResult second = run(pt_job(prefix, tmp_ / "b", "--eval_interval 10 --eval_iters 1"), "second");
  ASSERT_EQ(second.exit_code, 0) << second.describe();
  EXPECT_TRUE(contains(second.out, "(1 index set(s) read from the cache, 0 built)")) << second.out;
  const auto again = train_rows(tmp_ / "b");
  ASSERT_EQ(again.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(again[i].at("loss"), rows[i].at("loss")) << i;

  const RunResult bad = run(pt_job(prefix, tmp_ / "c", "--split 1,2,3,4"), "bad_split");
  EXPECT_EQ(bad.exit_code, 3) << bad.describe();
  EXPECT_TRUE(contains(bad.err, "--split 1,2,3,4: more than three parts")) << bad.err;
}

// Megatron's NullTokenizer: pre-tokenized data needs no tokenizer file when
// --vocab_size is given. The ids are read as they are, so with the demo
// tokenizer's vocabulary (1024) the run equals the one that loads the
// tokenizer, loss for loss; eod is vocab_size - 1 (Megatron since #4057).
TEST_F(IndexedData, VocabSizeWithoutATokenizerIsMegatronsNullTokenizer) {
  const std::string prefix = prepare();
  auto job = [&](const std::string& name, const std::string& extra) {
    return run(concat(concat(words("pt --model_preset demo --split 98,2,0 --micro_batch_size 2 --global_batch_size 8 "
                                   "--lr 1e-3 --lr_warmup_iters 2 --log_interval 1 --num_threads 1 --train_iters 4 "
                                   "--seed 1234"),
                             words(extra)),
                      {"--data_path", prefix, "--output_dir", (tmp_ / name).string()}),
               name);
  };
  const RunResult tok = job("tok", "--tokenizer configs/demo/tokenizer.json");
  ASSERT_EQ(tok.exit_code, 0) << tok.describe();
  const RunResult null = job("null", "--vocab_size 1024");
  ASSERT_EQ(null.exit_code, 0) << null.describe();
  EXPECT_TRUE(contains(null.out, " > building NullTokenizer tokenizer: vocab size 1024, eod id 1023")) << null.out;
  EXPECT_TRUE(contains(null.out, " > padded vocab (size: 1024) with 0 dummy tokens (new size: 1024)")) << null.out;
  const auto a = train_rows(tmp_ / "tok"), b = train_rows(tmp_ / "null");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(a[i].at("loss"), b[i].at("loss")) << "iteration " << i + 1;

  // Megatron's spelling, and Megatron's padding to a multiple of 128.
  const RunResult spelled = job("spelled", "--tokenizer_type NullTokenizer --vocab_size 1100");
  ASSERT_EQ(spelled.exit_code, 0) << spelled.describe();
  EXPECT_TRUE(contains(spelled.out, " > padded vocab (size: 1100) with 52 dummy tokens (new size: 1152)"))
      << spelled.out;

  const RunResult small = job("small", "--vocab_size 100");
  EXPECT_EQ(small.exit_code, 4) << small.describe();
  EXPECT_TRUE(contains(small.err, "is outside the vocabulary of 100")) << small.err;
  const RunResult none = job("none", "");
  EXPECT_EQ(none.exit_code, 3) << none.describe();
  EXPECT_TRUE(contains(none.err, "no tokenizer: --tokenizer is not set")) << none.err;
  EXPECT_TRUE(contains(none.err, "--vocab_size N instead: Megatron's NullTokenizer")) << none.err;
  const RunResult no_size = job("no_size", "--tokenizer_type NullTokenizer");
  EXPECT_EQ(no_size.exit_code, 3) << no_size.describe();
  EXPECT_TRUE(contains(no_size.err, "--tokenizer_type NullTokenizer needs --vocab_size")) << no_size.err;
}

void seed_with_iteration_10(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from / "iter_0000010", to / "iter_0000010", fs::copy_options::recursive);
  write_text(to / "latest_checkpointed_iteration.txt", "10");
}

// Iterations 11..20 of `resumed` against `straight` (tolerance 0: bit for bit).
void expect_continues(const fs::path& straight, const fs::path& resumed, double tolerance) {
  const auto a = train_rows(straight), b = train_rows(resumed);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(b[i].at("consumed_samples"), a[i + 10].at("consumed_samples")) << i;
    const double x = a[i + 10].at("loss").get<double>(), y = b[i].at("loss").get<double>();
    if (tolerance == 0)
      EXPECT_EQ(x, y) << "iteration " << i + 11;
    else
      EXPECT_NEAR(x, y, tolerance * std::abs(x)) << "iteration " << i + 11;
  }
}

TEST_F(IndexedData, TenPlusResumePlusTenEqualsTwentyBitForBit) {
  const std::string prefix = prepare();
  const RunResult straight = run(pt_job(prefix, tmp_ / "straight"), "straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  seed_with_iteration_10(tmp_ / "straight", tmp_ / "resumed");
  const RunResult resumed =
      run(concat(pt_job(prefix, tmp_ / "resumed"), {"--load", (tmp_ / "resumed").string()}), "resumed");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  EXPECT_TRUE(contains(resumed.out, "at iteration 10")) << resumed.out;
  expect_continues(tmp_ / "straight", tmp_ / "resumed", 0);

  // The same checkpoint resumed by 2 data-parallel ranks reads the same samples.
  seed_with_iteration_10(tmp_ / "straight", tmp_ / "dp2");
  const RunResult dp2 =
      run(concat(pt_job(prefix, tmp_ / "dp2"), {"--load", (tmp_ / "dp2").string()}), "dp2", launch_ranks(2));
  ASSERT_EQ(dp2.exit_code, 0) << dp2.describe();
  expect_continues(tmp_ / "straight", tmp_ / "dp2", 1e-5);
}

}  // namespace
}  // namespace mtrain::functional
