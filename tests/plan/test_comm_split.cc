// The dry run's micro-batch communication split into TP, CP and EP (expert
// dispatch) lines (step_time.h CommLine): for a small EP layout and small
// ring / Ulysses CP layouts, each line equals the cost-model formulas of
// device/cost_model.h written out here over the collectives the layers are
// specified to run (lib/moe/expert_dispatch.h, lib/parallel/ring_attention.h,
// ulysses_attention.h), and the report and the simulated trace carry it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "plan/dry_run.h"
#include "plan/dry_run_fixture.h"
#include "plan/sim_trace.h"
#include "plan/step_time.h"

namespace mtrain::plan {
namespace {

// One 910B3 node (cost_model.h, the profile's constants): an HCCS link per
// pair at 28 GB/s per direction x its efficiency, and 10 us per collective.
struct Hccs {
  double bw, latency;
  explicit Hccs(const device::DeviceProfile& p)
      : bw(p.intra_node_link_gbps * 1e9 * p.cost.intra_link_efficiency), latency(p.cost.comm_latency_s) {}
  // all_to_all over a full mesh of n: D bytes each way per rank, D/n to each peer on its own link.
  double all_to_all(double D, int n) const { return D / (n * bw) + latency; }
  // send_recv: S bytes sent to one peer while as many arrive from another (full duplex).
  double send_recv(double S) const { return S / bw + latency; }
};

class CommSplit : public DryRunTest {
 protected:
  // fp32 (4-byte wire), one micro-batch of one 128-token row per rank, no recompute.
  std::string job(const std::string& preset) const {
    return "pt --model_preset " + preset +
           " --vocab_size 1024 --train_iters 1 --lr_warmup_iters 0 --global_batch_size 2 --micro_batch_size 1 "
           "--output_dir " +
           out_.string();
  }
};

// demo-moe at EP 2 (world 2): 4 MoE layers, 8 experts (4 per rank), top-2,
// hidden 256. Per layer and micro-batch the alltoall dispatcher exchanges
// the per-expert counts once (forward: 4 int64 per peer) and the rows four
// times (dispatch and combine, forward and backward): a dry run gives every
// expert its even share, so each rank sends and receives all of its
// 128 x 2 routed rows, 256 floats each.
TEST_F(CommSplit, ExpertDispatchIsTheEpLine) {
  const DryRun r = dry_run(parse(job("demo-moe") + " --expert_model_parallel_size 2", 2));
  const StepTime t = step_time(r);
  const Hccs link(r.profile);
  const double counts = 2 * 4 * 8.0, rows = 128 * 2 * 256 * 4.0;  // bytes each way
  const double per_layer = link.all_to_all(counts, 2) + 4 * link.all_to_all(rows, 2);
  ASSERT_EQ(t.stages.size(), 1u);
  const StageTime& s = t.stages[0];
  EXPECT_NEAR(s.ep_comm_s, 4 * per_layer, 1e-12 * per_layer);
  EXPECT_EQ(s.tp_comm_s, 0.0) << "TP 1: the router's sums run on a group of one";
  EXPECT_EQ(s.cp_comm_s, 0.0);
  const std::string report = time_report(r, t);
  EXPECT_NE(report.find(fmt::format("TP communication 0.0 ms, EP communication (expert dispatch) {:.1f} ms",
                                    4 * per_layer * 1e3)),
            std::string::npos)
      << report;
  EXPECT_EQ(report.find("CP communication"), std::string::npos) << report;
}

// demo at CP 2 (world 2): 4 layers, 2 query groups of head dim 64; each rank
// holds 64 rows, so a K or V block is n = 2 x 64 x 64 floats. Ring attention
// per layer (ring_attention.h): forward, CP - 1 = 1 exchange of K|V (2n);
// backward, one of K|V|dK|dV (4n) and the last hop of dK|dV (2n) home. A
// send_recv sends and receives its bytes at once over full-duplex links. The
// passes run beside the block kernels (observe::record_cost): what they add
// to the phases is the CP line, the rest is hidden. DP = 2 / CP = 1, so each
// rank runs both rows of the global batch: 2 micro-batches.
TEST_F(CommSplit, RingAttentionIsTheCpLine) {
  DryRun r = dry_run(parse(job("demo") + " --context_parallel_size 2", 2));
  // The demo's kernels are shorter than the host's time to issue them: with
  // it, the passes hide behind the host-bound kernels. Without it, part of
  // them is exposed, which is the split this test checks.
  r.profile.cost.host_dispatch_s = 0;
  const StepTime t = step_time(r);
  const Hccs link(r.profile);
  const double n = 2 * 64 * 64, f = 4;
  const double per_layer = link.send_recv(2 * n * f) + link.send_recv(4 * n * f) + link.send_recv(2 * n * f);
  const StageTime& s = t.stages.at(0);
  ASSERT_EQ(r.microbatches, 2);
  EXPECT_NEAR(s.cp_comm_s + s.phase_hidden_s, 2 * 4 * per_layer, 1e-12 * per_layer);
  EXPECT_GT(s.cp_comm_s, 0.0);
  EXPECT_GT(s.phase_hidden_s, 0.0);
  EXPECT_EQ(s.tp_comm_s, 0.0);
  EXPECT_EQ(s.ep_comm_s, 0.0);
  const std::string report = time_report(r, t);
  EXPECT_NE(report.find(fmt::format("TP communication 0.0 ms, CP communication {:.1f} ms,", s.cp_comm_s * 1e3)),
            std::string::npos)
      << report;
  EXPECT_EQ(report.find("EP communication"), std::string::npos) << report;
  // The simulated trace's metadata carries the same split.
  const nlohmann::json trace = nlohmann::json::parse(simulated_trace(r, t));
  const nlohmann::json& st = trace.at("metadata").at("stages").at(0);
  EXPECT_DOUBLE_EQ(st.at("cp_comm_ms").get<double>(), s.cp_comm_s * 1e3);
  EXPECT_DOUBLE_EQ(st.at("tp_comm_ms").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(st.at("ep_comm_ms").get<double>(), 0.0);
}

// Ulysses at CP 2 (ulysses_attention.h): per layer, forward all-to-alls of
// Q (4 heads), K, V (2 groups each) to heads and of the output (4 heads)
// back; backward Q, K, V, output and its gradient to heads and dQ, dK, dV
// back. A (B, X, 64, 64) tensor's all-to-all moves X x 64 x 64 floats each
// way. 2 micro-batches, as above.
TEST_F(CommSplit, UlyssesAllToAllsAreTheCpLine) {
  const DryRun r =
      dry_run(parse(job("demo") + " --context_parallel_size 2 --context_parallel_algo ulysses_cp_algo", 2));
  const StepTime t = step_time(r);
  const Hccs link(r.profile);
  const auto a2a = [&](int heads) { return link.all_to_all(heads * 64 * 64 * 4.0, 2); };
  const double forward = a2a(4) + 2 * a2a(2) + a2a(4);
  const double backward = a2a(4) + 2 * a2a(2) + 2 * a2a(4) + a2a(4) + 2 * a2a(2);
  const double per_layer = forward + backward;
  EXPECT_NEAR(t.stages.at(0).cp_comm_s, 2 * 4 * per_layer, 1e-12 * per_layer);
  EXPECT_EQ(t.stages.at(0).tp_comm_s, 0.0);
}

// The line of each communicator group (parallel/process_grid.cc names).
TEST(CommLineOf, GroupNames) {
  EXPECT_EQ(comm_line("tp"), CommLine::kTensor);
  EXPECT_EQ(comm_line("cp"), CommLine::kContext);
  for (const char* g : {"ep", "expt-tp", "tp-ep", "tp-ep-pp"}) EXPECT_EQ(comm_line(g), CommLine::kExpert) << g;
}

}  // namespace
}  // namespace mtrain::plan
