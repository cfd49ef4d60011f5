#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "common/errors.h"
#include "common/rng.h"
#include "model/model_config.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "parallel/pipeline_schedule.h"
#include "profiler/probe.h"
#include "tensor/precision.h"
#include "train/grad_regions.h"

namespace mtrain::train {

model::TokenBatch token_batch(const data::Batch& b) {
  model::TokenBatch t;
  t.B = b.B;
  t.T = b.T;
  t.tokens = b.tokens.data();
  t.targets = b.targets.data();
  t.positions = b.positions.data();
  t.doc_ids = b.doc_ids.empty() ? nullptr : b.doc_ids.data();
  return t;
}

std::vector<optim::ParamRange> optimizer_ranges(const model::ParamStore& ps) {
  std::vector<optim::ParamRange> r;
  for (const model::ParamInfo& p : ps.infos())
    if (p.trainable) r.push_back({p.name, p.offset, p.numel, p.weight_decay});  // frozen: no optimizer state
  return r;
}

static double weighted_loss(const float* losses, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i] != 0.f) s += static_cast<double>(w[i]) * losses[i];
  return s;
}

// NaN prints as "nan" whatever its sign bit.
static std::string show(double v) { return std::isnan(v) ? "nan" : fmt::format("{}", v); }

static double weight_sum(const data::Batch& b) {
  double s = 0;
  for (float w : b.loss_weights) s += w;
  return s;
}

static double weight_sum(const std::vector<data::Batch>& batches) {
  double s = 0;
  for (const auto& b : batches) s += weight_sum(b);
  return s;
}

static parallel::ProcessGrid single_device_grid() {
  parallel::ProcessGridConfig g;
  g.world_size = 1;
  return parallel::ProcessGrid(g);
}

Trainer::Trainer(TrainerOptions opts, model::GptModel& model, optim::Optimizer& optimizer,
                 optim::LrScheduler& scheduler, optim::GradScaler* scaler, data::BatchSource& train_data,
                 const std::vector<data::Batch>* val_batches, observe::HookList& hooks,
                 parallel::ParallelState* parallel)
    : opts_(opts),
      model_(model),
      optimizer_(optimizer),
      scheduler_(scheduler),
      scaler_(scaler),
      train_data_(train_data),
      val_batches_(val_batches),
      hooks_(hooks),
      state_(parallel) {
  if (!state_) {
    own_state_ = std::make_unique<parallel::ParallelState>(parallel::make_self_parallel_state(single_device_grid()));
    state_ = own_state_.get();
  }
  grad_sync_ = std::make_unique<GradSync>(model.params(), *state_, opts.distributed_optimizer, opts.bucket_elems,
                                          opts.overlap_grad_reduce, opts.overlap_param_gather,
                                          parallel::Wire::of(model.config().dtype), model.config().grad_dtype);
  // Sized for the largest micro-batch the model's activation slots hold.
  const model::ModelConfig& c = model.config();
  const parallel::PipelineShape shape{state_->grid().pp(), state_->coords().pp, model.num_chunks(), 1};
  pipe_buffers_ =
      parallel::PipelineBuffers(model.device(), shape, c.tokens_local(c.micro_batch * c.seq_local()) * c.hidden,
                                c.dtype, model.params().params().is_meta());
  state_->set_observer([this](const parallel::CommEvent& e) {
    // HCCL / NCCL set a communicator up, and hold its buffers, on its first use.
    model_.device().use_communicator(std::string(e.group), e.group_size);
    const observe::CommTotals add{1, e.bytes + e.recv_bytes, e.seconds};
    for (observe::CommTotals* t : {&step_comm_, &step_comm_by_group_[std::string(e.group)]}) {
      t->calls += add.calls;
      t->bytes += add.bytes;
      t->seconds += add.seconds;
    }
    hooks_.comm(e);
  });
}

Trainer::~Trainer() { state_->set_observer({}); }

TrainerCounters Trainer::counters() const {
  return {iteration_, successful_steps_, consumed_samples_, skipped_total_, nan_total_, consecutive_skips_};
}

void Trainer::restore(const TrainerCounters& c) {
  iteration_ = c.iteration;
  successful_steps_ = c.successful_steps;
  consumed_samples_ = c.consumed_samples;
  skipped_total_ = c.skipped_iterations;
  nan_total_ = c.nan_iterations;
  consecutive_skips_ = c.consecutive_skips;
}

void Trainer::train() {
  observe::TrainInfo info;
  info.start_iteration = iteration_;
  info.train_iters = opts_.train_iters;
  info.num_params = model_.params().numel();
  info.model_description = model::describe(model_.config());
  hooks_.train_begin(info);
  while (iteration_ < opts_.train_iters) {
    hooks_.step_begin(iteration_ + 1);
    observe::StepMetrics m = train_step();
    hooks_.step_end(m);
    if (eval_enabled() && iteration_ % opts_.eval_interval == 0) {
      hooks_.eval_end(observe::EvalMetrics{iteration_, evaluate(*val_batches_), false});
    }
    // --overlap_param_gather: a hook about to read the weights (a save) gets
    // them whole, as Megatron forces the parameter sync before saving.
    if (hooks_.reads_params(iteration_)) grad_sync_->finish_param_gather();
    hooks_.iteration_end(iteration_);
  }
  grad_sync_->finish_param_gather();
  hooks_.train_end(info);
  // Megatron evaluates once more after training is done.
  if (eval_enabled() && iteration_ > info.start_iteration) {
    hooks_.eval_end(observe::EvalMetrics{iteration_, evaluate(*val_batches_), true});
  }
}

// The pipeline shape of this rank for `microbatches` local micro-batches.
static parallel::PipelineShape pipeline_shape(const parallel::ParallelState& st, const model::GptModel& m,
                                              int64_t microbatches) {
  parallel::PipelineShape p;
  p.stages = st.grid().pp();
  p.stage = st.coords().pp;
  p.chunks = m.num_chunks();
  p.microbatches = static_cast<int>(microbatches);
  p.chunk_pool = m.config().chunk_pool;  // the slots the model allocated per pool
  return p;
}

double Trainer::run_schedule(const std::vector<data::Batch>& micro, int64_t it, double dloss_scale) {
  const int dp = state_->grid().dp(), dp_rank = state_->coords().dp;
  const bool counts_loss = state_->coords().tp == 0;
  std::vector<model::TokenBatch> tb;
  for (const data::Batch& b : micro) tb.push_back(token_batch(b));
  // Auxiliary losses (MoE load balancing) scale their gradient from one token loss's weight.
  for (model::TokenBatch& t : tb) t.aux_loss_scale = static_cast<float>(dloss_scale);
  auto seed_of = [&](int mb) {
    return stream_seed(opts_.seed, static_cast<uint64_t>(it), uint64_t(mb) * dp + dp_rank);
  };
  double loss_sum = 0;
  parallel::PipelineCallbacks cb;
  cb.message_elems = [&](int, int mb) { return model_.hidden_elems(tb[mb]); };
  cb.forward = [&](const parallel::PipeAction& a, const float* input) {
    profiler::Scope pass(
        {profiler::Kind::kPhase, profiler::Pass::kForward, "forward_step", a.microbatch, nullptr, a.chunk});
    // --overlap_param_gather: the chunk's updated weights must have arrived.
    if (grad_sync_->param_gather_pending())
      for (const auto& [b, e] : model_.chunk_param_spans(a.chunk)) grad_sync_->wait_params(b, e);
    const float* out = model_.forward_chunk(a.chunk, a.slot, tb[a.microbatch], input, seed_of(a.microbatch), true);
    if (model_.chunk(a.chunk).post && counts_loss)
      loss_sum += weighted_loss(model_.chunk_losses(a.chunk, a.slot), micro[a.microbatch].loss_weights);
    return out;
  };
  cb.backward = [&](const parallel::PipeAction& a, const float* grad_output) {
    profiler::Scope pass(
        {profiler::Kind::kPhase, profiler::Pass::kBackward, "backward_step", a.microbatch, nullptr, a.chunk});
    const data::Batch& b = micro[a.microbatch];
    if (model_.chunk(a.chunk).post) {
      // d(total loss)/d(token loss) for the global per-token mean, times the fp16 loss scale.
      dloss_.resize(b.loss_weights.size());
      for (size_t i = 0; i < dloss_.size(); ++i) dloss_[i] = static_cast<float>(b.loss_weights[i] * dloss_scale);
    }
    // --overlap_grad_reduce: the last micro-batch's backward of a chunk makes
    // its gradients final; the reduction of each finished bucket starts at once.
    const bool last = a.microbatch + 1 == static_cast<int>(micro.size());
    if (last && grad_sync_->overlapping())
      model_.set_grad_ready([this](int64_t b, int64_t e) { grad_sync_->mark_ready(b, e); });
    const float* dx = model_.backward_chunk(a.chunk, a.slot, tb[a.microbatch], grad_output, dloss_.data(),
                                            seed_of(a.microbatch), true, /*zero_grads=*/a.microbatch == 0);
    model_.set_grad_ready(nullptr);
    return dx;
  };
  parallel::run_pipeline(state_->pp(), pipeline_shape(*state_, model_, micro.size()), cb,
                         parallel::Wire::of(model_.config().dtype), &pipe_buffers_);
  return loss_sum;
}

std::vector<data::Batch> Trainer::cp_share(std::vector<data::Batch> micro) const {
  const int cp = state_->grid().cp();
  if (cp == 1) return micro;
  for (data::Batch& b : micro) b = data::context_parallel_slice(b, cp, state_->coords().cp);
  return micro;
}

double Trainer::share_loss(double local) {
  state_->world().all_reduce(&local, 1, parallel::ReduceOp::kSum);
  return local;
}

observe::StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t it = iteration_ + 1;
  profiler::Scope region({profiler::Kind::kIteration, profiler::Pass::kNone, "iteration", it});
  StepLoss loss = forward_backward(it);
  observe::StepMetrics m;
  const StepUpdate update = optimizer_step(it, loss.lm_loss, m);
  if (opts_.log_params_norm) {
    m.has_params_norm = true;
    m.params_norm = grad_sync_->params_norm(model_.params().params().data());
  }
  iteration_ = it;
  consumed_samples_ += train_data_.global_batch_samples();
  fill_step_metrics(m, it, std::move(loss), update);
  m.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

Trainer::StepLoss Trainer::forward_backward(int64_t it) {
  step_comm_ = {};
  step_comm_by_group_.clear();
  std::vector<data::Batch> micro = cp_share(train_data_.next_global_batch());
  // Loss tokens and tokens of the whole global batch (all DP and CP ranks).
  double counts[2] = {weight_sum(micro), 0};
  for (const data::Batch& b : micro) counts[1] += static_cast<double>(b.B * b.T);
  if (parallel::Comm& g = state_->group(dense_grad_group(state_->grid())); g.size() > 1)
    g.all_reduce(counts, 2, parallel::ReduceOp::kSum);
  StepLoss loss;
  loss.loss_tokens = counts[0];
  loss.tokens = static_cast<int64_t>(counts[1]);
  const double scale = scaler_ ? scaler_->scale() : 1.0;
  model::ParamStore& ps = model_.params();
  // The first micro-batch's backward zeroes each gradient just before its
  // first contribution (no separate sweep over the buffer).
  if (micro.empty()) ps.grads().zero();
  grad_sync_->begin_overlap(ps.grads().data());
  const double loss_sum = share_loss(run_schedule(micro, it, loss.loss_tokens > 0 ? scale / loss.loss_tokens : 0.0));
  loss.aux_losses = model_.take_aux_log(*state_, static_cast<int64_t>(micro.size()));
  loss.lm_loss = loss.loss_tokens > 0 ? loss_sum / loss.loss_tokens : 0.0;
  profiler::Scope phase({profiler::Kind::kPhase, profiler::Pass::kNone, "grad_sync"});
  grad_sync_->reduce(ps.grads().data());
  // Megatron's finalize_model_grads: after the gradient reduction, before
  // (and whatever becomes of) the optimizer step.
  model_.update_expert_bias(state_->group(parallel::GroupKind::kTensorDataContext));
  return loss;
}

// Megatron's optimizer.step(): unscale and check, grad norm, update, param
// copy and (distributed optimizer) the all-gather; their kernels belong here.
Trainer::StepUpdate Trainer::optimizer_step(int64_t it, double lm_loss, observe::StepMetrics& m) {
  model::ParamStore& ps = model_.params();
  float* grads = ps.grads().data();
  StepUpdate u;
  profiler::Scope optimizer_phase({profiler::Kind::kPhase, profiler::Pass::kNone, "optimizer_step"});
  if (scaler_) {
    // Megatron's order: unscale, check the grads for overflow, update the
    // scaler; on overflow the step (and the lr schedule) is skipped.
    const bool overflow = grad_sync_->unscale_and_check(grads, scaler_->inv_scale());
    scaler_->update(overflow);
    u.skipped = overflow;
    if (!u.skipped) u.grad_norm = grad_sync_->grad_norm(grads);
  } else {
    u.grad_norm = grad_sync_->grad_norm(grads);
  }
  // Megatron counts zeros after unscaling, and none on an fp16 overflow skip.
  const bool grads_valid = !(scaler_ && u.skipped);
  if (opts_.log_num_zeros_in_grad && grads_valid) {
    m.has_num_zeros = true;
    m.num_zeros = grad_sync_->count_zeros(grads);
  }
  const bool finite = std::isfinite(lm_loss) && std::isfinite(u.grad_norm);
  if (!u.skipped && !finite) u.skipped = on_nonfinite(it, lm_loss, u.grad_norm);
  if (u.skipped) {
    count_skip(it);
  } else {
    consecutive_skips_ = 0;
    // Clipping is applied inside the optimizer's pass (the same float product
    // as optim::clip_grads, without another sweep over the gradient buffer).
    const double clip_coeff = opts_.clip_grad > 0 ? optim::clip_coefficient(opts_.clip_grad, u.grad_norm) : 1.0;
    optimizer_.step(ps.params().data(), grads, scheduler_.lr_at(successful_steps_), clip_coeff);
    grad_sync_->gather_params(ps.params().data());
    ++successful_steps_;
  }
  optimizer_phase.end({});
  return u;
}

bool Trainer::on_nonfinite(int64_t it, double lm_loss, double grad_norm) {
  ++nan_total_;
  if (opts_.check_nonfinite && !opts_.skip_nonfinite) {
    throw NonFiniteError(
        fmt::format("iteration {}: {} is not finite (lm loss {}, grad norm {}); stopped before the optimizer step, "
                    "so the weights are those after iteration {}",
                    it, std::isfinite(lm_loss) ? "the gradient norm" : "the loss", show(lm_loss), show(grad_norm),
                    it - 1),
        "lower --lr, raise --lr_warmup_iters, use --bf16 instead of --fp16, or pass --on_nonfinite skip to skip "
        "such steps");
  }
  return opts_.check_nonfinite;
}

void Trainer::count_skip(int64_t it) {
  ++skipped_total_;
  // fp16 overflow skips are the loss scaler's normal business; only skips for
  // non-finite values (--on_nonfinite skip) count towards the cap.
  if (!scaler_ && ++consecutive_skips_ > opts_.max_consecutive_skips) {
    throw NonFiniteError(fmt::format("iteration {}: the loss or gradient norm is non-finite in {} consecutive "
                                     "iterations, more than --max_consecutive_nonfinite_skips {} allows",
                                     it, consecutive_skips_, opts_.max_consecutive_skips),
                         "the run has diverged; lower --lr or check the data");
  }
}

void Trainer::fill_step_metrics(observe::StepMetrics& m, int64_t it, StepLoss loss, const StepUpdate& u) const {
  m.iteration = it;
  m.train_iters = opts_.train_iters;
  m.consumed_samples = consumed_samples_;
  m.global_batch_size = opts_.global_batch_size;
  m.loss_tokens = static_cast<int64_t>(loss.loss_tokens);
  m.tokens = loss.tokens;
  m.lm_loss = loss.lm_loss;
  m.aux_losses = std::move(loss.aux_losses);
  // Megatron logs the lr read after the scheduler stepped.
  m.learning_rate = scheduler_.lr_at(successful_steps_);
  m.grad_norm = u.grad_norm;
  m.has_grad_norm = !(scaler_ && u.skipped);
  m.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  m.skipped = u.skipped;
  m.skipped_iterations = skipped_total_;
  m.nan_iterations = nan_total_;
  m.grad_buckets_overlapped = grad_sync_->buckets_started_early();
  m.comm = step_comm_;
  m.comm_by_group = step_comm_by_group_;
}

double Trainer::evaluate(const std::vector<data::Batch>& all_batches) {
  grad_sync_->finish_param_gather();
  const std::vector<data::Batch> batches = cp_share(all_batches);
  std::vector<model::TokenBatch> tb;
  for (const data::Batch& b : batches) tb.push_back(token_batch(b));
  double sums[2] = {0, weight_sum(batches)};  // weighted loss (last stage, TP rank 0), loss tokens (this DP rank)
  const bool counts_loss = state_->coords().tp == 0;
  parallel::PipelineCallbacks cb;
  cb.message_elems = [&](int, int mb) { return model_.hidden_elems(tb[mb]); };
  cb.forward = [&](const parallel::PipeAction& a, const float* input) {
    profiler::Scope pass(
        {profiler::Kind::kPhase, profiler::Pass::kForward, "forward_step", a.microbatch, nullptr, a.chunk});
    const float* out = model_.forward_chunk(a.chunk, 0, tb[a.microbatch], input, 0, /*training=*/false);
    if (model_.chunk(a.chunk).post && counts_loss)
      sums[0] += weighted_loss(model_.chunk_losses(a.chunk, 0), batches[a.microbatch].loss_weights);
    return out;
  };
  parallel::run_pipeline_forward_only(state_->pp(), pipeline_shape(*state_, model_, batches.size()), cb,
                                      parallel::Wire::of(model_.config().dtype), &pipe_buffers_);
  // Loss: summed over the world (only last-stage TP-rank-0 ranks add); tokens: over DP and CP.
  state_->world().all_reduce(&sums[0], 1, parallel::ReduceOp::kSum);
  if (parallel::Comm& g = state_->group(dense_grad_group(state_->grid())); g.size() > 1)
    g.all_reduce(&sums[1], 1, parallel::ReduceOp::kSum);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace mtrain::train
