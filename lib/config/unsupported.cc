// The one list of settings mtrain accepts by name but does not implement yet.
// A run that sets one of them to a value outside `supported` (or, when
// `supported` is empty, to anything but its default) stops with ConfigError
// instead of being silently ignored. Remove an entry when the feature lands.
#include <fmt/format.h>

#include <algorithm>

#include "common/errors.h"
#include "config/flags.h"
#include "config/validate.h"

namespace mtrain::config {

namespace {

struct Unsupported {
  std::string_view flag;
  std::vector<std::string_view> supported;  // values that work; empty = only the default
  std::string_view reason;
  std::string_view hint;
};

const std::vector<Unsupported>& unsupported_settings() {
  static const std::vector<Unsupported> list = {
      {"merge_lora",
       {"false"},
       "merging LoRA into the base weights (--merge_lora) is not supported yet",
       "leave --merge_lora false"},
      {"lora_dtype", {}, "--lora_dtype is not supported: adapters train in fp32 master precision", "leave it unset"},
      {"use_dora", {"false"}, "DoRA is not supported", "use plain LoRA (--use_dora false)"},
      {"lorap_lr_ratio", {}, "LoRA+ (--lorap_lr_ratio) is not supported", "leave it unset"},
      {"init_weights",
       {"true"},
       "only PEFT's default LoRA init (A Kaiming-uniform, B zero) is supported",
       "use --init_weights true"},
      {"position_embedding_type",
       {"learned_absolute", "rope"},
       "this position embedding is not supported",
       "use --position_embedding_type rope or learned_absolute"},
      {"overlap_moe_expert_parallel_comm",
       {"false"},
       "overlapping the expert-parallel all-to-all with compute is not modelled: the dry run's step time would "
       "not show it",
       "leave --overlap_moe_expert_parallel_comm false (the all-to-all is priced on the critical path)"},
      {"moe_enable_deepep",
       {"false"},
       "DeepEP's dispatch kernels (the flex dispatcher) are not supported",
       "use --moe_token_dispatcher_type alltoall or allgather and leave --moe_enable_deepep false"},
      {"attention_backend",
       {"flash", "unfused", "local", "auto"},
       "the fused (cuDNN) attention backend does not exist on the simulated NPU",
       "use --attention_backend flash or unfused"},
  };
  return list;
}

}  // namespace

void check_supported(const Args& args) {
  for (const auto& u : unsupported_settings()) {
    auto match = find_flag(u.flag);
    if (!match)
      throw Error(ExitCode::kInternal, fmt::format("unsupported-settings list names unknown flag {}", u.flag));
    const FlagSpec& spec = *match->spec;
    if (flag_has_default_value(spec, args)) continue;
    const std::string value = flag_value_text(spec, args);
    if (std::find(u.supported.begin(), u.supported.end(), value) != u.supported.end()) continue;
    throw ConfigError(fmt::format("--{} {}: {}", spec.name, value, u.reason), std::string(u.hint));
  }
}

}  // namespace mtrain::config
