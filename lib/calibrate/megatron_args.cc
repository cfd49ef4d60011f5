// Megatron's arguments block onto mtrain's flags (megatron_args.h has the rules).
#include "calibrate/megatron_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <utility>

#include "common/errors.h"
#include "config/flags.h"

namespace mtrain::calibrate {

namespace {

constexpr std::string_view kBegin = "------------------------ arguments ------------------------";
constexpr std::string_view kEnd = "-------------------- end of arguments ---------------------";

constexpr std::string_view kPath = "a file or directory path";
constexpr std::string_view kData = "the data pipeline (a dry run reads no data; the vocabulary is padded_vocab_size)";
constexpr std::string_view kCheckpoint = "checkpointing (outside the iterations measured)";
constexpr std::string_view kLogging = "logging, evaluation or profiling (outside the step priced)";
constexpr std::string_view kProcess = "process bookkeeping (ranks, timeouts, fault handling, initialization)";
constexpr std::string_view kDerived = "derived by Megatron from other arguments, which are read";

// Megatron's arguments that do not change the step mtrain prices. mtrain
// has flags for some of them (save, load, eval_interval, ...): a dry run
// needs none, and they are not passed on.
constexpr std::pair<std::string_view, std::string_view> kBookkeeping[] = {
    {"data_path", kData},
    {"train_data_path", kData},
    {"valid_data_path", kData},
    {"test_data_path", kData},
    {"data_cache_path", kData},
    {"data_args_path", kData},
    {"per_split_data_args_path", kData},
    {"split", kData},
    {"mock_data", kData},
    {"vocab_file", kData},
    {"merge_file", kData},
    {"tokenizer_type", kData},
    {"tokenizer_model", kData},
    {"vocab_extra_ids", kData},
    {"num_workers", kData},
    {"dataloader_type", kData},
    {"reset_position_ids", kData},
    {"reset_attention_mask", kData},
    {"eod_mask_loss", kData},
    {"seed", kData},
    {"data_parallel_random_init", kData},
    {"save", kPath},
    {"load", kPath},
    {"pretrained_checkpoint", kPath},
    {"tensorboard_dir", kPath},
    {"wandb_save_dir", kPath},
    {"save_interval", kCheckpoint},
    {"no_save_optim", kCheckpoint},
    {"no_save_rng", kCheckpoint},
    {"no_load_optim", kCheckpoint},
    {"no_load_rng", kCheckpoint},
    {"finetune", kCheckpoint},
    {"async_save", kCheckpoint},
    {"use_dist_ckpt", kCheckpoint},
    {"auto_detect_ckpt_format", kCheckpoint},
    {"ckpt_fully_parallel_load", kCheckpoint},
    {"ckpt_assume_constant_structure", kCheckpoint},
    {"exit_on_missing_checkpoint", kCheckpoint},
    {"use_checkpoint_args", kCheckpoint},
    {"use_checkpoint_opt_param_scheduler", kCheckpoint},
    {"override_opt_param_scheduler", kCheckpoint},
    {"log_interval", kLogging},
    {"log_params_norm", kLogging},
    {"log_num_zeros_in_grad", kLogging},
    {"log_throughput", kLogging},
    {"log_timers_to_tensorboard", kLogging},
    {"log_validation_ppl_to_tensorboard", kLogging},
    {"log_memory_to_tensorboard", kLogging},
    {"log_world_size_to_tensorboard", kLogging},
    {"log_loss_scale_to_tensorboard", kLogging},
    {"log_progress", kLogging},
    {"tensorboard_log_interval", kLogging},
    {"tensorboard_queue_size", kLogging},
    {"timing_log_level", kLogging},
    {"barrier_with_L1_time", kLogging},
    {"wandb_project", kLogging},
    {"wandb_exp_name", kLogging},
    {"eval_interval", kLogging},
    {"eval_iters", kLogging},
    {"exit_interval", kLogging},
    {"exit_duration_in_mins", kLogging},
    {"profile", kLogging},
    {"profile_step_start", kLogging},
    {"profile_step_end", kLogging},
    {"profile_ranks", kLogging},
    {"rank", kProcess},
    {"local_rank", kProcess},
    {"distributed_backend", kProcess},
    {"distributed_timeout_minutes", kProcess},
    {"exit_signal_handler", kProcess},
    {"adlr_autoresume", kProcess},
    {"inprocess_active_world_size", kProcess},
    {"use_cpu_initialization", kProcess},
    {"init_method_std", kProcess},
    {"manual_gc", kProcess},
    {"manual_gc_interval", kProcess},
    {"check_for_nan_in_loss_and_grad", kProcess},
    {"params_dtype", kDerived},
    {"padded_vocab_size", kDerived},
    {"data_parallel_size", kDerived},
    {"encoder_num_layers", kDerived},
    {"encoder_seq_length", kDerived},
    {"transformer_pipeline_model_parallel_size", kDerived},
    {"consumed_train_samples", kDerived},
    {"consumed_valid_samples", kDerived},
    {"iteration", kDerived},
    {"variable_seq_lengths", kDerived},
    {"virtual_pipeline_model_parallel_size", kDerived},  // from num_layers_per_virtual_pipeline_stage
    // mtrain reduces the gradients in fp32 (the main grads) whatever it says; Megatron forces it on with
    // bf16. (Off with fp16, Megatron reduces 16-bit gradients: mtrain prices fp32, a known difference.)
    {"accumulate_allreduce_grads_in_fp32", "mtrain's step reduces the gradients in fp32 (main grads) already"},
    // The kernel implementation: the profile's efficiencies are what a
    // calibration fits, whichever library runs the kernels.
    {"transformer_impl", "the kernel library (its speed is what the fitted efficiencies measure)"},
};

bool not_in_use(std::string_view v) {
  return v == "None" || v == "False" || v == "0" || v == "0.0" || v == "[]" || v.empty();
}

bool same_value(std::string_view a, std::string_view b) {
  if (a == b) return true;
  char* end_a = nullptr;
  char* end_b = nullptr;
  const std::string sa(a), sb(b);
  const double x = std::strtod(sa.c_str(), &end_a), y = std::strtod(sb.c_str(), &end_b);
  return !sa.empty() && !sb.empty() && *end_a == '\0' && *end_b == '\0' && x == y;
}

// Python's str() of a value as mtrain's value tokens: True/False -> true/false,
// "[a, 'b']" -> a b, "AttnBackend.flash" -> flash.
std::vector<std::string> value_tokens(const std::string& v) {
  if (v == "True") return {"true"};
  if (v == "False") return {"false"};
  if (v.rfind("AttnBackend.", 0) == 0) return {v.substr(12)};
  if (v.size() < 2 || v.front() != '[' || v.back() != ']') return {v};
  std::vector<std::string> items;
  std::string item;
  const auto flush = [&] {
    const size_t b = item.find_first_not_of(" '\""), e = item.find_last_not_of(" '\"");
    if (b != std::string::npos) items.push_back(item.substr(b, e - b + 1));
    item.clear();
  };
  for (char c : v.substr(1, v.size() - 2)) {
    if (c == ',')
      flush();
    else
      item += c;
  }
  flush();
  return items;
}

const MegatronArgument* find(const std::vector<MegatronArgument>& args, std::string_view name) {
  for (const MegatronArgument& a : args)
    if (a.name == name) return &a;
  return nullptr;
}

int positive_int(const MegatronArgument& a, const std::string& file) {
  int n = 0;
  const auto [p, ec] = std::from_chars(a.value.data(), a.value.data() + a.value.size(), n);
  if (ec != std::errc() || p != a.value.data() + a.value.size() || n < 1)
    throw ConfigError(fmt::format("{}:{}: {} '{}' is not a positive integer", file, a.line, a.name, a.value));
  return n;
}

// The translated arguments (megatron_args.h); false when `a` is not one of them.
bool translate(const MegatronArgument& a, const std::vector<MegatronArgument>& all, const std::string& file,
               MappedArguments& out) {
  const auto push = [&](std::string flag, std::vector<std::string> values) {
    out.flags.push_back(std::move(flag));
    out.flag_lines.push_back(a.line);
    for (std::string& v : values) {
      out.flags.push_back(std::move(v));
      out.flag_lines.push_back(a.line);
    }
  };
  if (a.name == "world_size") {
    out.world_size = positive_int(a, file);
  } else if (a.name == "padded_vocab_size") {
    const MegatronArgument* vocab = find(all, "vocab_size");
    if (!vocab || vocab->value == "None") push("--vocab_size", {a.value});
  } else if (a.name == "recompute_granularity" && a.value == "None") {
    push("--recompute_granularity", {"none"});
  } else if (a.name == "cp_comm_type") {
    const MegatronArgument* cp = find(all, "context_parallel_size");
    if (!cp || cp->value == "1") return true;  // no CP: the setting is not used
    const std::vector<std::string> v = value_tokens(a.value);
    if (v.size() != 1 || (v[0] != "p2p" && v[0] != "a2a"))
      throw ConfigError(fmt::format("{}:{}: cp_comm_type {}: mtrain models p2p (the ring) and a2a (Ulysses) only", file,
                                    a.line, a.value),
                        "calibrate on runs with --cp-comm-type p2p or a2a");
    push("--context_parallel_algo", {v[0] == "p2p" ? "megatron_cp_algo" : "ulysses_cp_algo"});
  } else if (a.name == "bias_gelu_fusion" || a.name == "bias_swiglu_fusion") {
    // Both print; mtrain has one flag for the MLP's bias-activation fusion: the model's activation picks.
    const MegatronArgument* swiglu = find(all, "swiglu");
    const bool is_swiglu = swiglu && swiglu->value == "True";
    if ((a.name == "bias_swiglu_fusion") == is_swiglu) push("--bias_swiglu_fusion", value_tokens(a.value));
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string_view bookkeeping_reason(std::string_view name) {
  for (const auto& [n, why] : kBookkeeping)
    if (n == name) return why;
  return {};
}

std::vector<MegatronArgument> read_arguments_block(const std::vector<std::string>& lines, const std::string& file) {
  std::vector<MegatronArgument> out;
  size_t i = 0;
  while (i < lines.size() && lines[i].find(kBegin) == std::string::npos) ++i;
  if (i == lines.size()) return out;
  const int begin_line = static_cast<int>(i) + 1;
  for (++i; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.find(kEnd) != std::string::npos) return out;
    const int line = static_cast<int>(i) + 1;
    // "  name <dots> value": the name, one space, the dots (none for a name of 48+
    // characters), one space, str(value) (empty for an empty string).
    const size_t name_begin = l.find_first_not_of(' ');
    const size_t name_end = name_begin == std::string::npos ? name_begin : l.find(' ', name_begin);
    if (name_begin != 2 || name_end == std::string::npos)
      throw DataError(fmt::format("{}:{}: not an argument line of Megatron's arguments block: '{}'", file, line, l),
                      "the block holds one \"  name ...... value\" line per argument, as Megatron prints it");
    size_t v = name_end + 1;
    while (v < l.size() && l[v] == '.') ++v;
    if (v < l.size() && l[v] == ' ') ++v;
    std::string value = l.substr(std::min(v, l.size()));
    while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) value.pop_back();
    out.push_back({l.substr(name_begin, name_end - name_begin), value, line});
  }
  throw DataError(fmt::format("{}:{}: Megatron's arguments block has no end line", file, begin_line),
                  fmt::format("the block ends with '{}'; give the whole log", kEnd));
}

MappedArguments map_megatron_arguments(const std::vector<MegatronArgument>& args, const std::string& file) {
  MappedArguments out;
  for (const MegatronArgument& a : args) {
    if (!bookkeeping_reason(a.name).empty()) {
      ++out.ignored;
      if (a.name == "padded_vocab_size") translate(a, args, file, out);
      continue;
    }
    if (translate(a, args, file, out)) continue;
    if (const auto flag = config::find_flag(a.name); flag && !flag->negated) {
      if (a.value == "None") continue;  // unset: mtrain's default (Megatron's, where they differ, set explicitly)
      std::vector<std::string> values = value_tokens(a.value);
      if (values.empty()) continue;  // an empty list: the default
      out.flags.push_back("--" + std::string(flag->spec->name));
      out.flag_lines.push_back(a.line);
      for (std::string& v : values) {
        out.flags.push_back(std::move(v));
        out.flag_lines.push_back(a.line);
      }
      continue;
    }
    if (not_in_use(a.value) || same_value(a.value, megatron_default(a.name))) {
      ++out.ignored;
      continue;
    }
    throw ConfigError(
        fmt::format("{}:{}: Megatron argument '{}' is {} (not its default), and mtrain has no such setting: it may "
                    "change the step, which mtrain cannot price",
                    file, a.line, a.name, a.value),
        "calibrate on runs without it; if it does not change the step time, add it to the bookkeeping table of "
        "lib/calibrate/megatron_args.cc");
  }
  return out;
}

}  // namespace mtrain::calibrate
