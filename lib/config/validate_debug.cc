// Validation of the precision-dump flags (precision_dump_args.h).
#include <fmt/format.h>

#include "common/errors.h"
#include "config/int_list.h"
#include "config/precision_dump_args.h"

namespace mtrain::config {

void check_precision_dump(const Args& a, int world_size, std::vector<std::string>& warnings) {
  const bool on = !a.precision_dump_path.empty();
  const char* other = !a.precision_dump_steps.empty()   ? "precision_dump_steps"
                      : !a.precision_dump_ranks.empty() ? "precision_dump_ranks"
                      : a.precision_dump_tensors        ? "precision_dump_tensors"
                      : a.precision_dump_level != "L1"  ? "precision_dump_level"
                                                        : nullptr;
  if (!on) {
    if (other)
      throw ConfigError(fmt::format("--{} needs --precision_dump_path", other),
                        "name the directory to dump to, e.g. --precision_dump_path dump");
    return;
  }
  const std::string& level = a.precision_dump_level;
  if (level != "L0" && level != "L1" && level != "mix")
    throw ConfigError(fmt::format("--precision_dump_level {}: unknown level", level),
                      "choose L0 (modules), L1 (ops) or mix (both)");
  for (int64_t s : parse_int_list(a.precision_dump_steps, "precision_dump_steps"))
    if (s < 1)
      throw ConfigError(fmt::format("--precision_dump_steps {}: iterations are numbered from 1", s),
                        "use the iteration numbers of the training log (msprobe's step 0 is iteration 1)");
  for (int64_t r : parse_int_list(a.precision_dump_ranks, "precision_dump_ranks"))
    if (r < 0 || r >= world_size)
      throw ConfigError(fmt::format("--precision_dump_ranks {}: no such rank in a world of {} rank{}", r, world_size,
                                    world_size == 1 ? "" : "s"),
                        fmt::format("ranks are 0..{}", world_size - 1));
  if (level == "L0") return;
  std::string off;
  if (a.bias_dropout_fusion) off += " --bias_dropout_fusion false";
  if (a.bias_swiglu_fusion) off += " --bias_swiglu_fusion false";
  if (a.cross_entropy_loss_fusion) off += " --cross_entropy_loss_fusion false";
  if (!off.empty())
    warnings.push_back(
        fmt::format("--precision_dump_level {}: fused ops are dumped as one record each (fused_by set), without "
                    "their inside; to see it, turn the fusions off:{}",
                    level, off));
}

}  // namespace mtrain::config
