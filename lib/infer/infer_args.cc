// `mtrain infer` options: parsing and help (infer.h). Names and defaults are
// ms-swift's InferArguments / RequestConfig (v3 and v4 spellings).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "common/errors.h"
#include "config/flags.h"
#include "infer/infer.h"

namespace mtrain::infer {

namespace {

constexpr const char* kUsage =
    "mtrain infer (--model HF_DIR | --load CKPT_DIR) [--adapters DIR] [--merge_lora true] [--template T] [--system S] "
    "[--max_new_tokens N]\n"
    "       [--temperature T] [--top_k K] [--top_p P] [--repetition_penalty R] [--seed S] [--stream true|false]\n"
    "       [--val_dataset FILE... | --load_data_args true] [--result_path FILE.jsonl]";

// Every option and its aliases (normalized spelling); the first name is canonical.
const std::vector<std::vector<std::string>> kOptions = {
    {"model"},
    {"load", "mcore_model"},
    {"ckpt_step"},
    {"tokenizer", "tokenizer_model"},
    {"template"},
    {"system"},
    {"tensor_model_parallel_size", "tp"},
    {"pipeline_model_parallel_size", "pp"},
    {"device_profile"},
    {"num_threads"},
    {"max_new_tokens", "max_tokens"},
    {"temperature"},
    {"top_k"},
    {"top_p"},
    {"repetition_penalty"},
    {"seed"},
    {"stream"},
    {"val_dataset"},
    {"load_data_args"},
    {"result_path"},
    {"adapters"},
    {"merge_lora"},
    {"help"},
};
const std::vector<std::string> kBoolOptions = {"stream", "load_data_args", "merge_lora", "help"};

[[noreturn]] void usage(const std::string& what) { throw UsageError(what, std::string("usage: ") + kUsage); }

std::string canonical(const std::string& name) {
  for (const auto& names : kOptions)
    if (std::find(names.begin(), names.end(), name) != names.end()) return names.front();
  std::vector<std::string> all;
  for (const auto& names : kOptions) all.insert(all.end(), names.begin(), names.end());
  std::string msg = fmt::format("unknown option --{} for mtrain infer", name);
  if (const std::string s = config::suggest_name(name, all); !s.empty()) msg += fmt::format("; did you mean --{}?", s);
  usage(msg);
}

bool is_bool(const std::string& name) {
  return std::find(kBoolOptions.begin(), kBoolOptions.end(), name) != kBoolOptions.end();
}

// One option: its canonical name and values (`--x=v`, `--x v`, `--x v1 v2` for
// --val_dataset and --adapters, a bare boolean).
struct Token {
  std::string name;
  std::vector<std::string> values;
};

Token next_token(const std::vector<std::string>& args, size_t& i) {
  const std::string& a = args[i];
  if (a == "-h") return {"help", {}};
  if (a.size() < 3 || a.compare(0, 2, "--") != 0) usage(fmt::format("unexpected argument '{}' for mtrain infer", a));
  const size_t eq = a.find('=');
  Token t{canonical(config::normalize_flag_name(a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2))),
          {}};
  if (eq != std::string::npos) {
    t.values.push_back(a.substr(eq + 1));
    return t;
  }
  const bool list = t.name == "val_dataset" || t.name == "adapters";
  while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
    if (is_bool(t.name) && !config::parse_truthy(args[i + 1])) break;
    t.values.push_back(args[++i]);
    if (!list) break;
  }
  if (t.values.empty() && !is_bool(t.name)) usage(fmt::format("--{} needs a value", t.name));
  return t;
}

bool truthy(const Token& t) {
  if (t.values.empty()) return true;
  const auto b = config::parse_truthy(t.values[0]);
  if (!b) usage(fmt::format("--{}: {}", t.name, config::truthy_error(t.values[0])));
  return *b;
}

template <class T>
T number(const Token& t, T lo, const char* expect) {
  T v{};
  const std::string& s = t.values[0];
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !(v >= lo))
    usage(fmt::format("--{} {}: expected {}", t.name, s, expect));
  return v;
}

void set_option(InferOptions& o, const Token& t) {
  const std::string& n = t.name;
  if (n == "help") return void(o.help = truthy(t));
  if (n == "stream") return void(o.stream = truthy(t));
  if (n == "load_data_args") return void(o.load_data_args = truthy(t));
  if (n == "merge_lora") return void(o.merge_lora = truthy(t));
  const std::string& v = t.values[0];
  if (v.empty()) usage(fmt::format("--{} must not be empty", n));
  if (n == "model") o.model = v;
  if (n == "load") o.load = v;
  if (n == "tokenizer") o.tokenizer = v;
  if (n == "template") o.template_name = v;
  if (n == "system") o.system = v;
  if (n == "device_profile") o.device_profile = v;
  if (n == "result_path") o.result_path = v;
  if (n == "val_dataset") o.val_dataset = t.values;
  if (n == "adapters") o.adapters = t.values;
  if (n == "ckpt_step") o.ckpt_step = number<int>(t, 0, "an iteration number (>= 0)");
  if (n == "num_threads") o.num_threads = number<int>(t, 1, "a thread count (>= 1)");
  if (n == "tensor_model_parallel_size") o.tensor_model_parallel_size = number<int>(t, 1, "a size (>= 1)");
  if (n == "pipeline_model_parallel_size") o.pipeline_model_parallel_size = number<int>(t, 1, "a size (>= 1)");
  if (n == "max_new_tokens") o.max_new_tokens = number<int64_t>(t, 1, "a token count (>= 1)");
  if (n == "temperature") o.temperature = number<double>(t, 0.0, "a temperature (>= 0; 0 is greedy)");
  if (n == "top_k") o.top_k = number<int>(t, 0, "a count (>= 0; 0 turns top-k off)");
  if (n == "top_p") {
    o.top_p = number<double>(t, 0.0, "a probability in (0, 1]");
    if (!(*o.top_p > 0 && *o.top_p <= 1)) usage(fmt::format("--top_p {}: expected a probability in (0, 1]", v));
  }
  if (n == "repetition_penalty") {
    o.repetition_penalty = number<double>(t, 0.0, "a penalty > 0 (1 is off)");
    if (!(*o.repetition_penalty > 0)) usage(fmt::format("--repetition_penalty {}: expected a penalty > 0", v));
  }
  if (n == "seed") o.seed = number<int>(t, 0, "a seed (>= 0)");
}

}  // namespace

InferOptions parse_infer_args(const std::vector<std::string>& args) {
  InferOptions o;
  for (size_t i = 0; i < args.size(); ++i) set_option(o, next_token(args, i));
  if (o.help) return o;
  // swift takes a list; summing several adapters' deltas (PEFT's multiple active adapters) is not implemented.
  if (o.adapters.size() > 1)
    usage(fmt::format("--adapters takes one adapter directory, got {}; several at once are not supported",
                      o.adapters.size()));
  if (!o.model && !o.load && o.adapters.size() == 1) {  // swift infer --adapters CKPT: the base from its args
    o.load = o.adapters.front();
    o.adapters.clear();
    o.load_from_adapters = true;
  }
  if (!o.model && !o.load) usage("mtrain infer needs a model: --model <Hugging Face dir> or --load <checkpoint dir>");
  if (o.load_data_args && !o.load)
    usage("--load_data_args true reads the training run's args.json, which needs --load <checkpoint dir>");
  if (o.load_data_args && !o.val_dataset.empty()) usage("give --val_dataset or --load_data_args true, not both");
  if (o.ckpt_step && !o.load) usage("--ckpt_step needs --load");
  if (o.merge_lora && o.adapters.empty() && !o.load)  // a LoRA checkpoint (--load) brings its own adapters
    usage("--merge_lora true merges LoRA adapters, but there are none: add --adapters <PEFT dir or LoRA checkpoint>");
  return o;
}

std::string infer_help() {
  return fmt::format(
      "usage: {}\n\n"
      "Answers with a trained model (swift infer). Without a dataset: an interactive chat on stdin\n"
      "(`clear` forgets the history, `exit` or `quit` ends, `reset-system` sets the system prompt, `multi-line`\n"
      "takes inputs ending with `#`). With --val_dataset (or --load_data_args true:\n"
      "the training run's --val_dataset / split) every record's last answer is generated and written with\n"
      "the prompt messages and the reference to --result_path as JSONL.\n\n"
      "  --model DIR               Hugging Face model directory (config.json, safetensors, tokenizer.json)\n"
      "  --load DIR                mtrain checkpoint directory (alias --mcore_model); its args.json gives the\n"
      "                            model, tokenizer and template. --ckpt_step N: that iteration\n"
      "  --tokenizer, --template   override the model's (chatml, qwen, llama3, default)\n"
      "  --system TEXT             system prompt (default: the template's)\n"
      "  --max_new_tokens N        most tokens per answer (default: until the end token or seq_length)\n"
      "  --temperature T           0 = greedy (default: generation_config.json, else greedy)\n"
      "  --top_k K                 default 50 (0 = off); --top_p P default 1.0; --repetition_penalty R default 1.0\n"
      "  --seed S                  sampling seed (default 42)\n"
      "  --stream true|false       print tokens as they are decoded (default false)\n"
      "  --val_dataset FILE...     batch inference over these datasets (same formats as training)\n"
      "  --load_data_args true     batch inference over the training run's validation data\n"
      "  --result_path FILE        JSONL output (default <load or result>/infer_result/<time>.jsonl)\n"
      "  --tensor_model_parallel_size N, --pipeline_model_parallel_size N   under mpirun / NPROC_PER_NODE\n"
      "  --device_profile NAME, --num_threads N\n"
      "  --adapters DIR            a LoRA adapter on the base: a PEFT directory or an mtrain LoRA checkpoint\n"
      "                            (a LoRA checkpoint as --load, or as --adapters alone, brings its base and adapter)\n"
      "  --merge_lora true         merge W + scale*B*A into the weights at load (default: LoRA layers, no dropout)\n\n"
      "Exit codes: 2 bad options, 3 bad model flags, 4 dataset / tokenizer, 5 checkpoint, 6 out of memory.\n",
      kUsage);
}

}  // namespace mtrain::infer
