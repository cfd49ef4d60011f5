// Bad Hugging Face model directories and failed writes: every refusal is a
// CheckpointError (exit 5) that names the file and the tensor or field, and
// a failed write leaves neither the output directory nor its temporary one.
#include <gtest/gtest.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "../common/fs_test_util.h"
#include "checkpoint/hf_model_dir.h"
#include "common/atomic_file.h"
#include "common/errors.h"
#include "common/fault_file_system.h"
#include "hf_dir_test_util.h"
#include "safetensors_test_util.h"

namespace mtrain::checkpoint {
namespace {

using mtrain::testing::TempDir;
using testing::checkpoint_error_of;
using testing::HfTestTensor;
using testing::tiny_hf_shape;
using testing::write_tiny_hf_dir;

// The error of opening a tiny Llama directory after `edit` changed its tensors.
std::string open_error(const std::function<void(std::vector<HfTestTensor>&)>& edit, const std::string& dir) {
  PosixFileSystem fs;
  write_tiny_hf_dir(fs, dir, tiny_hf_shape(HfArch::kLlama, false), StDType::kBF16, 9, edit);
  return checkpoint_error_of([&] { HfModelReader::open(fs, dir); });
}

std::vector<HfTestTensor>::iterator find(std::vector<HfTestTensor>& ts, const std::string& name) {
  return std::find_if(ts.begin(), ts.end(), [&](const HfTestTensor& t) { return t.name == name; });
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HfModelDirFaults, MissingTensorIsNamed) {
  TempDir tmp;
  const std::string e =
      open_error([](auto& ts) { ts.erase(find(ts, "model.layers.1.mlp.up_proj.weight")); }, tmp / "m");
  EXPECT_TRUE(has(e, tmp / "m")) << e;
  EXPECT_TRUE(has(e, "tensor 'model.layers.1.mlp.up_proj.weight' is missing")) << e;
  EXPECT_TRUE(has(e, "decoder.layers.1.mlp.linear_fc1.weight")) << e;
}

TEST(HfModelDirFaults, WrongShapeIsNamedWithBothShapes) {
  TempDir tmp;
  const std::string e = open_error(
      [](auto& ts) {
        auto it = find(ts, "model.layers.0.self_attn.k_proj.weight");
        it->shape = {4, 16};
        it->values.resize(64);
      },
      tmp / "m");
  EXPECT_TRUE(has(e, tmp / "m/model.safetensors")) << e;
  EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [4, 16], expected [8, 16]")) << e;
}

TEST(HfModelDirFaults, UnknownTensorIsNamed) {
  TempDir tmp;
  const std::string e = open_error(
      [](auto& ts) {
        ts.push_back({"model.layers.0.mlp.experts.0.weight", {2}, {1.0f, 2.0f}});
      },
      tmp / "m");
  EXPECT_TRUE(has(e, tmp / "m/model.safetensors")) << e;
  EXPECT_TRUE(has(e, "unexpected tensor 'model.layers.0.mlp.experts.0.weight'")) << e;
  // A layer past num_hidden_layers is refused the same way.
  TempDir tmp2;
  const std::string layer = open_error(
      [](auto& ts) {
        ts.push_back({"model.layers.2.input_layernorm.weight", {16}, std::vector<float>(16)});
      },
      tmp2 / "m");
  EXPECT_TRUE(has(layer, "model.layers.2.input_layernorm.weight")) << layer;
  EXPECT_TRUE(has(layer, "the model has 2 layers")) << layer;
}

TEST(HfModelDirFaults, NonFloatDtypeIsNamed) {
  TempDir tmp;
  const std::string e = open_error([](auto& ts) { find(ts, "model.norm.weight")->dtype = StDType::kI32; }, tmp / "m");
  EXPECT_TRUE(has(e, "tensor 'model.norm.weight' has dtype I32")) << e;
}

TEST(HfModelDirFaults, ConfigProblemsNameTheFile) {
  TempDir tmp;
  PosixFileSystem fs;
  fs.create_dirs(tmp / "empty");
  EXPECT_TRUE(has(checkpoint_error_of([&] { HfModelReader::open(fs, tmp / "empty"); }), "no config.json"));

  write_tiny_hf_dir(fs, tmp / "m", tiny_hf_shape(HfArch::kLlama, false), StDType::kF32, 1);
  nlohmann::json config = nlohmann::json::parse(fs.read_file(tmp / "m/config.json", 1 << 20));
  config["architectures"] = {"MistralForCausalLM"};
  config.erase("model_type");
  write_file_atomic(fs, tmp / "m/config.json", config.dump());
  const std::string arch = checkpoint_error_of([&] { HfModelReader::open(fs, tmp / "m"); });
  EXPECT_TRUE(has(arch, tmp / "m/config.json: unsupported architecture 'MistralForCausalLM'")) << arch;
  EXPECT_TRUE(has(arch, "LlamaForCausalLM, Qwen2ForCausalLM")) << arch;

  // padded_vocab below the HF rows.
  TempDir tmp2;
  write_tiny_hf_dir(fs, tmp2 / "m", tiny_hf_shape(HfArch::kLlama, false), StDType::kF32, 1);
  EXPECT_TRUE(has(checkpoint_error_of([&] { HfModelReader::open(fs, tmp2 / "m", 32); }), "padded vocabulary (32)"));
}

TEST(HfModelDirFaults, MissingWeightFilesAreNamed) {
  TempDir tmp;
  PosixFileSystem fs;
  write_tiny_hf_dir(fs, tmp / "m", tiny_hf_shape(HfArch::kLlama, false), StDType::kF32, 1);
  fs.remove_all(tmp / "m/model.safetensors");
  EXPECT_TRUE(has(checkpoint_error_of([&] { HfModelReader::open(fs, tmp / "m"); }),
                  "no model.safetensors and no model.safetensors.index.json"));

  // A sharded directory whose index names a file that is gone.
  write_tiny_hf_dir(fs, tmp / "in", tiny_hf_shape(HfArch::kLlama, false), StDType::kF32, 1);
  const HfModelReader r = HfModelReader::open(fs, tmp / "in");
  const HfWriteResult w = write_hf_model(fs, tmp / "sharded", r.shape(), testing::fetch_from(r), 2000, StDType::kF32);
  ASSERT_GT(w.files.size(), 2u);
  fs.remove_all(tmp / "sharded/" + w.files[1]);
  const std::string e = checkpoint_error_of([&] { HfModelReader::open(fs, tmp / "sharded"); });
  EXPECT_TRUE(has(e, "file " + w.files[1] + " named in model.safetensors.index.json is missing")) << e;
}

TEST(HfModelDirFaults, WriterRefusesANonEmptyDirectoryAndCleansUpAfterFailures) {
  TempDir tmp;
  PosixFileSystem fs;
  write_tiny_hf_dir(fs, tmp / "in", tiny_hf_shape(HfArch::kQwen2, false), StDType::kF32, 1);
  const HfModelReader r = HfModelReader::open(fs, tmp / "in");
  const HfTensorFetch fetch = testing::fetch_from(r);
  EXPECT_TRUE(
      has(checkpoint_error_of([&] { write_hf_model(fs, tmp / "in", r.shape(), fetch, 1 << 30, StDType::kF32); }),
          "is not empty"));

  // A source that fails halfway (a damaged checkpoint): nothing is left behind.
  int calls = 0;
  const auto failing = [&](const std::string& n) {
    if (++calls == 5) throw CheckpointError("source broke at " + n);
    return r.read_full(n);
  };
  EXPECT_TRUE(has(checkpoint_error_of([&] { write_hf_model(fs, tmp / "out", r.shape(), failing, 500, StDType::kF32); }),
                  "source broke at"));
  EXPECT_FALSE(fs.exists(tmp / "out"));
  EXPECT_FALSE(fs.exists(tmp / "out.tmp-hf"));

  // Disk full on the 4th write.
  FaultInjectingFileSystem faulty(fs);
  faulty.fail(FsOp::kWrite, 4, ENOSPC);
  const std::string full =
      checkpoint_error_of([&] { write_hf_model(faulty, tmp / "out", r.shape(), fetch, 500, StDType::kF32); });
  EXPECT_TRUE(has(full, "No space left on device")) << full;
  EXPECT_FALSE(fs.exists(tmp / "out"));
  EXPECT_FALSE(fs.exists(tmp / "out.tmp-hf"));
}

}  // namespace
}  // namespace mtrain::checkpoint
