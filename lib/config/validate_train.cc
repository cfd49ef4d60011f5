// Validation, part 2: parallel layout, batch sizes, schedule and precision.
#include <fmt/format.h>

#include <cmath>

#include "common/errors.h"
#include "config/validate.h"
#include "config/validate_parts.h"

namespace mtrain::config {

namespace detail {

namespace {

void check_uneven_pipeline(const Args& a) {
  const int pp = a.pipeline_model_parallel_size;
  const int first = a.decoder_first_pipeline_num_layers.value_or(0);
  const int last = a.decoder_last_pipeline_num_layers.value_or(0);
  if (pp == 1) {
    throw ConfigError(
        "--decoder_first_pipeline_num_layers / --decoder_last_pipeline_num_layers require "
        "--pipeline_model_parallel_size > 1",
        "with one pipeline stage every layer is on it; remove these flags");
  }
  if (a.decoder_first_pipeline_num_layers) require_positive(first, "decoder_first_pipeline_num_layers");
  if (a.decoder_last_pipeline_num_layers) require_positive(last, "decoder_last_pipeline_num_layers");
  const int middle_stages =
      pp - (a.decoder_first_pipeline_num_layers ? 1 : 0) - (a.decoder_last_pipeline_num_layers ? 1 : 0);
  const int middle_layers = a.num_layers - first - last;
  const bool ok =
      middle_stages == 0 ? middle_layers == 0 : middle_layers >= middle_stages && middle_layers % middle_stages == 0;
  if (!ok) {
    throw ConfigError(fmt::format("num_layers ({}) minus decoder_first_pipeline_num_layers ({}) and "
                                  "decoder_last_pipeline_num_layers ({}) must split evenly over the other {} "
                                  "pipeline stages",
                                  a.num_layers, first, last, middle_stages),
                      "every stage needs a whole, equal number of layers; adjust the first/last stage layers");
  }
}

void check_virtual_pipeline(Args& a) {
  const int pp = a.pipeline_model_parallel_size;
  if (pp <= 1) throw ConfigError("pipeline-model-parallel size should be greater than 1 with interleaved schedule");
  if (a.decoder_first_pipeline_num_layers || a.decoder_last_pipeline_num_layers) {
    throw ConfigError(
        "an uneven pipeline (--decoder_first/last_pipeline_num_layers) cannot be combined with a "
        "virtual pipeline in mtrain");
  }
  if (a.num_layers % pp != 0) {
    throw ConfigError("number of layers of the model must be divisible pipeline model parallel size",
                      fmt::format("--num_layers ({}) vs --pipeline_model_parallel_size ({})", a.num_layers, pp));
  }
  const int per_stage = a.num_layers / pp;
  int vpp = 0;
  if (a.num_layers_per_virtual_pipeline_stage) {
    const int per_vstage = *a.num_layers_per_virtual_pipeline_stage;
    require_positive(per_vstage, "num_layers_per_virtual_pipeline_stage");
    if (per_stage % per_vstage != 0) {
      throw ConfigError(
          "number of layers per pipeline stage must be divisible number of layers per virtual "
          "pipeline stage",
          fmt::format("{} layers per stage vs --num_layers_per_virtual_pipeline_stage {}", per_stage, per_vstage));
    }
    vpp = per_stage / per_vstage;
    if (a.virtual_pipeline_model_parallel_size && *a.virtual_pipeline_model_parallel_size != vpp) {
      throw ConfigError(
          "set only one of --num_layers_per_virtual_pipeline_stage and "
          "--virtual_pipeline_model_parallel_size");
    }
  } else {
    vpp = *a.virtual_pipeline_model_parallel_size;
    require_positive(vpp, "virtual_pipeline_model_parallel_size");
    if (per_stage % vpp != 0) {
      throw ConfigError(
          fmt::format("number of layers per pipeline stage ({}) must be divisible by "
                      "virtual_pipeline_model_parallel_size ({})",
                      per_stage, vpp));
    }
  }
  a.num_layers_per_virtual_pipeline_stage = per_stage / vpp;
  a.virtual_pipeline_model_parallel_size = vpp;
  if (vpp == 1) {  // one virtual stage is the plain schedule (Megatron: VPP=1 -> None)
    a.num_layers_per_virtual_pipeline_stage.reset();
    a.virtual_pipeline_model_parallel_size.reset();
  }
}

void check_layout(Args& a, int world_size) {
  require_positive(world_size, "world size");
  const int tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size, cp = a.context_parallel_size;
  require_positive(tp, "tensor_model_parallel_size");
  require_positive(pp, "pipeline_model_parallel_size");
  require_positive(cp, "context_parallel_size");
  require_positive(a.expert_model_parallel_size, "expert_model_parallel_size");
  const int total = tp * pp * cp;
  if (world_size % total != 0) {
    throw ConfigError(fmt::format("world size ({}) is not divisible by total_model_size ({})", world_size, total),
                      fmt::format("total_model_size = tensor_model_parallel_size ({}) x pipeline_model_parallel_size "
                                  "({}) x context_parallel_size ({}); launch a multiple of {} ranks or lower them",
                                  tp, pp, cp, total));
  }
  a.world_size = world_size;
  a.data_parallel_size = world_size / total;
  if (a.num_attention_heads % tp != 0) {
    throw ConfigError(fmt::format("num_attention_heads ({}) must be a multiple of tensor_model_parallel_size ({}).",
                                  a.num_attention_heads, tp),
                      "each TP rank holds whole heads: change --num_attention_heads or --tensor_model_parallel_size");
  }
  const int groups = a.group_query_attention ? a.num_query_groups : a.num_attention_heads;
  if (groups % tp != 0) {
    throw ConfigError(
        fmt::format("num_query_groups ({}) must be a multiple of tensor_model_parallel_size ({}).", groups, tp),
        "each TP rank holds whole key/value groups (mtrain does not replicate them over TP ranks): "
        "change --num_query_groups or --tensor_model_parallel_size");
  }
  if (a.ffn_hidden_size && *a.ffn_hidden_size % tp != 0) {
    throw ConfigError(fmt::format("ffn_hidden_size ({}) must be divisible by tensor_model_parallel_size ({})",
                                  *a.ffn_hidden_size, tp),
                      "the MLP is split evenly over the TP ranks");
  }
  if (a.num_layers_per_virtual_pipeline_stage || a.virtual_pipeline_model_parallel_size) {
    check_virtual_pipeline(a);
  } else if (a.decoder_first_pipeline_num_layers || a.decoder_last_pipeline_num_layers) {
    check_uneven_pipeline(a);
  } else if (a.num_layers % pp != 0) {
    throw ConfigError("Number of layers should be divisible by the pipeline-model-parallel size",
                      fmt::format("--num_layers ({}) is not a multiple of --pipeline_model_parallel_size ({}); for an "
                                  "uneven split set --decoder_first_pipeline_num_layers / "
                                  "--decoder_last_pipeline_num_layers",
                                  a.num_layers, pp));
  }
}

void check_recompute(Args& a) {
  if (a.recompute_granularity == "none") a.recompute_granularity.reset();
  const bool full = a.recompute_granularity == "full";
  if (a.recompute_method && !full) {
    throw ConfigError("recompute method is not yet supported for selective recomputing granularity",
                      "--recompute_method needs --recompute_granularity full");
  }
  const int per_rank = a.num_layers / a.pipeline_model_parallel_size;
  if (full) {
    if (!a.recompute_method) {
      throw ConfigError("Using recompute_granularity: full so recompute_method must be \"block\" or \"uniform\"",
                        "add --recompute_method uniform or block");
    }
    if (!a.recompute_num_layers || *a.recompute_num_layers < 1 || *a.recompute_num_layers > per_rank) {
      throw ConfigError(fmt::format("When using recompute_granularity: full recompute_num_layers must be between 1 "
                                    "and num_layers_per_pipeline_rank: {}",
                                    per_rank),
                        "set --recompute_num_layers");
    }
    if (*a.recompute_method == "uniform" && per_rank % *a.recompute_num_layers != 0) {
      throw ConfigError(
          fmt::format("num_layers_per_pipeline_rank ({}) must be divisible by recompute_num_layers "
                      "({}) with recompute_method uniform",
                      per_rank, *a.recompute_num_layers));
    }
  } else if (a.recompute_num_layers) {
    throw ConfigError(fmt::format("When using recompute_granularity: {} recompute_num_layers must be None.",
                                  a.recompute_granularity.value_or("None")),
                      "--recompute_num_layers only applies to --recompute_granularity full");
  }
}

}  // namespace

void check_parallel(Args& a, int world_size, std::vector<std::string>& warnings) {
  check_layout(a, world_size);
  if (a.sequence_parallel && a.tensor_model_parallel_size == 1) {
    warnings.emplace_back("Disabling sequence parallelism because tensor model parallelism is disabled");
    a.sequence_parallel = false;
  }
  if (a.sequence_parallel && *a.seq_length % a.tensor_model_parallel_size != 0) {
    throw ConfigError(fmt::format("--seq_length {} must be divisible by tensor_model_parallel_size ({}) with "
                                  "sequence parallelism",
                                  *a.seq_length, a.tensor_model_parallel_size),
                      "sequence parallelism splits the tokens of a micro-batch over the TP ranks");
  }
  check_context_parallel(a);
  check_recompute(a);
  if (a.ddp_bucket_size) require_positive(*a.ddp_bucket_size, "ddp_bucket_size");
  // Megatron-LM's checks and messages (arguments.py).
  if (a.dry_run_samples && (!a.dry_run || a.command != "sft" || a.dataset.empty()))
    throw ConfigError("--dry_run_samples samples the dataset of an sft dry run: it needs sft, --dataset and --dry_run",
                      "add --dry_run to plan the job on N samples of its data, or drop --dry_run_samples");
  if (a.dry_run_samples && *a.dry_run_samples < 1)
    throw ConfigError(fmt::format("--dry_run_samples {}: expected at least 1 sample", *a.dry_run_samples),
                      "e.g. --dry_run_samples 1000");
  if (a.dry_run_lengths && (!a.dry_run || a.command != "sft"))
    throw ConfigError("--dry_run_lengths gives the sample lengths of an sft dry run: it needs sft and --dry_run",
                      "add --dry_run, or drop --dry_run_lengths (pt rows are --seq_length long)");
  if (a.dry_run_lengths && !a.dataset.empty())
    throw ConfigError("--dry_run_lengths stands in for a dataset: it cannot be given with --dataset",
                      "drop --dataset to plan on the lengths, or drop --dry_run_lengths to plan on the data "
                      "(--dry_run_samples N reads part of it)");
  if (a.json && !a.dry_run)
    throw ConfigError("--json prints the dry run's report: it needs --dry_run",
                      "add --dry_run, or drop --json (a training run logs to logging.jsonl)");
  // Megatron-LM's message (arguments.py); MindSpeed requires the same of MC2.
  if (a.tp_comm_overlap && !a.sequence_parallel)
    throw ConfigError(
        "--tp_comm_overlap: Tensor parallel communication/GEMM overlap can happen only when sequence "
        "parallelism is enabled",
        "add --sequence_parallel, or drop --tp_comm_overlap");
  if (a.use_ascend_mc2 && !a.sequence_parallel)
    throw ConfigError(
        "--use_ascend_mc2: MC2 fuses the matmul with the sequence-parallel all-gather / "
        "reduce-scatter, so it needs sequence parallelism",
        "add --sequence_parallel, or drop --use_ascend_mc2");
  if (a.overlap_param_gather && !a.use_distributed_optimizer)
    throw ConfigError("--overlap-param-gather only supported with distributed optimizer",
                      "add --use_distributed_optimizer true, or drop --overlap_param_gather");
  if (a.overlap_param_gather && !a.overlap_grad_reduce)
    throw ConfigError("Must use --overlap-param-gather with --overlap-grad-reduce", "add --overlap_grad_reduce");
  if (!(a.distributed_timeout_minutes > 0) || !std::isfinite(a.distributed_timeout_minutes)) {
    throw ConfigError(
        fmt::format("--distributed_timeout_minutes must be a number > 0, got {}", a.distributed_timeout_minutes),
        "it is how long a rank may make no progress before the watchdog ends it (fractions allowed: 0.5 = 30 s)");
  }
  require_positive(a.micro_batch_size, "micro_batch_size");
  require_positive(a.global_batch_size, "global_batch_size");
  const int per_step = a.micro_batch_size * a.data_parallel_size;
  if (a.global_batch_size % per_step != 0) {
    throw ConfigError(fmt::format("global batch size ({}) is not divisible by micro batch size ({}) times data "
                                  "parallel size ({})",
                                  a.global_batch_size, a.micro_batch_size, a.data_parallel_size),
                      "global_batch_size = micro_batch_size x data parallel size x number of micro batches");
  }
  a.num_micro_batches = a.global_batch_size / per_step;
  if (a.virtual_pipeline_model_parallel_size && a.num_micro_batches % a.pipeline_model_parallel_size != 0) {
    throw ConfigError(fmt::format("number of microbatches ({}) is not divisible by pipeline-model-parallel-size ({}) "
                                  "when using interleaved schedule",
                                  a.num_micro_batches, a.pipeline_model_parallel_size),
                      "global_batch_size / (micro_batch_size x data parallel size) must be a multiple of "
                      "--pipeline_model_parallel_size");
  }
}

}  // namespace detail
}  // namespace mtrain::config
