// PEFT adapter directories (peft_adapter.h) on a tiny GQA Llama: write ->
// read is bit exact, a PEFT adapter of only some projections of a fused
// layer loads with B = 0 for the others, and what mtrain cannot represent
// (DoRA, per-module ranks, unknown targets, q/k/v with different A's, a
// rank or base shape that does not fit) is refused naming the file and the
// field or tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "../common/fs_test_util.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint/safetensors.h"
#include "common/atomic_file.h"
#include "common/errors.h"
#include "common/rng.h"
#include "hf_dir_test_util.h"

namespace mtrain::checkpoint {
namespace {

using mtrain::testing::TempDir;
using Tensors = std::map<std::string, std::vector<float>>;

constexpr int64_t kRank = 2;

// Random adapters on every linear of both layers plus the embedding (modules_to_save).
Tensors random_adapters(const HfModelShape& s) {
  Rng rng(7);
  Tensors t;
  std::vector<std::string> names = {"embedding.word_embeddings.weight"};
  for (int layer = 0; layer < 2; ++layer)
    for (const char* lin :
         {"self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2"})
      for (const char* ab : {".lora_A.weight", ".lora_B.weight"})
        names.push_back("decoder.layers." + std::to_string(layer) + "." + lin + ab);
  for (const std::string& n : names) {
    std::vector<float>& v = t[n];
    v.resize(static_cast<size_t>(shape_numel(peft_map_for_mcore(n, s, kRank).hf.mcore_shape)));
    for (float& x : v) x = static_cast<float>(rng.normal());
  }
  auto& emb = t["embedding.word_embeddings.weight"];  // padding rows are not exported: keep them zero
  std::fill(emb.begin() + s.vocab_size * s.hidden, emb.end(), 0.f);
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class PeftAdapterDir : public ::testing::Test {
 protected:
  void SetUp() override {
    shape_ = testing::tiny_hf_shape(HfArch::kLlama, false, 4, 2);
    shape_.padded_vocab = 56;
    tensors_ = random_adapters(shape_);
    PeftLoraConfig c;
    c.r = kRank;
    c.lora_alpha = 4;
    write_peft_adapter(fs_, dir(), shape_, c, tensors_);
  }
  std::string dir() const { return tmp_ / "peft"; }
  // Rewrites adapter_config.json with `edit` applied.
  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(fs_.read_file(dir() + "/" + kPeftConfigFile, 1 << 20));
    edit(j);
    write_file_atomic(fs_, dir() + "/" + kPeftConfigFile, j.dump(), kDefaultFileMode);
  }
  // Rewrites adapter_model.safetensors: edit(name, values) returns false to drop a tensor.
  void edit_tensors(const std::function<bool(const std::string&, std::vector<float>&)>& edit) {
    const std::string path = dir() + "/" + kPeftWeightsFile;
    std::vector<std::pair<TensorInfo, std::vector<float>>> kept;
    {
      const SafetensorsFile f = SafetensorsFile::open(fs_, path);
      for (const TensorInfo& t : f.tensors()) {
        std::vector<float> v(static_cast<size_t>(t.numel));
        f.read_f32(t, v);
        if (edit(t.name, v)) kept.emplace_back(t, std::move(v));
      }
    }
    std::vector<TensorToWrite> out;
    for (const auto& [t, v] : kept) out.push_back(TensorToWrite::from_f32(t.name, t.shape, v.data()));
    write_safetensors(fs_, path, out);
  }
  // The CheckpointError message read_peft_adapter throws ("" if none).
  std::string read_error() {
    try {
      read_peft_adapter(fs_, dir(), shape_);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  }

  TempDir tmp_;
  PosixFileSystem fs_;
  HfModelShape shape_;
  Tensors tensors_;
};

TEST_F(PeftAdapterDir, WriteThenReadIsBitExact) {
  const PeftAdapter a = read_peft_adapter(fs_, dir(), shape_);
  EXPECT_EQ(a.config.r, kRank);
  EXPECT_EQ(a.config.lora_alpha, 4);
  EXPECT_EQ(a.config.modules_to_save, std::vector<std::string>{"embed_tokens"});
  ASSERT_EQ(a.tensors.size(), tensors_.size());
  for (const auto& [name, v] : tensors_) EXPECT_TRUE(same_bits(a.tensors.at(name), v)) << name;
}

// PEFT's default Llama targets are q_proj and v_proj: k's rows of the fused B
// are zero (no delta), the fused A is theirs (equal here).
TEST_F(PeftAdapterDir, MissingProjectionsOfAFusedLayerGetZeroB) {
  edit_tensors([](const std::string& n, std::vector<float>&) { return n.find("k_proj") == std::string::npos; });
  const PeftAdapter a = read_peft_adapter(fs_, dir(), shape_);
  const std::string qkv = "decoder.layers.1.self_attention.linear_qkv.";
  EXPECT_TRUE(same_bits(a.tensors.at(qkv + "lora_A.weight"), tensors_.at(qkv + "lora_A.weight")));
  const std::vector<float>& b = a.tensors.at(qkv + "lora_B.weight");
  const std::vector<float>& want = tensors_.at(qkv + "lora_B.weight");
  // Per group g (R = 2 query heads, D = 4): rows [q q k v] x 4; k is rows 8..11 of each 16.
  for (int64_t row = 0; row < 32; ++row)
    for (int64_t k = 0; k < kRank; ++k) {
      const bool is_k = row % 16 >= 8 && row % 16 < 12;
      EXPECT_EQ(b[row * kRank + k], is_k ? 0.f : want[row * kRank + k]) << row;
    }
}

TEST_F(PeftAdapterDir, DifferentAsOfAFusedLayerAreRefused) {
  edit_tensors([](const std::string& n, std::vector<float>& v) {
    if (n == "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight") v[3] += 1.f;
    return true;
  });
  const std::string err = read_error();
  EXPECT_NE(err.find("adapter_model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("'base_model.model.model.layers.0.mlp.up_proj.lora_A.weight' differs"), std::string::npos) << err;
  EXPECT_NE(err.find("shares one lora_A"), std::string::npos) << err;
}

TEST_F(PeftAdapterDir, UnrepresentableConfigsAreRefusedNamingTheField) {
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"use_dora", true},
      {"rank_pattern", {{"q_proj", 8}}},
      {"alpha_pattern", {{"v_proj", 16}}},
      {"peft_type", "LOHA"},
      {"fan_in_fan_out", true},
      {"target_modules", {"q_proj", "embed_tokens"}},
      {"modules_to_save", {"score"}},
  };
  for (const auto& [key, value] : cases) {
    fs_.remove_all(dir());
    SetUp();  // a fresh directory
    edit_config([&](nlohmann::json& j) { j[key] = value; });
    const std::string err = read_error();
    EXPECT_NE(err.find("adapter_config.json: \"" + key + "\""), std::string::npos) << key << ": " << err;
  }
}

TEST_F(PeftAdapterDir, ARankOrBaseThatDoesNotFitIsRefusedNamingTheTensor) {
  edit_config([](nlohmann::json& j) { j["r"] = 4; });
  std::string err = read_error();
  EXPECT_NE(err.find("has shape (2, 16), expected (4, 16)"), std::string::npos) << err;
  EXPECT_NE(err.find("adapter_model.safetensors: tensor 'base_model.model.model.layers.0."), std::string::npos) << err;

  edit_config([](nlohmann::json& j) { j["r"] = kRank; });
  shape_.num_layers = 1;  // a base with fewer layers than the adapter
  err = read_error();
  EXPECT_NE(err.find("model.layers.1."), std::string::npos) << err;
  EXPECT_NE(err.find("is not a tensor of this base model"), std::string::npos) << err;
}

// Adapters on some layers only (--target_regex): PEFT would put target_modules
// on every layer, so the config names exactly the adapted modules as a
// whole-name regex (PEFT fullmatches a string against module names).
TEST_F(PeftAdapterDir, LayersAdaptedDifferentlyGetAWholeNameRegex) {
  Tensors layer0;
  for (const auto& [name, v] : tensors_)
    if (name.rfind("decoder.layers.0.self_attention.", 0) == 0) layer0[name] = v;
  PeftLoraConfig c;
  c.r = kRank;
  write_peft_adapter(fs_, tmp_ / "peft0", shape_, c, layer0);
  const auto j = nlohmann::json::parse(fs_.read_file(tmp_ / "peft0/adapter_config.json", 1 << 20));
  EXPECT_EQ(j["target_modules"],
            "model\\.layers\\.0\\.self_attn\\.k_proj|model\\.layers\\.0\\.self_attn\\.o_proj|"
            "model\\.layers\\.0\\.self_attn\\.q_proj|model\\.layers\\.0\\.self_attn\\.v_proj");
  EXPECT_EQ(j["modules_to_save"], nullptr);
  const PeftAdapter a = read_peft_adapter(fs_, tmp_ / "peft0", shape_);
  EXPECT_EQ(a.tensors.size(), 4u);
  for (const auto& [name, v] : layer0) EXPECT_TRUE(same_bits(a.tensors.at(name), v)) << name;
}

// MoE adapters (issue 16): every expert's fc1 / fc2 and the shared expert's
// under PEFT's per-expert names (Qwen2-MoE gate/up/down_proj, Mixtral
// w1/w3/w2) read back bit for bit; an adapter on the router (PEFT's "gate"),
// which mtrain's LoRA never adapts, is refused naming the tensor.
TEST(PeftMoeAdapter, ExpertAdaptersReadBackBitExactAndARouterAdapterIsRefused) {
  mtrain::testing::TempDir tmp;
  PosixFileSystem fs;
  for (const HfArch arch : {HfArch::kQwen2Moe, HfArch::kMixtral}) {
    SCOPED_TRACE(hf_model_type(arch));
    const HfModelShape s = testing::tiny_moe_hf_shape(arch);
    Rng rng(11);
    Tensors t;
    std::vector<std::string> modules;
    for (int e = 0; e < 4; ++e)
      for (const char* fc : {"linear_fc1", "linear_fc2"})
        modules.push_back("decoder.layers.0.mlp.experts.local_experts." + std::to_string(e) + "." + fc);
    if (arch == HfArch::kQwen2Moe) modules.push_back("decoder.layers.0.mlp.shared_experts.linear_fc1");
    for (const std::string& m : modules)
      for (const char* ab : {".lora_A.weight", ".lora_B.weight"}) {
        std::vector<float>& v = t[m + ab];
        v.resize(static_cast<size_t>(shape_numel(peft_map_for_mcore(m + ab, s, kRank).hf.mcore_shape)));
        for (float& x : v) x = static_cast<float>(rng.normal());
      }
    PeftLoraConfig c;
    c.r = kRank;
    const std::string dir = tmp / (std::string(hf_model_type(arch)) + "_peft");
    write_peft_adapter(fs, dir, s, c, t);
    const PeftAdapter a = read_peft_adapter(fs, dir, s);
    EXPECT_EQ(a.tensors.size(), t.size());
    for (const auto& [name, v] : t) EXPECT_TRUE(a.tensors.count(name) && same_bits(a.tensors.at(name), v)) << name;

    const std::string router = "decoder.layers.0.mlp.router";
    for (const char* ab : {".lora_A.weight", ".lora_B.weight"})
      t[router + ab].assign(static_cast<size_t>(shape_numel(peft_map_for_mcore(router + ab, s, kRank).hf.mcore_shape)),
                            0.5f);
    write_peft_adapter(fs, dir + "_router", s, c, t);
    std::string err;
    try {
      read_peft_adapter(fs, dir + "_router", s);
    } catch (const CheckpointError& e) {
      err = e.what();
    }
    const std::string block = arch == HfArch::kMixtral ? "block_sparse_moe" : "mlp";
    EXPECT_NE(err.find("'base_model.model.model.layers.0." + block + ".gate.lora_A.weight' adapts an MoE router"),
              std::string::npos)
        << err;
  }
}

}  // namespace
}  // namespace mtrain::checkpoint
