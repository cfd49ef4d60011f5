// `mtrain infer`: from options to a loaded model (infer_internal.h).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/hf_model_dir.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/errors.h"
#include "common/file_system.h"
#include "config/cli.h"
#include "config/json.h"
#include "config/validate.h"
#include "infer/infer_internal.h"
#include "train/base_reference.h"
#include "train/checkpointing.h"
#include "train/rank_build.h"
#include "train/cpu_binding.h"

namespace mtrain::infer {

namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The training run's arguments beside a checkpoint (swift's --load_args).
std::optional<config::Args> run_args_of(const std::string& load_dir) {
  const std::string path = load_dir + "/args.json";
  if (!fs::exists(path)) return std::nullopt;
  try {
    return config::args_from_json(read_text(path));
  } catch (const ConfigError& e) {
    throw CheckpointError(fmt::format("{}: {}", path, e.what()), "the file is damaged; pass --model instead");
  }
}

// A model from --model alone: the flags its config.json implies, validated like `mtrain sft --model DIR`.
config::Args hf_model_args(const InferOptions& o, int world_size) {
  // --train_iters: only so that the training-side validation passes; nothing trains.
  std::vector<std::string> argv = {"mtrain", "sft", "--model", *o.model, "--train_iters", "1"};
  if (o.tokenizer) argv.insert(argv.end(), {"--tokenizer", *o.tokenizer});
  std::vector<const char*> c;
  for (const std::string& a : argv) c.push_back(a.c_str());
  config::ParseOptions po;
  po.world_size = world_size;
  return config::parse_command_line(static_cast<int>(c.size()), c.data(), po).args;
}

// The Args of the model to build: the training run's (--load with args.json) or --model's,
// with this command's settings and an inference layout (one sequence, no dropout, no recompute).
config::Args model_args(const InferOptions& o, int world_size) {
  if (o.load && !fs::is_directory(*o.load))
    throw CheckpointError(fmt::format("--load {}: no such directory", *o.load),
                          "--load takes the --output_dir (--save) of an mtrain training run");
  std::optional<config::Args> a = o.load ? run_args_of(*o.load) : std::nullopt;
  if (o.load_from_adapters && (!a || a->train_type != "lora"))
    throw UsageError(fmt::format("--adapters {} without --model or --load: only an mtrain LoRA training checkpoint "
                                 "names its base model, and this is none",
                                 *o.load),
                     "add the base: --model <Hugging Face dir> or --load <checkpoint dir> (a PEFT adapter's "
                     "adapter_config.json names it in base_model_name_or_path)");
  if (!a && !o.model)
    throw CheckpointError(fmt::format("--load {}: no args.json there, so the model's shape, tokenizer and template "
                                      "are unknown",
                                      *o.load),
                          "--load the --output_dir of an mtrain training run, or add --model <Hugging Face dir> "
                          "with the checkpoint's shape");
  if (!a) a = hf_model_args(o, world_size);
  config::Args& args = *a;
  args.command = "sft";
  args.load = o.load;
  args.ckpt_step = o.ckpt_step;
  if (o.tokenizer) args.tokenizer = o.tokenizer;
  if (o.template_name) args.template_name = o.template_name;
  if (o.device_profile) args.device_profile = *o.device_profile;
  if (o.num_threads) args.num_threads = o.num_threads;
  args.tensor_model_parallel_size = o.tensor_model_parallel_size;
  args.pipeline_model_parallel_size = o.pipeline_model_parallel_size;
  args.num_layers_per_virtual_pipeline_stage.reset();
  args.virtual_pipeline_model_parallel_size.reset();
  // One replica: whole experts on every rank (EP 1, ETP 1), whatever layout trained them (the
  // checkpoint's experts are named tensors that reload under any layout).
  args.expert_model_parallel_size = args.expert_tensor_parallel_size = 1;
  args.sequence_parallel = false;
  args.context_parallel_size = 1;  // decoding keeps whole sequences
  args.context_parallel_algo = "megatron_cp_algo";
  args.recompute_granularity.reset();
  args.recompute_method.reset();
  args.hidden_dropout = args.attention_dropout = 0.0;
  args.micro_batch_size = 1;
  args.global_batch_size = 1;
  args.dry_run = false;
  args.profile = false;
  args.precision_dump_path.clear();
  if (world_size != o.tensor_model_parallel_size * o.pipeline_model_parallel_size)
    throw UsageError(fmt::format("mtrain infer runs one model replica: {} ranks but TP {} x PP {} = {}", world_size,
                                 o.tensor_model_parallel_size, o.pipeline_model_parallel_size,
                                 o.tensor_model_parallel_size * o.pipeline_model_parallel_size),
                     "launch TP x PP ranks (NPROC_PER_NODE), or set --tensor_model_parallel_size / "
                     "--pipeline_model_parallel_size to the launch");
  if (o.template_name && !data::chat_template_from_name(*o.template_name))
    throw UsageError(fmt::format("--template {}: unknown template", *o.template_name),
                     "choose chatml, qwen, llama3 or default");
  if (!args.tokenizer)
    throw ConfigError("no tokenizer: the model names none", "pass --tokenizer <tokenizer.json or its directory>");
  config::validate(args, world_size);
  return args;
}

data::ChatTemplate chat_template_of(const config::Args& a, const data::Tokenizer& tok) {
  if (a.template_name) return *data::chat_template_from_name(*a.template_name);
  if (tok.chat_template().empty()) return data::ChatTemplate::kChatml;
  const auto t = data::chat_template_from_name(tok.chat_template());
  if (!t)
    throw DataError(fmt::format("{}: unsupported chat template '{}'", tok.source(), tok.chat_template()),
                    "pass --template chatml, qwen, llama3 or default");
  return *t;
}

// The checkpoint's recorded model must be the one built from the arguments.
void check_checkpoint_model(const checkpoint::CheckpointReader& r, const model::ModelConfig& c) {
  const std::string where = r.path() + "/" + checkpoint::kManifestFileName;
  const nlohmann::json st = nlohmann::json::parse(r.state_json());
  if (!st.contains("model")) return;  // older checkpoints: the tensor shapes are still checked
  const std::vector<std::string> diff =
      checkpoint::model_meta_mismatches(checkpoint::model_meta_from_json(st.at("model"), where), train::model_meta(c));
  if (!diff.empty())
    throw CheckpointError(fmt::format("{}: the checkpoint's model differs:\n  {}", where, fmt::join(diff, "\n  ")),
                          "drop --model, or --load a checkpoint of this model");
}

// The base weights, with the adapter over them (applied or merged) when there is one.
void load_source(const checkpoint::WeightSource& base, const InferOptions& o, InferModel& m) {
  if (!m.adapters) return train::load_inference_weights(base, *m.model);
  load_adapted_weights(base, *m.adapters, o.merge_lora, *m.model);
  if (m.print)
    fmt::print(" {} LoRA adapter {} (rank {}, alpha {}, {} tensors)\n", o.merge_lora ? "merged" : "applied",
               m.adapters->dir, m.adapters->adapters.config.r, m.adapters->adapters.config.lora_alpha,
               m.adapters->adapters.tensors.size());
}

void load_weights(const InferOptions& o, InferModel& m) {
  PosixFileSystem fs;
  const model::ModelConfig& c = m.model->config();
  if (o.load) {
    const checkpoint::CheckpointReader r = checkpoint::CheckpointReader::open(
        fs, *o.load, o.ckpt_step ? std::optional<int64_t>(*o.ckpt_step) : std::nullopt);
    check_checkpoint_model(r, c);
    load_source(*train::checkpoint_weights(fs, r), o, m);  // a LoRA checkpoint: over its verified base
    if (m.print) fmt::print(" loaded checkpoint {} at iteration {}\n", *o.load, r.iteration());
  } else {
    const checkpoint::HfModelReader r = checkpoint::HfModelReader::open(fs, *o.model, c.padded_vocab);
    load_source(r, o, m);
    if (m.print) fmt::print(" loaded Hugging Face weights from {}\n", *o.model);
  }
}

}  // namespace

InferModel load_infer_model(const InferOptions& o, const InferContext& ctx) {
  InferModel m;
  m.state = ctx.parallel;
  const int world = m.state ? m.state->world_size() : 1;
  m.args = model_args(o, world);
  m.tokenizer.emplace(data::Tokenizer::load(*m.args.tokenizer));
  if (!m.args.vocab_size) m.args.vocab_size = static_cast<int>(m.tokenizer->vocab_size());
  m.adapters = prepare_adapters(o, m.args);  // before the model is built: it decides its LoRA layers
  m.chat_template = chat_template_of(m.args, *m.tokenizer);
  m.system = o.system ? *o.system : data::default_system_prompt(m.chat_template);
  const data::SpecialTokenIds& sp = m.tokenizer->special();
  for (int32_t id : {sp.im_end, sp.eos, sp.eod})
    if (id >= 0) m.stop_ids.push_back(id);
  if (!m.state) {
    m.own_state = std::make_unique<parallel::ParallelState>(
        parallel::make_self_parallel_state(train::process_grid_from_args(m.args)));
    m.state = m.own_state.get();
  }
  m.print = m.state->rank() == 0;
  train::configure_threads(m.args, ctx.local_ranks);
  m.dev = std::make_unique<device::Device>(train::device_profile(m.args), ctx.device_index);
  m.model = train::build_rank_model(m.args, *m.dev, *m.state, train::trainer_options(m.args), /*meta=*/false);
  if (m.print)
    fmt::print(" > {} on {}; tensor parallel {}, pipeline parallel {}; template {}\n",
               model::describe(m.model->config()), m.dev->name(), m.args.tensor_model_parallel_size,
               m.args.pipeline_model_parallel_size, data::chat_template_name(m.chat_template));
  load_weights(o, m);
  std::fflush(stdout);
  return m;
}

GenerationConfig infer_generation_config(const InferOptions& o, const InferModel& m) {
  GenerationConfig g;
  g.seed = static_cast<uint64_t>(o.seed);
  g.stop_ids = m.stop_ids;
  g.max_new_tokens = o.max_new_tokens.value_or(m.model->config().seq_length);
  // generation_config.json of --model (HF GenerationConfig): sampling only with do_sample.
  const std::string gc_path = o.model ? *o.model + "/generation_config.json" : "";
  if (!gc_path.empty() && fs::exists(gc_path)) {
    nlohmann::json gc;
    try {
      gc = nlohmann::json::parse(read_text(gc_path));
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(fmt::format("{}: not valid JSON: {}", gc_path, e.what()), "fix or remove the file");
    }
    if (gc.value("do_sample", false)) g.sampling.temperature = gc.value("temperature", 1.0);
    g.sampling.top_k = gc.value("top_k", g.sampling.top_k);
    g.sampling.top_p = gc.value("top_p", g.sampling.top_p);
    g.sampling.repetition_penalty = gc.value("repetition_penalty", g.sampling.repetition_penalty);
    if (!o.max_new_tokens && gc.contains("max_new_tokens")) g.max_new_tokens = gc.at("max_new_tokens").get<int64_t>();
  }
  if (o.temperature) g.sampling.temperature = *o.temperature;
  if (o.top_k) g.sampling.top_k = *o.top_k;
  if (o.top_p) g.sampling.top_p = *o.top_p;
  if (o.repetition_penalty) g.sampling.repetition_penalty = *o.repetition_penalty;
  return g;
}

std::string share_text(parallel::ParallelState& state, const std::string& text) {
  parallel::Comm& world = state.world();
  if (world.size() == 1) return text;
  int64_t n = static_cast<int64_t>(text.size());
  world.broadcast(&n, 1, 0);
  std::vector<int32_t> bytes(text.begin(), text.end());
  bytes.resize(static_cast<size_t>(n));
  if (n > 0) world.broadcast(bytes.data(), n, 0);
  return std::string(bytes.begin(), bytes.end());
}

size_t utf8_complete_prefix(std::string_view text) {
  size_t end = text.size();
  // A lossy decoder ends an incomplete character with U+FFFD: wait for its other bytes.
  if (text.ends_with("\xEF\xBF\xBD")) return end - 3;
  // A raw-byte decoder ends with the first bytes of a multi-byte character.
  size_t lead = end;
  while (lead > 0 && end - lead < 3 && (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead == 0) return end;
  const unsigned char b = static_cast<unsigned char>(text[lead - 1]);
  const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  return end - (lead - 1) < need ? lead - 1 : end;
}

std::string TextStreamer::push(int32_t token) {
  tokens_.push_back(token);
  const std::string text = tok_.decode(tokens_, /*skip_special_tokens=*/true);
  const size_t end = utf8_complete_prefix(text);
  if (end <= printed_) return "";
  std::string delta = text.substr(printed_, end - printed_);
  printed_ = end;
  return delta;
}

std::string TextStreamer::finish() {
  const std::string text = tok_.decode(tokens_, /*skip_special_tokens=*/true);
  std::string rest = text.size() > printed_ ? text.substr(printed_) : std::string();
  printed_ = text.size();
  return rest;
}

std::string answer_text(const InferModel& m, const std::vector<int32_t>& tokens) {
  std::string s = m.tokenizer->decode(tokens, /*skip_special_tokens=*/true);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace mtrain::infer
