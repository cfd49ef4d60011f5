// The MoE layer's expert buffers as the frameworks hold them (moe_buffers.cc):
// the device is charged for the planned rows (balanced routing times the
// allowance, or the capacity bound; never above the worst case), the host
// holds the worst case, and the difference is the device's contingent.
// Expected values are re-derived here from Megatron's definitions: each of
// the etp x ep senders sends an expert at most its capacity
// ceil(N k / E * factor) rows (get_capacity), or, balanced, its share
// N k / E rounded up.
#include <gtest/gtest.h>

#include <cmath>

#include "device/device.h"
#include "moe/moe_layer.h"

namespace mtrain::moe {
namespace {

MoeLayerConfig layer(int64_t E, int k, int64_t ep, int64_t etp) {
  MoeLayerConfig c;
  c.router.num_experts = E;
  c.router.topk = k;
  c.hidden = 16;
  c.ffn = 8;
  c.ep = ep;
  c.etp = etp;
  c.tp = etp;
  c.num_local = E / ep;
  return c;
}

TEST(MoeBuffers, PlannedRowsAreTheBalancedShareTheAllowanceOrTheCapacity) {
  const int64_t N = 100;  // tokens of this rank; k = 2 of E = 8: 200 routings, 25 per expert
  MoeLayerConfig c = layer(8, 2, 4, 1);
  EXPECT_EQ(c.max_expert_rows(N), 4 * 200);     // every EP rank's routings on this rank's 2 experts
  EXPECT_EQ(c.planned_expert_rows(N), 8 * 25);  // balanced: 4 senders x 2 experts x 25
  c.routing_imbalance = 1.5;                    // ceil(1.5 * 25) = 38 per expert and sender
  EXPECT_EQ(c.planned_expert_rows(N), 8 * 38);
  c.routing_imbalance = 4;  // at most the worst case
  EXPECT_EQ(c.planned_expert_rows(N), 4 * 200);
  c.routing_imbalance = 1;
  c.router.capacity_factor = 1.25;  // ceil(200 / 8 * 1.25) = ceil(31.25) = 32
  EXPECT_EQ(c.planned_expert_rows(N), 8 * 32);
  c.router.pad_to_capacity = true;  // every sender pads every expert to 32: exactly 8 x 32 arrive
  EXPECT_EQ(c.planned_expert_rows(N), 8 * 32);
  EXPECT_EQ(c.max_expert_rows(N), 4 * 8 * 32);

  // Without expert parallelism the rows are this rank's own: the plan is the whole.
  MoeLayerConfig one = layer(8, 2, 1, 1);
  one.routing_imbalance = 1.5;
  EXPECT_EQ(one.planned_expert_rows(N), 200);
  // Expert TP 2 x EP 2: each of the 4 senders 25 per expert, 2 TP ranks x 8 experts' worth arrive.
  EXPECT_EQ(layer(8, 2, 2, 2).planned_expert_rows(N), 2 * 8 * 25);
  EXPECT_EQ(layer(8, 2, 2, 2).max_expert_rows(N), 2 * 2 * 200);
  // Shares that do not divide: 7 tokens x 2 over 8 experts, ceil(14 / 8) = 2 per expert.
  EXPECT_EQ(layer(8, 2, 4, 1).planned_expert_rows(7), 8 * 2);
}

TEST(MoeBuffers, TheDeviceIsChargedForThePlanAndHoldsTheRestAsContingent) {
  MoeLayerConfig c = layer(8, 2, 4, 1);
  c.dtype = DType::kBF16;
  const int64_t B = 2, T = 50, N = B * T, C = c.hidden, F = c.ffn, FC1 = 2 * F;
  device::Device dev(device::DeviceProfile{}, 0);
  {
    MoeActs a;
    allocate_moe_acts(a, c, B, T, dev, /*meta=*/true, "");
    const int64_t worst = c.max_expert_rows(N), planned = c.planned_expert_rows(N);
    // The expert-row buffers: x_grp (C), fc1 (FC1), act (F) in bf16; the rest is the sender's own N k rows.
    const int64_t per_row = 2 * (C + FC1 + F);
    const int64_t M = N * 2;
    // routing (fp32: 2 M indices and the N k slots' rows), x_perm, probs_perm (fp32), y_perm
    const int64_t own = 4 * (2 * M + M) + 2 * M * C + 4 * M + 2 * M * C;
    EXPECT_EQ(dev.stats().allocated, own + planned * per_row);
    EXPECT_EQ(dev.stats().contingent, (worst - planned) * per_row);
    EXPECT_GE(dev.stats().host, 4 * worst * (C + FC1 + F));  // what a real run's host holds: the worst case, fp32
    // A micro-batch that brings 10 rows more than planned holds them (and the workspace's) while it runs.
    const MoeBufferBytes extra = moe_rows_beyond_plan(c, B, T, planned + 10);
    EXPECT_EQ(extra.acts, 10 * per_row);
    EXPECT_EQ(extra.workspace, 10 * 2 * (FC1 + F + C + C));  // d_fc1, d_act, all-to-all buffer, grouped rows
    EXPECT_EQ(moe_rows_beyond_plan(c, B, T, planned).acts, 0);
    a.beyond.hold(extra.acts);
    EXPECT_EQ(dev.stats().allocated, own + (planned + 10) * per_row);
    a.beyond.hold(0);
  }
  EXPECT_EQ(dev.stats().allocated, 0);
  EXPECT_EQ(dev.stats().contingent, 0);
}

}  // namespace
}  // namespace mtrain::moe
