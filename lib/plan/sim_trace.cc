#include "plan/sim_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "common/atomic_file.h"
#include "common/file_system.h"
#include "plan/memory_report.h"

namespace mtrain::plan {

using nlohmann::json;

// The ranks a stage's classes stand for, for the row's name.
static std::string stage_ranks(const DryRun& r, int stage) {
  std::vector<int> ranks;
  for (const ClassMemory& k : r.classes)
    if (k.rank_class.stage == stage) ranks.insert(ranks.end(), k.rank_class.ranks.begin(), k.rank_class.ranks.end());
  std::sort(ranks.begin(), ranks.end());
  return ranks_text(ranks);
}

std::string simulated_trace(const DryRun& r, const StepTime& t) {
  json events = json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"args", {{"name", fmt::format("simulated step on {} (cost model)", r.profile.name)}}}});
  // Rows: tid s = stage s's compute stream; tid pp + s = its DP communication
  // stream, present when something overlaps the compute.
  std::set<int> comm_rows;
  for (const TimelineSpan& sp : t.timeline)
    if (sp.comm_stream) comm_rows.insert(sp.stage);
  for (int s = 0; s < r.pp; ++s) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", s},
                      {"args", {{"name", fmt::format("pipeline stage {} (ranks {})", s, stage_ranks(r, s))}}}});
    if (comm_rows.count(s))
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 0},
                        {"tid", r.pp + s},
                        {"args", {{"name", fmt::format("pipeline stage {} DP communication (overlapped)", s)}}}});
  }
  for (const TimelineSpan& sp : t.timeline) {
    const std::string name = sp.microbatch < 0 ? sp.name
                             : r.chunks > 1    ? fmt::format("{} mb {} chunk {}", sp.name, sp.microbatch, sp.chunk)
                                               : fmt::format("{} mb {}", sp.name, sp.microbatch);
    events.push_back({{"name", name},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", sp.comm_stream ? r.pp + sp.stage : sp.stage},
                      {"ts", sp.begin_s * 1e6},
                      {"dur", (sp.end_s - sp.begin_s) * 1e6},
                      {"cat", sp.microbatch < 0 ? "comm" : "compute"}});
  }
  // Memory over time, a counter track per stage: what the stage's fullest
  // class holds beside its activation slots, plus one slot per micro-batch
  // chunk from the begin of its forward to the end of its backward (what the
  // schedule keeps alive; the report's peak holds every slot of each pool).
  for (int s = 0; s < r.pp; ++s) {
    const ClassMemory* shown = nullptr;
    for (const ClassMemory& c : r.classes)
      if (c.rank_class.stage == s && (!shown || class_peak(c) > class_peak(*shown))) shown = &c;
    if (!shown) continue;
    std::vector<std::pair<double, int64_t>> steps;  // (time, bytes added)
    for (const TimelineSpan& sp : t.timeline) {
      if (sp.stage != s || sp.microbatch < 0 || sp.chunk >= static_cast<int>(shown->chunk_slot_bytes.size())) continue;
      const int64_t b = shown->chunk_slot_bytes[sp.chunk];
      if (sp.name == "forward") steps.emplace_back(sp.begin_s, b);
      if (sp.name == "backward") steps.emplace_back(sp.end_s, -b);
    }
    std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::string track = fmt::format("stage {} memory on the device (GiB)", s);
    int64_t held = class_peak(*shown) - shown->slot_bytes;
    auto sample = [&](double at) {
      events.push_back({{"name", track},
                        {"ph", "C"},
                        {"pid", 0},
                        {"ts", at * 1e6},
                        {"args", {{"GiB", static_cast<double>(held) / (1LL << 30)}}}});
    };
    sample(0.0);
    for (size_t i = 0; i < steps.size(); ++i) {
      held += steps[i].second;
      if (i + 1 == steps.size() || steps[i + 1].first > steps[i].first) sample(steps[i].first);
    }
  }
  // Per stage, the report's split of the micro-batch phases' blocking communication.
  json stages = json::array();
  for (const StageTime& st : t.stages)
    stages.push_back({{"stage", st.stage},
                      {"compute_ms", st.compute_s * 1e3},
                      {"tp_comm_ms", st.tp_comm_s * 1e3},
                      {"cp_comm_ms", st.cp_comm_s * 1e3},
                      {"ep_comm_ms", st.ep_comm_s * 1e3},
                      {"dp_comm_ms", st.dp_comm_s * 1e3}});
  json doc{{"traceEvents", std::move(events)},
           {"displayTimeUnit", "ms"},
           {"metadata",
            {{"step_ms", t.step_s * 1e3},
             {"clock", "simulated device time (microseconds)"},
             {"stages", std::move(stages)}}}};
  return doc.dump();
}

std::string write_simulated_trace(const DryRun& r, const StepTime& t, const std::string& dir) {
  PosixFileSystem fs;
  fs.create_dirs(dir);
  const std::string path = dir + "/simulated_trace.json";
  write_file_atomic(fs, path, simulated_trace(r, t));
  return path;
}

}  // namespace mtrain::plan
