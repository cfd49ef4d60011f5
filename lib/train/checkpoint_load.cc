// The loading half of checkpointing.h. Everything that can refuse a
// checkpoint (shape mismatch, missing optimizer or RNG state, a damaged
// state record, a data position that does not fit) is checked before any
// weight or optimizer state is touched.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <string>

#include "checkpoint/hf_model_dir.h"
#include "common/errors.h"
#include "nlohmann/json.hpp"
#include "tensor/precision.h"
#include "train/base_reference.h"
#include "train/checkpoint_blocks.h"
#include "train/checkpointing.h"

namespace mtrain::train {

using json = nlohmann::json;

LoadSettings load_settings(const config::Args& a) {
  LoadSettings s;
  s.dir = a.load.value_or("");
  if (a.ckpt_step) s.iteration = *a.ckpt_step;
  s.finetune = a.finetune;
  s.optim = !a.no_load_optim;
  s.rng = !a.no_load_rng;
  s.exit_on_missing = a.exit_on_missing_checkpoint;
  s.seed = static_cast<uint64_t>(a.seed);
  s.schedule = param_schedule(a);
  s.schedule_choice = schedule_choice(a);
  return s;
}

namespace {

std::string shape_text(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// The word embeddings and the output layer: their rows are the vocabulary
// padded to make_vocab_size_divisible_by * TP, so a run under another TP may
// hold more or fewer padding rows than the checkpoint.
bool vocab_rows(const model::ParamInfo& p, const model::ModelConfig& c) {
  return (p.name == "embedding.word_embeddings.weight" || p.name == "output_layer.weight") && !p.full_shape.empty() &&
         p.full_shape[0] == c.padded_vocab;
}

// Whether `p` is read from `src` under `prefix` ("" = the weights): a frozen
// parameter has no optimizer state; a parameter the base model lacks (a LoRA
// adapter) is read when the source holds it (resume) and keeps its initial
// value otherwise (a base model: --model, or --load of a full checkpoint).
// A LoRA checkpoint (`trainable_only`) holds no frozen weights: its base is
// loaded from the reference it records (base_reference.h).
bool read_from_source(const checkpoint::WeightSource& src, const model::ParamInfo& p, const std::string& prefix,
                      bool trainable_only) {
  if ((trainable_only || !prefix.empty()) && !p.trainable) return false;
  return p.in_base || src.has(prefix + detail::source_name(p));
}

// Refuses, naming the tensor, a parameter the source lacks or holds in
// another shape. Returns the source's vocabulary rows (0: none read).
int64_t check_weights(const checkpoint::WeightSource& src, model::GptModel& m, const std::string& prefix,
                      bool trainable_only = false) {
  int64_t rows = 0;
  for (const model::ParamInfo& p : m.params().infos()) {
    if (!read_from_source(src, p, prefix, trainable_only)) continue;
    const std::string name = prefix + detail::source_name(p);
    if (!src.has(name))
      throw CheckpointError(fmt::format("{}: tensor {} is missing", src.describe(), name),
                            "the checkpoint was saved from another model, or with --no_save_optim");
    const Shape saved = src.global_shape(name);
    Shape want = p.full_shape;
    if (vocab_rows(p, m.config()) && saved.size() == want.size() && !saved.empty() && saved[0] >= m.config().vocab) {
      want[0] = saved[0];
      rows = saved[0];
    }
    if (saved != want)
      throw CheckpointError(fmt::format("{}: tensor {} has shape {} in the checkpoint, but this model's is {}",
                                        src.describe(), name, shape_text(saved), shape_text(p.full_shape)),
                            "load with the model flags the checkpoint was saved with");
  }
  return rows;
}

// This rank's blocks of `p` that a source with `saved_rows` vocabulary rows
// holds: padding rows it does not have are left out.
std::vector<detail::ParamBlock> source_blocks(const model::ParamInfo& p, const model::ModelConfig& c,
                                              int64_t saved_rows) {
  std::vector<detail::ParamBlock> out;
  for (detail::ParamBlock b : detail::param_blocks(p)) {
    if (vocab_rows(p, c)) b.shape[0] = std::clamp<int64_t>(saved_rows - b.offsets[0], 0, b.shape[0]);
    if (shape_numel(b.shape) > 0) out.push_back(std::move(b));
  }
  return out;
}

// Refuses, before anything is read, a checkpoint whose saved blocks do not
// cover this rank's blocks (a rank's file missing from the manifest).
void check_coverage(const checkpoint::CheckpointReader& r, model::GptModel& m, const std::string& prefix,
                    bool trainable_only) {
  for (const model::ParamInfo& p : m.params().infos()) {
    if (!read_from_source(r, p, prefix, trainable_only)) continue;
    const std::string name = prefix + detail::source_name(p);
    for (const detail::ParamBlock& b : source_blocks(p, m.config(), r.global_shape(name).at(0)))
      r.check_block(name, b.offsets, b.shape);
  }
}

// Reads this rank's blocks of every parameter into `flat` (the parameter
// layout). Vocabulary rows past the source's are left as they are. `bar`
// (may be null) advances by one per parameter.
void read_params(const checkpoint::WeightSource& src, model::GptModel& m, const std::string& prefix, float* flat,
                 bool trainable_only = false, ProgressBar* bar = nullptr) {
  for (const model::ParamInfo& p : m.params().infos()) {
    if (bar) bar->advance(1);
    if (!read_from_source(src, p, prefix, trainable_only)) continue;
    const std::string name = prefix + detail::source_name(p);
    for (const detail::ParamBlock& b : source_blocks(p, m.config(), src.global_shape(name).at(0)))
      src.read_block(name, b.offsets, b.shape, flat + p.offset + b.local_offset);
  }
}

const json& member(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw CheckpointError(fmt::format("{}: the checkpoint state has no \"{}\"", where, key),
                          "the checkpoint is damaged or was not written by mtrain");
  return j.at(key);
}

// A non-negative integer field (every counter and position in the state is one).
int64_t integer(const json& j, const char* key, const std::string& where) {
  const json& v = member(j, key, where);
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    throw CheckpointError(fmt::format("{}: \"{}\" of the checkpoint state is not a non-negative integer", where, key),
                          "the checkpoint is damaged; load an older one with --ckpt_step");
  return v.get<int64_t>();
}

// An integer field that may be negative (the loss scaler's hysteresis tracker
// counts down past zero, as Megatron's does).
int64_t signed_integer(const json& j, const char* key, const std::string& where) {
  const json& v = member(j, key, where);
  if (!v.is_number_integer())
    throw CheckpointError(fmt::format("{}: \"{}\" of the checkpoint state is not an integer", where, key),
                          "the checkpoint is damaged; load an older one with --ckpt_step");
  return v.get<int64_t>();
}

std::string text(const json& j, const char* key, const std::string& where) {
  const json& v = member(j, key, where);
  if (!v.is_string())
    throw CheckpointError(fmt::format("{}: \"{}\" of the checkpoint state is not a string", where, key));
  return v.get<std::string>();
}

TrainerCounters counters_from(const json& st, const std::string& where) {
  if (!st.contains("trainer"))
    throw CheckpointError(fmt::format("{} holds weights only (no training state: written by `mtrain export "
                                      "--to_mcore`?), so there is no run to resume",
                                      where),
                          "pass --finetune to start training from these weights");
  const json& tr = member(st, "trainer", where);
  TrainerCounters c;
  c.iteration = integer(st, "iteration", where);
  c.consumed_samples = integer(st, "consumed_samples", where);
  c.successful_steps = integer(tr, "successful_steps", where);
  c.skipped_iterations = integer(tr, "skipped_iterations", where);
  c.nan_iterations = integer(tr, "nan_iterations", where);
  c.consecutive_skips = integer(tr, "consecutive_skips", where);
  return c;
}

data::DataLoader::State position_from(const json& st, const std::string& where) {
  const json& d = member(st, "data", where);
  data::DataLoader::State s;
  s.epoch = integer(d, "epoch", where);
  s.cursor = integer(d, "cursor", where);
  s.seed = static_cast<uint64_t>(integer(d, "seed", where));
  s.consumed_samples = integer(d, "consumed_samples", where);
  s.num_samples = integer(d, "num_samples", where);
  return s;
}

// Megatron's refusals when a state part the run wants to load was not saved.
void require_saved(const json& st, const char* key, const std::string& where, const char* what, const char* saved_with,
                   const char* load_flag) {
  if (member(st, key, where).is_null())
    throw CheckpointError(
        fmt::format("Unable to load {} from checkpoint {}: it was saved with {}", what, where, saved_with),
        fmt::format("pass {} or --finetune to start it fresh", load_flag));
}

// The optimizer states of `r` into `t`'s optimizer (this rank's elements).
void read_optimizer(const checkpoint::CheckpointReader& r, TrainingState& t, bool has_master) {
  model::ParamStore& ps = t.model.params();
  const auto states = t.optimizer.state_tensors();
  ProgressBar bar("Load optimizer", static_cast<int64_t>(states.size() * ps.infos().size()), t.progress);
  for (const auto& [name, tensor] : states) {
    const std::string prefix = "optimizer." + name + "/";
    // Saved from an fp32 run: the master keeps the loaded weights (load_model_weights).
    if (name == "fp32_param" && !has_master) continue;
    std::vector<float> flat(static_cast<size_t>(ps.numel()), 0.0f);
    // A master copy's rows past the checkpoint's vocabulary padding start as the weights.
    if (name == "fp32_param") std::copy_n(ps.params().data(), ps.numel(), flat.data());
    read_params(r, t.model, prefix, flat.data(), true, &bar);
    detail::take_state(*tensor, t.optimizer, flat);
  }
  bar.update(static_cast<int64_t>(states.size() * ps.infos().size()));  // skipped states count as read
}

}  // namespace

namespace {

// load_model_weights after its checks: the weights, then the master copy.
void apply_model_weights(const checkpoint::WeightSource& src, TrainingState& t, bool trainable_only = false) {
  model::ParamStore& ps = t.model.params();
  ProgressBar bar("Load weights", static_cast<int64_t>(ps.infos().size()), t.progress);
  read_params(src, t.model, "", ps.params().data(), trainable_only, &bar);
  bar.close();
  // The fp32 master starts from the loaded values; a bf16/fp16 model holds them rounded.
  t.optimizer.init_master_from(ps.params().data());
  kernels::round_to_dtype(ps.params().data(), ps.rounded_numel(), t.model.config().dtype);  // frozen ones too
}

}  // namespace

void load_model_weights(const checkpoint::WeightSource& src, TrainingState& t) {
  check_weights(src, t.model, "");
  apply_model_weights(src, t);
}

void load_hf_model(FileSystem& fs, const std::string& dir, TrainingState& t) {
  const bool print = t.parallel.rank() == 0;
  if (print) fmt::print("loading Hugging Face weights from {}\n", dir);
  const auto t0 = std::chrono::steady_clock::now();
  const model::ModelConfig& c = t.model.config();
  const checkpoint::HfModelReader r = checkpoint::HfModelReader::open(fs, dir, c.padded_vocab);
  const std::vector<std::string> diff =
      checkpoint::model_meta_mismatches(checkpoint::meta_from_hf_shape(r.shape()), model_meta(c));
  if (!diff.empty())
    throw CheckpointError(fmt::format("{}: the model differs from this run's:\n  {}", dir, fmt::join(diff, "\n  ")),
                          "drop the model-shape flags: --model sets them from config.json");
  load_model_weights(r, t);
  if (print) {
    const parallel::RankCoords rc = t.parallel.coords();
    fmt::print("  successfully loaded Hugging Face weights from {} [ t {}/{}, p {}/{} ] ({:.2f} s)\n", dir, rc.tp + 1,
               t.parallel.grid().tp(), rc.pp + 1, t.parallel.grid().pp(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
  }
}

namespace {

// Everything a load applies besides the tensors, parsed and checked first.
struct SavedState {
  TrainerCounters counters;
  data::DataLoader::State position;
  std::optional<uint64_t> seed;
  int64_t optimizer_step = 0;
  std::optional<optim::DynamicGradScalerState> scaler;
  bool master = false;     // the checkpoint holds fp32 master weights
  bool lora = false;       // trainable tensors only, the base by reference
  int64_t vocab_rows = 0;  // the checkpoint's embedding rows (check_weights)
  std::optional<ScheduleResolution> schedule;
};

SavedState parse_state(FileSystem& fs, const checkpoint::CheckpointReader& r, const json& st, const LoadSettings& s,
                       TrainingState& t) {
  const std::string& where = r.path();
  SavedState out;
  const checkpoint::ModelMeta saved = checkpoint::model_meta_from_json(member(st, "model", where), where);
  const std::vector<std::string> diff = checkpoint::model_meta_mismatches(saved, model_meta(t.model.config()));
  if (!diff.empty())
    throw CheckpointError(fmt::format("{}: the checkpoint is of another model:\n  {}", where, fmt::join(diff, "\n  ")),
                          "pass the model flags the checkpoint was saved with (its \"args\" are in manifest.json)");
  out.lora = st.contains("base");
  if (out.lora) verify_base_reference(fs, st.at("base"), s.seed, where);
  out.vocab_rows = check_weights(r, t.model, "", out.lora);
  check_coverage(r, t.model, "", out.lora);
  const bool optim = s.optim && !s.finetune, rng = s.rng && !s.finetune;
  if (!s.finetune) {
    out.counters = counters_from(st, where);
    if (out.counters.iteration != r.iteration())
      throw CheckpointError(fmt::format("{}: the state says iteration {}, the directory {}", where,
                                        out.counters.iteration, r.iteration()),
                            "the checkpoint is damaged; load an older one with --ckpt_step");
    out.position = position_from(st, where);
    // Megatron's --no_load_optim restarts the LR schedule with the optimizer.
    if (!optim) out.counters.successful_steps = 0;
  }
  if (optim) {
    require_saved(st, "optimizer", where, "the optimizer state", "--no_save_optim", "--no_load_optim");
    const json& o = st.at("optimizer");
    const std::string type = text(o, "type", where);
    if (type != t.optimizer.config().type)
      throw CheckpointError(fmt::format("{}: optimizer value from checkpoint ({}) is not equal to the input argument "
                                        "value ({})",
                                        where, type, t.optimizer.config().type),
                            "pass --no_load_optim to start the new optimizer fresh");
    out.optimizer_step = integer(o, "step", where);
    const json* schedule = st.contains("opt_param_scheduler") ? &st.at("opt_param_scheduler") : nullptr;
    out.schedule = resolve_param_schedule(schedule, s.schedule, s.schedule_choice, where);
    for (const auto& [name, tensor] : t.optimizer.state_tensors()) {
      const std::string prefix = "optimizer." + name + "/";
      if (name == "fp32_param") {
        const auto& infos = t.model.params().infos();
        const auto first = std::find_if(infos.begin(), infos.end(), [](const auto& p) { return p.trainable; });
        out.master = first != infos.end() && r.has(prefix + detail::source_name(*first));
        if (!out.master) continue;  // saved from an fp32 run: the master starts from the weights
      }
      check_weights(r, t.model, prefix);
      check_coverage(r, t.model, prefix, true);
    }
    const json& g = member(st, "grad_scaler", where);
    if (!g.is_null() && dynamic_cast<optim::DynamicGradScaler*>(t.scaler)) {
      const json& scale = member(g, "scale", where);
      if (!scale.is_number() || !std::isfinite(scale.get<double>()) || scale.get<double>() <= 0)
        throw CheckpointError(fmt::format("{}: the loss scale of the checkpoint state is not a positive number", where),
                              "the checkpoint is damaged; load an older one with --ckpt_step");
      out.scaler = optim::DynamicGradScalerState{scale.get<float>(), integer(g, "growth_tracker", where),
                                                 signed_integer(g, "hysteresis_tracker", where)};
    }
  }
  if (rng) {
    require_saved(st, "rng", where, "the rng state", "--no_save_rng", "--no_load_rng");
    out.seed = static_cast<uint64_t>(integer(st.at("rng"), "seed", where));
  }
  return out;
}

// Every rank must load the same iteration (node-local --load directories can
// differ): Megatron all-reduces it; mtrain refuses a disagreement.
void agree_on_iteration(parallel::ParallelState& ps, int64_t mine, const std::string& dir) {
  if (ps.world_size() == 1) return;
  const int64_t lo = ps.world().all_reduce_value(mine, parallel::ReduceOp::kMin);
  const int64_t hi = ps.world().all_reduce_value(mine, parallel::ReduceOp::kMax);
  if (lo == hi) return;
  const auto show = [](int64_t it) { return it < 0 ? std::string("no checkpoint") : fmt::format("iteration {}", it); };
  throw CheckpointError(fmt::format("--load {}: the ranks see different checkpoints ({} on some, {} on others; this "
                                    "rank: {})",
                                    dir, show(lo), show(hi), show(mine)),
                        "every rank must read the same checkpoint: put --load on a file system all nodes share");
}

}  // namespace

std::optional<Resumed> load_training_checkpoint(FileSystem& fs, const LoadSettings& s, TrainingState& t) {
  const bool print = t.parallel.rank() == 0;
  const std::string tracker = s.dir + "/" + checkpoint::kTrackerFileName;
  const bool missing = !s.iteration && !fs.exists(tracker);
  std::optional<checkpoint::CheckpointReader> reader;
  std::exception_ptr error;
  try {
    if (!missing) reader.emplace(checkpoint::CheckpointReader::open(fs, s.dir, s.iteration));
  } catch (const CheckpointError&) {
    error = std::current_exception();
  }
  // A damaged checkpoint fails on every rank alike; only agree on what was found.
  if (!error) agree_on_iteration(t.parallel, reader ? reader->iteration() : -1, s.dir);
  if (error) std::rethrow_exception(error);
  if (missing) {
    if (s.exit_on_missing)
      throw CheckpointError(fmt::format("--load {}: no checkpoint there ({} is missing)", s.dir, tracker),
                            "--exit_on_missing_checkpoint is set: point --load at the --output_dir of a run that "
                            "saved, or drop the flag to start from random weights");
    if (print)
      fmt::print(
          "WARNING: could not find the metadata file {}\n    will not load any checkpoints and will start from "
          "random\n",
          tracker);
    return std::nullopt;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const checkpoint::CheckpointReader& r = *reader;
  const std::string where = r.path();
  if (print) fmt::print("loading checkpoint from {} at iteration {}\n", s.dir, r.iteration());
  json st;
  try {
    st = json::parse(r.state_json());
  } catch (const json::exception& e) {
    throw CheckpointError(fmt::format("{}: the checkpoint state is not valid JSON: {}", where, e.what()));
  }
  // 1. Everything that can refuse the checkpoint, before any state changes.
  const SavedState saved = parse_state(fs, r, st, s, t);
  const int64_t saved_rows = saved.vocab_rows;
  if (!s.finetune) t.data.set_position(saved.position);  // DataError if the dataset changed

  // 2. The state.
  Resumed res;
  res.counters = saved.counters;
  res.seed = saved.seed;
  if (saved.schedule) res.schedule = saved.schedule->schedule;
  if (saved.lora) load_base_reference(fs, st.at("base"), t);
  apply_model_weights(r, t, saved.lora);  // checked in parse_state
  // What a LoRA run started from this checkpoint records as its base.
  res.base = saved.lora ? st.at("base") : checkpoint_base_reference(fs, s.dir, r.iteration());
  if (s.optim && !s.finetune) {
    read_optimizer(r, t, saved.master);
    t.optimizer.set_step_count(saved.optimizer_step);
    if (saved.scaler) dynamic_cast<optim::DynamicGradScaler&>(*t.scaler).load_state(*saved.scaler);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (print) {
    if (saved.schedule) fmt::print("{}\n", fmt::join(saved.schedule->lines, "\n"));
    const model::ModelConfig& c = t.model.config();
    if (saved_rows != 0 && saved_rows != c.padded_vocab)
      fmt::print(" > the checkpoint pads the vocabulary ({} tokens) to {} rows, this run to {}: {}{}\n", c.vocab,
                 saved_rows, c.padded_vocab,
                 saved_rows < c.padded_vocab ? "the extra padding rows start from their initial values"
                                             : "the checkpoint's extra padding rows are dropped",
                 c.mask_padded_vocab ? " (padded ids are masked: no effect on the loss)"
                                     : " (--mask_padded_vocab false: they join the softmax, the loss changes)");
    const parallel::RankCoords rc = t.parallel.coords();
    fmt::print("  successfully loaded checkpoint from {} [ t {}/{}, p {}/{} ] at iteration {} ({:.2f} s){}\n", s.dir,
               rc.tp + 1, t.parallel.grid().tp(), rc.pp + 1, t.parallel.grid().pp(), r.iteration(), secs,
               s.finetune ? " (--finetune: weights only, starting at iteration 0)" : "");
    std::fflush(stdout);
  }
  return res;
}

void load_inference_weights(const checkpoint::WeightSource& src, model::GptModel& model) {
  check_weights(src, model, "");
  model::ParamStore& ps = model.params();
  read_params(src, model, "", ps.params().data());
  kernels::round_to_dtype(ps.params().data(), ps.numel(), model.config().dtype);
}

}  // namespace mtrain::train
