// `mtrain export` at the binary's edge: an HF directory written by the test
// goes --to_mcore and back --to_hf bit for bit (files and tensors, one file
// and sharded), a checkpoint's own iteration is exported, and bad input
// exits with the right code (2 options, 5 checkpoint / model directory)
// naming the tensor, file or option.
#include <cmath>
#include <functional>
#include <map>

#include "../checkpoint/hf_dir_test_util.h"
#include "checkpoint/hf_model_dir.h"
#include "checkpoint/sharded_checkpoint.h"
#include "mtrain_runner.h"
#include "parallel/local_comm.h"

namespace mtrain::functional {
namespace {

using checkpoint::HfArch;
using checkpoint::StDType;
using checkpoint::testing::tiny_hf_shape;
using checkpoint::testing::write_tiny_hf_dir;

class Export : public MtrainTest {
 protected:
  // A tiny Qwen2 (GQA, q/k/v biases, untied) in BF16 at <tmp>/hf.
  fs::path write_hf(const std::string& name = "hf",
                    const std::function<void(std::vector<checkpoint::testing::HfTestTensor>&)>& edit = {}) {
    const fs::path dir = tmp_ / name;
    write_tiny_hf_dir(pfs_, dir.string(), tiny_hf_shape(HfArch::kQwen2, false, 4, 2), StDType::kBF16, 11, edit);
    return dir;
  }
  RunResult to_mcore(const fs::path& hf, const fs::path& out, const std::string& tag) {
    return run({"export", "--to_mcore", "--model", hf.string(), "--output_dir", out.string()}, tag);
  }
  PosixFileSystem pfs_;
};

// Each tensor's raw bytes, by name.
std::map<std::string, std::string> tensor_bytes(PosixFileSystem& pfs, const std::vector<fs::path>& files) {
  std::map<std::string, std::string> out;
  for (const fs::path& f : files) {
    const auto sf = checkpoint::SafetensorsFile::open(pfs, f.string());
    for (const checkpoint::TensorInfo& t : sf.tensors()) {
      std::string bytes(static_cast<size_t>(t.nbytes()), '\0');
      sf.read_bytes(t, std::as_writable_bytes(std::span(bytes.data(), bytes.size())));
      out[t.name + " " + checkpoint::st_dtype_name(t.dtype)] = bytes;
    }
  }
  return out;
}

TEST_F(Export, HfToMcoreToHfIsBitExact) {
  const fs::path hf = write_hf();
  const RunResult a = to_mcore(hf, tmp_ / "ckpt", "to_mcore");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  EXPECT_TRUE(contains(a.out, "loading Hugging Face model from " + hf.string())) << a.out;
  EXPECT_TRUE(contains(a.out, "Qwen2ForCausalLM, 2 layers, hidden 16")) << a.out;
  EXPECT_TRUE(contains(a.out, "successfully saved checkpoint from iteration       0 to " + (tmp_ / "ckpt").string()))
      << a.out;

  // The checkpoint: iteration 0, full tensors, the model shape and the source in the state.
  const auto ckpt = checkpoint::CheckpointReader::open(pfs_, (tmp_ / "ckpt").string());
  EXPECT_EQ(ckpt.iteration(), 0);
  const nlohmann::json state = nlohmann::json::parse(ckpt.state_json());
  EXPECT_EQ(state["iteration"], 0);
  EXPECT_EQ(state["consumed_samples"], 0);
  EXPECT_EQ(state["source"], hf.string());
  EXPECT_EQ(state["model"]["num_query_groups"], 2);
  EXPECT_EQ(state["model"]["padded_vocab_size"], 50);
  EXPECT_EQ(state["model"]["add_qkv_bias"], true);
  EXPECT_EQ(state["model"]["params_dtype"], "bf16");
  EXPECT_EQ(ckpt.global_shape("decoder.layers.1.self_attention.linear_qkv.weight"), (Shape{32, 16}));
  EXPECT_EQ(ckpt.blocks("decoder.layers.1.self_attention.linear_qkv.weight").size(), 1u);

  const RunResult b =
      run({"export", "--to_hf", "true", "--load", (tmp_ / "ckpt").string(), "--output_dir", (tmp_ / "back").string()},
          "to_hf");
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  EXPECT_TRUE(contains(b.out, "saving Hugging Face model (bfloat16)")) << b.out;
  EXPECT_TRUE(contains(b.out, "successfully saved Hugging Face model to " + (tmp_ / "back").string())) << b.out;
  for (const char* f : {"config.json", "model.safetensors"})
    EXPECT_EQ(read_text(tmp_ / "back" / f), read_text(hf / f)) << f;

  // Sharded, in the Megatron-LM spelling of the options: the same tensors, byte for byte.
  const RunResult c = run({"export", "--to-hf", "--mcore-model", (tmp_ / "ckpt").string(), "--save",
                           (tmp_ / "sharded").string(), "--max-shard-size", "1KB", "--ckpt_step", "0"},
                          "sharded");
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  std::vector<fs::path> shards;
  for (const auto& e : fs::directory_iterator(tmp_ / "sharded"))
    if (e.path().extension() == ".safetensors") shards.push_back(e.path());
  EXPECT_GT(shards.size(), 3u);
  EXPECT_TRUE(fs::exists(tmp_ / "sharded/model.safetensors.index.json"));
  EXPECT_EQ(tensor_bytes(pfs_, shards), tensor_bytes(pfs_, {hf / "model.safetensors"}));

  // float32 on request: every value as stored in BF16, widened exactly.
  const RunResult d = run({"export", "--to_hf", "--load", (tmp_ / "ckpt").string(), "--output_dir",
                           (tmp_ / "f32").string(), "--torch_dtype", "float32"},
                          "f32");
  ASSERT_EQ(d.exit_code, 0) << d.describe();
  const auto f32 = checkpoint::HfModelReader::open(pfs_, (tmp_ / "f32").string());
  const auto orig = checkpoint::HfModelReader::open(pfs_, hf.string());
  EXPECT_EQ(f32.shape().dtype, DType::kF32);
  for (const std::string& name : orig.names())
    EXPECT_TRUE(checkpoint::testing::same_bits(f32.read_full(name), orig.read_full(name))) << name;
}

// Qwen3 (transformers' modeling_qwen3.py: Qwen3Attention's q_norm / k_norm of
// size head_dim, head_dim free of hidden / heads, attention_bias false) with
// tied embeddings: HF -> mcore -> HF reproduces config.json and the tensors
// byte for byte; the checkpoint records qk_layernorm and holds the norms
// under Megatron-core's names.
TEST_F(Export, Qwen3HfToMcoreToHfIsBitExact) {
  checkpoint::HfModelShape shape = tiny_hf_shape(HfArch::kQwen3, true, 4, 2);
  shape.head_dim = 8;  // 4 heads x 8 = 32 query rows for hidden 16
  const fs::path hf = tmp_ / "qwen3";
  write_tiny_hf_dir(pfs_, hf.string(), shape, StDType::kBF16, 13);
  const nlohmann::json config = nlohmann::json::parse(read_text(hf / "config.json"));
  EXPECT_EQ(config["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(config["model_type"], "qwen3");
  EXPECT_EQ(config["head_dim"], 8);
  EXPECT_EQ(config["attention_bias"], false);
  const RunResult a = to_mcore(hf, tmp_ / "ckpt", "to_mcore");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  EXPECT_TRUE(contains(a.out, "Qwen3ForCausalLM, 2 layers, hidden 16")) << a.out;
  EXPECT_TRUE(contains(a.out, "head dim 8")) << a.out;
  const auto ckpt = checkpoint::CheckpointReader::open(pfs_, (tmp_ / "ckpt").string());
  const nlohmann::json state = nlohmann::json::parse(ckpt.state_json());
  EXPECT_EQ(state["model"]["qk_layernorm"], true);
  EXPECT_EQ(state["model"]["add_qkv_bias"], false);
  EXPECT_EQ(state["model"]["kv_channels"], 8);
  EXPECT_EQ(ckpt.global_shape("decoder.layers.1.self_attention.q_layernorm.weight"), (Shape{8}));
  EXPECT_EQ(ckpt.global_shape("decoder.layers.0.self_attention.k_layernorm.weight"), (Shape{8}));
  EXPECT_EQ(ckpt.global_shape("decoder.layers.0.self_attention.linear_qkv.weight"), (Shape{64, 16}));
  EXPECT_EQ(ckpt.global_shape("decoder.layers.0.self_attention.linear_proj.weight"), (Shape{16, 32}));

  const RunResult b =
      run({"export", "--to_hf", "--load", (tmp_ / "ckpt").string(), "--output_dir", (tmp_ / "back").string()}, "to_hf");
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  for (const char* f : {"config.json", "model.safetensors"})
    EXPECT_EQ(read_text(tmp_ / "back" / f), read_text(hf / f)) << f;
}

// A checkpoint written by training (the demo pt run) goes to HF and back: the HF
// tensors are the checkpoint's, and a second round trip reproduces the files.
TEST_F(Export, ATrainedCheckpointRoundTrips) {
  const fs::path run_dir = tmp_ / "run", hf = tmp_ / "hf", ckpt = tmp_ / "ckpt", hf2 = tmp_ / "hf2";
  const RunResult t = run(demo_pt_args(3, run_dir), "train");
  ASSERT_EQ(t.exit_code, 0) << t.describe();
  const RunResult a = run({"export", "--to_hf", "--load", run_dir.string(), "--output_dir", hf.string()}, "to_hf");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  EXPECT_TRUE(contains(a.out, "at iteration       3")) << a.out;
  EXPECT_TRUE(contains(a.out, "Qwen2ForCausalLM, 4 layers, hidden 256")) << a.out;
  const nlohmann::json config = nlohmann::json::parse(read_text(hf / "config.json"));
  EXPECT_EQ(config["rms_norm_eps"], 1e-6);  // the demo's eps, not its fp32 widening
  EXPECT_EQ(config["torch_dtype"], "float32");

  const auto saved = checkpoint::CheckpointReader::open(pfs_, run_dir.string());
  const auto back =
      checkpoint::HfModelReader::open(pfs_, hf.string(), saved.global_shape("embedding.word_embeddings.weight")[0]);
  int compared = 0;
  for (const std::string& name : saved.names()) {
    if (name.rfind("optimizer.", 0) == 0) continue;
    const Shape g = saved.global_shape(name);
    std::vector<float> want(static_cast<size_t>(shape_numel(g)));
    saved.read_block(name, std::vector<int64_t>(g.size(), 0), g, want.data());
    EXPECT_TRUE(checkpoint::testing::same_bits(back.read_full(name), want)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(back.names().size()));

  ASSERT_EQ(to_mcore(hf, ckpt, "to_mcore").exit_code, 0);
  ASSERT_EQ(run({"export", "--to_hf", "--load", ckpt.string(), "--output_dir", hf2.string()}, "again").exit_code, 0);
  for (const char* f : {"config.json", "model.safetensors"}) EXPECT_EQ(read_text(hf2 / f), read_text(hf / f)) << f;
}

// A trained model exported to HF and started from with `--model` gives the
// loss the checkpoint itself gives on the same first batch (bit for bit), on
// one device and under TP=2 x PP=2 (within split-reduction rounding).
TEST_F(Export, ExportedModelGivesTheCheckpointsLossOnTheSameBatch) {
  const fs::path run_dir = tmp_ / "run", hf = tmp_ / "hf";
  ASSERT_EQ(run(checkpoint_job(run_dir, "--train_iters 10"), "train").exit_code, 0);
  ASSERT_EQ(run({"export", "--to_hf", "--load", run_dir.string(), "--output_dir", hf.string()}, "to_hf").exit_code, 0);
  const RunResult a =
      run(checkpoint_job(tmp_ / "a", "--train_iters 1 --finetune --load " + run_dir.string()), "from_checkpoint");
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  const std::string from_hf = "--train_iters 1 --tokenizer configs/demo/tokenizer.json --model " + hf.string();
  const RunResult b = run(checkpoint_job(tmp_ / "b", from_hf), "from_hf");
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  EXPECT_TRUE(contains(b.out, "successfully loaded Hugging Face weights from " + hf.string())) << b.out;
  const RunResult c = run(checkpoint_job(tmp_ / "c", from_hf + " --tensor_model_parallel_size 2 "
                                                               "--pipeline_model_parallel_size 2"),
                          "from_hf_tp2pp2", launch_ranks(4));
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  const double fresh = train_rows(run_dir).front().at("loss").get<double>();
  const double la = train_rows(tmp_ / "a").front().at("loss").get<double>();
  const double lb = train_rows(tmp_ / "b").front().at("loss").get<double>();
  const double lc = train_rows(tmp_ / "c").front().at("loss").get<double>();
  EXPECT_LT(la, fresh - 0.3) << "the trained weights were loaded";
  EXPECT_EQ(la, lb);
  EXPECT_LE(std::abs(la - lc) / la, 1e-6) << la << " vs " << lc;
  // A converted (weights-only) checkpoint is for --finetune; resuming it says so.
  ASSERT_EQ(run({"export", "--to_mcore", "--model", hf.string(), "--output_dir", (tmp_ / "m").string()}, "to_mcore")
                .exit_code,
            0);
  const RunResult d = run(checkpoint_job(tmp_ / "d", "--load " + (tmp_ / "m").string()), "resume_weights");
  EXPECT_EQ(d.exit_code, 5) << d.describe();
  EXPECT_TRUE(contains(d.err, "holds weights only")) << d.err;
  EXPECT_TRUE(contains(d.err, "--finetune")) << d.err;
}

TEST_F(Export, BadModelDirectoryExits5NamingTheTensor) {
  const fs::path hf = write_hf("hf_missing", [](auto& ts) {
    ts.erase(
        std::find_if(ts.begin(), ts.end(), [](auto& t) { return t.name == "model.layers.1.self_attn.v_proj.bias"; }));
  });
  const RunResult r = to_mcore(hf, tmp_ / "ckpt", "missing");
  EXPECT_EQ(r.exit_code, 5) << r.describe();
  EXPECT_TRUE(contains(r.err, "tensor 'model.layers.1.self_attn.v_proj.bias' is missing")) << r.err;
  EXPECT_FALSE(fs::exists(tmp_ / "ckpt"));

  const fs::path extra = write_hf("hf_extra", [](auto& ts) { ts.push_back({"model.layers.0.mlp.bias", {2}, {1, 2}}); });
  const RunResult e = to_mcore(extra, tmp_ / "ckpt", "extra");
  EXPECT_EQ(e.exit_code, 5) << e.describe();
  EXPECT_TRUE(contains(e.err, "unexpected tensor 'model.layers.0.mlp.bias'")) << e.err;
  EXPECT_TRUE(contains(e.err, (extra / "model.safetensors").string())) << e.err;

  const RunResult none = to_mcore(tmp_ / "nowhere", tmp_ / "ckpt", "nowhere");
  EXPECT_EQ(none.exit_code, 5) << none.describe();
  EXPECT_TRUE(contains(none.err, "no config.json")) << none.err;
}

TEST_F(Export, CheckpointProblemsExit5) {
  const fs::path hf = write_hf();
  ASSERT_EQ(to_mcore(hf, tmp_ / "ckpt", "to_mcore").exit_code, 0);
  // A non-empty output directory is never written into.
  const RunResult busy = to_mcore(hf, tmp_ / "ckpt", "busy");
  EXPECT_EQ(busy.exit_code, 5) << busy.describe();
  EXPECT_TRUE(contains(busy.err, "is not empty")) << busy.err;
  const RunResult step = run({"export", "--to_hf", "--load", (tmp_ / "ckpt").string(), "--output_dir",
                              (tmp_ / "out").string(), "--ckpt_step", "5"},
                             "step");
  EXPECT_EQ(step.exit_code, 5) << step.describe();
  EXPECT_TRUE(contains(step.err, "iter_0000005")) << step.err;
  const RunResult missing =
      run({"export", "--to_hf", "--load", (tmp_ / "none").string(), "--output_dir", (tmp_ / "out").string()}, "none");
  EXPECT_EQ(missing.exit_code, 5) << missing.describe();
  EXPECT_TRUE(contains(missing.err, "latest_checkpointed_iteration.txt")) << missing.err;
  EXPECT_FALSE(fs::exists(tmp_ / "out"));
}

// A checkpoint whose model HF Llama/Qwen2 cannot express, or that records no model, is refused.
TEST_F(Export, UnexportableCheckpointsExit5NamingTheReason) {
  const auto save = [&](const std::string& name, const nlohmann::json& state) {
    const std::vector<float> w(16, 1.0f);
    parallel::SelfComm world;
    checkpoint::save_checkpoint(pfs_, world, (tmp_ / name).string(), 1,
                                {{"decoder.final_layernorm.weight", {16}, {0}, {16}, w.data()}}, state.dump());
    return run(
        {"export", "--to_hf", "--load", (tmp_ / name).string(), "--output_dir", (tmp_ / (name + "_hf")).string()},
        name);
  };
  checkpoint::ModelMeta m = checkpoint::meta_from_hf_shape(tiny_hf_shape(HfArch::kLlama, false));
  m.normalization = "LayerNorm";
  const RunResult ln = save("layernorm", {{"iteration", 1}, {"model", checkpoint::model_meta_to_json(m)}});
  EXPECT_EQ(ln.exit_code, 5) << ln.describe();
  EXPECT_TRUE(contains(ln.err, "the checkpoint's model has normalization LayerNorm")) << ln.err;
  const RunResult none = save("no_model", {{"iteration", 1}});
  EXPECT_EQ(none.exit_code, 5) << none.describe();
  EXPECT_TRUE(contains(none.err, "the checkpoint records no model shape")) << none.err;
  const RunResult partial = save("partial", {{"iteration", 1},
                                             {"model", checkpoint::model_meta_to_json(checkpoint::meta_from_hf_shape(
                                                           tiny_hf_shape(HfArch::kLlama, false)))}});
  EXPECT_EQ(partial.exit_code, 5) << partial.describe();
  EXPECT_TRUE(contains(partial.err, "tensor embedding.word_embeddings.weight is missing")) << partial.err;
  EXPECT_FALSE(fs::exists(tmp_ / "partial_hf"));
}

TEST_F(Export, BadOptionsExit2) {
  const auto usage_error = [&](const std::vector<std::string>& args, const std::string& tag) {
    const RunResult r = run(concat({"export"}, args), tag);
    EXPECT_EQ(r.exit_code, 2) << tag << ": " << r.describe();
    return r.err;
  };
  EXPECT_TRUE(contains(usage_error({"--to_hff", "--load", "x", "--output_dir", "y"}, "typo"),
                       "unknown option --to_hff for mtrain export; did you mean --to_hf?"));
  EXPECT_TRUE(contains(usage_error({"--load", "x", "--output_dir", "y"}, "direction"), "--to_hf or --to_mcore"));
  EXPECT_TRUE(
      contains(usage_error({"--to_hf", "--to_mcore", "--model", "x", "--output_dir", "y"}, "both"), "not both"));
  EXPECT_TRUE(contains(usage_error({"--to_mcore", "--model", "x", "--output_dir", "y", "--ckpt_step", "3"}, "unused"),
                       "--ckpt_step does not apply to --to_mcore"));
  EXPECT_TRUE(contains(usage_error({"--to_hf", "--load", "x"}, "no_out"), "--output_dir is required"));
  EXPECT_TRUE(contains(usage_error({"--to_peft", "--load", "x", "--output_dir", "y", "--merge_lora"}, "peft_merge"),
                       "--merge_lora does not apply to --to_peft"));
  EXPECT_TRUE(contains(usage_error({"--to_hf", "--load", "x", "--output_dir", "y", "--adapters", "z"}, "no_merge"),
                       "--adapter_load needs --merge_lora true"));
  EXPECT_TRUE(contains(usage_error({"--to_hf", "--load", "x", "--output_dir", "y", "--torch_dtype", "int8"}, "dtype"),
                       "--torch_dtype int8"));
  EXPECT_TRUE(contains(usage_error({"--to_hf", "--load", "x", "--output_dir", "y", "--max_shard_size", "5XB"}, "size"),
                       "max_shard_size: '5XB' is not a size"));
  const RunResult help = run({"export", "--help"}, "help");
  EXPECT_EQ(help.exit_code, 0) << help.describe();
  EXPECT_TRUE(contains(help.out, "usage: mtrain export --to_hf --load CKPT")) << help.out;
  const RunResult top = run({"--help"}, "top_help");
  EXPECT_TRUE(contains(top.out, "export")) << top.out;
}

}  // namespace
}  // namespace mtrain::functional
