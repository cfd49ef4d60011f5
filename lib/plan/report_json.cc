#include "plan/report_json.h"

#include <algorithm>

#include "plan/memory_report.h"

namespace mtrain::plan {

namespace {

nlohmann::json memory_json(const DryRun& r, const ReportGroup& g) {
  const ClassMemory& c = *g.shown;
  nlohmann::json categories = nlohmann::json::object();
  for (int i = 0; i < static_cast<int>(device::MemCategory::kCount); ++i)
    categories[device::mem_category_name(static_cast<device::MemCategory>(i))] = c.stats.by_category[i];
  nlohmann::json runtime = nlohmann::json::object();
  for (int k = 0; k < static_cast<int>(device::RuntimeKind::kCount); ++k)
    runtime[device::runtime_kind_name(static_cast<device::RuntimeKind>(k))] = c.stats.runtime[k];
  const int64_t peak = class_peak(c), cap = r.profile.hbm_bytes;
  return {{"ranks", g.ranks},
          {"simulated_rank", c.rank_class.representative},
          {"tensor_rank", c.tp_rank},
          {"data_rank", c.dp_rank},
          {"parameters", c.parameters},
          {"activation_slots", c.activation_slots},
          {"bytes", categories},
          {"allocator_reserve", c.stats.max_reserved - c.stats.max_allocated},
          {"peak_allocated", c.stats.max_allocated},
          {"peak_reserved", c.stats.max_reserved},
          {"outside_allocator", runtime},  // held beside the allocator's reserve (device.h RuntimeKind)
          {"communicators", c.communicators},
          {"peak_on_device", peak},
          {"capacity", cap},
          {"headroom", cap - peak},
          {"fits", peak <= cap},
          // MoE: the peak if routing collapsed onto this rank's experts (= peak_on_device without MoE)
          {"peak_if_routing_collapses", collapse_peak(r, c)}};
}

nlohmann::json time_json(const StageTime& s, double step_s) {
  const double other = s.other_comm_s();
  const double dp_hidden = std::max(0.0, s.dp_comm_s - s.dp_exposed_s);
  const double named = s.compute_s + s.host_wait_s + s.contention_s + s.tp_comm_s + s.cp_comm_s + s.ep_comm_s +
                       s.dp_exposed_s + other + s.optimizer_s;
  return {{"compute_s", s.compute_s},           {"host_wait_s", s.host_wait_s},
          {"contention_s", s.contention_s},     {"tp_comm_s", s.tp_comm_s},
          {"cp_comm_s", s.cp_comm_s},           {"ep_comm_s", s.ep_comm_s},
          {"dp_exposed_s", s.dp_exposed_s},     {"other_comm_s", other},
          {"optimizer_s", s.optimizer_s},       {"idle_s", std::max(0.0, step_s - named)},
          {"dp_comm_s", s.dp_comm_s},           {"dp_hidden_s", dp_hidden},
          {"phase_hidden_s", s.phase_hidden_s}, {"bubble", s.bubble}};
}

}  // namespace

nlohmann::json dry_run_json(const DryRun& r, const StepTime& t) {
  nlohmann::json stages = nlohmann::json::array();
  const std::vector<ReportGroup> groups = report_groups(r);
  for (const StageTime& s : t.stages) {
    nlohmann::json memory = nlohmann::json::array();
    for (const ReportGroup& g : groups)
      if (g.shown->rank_class.stage == s.stage) memory.push_back(memory_json(r, g));
    stages.push_back({{"stage", s.stage}, {"memory", memory}, {"time", time_json(s, t.step_s)}});
  }
  nlohmann::json timeline = nlohmann::json::array();
  for (const TimelineSpan& x : t.timeline)
    timeline.push_back({{"stage", x.stage},
                        {"name", x.name},
                        {"microbatch", x.microbatch},
                        {"chunk", x.chunk},
                        {"begin_s", x.begin_s},
                        {"end_s", x.end_s},
                        {"comm_stream", x.comm_stream}});
  return {{"model", r.model_description},
          {"device_profile", r.profile.name},
          {"world_size", r.world_size},
          {"layout",
           {{"tensor_parallel", r.tp},
            {"pipeline_parallel", r.pp},
            {"data_parallel", r.dp},
            {"context_parallel", r.cp},
            {"model_chunks", r.chunks},
            {"micro_batches", r.microbatches}}},
          {"global_batch", r.global_batch},
          {"seq_length", r.seq_length},
          {"fits", plan_fits(r)},
          {"stages", stages},
          {"step_s", t.step_s},
          {"tokens_per_s_per_device", t.tokens_per_s_per_device},
          {"tflops_per_device", t.tflops_per_device},
          {"mfu", t.mfu},
          {"timeline", timeline}};
}

}  // namespace mtrain::plan
