// Flag table, part: profiling (Megatron-LM's --profile and step window,
// MindSpeed's --profile_* options; observe/profiler_hook.h does the work).
#include "config/flag_table_parts.h"

namespace mtrain::config::detail {

namespace {
constexpr auto P = FlagGroup::kProfile;
}  // namespace

std::vector<FlagSpec> profile_flags() {
  return {
      {.name = "profile",
       .field = &Args::profile,
       .group = P,
       .help = "Profile iterations --profile_step_start+1 .. --profile_step_end of this run (MindSpeed's "
               "torch_npu.profiler schedule): Chrome traces (chrome://tracing, Perfetto) per rank and merged, and "
               "a summary table, in --profile_save_path. With --dry_run: the simulated step of every pipeline "
               "stage as one Chrome trace, --profile_save_path/simulated_trace.json.",
       .aliases = {"use_pytorch_profiler"}},
      {.name = "profile_step_start",
       .field = &Args::profile_step_start,
       .group = P,
       .help = "Iterations skipped before profiling starts (skip_first); the first profiled iteration is this + 1."},
      {.name = "profile_step_end",
       .field = &Args::profile_step_end,
       .group = P,
       .help = "The last profiled iteration (active = end - start iterations); the traces are written after it."},
      {.name = "profile_ranks",
       .field = &Args::profile_ranks,
       .group = P,
       .help = "Global ranks to profile; -1 (MindSpeed's default) profiles every rank.",
       .default_text = "[-1] (all)"},
      {.name = "profile_level",
       .field = &Args::profile_level,
       .group = P,
       .help = "level0: iteration and phase spans (forward_step, backward_step per micro-batch, grad_sync, "
               "optimizer_step) and every collective; level1: + module and op spans; level2: + kernel spans "
               "(GEMM m/n/k, flops, bytes).",
       .choices = {"level0", "level1", "level2"}},
      {.name = "profile_with_cpu",
       .field = &Args::profile_with_cpu,
       .group = P,
       .help = "Also write the host (CPU) activity: the wall-time spans as run on this machine. Without it only "
               "the simulated NPU timeline and the communication track are written."},
      {.name = "profile_with_stack",
       .field = &Args::profile_with_stack,
       .group = P,
       .help = "Each event's args carry the stack of enclosing region names."},
      {.name = "profile_with_memory",
       .field = &Args::profile_with_memory,
       .group = P,
       .help = "Add counter tracks of the device's allocated and reserved bytes by category, sampled at step and "
               "phase boundaries."},
      {.name = "profile_record_shapes",
       .field = &Args::profile_record_shapes,
       .group = P,
       .help = "Module and op events carry the shapes and dtypes of their input and output tensors."},
      {.name = "profile_save_path",
       .field = &Args::profile_save_path,
       .group = P,
       .help = "Directory for rank_<r>_trace.json, rank_<r>_summary.txt and merged_trace.json."},
  };
}

}  // namespace mtrain::config::detail
