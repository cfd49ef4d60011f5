// observe::record_cost's device timeline inside a micro-batch phase against
// hand-computed examples: the CP ring's passes beside the block kernels,
// --tp_comm_overlap's pipelined all-gather / reduce-scatter, and the
// blocking collectives in between (step_record.h, PhaseOverlap).
#include <gtest/gtest.h>

#include "observe/step_record.h"

namespace mtrain::observe {
namespace {

// Round numbers: 1 TFLOP of a kernel takes 1 s, 1 GB over a link 1 s, no fixed costs.
device::DeviceProfile round_profile() {
  device::DeviceProfile p;
  p.peak_tflops_16bit = 1;
  p.intra_node_link_gbps = 1;
  p.intra_node_topology = device::IntraNodeTopology::kRing;
  p.cost = {};
  p.cost.compute_efficiency = p.cost.memory_efficiency = 1;
  p.cost.intra_link_efficiency = p.cost.inter_link_efficiency = 1;
  p.cost.launch_overhead_s = p.cost.comm_latency_s = 0;
  return p;
}

// A kernel of `seconds` (a GEMM: shape (seconds · 5e11) x 1 x 1, 2mnk flops; no tile model).
KernelRecord kernel(double seconds, KernelKind kind = KernelKind::kMemory) {
  return {"k", {kind, seconds * 1e12, 0, static_cast<int64_t>(seconds * 5e11), 1, 1}, 0};
}

// A send_recv of `gb` GB each way on the CP group: one link, gb seconds.
CommRecord ring_pass(double gb, int64_t kernels_before) {
  const auto b = static_cast<int64_t>(gb * 1e9);
  return {parallel::CommOp::kSendRecv, "cp", 2, b, b, 0, kernels_before};
}

// A ring all-gather / reduce-scatter of S over TP 2: (n-1)/n · S = S/2 GB -> S/2 seconds.
CommRecord tp(parallel::CommOp op, double gb, int64_t kernels_before) {
  return {op, "tp", 2, static_cast<int64_t>(gb * 1e9), 0, 0, kernels_before};
}

RecordCost cost_of(const StepRecord& r, PhaseOverlap o = {}) {
  const device::CostModel m(round_profile());
  return record_cost(
      r, m, true, [](std::string_view) { return 1; }, o);
}

StepRecord one_phase() {
  StepRecord r;
  r.phases = {{"forward_step", 0, 0}};
  return r;
}

TEST(RingPasses, RunBesideTheKernelsUntilTheNextStepNeedsTheBlock) {
  // Forward of a 3-step ring: pass 1 (2 s) beside step 0's kernels (1 s), the wait, pass 2 (0.5 s)
  // beside step 1's (1 s), then step 2's (1 s) after waiting for nothing:
  // c = 1, wait -> 2; pass 2 on [2, 2.5]; step 1 [2, 3]; wait (0); step 2 [3, 4].
  StepRecord r = one_phase();
  r.kernels = {kernel(1), kernel(1), kernel(1)};
  r.comms = {ring_pass(2, 0), ring_pass(0.5, 1)};
  r.ring_waits = {1, 2};
  const RecordCost c = cost_of(r);
  EXPECT_DOUBLE_EQ(c.phase_s[0], 4.0);
  EXPECT_DOUBLE_EQ(c.phase_line_s[1], 1.0);  // the CP line: pass 1's second not beside kernels
  EXPECT_DOUBLE_EQ(c.phase_hidden_s, 1.5);   // pass 1's first second and all of pass 2
  EXPECT_DOUBLE_EQ(c.phase_comm_s, 1.0);
  EXPECT_DOUBLE_EQ(c.compute_s, 3.0);
}

TEST(RingPasses, ThePhaseEndWaitsForTheLastPass) {
  // Backward: the kernels (1 s), a pass (3 s) after them: nothing left to hide it.
  StepRecord r = one_phase();
  r.phases[0].name = "backward_step";
  r.kernels = {kernel(1)};
  r.comms = {ring_pass(3, 1)};
  const RecordCost c = cost_of(r);
  EXPECT_DOUBLE_EQ(c.phase_s[0], 4.0);
  EXPECT_DOUBLE_EQ(c.phase_line_s[1], 3.0);
  EXPECT_DOUBLE_EQ(c.phase_hidden_s, 0.0);
}

TEST(TpCommOverlap, AllGatherPipelinedWithTheGemmAfterIt) {
  // all-gather of 4 GB over TP 2 (2 s), then a GEMM of 3 s: without overlap 5 s; with it,
  // max(2, 3) + min(2, 3) / 2 = 4 s.
  StepRecord r = one_phase();
  r.kernels = {kernel(3, KernelKind::kGemm)};
  r.comms = {tp(parallel::CommOp::kAllGather, 4, 0)};
  EXPECT_DOUBLE_EQ(cost_of(r).phase_s[0], 5.0);
  const RecordCost c = cost_of(r, {true, 1.0});
  EXPECT_DOUBLE_EQ(c.phase_s[0], 4.0);
  EXPECT_DOUBLE_EQ(c.phase_line_s[0], 1.0);
  EXPECT_DOUBLE_EQ(c.phase_hidden_s, 1.0);
}

TEST(TpCommOverlap, ReduceScatterAfterTheGemmPaysItsUnits) {
  // A GEMM of 2 s, then a reduce-scatter of 2 GB over TP 2 (1 s). The communication takes a
  // quarter of the units: the GEMM beside it runs 4/3 slower (2.667 s):
  // max(1, 2.667) + min(1, 2.667) / 2 = 3.1667 s.
  StepRecord r = one_phase();
  r.kernels = {kernel(2, KernelKind::kGemm)};
  r.comms = {tp(parallel::CommOp::kReduceScatter, 2, 1)};
  const RecordCost c = cost_of(r, {true, 4.0 / 3});
  EXPECT_NEAR(c.phase_s[0], 2 * 4.0 / 3 + 0.5, 1e-12);
  // A reduce-scatter after a kernel that is not a GEMM stays on the critical path.
  r.kernels[0] = kernel(2);
  EXPECT_DOUBLE_EQ(cost_of(r, {true, 4.0 / 3}).phase_s[0], 3.0);
}

TEST(TpCommOverlap, OnlyTheTensorParallelGatherAndScatter) {
  // An all-reduce (no SP) and a CP all-to-all stay blocking even with the overlap on.
  StepRecord r = one_phase();
  r.kernels = {kernel(1, KernelKind::kGemm), kernel(1, KernelKind::kGemm)};
  r.comms = {tp(parallel::CommOp::kAllReduce, 2, 0),
             {parallel::CommOp::kAllToAll, "cp", 2, 1000000000, 1000000000, 0, 1}};
  // all_reduce ring of 2 GB over 2: 2·1/2·2 = 2 s; all_to_all over a ring of 2, S = 2 GB: (n-1)/2 · S/2 = 0.5 s.
  EXPECT_DOUBLE_EQ(cost_of(r, {true, 1.0}).phase_s[0], 2 + 1 + 0.5 + 1);
}

TEST(PricedBytes, SendRecvMovesBothWaysAtOnce) {
  EXPECT_EQ(priced_bytes({parallel::CommOp::kSendRecv, "cp", 2, 100, 60}), 100.0);
  EXPECT_EQ(priced_bytes({parallel::CommOp::kAllToAll, "ep", 2, 100, 60}), 160.0);
  EXPECT_EQ(priced_bytes({parallel::CommOp::kAllGather, "tp", 2, 100, 0}), 100.0);
}

}  // namespace
}  // namespace mtrain::observe

namespace mtrain::observe {
namespace {

RecordCost dispatched(const StepRecord& r, double dispatch_s) {
  device::DeviceProfile p = round_profile();
  p.cost.host_dispatch_s = dispatch_s;
  return record_cost(r, device::CostModel(p), true, [](std::string_view) { return 1; });
}

TEST(HostDispatch, ShortKernelsWaitForTheHost) {
  // Ten 1 us kernels, the host issuing one every 5 us: kernel k is issued at 5(k+1) us and
  // runs [5(k+1), 5(k+1) + 1]; the phase ends at 51 us, 41 us of it waiting for the host.
  StepRecord r = one_phase();
  r.kernels.assign(10, kernel(1e-6));
  const RecordCost c = dispatched(r, 5e-6);
  EXPECT_NEAR(c.phase_s[0], 51e-6, 1e-15);
  EXPECT_NEAR(c.host_wait_s, 41e-6, 1e-15);
  EXPECT_NEAR(c.compute_s, 10e-6, 1e-15);
  EXPECT_NEAR(c.busy_s(), 51e-6, 1e-15);
}

TEST(HostDispatch, LongKernelsHideIt) {
  // Ten 100 us kernels: only the first waits for its issue (5 us); the host then runs ahead.
  StepRecord r = one_phase();
  r.kernels.assign(10, kernel(100e-6));
  const RecordCost c = dispatched(r, 5e-6);
  EXPECT_NEAR(c.phase_s[0], 1005e-6, 1e-15);
  EXPECT_NEAR(c.host_wait_s, 5e-6, 1e-15);
  // No dispatch cost: the kernels back to back, as before the host was modelled.
  EXPECT_NEAR(dispatched(r, 0).phase_s[0], 1000e-6, 1e-15);
}

}  // namespace
}  // namespace mtrain::observe
