// `mtrain export --to_peft` (export_lora.h); the adapters themselves are train/adapters.h.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "export/export_lora.h"

namespace mtrain::exporting {

int export_to_peft(const ExportOptions& o, FileSystem& fs) {
  checkpoint::require_new_output_dir(fs, o.output_dir);
  const checkpoint::CheckpointReader r = checkpoint::CheckpointReader::open(fs, o.load, o.ckpt_step);
  const nlohmann::json state = nlohmann::json::parse(r.state_json());
  if (!state.contains("model"))
    throw CheckpointError(fmt::format("{}: the checkpoint records no model shape (state key \"model\")", r.path()),
                          "it was not written by a training run of this mtrain version");
  const checkpoint::HfModelShape shape =
      checkpoint::hf_shape_from_meta(checkpoint::model_meta_from_json(state.at("model"), r.path()));
  const std::optional<train::ExportAdapters> a = train::checkpoint_adapters(r, shape);
  if (!a)
    throw CheckpointError(fmt::format("{}: not a LoRA checkpoint (the run's --train_type is not lora)", r.path()),
                          "export a full model with --to_hf");
  fmt::print(" loading LoRA adapters from {} at iteration {:7d}: rank {}, alpha {}, {} tensors\n", o.load,
             r.iteration(), a->config.r, a->config.lora_alpha, a->tensors.size());
  std::fflush(stdout);
  const int64_t bytes = checkpoint::write_peft_adapter(fs, o.output_dir, shape, a->config, a->tensors);
  fmt::print("  successfully saved PEFT adapter to {}: {}, {}, {} bytes\n", o.output_dir, checkpoint::kPeftConfigFile,
             checkpoint::kPeftWeightsFile, bytes);
  return 0;
}

}  // namespace mtrain::exporting
