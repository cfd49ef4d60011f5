// Validation of the LoRA flags (--train_type lora). The target names
// themselves are resolved against the model by lib/lora when the model is
// built (still before training starts).
#include <fmt/format.h>

#include "common/errors.h"
#include "config/flags.h"
#include "config/validate_parts.h"

namespace mtrain::config::detail {

namespace {

// LoRA flags have no meaning in a full fine-tune: refuse them rather than ignore them.
void refuse_without_lora(const Args& a) {
  for (const char* name : {"lora_rank", "lora_alpha", "lora_dropout", "lora_bias", "use_rslora", "target_modules",
                           "target_regex", "modules_to_save", "adapter_load"}) {
    const FlagSpec& spec = *find_flag(name)->spec;
    if (!flag_has_default_value(spec, a))
      throw ConfigError(fmt::format("--{} applies only to LoRA training, but --train_type is {}", name, a.train_type),
                        "add --train_type lora (--tuner_type lora), or drop the flag");
  }
}

}  // namespace

void check_lora(Args& a) {
  if (a.train_type != "lora") {
    refuse_without_lora(a);
    return;
  }
  require_positive(a.lora_rank, "lora_rank");
  require_positive(a.lora_alpha, "lora_alpha");
  require_range(a.lora_dropout, 0.0, 1.0, false, "lora_dropout");
  if (!a.lr) a.lr = 1e-4;  // swift: 1e-4 for LoRA (1e-5 full, check_schedule)
}

}  // namespace mtrain::config::detail
