// `--adapter_load DIR` (Megatron-SWIFT's --adapter_load / --mcore_adapter):
// a --train_type lora run starts its adapters (and modules_to_save) from a
// Hugging Face PEFT directory or from an mtrain LoRA checkpoint, on top of
// the base weights loaded before (--model, --load --finetune, or the init).
#pragma once

#include <string>

#include "common/file_system.h"
#include "train/checkpointing.h"

namespace mtrain::train {

// Overwrites this rank's blocks of every adapter / modules_to_save parameter
// the directory holds; the optimizer's master copy follows. Adapted linears
// the directory does not cover keep their initial values (B = 0: no delta).
// Throws ConfigError (exit 3) when the run's LoRA settings cannot hold the
// adapter (rank, alpha, rsLoRA, a target or saved module the run does not
// train), CheckpointError (exit 5) for a bad directory or a base it does not fit.
void load_adapters(FileSystem& fs, const std::string& dir, TrainingState& t);

}  // namespace mtrain::train
