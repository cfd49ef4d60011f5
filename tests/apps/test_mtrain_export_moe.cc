// `mtrain export` and `--model` with Hugging Face mixture-of-experts
// directories (Qwen2-MoE with its gated shared expert, Mixtral) at the
// binary's edge: HF -> mtrain checkpoint -> HF reproduces config.json and the
// weights byte for byte; a model trained from `--model` at one device, under
// expert parallelism (EP 2) and under TP 2 + SP exports the same bytes; and
// the EP 2 run's first loss is the single device's.
#include <cmath>

#include "../checkpoint/hf_dir_test_util.h"
#include "checkpoint/hf_model_dir.h"
#include "checkpoint/sharded_checkpoint.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

using checkpoint::HfArch;
using checkpoint::StDType;
using checkpoint::testing::tiny_moe_hf_shape;
using checkpoint::testing::write_tiny_hf_dir;

class ExportMoe : public MtrainTest {
 protected:
  fs::path write_hf(HfArch arch, StDType dtype, int64_t vocab, const std::string& name) {
    const fs::path dir = tmp_ / name;
    write_tiny_hf_dir(pfs_, dir.string(), tiny_moe_hf_shape(arch, vocab), dtype, 13);
    return dir;
  }
  RunResult export_run(const std::string& direction, const std::string& from_flag, const fs::path& from,
                       const fs::path& out) {
    return run({"export", direction, from_flag, from.string(), "--output_dir", out.string()}, out.filename().string());
  }
  PosixFileSystem pfs_;
};

TEST_F(ExportMoe, HfToMcoreToHfIsByteExact) {
  for (const auto& [arch, dtype] : {std::pair{HfArch::kQwen2Moe, StDType::kBF16}, {HfArch::kMixtral, StDType::kF32}}) {
    const std::string type = checkpoint::hf_model_type(arch);
    SCOPED_TRACE(type);
    const fs::path hf = write_hf(arch, dtype, 50, type), ckpt = tmp_ / (type + "_ckpt"), back = tmp_ / (type + "_back");
    const RunResult a = export_run("--to_mcore", "--model", hf, ckpt);
    ASSERT_EQ(a.exit_code, 0) << a.describe();
    EXPECT_TRUE(contains(a.out, std::string(checkpoint::hf_arch_class(arch)) + ", 2 layers")) << a.out;
    EXPECT_TRUE(contains(a.out, "4 experts of 8, top-2")) << a.out;
    const auto r = checkpoint::CheckpointReader::open(pfs_, ckpt.string());
    const nlohmann::json model = nlohmann::json::parse(r.state_json())["model"];
    EXPECT_EQ(model["num_experts"], 4);
    EXPECT_EQ(model["moe_router_topk"], 2);
    EXPECT_EQ(model["moe_shared_expert_gate"], arch == HfArch::kQwen2Moe);
    EXPECT_EQ(model["moe_router_pre_softmax"], arch == HfArch::kQwen2Moe);  // norm_topk_prob false
    EXPECT_EQ(r.global_shape("decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight"), (Shape{16, 16}));
    const RunResult b = export_run("--to_hf", "--load", ckpt, back);
    ASSERT_EQ(b.exit_code, 0) << b.describe();
    for (const char* f : {"config.json", "model.safetensors"}) EXPECT_EQ(read_text(back / f), read_text(hf / f)) << f;
  }
}

// lr 1e-30 and no weight decay: Adam's first step moves a weight by about lr,
// far below half an ulp of any weight here, so the saved weights are the
// imported ones and every layout must export the original file.
std::vector<std::string> import_job(const fs::path& hf, const fs::path& out, const std::string& extra) {
  return concat(words("pt --tokenizer configs/demo/tokenizer.json --dataset configs/demo/pt.txt --seq_length 32 "
                      "--micro_batch_size 2 --global_batch_size 4 --lr 1e-30 --min_lr 0 --weight_decay 0 "
                      "--train_iters 1 --log_interval 1 --num_threads 1 " +
                      extra),
                {"--model", hf.string(), "--output_dir", out.string()});
}

TEST_F(ExportMoe, EveryLayoutExportsTheImportedBytesAndEp2HasTheFirstLoss) {
  const fs::path hf = write_hf(HfArch::kMixtral, StDType::kF32, 1024, "mixtral");
  struct Layout {
    std::string name, flags;
    int ranks;
  };
  const std::vector<Layout> layouts = {{"one", "", 1},
                                       {"ep2", "--expert_model_parallel_size 2", 2},
                                       {"tp2", "--tensor_model_parallel_size 2 --sequence_parallel", 2}};
  std::vector<double> losses;
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    const fs::path out = tmp_ / ("run_" + l.name), back = tmp_ / ("hf_" + l.name);
    const RunResult t = run(import_job(hf, out, l.flags), "train_" + l.name, launch_ranks(l.ranks));
    ASSERT_EQ(t.exit_code, 0) << t.describe();
    EXPECT_TRUE(contains(t.out, "successfully loaded Hugging Face weights from " + hf.string())) << t.out;
    losses.push_back(train_rows(out).front().at("loss").get<double>());
    const RunResult e = export_run("--to_hf", "--load", out, back);
    ASSERT_EQ(e.exit_code, 0) << e.describe();
    EXPECT_EQ(read_text(back / "model.safetensors"), read_text(hf / "model.safetensors"));
    EXPECT_EQ(read_text(back / "config.json"), read_text(hf / "config.json"));
  }
  ASSERT_EQ(losses.size(), 3u);
  // The same tokens through the same weights; only the order of fp32 sums differs (EP gathers the rows of two
  // ranks, DP 2 averages two micro-batch losses): the 1e-5 equivalence bound.
  EXPECT_LE(std::abs(losses[1] - losses[0]) / losses[0], 1e-5) << losses[0] << " vs " << losses[1];
  EXPECT_LE(std::abs(losses[2] - losses[0]) / losses[0], 1e-5) << losses[0] << " vs " << losses[2];
}

}  // namespace
}  // namespace mtrain::functional
