// The user's contract at the binary's edge: exit codes and messages of the
// command line and the YAML config (megatron-compat.md §0, §2; reliability.md
// F7, F8), and what lands in <output_dir>/args.json. The parser itself is unit
// tested in tests/config; these tests check that the binary wires it up (exit
// code, stderr, nothing started on an error, the resolved values written).
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

using nlohmann::json;

json read_args_json(const fs::path& output_dir) { return json::parse(read_text(output_dir / "args.json")); }

json without(json j, const std::vector<std::string>& keys) {
  for (const auto& k : keys) j.erase(k);
  return j;
}

// A quick, valid training command (1 iteration of the demo) to append flags to.
std::vector<std::string> one_iteration(const std::vector<std::string>& flags) {
  return concat({"sft", "configs/sft_demo.yaml", "--num_threads", "1", "--num_generate_samples", "0"}, flags);
}

class Cli : public MtrainTest {
 protected:
  // Runs a command that must be rejected before anything starts: returns it
  // after checking that no output directory was created.
  RunResult rejected(const std::vector<std::string>& args, const std::string& tag) {
    const fs::path out = tmp_ / (tag + "_out");
    RunResult r = run(concat(args, {"--output_dir", out.string()}), tag);
    EXPECT_FALSE(fs::exists(out)) << tag << ": the output directory was created although the command was rejected";
    EXPECT_EQ(r.out.find("training ..."), std::string::npos) << tag << ": training started";
    return r;
  }
};

TEST_F(Cli, UnknownFlagExits2WithDidYouMean) {
  const RunResult r = rejected(one_iteration({"--train_iters", "1", "--trian_iters", "3"}), "typo");
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_TRUE(contains(r.err, "unknown flag --trian_iters; did you mean --train_iters?")) << r.err;

  const RunResult h = rejected(one_iteration({"--train-iters", "1", "--hidden-sise", "64"}), "hyphen_typo");
  EXPECT_EQ(h.exit_code, 2) << h.describe();
  EXPECT_TRUE(contains(h.err, "did you mean --hidden")) << h.err;

  const RunResult c = run({"sfx", "configs/sft_demo.yaml"}, "command");
  EXPECT_EQ(c.exit_code, 2) << c.describe();
  EXPECT_TRUE(contains(c.err, "unknown command 'sfx'; did you mean 'sft'?")) << c.err;

  const RunResult none = run({}, "none");
  EXPECT_EQ(none.exit_code, 2) << none.describe();
  EXPECT_TRUE(contains(none.err, "missing command")) << none.err;
}

TEST_F(Cli, BadValueOnTheCommandLineExits2NamingTheFlag) {
  const RunResult r = rejected(one_iteration({"--train_iters", "1", "--lr", "abc"}), "lr");
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_TRUE(contains(r.err, "invalid value for --lr: got 'abc' but expected a number")) << r.err;

  const RunResult b = rejected(one_iteration({"--train_iters", "1", "--log_throughput", "maybe"}), "bool");
  EXPECT_EQ(b.exit_code, 2) << b.describe();
  // HfArgumentParser's string_to_bool wording.
  EXPECT_TRUE(contains(b.err, "maybe")) << b.err;
  EXPECT_TRUE(contains(b.err, "yes/no, true/false, t/f, y/n, 1/0")) << b.err;
}

// --truncation_strategy reaches the data pipeline: at --max_length 24 the demo
// data loses its 221 longer samples with `delete` and keeps them cut with
// `right` (those whose answer is cut away entirely are still dropped).
TEST_F(Cli, TruncationStrategyDeletesOrCutsLongSamples) {
  auto data_line = [&](const std::string& strategy) {
    const RunResult r =
        run(one_iteration({"--train_iters", "1", "--lr_warmup_iters", "0", "--max_length", "24",
                           "--truncation_strategy", strategy, "--output_dir", (tmp_ / strategy).string()}),
            strategy);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    const size_t at = r.out.find(" > data: ");
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find('\n', at) - at);
  };
  const std::string del = data_line("delete");
  EXPECT_TRUE(contains(del, " > data: 245 training samples, 5 validation samples")) << del;
  EXPECT_TRUE(contains(del, "(221 samples dropped: longer than --max_length or no loss tokens)")) << del;
  const std::string right = data_line("right");
  EXPECT_TRUE(contains(right, " > data: 402 training samples, 8 validation samples")) << right;
  EXPECT_TRUE(contains(right, "221 samples cut to --max_length 24 (--truncation_strategy right)")) << right;
}

// --flag_x and --flag-x, '--flag value' and '--flag=value', the bool forms and
// the v3/v4 aliases resolve to the same arguments (and the same training).
TEST_F(Cli, SpellingsAliasesAndBooleanFormsGiveTheSameArgsJson) {
  const RunResult a = run(one_iteration({"--train_iters", "1", "--lr_warmup_iters", "0", "--micro_batch_size", "4",
                                         "--log_interval", "1", "--no_bias_swiglu_fusion", "--log_throughput",
                                         "--adam_beta2", "0.98", "--output_dir", (tmp_ / "a").string()}),
                          "a");
  const RunResult b =
      run(one_iteration({"--train-iters=1", "--lr-warmup-iters", "0", "--micro-batch-size=4", "--logging_steps", "1",
                         "--bias-activation-fusion", "false", "--log-throughput", "YES", "--adam-beta2=0.98", "--save",
                         (tmp_ / "b").string()}),
          "b");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  const json ja = read_args_json(tmp_ / "a"), jb = read_args_json(tmp_ / "b");
  EXPECT_EQ(without(ja, {"output_dir"}), without(jb, {"output_dir"}));
  // Not vacuous: every flag moved its field off the default.
  EXPECT_EQ(ja.at("micro_batch_size"), 4);
  EXPECT_EQ(ja.at("num_micro_batches"), 4);  // 16 / (4 x 1)
  EXPECT_EQ(ja.at("bias_swiglu_fusion"), false);
  EXPECT_EQ(ja.at("log_throughput"), true);
  EXPECT_EQ(ja.at("adam_beta2"), 0.98);
  EXPECT_EQ(ja.at("log_interval"), 1);
  EXPECT_EQ(jb.at("output_dir"), (tmp_ / "b").string());
  // The same arguments train the same numbers.
  const auto ra = train_rows(tmp_ / "a"), rb = train_rows(tmp_ / "b");
  ASSERT_EQ(ra.size(), 1u);
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(ra[0].at("loss").dump(), rb[0].at("loss").dump());
  // --log_throughput adds Megatron's throughput field.
  const auto lines = training_lines(a.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(std::regex_search(lines[0], std::regex(R"( \| throughput per GPU \(TFLOP/s/GPU\): \d+\.\d \| )")))
      << lines[0];
}

// defaults < --model_preset < YAML < command line; `mtrain sft job.yaml` and
// `--config job.yaml` are the same; the YAML's ENV map sets variables that are
// not set yet and warns about (and keeps) those that are.
TEST_F(Cli, YamlOverridesPresetAndCommandLineOverridesYaml) {
  const fs::path yaml = tmp_ / "job.yaml";
  write_text(yaml,
             "# a job: the demo preset with 1 layer\n"
             "model_preset: demo\n"
             "num_layers: 1\n"
             "lr: 1.0e-3\n"
             "min_lr: 1.0e-4\n"
             "tokenizer: configs/demo/tokenizer.json\n"
             "dataset: [configs/demo/sft.jsonl]\n"
             "max_length: 64\n"
             "micro_batch_size: 2\n"
             "global_batch_size: 4\n"
             "train_iters: 1\n"
             "lr_warmup_iters: 0\n"
             "num_generate_samples: 0\n"
             "ENV:\n"
             "  OMP_NUM_THREADS: \"1\"\n");
  RunOptions unset;
  unset.unset_env = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"};
  const RunResult a = run({"sft", yaml.string(), "--lr", "2e-3", "--output_dir", (tmp_ / "a").string()}, "a", unset);
  RunOptions preset = unset;
  preset.env = {{"OMP_NUM_THREADS", "2"}};
  const RunResult b =
      run({"sft", "--config", yaml.string(), "--lr=2e-3", "--output_dir", (tmp_ / "b").string()}, "b", preset);
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  ASSERT_EQ(b.exit_code, 0) << b.describe();

  const json ja = read_args_json(tmp_ / "a");
  EXPECT_EQ(ja.at("num_layers"), 1);         // YAML over preset (4)
  EXPECT_EQ(ja.at("hidden_size"), 256);      // preset
  EXPECT_EQ(ja.at("ffn_hidden_size"), 688);  // preset
  EXPECT_EQ(ja.at("lr"), 2e-3);              // command line over YAML
  EXPECT_EQ(ja.at("min_lr"), 1e-4);          // YAML over default
  EXPECT_EQ(ja.at("micro_batch_size"), 2);   // YAML
  EXPECT_EQ(ja.at("adam_beta2"), 0.95);      // default
  EXPECT_EQ(ja.at("config_file"), yaml.string());
  EXPECT_EQ(without(ja, {"output_dir"}), without(read_args_json(tmp_ / "b"), {"output_dir"}));

  // (Without the ENV map it would be cores / ranks: 2 on the reference machine.)
  EXPECT_TRUE(contains(a.out, " with 1 threads")) << "ENV: OMP_NUM_THREADS from the YAML was not applied\n" << a.out;
  EXPECT_TRUE(contains(b.out, " with 2 threads")) << "an already-set OMP_NUM_THREADS was overridden\n" << b.out;
  EXPECT_TRUE(contains(b.err, "OMP_NUM_THREADS is already set in environment")) << b.err;
}

TEST_F(Cli, BadYamlExits3WithFileLineAndColumn) {
  const fs::path syntax = tmp_ / "syntax.yaml";
  write_text(syntax, "model_preset: demo\ntrain_iters: 1\n  lr: 2\n");
  const RunResult r = rejected({"sft", syntax.string()}, "syntax");
  EXPECT_EQ(r.exit_code, 3) << r.describe();
  EXPECT_TRUE(contains(r.err, syntax.string() + ":3:5: invalid YAML")) << r.err;

  const fs::path value = tmp_ / "value.yaml";
  write_text(value, "model_preset: demo\n\nmicro_batch_size: eight\n");
  const RunResult v = rejected({"sft", value.string()}, "value");
  EXPECT_EQ(v.exit_code, 3) << v.describe();
  EXPECT_TRUE(contains(v.err, value.string() + ":3:19: invalid value for 'micro_batch_size': got 'eight'")) << v.err;

  const fs::path key = tmp_ / "key.yaml";
  write_text(key, "model_preset: demo\ntrain_itters: 5\n");
  const RunResult k = rejected({"sft", key.string()}, "key");
  EXPECT_EQ(k.exit_code, 3) << k.describe();
  EXPECT_TRUE(contains(k.err, key.string() + ":2:1: unknown key 'train_itters'; did you mean 'train_iters'?")) << k.err;

  const RunResult m = rejected({"sft", (tmp_ / "missing.yaml").string()}, "missing");
  EXPECT_EQ(m.exit_code, 3) << m.describe();
  EXPECT_TRUE(contains(m.err, "config file not found: " + (tmp_ / "missing.yaml").string())) << m.err;
}

// Validation runs before anything is allocated or written, with Megatron's
// own words where it has them (megatron-compat.md §2).
TEST_F(Cli, ValidationErrorsExit3WithMegatronsWording) {
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--global_batch_size", "10", "--micro_batch_size", "4"},
       "global batch size (10) is not divisible by micro batch size (4) times data parallel size (1)"},
      {{"--num_attention_heads", "3"}, "hidden_size (256) must be divisible by num_attention_heads (3)"},
      {{"--tensor_model_parallel_size", "3"}, "world size (1) is not divisible by total_model_size (3)"},
      {{"--lr_warmup_fraction", "0.1"}, "can only specify one of lr-warmup-fraction and lr-warmup-iters"},
      {{"--fp16", "--bf16"}, "fp16 and bf16 cannot both be set"},
      {{"--num_query_groups", "3"}, "num_attention_heads (4) must be divisible by num_query_groups (3)"},
  };
  int n = 0;
  for (const Case& c : cases) {
    std::string tag = "case";
    tag += std::to_string(n++);  // (not "case" + ...: GCC 12 -Wrestrict false positive at -O3)
    const RunResult r = rejected(one_iteration(concat({"--train_iters", "30"}, c.flags)), tag);
    EXPECT_EQ(r.exit_code, 3) << join(c.flags) << "\n" << r.describe();
    EXPECT_TRUE(contains(r.err, "mtrain: error: " + c.message)) << join(c.flags) << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "  hint: ")) << r.err;
  }
}

// --eval_interval 0 and --eval_iters 0 mean "no evaluation" as in Megatron, so
// the job file's evaluation can be switched off from the command line.
TEST_F(Cli, ZeroEvalIntervalOrEvalItersSwitchesTheJobFilesEvaluationOff) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"--eval_interval 1", true}, {"--eval_interval 0", false}, {"--eval_interval 1 --eval_iters 0", false}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "eval" + std::to_string(i);
    const RunResult r = run(concat(demo_sft_args(2, tmp_ / name), words(cases[i].first)), name);
    ASSERT_EQ(r.exit_code, 0) << cases[i].first << "\n" << r.describe();
    EXPECT_EQ(contains(r.out, " validation loss at iteration "), cases[i].second) << cases[i].first << "\n" << r.out;
  }
}

TEST_F(Cli, HelpListsEveryFlagWithItsDefaultAndExits0) {
  const RunResult top = run({"--help"}, "top");
  EXPECT_EQ(top.exit_code, 0) << top.describe();
  EXPECT_TRUE(contains(top.out, "usage: mtrain <command>")) << top.out;
  EXPECT_TRUE(std::regex_search(top.out, std::regex(R"(\n  sft +supervised fine-tuning)"))) << top.out;
  EXPECT_TRUE(std::regex_search(top.out, std::regex(R"(\n  pt \| pretrain +pretraining)"))) << top.out;

  const RunResult sft = run({"sft", "--help"}, "sft");
  EXPECT_EQ(sft.exit_code, 0) << sft.describe();
  for (const char* want :
       {"--tensor_model_parallel_size / --tensor-model-parallel-size INT  (default: 1)",
        "--micro_batch_size / --micro-batch-size INT", "--global_batch_size / --global-batch-size INT",
        "--lr_decay_style / --lr-decay-style", "--fp16", "--bf16", "--eval_interval / --eval-interval INT",
        "--output_dir / --output-dir STR", "also: --save", "also: --logging_steps / --logging-steps",
        "--on_nonfinite / --on-nonfinite {abort,skip}  (default: abort)"})
    EXPECT_TRUE(contains(sft.out, want)) << "`mtrain sft --help` lacks: " << want;
  EXPECT_TRUE(sft.err.empty()) << sft.err;

  const RunResult pt = run({"pretrain", "-h"}, "pt");
  EXPECT_EQ(pt.exit_code, 0) << pt.describe();
  EXPECT_TRUE(contains(pt.out, "--tensor_model_parallel_size")) << pt.out;
}

// The commands with their own parser (apps/mtrain/commands.cc): each has its
// line in `mtrain --help`, in the table's order, and its own --help (exit 0).
TEST_F(Cli, EveryTableCommandIsListedAndHasItsHelp) {
  const std::vector<std::string> table = {"devices", "compare",   "export", "infer",           "npu-smi",
                                          "plan",    "calibrate", "report", "preprocess_data", "tokenizer"};
  const RunResult top = run({"--help"}, "top");
  ASSERT_EQ(top.exit_code, 0) << top.describe();
  size_t at = top.out.find("\n  pt | pretrain");
  ASSERT_NE(at, std::string::npos) << top.out;
  for (const char* name : {"devices", "npu-smi", "export", "infer", "tokenizer", "compare", "plan", "calibrate",
                           "report", "preprocess_data"}) {
    const size_t found = top.out.find(std::string("\n  ") + name + " ", at);
    EXPECT_NE(found, std::string::npos) << name << " missing or out of order in:\n" << top.out;
    if (found != std::string::npos) at = found;
  }
  for (const std::string& name : table) {
    const RunResult help = run({name, "--help"}, name + "_help");
    EXPECT_EQ(help.exit_code, 0) << name << ": " << help.describe();
    EXPECT_GT(help.out.size(), 100u) << name << ": " << help.out;
    EXPECT_TRUE(help.err.empty()) << name << ": " << help.err;
  }
}

TEST_F(Cli, VersionPrintsOneLineAndExits0) {
  const RunResult r = run({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(std::regex_match(r.out, std::regex(R"(mtrain \d+\.\d+\.\d+\n)")))
      << "expected 'mtrain X.Y.Z' and a newline, got '" << r.out << "'";
  EXPECT_TRUE(r.err.empty()) << r.err;
}

// args.json records what the run actually used: derived shapes, the lr, the
// iterations worked out from --num_train_epochs, the batch arithmetic.
TEST_F(Cli, ArgsJsonHoldsResolvedValues) {
  const fs::path yaml = tmp_ / "tiny.yaml";
  write_text(yaml,
             "num_layers: 2\nhidden_size: 128\nnum_attention_heads: 4\nswiglu: true\n"
             "tokenizer: configs/demo/tokenizer.json\ndataset: [configs/demo/sft.jsonl]\n"
             "split_dataset_ratio: 0.02\nmax_length: 64\n"
             "micro_batch_size: 32\nglobal_batch_size: 64\nnum_train_epochs: 1\nlr_warmup_iters: 0\n"
             "num_generate_samples: 0\nnum_threads: 1\n");
  const fs::path out = tmp_ / "out";
  const RunResult r = run({"sft", yaml.string(), "--output_dir", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const json j = read_args_json(out);
  EXPECT_EQ(j.at("ffn_hidden_size"), 320);  // SwiGLU: int(4 * 128 * 2 / 3 / 64) * 64
  EXPECT_EQ(j.at("kv_channels"), 32);       // 128 / 4
  EXPECT_EQ(j.at("seq_length"), 64);        // from max_length
  EXPECT_EQ(j.at("max_position_embeddings"), 64);
  EXPECT_EQ(j.at("num_query_groups"), 4);  // Megatron: no GQA -> one group per head
  EXPECT_EQ(j.at("group_query_attention"), false);
  EXPECT_TRUE(j.at("lr").is_number()) << j.at("lr");
  EXPECT_GT(j.at("lr").get<double>(), 0);
  EXPECT_EQ(j.at("num_micro_batches"), 2);  // 64 / (32 x 1)
  EXPECT_EQ(j.at("data_parallel_size"), 1);
  EXPECT_EQ(j.at("world_size"), 1);
  // swift: len(train) // (mbs * dp) * (mbs * dp) * epochs // gbs = 462 // 32 * 32 // 64 = 7
  EXPECT_EQ(j.at("train_iters"), 7);
  EXPECT_EQ(train_rows(out).size(), 2u);  // log_interval 5 (default): iterations 5 and 7
  EXPECT_TRUE(contains(r.out, "7 iterations of 64 samples")) << r.out;
}

}  // namespace
}  // namespace mtrain::functional
