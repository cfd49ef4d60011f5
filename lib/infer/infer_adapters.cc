// `mtrain infer --adapters DIR [--merge_lora true]` (infer_internal.h): the
// adapter is read by the same reader as `--adapter_load` and `export
// --merge_lora` (read_adapters: a PEFT directory or an mtrain LoRA
// checkpoint) and served over the base weights as one WeightSource, so the
// model loads through load_inference_weights like any other.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "checkpoint/sharded_checkpoint.h"
#include "common/errors.h"
#include "infer/infer_internal.h"
#include "train/checkpoint_blocks.h"
#include "train/checkpointing.h"
#include "train/rank_build.h"

namespace mtrain::infer {

namespace {

// The base weights with the adapter over them. Adapter tensors (lora_A / B,
// modules_to_save, trained biases) come from the adapter; with `merge`, a base
// weight that has an adapter comes as W + scale · B · A (export's
// merging_fetch), so a plain model loads the merged weights.
class AdapterSource : public checkpoint::WeightSource {
 public:
  AdapterSource(const checkpoint::WeightSource& base, const InferAdapters& a, bool merge)
      : base_(base),
        a_(a),
        merge_(merge),
        merged_(train::merging_fetch([this](const std::string& n) { return whole(n); }, a.adapters)) {}
  std::string describe() const override { return fmt::format("{} with the adapter {}", base_.describe(), a_.dir); }
  bool has(const std::string& name) const override { return a_.adapters.tensors.count(name) || base_.has(name); }
  Shape global_shape(const std::string& name) const override {
    const auto it = a_.adapters.tensors.find(name);
    if (it == a_.adapters.tensors.end()) return base_.global_shape(name);
    const int64_t n = static_cast<int64_t>(it->second.size()), r = a_.adapters.config.r;
    if (name.ends_with(".lora_A.weight")) return {r, n / r};
    if (name.ends_with(".lora_B.weight")) return {n / r, r};
    Shape s = base_.global_shape(name);  // modules_to_save, biases: the base's (vocabulary rows may differ)
    if (s.size() == 2 && s[1] > 0) s[0] = n / s[1];
    return s;
  }
  void read_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                  float* out) const override {
    const bool adapted = a_.adapters.tensors.count(name) || (merge_ && has_adapter(name));
    if (!adapted) return base_.read_block(name, offsets, shape, out);
    const std::vector<float> full = merged_(name);  // the adapter's tensor, or the merged weight
    train::detail::copy_block(out, full, global_shape(name), offsets, shape);
  }

 private:
  bool has_adapter(const std::string& weight) const {
    return weight.ends_with(".weight") &&
           a_.adapters.tensors.count(weight.substr(0, weight.size() - 7) + ".lora_A.weight");
  }
  std::vector<float> whole(const std::string& name) const {
    const Shape g = base_.global_shape(name);
    std::vector<float> v(static_cast<size_t>(shape_numel(g)));
    base_.read_block(name, std::vector<int64_t>(g.size(), 0), g, v.data());
    return v;
  }
  const checkpoint::WeightSource& base_;
  const InferAdapters& a_;
  bool merge_;
  checkpoint::HfTensorFetch merged_;
};

// The model's Hugging Face shape, which every adapter tensor is checked against.
checkpoint::HfModelShape hf_shape(const config::Args& args) {
  return checkpoint::hf_shape_from_meta(train::model_meta(train::rank_model_config(args, parallel::RankCoords{})));
}

// Unmerged: the model gets LoRA layers of the adapter's rank and scale on
// every linear type the adapter adapts (a layer it does not cover keeps B = 0,
// no delta); modules_to_save and biases are plain weights the adapter replaces.
void lora_layers_for(config::Args& args, const InferAdapters& a) {
  const checkpoint::PeftLoraConfig& c = a.adapters.config;
  if (c.lora_alpha != static_cast<int>(c.lora_alpha))
    throw ConfigError(fmt::format("--adapters {}: lora_alpha {} is not an integer, which mtrain's LoRA layers "
                                  "cannot hold",
                                  a.dir, c.lora_alpha),
                      "add --merge_lora true: the merged weights carry any scale");
  std::set<std::string> linears;
  for (const auto& [name, data] : a.adapters.tensors)
    if (const size_t at = name.find(".lora_A."); at != std::string::npos)
      linears.insert(name.substr(name.rfind('.', at - 1) + 1, at - name.rfind('.', at - 1) - 1));
  args.train_type = "lora";
  args.lora_rank = static_cast<int>(c.r);
  args.lora_alpha = static_cast<int>(c.lora_alpha);
  args.use_rslora = c.use_rslora;
  args.target_modules.assign(linears.begin(), linears.end());
  args.target_regex.reset();
  args.modules_to_save.clear();
  args.lora_bias = "none";
}

}  // namespace

std::optional<InferAdapters> prepare_adapters(const InferOptions& o, config::Args& args) {
  args.lora_dropout = 0.0;                           // inference: the adapter's input dropout is off
  const bool lora_ckpt = args.train_type == "lora";  // --load of a LoRA run: its adapters are in the checkpoint
  if (lora_ckpt && !o.adapters.empty())
    throw UsageError(
        fmt::format("--load {} is a LoRA checkpoint with its own adapters; --adapters would add another", *o.load),
        "drop --adapters to infer with the checkpoint's adapters, or --load its base model");
  if (o.merge_lora && o.adapters.empty() && !lora_ckpt)
    throw UsageError("--merge_lora true merges LoRA adapters, but there are none",
                     "add --adapters <PEFT dir or LoRA checkpoint>, or --load a LoRA training checkpoint");
  if (!o.merge_lora && o.adapters.empty()) return std::nullopt;  // a LoRA checkpoint runs its own LoRA layers
  PosixFileSystem fs;
  InferAdapters a;
  if (o.adapters.empty()) {
    a.dir = *o.load;
    const checkpoint::CheckpointReader r = checkpoint::CheckpointReader::open(
        fs, *o.load, o.ckpt_step ? std::optional<int64_t>(*o.ckpt_step) : std::nullopt);
    a.adapters = *train::checkpoint_adapters(r, hf_shape(args));
  } else {
    a.dir = o.adapters.front();
    if (!std::filesystem::is_directory(a.dir))
      throw CheckpointError(fmt::format("--adapters {}: no such directory", a.dir),
                            "give a PEFT adapter directory or the --output_dir of a --train_type lora run");
    a.adapters = train::read_adapters(fs, a.dir, hf_shape(args), "--adapters");
  }
  if (o.merge_lora)
    args.train_type = "full";  // the plain model: the merged weights need no LoRA layers
  else
    lora_layers_for(args, a);
  return a;
}

void load_adapted_weights(const checkpoint::WeightSource& base, const InferAdapters& a, bool merge,
                          model::GptModel& model) {
  train::load_inference_weights(AdapterSource(base, a, merge), model);
}

}  // namespace mtrain::infer
