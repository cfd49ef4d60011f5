// The precision dumper and `mtrain compare` on a tiny in-process model:
// record names and order, statistics against the model's own tensors, step
// selection, an injected divergence and an injected NaN found in the right
// module, fused vs unfused ops, and the flag checks.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../train/tiny_training.h"
#include "common/errors.h"
#include "config/int_list.h"
#include "config/precision_dump_args.h"
#include "observe/precision_compare.h"
#include "observe/precision_dump.h"

namespace mtrain::observe {
namespace {

namespace fs = std::filesystem;
namespace pf = profiler;

fs::path temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / fmt::format("mtrain_pdump_{}_{}", tag, ::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return nlohmann::json::parse(in);
}

std::vector<std::string> names(const nlohmann::json& dump) {
  std::vector<std::string> out;
  for (const auto& r : dump["records"]) out.push_back(r["name"].get<std::string>());
  return out;
}

size_t position(const std::vector<std::string>& v, const std::string& name) {
  const auto it = std::find(v.begin(), v.end(), name);
  EXPECT_NE(it, v.end()) << "no record " << name;
  return static_cast<size_t>(it - v.begin());
}

const nlohmann::json& record(const nlohmann::json& dump, const std::string& name) {
  for (const auto& r : dump["records"])
    if (r["name"] == name) return r;
  ADD_FAILURE() << "no record " << name;
  static const nlohmann::json none;
  return none;
}

// Multiplies (or poisons) one module's forward output in place before the
// dumper sees it: hooks run in registration order, this one first.
struct Perturb : TrainHook {
  std::string module;  // region name, e.g. "linear_fc1"
  int64_t layer = -1;  // the enclosing decoder layer
  float factor = 1.0f;
  bool poison = false;
  int64_t current_layer = -1;
  std::optional<pf::Kind> region_depth(int64_t) const override { return pf::Kind::kModule; }
  bool region_tensors(int64_t) const override { return true; }
  void on_region_begin(const pf::Region& r, std::span<const pf::TensorRef>) override {
    if (std::string(r.name) == "decoder.layers") current_layer = r.index;
  }
  void on_region_end(const pf::Region& r, std::span<const pf::TensorRef> t) override {
    if (r.pass != pf::Pass::kForward || current_layer != layer || module != r.name || t.empty()) return;
    float* p = const_cast<float*>(t[0].data);
    if (poison) {
      p[0] = std::numeric_limits<float>::quiet_NaN();
    } else {
      for (int64_t i = 0; i < t[0].numel; ++i) p[i] *= factor;
    }
  }
};

// Captures the embedding's forward output of iteration 1.
struct CaptureEmbedding : TrainHook {
  std::vector<float> out;
  std::optional<pf::Kind> region_depth(int64_t it) const override {
    return it == 1 ? std::optional(pf::Kind::kModule) : std::nullopt;
  }
  bool region_tensors(int64_t) const override { return true; }
  void on_region_end(const pf::Region& r, std::span<const pf::TensorRef> t) override {
    if (std::string(r.name) == "embedding" && r.pass == pf::Pass::kForward && out.empty())
      out.assign(t[0].data, t[0].data + t[0].numel);
  }
};

struct TinyRun {
  PrecisionDumpOptions dump = {};
  int iters = 1;
  bool fusions = true;
  int64_t mbs = 4;                                      // micro-batch size; the global batch is 4
  bool recompute = false;                               // full recomputation of every layer
  std::vector<std::shared_ptr<TrainHook>> before = {};  // hooks registered before the dumper
  std::vector<float>* initial_wte = nullptr;
  std::vector<int32_t>* first_tokens = nullptr;
};

std::shared_ptr<PrecisionDumpHook> run_tiny(const TinyRun& run) {
  device::Device dev(device::DeviceProfile{}, 0);
  model::ModelConfig c = train::tiny();
  if (!run.fusions) {
    c.fusions.bias_dropout = false;
    c.fusions.bias_activation = false;
    c.fusions.cross_entropy = false;
  }
  if (run.recompute) c.recompute = model::Recompute::kFull;
  model::GptModel m(c, dev);
  if (run.initial_wte) {
    const int w = m.params().find("embedding.word_embeddings.weight");
    run.initial_wte->assign(m.params().param(w), m.params().param(w) + c.padded_vocab * c.hidden);
  }
  optim::Optimizer opt(dev, train::optimizer_ranges(m.params()), m.params().numel(), DType::kF32,
                       optim::OptimizerConfig{});
  optim::LrScheduler sched(train::constant_lr(1e-2));
  train::FixedSource src(run.mbs);
  if (run.first_tokens) {
    train::FixedSource copy(4);
    *run.first_tokens = copy.next_global_batch()[0].tokens;
  }
  HookList hooks;
  for (const auto& h : run.before) hooks.add(h);
  auto dump = std::make_shared<PrecisionDumpHook>(run.dump, DumpRankInfo{});
  hooks.add(dump);
  train::TrainerOptions to;
  to.train_iters = run.iters;
  to.global_batch_size = 4;
  train::Trainer t(to, m, opt, sched, nullptr, src, nullptr, hooks);
  t.train();
  return dump;
}

PrecisionDumpOptions dump_to(const fs::path& dir, DumpLevel level) {
  PrecisionDumpOptions o;
  o.path = dir.string();
  o.level = level;
  return o;
}

TEST(PrecisionDump, ModuleRecordsInExecutionOrder) {
  const fs::path dir = temp_dir("l0");
  run_tiny({.dump = dump_to(dir, DumpLevel::kL0)});
  const nlohmann::json d = read_json(dir / "step1" / "rank0" / "dump.json");
  EXPECT_EQ(d["level"], "L0");
  EXPECT_EQ(d["iteration"], 1);
  EXPECT_EQ(d["coords"]["tp"], 0);
  EXPECT_EQ(d["sizes"]["dp"], 1);
  const std::vector<std::string> n = names(d);
  ASSERT_FALSE(n.empty());
  EXPECT_EQ(n.front(), "embedding.forward.0");
  // Inner modules complete before the module holding them.
  const size_t qkv = position(n, "decoder.layers.0.self_attention.linear_qkv.forward.0");
  EXPECT_LT(position(n, "decoder.layers.0.input_layernorm.forward.0"), qkv);
  EXPECT_LT(qkv, position(n, "decoder.layers.0.self_attention.forward.0"));
  EXPECT_LT(position(n, "decoder.layers.0.mlp.linear_fc1.forward.0"), position(n, "decoder.layers.0.mlp.forward.0"));
  EXPECT_LT(position(n, "decoder.layers.0.forward.0"), position(n, "decoder.layers.1.forward.0"));
  EXPECT_LT(position(n, "decoder.final_layernorm.forward.0"), position(n, "output_layer.forward.0"));
  // Backward after every forward, in reverse model order.
  const size_t first_bwd = position(n, "output_layer.backward.0");
  for (size_t i = 0; i < n.size(); ++i) EXPECT_EQ(i >= first_bwd, n[i].find(".backward.") != std::string::npos) << n[i];
  EXPECT_LT(position(n, "decoder.layers.1.backward.0"), position(n, "decoder.layers.0.backward.0"));
  EXPECT_EQ(n.back(), "embedding.backward.0");
  // No op at L0.
  for (const auto& r : d["records"]) EXPECT_EQ(r["kind"], "module") << r["name"];
  const auto& fc1 = record(d, "decoder.layers.0.mlp.linear_fc1.backward.0");
  EXPECT_EQ(fc1["inputs"][0]["role"], "grad_output");
  EXPECT_EQ(fc1["outputs"][0]["role"], "grad_input");
}

TEST(PrecisionDump, OpRecordsAndMicroBatchCalls) {
  const fs::path dir = temp_dir("l1");
  run_tiny({.dump = dump_to(dir, DumpLevel::kL1)});
  const nlohmann::json d = read_json(dir / "step1" / "rank0" / "dump.json");
  const std::vector<std::string> n = names(d);
  for (const auto& r : d["records"]) EXPECT_EQ(r["kind"], "op") << r["name"];
  EXPECT_EQ(n.front(), "decoder.layers.0.self_attention.apply_rotary_pos_emb.forward.0");
  EXPECT_LT(position(n, "decoder.layers.1.mlp_bda.forward.0"), position(n, "cross_entropy.forward.0"));
  EXPECT_EQ(position(n, "cross_entropy.forward.0") + 1, position(n, "cross_entropy.backward.0"));
  EXPECT_EQ(record(d, "decoder.layers.0.self_attn_bda.forward.0")["fused_by"], "--bias_dropout_fusion");
  EXPECT_EQ(record(d, "decoder.layers.0.mlp.activation_func.forward.0")["fused_by"], "--bias_swiglu_fusion");
  EXPECT_EQ(record(d, "cross_entropy.forward.0")["fused_by"], "--cross_entropy_loss_fusion");
  const auto fused = d["fused_ops"]["--bias_dropout_fusion"].get<std::vector<std::string>>();
  EXPECT_EQ(fused, (std::vector<std::string>{"mlp_bda", "self_attn_bda"}));
  // Two micro-batches of 2: every op twice, counted by call, in schedule order.
  const fs::path dir2 = temp_dir("l1mb");
  run_tiny({.dump = dump_to(dir2, DumpLevel::kL1), .mbs = 2});
  const nlohmann::json d2 = read_json(dir2 / "step1" / "rank0" / "dump.json");
  const std::vector<std::string> n2 = names(d2);
  EXPECT_EQ(record(d2, "cross_entropy.forward.1")["micro_batch"], 1);
  EXPECT_EQ(record(d2, "cross_entropy.backward.0")["micro_batch"], 0);
  EXPECT_LT(position(n2, "cross_entropy.backward.0"), position(n2, "cross_entropy.forward.1"));
  EXPECT_EQ(n2.size(), 2 * n.size());
}

TEST(PrecisionDump, StatisticsAreThoseOfTheModelsTensors) {
  const fs::path dir = temp_dir("stats");
  std::vector<float> wte;
  std::vector<int32_t> tokens;
  auto capture = std::make_shared<CaptureEmbedding>();
  run_tiny({.dump = dump_to(dir, DumpLevel::kL0), .before = {capture}, .initial_wte = &wte, .first_tokens = &tokens});
  const nlohmann::json d = read_json(dir / "step1" / "rank0" / "dump.json");
  const auto& out = record(d, "embedding.forward.0")["outputs"][0];
  // The embedding's output is the word-embedding rows of the tokens (no dropout).
  const int64_t C = train::tiny().hidden;
  ASSERT_EQ(capture->out.size(), tokens.size() * C);
  double sum = 0, sum_sq = 0, mx = -1e30, mn = 1e30;
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t j = 0; j < C; ++j) {
      const double v = wte[tokens[t] * C + j];
      ASSERT_EQ(capture->out[t * C + j], static_cast<float>(v));
      sum += v, sum_sq += v * v, mx = std::max(mx, v), mn = std::min(mn, v);
    }
  EXPECT_EQ(out["role"], "output");
  EXPECT_EQ(out["shape"], (std::vector<int64_t>{static_cast<int64_t>(tokens.size()), C}));
  EXPECT_EQ(out["count"].get<int64_t>(), static_cast<int64_t>(tokens.size() * C));
  EXPECT_EQ(out["nan"], 0);
  EXPECT_DOUBLE_EQ(out["max"].get<double>(), mx);
  EXPECT_DOUBLE_EQ(out["min"].get<double>(), mn);
  EXPECT_NEAR(out["sum"].get<double>(), sum, 1e-12 * sum_sq + 1e-12);
  EXPECT_NEAR(out["l2_norm"].get<double>(), std::sqrt(sum_sq), 1e-12);
  EXPECT_NEAR(out["mean"].get<double>(), sum / static_cast<double>(tokens.size() * C), 1e-12);
  // The first layer reads what the embedding wrote.
  EXPECT_EQ(record(d, "decoder.layers.0.forward.0")["inputs"][0]["sum"], out["sum"]);
}

TEST(PrecisionDump, OnlySelectedStepsAndRanks) {
  const fs::path dir = temp_dir("steps");
  PrecisionDumpOptions o = dump_to(dir, DumpLevel::kL0);
  o.steps = {2, 3};
  run_tiny({.dump = o, .iters = 3});
  EXPECT_FALSE(fs::exists(dir / "step1"));
  EXPECT_TRUE(fs::exists(dir / "step2" / "rank0" / "dump.json"));
  EXPECT_TRUE(fs::exists(dir / "step3" / "rank0" / "dump.json"));
  EXPECT_EQ(read_json(dir / "step3" / "rank0" / "dump.json")["iteration"], 3);

  PrecisionDumpOptions o1;
  o1.path = "x";
  o1.ranks = {1};
  PrecisionDumpHook other_rank(o1, DumpRankInfo{});
  EXPECT_FALSE(other_rank.region_depth(1).has_value());
  PrecisionDumpOptions o2;
  o2.path = "x";
  o2.steps = {4};
  PrecisionDumpHook no_step(o2, DumpRankInfo{});
  EXPECT_FALSE(no_step.region_depth(3).has_value());
  EXPECT_EQ(no_step.region_depth(4), pf::Kind::kOp);
}

TEST(PrecisionDump, TensorFilesHoldTheData) {
  const fs::path dir = temp_dir("npy");
  PrecisionDumpOptions o = dump_to(dir, DumpLevel::kL0);
  o.tensors = true;
  run_tiny({.dump = o});
  const fs::path f = dir / "step1" / "rank0" / "dump_tensor_data" / "embedding.forward.0.output.npy";
  ASSERT_TRUE(fs::exists(f));
  const nlohmann::json d = read_json(dir / "step1" / "rank0" / "dump.json");
  const auto& out = record(d, "embedding.forward.0")["outputs"][0];
  std::ifstream in(f, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const size_t header = 10 + static_cast<uint8_t>(bytes[8]) + 256 * static_cast<uint8_t>(bytes[9]);
  EXPECT_EQ(header % 64, 0u);
  const int64_t n = out["count"].get<int64_t>();
  ASSERT_EQ(bytes.size(), header + 4 * n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + header + 4 * i, 4);
    sum += v;
  }
  EXPECT_NEAR(sum, out["sum"].get<double>(), 1e-9);
}

CompareReport compare(const fs::path& a, const fs::path& b, std::string* text = nullptr, int* rc = nullptr) {
  CompareOptions o;
  o.a = a.string();
  o.b = b.string();
  if (text) {
    std::ostringstream s;
    const int r = run_compare(o, s);
    *text = s.str();
    if (rc) *rc = r;
  }
  return compare_dumps(o);
}

TEST(PrecisionCompare, FindsAnInjectedDivergenceInTheRightModule) {
  const fs::path a = temp_dir("cmp_a"), b = temp_dir("cmp_b"), c = temp_dir("cmp_c");
  run_tiny({.dump = dump_to(a, DumpLevel::kMix)});
  run_tiny({.dump = dump_to(c, DumpLevel::kMix)});
  auto perturb = std::make_shared<Perturb>();
  perturb->module = "linear_fc1";
  perturb->layer = 1;
  perturb->factor = 1.01f;
  run_tiny({.dump = dump_to(b, DumpLevel::kMix), .before = {perturb}});

  std::string text;
  int rc = -1;
  const CompareReport same = compare(a, c, &text, &rc);
  EXPECT_FALSE(same.first_divergence) << text;
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(same.only_a.empty());
  EXPECT_GT(same.compared, 50);
  EXPECT_NE(text.find("no divergence beyond tolerance"), std::string::npos) << text;

  const CompareReport diff = compare(a, b, &text, &rc);
  ASSERT_TRUE(diff.first_divergence) << text;
  EXPECT_EQ(rc, kExitDiverged);
  EXPECT_EQ(diff.first_divergence->record, "decoder.layers.1.mlp.linear_fc1.forward.0") << text;
  EXPECT_EQ(diff.first_divergence->module, "decoder.layers.1.mlp.linear_fc1");
  EXPECT_EQ(diff.first_divergence->role, "output");
  EXPECT_NE(text.find("first divergence: decoder.layers.1.mlp.linear_fc1.forward.0"), std::string::npos) << text;
  // Everything before it agrees.
  for (const StatDiff& s : diff.diffs) {
    if (s.record == diff.first_divergence->record) break;
    EXPECT_FALSE(s.diverged) << s.record << " " << s.role << " " << s.stat;
  }
}

TEST(PrecisionDump, RecomputedForwardsAreNotDumpedAgain) {
  const fs::path plain = temp_dir("norecompute"), again = temp_dir("recompute");
  run_tiny({.dump = dump_to(plain, DumpLevel::kMix)});
  run_tiny({.dump = dump_to(again, DumpLevel::kMix), .recompute = true});
  EXPECT_EQ(names(read_json(plain / "step1" / "rank0" / "dump.json")),
            names(read_json(again / "step1" / "rank0" / "dump.json")));
  std::string text;
  EXPECT_FALSE(compare(plain, again, &text).first_divergence) << text;
}

TEST(PrecisionCompare, NamesTheFirstNaN) {
  const fs::path dir = temp_dir("nan");
  auto poison = std::make_shared<Perturb>();
  poison->module = "linear_fc2";
  poison->layer = 0;
  poison->poison = true;
  testing::internal::CaptureStdout();
  EXPECT_THROW(run_tiny({.dump = dump_to(dir, DumpLevel::kL0), .before = {poison}}), NonFiniteError);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("precision dump: iteration 1 rank 0: first NaN/Inf in decoder.layers.0.mlp.linear_fc2.forward.0 "
                     "(output: 1 NaN, 0 Inf)"),
            std::string::npos)
      << out;
  const nlohmann::json d = read_json(dir / "step1" / "rank0" / "dump.json");
  EXPECT_EQ(d["first_nonfinite"]["record"], "decoder.layers.0.mlp.linear_fc2.forward.0");
  EXPECT_EQ(d["first_nonfinite"]["nan"], 1);

  const fs::path clean = temp_dir("nan_clean");
  run_tiny({.dump = dump_to(clean, DumpLevel::kL0)});
  std::string text;
  const CompareReport r = compare(clean, dir, &text);
  EXPECT_EQ(r.first_nonfinite_a, "");
  EXPECT_NE(r.first_nonfinite_b.find("decoder.layers.0.mlp.linear_fc2.forward.0"), std::string::npos);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->module, "decoder.layers.0.mlp.linear_fc2");
}

TEST(PrecisionDump, UnfusedOpsShowTheirInside) {
  const fs::path on = temp_dir("fused"), off = temp_dir("unfused");
  run_tiny({.dump = dump_to(on, DumpLevel::kL1)});
  run_tiny({.dump = dump_to(off, DumpLevel::kL1), .fusions = false});
  const nlohmann::json d = read_json(off / "step1" / "rank0" / "dump.json");
  const std::vector<std::string> n = names(d);
  for (const char* inner :
       {"decoder.layers.0.self_attn_bda.bias_add.forward.0", "decoder.layers.0.self_attn_bda.residual_add.forward.0",
        "decoder.layers.1.mlp.activation_func.bias_add.forward.0",
        "decoder.layers.1.mlp.activation_func.silu.forward.0", "decoder.layers.1.mlp.activation_func.mul.forward.0",
        "cross_entropy.log_softmax.forward.0", "cross_entropy.nll_loss.forward.0"})
    position(n, inner);
  EXPECT_LT(position(n, "decoder.layers.0.self_attn_bda.residual_add.forward.0"),
            position(n, "decoder.layers.0.self_attn_bda.forward.0"));
  EXPECT_TRUE(record(d, "decoder.layers.0.self_attn_bda.forward.0")["fused_by"].is_null());
  EXPECT_EQ(d["fused_ops"], nlohmann::json::parse(R"({"--apply_rope_fusion": ["apply_rotary_pos_emb"]})"));
  // Steps take the op's TP layout: the activation is column-sharded.
  EXPECT_EQ(record(d, "decoder.layers.1.mlp.activation_func.silu.forward.0")["outputs"][0]["partition"], "tp_shard");
  EXPECT_EQ(record(d, "cross_entropy.nll_loss.forward.0")["outputs"][0]["partition"], "replicated");
  // The residual add's output is the op's output.
  EXPECT_EQ(record(d, "decoder.layers.0.self_attn_bda.residual_add.forward.0")["outputs"][0]["sum"],
            record(d, "decoder.layers.0.self_attn_bda.forward.0")["outputs"][0]["sum"]);

  // Fused vs unfused: the common records agree; the steps are skipped.
  std::string text;
  int rc = -1;
  const CompareReport r = compare(on, off, &text, &rc);
  EXPECT_TRUE(r.only_a.empty());
  EXPECT_GE(r.only_b.size(), 7u);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("only in"), std::string::npos) << text;
}

TEST(PrecisionDump, FlagChecks) {
  std::vector<std::string> warnings;
  config::Args a;
  auto message = [&](const config::Args& args) {
    try {
      config::check_precision_dump(args, 4, warnings);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  a.precision_dump_steps = {"2"};
  EXPECT_EQ(message(a), "--precision_dump_steps needs --precision_dump_path");
  a.precision_dump_path = "dump";
  a.precision_dump_steps = {"0"};
  EXPECT_EQ(message(a), "--precision_dump_steps 0: iterations are numbered from 1");
  a.precision_dump_steps = {"1,3-5"};
  a.precision_dump_ranks = {"4"};
  EXPECT_EQ(message(a), "--precision_dump_ranks 4: no such rank in a world of 4 ranks");
  a.precision_dump_ranks = {"x"};
  EXPECT_EQ(message(a), "--precision_dump_ranks: 'x' is not a number or a range a-b");
  a.precision_dump_ranks = {"0", "3"};
  a.precision_dump_level = "L2";
  EXPECT_EQ(message(a), "--precision_dump_level L2: unknown level");
  a.precision_dump_level = "L1";
  a.bias_swiglu_fusion = false;
  warnings.clear();
  EXPECT_EQ(message(a), "");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("turn the fusions off: --bias_dropout_fusion false --cross_entropy_loss_fusion false"),
            std::string::npos)
      << warnings[0];
  a.precision_dump_level = "L0";
  warnings.clear();
  EXPECT_EQ(message(a), "");
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(config::parse_int_list({"1,3-5", "2"}, "x"), (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST(PrecisionCompare, RefusesWhatIsNotADump) {
  const fs::path empty = temp_dir("not_a_dump");
  CompareOptions o;
  o.a = (empty / "missing").string();
  o.b = empty.string();
  EXPECT_THROW(compare_dumps(o), UsageError);
  o.a = empty.string();
  EXPECT_THROW(compare_dumps(o), DataError);
  const fs::path l0 = temp_dir("lvl0"), l1 = temp_dir("lvl1");
  run_tiny({.dump = dump_to(l0, DumpLevel::kL0)});
  run_tiny({.dump = dump_to(l1, DumpLevel::kL1)});
  o.a = l0.string();
  o.b = (l1 / "step1").string();
  try {
    compare_dumps(o);
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("dump levels differ: L0 in"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_compare_args({"a"}), UsageError);
  EXPECT_THROW(parse_compare_args({"a", "b", "--rtl", "1"}), UsageError);
  const CompareOptions p = parse_compare_args({"a", "b", "--step", "3", "--rtol=1e-2", "--show", "5"});
  EXPECT_EQ(p.step, 3);
  EXPECT_DOUBLE_EQ(p.rtol, 1e-2);
  EXPECT_EQ(p.show, 5);
}

}  // namespace
}  // namespace mtrain::observe
