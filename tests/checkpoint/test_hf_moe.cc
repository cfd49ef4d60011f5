// Hugging Face mixture-of-experts layouts (Qwen2-MoE, Mixtral): config.json
// fields and the Megatron flags they imply (as Megatron-SWIFT's config
// conversion maps them), the MoE layer pattern of decoder_sparse_step /
// mlp_only_layers, the expert tensor names, byte-exact HF -> mtrain -> HF
// round trips of whole directories, and the checkpoints HF cannot express.
//
// transformers' names checked here (modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock:
// self.gate = Linear(C, E), self.experts[e] = Qwen2MoeMLP(gate_proj, up_proj,
// down_proj), self.shared_expert = Qwen2MoeMLP, self.shared_expert_gate =
// Linear(C, 1); Qwen2MoeDecoderLayer: MoE iff layer not in mlp_only_layers and
// (layer + 1) % decoder_sparse_step == 0. modeling_mixtral.py,
// MixtralSparseMoeBlock: self.gate, self.experts[e] = MixtralBlockSparseTop2MLP
// with w1 (gate), w3 (up), w2 (down), under model.layers.N.block_sparse_moe).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/fs_test_util.h"
#include "checkpoint/hf_model_dir.h"
#include "common/errors.h"
#include "config/hf_model_config.h"
#include "hf_dir_test_util.h"

namespace mtrain::checkpoint {
namespace {

using mtrain::testing::TempDir;
using testing::same_bits;
using testing::tiny_moe_hf_shape;
using testing::write_tiny_hf_dir;

// Qwen/Qwen1.5-MoE-A2.7B's config.json keys at a tiny size.
nlohmann::json qwen2_moe_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_act": "silu",
    "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4, "num_key_value_heads": 4,
    "num_hidden_layers": 4, "vocab_size": 50, "max_position_embeddings": 128, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_sliding_window": false, "sliding_window": 32768, "max_window_layers": 21,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "moe_intermediate_size": 8,
    "shared_expert_intermediate_size": 12, "num_experts_per_tok": 4, "num_experts": 6,
    "norm_topk_prob": false, "output_router_logits": false, "router_aux_loss_coef": 0.001})");
}

// mistralai/Mixtral-8x7B-v0.1's config.json keys at a tiny size.
nlohmann::json mixtral_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_act": "silu",
    "hidden_size": 16, "intermediate_size": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 50, "max_position_embeddings": 128, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "sliding_window": null, "num_local_experts": 8, "num_experts_per_tok": 2,
    "output_router_logits": false, "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0})");
}

std::map<std::string, std::string> implied(const config::HfConfigFields& f) {
  std::map<std::string, std::string> out;
  for (const config::HfImpliedFlag& i : config::hf_implied_flags(f)) out[i.flag] = i.value;
  return out;
}

std::string config_error(const nlohmann::json& j) {
  try {
    config::parse_hf_config_fields(j.dump());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(HfMoeConfig, Qwen2MoeFieldsMapOntoMegatronFlags) {
  const std::map<std::string, std::string> flags = implied(config::parse_hf_config_fields(qwen2_moe_config().dump()));
  EXPECT_EQ(flags.at("num_experts"), "6");
  EXPECT_EQ(flags.at("moe_ffn_hidden_size"), "8");
  EXPECT_EQ(flags.at("ffn_hidden_size"), "24");  // the dense MLP of mlp_only_layers
  EXPECT_EQ(flags.at("moe_router_topk"), "4");
  EXPECT_EQ(flags.at("moe_layer_freq"), "1");
  EXPECT_EQ(flags.at("moe_shared_expert_intermediate_size"), "12");
  EXPECT_EQ(flags.at("moe_shared_expert_gate"), "true");
  EXPECT_EQ(flags.at("moe_router_pre_softmax"), "true");  // norm_topk_prob false: softmax, top-k, no renormalising
  EXPECT_EQ(flags.at("moe_router_score_function"), "softmax");
  EXPECT_EQ(flags.at("moe_aux_loss_coeff"), "0.001");
  EXPECT_EQ(flags.at("add_qkv_bias"), "true");

  nlohmann::json j = qwen2_moe_config();
  j["norm_topk_prob"] = true;  // Qwen3-style renormalised top-k = Megatron's default
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  j["qkv_bias"] = false;  // transformers 5's key
  const config::HfConfigFields f = config::parse_hf_config_fields(j.dump());
  EXPECT_EQ(f.moe.layers, (std::vector<int>{0, 1, 0, 0}));  // (i + 1) % 2 == 0 -> 1, 3; 3 is dense
  const std::map<std::string, std::string> sparse = implied(f);
  EXPECT_EQ(sparse.at("moe_layer_freq"), "[0,1,0,0]");
  EXPECT_EQ(sparse.at("moe_router_pre_softmax"), "false");
  EXPECT_EQ(sparse.at("add_qkv_bias"), "false");
}

TEST(HfMoeConfig, MixtralFieldsMapOntoMegatronFlags) {
  const config::HfConfigFields f = config::parse_hf_config_fields(mixtral_config().dump());
  const std::map<std::string, std::string> flags = implied(f);
  EXPECT_EQ(flags.at("num_experts"), "8");  // num_local_experts
  EXPECT_EQ(flags.at("moe_ffn_hidden_size"), "8");
  EXPECT_EQ(flags.at("ffn_hidden_size"), "8");
  EXPECT_EQ(flags.at("moe_router_topk"), "2");
  EXPECT_EQ(flags.at("moe_layer_freq"), "1");
  EXPECT_EQ(flags.at("moe_shared_expert_intermediate_size"), "None");
  EXPECT_EQ(flags.at("moe_shared_expert_gate"), "false");
  EXPECT_EQ(flags.at("moe_router_pre_softmax"), "false");  // softmax, top-k, renormalised = top-k then softmax
  EXPECT_EQ(flags.at("moe_aux_loss_coeff"), "0.02");
  EXPECT_EQ(flags.at("add_qkv_bias"), "false");
}

TEST(HfMoeConfig, WhatMtrainCannotRepresentIsRefusedByName) {
  nlohmann::json j = mixtral_config();
  j["sliding_window"] = 4096;
  EXPECT_NE(config_error(j).find("field 'sliding_window' is 4096"), std::string::npos) << config_error(j);
  j = mixtral_config();
  j["router_jitter_noise"] = 0.01;
  EXPECT_NE(config_error(j).find("field 'router_jitter_noise' must be 0"), std::string::npos) << config_error(j);
  j = qwen2_moe_config();
  j["num_experts_per_tok"] = 7;
  EXPECT_NE(config_error(j).find("field 'num_experts_per_tok' (7) exceeds the number of experts (6)"),
            std::string::npos)
      << config_error(j);
  j = qwen2_moe_config();
  j["mlp_only_layers"] = {4};
  EXPECT_NE(config_error(j).find("field 'mlp_only_layers' names layer 4, but the model has 4 layers"),
            std::string::npos)
      << config_error(j);
  j = qwen2_moe_config();
  j.erase("moe_intermediate_size");
  EXPECT_NE(config_error(j).find("missing field 'moe_intermediate_size'"), std::string::npos) << config_error(j);
  j = qwen2_moe_config();
  j["use_sliding_window"] = true;
  EXPECT_NE(config_error(j).find("field 'use_sliding_window'"), std::string::npos) << config_error(j);
}

TEST(HfMoeConfig, SparseLayersAreWrittenInTheFewestMlpOnlyLayers) {
  const auto check = [](std::vector<int> layers, int64_t step, std::vector<int64_t> only) {
    const config::HfSparseLayers s = config::hf_sparse_layers(layers);
    EXPECT_EQ(s.decoder_sparse_step, step);
    EXPECT_EQ(s.mlp_only_layers, only);
  };
  check({1, 1, 1, 1}, 1, {});
  check({0, 1, 0, 1}, 2, {});
  check({1, 0, 1, 0}, 1, {1, 3});  // Megatron's --moe_layer_freq 2: layers 0 and 2
  check({0, 0, 0, 1}, 4, {});
  check({0, 1, 0, 0}, 2, {3});
}

TEST(HfMoeLayout, ExpertsRouterAndSharedExpertHaveTheirHfNames) {
  const HfModelShape q = tiny_moe_hf_shape(HfArch::kQwen2Moe);
  const auto src = [&](const HfModelShape& s, const std::string& hf) {
    const std::optional<HfSource> x = hf_source_for(hf, s);
    return x ? x->mcore_name + "#" + std::to_string(x->part) : "(none)";
  };
  EXPECT_EQ(src(q, "model.layers.0.mlp.gate.weight"), "decoder.layers.0.mlp.router.weight#0");
  EXPECT_EQ(src(q, "model.layers.0.mlp.experts.3.gate_proj.weight"),
            "decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight#0");
  EXPECT_EQ(src(q, "model.layers.0.mlp.experts.3.up_proj.weight"),
            "decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight#1");
  EXPECT_EQ(src(q, "model.layers.0.mlp.experts.2.down_proj.weight"),
            "decoder.layers.0.mlp.experts.local_experts.2.linear_fc2.weight#0");
  EXPECT_EQ(src(q, "model.layers.0.mlp.shared_expert.up_proj.weight"),
            "decoder.layers.0.mlp.shared_experts.linear_fc1.weight#1");
  EXPECT_EQ(src(q, "model.layers.0.mlp.shared_expert_gate.weight"),
            "decoder.layers.0.mlp.shared_experts.gate_weight#0");
  EXPECT_EQ(src(q, "model.layers.1.mlp.gate_proj.weight"), "decoder.layers.1.mlp.linear_fc1.weight#0");  // dense
  EXPECT_THROW(hf_source_for("model.layers.1.mlp.experts.0.gate_proj.weight", q), CheckpointError);
  EXPECT_THROW(hf_source_for("model.layers.0.mlp.gate_proj.weight", q), CheckpointError);
  EXPECT_THROW(hf_source_for("model.layers.0.mlp.experts.4.gate_proj.weight", q), CheckpointError);
  EXPECT_EQ(hf_map_for_mcore("decoder.layers.0.mlp.shared_experts.gate_weight", q).hf_shapes[0], (Shape{1, 16}));
  EXPECT_EQ(hf_map_for_mcore("decoder.layers.0.mlp.shared_experts.linear_fc1.weight", q).mcore_shape, (Shape{24, 16}));

  const HfModelShape m = tiny_moe_hf_shape(HfArch::kMixtral);
  EXPECT_EQ(src(m, "model.layers.1.block_sparse_moe.gate.weight"), "decoder.layers.1.mlp.router.weight#0");
  EXPECT_EQ(src(m, "model.layers.1.block_sparse_moe.experts.0.w1.weight"),
            "decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.weight#0");
  EXPECT_EQ(src(m, "model.layers.1.block_sparse_moe.experts.0.w3.weight"),
            "decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.weight#1");
  EXPECT_EQ(src(m, "model.layers.1.block_sparse_moe.experts.0.w2.weight"),
            "decoder.layers.1.mlp.experts.local_experts.0.linear_fc2.weight#0");
  EXPECT_THROW(hf_source_for("model.layers.1.mlp.gate.weight", m), CheckpointError);
  EXPECT_THROW(hf_map_for_mcore("decoder.layers.0.mlp.shared_experts.gate_weight", m), CheckpointError);
}

// Whole directories: HF -> mtrain tensors -> HF reproduces config.json and the
// safetensors file byte for byte; the fused fc1 of an expert is [gate; up].
TEST(HfMoeDir, RoundTripsByteForByte) {
  TempDir tmp;
  PosixFileSystem fs;
  for (const HfArch arch : {HfArch::kQwen2Moe, HfArch::kMixtral}) {
    SCOPED_TRACE(hf_arch_class(arch));
    const std::string in = tmp / (std::string(hf_model_type(arch)) + "_in");
    const std::string out = tmp / (std::string(hf_model_type(arch)) + "_out");
    const auto hf = write_tiny_hf_dir(fs, in, tiny_moe_hf_shape(arch), StDType::kBF16, 7);
    const HfModelReader r = HfModelReader::open(fs, in, 64);
    const std::string fc1 = "decoder.layers.0.mlp.experts.local_experts.2.linear_fc1.weight";
    const std::vector<float> fused = r.read_full(fc1);
    const std::string x =
        arch == HfArch::kMixtral ? "model.layers.0.block_sparse_moe.experts.2." : "model.layers.0.mlp.experts.2.";
    const auto& gate = hf.at(x + (arch == HfArch::kMixtral ? "w1.weight" : "gate_proj.weight"));
    const auto& up = hf.at(x + (arch == HfArch::kMixtral ? "w3.weight" : "up_proj.weight"));
    EXPECT_TRUE(same_bits(std::vector<float>(fused.begin(), fused.begin() + 8 * 16), gate));
    EXPECT_TRUE(same_bits(std::vector<float>(fused.begin() + 8 * 16, fused.end()), up));
    const ModelMeta meta = meta_from_hf_shape(r.shape());
    EXPECT_EQ(meta.num_experts, 4);
    EXPECT_EQ(meta.moe_router_topk, 2);
    const HfModelShape back = hf_shape_from_meta(meta);  // the checkpoint's description goes back to the same HF shape
    EXPECT_EQ(back.arch, arch);
    write_hf_model(fs, out, back, testing::fetch_from(r), int64_t{1} << 30, StDType::kBF16);
    for (const char* f : {"config.json", "model.safetensors"})
      EXPECT_EQ(fs.read_file(in + "/" + f, 1 << 24), fs.read_file(out + "/" + f, 1 << 24)) << f;
  }
}

std::string export_error(const ModelMeta& m) {
  try {
    hf_shape_from_meta(m);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "(exportable)";
}

TEST(HfMoeExport, RouterSettingsHfCannotExpressAreRefusedByName) {
  const ModelMeta qwen = meta_from_hf_shape(tiny_moe_hf_shape(HfArch::kQwen2Moe));
  const ModelMeta mixtral = meta_from_hf_shape(tiny_moe_hf_shape(HfArch::kMixtral));
  ModelMeta m = qwen;
  m.moe_router_score_function = "sigmoid";
  EXPECT_NE(export_error(m).find("moe_router_score_function sigmoid"), std::string::npos) << export_error(m);
  m = qwen;
  m.moe_router_topk_scaling_factor = 2.5;
  EXPECT_NE(export_error(m).find("moe_router_topk_scaling_factor 2.5"), std::string::npos) << export_error(m);
  m = qwen;
  m.moe_router_enable_expert_bias = true;
  EXPECT_NE(export_error(m).find("moe_router_enable_expert_bias true"), std::string::npos) << export_error(m);
  m = qwen;
  m.moe_shared_expert_gate = false;
  EXPECT_NE(export_error(m).find("a shared expert without its gate"), std::string::npos) << export_error(m);
  m = qwen;
  m.moe_router_topk.reset();
  EXPECT_NE(export_error(m).find("records no router settings (moe_router_topk)"), std::string::npos) << export_error(m);
  m = mixtral;
  m.moe_router_pre_softmax = true;
  EXPECT_NE(export_error(m).find("moe_router_pre_softmax true and no shared expert"), std::string::npos)
      << export_error(m);
  m = mixtral;
  m.moe_layers = {1, 0};
  EXPECT_NE(export_error(m).find("dense layers (moe_layer_freq [1,0]) and no shared expert"), std::string::npos)
      << export_error(m);
  m = mixtral;
  m.add_qkv_bias = true;
  EXPECT_NE(export_error(m).find("q/k/v biases and no shared expert"), std::string::npos) << export_error(m);
}

}  // namespace
}  // namespace mtrain::checkpoint
