// `mtrain export` options: parsing and help (export.h).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "checkpoint/hf_layout.h"
#include "common/errors.h"
#include "config/flags.h"
#include "export/export.h"

namespace mtrain::exporting {

namespace {

using Direction = ExportOptions::Direction;

constexpr const char* kUsage =
    "mtrain export --to_hf --load CKPT --output_dir HF_DIR [--ckpt_step N] [--max_shard_size 5GB] "
    "[--torch_dtype float32|bfloat16|float16]\n"
    "       mtrain export --to_mcore --model HF_DIR --output_dir CKPT\n"
    "       mtrain export --to_peft --load LORA_CKPT --output_dir PEFT_DIR [--ckpt_step N]\n"
    "       mtrain export --to_hf --merge_lora true --load CKPT [--adapter_load PEFT_DIR|LORA_CKPT] --output_dir "
    "HF_DIR";

// Every option and its aliases (normalized spelling); the first name is canonical.
const std::vector<std::vector<std::string>> kOptions = {
    {"to_hf"},
    {"to_mcore"},
    {"load", "mcore_model"},
    {"model"},
    {"output_dir", "save"},
    {"ckpt_step"},
    {"max_shard_size"},
    {"torch_dtype", "dtype"},
    {"help"},
    {"to_peft"},
    {"merge_lora"},
    {"adapter_load", "adapters", "mcore_adapters", "mcore_adapter"},
};

[[noreturn]] void usage(const std::string& what) { throw UsageError(what, std::string("usage: ") + kUsage); }

std::string canonical(const std::string& name) {
  for (const auto& names : kOptions)
    for (const std::string& n : names)
      if (n == name) return names.front();
  std::vector<std::string> all;
  for (const auto& names : kOptions) all.insert(all.end(), names.begin(), names.end());
  std::string msg = fmt::format("unknown option --{} for mtrain export", name);
  if (const std::string s = config::suggest_name(name, all); !s.empty()) msg += fmt::format("; did you mean --{}?", s);
  usage(msg);
}

// Reads the tokens of one option: `--x=v`, `--x v`, or a bare boolean.
struct Token {
  std::string name;                  // canonical
  std::optional<std::string> value;  // absent: a bare flag
};

Token next_token(const std::vector<std::string>& args, size_t& i, bool is_bool) {
  const std::string& a = args[i];
  if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
    if (a == "-h") return {"help", std::nullopt};
    usage(fmt::format("unexpected argument '{}' for mtrain export", a));
  }
  const size_t eq = a.find('=');
  Token t{canonical(config::normalize_flag_name(a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2))),
          std::nullopt};
  if (eq != std::string::npos) {
    t.value = a.substr(eq + 1);
  } else if (i + 1 < args.size() && (!is_bool || config::parse_truthy(args[i + 1]))) {
    if (!is_bool && args[i + 1].rfind("--", 0) == 0) usage(fmt::format("--{} needs a value", t.name));
    t.value = args[++i];
  } else if (!is_bool) {
    usage(fmt::format("--{} needs a value", t.name));
  }
  return t;
}

bool is_bool_option(const std::string& token) {
  const std::string name = config::normalize_flag_name(token.substr(2, token.find('=') - 2));
  return name == "to_hf" || name == "to_mcore" || name == "to_peft" || name == "merge_lora" || name == "help";
}

bool truthy(const Token& t) {
  if (!t.value) return true;
  const auto b = config::parse_truthy(*t.value);
  if (!b) usage(fmt::format("--{}: {}", t.name, config::truthy_error(*t.value)));
  return *b;
}

int64_t parse_step(const std::string& v) {
  int64_t n = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 0)
    usage(fmt::format("--ckpt_step {}: expected an iteration number (>= 0)", v));
  return n;
}

checkpoint::StDType parse_dtype(const std::string& v) {
  if (v == "float32") return checkpoint::StDType::kF32;
  if (v == "bfloat16") return checkpoint::StDType::kBF16;
  if (v == "float16") return checkpoint::StDType::kF16;
  usage(fmt::format("--torch_dtype {}: expected float32, bfloat16 or float16", v));
}

void set_direction(ExportOptions& o, Direction d, bool on) {
  if (!on) return;
  if (o.direction != Direction::kNone && o.direction != d)
    usage("give one direction (--to_hf, --to_mcore or --to_peft), not both");
  o.direction = d;
}

const char* direction_name(Direction d) {
  return d == Direction::kToHf ? "--to_hf" : d == Direction::kToMcore ? "--to_mcore" : "--to_peft";
}

// Everything given must be used by the chosen direction; everything needed must be given.
void check_complete(const ExportOptions& o, const std::vector<std::string>& given) {
  if (o.direction == Direction::kNone)
    usage("say which way to convert: --to_hf or --to_mcore (or --to_peft for a LoRA adapter)");
  const std::map<Direction, std::vector<std::string>> uses = {
      {Direction::kToHf,
       {"load", "model", "ckpt_step", "max_shard_size", "torch_dtype", "merge_lora", "adapter_load", "output_dir"}},
      {Direction::kToMcore, {"model", "output_dir"}},
      {Direction::kToPeft, {"load", "ckpt_step", "output_dir"}}};
  const std::vector<std::string>& allowed = uses.at(o.direction);
  for (const std::string& name : given) {
    if (name == "help" || name == "to_hf" || name == "to_mcore" || name == "to_peft") continue;
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      usage(fmt::format("--{} does not apply to {}", name, direction_name(o.direction)));
  }
  const bool hf_base = o.direction == Direction::kToHf && !o.model.empty();  // merge into an HF model
  if (hf_base && (!o.load.empty() || o.adapter_load.empty() || o.ckpt_step))
    usage(
        "--to_hf --model HF_DIR merges an adapter into an HF model: give --merge_lora true --adapter_load DIR, "
        "and no --load / --ckpt_step");
  if (o.direction != Direction::kToMcore && !hf_base && o.load.empty())
    usage(fmt::format("{} needs --load <mtrain checkpoint directory>", direction_name(o.direction)));
  if (o.direction == Direction::kToMcore && o.model.empty())
    usage("--to_mcore needs --model <Hugging Face model directory>");
  if (!o.adapter_load.empty() && !o.merge_lora)
    usage("--adapter_load needs --merge_lora true (mtrain export writes the merged model)");
  if (o.output_dir.empty()) usage("--output_dir is required");
}

}  // namespace

ExportOptions parse_export_args(const std::vector<std::string>& args) {
  ExportOptions o;
  std::vector<std::string> given;
  for (size_t i = 0; i < args.size(); ++i) {
    const Token t = next_token(args, i, args[i].rfind("--", 0) == 0 && is_bool_option(args[i]));
    given.push_back(t.name);
    if (t.name == "help") {
      o.help = truthy(t);
    } else if (t.name == "to_hf") {
      set_direction(o, Direction::kToHf, truthy(t));
    } else if (t.name == "to_mcore") {
      set_direction(o, Direction::kToMcore, truthy(t));
    } else if (t.name == "to_peft") {
      set_direction(o, Direction::kToPeft, truthy(t));
    } else if (t.name == "merge_lora") {
      o.merge_lora = truthy(t);
    } else if (t.value->empty()) {
      usage(fmt::format("--{} must not be empty", t.name));
    } else if (t.name == "load") {
      o.load = *t.value;
    } else if (t.name == "adapter_load") {
      o.adapter_load = *t.value;
    } else if (t.name == "model") {
      o.model = *t.value;
    } else if (t.name == "output_dir") {
      o.output_dir = *t.value;
    } else if (t.name == "ckpt_step") {
      o.ckpt_step = parse_step(*t.value);
    } else if (t.name == "torch_dtype") {
      o.torch_dtype = parse_dtype(*t.value);
    } else {  // max_shard_size
      try {
        o.max_shard_bytes = checkpoint::parse_shard_size(*t.value);
      } catch (const ConfigError& e) {
        throw UsageError(std::string("--") + e.what(), e.hint());
      }
    }
  }
  if (!o.help) check_complete(o, given);
  return o;
}

std::string export_help() {
  return fmt::format(
      "usage: {}\n\n"
      "Converts weights between mtrain checkpoints and Hugging Face model directories (Llama, Qwen2),\n"
      "like Megatron-SWIFT's `swift export --to_hf true` / `--to_mcore true`.\n\n"
      "  --to_hf             checkpoint -> HF directory (config.json, model*.safetensors[, index])\n"
      "  --to_mcore          HF directory -> mtrain checkpoint at iteration 0 (full tensors: loads under any "
      "TP/PP)\n"
      "  --to_peft           LoRA checkpoint -> Hugging Face PEFT adapter (adapter_config.json, "
      "adapter_model.safetensors)\n"
      "  --merge_lora B      --to_hf of a LoRA checkpoint: write W + scale*B*A (required for one)\n"
      "  --adapter_load DIR  with --merge_lora: merge this PEFT adapter or LoRA checkpoint into the base\n"
      "                      (--load's checkpoint, or the HF directory --model names)\n"
      "                      (aliases --adapters, --mcore_adapters)\n"
      "  --load DIR          mtrain checkpoint directory (alias --mcore_model); its latest iteration\n"
      "  --ckpt_step N       export iteration N instead of the latest\n"
      "  --model DIR         Hugging Face model directory\n"
      "  --output_dir DIR    where to write (alias --save); must be new or empty\n"
      "  --max_shard_size S  largest safetensors file, e.g. 5GB (default), 500MB, 2GiB\n"
      "  --torch_dtype T     float32, bfloat16 or float16 (default: the checkpoint's params_dtype)\n\n"
      "Optimizer state is not exported. Exit codes: 2 bad options, 5 checkpoint / model directory errors.\n",
      kUsage);
}

}  // namespace mtrain::exporting
