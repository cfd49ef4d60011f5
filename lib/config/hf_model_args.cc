// `--model <dir>`: the model flags a Hugging Face config.json implies, below
// every other source, and the check that no source contradicts the shape.
#include <fmt/format.h>

#include <filesystem>

#include "common/errors.h"
#include "config/hf_model_config.h"
#include "config/merge.h"

namespace mtrain::config::detail {

namespace {

const FlagSpec& spec_of(const std::string& flag) {
  const auto match = find_flag(flag);
  if (!match) throw Error(ExitCode::kInternal, fmt::format("--model: no flag named {}", flag));
  return *match->spec;
}

}  // namespace

Args with_hf_model(const std::string& dir, const std::function<void(Args&)>& apply_sources,
                   std::vector<std::string>& warnings) {
  const std::string config = (std::filesystem::path(dir) / "config.json").string();
  const std::vector<HfImpliedFlag> implied = hf_implied_flags(read_hf_model_dir_config(dir));
  Args from_model;  // the model's values alone
  for (const HfImpliedFlag& f : implied) {
    RawValue value{{f.value}};
    if (f.value == "None")
      value = RawValue{.items = {}, .null = true};  // an optional flag left unset (no shared expert)
    if (auto e = apply_flag(spec_of(f.flag), false, value, from_model); !e.empty())
      throw ConfigError(
          fmt::format("{}: field '{}' {} cannot be used as --{}: {}", config, f.hf_field, f.hf_value, f.flag, e));
  }
  Args args = from_model;
  apply_sources(args);
  for (const HfImpliedFlag& f : implied) {
    const FlagSpec& spec = spec_of(f.flag);
    const std::string set = flag_value_text(spec, args), model = flag_value_text(spec, from_model);
    if (set == model) continue;
    const std::string source = fmt::format("{} has {} {} (--{} {})", config, f.hf_field, f.hf_value, f.flag, model);
    if (f.shape) {
      throw ConfigError(fmt::format("--{} {} contradicts --model {}: {}", f.flag, set, dir, source),
                        fmt::format("the model's shape comes from its config.json: drop --{} (from the command line, "
                                    "the YAML config or --model_preset)",
                                    f.flag));
    }
    warnings.push_back(fmt::format("--{} {} overrides --model {}: {}", f.flag, set, dir, source));
  }
  const std::string tokenizer = (std::filesystem::path(dir) / "tokenizer.json").string();
  std::error_code ec;
  if (!args.tokenizer && std::filesystem::is_regular_file(tokenizer, ec)) args.tokenizer = tokenizer;
  const std::string sentencepiece = (std::filesystem::path(dir) / "tokenizer.model").string();  // Llama-2 family
  if (!args.tokenizer && std::filesystem::is_regular_file(sentencepiece, ec)) args.tokenizer = sentencepiece;
  return args;
}

}  // namespace mtrain::config::detail
