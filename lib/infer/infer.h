// `mtrain infer` (swift infer's job): answers from a trained model, either
// interactively from a terminal (chat template, multi-turn history, `clear`
// and `exit`) or over a dataset (--val_dataset, or the training run's
// validation data with --load_data_args) into a JSONL of prompts, references
// and responses. Generation uses the KV cache (infer/inference_session.h)
// and swift's sampling flags (infer/sampling.h). Under TP / PP every rank of
// the one model replica takes part; rank 0 reads and writes.
//
// The model comes from --model <hf_dir> (config.json, weights, tokenizer) or
// --load <checkpoint dir> (the training run's args.json beside it gives the
// model, tokenizer and template; --model then only adds what it lacks).
// Weights load into the model's ParamStore before generation starts, the
// point where a LoRA adapter (--adapters, or a LoRA checkpoint's own) is
// applied as LoRA layers or, with --merge_lora true, merged into the weights.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "config/args.h"
#include "infer/sampling.h"
#include "parallel/parallel_state.h"

namespace mtrain::infer {

struct InferOptions {
  bool help = false;
  // The model (config::Args as a training run would build it).
  std::optional<std::string> model, load, tokenizer, template_name, device_profile;
  std::optional<int> ckpt_step, num_threads;
  std::vector<std::string> adapters;  // one PEFT dir or mtrain LoRA checkpoint
  bool merge_lora = false;
  // --adapters CKPT alone (swift infer --adapters): CKPT became --load, as a
  // LoRA checkpoint carries its base and its args.json names the model.
  bool load_from_adapters = false;
  int tensor_model_parallel_size = 1, pipeline_model_parallel_size = 1;
  // Generation (swift's RequestConfig; None: generation_config.json, else HF's defaults).
  std::optional<int64_t> max_new_tokens;  // None: until a stop token or the model's seq_length
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<int> top_k;
  int seed = 42;
  bool stream = false;
  std::optional<std::string> system;  // None: the template's default system prompt
  // Batch inference.
  std::vector<std::string> val_dataset;
  bool load_data_args = false;
  std::optional<std::string> result_path;
};

InferOptions parse_infer_args(const std::vector<std::string>& args);
std::string infer_help();

// Where one process runs the command: its parallel state (null: alone), its device.
struct InferContext {
  parallel::ParallelState* parallel = nullptr;
  int device_index = 0;
  int local_ranks = 1;
  bool stdout_is_tty = false;  // batch inference prints a progress line
};

int run_infer(const InferOptions& options, const InferContext& ctx, std::istream& in, std::ostream& out);

}  // namespace mtrain::infer
