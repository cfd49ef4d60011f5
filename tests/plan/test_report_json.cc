// `--dry_run --json` (plan/report_json.h): the JSON carries the text report's
// numbers, every stage's time lines add up to the step with nothing counted
// twice, and the memory lines are the allocator's categories.
#include <gtest/gtest.h>

#include <sstream>

#include "common/errors.h"
#include "plan/dry_run.h"
#include "plan/dry_run_command.h"
#include "plan/dry_run_fixture.h"
#include "plan/report_json.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

class ReportJson : public DryRunTest {};

double line_sum(const nlohmann::json& time) {
  double sum = 0;
  for (const char* k : {"compute_s", "host_wait_s", "contention_s", "tp_comm_s", "cp_comm_s", "ep_comm_s",
                        "dp_exposed_s", "other_comm_s", "optimizer_s", "idle_s"})
    sum += time.at(k).get<double>();
  return sum;
}

TEST_F(ReportJson, StageLinesAddUpToTheStep) {
  // A pipeline of 2 with interleaving, TP 2, DP 2, the overlap flags: idle, exposed and hidden lines all occur.
  const DryRun r = dry_run(parse(demo("--tensor_model_parallel_size 2 --pipeline_model_parallel_size 2 "
                                      "--num_layers_per_virtual_pipeline_stage 1 --sequence_parallel "
                                      "--use_distributed_optimizer --overlap_grad_reduce --overlap_param_gather"),
                                 8));
  const StepTime t = step_time(r);
  const nlohmann::json j = dry_run_json(r, t);
  ASSERT_EQ(j.at("stages").size(), 2u);
  EXPECT_DOUBLE_EQ(j.at("step_s").get<double>(), t.step_s);
  for (const nlohmann::json& s : j.at("stages")) {
    const nlohmann::json& time = s.at("time");
    EXPECT_NEAR(line_sum(time), t.step_s, 1e-9 * t.step_s) << time.dump();
    const StageTime& st = t.stages.at(s.at("stage").get<size_t>());
    EXPECT_DOUBLE_EQ(time.at("compute_s").get<double>(), st.compute_s);
    EXPECT_DOUBLE_EQ(time.at("dp_exposed_s").get<double>(), st.dp_exposed_s);
    EXPECT_NEAR(time.at("dp_exposed_s").get<double>() + time.at("dp_hidden_s").get<double>(), st.dp_comm_s,
                1e-12 + 1e-12 * st.dp_comm_s);
    // Memory: the categories sum to the peak allocated at the moment of the peak or less.
    for (const nlohmann::json& m : s.at("memory")) {
      int64_t bytes = 0;
      for (const auto& [name, b] : m.at("bytes").items()) bytes += b.get<int64_t>();
      EXPECT_GT(bytes, 0);
      // The peak on the device: the allocator's peak reserved and what the runtime holds beside it.
      int64_t outside = 0;
      for (const auto& [name, b] : m.at("outside_allocator").items()) outside += b.get<int64_t>();
      EXPECT_GT(outside, 0);
      EXPECT_EQ(m.at("peak_on_device").get<int64_t>(), m.at("peak_reserved").get<int64_t>() + outside);
      EXPECT_FALSE(m.at("communicators").empty());
      EXPECT_EQ(m.at("headroom").get<int64_t>(),
                m.at("capacity").get<int64_t>() - m.at("peak_on_device").get<int64_t>());
      EXPECT_TRUE(m.at("fits").get<bool>());
    }
  }
  EXPECT_EQ(j.at("layout").at("pipeline_parallel").get<int>(), 2);
  EXPECT_EQ(j.at("layout").at("model_chunks").get<int>(), 2);
  EXPECT_TRUE(j.at("fits").get<bool>());
  // The timeline: the schedule's spans, each micro-batch's forward and backward per stage and chunk.
  const nlohmann::json& spans = j.at("timeline");
  ASSERT_EQ(spans.size(), t.timeline.size());
  int forwards = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(spans[i].at("name").get<std::string>(), t.timeline[i].name);
    EXPECT_DOUBLE_EQ(spans[i].at("begin_s").get<double>(), t.timeline[i].begin_s);
    EXPECT_DOUBLE_EQ(spans[i].at("end_s").get<double>(), t.timeline[i].end_s);
    EXPECT_LE(spans[i].at("end_s").get<double>(), t.step_s * (1 + 1e-12));
    forwards += spans[i].at("name") == "forward";
  }
  EXPECT_EQ(forwards, r.pp * r.chunks * r.microbatches);
}

TEST_F(ReportJson, TheCommandPrintsOneDocument) {
  std::ostringstream out;
  EXPECT_EQ(run_dry_run(parse(demo("--dry_run --json"), 1), out), 0);
  const nlohmann::json j = nlohmann::json::parse(out.str());  // nothing but the document
  EXPECT_EQ(j.at("world_size").get<int>(), 1);
  EXPECT_GT(j.at("tokens_per_s_per_device").get<double>(), 0.0);
}

TEST_F(ReportJson, JsonNeedsTheDryRun) { EXPECT_THROW(parse(demo("--json"), 1), ConfigError); }

}  // namespace
}  // namespace mtrain::plan
