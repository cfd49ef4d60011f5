// A Hugging Face Qwen3ForCausalLM directory written by the test (random
// weights under transformers' names and shapes: modeling_qwen3.py's
// Qwen3Attention q_proj / k_proj / v_proj / o_proj and q_norm / k_norm of
// size head_dim, Qwen3MLP gate / up / down, Qwen3RMSNorm input_layernorm /
// post_attention_layernorm / norm) imported into mtrain's model through
// HfModelReader: its logits for one short sequence equal an fp64 forward of
// Qwen3 computed straight from the HF tensors (no mtrain layout involved).
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../checkpoint/hf_dir_test_util.h"
#include "checkpoint/hf_model_dir.h"
#include "checkpoint/model_meta.h"
#include "common/errors.h"
#include "common/file_system.h"
#include "model_test_util.h"
#include "test_util/fp32_bounds.h"
#include "test_util/qwen3_reference.h"

namespace mtrain::model {
namespace {

namespace fs = std::filesystem;
using checkpoint::HfArch;
using checkpoint::HfModelShape;

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// The fp64 reference straight from HF's tensors.
mtrain::testing::Qwen3RefModel reference_of(const HfModelShape& s, std::map<std::string, std::vector<float>>& hf) {
  mtrain::testing::Qwen3RefModel r;
  r.C = s.hidden, r.H = s.heads, r.G = s.groups, r.D = s.head_dim, r.F = s.ffn, r.V = s.vocab_size;
  r.eps = s.rms_norm_eps, r.theta = s.rope_theta;
  r.embed = as_double(hf.at("model.embed_tokens.weight"));
  r.lm_head = s.tie_word_embeddings ? r.embed : as_double(hf.at("lm_head.weight"));
  r.final_norm = as_double(hf.at("model.norm.weight"));
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto t = [&](const char* n) { return as_double(hf.at(p + n)); };
    r.layers.push_back({t("input_layernorm.weight"), t("self_attn.q_proj.weight"), t("self_attn.k_proj.weight"),
                        t("self_attn.v_proj.weight"), t("self_attn.o_proj.weight"), t("self_attn.q_norm.weight"),
                        t("self_attn.k_norm.weight"), t("post_attention_layernorm.weight"), t("mlp.gate_proj.weight"),
                        t("mlp.up_proj.weight"), t("mlp.down_proj.weight")});
  }
  return r;
}

class Qwen3Hf : public ::testing::TestWithParam<bool> {};  // tied word embeddings or not

// Bound: as ModelGrad's paths (model_test_util.h), every fp32 stage here sums
// at most 32 terms, so the logits are within kPathRtol of exact in the max norm.
TEST_P(Qwen3Hf, ImportedModelsLogitsMatchFp64Qwen3) {
  omp_set_num_threads(1);
  const bool tied = GetParam();
  HfModelShape s = checkpoint::testing::tiny_hf_shape(HfArch::kQwen3, tied, 4, 2);
  s.head_dim = 8;  // query width 32 for hidden 16, as Qwen3 allows
  const fs::path dir =
      fs::temp_directory_path() / ("mtrain_qwen3_hf_" + std::to_string(::getpid()) + (tied ? "_t" : ""));
  PosixFileSystem pfs;
  // Weights of N(0, 0.3): activations stay O(1) through the 2 layers.
  auto hf = checkpoint::testing::write_tiny_hf_dir(pfs, dir.string(), s, checkpoint::StDType::kF32, 7,
                                                   [](std::vector<checkpoint::testing::HfTestTensor>& ts) {
                                                     for (auto& t : ts)
                                                       for (float& x : t.values) x *= 0.3f;
                                                   });
  const auto reader = checkpoint::HfModelReader::open(pfs, dir.string(), 64);

  ModelConfig c = testing::tiny_llama();
  c.hidden = s.hidden, c.ffn = s.ffn, c.heads = s.heads, c.groups = s.groups, c.head_dim = s.head_dim;
  c.vocab = s.vocab_size, c.padded_vocab = 64, c.max_positions = s.max_positions;
  c.norm_eps = static_cast<float>(s.rms_norm_eps), c.rotary_base = static_cast<float>(s.rope_theta);
  c.untie = !s.tie_word_embeddings, c.add_qkv_bias = s.qkv_bias(), c.qk_layernorm = s.qk_norm();
  c.micro_batch = 1, c.seq_length = 7;
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  int loaded = 0;
  for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
    const ParamInfo& p = m.params().info(i);
    ASSERT_TRUE(reader.has(p.name)) << p.name;
    const std::vector<float> w = reader.read_full(p.name);
    ASSERT_EQ(static_cast<int64_t>(w.size()), p.numel) << p.name;
    std::copy(w.begin(), w.end(), m.params().param(i));
    ++loaded;
  }
  EXPECT_EQ(loaded, 2 * 8 + (tied ? 2 : 3));  // per layer 8 tensors (q/k norms incl.), embedding, norm, lm_head

  const std::vector<int> tokens = {3, 17, 42, 8, 8, 29, 1}, positions = {0, 1, 2, 3, 4, 5, 6};
  std::vector<int32_t> tok(tokens.begin(), tokens.end()), pos(positions.begin(), positions.end());
  std::vector<int32_t> targets(tokens.size(), 0);
  TokenBatch b;
  b.B = 1, b.T = static_cast<int64_t>(tokens.size());
  b.tokens = tok.data(), b.targets = targets.data(), b.positions = pos.data();
  m.forward(b, 0, false);
  const std::vector<double> want = mtrain::testing::qwen3_logits(reference_of(s, hf), tokens, positions);
  std::vector<float> got, want_f(want.begin(), want.end());
  for (int64_t t = 0; t < b.T; ++t)  // the first vocab_size of the padded rows
    got.insert(got.end(), m.logits() + t * c.padded_vocab, m.logits() + t * c.padded_vocab + s.vocab_size);
  EXPECT_TRUE(mtrain::testing::close_in_max_norm(got.data(), want_f.data(), got.size(), testing::kPathRtol));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Embeddings, Qwen3Hf, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "tied" : "untied"); });

// The checkpoint's model description: qk_layernorm written only when set (a
// dense checkpoint without it keeps its description and loads as before), and
// a load under the other setting refused in Megatron's words.
TEST(Qwen3Meta, QkLayernormIsRecordedAndCompared) {
  checkpoint::ModelMeta on = checkpoint::meta_from_hf_shape(checkpoint::testing::tiny_hf_shape(HfArch::kQwen3, false));
  checkpoint::ModelMeta off = checkpoint::meta_from_hf_shape(checkpoint::testing::tiny_hf_shape(HfArch::kLlama, false));
  EXPECT_TRUE(on.qk_layernorm);
  EXPECT_FALSE(checkpoint::model_meta_to_json(off).contains("qk_layernorm"));
  EXPECT_TRUE(checkpoint::model_meta_from_json(checkpoint::model_meta_to_json(on), "state").qk_layernorm);
  EXPECT_FALSE(checkpoint::model_meta_from_json(checkpoint::model_meta_to_json(off), "state").qk_layernorm);
  const std::vector<std::string> m = checkpoint::model_meta_mismatches(off, on);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], "qk_layernorm value from checkpoint (false) is not equal to the input argument value (true)");
  EXPECT_EQ(checkpoint::hf_shape_from_meta(on).arch, HfArch::kQwen3);
  on.add_qkv_bias = true;  // Qwen3's attention_bias would bias o_proj too
  EXPECT_THROW(checkpoint::hf_shape_from_meta(on), CheckpointError);
}

}  // namespace
}  // namespace mtrain::model
