// LoRA adapters as data: a checkpoint's (a --train_type lora run's) or a
// Hugging Face PEFT directory's, and the merge W + scale · B · A on the way
// into base weights. One module for the three readers — training's
// --adapter_load, infer's --adapters and export's --to_peft / --merge_lora —
// so export and the loop never import each other.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/hf_model_dir.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"

namespace mtrain::train {

// Adapter, modules_to_save and trained-bias tensors (mtrain names) and their settings.
struct ExportAdapters {
  checkpoint::PeftLoraConfig config;
  std::map<std::string, std::vector<float>> tensors;
  float scale() const;  // alpha / r, alpha / sqrt(r) with rsLoRA
};

// The adapters of a checkpoint of a --train_type lora run (its state's "args"),
// nullopt for a full-training checkpoint. Throws CheckpointError naming the
// checkpoint when the args are missing or the adapter shapes disagree with them.
// An MoE model's expert adapters are per expert (local_experts.E.linear_fc1
// .lora_A ...), each merged into its own expert's weight like a dense linear's.
std::optional<ExportAdapters> checkpoint_adapters(const checkpoint::CheckpointReader& r,
                                                  const checkpoint::HfModelShape& s);

// The adapters in `dir`: a PEFT directory (adapter_config.json) or an mtrain
// LoRA checkpoint. Throws CheckpointError naming `what` (the flag) and the
// directory for anything else.
ExportAdapters read_adapters(FileSystem& fs, const std::string& dir, const checkpoint::HfModelShape& s,
                             const std::string& what);

// True for the tensors only a LoRA run has (lora_A / lora_B).
bool is_adapter_tensor(const std::string& name);

// `fetch` with the adapters merged: W + scale · B · A for every adapted
// linear, modules_to_save (and trained biases) replaced by the adapter's.
checkpoint::HfTensorFetch merging_fetch(checkpoint::HfTensorFetch fetch, const ExportAdapters& adapters);

}  // namespace mtrain::train
