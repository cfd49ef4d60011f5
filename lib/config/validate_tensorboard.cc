// Validation of the TensorBoard flags (tensorboard_args.h). swift v4 takes
// --report_to as a list of integrations (tensorboard, wandb, swanlab);
// Hugging Face's `none` and `all` spellings are accepted too.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "common/errors.h"
#include "config/tensorboard_args.h"
#include "config/validate_parts.h"

namespace mtrain::config {

void check_tensorboard(Args& a) {
  std::vector<std::string> to;
  for (const std::string& item : a.report_to) {
    if (item == "wandb" || item == "swanlab")
      throw ConfigError(
          fmt::format("--report_to {}: {} needs a network connection, which mtrain does not use", item, item),
          "use --report_to tensorboard and open the logs with `tensorboard --logdir " + tensorboard_dir(a) + "`");
    if (item != "tensorboard" && item != "none" && item != "all")
      throw ConfigError(fmt::format("--report_to {}: unknown integration", item),
                        "choose from tensorboard, none, all (wandb and swanlab need a network)");
    const std::string name = item == "all" ? "tensorboard" : item;
    if (std::find(to.begin(), to.end(), name) == to.end()) to.push_back(name);
  }
  if (to.size() > 1 && std::find(to.begin(), to.end(), "none") != to.end())
    throw ConfigError(
        fmt::format("--report_to {}: none cannot be combined with another integration", fmt::join(a.report_to, " ")),
        "pass --report_to none alone, or leave none out");
  if (to.empty()) to.push_back("none");  // an empty list reports nowhere, as HF's []
  a.report_to = to;
  detail::require_positive(a.tensorboard_log_interval, "tensorboard_log_interval");
  detail::require_positive(a.tensorboard_queue_size, "tensorboard_queue_size");
  if (a.tensorboard_dir && a.tensorboard_dir->empty())
    throw ConfigError("--tensorboard_dir must not be empty", "leave it unset for <output_dir>/runs");
}

bool tensorboard_enabled(const Args& a) {
  return std::find(a.report_to.begin(), a.report_to.end(), "tensorboard") != a.report_to.end();
}

std::string tensorboard_dir(const Args& a) {
  if (a.tensorboard_dir) return *a.tensorboard_dir;
  return (std::filesystem::path(a.output_dir) / "runs").string();
}

}  // namespace mtrain::config
