// The loading half of checkpointing.h. Everything that can refuse a
// checkpoint (shape mismatch, missing optimizer or RNG state, a damaged
// state record, a data position that does not fit) is checked before any
// weight or optimizer state is touched.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <string>

#include "checkpoint/hf_model_dir.h"
#include "common/errors.h"
#include "nlohmann/json.hpp"
#include "tensor/precision.h"
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

// Refuses, naming the tensor, a parameter the source lacks or holds in
// another shape. Returns the source's vocabulary rows (0: none read).
int64_t check_weights(const checkpoint::WeightSource& src, model::GptModel& m, const std::string& prefix) {
  int64_t rows = 0;
  for (const model::ParamInfo& p : m.params().infos()) {
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

// Reads this rank's blocks of every parameter into `flat` (the parameter
// layout). Vocabulary rows past the source's are left as they are.
void read_params(const checkpoint::WeightSource& src, model::GptModel& m, const std::string& prefix, float* flat) {
  for (const model::ParamInfo& p : m.params().infos()) {
    const std::string name = prefix + detail::source_name(p);
    const int64_t saved_rows = src.global_shape(name).at(0);
    for (detail::ParamBlock b : detail::param_blocks(p)) {
      if (vocab_rows(p, m.config())) b.shape[0] = std::clamp<int64_t>(saved_rows - b.offsets[0], 0, b.shape[0]);
      src.read_block(name, b.offsets, b.shape, flat + p.offset + b.local_offset);
    }
  }
}

const json& member(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw CheckpointError(fmt::format("{}: the checkpoint state has no \"{}\"", where, key),
                          "the checkpoint is damaged or was not written by mtrain");
  return j.at(key);
}

int64_t integer(const json& j, const char* key, const std::string& where) {
  const json& v = member(j, key, where);
  if (!v.is_number_integer())
    throw CheckpointError(fmt::format("{}: \"{}\" of the checkpoint state is not an integer", where, key));
  return v.get<int64_t>();
}

TrainerCounters counters_from(const json& st, const std::string& where) {
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
void read_optimizer(const checkpoint::CheckpointReader& r, TrainingState& t) {
  model::ParamStore& ps = t.model.params();
  for (const auto& [name, tensor] : t.optimizer.state_tensors()) {
    const std::string prefix = "optimizer." + name + "/";
    // Saved from an fp32 run: the master keeps the loaded weights (load_model_weights).
    if (name == "fp32_param" && !r.has(prefix + ps.infos().front().init_name)) continue;
    std::vector<float> flat(static_cast<size_t>(ps.numel()), 0.0f);
    // A master copy's rows past the checkpoint's vocabulary padding start as the weights.
    if (name == "fp32_param") std::copy_n(ps.params().data(), ps.numel(), flat.data());
    read_params(r, t.model, prefix, flat.data());
    detail::take_state(*tensor, t.optimizer, flat);
  }
}

}  // namespace

void load_model_weights(const checkpoint::WeightSource& src, TrainingState& t) {
  check_weights(src, t.model, "");
  model::ParamStore& ps = t.model.params();
  read_params(src, t.model, "", ps.params().data());
  // The fp32 master starts from the loaded values; a bf16/fp16 model holds them rounded.
  t.optimizer.init_master_from(ps.params().data());
  kernels::round_to_dtype(ps.params().data(), ps.numel(), t.model.config().dtype);
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

std::optional<Resumed> load_training_checkpoint(FileSystem& fs, const LoadSettings& s, TrainingState& t) {
  const bool print = t.parallel.rank() == 0;
  const std::string tracker = s.dir + "/" + checkpoint::kTrackerFileName;
  if (!s.iteration && !fs.exists(tracker)) {
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
  checkpoint::CheckpointReader r = checkpoint::CheckpointReader::open(fs, s.dir, s.iteration);
  const std::string where = r.path();
  if (print) fmt::print("loading checkpoint from {} at iteration {}\n", s.dir, r.iteration());
  json st;
  try {
    st = json::parse(r.state_json());
  } catch (const json::exception& e) {
    throw CheckpointError(fmt::format("{}: the checkpoint state is not valid JSON: {}", where, e.what()));
  }
  // 1. Everything that can refuse the checkpoint.
  const checkpoint::ModelMeta saved = checkpoint::model_meta_from_json(member(st, "model", where), where);
  const std::vector<std::string> diff = checkpoint::model_meta_mismatches(saved, model_meta(t.model.config()));
  if (!diff.empty())
    throw CheckpointError(fmt::format("{}: the checkpoint is of another model:\n  {}", where, fmt::join(diff, "\n  ")),
                          "pass the model flags the checkpoint was saved with (its \"args\" are in manifest.json)");
  const int64_t saved_rows = check_weights(r, t.model, "");
  const bool optim = s.optim && !s.finetune, rng = s.rng && !s.finetune;
  if (optim) {
    require_saved(st, "optimizer", where, "the optimizer state", "--no_save_optim", "--no_load_optim");
    const std::string type = member(member(st, "optimizer", where), "type", where).get<std::string>();
    if (type != t.optimizer.config().type)
      throw CheckpointError(fmt::format("{}: optimizer value from checkpoint ({}) is not equal to the input argument "
                                        "value ({})",
                                        where, type, t.optimizer.config().type),
                            "pass --no_load_optim to start the new optimizer fresh");
    for (const auto& [name, tensor] : t.optimizer.state_tensors())
      if (name != "fp32_param") check_weights(r, t.model, "optimizer." + name + "/");
  }
  if (rng) require_saved(st, "rng", where, "the rng state", "--no_save_rng", "--no_load_rng");
  Resumed res;
  if (!s.finetune) {
    res.counters = counters_from(st, where);
    t.data.set_position(position_from(st, where));  // DataError if the dataset changed
  }
  if (rng) res.seed = static_cast<uint64_t>(integer(member(st, "rng", where), "seed", where));

  // 2. The tensors.
  load_model_weights(r, t);
  if (optim) {
    const json& o = st.at("optimizer");
    read_optimizer(r, t);
    t.optimizer.set_step_count(integer(o, "step", where));
    if (auto* dyn = dynamic_cast<optim::DynamicGradScaler*>(t.scaler); dyn && !st.at("grad_scaler").is_null()) {
      const json& g = st.at("grad_scaler");
      optim::DynamicGradScalerState gs;
      gs.scale = member(g, "scale", where).get<float>();
      gs.growth_tracker = integer(g, "growth_tracker", where);
      gs.hysteresis_tracker = integer(g, "hysteresis_tracker", where);
      dyn->load_state(gs);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (print) {
    const model::ModelConfig& c = t.model.config();
    if (saved_rows != 0 && saved_rows != c.padded_vocab)
      fmt::print(" > the checkpoint pads the vocabulary ({} tokens) to {} rows, this run to {}: {}\n", c.vocab,
                 saved_rows, c.padded_vocab,
                 saved_rows < c.padded_vocab ? "the extra padding rows start from their initial values"
                                             : "the checkpoint's extra padding rows are dropped");
    const parallel::RankCoords rc = t.parallel.coords();
    fmt::print("  successfully loaded checkpoint from {} [ t {}/{}, p {}/{} ] at iteration {} ({:.2f} s){}\n", s.dir,
               rc.tp + 1, t.parallel.grid().tp(), rc.pp + 1, t.parallel.grid().pp(), r.iteration(), secs,
               s.finetune ? " (--finetune: weights only, starting at iteration 0)" : "");
    std::fflush(stdout);
  }
  return res;
}

}  // namespace mtrain::train
