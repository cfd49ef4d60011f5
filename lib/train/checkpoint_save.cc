// The saving half of checkpointing.h: the blocks and state of one rank, and
// the hook that saves on schedule.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "common/errors.h"
#include "config/json.h"
#include "nlohmann/json.hpp"
#include "train/checkpoint_blocks.h"
#include "train/checkpointing.h"

namespace mtrain::train {

using json = nlohmann::json;

SaveSettings save_settings(const config::Args& a) {
  SaveSettings s;
  s.dir = a.output_dir;
  s.interval = a.save_interval;
  s.optim = !a.no_save_optim;
  s.rng = !a.no_save_rng;
  s.keep_last = a.save_total_limit.value_or(0);
  s.dir_mode = static_cast<mode_t>(std::stoul(a.checkpoint_dir_mode, nullptr, 8));
  s.file_mode = static_cast<mode_t>(std::stoul(a.checkpoint_file_mode, nullptr, 8));
  s.continue_on_error = a.on_save_error == "continue";
  s.timeout_seconds = a.save_timeout_minutes.value_or(a.distributed_timeout_minutes) * 60;
  s.seed = static_cast<uint64_t>(a.seed);
  s.args_json = config::args_to_json(a);
  s.schedule = param_schedule(a);
  return s;
}

checkpoint::ModelMeta model_meta(const model::ModelConfig& c) {
  checkpoint::ModelMeta m;
  m.num_layers = c.num_layers;
  m.hidden_size = c.hidden;
  m.ffn_hidden_size = c.ffn;
  m.num_attention_heads = c.heads;
  m.num_query_groups = c.groups;
  m.kv_channels = c.head_dim;
  m.vocab_size = c.vocab;
  m.padded_vocab_size = c.padded_vocab;
  m.max_position_embeddings = c.max_positions;
  m.normalization = c.rmsnorm ? "RMSNorm" : "LayerNorm";
  m.swiglu = c.swiglu;
  m.position_embedding_type = c.rope ? "rope" : "learned_absolute";
  m.untie_embeddings_and_output_weights = c.untie;
  m.add_bias_linear = c.add_bias_linear;
  m.add_qkv_bias = c.add_qkv_bias;
  m.qk_layernorm = c.qk_layernorm;
  m.norm_epsilon = c.norm_eps;
  m.rotary_base = c.rotary_base;
  m.params_dtype = c.dtype == DType::kBF16 ? "bf16" : c.dtype == DType::kF16 ? "fp16" : "fp32";
  m.num_experts = c.moe.num_experts;
  if (c.moe.num_experts > 0) {
    m.moe_ffn_hidden_size = c.moe.ffn;
    m.moe_layers = c.moe.layers;
    m.moe_shared_expert_intermediate_size = c.moe.shared_ffn;
    m.moe_shared_expert_gate = c.moe.shared_gate;
    const moe::RouterConfig& r = c.moe.router;
    m.moe_router_topk = r.topk;
    m.moe_router_pre_softmax = r.pre_softmax;
    m.moe_router_score_function = r.score_function == moe::ScoreFunction::kSigmoid ? "sigmoid" : "softmax";
    m.moe_router_topk_scaling_factor = r.topk_scaling_factor.value_or(0.0);
    m.moe_router_enable_expert_bias = r.enable_expert_bias;
    m.moe_aux_loss_coeff = r.aux_loss_coeff;
  }
  return m;
}

namespace {

std::string state_json(const SaveSettings& s, TrainingState& t, const TrainerCounters& c) {
  const data::DataLoader::State d = t.data.position();
  const parallel::ProcessGrid& g = t.parallel.grid();
  json j = {
      {"format", "mtrain"},
      {"checkpoint_version", 1},
      {"iteration", c.iteration},
      {"consumed_samples", c.consumed_samples},
      {"trainer",
       {{"successful_steps", c.successful_steps},
        {"skipped_iterations", c.skipped_iterations},
        {"nan_iterations", c.nan_iterations},
        {"consecutive_skips", c.consecutive_skips}}},
      {"data",
       {{"epoch", d.epoch},
        {"cursor", d.cursor},
        {"seed", d.seed},
        {"consumed_samples", d.consumed_samples},
        {"num_samples", d.num_samples}}},
      {"optimizer", nullptr},
      {"opt_param_scheduler", nullptr},
      {"grad_scaler", nullptr},
      {"rng", nullptr},
      {"model", checkpoint::model_meta_to_json(model_meta(t.model.config()))},
      {"parallel",
       {{"tensor_model_parallel_size", g.tp()},
        {"pipeline_model_parallel_size", g.pp()},
        {"data_parallel_size", g.dp()},
        {"distributed_optimizer", t.optimizer.sharded()}}},
      {"args", json::parse(s.args_json)},
  };
  if (s.optim) {
    j["optimizer"] = {{"type", t.optimizer.config().type}, {"step", t.optimizer.step_count()}};
    j["opt_param_scheduler"] = param_schedule_to_json(s.schedule);
    if (auto* dyn = dynamic_cast<optim::DynamicGradScaler*>(t.scaler)) {
      const optim::DynamicGradScalerState st = dyn->state();
      j["grad_scaler"] = {
          {"scale", st.scale}, {"growth_tracker", st.growth_tracker}, {"hysteresis_tracker", st.hysteresis_tracker}};
    }
  }
  if (s.rng) j["rng"] = {{"seed", s.seed}};
  if (!s.base_json.empty()) j["base"] = json::parse(s.base_json);
  return j.dump();
}

// Every block of `data` (a flat buffer in the parameter layout) this rank holds.
void add_blocks(std::vector<checkpoint::ShardedTensor>& out, const model::ParamStore& ps, const std::string& prefix,
                const float* data, const parallel::ParallelState& st, bool trainable_only) {
  const parallel::RankCoords rc = st.coords();
  for (size_t i = 0; i < ps.infos().size(); ++i) {
    const model::ParamInfo& p = ps.infos()[i];
    if (!detail::saved_under_own_name(p)) continue;
    // A frozen parameter has no optimizer state; a LoRA checkpoint records the base by reference.
    if ((trainable_only || !prefix.empty()) && !p.trainable) continue;
    const bool writer =
        detail::writes_param(p, static_cast<int>(i), rc, st.grid().dp(), st.expert_coords(), st.grid().expert_dp());
    for (const detail::ParamBlock& b : detail::param_blocks(p)) {
      out.push_back({prefix + p.name, p.full_shape, b.offsets, b.shape, data + p.offset + b.local_offset, writer});
    }
  }
}

std::string megabytes(int64_t bytes) { return fmt::format("{:.2f} MB", static_cast<double>(bytes) / 1e6); }

// --save_timeout_minutes: a rank whose save stalls ends the run (exit 5)
// instead of leaving its peers waiting in the save's collectives.
Watchdog::OnTimeout save_timeout_handler(const std::string& dir) {
  return [dir](const std::string& report) {
    const CheckpointError e(report + "; ending this rank",
                            fmt::format("saving to {} stalled (a slow or hung file system, or a stuck peer). The save "
                                        "was not committed, so the previous checkpoint is intact; raise "
                                        "--save_timeout_minutes if saves legitimately take longer",
                                        dir));
    end_process_on_timeout(e);
  };
}

}  // namespace

checkpoint::SaveResult save_training_checkpoint(FileSystem& fs, const SaveSettings& s, TrainingState& t,
                                                const TrainerCounters& c) {
  model::ParamStore& ps = t.model.params();
  std::vector<checkpoint::ShardedTensor> tensors;
  const bool lora = !s.base_json.empty();
  add_blocks(tensors, ps, "", ps.params().data(), t.parallel, lora);
  std::vector<std::vector<float>> states;  // alive until the save is done
  if (s.optim) {
    for (const auto& [name, tensor] : t.optimizer.state_tensors()) {
      states.push_back(detail::full_state(*tensor, t.optimizer, t.parallel, ps, t.bucket_elems));
      add_blocks(tensors, ps, "optimizer." + name + "/", states.back().data(), t.parallel, lora);
    }
  }
  checkpoint::SaveOptions o;
  o.keep_last = s.keep_last;
  o.dir_mode = s.dir_mode;
  o.file_mode = s.file_mode;
  o.progress = t.progress;  // the first rank's line (TrainingState)
  return checkpoint::save_checkpoint(fs, t.parallel.world(), s.dir, c.iteration, tensors, state_json(s, t, c), o);
}

CheckpointHook::CheckpointHook(FileSystem& fs, SaveSettings s, TrainingState t, const Trainer& trainer,
                               std::shared_ptr<Watchdog> watchdog)
    : fs_(fs), s_(std::move(s)), t_(t), trainer_(trainer), watchdog_(std::move(watchdog)) {}

void CheckpointHook::on_train_begin(const observe::TrainInfo& info) { last_saved_ = info.start_iteration; }

void CheckpointHook::on_iteration_end(int64_t iteration) {
  if (s_.interval > 0 && iteration % s_.interval == 0) save();
}

// Megatron saves once more after the loop unless the last iteration was saved.
void CheckpointHook::on_train_end(const observe::TrainInfo&) { save(); }

void CheckpointHook::save() {
  const TrainerCounters c = trainer_.counters();
  if (c.iteration == last_saved_ || c.iteration == 0) return;
  const bool print = t_.parallel.rank() == 0;
  const parallel::RankCoords rc = t_.parallel.coords();
  if (print) {
    fmt::print("saving checkpoint at iteration {:7d} to {} in mtrain sharded safetensors format\n", c.iteration,
               s_.dir);
    std::fflush(stdout);
  }
  const auto t0 = std::chrono::steady_clock::now();
  checkpoint::SaveResult r;
  try {
    // The save's time limit: a phase of the rank watchdog, or (one process,
    // no watchdog) a watchdog of its own for the duration of the save.
    const std::string what = fmt::format("checkpoint save of iteration {}", c.iteration);
    std::unique_ptr<Watchdog> own;
    if (watchdog_) {
      watchdog_->begin_phase(what, s_.timeout_seconds, save_timeout_handler(s_.dir));
    } else {
      own = std::make_unique<Watchdog>(s_.timeout_seconds, save_timeout_handler(s_.dir), "rank 0");
      own->beat(what);
    }
    struct EndPhase {
      Watchdog* w;
      ~EndPhase() {
        if (w) w->end_phase();
      }
    } end_phase{watchdog_.get()};
    r = save_training_checkpoint(fs_, s_, t_, c);
  } catch (const CheckpointError& e) {
    if (!s_.continue_on_error) throw;
    if (print) {
      fmt::print(stderr,
                 "mtrain: warning: the checkpoint of iteration {} was not saved: {}\n  training continues "
                 "(--on_save_error continue); the last good checkpoint is unchanged\n",
                 c.iteration, e.what());
      std::fflush(stderr);
    }
    return;
  }
  last_saved_ = c.iteration;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!print) return;
  fmt::print("  successfully saved checkpoint from iteration {:7d} to {} [ t {}/{}, p {}/{} ] ({} in {:.2f} s)\n",
             c.iteration, s_.dir, rc.tp + 1, t_.parallel.grid().tp(), rc.pp + 1, t_.parallel.grid().pp(),
             megabytes(r.total_bytes), secs);
  if (!r.replaced.empty()) fmt::print("  replaced the checkpoint {} an earlier run had saved\n", r.replaced);
  for (const std::string& removed : r.removed)
    fmt::print("  removed old checkpoint {} (--save_total_limit {})\n", removed, s_.keep_last);
  for (const std::string& w : r.warnings) fmt::print(stderr, "mtrain: warning: {}\n", w);
  std::fflush(stdout);
}

}  // namespace mtrain::train
