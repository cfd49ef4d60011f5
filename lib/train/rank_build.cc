#include "train/rank_build.h"

#include "config/profiles.h"
#include "parallel/pipeline_schedule.h"
#include "train/checkpoint_schedule.h"
#include "train/grad_regions.h"
#include "train/grad_sync.h"

namespace mtrain::train {

device::DeviceProfile device_profile(const config::Args& args) {
  return config::load_device_profile(args.device_profile);
}

static optim::OptimizerConfig optimizer_config(const config::Args& args) {
  optim::OptimizerConfig oc;
  oc.type = args.optimizer;
  oc.beta1 = args.adam_beta1;
  oc.beta2 = args.adam_beta2;
  oc.eps = args.adam_eps;
  oc.weight_decay = args.weight_decay;
  oc.sgd_momentum = args.sgd_momentum;
  return oc;
}

TrainerOptions trainer_options(const config::Args& args) {
  TrainerOptions to;
  to.train_iters = args.train_iters.value_or(0);
  to.global_batch_size = args.global_batch_size;
  to.eval_interval = args.eval_interval.value_or(0);
  to.clip_grad = args.clip_grad;
  to.check_nonfinite = args.check_for_nan_in_loss_and_grad;
  to.skip_nonfinite = args.on_nonfinite == "skip";
  to.max_consecutive_skips = args.max_consecutive_nonfinite_skips;
  to.seed = static_cast<uint64_t>(args.seed);
  to.distributed_optimizer = args.use_distributed_optimizer;
  to.overlap_grad_reduce = args.overlap_grad_reduce;
  to.overlap_param_gather = args.overlap_param_gather;
  to.log_params_norm = args.log_params_norm;
  to.log_num_zeros_in_grad = args.log_num_zeros_in_grad;
  to.bucket_elems = args.ddp_bucket_size.value_or(0);
  return to;
}

model::ModelConfig rank_model_config(const config::Args& args, const parallel::RankCoords& rc) {
  model::ModelConfig mc = model::model_config_from_args(args, *args.vocab_size);
  model::place_on_rank(mc, args, rc.tp, rc.pp);
  mc.cp = args.context_parallel_size;
  mc.cp_rank = rc.cp;
  mc.cp_ulysses = args.context_parallel_algo == "ulysses_cp_algo";
  mc.cp_general_mask = args.cp_attention_mask_type == "general";
  mc.chunk_pool = model::chunk_pools(mc);
  const parallel::PipelineShape shape{args.pipeline_model_parallel_size, rc.pp,
                                      args.virtual_pipeline_model_parallel_size.value_or(1), args.num_micro_batches,
                                      mc.chunk_pool};
  mc.chunk_slots = parallel::pipeline_activation_slots(shape);
  return mc;
}

data::DataShard data_shard(const model::ModelConfig& mc, const parallel::ParallelState& state) {
  return {state.coords().dp, state.grid().dp(), (mc.sequence_parallel ? mc.tp : 1) * (mc.cp > 1 ? 2 * mc.cp : 1)};
}

std::unique_ptr<model::GptModel> build_rank_model(const config::Args& args, device::Device& dev,
                                                  parallel::ParallelState& state, const TrainerOptions& to, bool meta) {
  model::ModelConfig mc = rank_model_config(args, state.coords());
  mc.moe.ep_rank = state.ep().rank();  // the expert grid's EP rank picks this rank's experts
  auto model = std::make_unique<model::GptModel>(mc, dev, state.tp(), meta, [&](model::ParamStore& ps) {
    return lay_out_grad_regions(ps, state.grid(), to.bucket_elems);
  });
  if (mc.moe.ep > 1 || mc.moe.allgather) model->set_ep_comm(state.ep(), &state.tp_ep());
  if (state.grid().cp() > 1) model->set_cp_comm(state.cp(), &state.group(parallel::GroupKind::kTensorContext));
  return model;
}

TrainerSetup::TrainerSetup(const config::Args& args, model::GptModel& model, device::Device& dev,
                           const parallel::ParallelState& state, const TrainerOptions& to, bool meta)
    : optimizer(dev, optimizer_ranges(model.params()), model.params().numel(), model.config().dtype,
                optimizer_config(args),
                GradSync::optimizer_shard(model.params(), state, to.distributed_optimizer, to.bucket_elems), meta),
      scheduler(param_schedule(args).lr) {
  optimizer.init_master_from(model.params().params().data());
  optim::DynamicGradScalerConfig sc;
  sc.initial_scale = args.initial_loss_scale;
  sc.min_scale = args.min_loss_scale;
  sc.growth_interval = args.loss_scale_window;
  sc.hysteresis = args.hysteresis;
  scaler = optim::make_grad_scaler(model.config().dtype, args.static_loss_scale.value_or(0), sc);
}

parallel::ProcessGrid process_grid_from_args(const config::Args& a) {
  parallel::ProcessGridConfig g;
  g.world_size = a.world_size;
  g.tensor_model_parallel_size = a.tensor_model_parallel_size;
  g.pipeline_model_parallel_size = a.pipeline_model_parallel_size;
  g.context_parallel_size = a.context_parallel_size;
  g.expert_model_parallel_size = a.expert_model_parallel_size;
  // The expert grid's tensor size is the experts' split (1: whole experts), so expt-dp holds the TP peers.
  if (a.num_experts) g.expert_tensor_parallel_size = a.expert_tensor_parallel_size;
  g.use_tp_pp_dp_mapping = a.use_tp_pp_dp_mapping;
  return parallel::ProcessGrid(g);
}

}  // namespace mtrain::train
