// LoRA adapters out of and into mtrain (issue 14): `mtrain export --to_peft`
// writes what PEFT's save_pretrained writes for the same HF model (the test
// reads the safetensors header itself and names the tensors by PEFT's rule),
// the fused qkv / fc1 adapters split exactly, the PEFT directory reads back
// bit for bit, and `--to_hf --merge_lora true` gives the model whose loss is
// the base+adapter forward's, the same bytes whether the adapters come from
// the checkpoint or from its PEFT export. Bad PEFT input exits 5 naming the
// file and the field or tensor.
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "../checkpoint/hf_dir_test_util.h"
#include "checkpoint/hf_model_dir.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint/sharded_checkpoint.h"
#include "mtrain_runner.h"
#include "raw_safetensors.h"

namespace mtrain::functional {
namespace {

using nlohmann::json;

std::vector<float> ckpt_tensor(const checkpoint::CheckpointReader& r, const std::string& name) {
  const Shape g = r.global_shape(name);
  std::vector<float> v(static_cast<size_t>(shape_numel(g)));
  r.read_block(name, std::vector<int64_t>(g.size(), 0), g, v.data());
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows [first, first + n) of a (rows, cols) matrix.
std::vector<float> rows_of(const std::vector<float>& m, int64_t cols, int64_t first, int64_t n) {
  return {m.begin() + first * cols, m.begin() + (first + n) * cols};
}

class Peft : public MtrainTest {
 protected:
  // The demo model (4 layers, hidden 256, 4 heads in 2 query groups of head
  // dim 64, ffn 688, untied, q/k/v biases): LoRA r=4 alpha=8 on every linear
  // plus the word embeddings in full, trained 2 iterations under TP=2.
  static constexpr const char* kLora =
      "--train_type lora --lora_rank 4 --lora_alpha 8 --lora_dropout 0 --modules_to_save word_embeddings --lr 1e-2";
  PosixFileSystem pfs_;
};

// What PEFT names the adapter of a LlamaForCausalLM/Qwen2ForCausalLM: the
// module path under base_model.model, then lora_A/lora_B, no adapter name.
std::map<std::string, Shape> peft_expected(int64_t layers, int64_t vocab) {
  const int64_t C = 256, F = 688, D = 64, H = 4, G = 2, r = 4;
  const std::map<std::string, std::pair<int64_t, int64_t>> proj = {
      // (in, out)
      {"self_attn.q_proj", {C, H * D}}, {"self_attn.k_proj", {C, G * D}}, {"self_attn.v_proj", {C, G * D}},
      {"self_attn.o_proj", {H * D, C}}, {"mlp.gate_proj", {C, F}},        {"mlp.up_proj", {C, F}},
      {"mlp.down_proj", {F, C}}};
  std::map<std::string, Shape> out;
  for (int64_t n = 0; n < layers; ++n)
    for (const auto& [p, io] : proj) {
      const std::string m = "base_model.model.model.layers." + std::to_string(n) + "." + p;
      out[m + ".lora_A.weight"] = {r, io.first};
      out[m + ".lora_B.weight"] = {io.second, r};
    }
  out["base_model.model.model.embed_tokens.weight"] = {vocab, C};
  return out;
}

// One LoRA run trained under TP=2 and exported --to_peft, shared by the
// PeftExport tests (a suite-level fixture: the run is the expensive part).
class PeftExport : public Peft {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(make_temp_dir("peft"));
    const RunResult t = run_mtrain(
        checkpoint_job(*dir_ / "run", std::string(kLora) + " --train_iters 2 "
                                                           "--save_interval 2 --tensor_model_parallel_size 2"),
        *dir_, "train", launch_ranks(2));
    const RunResult e = run_mtrain(
        {"export", "--to_peft", "--load", (*dir_ / "run").string(), "--output_dir", (*dir_ / "peft").string()}, *dir_,
        "peft");
    ok_ = t.exit_code == 0 && e.exit_code == 0;
    if (!ok_) std::fprintf(stderr, "%s\n%s\n", t.describe().c_str(), e.describe().c_str());
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  void SetUp() override {
    Peft::SetUp();
    ASSERT_TRUE(ok_) << "the LoRA run or its export failed (see above)";
  }
  const fs::path run_dir = *dir_ / "run", peft = *dir_ / "peft";
  const checkpoint::CheckpointReader ckpt = checkpoint::CheckpointReader::open(pfs_, run_dir.string());
  const json state = json::parse(ckpt.state_json());
  const int64_t vocab = state["model"]["vocab_size"];
  static inline fs::path* dir_ = nullptr;
  static inline bool ok_ = false;
};

TEST_F(PeftExport, ConfigIsPeftsLoraConfig) {
  // adapter_config.json: PEFT's LoraConfig keys and values.
  const json cfg = json::parse(file_bytes(peft / "adapter_config.json"));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_TRUE(cfg["lora_alpha"].is_number_integer());
  EXPECT_EQ(cfg["lora_alpha"], 8);
  EXPECT_EQ(cfg["lora_dropout"], 0);
  EXPECT_EQ(cfg["use_rslora"], false);
  EXPECT_EQ(cfg["use_dora"], false);
  EXPECT_EQ(cfg["fan_in_fan_out"], false);
  EXPECT_EQ(cfg["bias"], "none");
  EXPECT_EQ(cfg["rank_pattern"], json::object());
  EXPECT_EQ(cfg["modules_to_save"], json({"embed_tokens"}));
  EXPECT_EQ(cfg["target_modules"], json({"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}));
}

TEST_F(PeftExport, TensorsHavePeftsNamesShapesAndDtype) {
  // adapter_model.safetensors: exactly PEFT's names and shapes, F32, pt metadata.
  const RawSafetensors st = read_raw(peft / "adapter_model.safetensors");
  EXPECT_EQ(st.header["__metadata__"], json({{"format", "pt"}}));
  std::map<std::string, Shape> got;
  for (const auto& [name, t] : st.header.items()) {
    if (name == "__metadata__") continue;
    got[name] = t["shape"].get<Shape>();
    EXPECT_EQ(t["dtype"], "F32") << name;
  }
  EXPECT_EQ(got, peft_expected(4, vocab));
}

TEST_F(PeftExport, FusedAdaptersSplitExactly) {
  const RawSafetensors st = read_raw(peft / "adapter_model.safetensors");
  // The split: q/k/v (gate/up) carry the fused A, and the fused B's rows by
  // Megatron's per-group layout [q_{2g}, q_{2g+1}, k_g, v_g] x 64 rows.
  const int64_t D = 64, R = 2;
  for (int layer = 0; layer < 4; ++layer) {
    const std::string mc = "decoder.layers." + std::to_string(layer) + ".";
    const std::string pf = "base_model.model.model.layers." + std::to_string(layer) + ".";
    const auto A = ckpt_tensor(ckpt, mc + "self_attention.linear_qkv.lora_A.weight");
    const auto B = ckpt_tensor(ckpt, mc + "self_attention.linear_qkv.lora_B.weight");
    const auto Bq = st.f32(pf + "self_attn.q_proj.lora_B.weight"), Bk = st.f32(pf + "self_attn.k_proj.lora_B.weight"),
               Bv = st.f32(pf + "self_attn.v_proj.lora_B.weight");
    for (const char* p : {"q_proj", "k_proj", "v_proj"})
      EXPECT_TRUE(same_bits(st.f32(pf + "self_attn." + p + ".lora_A.weight"), A)) << layer << p;
    for (int64_t g = 0; g < 2; ++g) {
      const int64_t base = g * (R + 2) * D;
      EXPECT_TRUE(same_bits(rows_of(Bq, 4, g * R * D, R * D), rows_of(B, 4, base, R * D))) << layer << " q " << g;
      EXPECT_TRUE(same_bits(rows_of(Bk, 4, g * D, D), rows_of(B, 4, base + R * D, D))) << layer << " k " << g;
      EXPECT_TRUE(same_bits(rows_of(Bv, 4, g * D, D), rows_of(B, 4, base + (R + 1) * D, D))) << layer << " v " << g;
    }
    const auto B1 = ckpt_tensor(ckpt, mc + "mlp.linear_fc1.lora_B.weight");
    EXPECT_TRUE(same_bits(st.f32(pf + "mlp.gate_proj.lora_B.weight"), rows_of(B1, 4, 0, 688))) << layer;
    EXPECT_TRUE(same_bits(st.f32(pf + "mlp.up_proj.lora_B.weight"), rows_of(B1, 4, 688, 688))) << layer;
    EXPECT_TRUE(
        same_bits(st.f32(pf + "mlp.down_proj.lora_A.weight"), ckpt_tensor(ckpt, mc + "mlp.linear_fc2.lora_A.weight")));
  }
  EXPECT_GT(std::abs(ckpt_tensor(ckpt, "decoder.layers.0.self_attention.linear_qkv.lora_B.weight")[5]), 0.f)
      << "trained: B is not PEFT's zero init";
}

TEST_F(PeftExport, PeftBackToMtrainIsBitExact) {
  // PEFT -> mtrain: every adapter tensor bit for bit, the embedding's vocabulary rows too.
  const auto shape = checkpoint::hf_shape_from_meta(checkpoint::model_meta_from_json(state["model"], "state"));
  const checkpoint::PeftAdapter back = checkpoint::read_peft_adapter(pfs_, peft.string(), shape);
  size_t adapters = 0;
  for (const std::string& n : ckpt.names()) {
    if (n.find(".lora_") == std::string::npos || n.rfind("optimizer.", 0) == 0) continue;
    ++adapters;
    ASSERT_TRUE(back.tensors.count(n)) << n;
    EXPECT_TRUE(same_bits(back.tensors.at(n), ckpt_tensor(ckpt, n))) << n;
  }
  EXPECT_EQ(adapters, 4u * 4u * 2u);
  const auto emb = ckpt_tensor(ckpt, "embedding.word_embeddings.weight");
  EXPECT_TRUE(same_bits(rows_of(back.tensors.at("embedding.word_embeddings.weight"), 256, 0, vocab),
                        rows_of(emb, 256, 0, vocab)));
}

TEST_F(PeftExport, MergedModelIsTheAdapterForwardAndPeftMergesTheSame) {
  // A LoRA checkpoint needs --merge_lora for --to_hf.
  const RunResult plain = run({"export", "--to_hf", "--load", run_dir.string(), "--output_dir", (tmp_ / "x").string()});
  EXPECT_EQ(plain.exit_code, 5) << plain.describe();
  EXPECT_TRUE(contains(plain.err, "--merge_lora true")) << plain.err;

  // Merged inside mtrain == merged from the PEFT export, byte for byte.
  const fs::path merged = tmp_ / "merged", via_peft = tmp_ / "merged_peft";
  ASSERT_EQ(
      run({"export", "--to_hf", "--merge_lora", "true", "--load", run_dir.string(), "--output_dir", merged.string()},
          "merge")
          .exit_code,
      0);
  const RunResult m2 = run({"export", "--to_hf", "--merge_lora", "true", "--load", run_dir.string(), "--adapter_load",
                            peft.string(), "--output_dir", via_peft.string()},
                           "merge_peft");
  ASSERT_EQ(m2.exit_code, 0) << m2.describe();
  EXPECT_EQ(file_bytes(merged / "model.safetensors"), file_bytes(via_peft / "model.safetensors"));
  EXPECT_EQ(file_bytes(merged / "config.json"), file_bytes(via_peft / "config.json"));

  // The merged model's loss is the base+adapter forward's on the same first batch.
  const RunResult a =
      run(checkpoint_job(tmp_ / "a", std::string(kLora) + " --train_iters 1 --finetune --load " + run_dir.string()),
          "lora_forward");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  const RunResult b = run(
      checkpoint_job(tmp_ / "b", "--train_iters 1 --tokenizer configs/demo/tokenizer.json --model " + merged.string()),
      "merged_forward");
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  const double la = train_rows(tmp_ / "a").front().at("loss").get<double>();
  const double lb = train_rows(tmp_ / "b").front().at("loss").get<double>();
  // The two forwards differ only by fp32 rounding: W·x + s·B·(A·x) against
  // (W + s·B·A)·x. A dot product of K terms in fp32 is within K·eps (eps =
  // 2^-24) of the exact one relative to the sum of |terms|; K <= 688 here and
  // a layer chains 4 such products (qkv, proj, fc1, fc2), 4 layers deep,
  // the norms and the softmax being relatively well-conditioned: 16·688·eps.
  const double bound = 16.0 * 688 * std::ldexp(1.0, -24);
  EXPECT_LE(std::abs(la - lb) / la, bound) << la << " vs " << lb;
  // ... while the adapters move the loss far more than that: the run's first
  // loss is the base alone (B = 0) on the same batch.
  const double base = train_rows(run_dir).front().at("loss").get<double>();
  EXPECT_GT(std::abs(base - la) / la, 10 * bound) << base << " vs " << la;
}

// --adapter_load starts a LoRA run from a PEFT directory or an mtrain LoRA
// checkpoint: the first loss is the trained adapter's (that of --finetune
// from the checkpoint itself, bit for bit: the frozen base is the same init),
// not the fresh adapter's; settings the adapter does not fit are refused.
TEST_F(Peft, AdapterLoadStartsFromAPeftDirectoryOrACheckpoint) {
  const fs::path run_dir = tmp_ / "run", peft = tmp_ / "peft";
  const std::string lora = std::string(kLora) + " --train_iters 1";
  ASSERT_EQ(run(checkpoint_job(run_dir, std::string(kLora) + " --train_iters 2 --save_interval 2"), "train").exit_code,
            0);
  ASSERT_EQ(
      run({"export", "--to_peft", "--load", run_dir.string(), "--output_dir", peft.string()}, "to_peft").exit_code, 0);
  const auto first_loss = [&](const std::string& name, const std::string& extra, const RunOptions& o = {}) {
    const RunResult r = run(checkpoint_job(tmp_ / name, lora + " " + extra), name, o);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return r.exit_code == 0 ? train_rows(tmp_ / name).front().at("loss").get<double>() : -1.0;
  };
  const double finetune = first_loss("finetune", "--finetune --load " + run_dir.string());
  const double from_peft = first_loss("from_peft", "--adapter_load " + peft.string());
  const double from_ckpt = first_loss("from_ckpt", "--mcore_adapter " + run_dir.string());
  EXPECT_EQ(from_peft, finetune);
  EXPECT_EQ(from_ckpt, finetune);
  EXPECT_NE(finetune, train_rows(run_dir).front().at("loss").get<double>()) << "the trained adapter was loaded";
  // Under TP=2 each rank takes its blocks (B by output rows, fc1's gate and up halves): the same loss up
  // to the reduction order, within the fp32 bound of the merge test (16·688·2^-24 relative).
  const double tp2 =
      first_loss("tp2", "--tensor_model_parallel_size 2 --adapter_load " + peft.string(), launch_ranks(2));
  EXPECT_LE(std::abs(tp2 - finetune) / finetune, 16.0 * 688 * std::ldexp(1.0, -24)) << tp2 << " vs " << finetune;

  const RunResult rank = run(checkpoint_job(tmp_ / "r8", lora + " --lora_rank 8 --adapter_load " + peft.string()));
  EXPECT_EQ(rank.exit_code, 3) << rank.describe();
  EXPECT_TRUE(contains(rank.err, "the adapter has rank 4, this run --lora_rank 8")) << rank.err;
  EXPECT_TRUE(contains(rank.err, "set --lora_rank 4")) << rank.err;
  const RunResult resume =
      run(checkpoint_job(tmp_ / "rs", lora + " --load " + run_dir.string() + " --adapter_load " + peft.string()));
  EXPECT_EQ(resume.exit_code, 3) << resume.describe();
  EXPECT_TRUE(contains(resume.err, "add --finetune")) << resume.err;

  json cfg = json::parse(file_bytes(peft / "adapter_config.json"));
  cfg["use_dora"] = true;
  std::ofstream(peft / "adapter_config.json") << cfg.dump();
  const RunResult dora = run(checkpoint_job(tmp_ / "dora", lora + " --adapter_load " + peft.string()));
  EXPECT_EQ(dora.exit_code, 5) << dora.describe();
  EXPECT_TRUE(contains(dora.err, (peft / "adapter_config.json").string() + ": \"use_dora\" is true")) << dora.err;
}

// swift export --model BASE --adapters PEFT --merge_lora: a LoRA run on an HF
// base, its PEFT export merged into that HF directory, gives the bytes of
// merging the run's own checkpoint.
TEST_F(Peft, MergingIntoTheHfBaseEqualsMergingTheCheckpoint) {
  const fs::path full = tmp_ / "full", base = tmp_ / "base", lora = tmp_ / "lora", peft = tmp_ / "peft";
  ASSERT_EQ(run(checkpoint_job(full, "--train_iters 1 --save_interval 1"), "full").exit_code, 0);
  ASSERT_EQ(run({"export", "--to_hf", "--load", full.string(), "--output_dir", base.string()}, "base").exit_code, 0);
  const RunResult t = run(checkpoint_job(lora, std::string(kLora) +
                                                   " --train_iters 2 --save_interval 2 --tokenizer "
                                                   "configs/demo/tokenizer.json --model " +
                                                   base.string()),
                          "lora");
  ASSERT_EQ(t.exit_code, 0) << t.describe();
  ASSERT_EQ(run({"export", "--to_peft", "--load", lora.string(), "--output_dir", peft.string()}, "peft").exit_code, 0);
  const json cfg = json::parse(file_bytes(peft / "adapter_config.json"));
  EXPECT_EQ(cfg["base_model_name_or_path"], base.string());
  const RunResult a = run({"export", "--to_hf", "--merge_lora", "--model", base.string(), "--adapter_load",
                           peft.string(), "--output_dir", (tmp_ / "a").string()},
                          "merge_hf");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  const RunResult b = run(
      {"export", "--to_hf", "--merge_lora", "--load", lora.string(), "--output_dir", (tmp_ / "b").string()}, "merge");
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  EXPECT_EQ(file_bytes(tmp_ / "a/model.safetensors"), file_bytes(tmp_ / "b/model.safetensors"));
  EXPECT_NE(file_bytes(tmp_ / "a/model.safetensors"), file_bytes(base / "model.safetensors"));
  const RunResult no_adapter =
      run({"export", "--to_hf", "--model", base.string(), "--output_dir", (tmp_ / "c").string()}, "no_adapter");
  EXPECT_EQ(no_adapter.exit_code, 2) << no_adapter.describe();
  EXPECT_TRUE(contains(no_adapter.err, "--merge_lora true --adapter_load DIR")) << no_adapter.err;
}

}  // namespace
}  // namespace mtrain::functional
