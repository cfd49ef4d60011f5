// An sft dry run planned on part of its data (--dry_run_samples) or, without
// a dataset, on a histogram of its samples' lengths (--dry_run_lengths): the
// histogram's forms and errors, the rows the dry step then runs, and the
// validation of both flags.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/errors.h"
#include "plan/dry_run.h"
#include "plan/dry_run_lengths.h"
#include "plan/memory_report.h"
#include "plan/plan_args.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::string& spec, int64_t max_length = 128) {
  try {
    parse_dry_run_lengths(spec, max_length);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DryRunLengths, AnInlineHistogramListsEachLengthItsCountTimes) {
  EXPECT_EQ(parse_dry_run_lengths("16:2,64:3", 128), (std::vector<int64_t>{16, 16, 64, 64, 64}));
  EXPECT_EQ(parse_dry_run_lengths("128:1", 128), (std::vector<int64_t>{128}));
}

TEST(DryRunLengths, AFileHasOnePairALine) {
  const fs::path f = fs::temp_directory_path() / ("mtrain_lengths_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(f);
    out << "# length count\n\n512 3\n  100\t2  # short ones\n2048,1\n";
  }
  EXPECT_EQ(parse_dry_run_lengths(f.string(), 4096), (std::vector<int64_t>{512, 512, 512, 100, 100, 2048}));
  {
    std::ofstream out(f);
    out << "512 3\n512 x\n";
  }
  EXPECT_NE(error_of(f.string(), 4096).find(f.string() + ":2: expected LENGTH COUNT"), std::string::npos)
      << error_of(f.string(), 4096);
  fs::remove(f);
}

TEST(DryRunLengths, BadHistogramsAreRefusedByName) {
  EXPECT_NE(error_of("mean:512,max:2048").find("a mean and a maximum do not say how long each sample is"),
            std::string::npos);
  EXPECT_NE(error_of("16:2,64").find("entry 2 '64': expected LENGTH:COUNT"), std::string::npos) << error_of("16:2,64");
  EXPECT_NE(error_of("16:0").find("expected LENGTH:COUNT, two whole numbers above 0"), std::string::npos);
  EXPECT_NE(error_of("256:1").find("a sample of 256 tokens is longer than --max_length 128"), std::string::npos);
  EXPECT_NE(error_of("lengths.txt").find("--dry_run_lengths lengths.txt: no such file"), std::string::npos);
  EXPECT_NE(error_of("100:20000000").find("more than 10000000 samples"), std::string::npos);
}

std::vector<std::string> sft_job(std::vector<std::string> extra) {
  const std::string src = MTRAIN_SOURCE_DIR;
  std::vector<std::string> w = {"--model_preset",
                                "demo",
                                "--tokenizer",
                                src + "/configs/demo/tokenizer.json",
                                "--max_length",
                                "64",
                                "--global_batch_size",
                                "8",
                                "--micro_batch_size",
                                "2",
                                "--train_iters",
                                "1",
                                "--lr_warmup_iters",
                                "0",
                                "--dry_run"};
  w.insert(w.end(), extra.begin(), extra.end());
  return w;
}

// Without a dataset the dry step batches the histogram's samples as the job
// batches real ones: a sample of L tokens is a row of L - 1 positions (its
// inputs, each predicting the next token, as the real run cuts a tokenized
// sample), each micro-batch padded to its longest row, so every micro-batch
// is 15 or 47 long, and at least one is 47 (8 of the 16 samples are long);
// a histogram of one length gives rows of that length.
TEST(DryRunLengths, TheDryStepRunsTheHistogramsSamples) {
  const DryRun mixed = dry_run(parse_words(sft_job({"--dry_run_lengths", "16:8,48:8"}), 1, "sft"));
  ASSERT_EQ(mixed.data_lengths.size(), 4u);
  for (int64_t t : mixed.data_lengths) EXPECT_TRUE(t == 15 || t == 47) << t;
  EXPECT_NE(std::find(mixed.data_lengths.begin(), mixed.data_lengths.end(), 47), mixed.data_lengths.end());
  EXPECT_NE(memory_report(mixed).find("its rows the lengths of the first global batch of --dry_run_lengths"),
            std::string::npos);
  const DryRun one = dry_run(parse_words(sft_job({"--dry_run_lengths", "16:8"}), 1, "sft"));
  EXPECT_EQ(one.data_lengths, (std::vector<int64_t>(4, 15)));
  const DryRun at_max = dry_run(parse_words(sft_job({}), 1, "sft"));
  EXPECT_TRUE(at_max.data_lengths.empty());
  EXPECT_LT(step_time(one).step_s, step_time(at_max).step_s) << "rows of 15 positions take less time than of 64";
}

// --dry_run_samples N reads N samples of each --dataset file, drawn as
// path#N draws them: the dry step equals one on `--dataset file#N`.
TEST(DryRunLengths, DryRunSamplesDrawsAsPathHashN) {
  const std::string data = std::string(MTRAIN_SOURCE_DIR) + "/configs/demo/sft.jsonl";
  const DryRun sampled = dry_run(parse_words(sft_job({"--dataset", data, "--dry_run_samples", "8"}), 1, "sft"));
  const DryRun hash = dry_run(parse_words(sft_job({"--dataset", data + "#8"}), 1, "sft"));
  ASSERT_FALSE(sampled.data_lengths.empty());
  EXPECT_EQ(sampled.data_lengths, hash.data_lengths);
  EXPECT_EQ(step_time(sampled).step_s, step_time(hash).step_s);
  EXPECT_NE(memory_report(sampled).find("of the dataset (--dry_run_samples 8 of each file)"), std::string::npos);
}

std::string validation_error(const std::vector<std::string>& words, const char* command = "sft") {
  try {
    parse_words(words, 1, command);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DryRunLengths, TheFlagsNeedAnSftDryRun) {
  const std::string data = std::string(MTRAIN_SOURCE_DIR) + "/configs/demo/sft.jsonl";
  std::vector<std::string> no_dry = sft_job({"--dry_run_lengths", "16:8"});
  no_dry.erase(std::find(no_dry.begin(), no_dry.end(), "--dry_run"));
  EXPECT_NE(validation_error(no_dry).find("--dry_run_lengths gives the sample lengths of an sft dry run"),
            std::string::npos);
  EXPECT_NE(validation_error(sft_job({"--dry_run_lengths", "16:8", "--dataset", data}))
                .find("--dry_run_lengths stands in for a dataset"),
            std::string::npos);
  EXPECT_NE(validation_error(sft_job({"--dry_run_samples", "8"})).find("--dry_run_samples samples the dataset"),
            std::string::npos);
  EXPECT_NE(validation_error(sft_job({"--dry_run_samples", "0", "--dataset", data})).find("expected at least 1"),
            std::string::npos);
}

}  // namespace
}  // namespace mtrain::plan
