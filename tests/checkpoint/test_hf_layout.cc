// HF interoperability without files: QKV and gate/up layouts (hand-built
// expectations and bit-exact round trips), the name mapping for every
// parameter of small models, config.json round trips and refusals, and the
// sharded index.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_layout.h"
#include "common/errors.h"
#include "hf_dir_test_util.h"

namespace mtrain::checkpoint {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

using testing::same_bits;

// The CheckpointError/ConfigError text (message + hint) of f; fails the test when f does not throw.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

// 50 HF vocabulary rows padded to 64 in mtrain.
HfModelShape tiny_shape(HfArch arch, bool tied, int64_t heads = 4, int64_t groups = 2) {
  HfModelShape s = testing::tiny_hf_shape(arch, tied, heads, groups);
  s.padded_vocab = 64;
  return s;
}

// ---- QKV and gate/up layouts --------------------------------------------------------------------

TEST(HfQkv, TinyGqaExampleByHand) {
  // heads 4, groups 2, head_dim 1, one column: fused rows are [q0 q1 k0 v0 | q2 q3 k1 v1].
  const std::vector<float> fused = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<float> q(4), k(2), v(2);
  qkv_to_hf(q.data(), k.data(), v.data(), fused.data(), 4, 2, 1, 1);
  EXPECT_EQ(q, (std::vector<float>{0, 1, 4, 5}));
  EXPECT_EQ(k, (std::vector<float>{2, 6}));
  EXPECT_EQ(v, (std::vector<float>{3, 7}));
  // heads 6, one group: [q0..q5 k0 v0].
  const std::vector<float> mqa = {10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<float> q6(6), k1(1), v1(1);
  qkv_to_hf(q6.data(), k1.data(), v1.data(), mqa.data(), 6, 1, 1, 1);
  EXPECT_EQ(q6, (std::vector<float>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(k1[0], 16);
  EXPECT_EQ(v1[0], 17);
}

// Every element of q_proj row block h (rows h*D .. h*D+D-1) is the fused row
// of query head h: group g = h / R, slot r = h % R, fused row (g*(R+2) + r)*D + d.
TEST(HfQkv, HeadBlocksComeFromTheirGroup) {
  for (const auto& [H, G] : std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {8, 8}, {6, 1}, {6, 3}}) {
    const int64_t D = 3, C = 5, R = H / G;
    const std::vector<float> fused = random_floats(static_cast<size_t>(G * (R + 2) * D * C), 7);
    std::vector<float> q(H * D * C), k(G * D * C), v(G * D * C);
    qkv_to_hf(q.data(), k.data(), v.data(), fused.data(), H, G, D, C);
    auto fused_at = [&](int64_t row, int64_t c) { return fused[row * C + c]; };
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(q[(h * D + d) * C + c], fused_at(((h / R) * (R + 2) + h % R) * D + d, c)) << H << "/" << G;
    for (int64_t g = 0; g < G; ++g)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t c = 0; c < C; ++c) {
          ASSERT_EQ(k[(g * D + d) * C + c], fused_at((g * (R + 2) + R) * D + d, c));
          ASSERT_EQ(v[(g * D + d) * C + c], fused_at((g * (R + 2) + R + 1) * D + d, c));
        }
  }
}

TEST(HfQkv, WeightAndBiasRoundTripsAreBitExact) {
  for (const auto& [H, G] : std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {8, 8}, {6, 1}}) {
    const HfModelShape s = tiny_shape(HfArch::kQwen2, false, H, G);
    for (const char* name :
         {"decoder.layers.1.self_attention.linear_qkv.weight", "decoder.layers.1.self_attention.linear_qkv.bias"}) {
      const HfTensorMap m = hf_map_for_mcore(name, s);
      ASSERT_EQ(m.transform, HfTransform::kQkvSplit);
      const std::vector<float> fused = random_floats(static_cast<size_t>(shape_numel(m.mcore_shape)), 11);
      const auto parts = tensor_to_hf(m, fused);
      ASSERT_EQ(parts.size(), 3u);
      EXPECT_EQ(static_cast<int64_t>(parts[0].size()), H * s.head_dim * (m.mcore_shape.size() == 2 ? s.hidden : 1));
      const std::vector<float> back = tensor_from_hf(m, {parts[0], parts[1], parts[2]});
      EXPECT_TRUE(same_bits(back, fused)) << name << " H=" << H << " G=" << G;
    }
  }
}

TEST(HfGateUp, SplitByHandAndRoundTrip) {
  // F = 2, 3 columns: fc1 rows 0-1 are gate, rows 2-3 are up.
  std::vector<float> fc1(12);
  for (size_t i = 0; i < fc1.size(); ++i) fc1[i] = static_cast<float>(i);
  std::vector<float> gate(6), up(6);
  gate_up_to_hf(gate.data(), up.data(), fc1.data(), 2, 3);
  EXPECT_EQ(gate, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(up, (std::vector<float>{6, 7, 8, 9, 10, 11}));

  const HfModelShape s = tiny_shape(HfArch::kLlama, false);
  const HfTensorMap m = hf_map_for_mcore("decoder.layers.0.mlp.linear_fc1.weight", s);
  EXPECT_EQ(m.hf_names,
            (std::vector<std::string>{"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"}));
  const std::vector<float> w = random_floats(static_cast<size_t>(2 * s.ffn * s.hidden), 3);
  const auto parts = tensor_to_hf(m, w);
  EXPECT_TRUE(same_bits(parts[0], std::vector<float>(w.begin(), w.begin() + s.ffn * s.hidden)));
  EXPECT_TRUE(same_bits(tensor_from_hf(m, {parts[0], parts[1]}), w));
}

TEST(HfVocab, ExportDropsPaddingRowsImportZeroFills) {
  const HfModelShape s = tiny_shape(HfArch::kLlama, false);  // 50 rows in HF, 64 in mtrain
  const HfTensorMap m = hf_map_for_mcore("output_layer.weight", s);
  EXPECT_EQ(m.mcore_shape, (Shape{64, s.hidden}));
  EXPECT_EQ(m.hf_shapes[0], (Shape{50, s.hidden}));
  const std::vector<float> w = random_floats(static_cast<size_t>(64 * s.hidden), 5);
  const auto parts = tensor_to_hf(m, w);
  ASSERT_EQ(parts[0].size(), static_cast<size_t>(50 * s.hidden));
  const std::vector<float> back = tensor_from_hf(m, {parts[0]});
  for (int64_t i = 0; i < 64 * s.hidden; ++i) ASSERT_EQ(back[i], i < 50 * s.hidden ? w[i] : 0.0f) << i;
  EXPECT_NE(error_of([&] { tensor_to_hf(m, std::vector<float>(10)); }).find("output_layer.weight"), std::string::npos);
  EXPECT_NE(error_of([&] {
              check_hf_shape(m, 0, {s.hidden, 50}, "model.safetensors");
            }).find("model.safetensors: tensor 'lm_head.weight' has shape [16, 50], expected [50, 16]"),
            std::string::npos);
}

// ---- Names --------------------------------------------------------------------------------------

// mtrain's parameter names of a 2-layer model (written out as gpt.cc registers them) and the HF
// names they must become, independently of the mapping table.
std::vector<std::string> mcore_names(bool qkv_bias, bool tied) {
  std::vector<std::string> out{"embedding.word_embeddings.weight"};
  for (const char* l : {"0", "1"}) {
    const std::string p = std::string("decoder.layers.") + l + ".";
    out.push_back(p + "input_layernorm.weight");
    out.push_back(p + "self_attention.linear_qkv.weight");
    if (qkv_bias) out.push_back(p + "self_attention.linear_qkv.bias");
    for (const char* t : {"self_attention.linear_proj.weight", "pre_mlp_layernorm.weight", "mlp.linear_fc1.weight",
                          "mlp.linear_fc2.weight"})
      out.push_back(p + t);
  }
  out.push_back("decoder.final_layernorm.weight");
  if (!tied) out.push_back("output_layer.weight");
  return out;
}

std::set<std::string> hf_names(bool qkv_bias, bool tied) {
  std::set<std::string> out{"model.embed_tokens.weight", "model.norm.weight"};
  if (!tied) out.insert("lm_head.weight");
  for (const char* l : {"0", "1"}) {
    const std::string p = std::string("model.layers.") + l + ".";
    for (const char* t : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      out.insert(p + t);
    if (qkv_bias)
      for (const char* t : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"})
        out.insert(p + t);
  }
  return out;
}

TEST(HfNames, EveryParameterRoundTrips) {
  for (HfArch arch : {HfArch::kLlama, HfArch::kQwen2}) {
    for (bool tied : {false, true}) {
      SCOPED_TRACE(std::string(hf_arch_class(arch)) + (tied ? " tied" : " untied"));
      const HfModelShape s = tiny_shape(arch, tied);
      const bool bias = arch == HfArch::kQwen2;
      std::set<std::string> produced;
      for (const std::string& name : mcore_names(bias, tied)) {
        const HfTensorMap m = hf_map_for_mcore(name, s);
        EXPECT_EQ(m.mcore_name, name);
        EXPECT_FALSE(m.tied_copy);
        for (size_t i = 0; i < m.hf_names.size(); ++i) {
          EXPECT_TRUE(produced.insert(m.hf_names[i]).second) << m.hf_names[i];
          const auto src = hf_source_for(m.hf_names[i], s);
          ASSERT_TRUE(src.has_value()) << m.hf_names[i];
          EXPECT_EQ(src->mcore_name, name);
          EXPECT_EQ(src->part, static_cast<int>(i));
        }
      }
      EXPECT_EQ(produced, hf_names(bias, tied));
      // The model-wide list holds the same tensors, in HF order.
      std::vector<std::string> listed;
      for (const HfTensorMap& m : hf_tensor_maps(s)) listed.push_back(m.mcore_name);
      EXPECT_EQ(listed, mcore_names(bias, tied));
    }
  }
}

TEST(HfNames, TiedEmbeddingsHaveNoLmHead) {
  const HfModelShape s = tiny_shape(HfArch::kQwen2, true);
  // The last pipeline stage's copy of the embeddings is filled from embed_tokens and never written.
  const HfTensorMap copy = hf_map_for_mcore("output_layer.weight", s);
  EXPECT_TRUE(copy.tied_copy);
  EXPECT_EQ(copy.hf_names, (std::vector<std::string>{"model.embed_tokens.weight"}));
  EXPECT_FALSE(hf_source_for("lm_head.weight", s).has_value());
  EXPECT_FALSE(hf_source_for("model.layers.1.self_attn.rotary_emb.inv_freq", s).has_value());
  for (const HfTensorMap& m : hf_tensor_maps(s))
    for (const std::string& n : m.hf_names) EXPECT_NE(n, "lm_head.weight");
}

TEST(HfNames, UnknownTensorsAreErrorsNamingThem) {
  const HfModelShape llama = tiny_shape(HfArch::kLlama, false);
  for (const std::string name :
       {"decoder.layers.0.self_attention.linear_qkv.bias", "decoder.layers.0.mlp.router.weight",
        "embedding.position_embeddings.weight", "decoder.layers.x.input_layernorm.weight"})
    EXPECT_NE(error_of([&] { hf_map_for_mcore(name, llama); }).find("'" + name + "'"), std::string::npos) << name;
  EXPECT_NE(error_of([&] {
              hf_map_for_mcore("decoder.layers.2.input_layernorm.weight", llama);
            }).find("layer 2, but the model has 2 layers"),
            std::string::npos);
  for (const std::string name : {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.mlp.experts.weight",
                                 "model.layers.01.input_layernorm.weight", "transformer.wte.weight"})
    EXPECT_NE(error_of([&] { hf_source_for(name, llama); }).find("unexpected tensor '" + name + "'"), std::string::npos)
        << name;
}

// ---- config.json --------------------------------------------------------------------------------

TEST(HfConfig, RoundTripsBothArchitectures) {
  for (HfArch arch : {HfArch::kLlama, HfArch::kQwen2}) {
    HfModelShape s = tiny_shape(arch, arch == HfArch::kQwen2, 4, 2);
    s.padded_vocab = 0;
    s.dtype = DType::kBF16;
    s.eos_token_id = 7;
    const std::string text = hf_config_json(s);
    const nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_EQ(j["architectures"][0], hf_arch_class(arch));
    EXPECT_EQ(j["torch_dtype"], "bfloat16");
    EXPECT_EQ(j["num_key_value_heads"], 2);
    const HfModelShape p = parse_hf_config(text);
    EXPECT_EQ(p.arch, s.arch);
    EXPECT_EQ(std::tie(p.num_layers, p.hidden, p.ffn, p.heads, p.groups, p.head_dim, p.vocab_size, p.max_positions),
              std::tie(s.num_layers, s.hidden, s.ffn, s.heads, s.groups, s.head_dim, s.vocab_size, s.max_positions));
    EXPECT_EQ(p.rms_norm_eps, s.rms_norm_eps);
    EXPECT_EQ(p.rope_theta, s.rope_theta);
    EXPECT_EQ(p.tie_word_embeddings, s.tie_word_embeddings);
    EXPECT_EQ(p.dtype, DType::kBF16);
    EXPECT_EQ(p.eos_token_id, std::optional<int64_t>(7));
    EXPECT_FALSE(p.bos_token_id.has_value());
  }
}

// The fields of Qwen/Qwen2.5-0.5B's config.json (typed here, not copied).
const char* kQwenConfig = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
  "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14, "num_key_value_heads": 2,
  "num_hidden_layers": 24, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "rope_scaling": null, "sliding_window": 32768, "use_sliding_window": false, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151643})";

TEST(HfConfig, ParsesAQwenConfigWithDefaults) {
  const HfModelShape s = parse_hf_config(kQwenConfig);
  EXPECT_EQ(s.arch, HfArch::kQwen2);
  EXPECT_EQ(s.head_dim, 64);  // 896 / 14
  EXPECT_EQ(s.qkv_rows(), 896 + 2 * 128);
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_EQ(s.rope_theta, 1e6);
  // Without num_key_value_heads, torch_dtype and rope_theta: MHA, float32, 10000 (transformers' defaults).
  nlohmann::json j = nlohmann::json::parse(kQwenConfig);
  for (const char* key : {"num_key_value_heads", "torch_dtype", "rope_theta"}) j.erase(key);
  j["dtype"] = "float16";  // transformers >= 4.56 spelling
  const HfModelShape d = parse_hf_config(j.dump());
  EXPECT_EQ(d.groups, 14);
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_EQ(d.dtype, DType::kF16);
}

TEST(HfConfig, BadConfigsNameTheField) {
  auto edited = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(kQwenConfig);
    edit(j);
    return error_of([&] { parse_hf_config(j.dump(), "/models/q/config.json"); });
  };
  EXPECT_NE(edited([](auto& j) { j.erase("hidden_size"); }).find("/models/q/config.json: missing field 'hidden_size'"),
            std::string::npos);
  const std::string arch = edited([](auto& j) { j["architectures"] = {"MistralForCausalLM"}; });
  EXPECT_NE(arch.find("unsupported architecture 'MistralForCausalLM' in field 'architectures'"), std::string::npos);
  EXPECT_NE(arch.find("LlamaForCausalLM, Qwen2ForCausalLM"), std::string::npos);
  const std::string gqa = edited([](auto& j) { j["num_key_value_heads"] = 4; });  // 14 heads
  EXPECT_NE(gqa.find("field 'num_key_value_heads' (4) must divide num_attention_heads (14)"), std::string::npos);
  EXPECT_NE(
      edited([](auto& j) { j["intermediate_size"] = "4864"; }).find("field 'intermediate_size' must be an integer"),
      std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["num_hidden_layers"] = 0; }).find("num_hidden_layers"), std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["torch_dtype"] = "int8"; }).find("unsupported torch_dtype \"int8\""),
            std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["rope_scaling"] = {{"type", "yarn"}}; }).find("rope_scaling"), std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["use_sliding_window"] = true; }).find("use_sliding_window"), std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["hidden_act"] = "gelu"; }).find("hidden_act"), std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["model_type"] = "llama"; }).find("model_type"), std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["head_dim"] = 128; }).find("field 'head_dim' (128)"), std::string::npos);
  EXPECT_NE(edited([](auto& j) {
              j["architectures"] = {"LlamaForCausalLM"};
              j["model_type"] = "llama";
              j["attention_bias"] = true;
            }).find("attention_bias"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hf_config("{\"architectures\": ", "c.json"); }).find("c.json: not valid JSON"),
            std::string::npos);
}

// ---- Sharded index ------------------------------------------------------------------------------

TEST(HfIndex, GreedyShardsAndIndexJson) {
  const HfShardPlan plan = plan_hf_shards({{"a", 40}, {"b", 40}, {"c", 30}, {"d", 150}, {"e", 10}}, 100);
  EXPECT_EQ(plan.files,
            (std::vector<std::string>{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                      "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"}));
  EXPECT_EQ(plan.tensors, (std::vector<std::vector<std::string>>{{"a", "b"}, {"c"}, {"d"}, {"e"}}));
  EXPECT_EQ(plan.total_size, 270);
  const nlohmann::json j = nlohmann::json::parse(hf_index_json(plan));
  EXPECT_EQ(j["metadata"]["total_size"], 270);
  EXPECT_EQ(j["weight_map"].size(), 5u);
  EXPECT_EQ(j["weight_map"]["c"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(parse_hf_index(hf_index_json(plan)), plan.weight_map);

  const HfShardPlan one = plan_hf_shards({{"a", 40}, {"b", 60}}, 100);
  EXPECT_EQ(one.files, (std::vector<std::string>{"model.safetensors"}));
  EXPECT_NE(error_of([] { plan_hf_shards({{"a", 1}, {"a", 1}}, 10); }).find("'a' is listed twice"), std::string::npos);
}

TEST(HfIndex, UntrustedIndexAndShardSizes) {
  const std::string bad = R"({"metadata": {}, "weight_map": {"model.norm.weight": "../../etc/passwd.safetensors"}})";
  EXPECT_NE(error_of([&] { parse_hf_index(bad, "idx.json"); }).find("idx.json: tensor 'model.norm.weight' maps to"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hf_index("{\"metadata\": {}}", "idx.json"); }).find("weight_map"), std::string::npos);
  EXPECT_EQ(parse_shard_size("5GB"), 5'000'000'000);
  EXPECT_EQ(parse_shard_size("2GiB"), 2LL << 30);
  EXPECT_EQ(parse_shard_size("500mb"), 500'000'000);
  EXPECT_EQ(parse_shard_size("1.5KB"), 1500);
  EXPECT_EQ(parse_shard_size("4096"), 4096);
  for (const char* s : {"", "GB", "5XB", "-1GB", "0"})
    EXPECT_NE(error_of([&] { parse_shard_size(s); }).find("max_shard_size"), std::string::npos) << s;
}

}  // namespace
}  // namespace mtrain::checkpoint
