// The TensorBoard flags (--report_to, --tensorboard_dir, --tensorboard_*,
// --log_*_to_tensorboard): validate() calls check_tensorboard; the trainer's
// TensorBoard hook (observe/tensorboard_hook.h) is installed when
// tensorboard_enabled.
#pragma once

#include <string>

#include "config/args.h"

namespace mtrain::config {

// Normalizes --report_to (all -> tensorboard) and checks the intervals.
// ConfigError (exit 3) for wandb / swanlab (they need a network), an unknown
// integration, or none mixed with another.
void check_tensorboard(Args& a);
bool tensorboard_enabled(const Args& a);
// --tensorboard_dir, or swift's default <output_dir>/runs.
std::string tensorboard_dir(const Args& a);

}  // namespace mtrain::config
