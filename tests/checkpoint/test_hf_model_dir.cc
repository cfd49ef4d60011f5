// Hugging Face model directories on disk: HfModelReader's mtrain tensors
// (fused QKV per query group checked by hand, gate/up, padding rows, sliced
// reads), HF -> mtrain -> HF round trips that reproduce the files byte for
// byte (F32, BF16, F16; Llama and Qwen2; tied and untied; MHA, GQA, MQA),
// sharded output, and the ModelMeta <-> HfModelShape conversions.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "../common/fs_test_util.h"
#include "checkpoint/hf_model_dir.h"
#include "common/errors.h"
#include "hf_dir_test_util.h"

namespace mtrain::checkpoint {
namespace {

using mtrain::testing::TempDir;
using testing::same_bits;
using testing::tiny_hf_shape;
using testing::write_tiny_hf_dir;

std::string file_text(FileSystem& fs, const std::string& path) { return fs.read_file(path, int64_t{1} << 30); }

// Rows [first, first + n) of a row-major (rows, cols) tensor.
std::vector<float> rows_of(const std::vector<float>& t, int64_t cols, int64_t first, int64_t n) {
  return std::vector<float>(t.begin() + first * cols, t.begin() + (first + n) * cols);
}

TEST(HfModelReader, AssemblesMcoreTensorsPerQueryGroup) {
  TempDir tmp;
  PosixFileSystem fs;
  const HfModelShape s = tiny_hf_shape(HfArch::kQwen2, false, /*heads=*/4, /*groups=*/2);
  const auto hf = write_tiny_hf_dir(fs, tmp / "m", s, StDType::kF32, 1);
  const HfModelReader r = HfModelReader::open(fs, tmp / "m", /*padded_vocab=*/64);
  const int64_t C = s.hidden, D = s.head_dim;

  // Fused QKV rows: group g holds query heads 2g, 2g+1, then key head g, then value head g.
  const std::string qkv = "decoder.layers.1.self_attention.linear_qkv.weight";
  EXPECT_EQ(r.global_shape(qkv), (Shape{(4 + 2 * 2) * D, C}));
  const std::vector<float> fused = r.read_full(qkv);
  const auto& q = hf.at("model.layers.1.self_attn.q_proj.weight");
  const auto& k = hf.at("model.layers.1.self_attn.k_proj.weight");
  const auto& v = hf.at("model.layers.1.self_attn.v_proj.weight");
  for (int64_t g = 0; g < 2; ++g) {
    const int64_t base = g * 4 * D;  // (R + 2) * D rows per group, R = 2
    EXPECT_TRUE(same_bits(rows_of(fused, C, base, 2 * D), rows_of(q, C, 2 * g * D, 2 * D))) << g;
    EXPECT_TRUE(same_bits(rows_of(fused, C, base + 2 * D, D), rows_of(k, C, g * D, D))) << g;
    EXPECT_TRUE(same_bits(rows_of(fused, C, base + 3 * D, D), rows_of(v, C, g * D, D))) << g;
  }
  const std::vector<float> bias = r.read_full("decoder.layers.0.self_attention.linear_qkv.bias");
  EXPECT_TRUE(same_bits(rows_of(bias, 1, 2 * D, D), rows_of(hf.at("model.layers.0.self_attn.k_proj.bias"), 1, 0, D)));

  // fc1 = [gate; up]; the embedding gets zero padding rows 50..63.
  const std::vector<float> fc1 = r.read_full("decoder.layers.0.mlp.linear_fc1.weight");
  EXPECT_TRUE(same_bits(rows_of(fc1, C, 0, s.ffn), hf.at("model.layers.0.mlp.gate_proj.weight")));
  EXPECT_TRUE(same_bits(rows_of(fc1, C, s.ffn, s.ffn), hf.at("model.layers.0.mlp.up_proj.weight")));
  const std::vector<float> emb = r.read_full("embedding.word_embeddings.weight");
  ASSERT_EQ(emb.size(), static_cast<size_t>(64 * C));
  EXPECT_TRUE(same_bits(rows_of(emb, C, 0, 50), hf.at("model.embed_tokens.weight")));
  EXPECT_EQ(rows_of(emb, C, 50, 14), std::vector<float>(static_cast<size_t>(14 * C), 0.0f));
  EXPECT_TRUE(same_bits(r.read_full("output_layer.weight"), [&] {
    std::vector<float> head = hf.at("lm_head.weight");
    head.resize(static_cast<size_t>(64 * C), 0.0f);
    return head;
  }()));
}

TEST(HfModelReader, SlicedReadsEqualTheWholeTensor) {
  TempDir tmp;
  PosixFileSystem fs;
  write_tiny_hf_dir(fs, tmp / "m", tiny_hf_shape(HfArch::kLlama, false), StDType::kBF16, 2);
  const HfModelReader r = HfModelReader::open(fs, tmp / "m", 64);
  for (const std::string& name : r.names()) {
    const Shape g = r.global_shape(name);
    const std::vector<float> full = r.read_full(name);
    // Two row blocks (TP=2 column-parallel) and, for matrices, two column blocks (row-parallel).
    const int64_t rows = g[0], cols = g.size() == 2 ? g[1] : 1;
    for (int64_t rb = 0; rb < 2; ++rb) {
      for (int64_t cb = 0; cb < (g.size() == 2 ? 2 : 1); ++cb) {
        const int64_t r0 = rb * rows / 2, nr = rows / 2;
        const int64_t c0 = g.size() == 2 ? cb * cols / 2 : 0, nc = g.size() == 2 ? cols / 2 : 1;
        const std::vector<int64_t> offsets = g.size() == 2 ? std::vector<int64_t>{r0, c0} : std::vector<int64_t>{r0};
        const Shape block = g.size() == 2 ? Shape{nr, nc} : Shape{nr};
        std::vector<float> got(static_cast<size_t>(nr * nc));
        r.read_block(name, offsets, block, got.data());
        std::vector<float> want;
        for (int64_t i = 0; i < nr; ++i)
          for (int64_t j = 0; j < nc; ++j) want.push_back(full[static_cast<size_t>((r0 + i) * cols + c0 + j)]);
        EXPECT_TRUE(same_bits(got, want)) << name << " block " << rb << "," << cb;
      }
    }
  }
  std::vector<float> out(4);
  EXPECT_THROW(r.read_block("decoder.final_layernorm.weight", {14}, {4}, out.data()), CheckpointError);
  EXPECT_FALSE(r.has("decoder.layers.0.mlp.linear_fc1.bias"));
  try {
    r.global_shape("decoder.layers.2.input_layernorm.weight");
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.layers.2.input_layernorm.weight"), std::string::npos) << e.what();
  }
}

struct RoundTripCase {
  HfArch arch;
  bool tied;
  int64_t heads, groups;
  StDType dtype;
};

TEST(HfModelDir, HfToMcoreToHfIsByteExact) {
  const RoundTripCase cases[] = {
      {HfArch::kLlama, false, 4, 2, StDType::kF32},   // GQA
      {HfArch::kLlama, true, 4, 4, StDType::kBF16},   // MHA, tied
      {HfArch::kQwen2, false, 4, 1, StDType::kBF16},  // MQA, q/k/v biases
      {HfArch::kQwen2, true, 6, 3, StDType::kF16},
  };
  for (const RoundTripCase& c : cases) {
    SCOPED_TRACE(std::string(hf_arch_class(c.arch)) + " " + st_dtype_name(c.dtype) + (c.tied ? " tied" : ""));
    TempDir tmp;
    PosixFileSystem fs;
    write_tiny_hf_dir(fs, tmp / "in", tiny_hf_shape(c.arch, c.tied, c.heads, c.groups), c.dtype, 3);
    const HfModelReader r = HfModelReader::open(fs, tmp / "in", 64);
    const HfTensorFetch fetch = testing::fetch_from(r);
    const HfWriteResult w = write_hf_model(fs, tmp / "out", r.shape(), fetch, int64_t{1} << 30, c.dtype);
    EXPECT_EQ(w.files, std::vector<std::string>{"model.safetensors"});
    const SafetensorsFile in = SafetensorsFile::open(fs, tmp / "in/model.safetensors");
    EXPECT_EQ(w.tensors, static_cast<int64_t>(in.tensors().size()));
    for (const char* f : {"config.json", "model.safetensors"})
      EXPECT_EQ(file_text(fs, tmp / "out/" + f), file_text(fs, tmp / "in/" + f)) << f;
    EXPECT_FALSE(fs.exists(tmp / "out/model.safetensors.index.json"));
    EXPECT_FALSE(fs.exists(tmp / "out.tmp-hf"));
    EXPECT_EQ(w.bytes, fs.file_size(tmp / "out/config.json") + fs.file_size(tmp / "out/model.safetensors"));
    const SafetensorsFile out = SafetensorsFile::open(fs, tmp / "out/model.safetensors");
    EXPECT_EQ(out.metadata(), (SafetensorsMetadata{{"format", "pt"}}));
    EXPECT_EQ(out.find("lm_head.weight") != nullptr, !c.tied);
  }
}

TEST(HfModelDir, ShardedOutputReadsBackIdentically) {
  TempDir tmp;
  PosixFileSystem fs;
  write_tiny_hf_dir(fs, tmp / "in", tiny_hf_shape(HfArch::kQwen2, false), StDType::kBF16, 4);
  const HfModelReader r = HfModelReader::open(fs, tmp / "in");
  const HfTensorFetch fetch = testing::fetch_from(r);
  const int64_t limit = 1200;  // bytes: a layer's q_proj alone is 16 * 16 * 2 = 512
  const HfWriteResult w = write_hf_model(fs, tmp / "out", r.shape(), fetch, limit, StDType::kBF16);
  ASSERT_GT(w.files.size(), 3u);
  EXPECT_EQ(w.files.front(), fmt::format("model-00001-of-{:05d}.safetensors", w.files.size()));
  EXPECT_FALSE(fs.exists(tmp / "out/model.safetensors"));
  const nlohmann::json index = nlohmann::json::parse(file_text(fs, tmp / "out/model.safetensors.index.json"));
  int64_t listed = 0, data_bytes = 0;
  for (const std::string& f : w.files) {
    const SafetensorsFile sf = SafetensorsFile::open(fs, tmp / "out/" + f);
    int64_t bytes = 0;
    for (const TensorInfo& t : sf.tensors()) {
      EXPECT_EQ(index["weight_map"][t.name], f) << t.name;
      bytes += t.nbytes();
      ++listed;
    }
    EXPECT_TRUE(bytes <= limit || sf.tensors().size() == 1) << f << " holds " << bytes << " bytes";
    data_bytes += bytes;
    EXPECT_EQ(mtrain::testing::mode_of(tmp / "out/" + f), 0640u) << f;
  }
  EXPECT_EQ(listed, w.tensors);
  EXPECT_EQ(index["weight_map"].size(), static_cast<size_t>(listed));
  EXPECT_EQ(index["metadata"]["total_size"], data_bytes);
  EXPECT_EQ(mtrain::testing::mode_of(tmp / "out"), 0750u);

  const HfModelReader sharded = HfModelReader::open(fs, tmp / "out");
  EXPECT_EQ(sharded.files().size(), w.files.size());
  for (const std::string& name : r.names()) EXPECT_TRUE(same_bits(sharded.read_full(name), r.read_full(name))) << name;
  // Writing the sharded directory again gives the same files.
  const HfWriteResult w2 =
      write_hf_model(fs, tmp / "again", sharded.shape(), testing::fetch_from(sharded), limit, StDType::kBF16);
  ASSERT_EQ(w2.files, w.files);
  for (const std::string& f : w.files) EXPECT_EQ(file_text(fs, tmp / "again/" + f), file_text(fs, tmp / "out/" + f));
}

TEST(HfModelDir, TiedModelReadsTheOutputLayerFromTheEmbeddings) {
  TempDir tmp;
  PosixFileSystem fs;
  // Some tied exports also store lm_head.weight: it is ignored, the embeddings win.
  write_tiny_hf_dir(fs, tmp / "m", tiny_hf_shape(HfArch::kLlama, true), StDType::kF32, 5, [](auto& tensors) {
    tensors.push_back({"lm_head.weight", {50, 16}, std::vector<float>(50 * 16, 7.0f)});
  });
  const HfModelReader r = HfModelReader::open(fs, tmp / "m", 64);
  const std::vector<std::string> names = r.names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "output_layer.weight"), 0);
  EXPECT_TRUE(r.has("output_layer.weight"));  // the last pipeline stage's copy of the tied embeddings
  EXPECT_EQ(r.global_shape("output_layer.weight"), (Shape{64, 16}));
  EXPECT_TRUE(same_bits(r.read_full("output_layer.weight"), r.read_full("embedding.word_embeddings.weight")));
}

TEST(HfModelDir, MetaConversionsRoundTripAndRefuseWhatHfCannotExpress) {
  ModelMeta m;
  m.num_layers = 2, m.hidden_size = 16, m.ffn_hidden_size = 24, m.num_attention_heads = 4;
  m.num_query_groups = 2, m.kv_channels = 4, m.vocab_size = 50, m.padded_vocab_size = 128;
  m.max_position_embeddings = 64, m.norm_epsilon = 1e-6, m.rotary_base = 1e6, m.params_dtype = "bf16";
  for (bool qkv_bias : {false, true}) {
    m.add_qkv_bias = qkv_bias;
    const HfModelShape s = hf_shape_from_meta(m);
    EXPECT_EQ(s.arch, qkv_bias ? HfArch::kQwen2 : HfArch::kLlama);
    EXPECT_EQ(s.vocab_size, 50);
    EXPECT_EQ(s.padded_vocab, 128);
    EXPECT_EQ(s.dtype, DType::kBF16);
    EXPECT_EQ(model_meta_to_json(meta_from_hf_shape(s)), model_meta_to_json(m));
  }
  ModelMeta widened = m;  // eps as a training run in fp32 records it
  widened.norm_epsilon = static_cast<double>(static_cast<float>(1e-6));
  EXPECT_EQ(hf_shape_from_meta(widened).rms_norm_eps, 1e-6);
  const auto refusal = [&](const std::function<void(ModelMeta&)>& edit) {
    ModelMeta bad = m;
    edit(bad);
    try {
      hf_shape_from_meta(bad);
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(refusal([](ModelMeta& b) { b.normalization = "LayerNorm"; }).find("normalization LayerNorm"),
            std::string::npos);
  EXPECT_NE(refusal([](ModelMeta& b) { b.swiglu = false; }).find("swiglu false"), std::string::npos);
  EXPECT_NE(refusal([](ModelMeta& b) {
              b.position_embedding_type = "learned_absolute";
            }).find("position_embedding_type learned_absolute"),
            std::string::npos);
  EXPECT_NE(refusal([](ModelMeta& b) { b.add_bias_linear = true; }).find("add_bias_linear"), std::string::npos);
  EXPECT_NE(refusal([](ModelMeta& b) { b.num_query_groups = 3; }).find("num_key_value_heads"), std::string::npos);
}

}  // namespace
}  // namespace mtrain::checkpoint
