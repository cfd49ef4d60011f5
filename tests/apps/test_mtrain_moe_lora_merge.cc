// Merging, reloading and serving the LoRA adapters of an MoE model (issue 16),
// on tiny Hugging Face MoE bases of both layouts (Qwen2-MoE with its gated
// shared expert, Mixtral's w1/w3/w2): a LoRA run on the base (2 ranks through
// mpirun: TP 2 + ETP 2, EP 2; label mpi), its PEFT export and its merged export. The merged experts' weights are the
// fp64 W + s·B·A of the saved tensors; the merged model answers like the LoRA layers (infer --load of the LoRA
// checkpoint, also merged at load); the PEFT directory reads back bit for bit and --adapter_load of it starts where
// --finetune of the checkpoint starts.
#include <cmath>

#include "../checkpoint/hf_dir_test_util.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint/sharded_checkpoint.h"
#include "greedy_answer.h"
#include "mtrain_runner.h"
#include "raw_safetensors.h"

namespace mtrain::functional {
namespace {

using checkpoint::HfArch;

constexpr const char* kTokenizer = "--tokenizer configs/demo/tokenizer.json";
constexpr int64_t kRank = 4;
constexpr double kScale = 8.0 / kRank;  // --lora_alpha 8 / --lora_rank 4

// A LoRA job on the HF base `base` (every linear adapted: attention, each
// expert's fc1/fc2, the shared expert's), saving at iteration `iters`.
std::vector<std::string> lora_job(const fs::path& base, const fs::path& out, int iters, const std::string& extra) {
  return concat(words(std::string("pt ") + kTokenizer +
                      " --dataset configs/demo/pt.txt --seq_length 32 --micro_batch_size 2 --global_batch_size 4 "
                      "--lr 1e-2 --log_interval 1 --num_threads 1 --train_type lora --lora_rank 4 --lora_alpha 8 "
                      "--lora_dropout 0 --train_iters " +
                      std::to_string(iters) + " --save_interval " + std::to_string(iters) + " " + extra),
                {"--model", base.string(), "--output_dir", out.string()});
}

// The LoRA runs are sharded as the merge must reassemble them: Qwen2-MoE
// under TP 2 + SP with expert TP 2 (fc1's B by rows per gate/up half, fc2's A
// by columns), Mixtral under EP 2 (each rank two experts' adapters).
const std::map<HfArch, std::string> kLayout = {
    {HfArch::kQwen2Moe,
     "--tensor_model_parallel_size 2 --sequence_parallel --expert_tensor_parallel_size 2 --modules_to_save router"},
    {HfArch::kMixtral, "--expert_model_parallel_size 2"}};

class MoeLoraMerge : public SuiteTest {
 protected:
  static void SetUpTestSuite() {
    fs::current_path(MTRAIN_SOURCE_DIR);  // the runs' args name the tokenizer relative to the sources
    make_suite_dir("moe_lora_merge");
    PosixFileSystem pfs;
    ok_ = true;
    for (const HfArch arch : {HfArch::kQwen2Moe, HfArch::kMixtral}) {
      const fs::path d = suite_dir() / checkpoint::hf_model_type(arch);
      fs::create_directories(d);
      (*base_)[arch] = checkpoint::testing::write_tiny_hf_dir(pfs, (d / "base").string(),
                                                              checkpoint::testing::tiny_moe_hf_shape(arch, 1024),
                                                              checkpoint::StDType::kF32, 13);
      const auto ok = [&](const std::vector<std::string>& args, const std::string& tag, int ranks = 1) {
        const RunResult r = run_mtrain(args, d, tag, launch_ranks(ranks));
        if (r.exit_code != 0) std::fprintf(stderr, "%s\n", r.describe().c_str());
        return r.exit_code == 0;
      };
      ok_ =
          ok_ && ok(lora_job(d / "base", d / "lora", 3, kLayout.at(arch)), "lora", 2) &&
          ok({"export", "--to_peft", "--load", (d / "lora").string(), "--output_dir", (d / "peft").string()}, "peft") &&
          ok({"export", "--to_hf", "--merge_lora", "true", "--load", (d / "lora").string(), "--output_dir",
              (d / "merged").string()},
             "merged");
    }
  }
  void SetUp() override { ASSERT_TRUE(ok_) << "a setup run failed (see above)"; }

  static fs::path dir(HfArch arch) { return suite_dir() / checkpoint::hf_model_type(arch); }

  // 8 greedy tokens after a fixed prompt, in this process (one device).
  static Answer answer(HfArch arch, const std::string& flags) {
    std::vector<std::string> args = words(flags);
    for (std::string& a : args)
      if (a.rfind("@", 0) == 0) a = (dir(arch) / a.substr(1)).string();
    if (flags.find("--model") != std::string::npos) args = concat(args, words(kTokenizer));
    return greedy_answer(args);
  }

  static std::vector<float> ckpt_tensor(HfArch arch, const std::string& name) {
    PosixFileSystem pfs;
    const auto r = checkpoint::CheckpointReader::open(pfs, (dir(arch) / "lora").string());
    const Shape g = r.global_shape(name);
    std::vector<float> v(static_cast<size_t>(shape_numel(g)));
    r.read_block(name, std::vector<int64_t>(g.size(), 0), g, v.data());
    return v;
  }

  static inline auto* base_ = new std::map<HfArch, std::map<std::string, std::vector<float>>>();
  static inline bool ok_ = false;
};

// Layer 0 of both tiny bases is MoE: hidden C = 16, experts of F = 8, shared expert of 12 (Qwen2-MoE).
constexpr int64_t kC = 16;

// merged (OUT, IN) against the fp64 W + s · B[row0 .. row0 + OUT) · A: one fp32
// rounding of the exact value (half an ulp, 2^-24 relative) plus the fp64
// sum's own error, (r + 1) · 2^-53 of the sum of |terms|.
void expect_merged(const std::vector<float>& merged, const std::vector<float>& W, const std::vector<float>& A,
                   const std::vector<float>& B, int64_t row0, int64_t OUT, int64_t IN, const std::string& what) {
  ASSERT_EQ(merged.size(), static_cast<size_t>(OUT * IN)) << what;
  ASSERT_EQ(W.size(), merged.size()) << what;
  double moved = 0, widest = 0;
  for (int64_t o = 0; o < OUT; ++o)
    for (int64_t i = 0; i < IN; ++i) {
      double exact = W[o * IN + i], mag = std::abs(exact);
      for (int64_t k = 0; k < kRank; ++k) {
        const double t = kScale * B[(row0 + o) * kRank + k] * A[k * IN + i];
        exact += t;
        mag += std::abs(t);
      }
      const double bound = std::ldexp(std::abs(exact), -24) + (kRank + 1) * std::ldexp(mag, -53);
      EXPECT_LE(std::abs(merged[o * IN + i] - exact), bound) << what << " (" << o << ", " << i << ")";
      widest = std::max(widest, bound);
      moved = std::max(moved, std::abs(exact - W[o * IN + i]));
    }
  EXPECT_GT(moved, 100 * widest) << what << ": the adapter was trained, so the merge must move the weight";
}

TEST_F(MoeLoraMerge, MergedExpertWeightsAreWPlusScaledBA) {
  for (const HfArch arch : {HfArch::kQwen2Moe, HfArch::kMixtral}) {
    SCOPED_TRACE(checkpoint::hf_model_type(arch));
    const RawSafetensors merged = read_raw(dir(arch) / "merged" / "model.safetensors");
    const std::map<std::string, std::vector<float>>& base = base_->at(arch);
    const bool mixtral = arch == HfArch::kMixtral;
    const std::string hf = mixtral ? "model.layers.0.block_sparse_moe." : "model.layers.0.mlp.";
    struct Site {
      std::string mcore, gate, up, down;
      int64_t F;
    };
    std::vector<Site> sites;
    for (int e : {0, 3}) {
      const std::string x = hf + "experts." + std::to_string(e) + ".";
      sites.push_back({"decoder.layers.0.mlp.experts.local_experts." + std::to_string(e) + ".",
                       x + (mixtral ? "w1" : "gate_proj"), x + (mixtral ? "w3" : "up_proj"),
                       x + (mixtral ? "w2" : "down_proj"), 8});
    }
    if (!mixtral)
      sites.push_back({"decoder.layers.0.mlp.shared_experts.", hf + "shared_expert.gate_proj",
                       hf + "shared_expert.up_proj", hf + "shared_expert.down_proj", 12});
    for (const Site& s : sites) {
      // fc1 is [gate; up]: one A (r, C), B's first F rows the gate's, the next F the up's.
      const std::vector<float> A1 = ckpt_tensor(arch, s.mcore + "linear_fc1.lora_A.weight");
      const std::vector<float> B1 = ckpt_tensor(arch, s.mcore + "linear_fc1.lora_B.weight");
      expect_merged(merged.f32(s.gate + ".weight"), base.at(s.gate + ".weight"), A1, B1, 0, s.F, kC, s.gate);
      expect_merged(merged.f32(s.up + ".weight"), base.at(s.up + ".weight"), A1, B1, s.F, s.F, kC, s.up);
      const std::vector<float> A2 = ckpt_tensor(arch, s.mcore + "linear_fc2.lora_A.weight");
      const std::vector<float> B2 = ckpt_tensor(arch, s.mcore + "linear_fc2.lora_B.weight");
      expect_merged(merged.f32(s.down + ".weight"), base.at(s.down + ".weight"), A2, B2, 0, kC, s.F, s.down);
    }
    // The router is no LoRA target: the merged model carries the base's, or the trained one it saves in full.
    if (mixtral) {
      EXPECT_EQ(merged.f32(hf + "gate.weight"), base.at(hf + "gate.weight"));
    } else {
      EXPECT_EQ(merged.f32(hf + "gate.weight"), ckpt_tensor(arch, "decoder.layers.0.mlp.router.weight"));
      EXPECT_NE(merged.f32(hf + "gate.weight"), base.at(hf + "gate.weight")) << "the router was trained";
    }
  }
}

// The two forwards differ by fp32 rounding only: W·x + s·B·(A·x) against
// (W + s·B·A)·x, dot products of at most K = 24 terms (the dense FFN of the
// tiny Qwen2-MoE's layer 1) within K·eps of exact relative to the sum of
// |terms|; 4 linears per layer, 2 layers, the router's softmax and the norms
// well-conditioned between them: 16·24·eps of the largest logit.
constexpr double kBound = 16.0 * 24 / (1 << 24);

TEST_F(MoeLoraMerge, InferOfTheLoraCheckpointAnswersLikeTheMergedExport) {
  for (const HfArch arch : {HfArch::kQwen2Moe, HfArch::kMixtral}) {
    SCOPED_TRACE(checkpoint::hf_model_type(arch));
    const Answer lora = answer(arch, "--load @lora");  // the checkpoint's own LoRA layers
    const Answer at_load = answer(arch, "--load @lora --merge_lora true");
    const Answer exported = answer(arch, "--model @merged");
    const Answer base = answer(arch, "--model @base");
    ASSERT_EQ(lora.logits.size(), lora.tokens.size());
    EXPECT_EQ(exported.tokens, lora.tokens);
    EXPECT_EQ(at_load.tokens, lora.tokens);
    EXPECT_LE(rel_diff(lora, exported), kBound);
    EXPECT_LE(rel_diff(lora, at_load), kBound);
    EXPECT_GT(rel_diff(lora, base), 10 * kBound) << "the adapters change the logits: the check can fail";
  }
}

TEST_F(MoeLoraMerge, PeftDirectoryReadsBackBitExactAndAdapterLoadStartsFromIt) {
  PosixFileSystem pfs;
  for (const HfArch arch : {HfArch::kQwen2Moe, HfArch::kMixtral}) {
    SCOPED_TRACE(checkpoint::hf_model_type(arch));
    const fs::path d = dir(arch);
    const RawSafetensors st = read_raw(d / "peft" / "adapter_model.safetensors");
    const std::string x = arch == HfArch::kMixtral ? "base_model.model.model.layers.1.block_sparse_moe.experts.2.w3"
                                                   : "base_model.model.model.layers.0.mlp.shared_expert.up_proj";
    EXPECT_TRUE(st.header.contains(x + ".lora_B.weight")) << st.header.dump();
    const checkpoint::HfModelShape shape = checkpoint::testing::tiny_moe_hf_shape(arch, 1024);
    const checkpoint::PeftAdapter back = checkpoint::read_peft_adapter(pfs, (d / "peft").string(), shape);
    const auto r = checkpoint::CheckpointReader::open(pfs, (d / "lora").string());
    size_t adapters = 0;
    for (const std::string& n : r.names()) {
      if (n.rfind("optimizer.", 0) == 0) continue;  // the rest: adapters and (Qwen2-MoE) the saved router
      ++adapters;
      ASSERT_TRUE(back.tensors.count(n)) << n;
      EXPECT_EQ(back.tensors.at(n), ckpt_tensor(arch, n)) << n;
    }
    EXPECT_EQ(back.tensors.size(), adapters);
    EXPECT_EQ(back.config.modules_to_save,
              arch == HfArch::kMixtral ? std::vector<std::string>{} : std::vector<std::string>{"gate"});
    // The PEFT directory as --adapter_load: the first loss is --finetune's from the checkpoint, bit for bit.
    const std::string saved = arch == HfArch::kMixtral ? "" : "--modules_to_save router ";
    const auto first_loss = [&](const std::string& name, const std::string& extra) {
      const RunResult t = run_mtrain(lora_job(d / "base", d / name, 1, saved + extra), d, name);
      EXPECT_EQ(t.exit_code, 0) << t.describe();
      return t.exit_code == 0 ? train_rows(d / name).front().at("loss").get<double>() : -1.0;
    };
    const double finetune = first_loss("finetune", "--finetune --load " + (d / "lora").string());
    EXPECT_EQ(first_loss("from_peft", "--adapter_load " + (d / "peft").string()), finetune);
    EXPECT_NE(finetune, train_rows(d / "lora").front().at("loss").get<double>()) << "the trained adapter was loaded";
  }
}

}  // namespace
}  // namespace mtrain::functional
