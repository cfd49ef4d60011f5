// `mtrain export`: weight conversion between mtrain checkpoints and Hugging
// Face model directories -- Megatron-SWIFT's `swift export --to_hf true` /
// `--to_mcore true` (megatron-compat.md, "Weight conversion"):
//
//   mtrain export --to_hf --load CKPT --output_dir HF_DIR [--ckpt_step N]
//                 [--max_shard_size 5GB] [--torch_dtype float32|bfloat16|float16]
//   mtrain export --to_mcore --model HF_DIR --output_dir CKPT
//   mtrain export --to_peft --load LORA_CKPT --output_dir PEFT_DIR [--ckpt_step N]
//
// A LoRA checkpoint goes --to_peft (its adapters as a Hugging Face PEFT
// directory, export_lora.h) or --to_hf --merge_lora true (W + scale·B·A);
// --adapter_load DIR merges a PEFT directory's or another LoRA checkpoint's
// adapters into --load's base instead.
//
// --to_hf reads every model tensor of the checkpoint whole (any saved TP/PP
// layout), its shape from the state's "model" (ModelMeta), and writes an HF
// directory (checkpoint/hf_model_dir.h); optimizer state is not exported.
// --to_mcore writes iteration 0 of an mtrain checkpoint with full, unsharded
// tensors from one process, which training then loads under any TP/PP.
// One process does the work; the output directory must be new or empty.
// Option errors are UsageError (exit 2), conversion errors CheckpointError (5).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/dtype.h"
#include "common/file_system.h"

namespace mtrain::exporting {

struct ExportOptions {
  enum class Direction { kNone, kToHf, kToMcore, kToPeft };
  Direction direction = Direction::kNone;
  std::string load;                                // --load / --mcore_model: the mtrain checkpoint directory (--to_hf)
  std::string model;                               // --model: the HF model directory (--to_mcore)
  std::string output_dir;                          // --output_dir / --save
  std::optional<int64_t> ckpt_step;                // --to_hf: this iteration instead of the tracker's
  int64_t max_shard_bytes = 5'000'000'000;         // --to_hf: --max_shard_size (transformers' 5GB)
  std::optional<checkpoint::StDType> torch_dtype;  // --to_hf; None = the checkpoint's params_dtype
  bool merge_lora = false;                         // --to_hf: merge the adapters into the weights
  std::string adapter_load;                        // --to_hf --merge_lora: adapters from here (PEFT dir or LoRA ckpt)
  bool help = false;
};

// Options as after `mtrain export` (either spelling, --x=v, booleans bare or
// with true/false). Throws UsageError naming the option for unknown options
// (with did-you-mean), missing or bad values, a missing or doubled
// direction, and options the chosen direction does not use.
ExportOptions parse_export_args(const std::vector<std::string>& args);
std::string export_help();

// Runs the conversion and prints what was written; returns 0.
int run_export(const ExportOptions& options, FileSystem& fs);

}  // namespace mtrain::exporting
