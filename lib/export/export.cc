// `mtrain export --to_hf / --to_mcore`: the conversions (export.h).
#include "export/export.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_model_dir.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/errors.h"
#include "common/progress.h"
#include "export/export_lora.h"
#include "parallel/local_comm.h"
#include "train/base_reference.h"

namespace mtrain::exporting {

namespace {

using checkpoint::HfModelShape;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const char* torch_dtype_name(checkpoint::StDType t) {
  return t == checkpoint::StDType::kBF16 ? "bfloat16" : t == checkpoint::StDType::kF16 ? "float16" : "float32";
}

std::string plural(int64_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

std::string describe(const HfModelShape& s) {
  std::string moe;
  if (s.moe.num_experts > 0)
    moe = fmt::format(", {} experts of {}, top-{}{}{}", s.moe.num_experts, s.moe.ffn, s.moe.topk,
                      s.moe.norm_topk_prob ? " renormalised" : "",
                      s.moe.shared_ffn > 0 ? fmt::format(", gated shared expert {}", s.moe.shared_ffn) : "");
  return fmt::format("{}, {} layers, hidden {}, ffn {}, {} heads, {} query groups, head dim {}, vocab {}{}, {}{}{}{}",
                     checkpoint::hf_arch_class(s.arch), s.num_layers, s.hidden, s.ffn, s.heads, s.groups, s.head_dim,
                     s.vocab_size, s.mcore_vocab() != s.vocab_size ? fmt::format(" (padded {})", s.mcore_vocab()) : "",
                     s.tie_word_embeddings ? "tied embeddings" : "untied output layer",
                     s.qkv_bias() ? ", q/k/v biases" : "", s.qk_norm() ? ", q/k RMSNorm" : "", moe);
}

// The model shape the checkpoint's state JSON records under "model".
checkpoint::ModelMeta checkpoint_model(const checkpoint::CheckpointReader& r) {
  const std::string source = r.path() + "/" + checkpoint::kManifestFileName;
  const nlohmann::json state = nlohmann::json::parse(r.state_json());  // the reader validated it as an object
  if (!state.contains("model"))
    throw CheckpointError(fmt::format("{}: the checkpoint records no model shape (state key \"model\")", source),
                          "it was not written by a training run of this mtrain version");
  return checkpoint::model_meta_from_json(state.at("model"), source);
}

// Every model tensor of the checkpoint must map to HF with the shape the model implies, and every
// tensor the HF model needs must be in `src` (the checkpoint, over its base for a LoRA checkpoint)
// in that shape. Optimizer state is skipped.
void check_checkpoint_tensors(const checkpoint::CheckpointReader& r, const checkpoint::WeightSource& src,
                              const HfModelShape& s) {
  const auto wrong_shape = [&](const std::string& name, const Shape& have, const Shape& want) {
    return CheckpointError(fmt::format("{}: tensor {} has shape {}, but the checkpoint's model implies {}", r.path(),
                                       name, shape_str(have), shape_str(want)),
                           "the checkpoint is damaged or its state's \"model\" does not describe its tensors");
  };
  for (const std::string& name : r.names()) {
    if (name.rfind("optimizer.", 0) == 0 || train::is_adapter_tensor(name)) continue;
    checkpoint::HfTensorMap m;
    try {
      m = checkpoint::hf_map_for_mcore(name, s);
    } catch (const CheckpointError& e) {
      throw CheckpointError(fmt::format("{}: {}", r.path(), e.what()), e.hint());
    }
    if (r.global_shape(name) != m.mcore_shape) throw wrong_shape(name, r.global_shape(name), m.mcore_shape);
  }
  for (const checkpoint::HfTensorMap& m : checkpoint::hf_tensor_maps(s)) {
    if (!src.has(m.mcore_name))
      throw CheckpointError(fmt::format("{}: tensor {} is missing", r.path(), m.mcore_name),
                            "the checkpoint does not hold the whole model");
    if (src.global_shape(m.mcore_name) != m.mcore_shape)
      throw wrong_shape(m.mcore_name, src.global_shape(m.mcore_name), m.mcore_shape);
  }
}

// The adapters --to_hf merges: --adapter_load's (a PEFT directory or an mtrain LoRA checkpoint) or the
// checkpoint's own. A LoRA checkpoint without --merge_lora is refused: HF has no place for adapters.
std::optional<train::ExportAdapters> adapters_to_merge(const ExportOptions& o, FileSystem& fs,
                                                       const checkpoint::CheckpointReader& r, const HfModelShape& s) {
  std::optional<train::ExportAdapters> a = o.adapter_load.empty()
                                               ? train::checkpoint_adapters(r, s)
                                               : train::read_adapters(fs, o.adapter_load, s, "--adapter_load");
  if (a && !o.merge_lora)
    throw CheckpointError(fmt::format("{}: the checkpoint holds LoRA adapters, which a Hugging Face model directory "
                                      "has no place for",
                                      r.path()),
                          "merge them into the weights with --merge_lora true, or write a PEFT adapter with --to_peft");
  if (!a && o.merge_lora)
    throw CheckpointError(fmt::format("--merge_lora true: {} holds no LoRA adapters", r.path()),
                          "leave --merge_lora out for a full-training checkpoint, or give --adapter_load");
  return a;
}

// The progress line over the tensors write_hf_model fetches (one per tensor map).
checkpoint::HfTensorFetch counted(checkpoint::HfTensorFetch fetch, ProgressBar& bar) {
  return [fetch = std::move(fetch), &bar](const std::string& name) {
    std::vector<float> v = fetch(name);
    bar.advance(1);
    return v;
  };
}

std::unique_ptr<ProgressBar> tensor_bar(const char* desc, size_t tensors) {
  auto bar = std::make_unique<ProgressBar>(desc, static_cast<int64_t>(tensors), stdout_progress_sink());
  bar->set_unit("tensor");
  return bar;
}

void print_saved(const ExportOptions& o, const checkpoint::HfWriteResult& w, Clock::time_point t0) {
  fmt::print("  successfully saved Hugging Face model to {}: {}, {}, {} bytes in {:.2f} s\n", o.output_dir,
             plural(static_cast<int64_t>(w.files.size()), "safetensors file"), plural(w.tensors, "tensor"), w.bytes,
             seconds_since(t0));
}

// --to_hf --merge_lora true --model HF_DIR --adapter_load DIR: swift export's --model + --adapters.
int merge_into_hf_model(const ExportOptions& o, FileSystem& fs) {
  const auto t0 = Clock::now();
  checkpoint::require_new_output_dir(fs, o.output_dir);
  const checkpoint::HfModelReader hf = checkpoint::HfModelReader::open(fs, o.model);
  const train::ExportAdapters a = train::read_adapters(fs, o.adapter_load, hf.shape(), "--adapter_load");
  const checkpoint::StDType dtype = o.torch_dtype ? *o.torch_dtype : checkpoint::st_dtype_of(hf.shape().dtype);
  fmt::print(" loading Hugging Face model from {}: {}\n", o.model, describe(hf.shape()));
  fmt::print(" merging LoRA adapters from {} (rank {}, scale {}) into the weights\n", o.adapter_load, a.config.r,
             a.scale());
  fmt::print(" saving Hugging Face model ({}) to {}\n", torch_dtype_name(dtype), o.output_dir);
  std::fflush(stdout);
  const std::unique_ptr<ProgressBar> bar = tensor_bar("Export", checkpoint::hf_tensor_maps(hf.shape()).size());
  const auto fetch =
      counted(train::merging_fetch([&](const std::string& name) { return hf.read_full(name); }, a), *bar);
  const checkpoint::HfWriteResult w =
      checkpoint::write_hf_model(fs, o.output_dir, hf.shape(), fetch, o.max_shard_bytes, dtype);
  bar->close();
  print_saved(o, w, t0);
  return 0;
}

int export_to_hf(const ExportOptions& o, FileSystem& fs) {
  if (!o.model.empty()) return merge_into_hf_model(o, fs);
  const auto t0 = Clock::now();
  checkpoint::require_new_output_dir(fs, o.output_dir);
  const checkpoint::CheckpointReader r = checkpoint::CheckpointReader::open(fs, o.load, o.ckpt_step);
  const checkpoint::ModelMeta meta = checkpoint_model(r);
  const HfModelShape shape = checkpoint::hf_shape_from_meta(meta);
  const std::unique_ptr<checkpoint::WeightSource> src = train::checkpoint_weights(fs, r);  // a LoRA base: verified
  check_checkpoint_tensors(r, *src, shape);
  const std::optional<train::ExportAdapters> adapters = adapters_to_merge(o, fs, r, shape);
  const checkpoint::StDType dtype = o.torch_dtype ? *o.torch_dtype : checkpoint::st_dtype_of(shape.dtype);
  fmt::print(" loading checkpoint from {} at iteration {:7d}\n > model: {}\n", o.load, r.iteration(), describe(shape));
  fmt::print(" saving Hugging Face model ({}) to {}\n", torch_dtype_name(dtype), o.output_dir);
  std::fflush(stdout);
  if (adapters)
    fmt::print(" merging LoRA adapters (rank {}, scale {}) into the weights\n", adapters->config.r, adapters->scale());
  std::fflush(stdout);
  checkpoint::HfTensorFetch fetch = [&](const std::string& name) {
    const Shape global = src->global_shape(name);
    std::vector<float> full(static_cast<size_t>(shape_numel(global)));
    src->read_block(name, std::vector<int64_t>(global.size(), 0), global, full.data());
    return full;
  };
  if (adapters) fetch = train::merging_fetch(std::move(fetch), *adapters);
  const std::unique_ptr<ProgressBar> bar = tensor_bar("Export", checkpoint::hf_tensor_maps(shape).size());
  const checkpoint::HfWriteResult w =
      checkpoint::write_hf_model(fs, o.output_dir, shape, counted(std::move(fetch), *bar), o.max_shard_bytes, dtype);
  bar->close();
  print_saved(o, w, t0);
  return 0;
}

int export_to_mcore(const ExportOptions& o, FileSystem& fs) {
  const auto t0 = Clock::now();
  checkpoint::require_new_output_dir(fs, o.output_dir);
  const checkpoint::HfModelReader hf = checkpoint::HfModelReader::open(fs, o.model);
  fmt::print(" loading Hugging Face model from {} ({}): {}\n", o.model,
             plural(static_cast<int64_t>(hf.files().size()), "safetensors file"), describe(hf.shape()));
  fmt::print(" saving checkpoint at iteration {:7d} to {} in mtrain-sharded format\n", 0, o.output_dir);
  std::fflush(stdout);
  const std::vector<std::string> names = hf.names();
  std::vector<std::vector<float>> data;
  data.reserve(names.size());
  std::vector<checkpoint::ShardedTensor> tensors;
  const std::unique_ptr<ProgressBar> bar = tensor_bar("Load", names.size());  // then one save of them all
  for (const std::string& name : names) {
    data.push_back(hf.read_full(name));
    bar->advance(1);
    const Shape global = hf.global_shape(name);
    tensors.push_back({name, global, std::vector<int64_t>(global.size(), 0), global, data.back().data()});
  }
  const nlohmann::json state = {{"iteration", 0},
                                {"consumed_samples", 0},
                                {"model", checkpoint::model_meta_to_json(checkpoint::meta_from_hf_shape(hf.shape()))},
                                {"source", o.model}};
  bar->close();
  parallel::SelfComm world("export");
  const checkpoint::SaveResult saved = checkpoint::save_checkpoint(fs, world, o.output_dir, 0, tensors, state.dump());
  fmt::print("  successfully saved checkpoint from iteration {:7d} to {} [ t 1/1, p 1/1 ]: {}, {} bytes in {:.2f} s\n",
             0, o.output_dir, plural(static_cast<int64_t>(tensors.size()), "tensor"), saved.total_bytes,
             seconds_since(t0));
  return 0;
}

}  // namespace

int run_export(const ExportOptions& options, FileSystem& fs) {
  if (options.direction == ExportOptions::Direction::kToHf) return export_to_hf(options, fs);
  if (options.direction == ExportOptions::Direction::kToMcore) return export_to_mcore(options, fs);
  if (options.direction == ExportOptions::Direction::kToPeft) return export_to_peft(options, fs);
  throw UsageError("mtrain export: say which way to convert: --to_hf or --to_mcore (or --to_peft)");
}

}  // namespace mtrain::exporting
