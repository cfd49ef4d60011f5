// Reading measured runs: a Megatron-LM stdout log (data/megatron_llama_1b_tp2_pp2.log, written by hand
// in Megatron's exact format: the arguments block of arguments.py's _print_args and training_log's
// iteration lines) and an mtrain run directory; the median after the warm-up; errors with file:line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "calibrate/measured_run.h"
#include "calibrate/megatron_args.h"
#include "common/errors.h"
#include "config/cli.h"
#include "config/json.h"

namespace mtrain::calibrate {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(MTRAIN_SOURCE_DIR) + "/tests/calibrate/data/megatron_llama_1b_tp2_pp2.log";

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("mtrain_calibrate_" + std::to_string(::getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

// The fixture with `line` (1-based) replaced by `text` (or, with insert, `text` put before it).
std::string edited_fixture(int line, const std::string& text, bool insert) {
  std::istringstream in(read(kFixture));
  std::string out, l;
  for (int n = 1; std::getline(in, l); ++n) {
    if (n == line) out += text + "\n";
    if (n != line || insert) out += l + "\n";
  }
  return out;
}

TEST(MeasuredRun, MegatronLogGivesItsFlagsAndTheMedianAfterWarmUp) {
  const MeasuredRun r = read_measured_run(kFixture, {2, ""});
  EXPECT_EQ(r.format, "megatron");
  const config::Args& a = r.args;
  EXPECT_EQ(a.world_size, 8);
  EXPECT_EQ(a.tensor_model_parallel_size, 2);
  EXPECT_EQ(a.pipeline_model_parallel_size, 2);
  EXPECT_EQ(a.data_parallel_size, 2);
  EXPECT_EQ(a.global_batch_size, 32);
  EXPECT_EQ(a.micro_batch_size, 2);
  EXPECT_EQ(a.num_micro_batches, 8);  // as the log's "setting number of microbatches to constant 8"
  EXPECT_EQ(a.num_layers, 24);
  EXPECT_EQ(a.hidden_size, 2048);
  EXPECT_EQ(a.ffn_hidden_size, 5504);
  EXPECT_EQ(a.num_attention_heads, 16);
  EXPECT_EQ(a.num_query_groups, 4);
  EXPECT_EQ(a.seq_length, 2048);
  EXPECT_EQ(a.vocab_size, 32000);  // padded_vocab_size (vocab_size None: the tokenizer's)
  EXPECT_EQ(a.normalization, "RMSNorm");
  EXPECT_EQ(a.position_embedding_type, "rope");
  EXPECT_TRUE(a.swiglu);
  EXPECT_FALSE(a.add_bias_linear);
  EXPECT_TRUE(a.untie_embeddings_and_output_weights);
  EXPECT_TRUE(a.bf16);
  EXPECT_TRUE(a.sequence_parallel);
  EXPECT_TRUE(a.use_distributed_optimizer);
  EXPECT_TRUE(a.overlap_grad_reduce);
  EXPECT_EQ(a.recompute_granularity, "selective");
  EXPECT_EQ(a.attention_backend, "flash");
  // Lines at iterations 5..30 (log_interval 5); the first averages iterations 1-5, inside the warm-up.
  EXPECT_EQ(r.iterations, (std::vector<int>{5, 10, 15, 20, 25, 30}));
  EXPECT_EQ(r.used_lines, 5);
  EXPECT_DOUBLE_EQ(r.measured_s, 0.4001);  // median of 401.0 399.2 402.3 400.1 398.7
  EXPECT_EQ(layout_summary(a), "TP 2, PP 2, DP 2, 8 devices, GBS 32, MBS 2, SP, selective recompute");
}

TEST(MeasuredRun, SkipItersChoosesTheLines) {
  EXPECT_DOUBLE_EQ(read_measured_run(kFixture, {0, ""}).measured_s, (0.4001 + 0.4010) / 2);  // 812.4 counted too
  EXPECT_EQ(read_measured_run(kFixture, {5, ""}).used_lines, 5);  // the window (5, 10] is past 5
  EXPECT_EQ(read_measured_run(kFixture, {6, ""}).used_lines, 4);
  try {
    read_measured_run(kFixture, {30, ""});
    FAIL() << "no line after 30 iterations";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("megatron_llama_1b_tp2_pp2.log: 6 iteration line(s), none after the first 30"),
              std::string::npos)
        << e.what();
  }
}

TEST(MeasuredRun, DeviceProfileIsTheOneCalibrated) {
  EXPECT_EQ(read_measured_run(kFixture, {2, "A100-SXM-80GB"}).args.device_profile, "A100-SXM-80GB");
}

TEST(MeasuredRun, BookkeepingOffAndDefaultArgumentsAreIgnoredByTheTable) {
  EXPECT_FALSE(bookkeeping_reason("data_path").empty());
  EXPECT_FALSE(bookkeeping_reason("tokenizer_type").empty());
  EXPECT_TRUE(bookkeeping_reason("num_layers").empty());
  EXPECT_EQ(megatron_default("transformer_impl"), "transformer_engine");
  EXPECT_EQ(megatron_default("rotary_percent"), "1.0");
}

TEST(MeasuredRun, AnUnknownSetArgumentIsAnErrorAtItsLine) {
  // Line 42 of the fixture (fp16) is inside the block, sorted: put a set FP8 format before it.
  TempDir t;
  const std::string log =
      t.write("fp8.log", edited_fixture(42, "  fp8 ............................................. e4m3", true));
  try {
    read_measured_run(log, {2, ""});
    FAIL() << "fp8 is not modelled";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8.log:42: Megatron argument 'fp8' is e4m3"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("bookkeeping table"), std::string::npos);
  }
}

TEST(MeasuredRun, AValueMtrainRefusesNamesTheLineOfItsArgument) {
  // normalization is line 73 of the fixture.
  TempDir t;
  const std::string log =
      t.write("norm.log", edited_fixture(73, "  normalization ................................... BatchNorm", false));
  try {
    read_measured_run(log, {2, ""});
    FAIL() << "BatchNorm is no normalization of mtrain's";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("norm.log:73:"), std::string::npos) << e.what();
  }
}

TEST(MeasuredRun, MalformedInputNamesFileAndLine) {
  TempDir t;
  const auto data_error = [](const std::string& log, const std::string& expected) {
    try {
      read_measured_run(log, {2, ""});
      ADD_FAILURE() << "no error for " << log;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_FALSE(e.hint().empty());
    }
  };
  data_error(t.write("line.log", edited_fixture(30, "garbage in the block", false)), "line.log:30: not an argument");
  const std::string text = read(kFixture);
  const std::string no_end = text.substr(0, text.find("-------------------- end of arguments"));
  data_error(t.write("noend.log", no_end), "noend.log:4: Megatron's arguments block has no end line");
  data_error(t.write("noblock.log", " iteration 5/ 30 | elapsed time per iteration (ms): 12.0 |\n"),
             "noblock.log: no Megatron arguments block");
  data_error(t.write("bad_ms.log",
                     edited_fixture(125, " iteration       10/      30 | elapsed time per iteration (ms): x |", false)),
             "bad_ms.log:125:");
  data_error((t.path / "missing.log").string(), "missing.log: no such file or directory");
}

TEST(MeasuredRun, MtrainRunDirectory) {
  TempDir t;
  // What `mtrain pt ... ` on 4 ranks writes as args.json.
  const std::vector<std::string> words = {"mtrain",
                                          "pt",
                                          "--model_preset",
                                          "gpt2-124m",
                                          "--vocab_size",
                                          "50304",
                                          "--tensor_model_parallel_size",
                                          "2",
                                          "--global_batch_size",
                                          "8",
                                          "--micro_batch_size",
                                          "2",
                                          "--train_iters",
                                          "6"};
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  config::ParseOptions po;
  po.world_size = 4;
  const config::Args args = config::parse_command_line(static_cast<int>(argv.size()), argv.data(), po).args;
  t.write("args.json", config::args_to_json(args));
  std::string jsonl;
  const double ms[] = {900.0, 420.0, 410.0, 430.0, 415.0, 425.0};
  for (int i = 0; i < 6; ++i)
    jsonl += "{\"loss\": 3.2, \"iteration\": \"" + std::to_string(i + 1) +
             "/6\", \"elapsed_time_per_iteration_ms\": " + std::to_string(ms[i]) + "}\n";
  jsonl += "{\"iteration\": 6, \"eval_loss\": 3.1}\n";  // a validation record: not an iteration time
  t.write("logging.jsonl", jsonl);
  const MeasuredRun r = read_measured_run(t.path.string(), {2, ""});
  EXPECT_EQ(r.format, "mtrain");
  EXPECT_EQ(r.args.world_size, 4);
  EXPECT_EQ(r.args.data_parallel_size, 2);
  EXPECT_EQ(r.args.tensor_model_parallel_size, 2);
  EXPECT_EQ(r.used_lines, 4);            // iterations 3..6
  EXPECT_DOUBLE_EQ(r.measured_s, 0.42);  // median of 410 430 415 425
}

TEST(MeasuredRun, Median) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
}

}  // namespace
}  // namespace mtrain::calibrate
