// base_reference.h: a checkpoint's weights as one WeightSource, with the
// frozen base of a LoRA checkpoint rebuilt from the reference it records.
#include <fmt/format.h>

#include <memory>

#include "checkpoint/hf_model_dir.h"
#include "checkpoint/model_meta.h"
#include "common/errors.h"
#include "config/json.h"
#include "train/base_reference.h"
#include "train/checkpoint_blocks.h"
#include "train/rank_build.h"

namespace mtrain::train {

namespace {

using json = nlohmann::json;

// A random base: the model a single device initialises from the recorded seed.
// The init is a function of seed, tensor name and shape only (params.h), so
// this is exactly the base every rank of the training run held its share of.
class SeededInitSource final : public checkpoint::WeightSource {
 public:
  SeededInitSource(config::Args args, const checkpoint::ModelMeta& meta, uint64_t seed) {
    args.train_type = "full";  // the base only: no adapter parameters
    args.seed = static_cast<int>(seed);
    args.tensor_model_parallel_size = args.pipeline_model_parallel_size = 1;
    args.virtual_pipeline_model_parallel_size.reset();
    args.num_layers_per_virtual_pipeline_stage.reset();
    args.decoder_first_pipeline_num_layers.reset();
    args.decoder_last_pipeline_num_layers.reset();
    args.sequence_parallel = false;
    args.context_parallel_size = 1;
    args.vocab_size = static_cast<int>(meta.vocab_size);
    model::ModelConfig c = rank_model_config(args, parallel::RankCoords{});
    c.padded_vocab = meta.padded_vocab_size;  // the training run's padding (it depends on its TP size)
    dev_ = std::make_unique<device::Device>(device_profile(args), 0);
    model_ = std::make_unique<model::GptModel>(c, *dev_);
    what_ = fmt::format("the random init of --seed {}", seed);
  }
  std::string describe() const override { return what_; }
  bool has(const std::string& name) const override { return model_->params().find(name) >= 0; }
  Shape global_shape(const std::string& name) const override { return info(name).full_shape; }
  void read_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                  float* out) const override {
    const model::ParamInfo& p = info(name);
    const float* w = model_->params().params().data() + p.offset;
    std::vector<float> whole(w, w + p.numel);
    detail::copy_block(out, whole, p.full_shape, offsets, shape);
  }

 private:
  const model::ParamInfo& info(const std::string& name) const {
    const int i = model_->params().find(name);
    if (i < 0) throw CheckpointError(fmt::format("{}: no tensor {}", what_, name), "the model has no such parameter");
    return model_->params().info(i);
  }
  std::unique_ptr<device::Device> dev_;
  std::unique_ptr<model::GptModel> model_;
  std::string what_;
};

// The trainable tensors of a LoRA checkpoint over its frozen base: a tensor
// the checkpoint holds comes from it, any other from the base.
class OverBaseSource final : public checkpoint::WeightSource {
 public:
  OverBaseSource(const checkpoint::CheckpointReader& top, std::unique_ptr<checkpoint::WeightSource> base)
      : top_(top), base_(std::move(base)) {}
  std::string describe() const override {
    return base_ ? fmt::format("{} (base: {})", top_.describe(), base_->describe()) : top_.describe();
  }
  bool has(const std::string& name) const override { return top_.has(name) || (base_ && base_->has(name)); }
  Shape global_shape(const std::string& name) const override { return from(name).global_shape(name); }
  void read_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                  float* out) const override {
    from(name).read_block(name, offsets, shape, out);
  }

 private:
  const checkpoint::WeightSource& from(const std::string& name) const {
    return top_.has(name) || !base_ ? static_cast<const checkpoint::WeightSource&>(top_) : *base_;
  }
  const checkpoint::CheckpointReader& top_;
  std::unique_ptr<checkpoint::WeightSource> base_;
};

// The base the (verified) reference names, in the shape of the LoRA run's model.
std::unique_ptr<checkpoint::WeightSource> open_base(FileSystem& fs, const json& ref, const json& state,
                                                    const std::string& where) {
  const checkpoint::ModelMeta meta = checkpoint::model_meta_from_json(state.at("model"), where);
  const std::string kind = ref.at("kind").get<std::string>();
  if (kind == "hf")
    return std::make_unique<checkpoint::HfModelReader>(
        checkpoint::HfModelReader::open(fs, ref.at("path").get<std::string>(), meta.padded_vocab_size));
  if (kind == "checkpoint")
    return std::make_unique<checkpoint::CheckpointReader>(
        checkpoint::CheckpointReader::open(fs, ref.at("path").get<std::string>(), ref.at("iteration").get<int64_t>()));
  if (!state.contains("args") || !state.at("args").is_object())
    throw CheckpointError(
        fmt::format("{}: a randomly initialised base but no run arguments (state key \"args\")", where),
        "the checkpoint is damaged or was not written by mtrain");
  return std::make_unique<SeededInitSource>(config::args_from_json(state.at("args").dump()), meta,
                                            ref.at("seed").get<uint64_t>());
}

}  // namespace

std::unique_ptr<checkpoint::WeightSource> checkpoint_weights(FileSystem& fs, const checkpoint::CheckpointReader& r) {
  const std::string where = r.path();
  const json state = json::parse(r.state_json());  // the reader validated it as an object
  if (!state.contains("base")) return std::make_unique<OverBaseSource>(r, nullptr);
  const json& ref = state.at("base");
  if (!state.contains("model"))
    throw CheckpointError(fmt::format("{}: the checkpoint records no model shape (state key \"model\")", where),
                          "it was not written by a training run of this mtrain version");
  // A random base carries its own seed: there is no run seed to compare it with.
  const json& seed = ref.is_object() && ref.contains("seed") ? ref.at("seed") : json();
  verify_base_reference(fs, ref, seed.is_number_unsigned() ? seed.get<uint64_t>() : 0, where);
  return std::make_unique<OverBaseSource>(r, open_base(fs, ref, state, where));
}

}  // namespace mtrain::train
