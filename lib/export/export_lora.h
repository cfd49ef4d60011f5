// `mtrain export`'s LoRA side (export.h): --to_peft writes a checkpoint's
// adapters as a Hugging Face PEFT directory. Reading adapters and merging
// them (--to_hf --merge_lora true) is train/adapters.h, shared with training
// and infer.
#pragma once

#include "export/export.h"
#include "train/adapters.h"

namespace mtrain::exporting {

int export_to_peft(const ExportOptions& o, FileSystem& fs);

}  // namespace mtrain::exporting
