// --adapter_load (adapter_load.h).
#include "train/adapter_load.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "common/errors.h"
#include "tensor/precision.h"
#include "train/checkpoint_blocks.h"
#include "train/adapters.h"

namespace mtrain::train {

namespace {

// The run's LoRA settings must be the adapter's: the same rank and scale, and every module it
// adapts or trains in full targeted or saved by this run.
void check_settings(const ExportAdapters& a, const lora::LoraConfig& c, const std::string& dir) {
  const auto refuse = [&](const std::string& what, const std::string& hint) {
    throw ConfigError(fmt::format("--adapter_load {}: {}", dir, what), hint);
  };
  if (a.config.r != c.rank)
    refuse(fmt::format("the adapter has rank {}, this run --lora_rank {}", a.config.r, c.rank),
           fmt::format("set --lora_rank {}", a.config.r));
  if (a.config.lora_alpha != c.alpha || a.config.use_rslora != c.rslora)
    refuse(fmt::format("the adapter has lora_alpha {} (use_rslora {}), this run --lora_alpha {} (--use_rslora {})",
                       a.config.lora_alpha, a.config.use_rslora, c.alpha, c.rslora),
           fmt::format("set --lora_alpha {} --use_rslora {}", a.config.lora_alpha, a.config.use_rslora));
  for (const auto& [name, data] : a.tensors) {
    const size_t at = name.find(".lora_");
    const std::string module = name.substr(0, at == std::string::npos ? name.rfind('.') : at);
    if (at != std::string::npos && !c.targets(module))
      refuse(fmt::format("the adapter adapts {}, which this run's --target_modules does not", module),
             "target the same linears the adapter was trained on (e.g. --target_modules all-linear)");
    if (at != std::string::npos) continue;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      if (!c.bias_all) refuse(fmt::format("the adapter trains the bias {}", name), "add --lora_bias all");
    } else if (!c.saves(module)) {
      refuse(fmt::format("the adapter trains {} in full, which this run does not", module),
             fmt::format("add --modules_to_save {}", module.substr(module.rfind('.') + 1)));
    }
  }
}

}  // namespace

void load_adapters(FileSystem& fs, const std::string& dir, TrainingState& t) {
  const model::ModelConfig& c = t.model.config();
  if (!c.lora.enabled)
    throw ConfigError(fmt::format("--adapter_load {} needs --train_type lora", dir),
                      "add --train_type lora with the adapter's --lora_rank and --lora_alpha");
  const ExportAdapters a = read_adapters(fs, dir, checkpoint::hf_shape_from_meta(model_meta(c)), "--adapter_load");
  check_settings(a, c.lora, dir);
  model::ParamStore& ps = t.model.params();
  int64_t loaded = 0;
  for (const model::ParamInfo& p : ps.infos()) {
    const auto it = a.tensors.find(detail::source_name(p));
    if (it == a.tensors.end() || !p.trainable) continue;
    if (static_cast<int64_t>(it->second.size()) != shape_numel(p.full_shape))
      throw CheckpointError(
          fmt::format("--adapter_load {}: tensor {} has {} values, this model's shape {} needs {}", dir, it->first,
                      it->second.size(), shape_str(p.full_shape), shape_numel(p.full_shape)),
          "the adapter was trained on another base model");
    for (const detail::ParamBlock& b : detail::param_blocks(p))
      detail::copy_block(ps.params().data() + p.offset + b.local_offset, it->second, p.full_shape, b.offsets, b.shape);
    ++loaded;
  }
  t.optimizer.init_master_from(ps.params().data());
  kernels::round_to_dtype(ps.params().data(), ps.rounded_numel(), c.dtype);
  if (t.parallel.rank() == 0) {
    fmt::print("loaded LoRA adapters from {}: rank {}, alpha {}, {} tensors ({} on this rank)\n", dir, a.config.r,
               a.config.lora_alpha, a.tensors.size(), loaded);
    std::fflush(stdout);
  }
}

}  // namespace mtrain::train
