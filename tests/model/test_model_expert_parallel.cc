// The MoE model under expert parallelism on an EP x TP grid (threads of a
// SimWorld, TP fastest: rank = ep_rank * tp + tp_rank), with the experts
// whole (ETP 1) or split over the TP group (ETP = TP), for each token
// dispatcher. EP ranks are data-parallel ranks of the dense model, each with
// its own micro-batch; under TP + SP each TP rank routes its token shard.
// Every rank must compute the single device's per-token losses (and at TP 1
// its routing, kept / dropped slots included) on its EP rank's batch, and
// for every parameter its shard of the gradient: the dense ones the single
// device's on that batch, the experts' (Megatron's split: EP rank r holds
// [r E/ep, (r+1) E/ep)) summed over every EP rank's batch, since the
// dispatch brought them every token routed to them. Gradients that GradSync
// sums over TP (sequence-parallel ones, and whole experts at ETP 1, whose
// expert-DP group holds the TP peers) are summed here the same way.
#include <gtest/gtest.h>
#include <omp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/moe_block.h"
#include "model_test_util.h"
#include "parallel/local_comm.h"
#include "parallel/sim_comm.h"
#include "profiler/kernel_region.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::model {
namespace {

struct Case {
  std::string name;
  ModelConfig config;
  int ep, tp, etp;
  bool allgather = false;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Reference {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> grads;
  uint64_t routing = 0;  // the MoE layers' expert choices and kept / dropped slots
};

// Biases start at zero; give them values (by full-tensor element) so that a
// bias added on more than one TP rank shows in the forward too.
void set_biases(GptModel& m) {
  for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
    const ParamInfo& p = m.params().info(i);
    if (p.shape.size() != 1 || p.name.find(".bias") == std::string::npos) continue;
    for (int64_t j = 0; j < p.numel; ++j)
      m.params().param(i)[j] = 0.05f * static_cast<float>(testing::full_index(p, j, 0) % 7 - 3);
  }
}

Reference run_reference(const ModelConfig& c, const testing::RandomBatch& rb, int64_t B, int64_t T) {
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  set_biases(m);
  TokenBatch b = rb.view(B, T, false);
  b.aux_loss_scale = 1.0f;  // the routers' auxiliary losses join the gradient
  m.forward(b, 5, true);
  Reference r;
  r.losses.assign(m.losses(), m.losses() + B * T);
  r.routing = m.aux_losses().routing_hash;
  m.backward(b, rb.weights.data(), 5, true, true);
  for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i)
    r.grads[m.params().info(i).name].assign(m.params().grad(i), m.params().grad(i) + m.params().info(i).numel);
  return r;
}

// This rank's shard of the reference gradient of p: rank ep_rank's batch, or
// (an expert) the sum over every EP rank's batch.
std::vector<float> wanted_grad(const ParamInfo& p, const std::vector<Reference>& refs, int ep_rank) {
  std::vector<double> full(refs[0].grads.at(p.name).size(), 0.0);
  for (int d = 0; d < static_cast<int>(refs.size()); ++d)
    if (p.expert_parallel || d == ep_rank)
      for (size_t j = 0; j < full.size(); ++j) full[j] += refs[d].grads.at(p.name)[j];
  const int64_t rows = p.shape[0], cols = p.numel / rows;
  std::vector<float> want(p.numel);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) want[r * cols + j] = static_cast<float>(full[testing::full_index(p, r, j)]);
  return want;
}

// One rank's communicators and model.
struct GridRank {
  int d, t;
  std::unique_ptr<parallel::Comm> tp, ep, tp_ep;
  std::unique_ptr<device::Device> dev;
  std::unique_ptr<GptModel> model;
};

GridRank grid_rank(parallel::SimWorld& world, const Case& k, int rank) {
  GridRank g{rank / k.tp, rank % k.tp, {}, {}, {}, {}, {}};
  ModelConfig c = k.config;
  c.tp = k.tp, c.tp_rank = g.t, c.sequence_parallel = k.tp > 1;
  c.moe.ep = k.ep, c.moe.ep_rank = g.d, c.moe.etp = k.etp, c.moe.allgather = k.allgather;
  parallel::RankGroup tp_group, ep_group, tp_ep_group;
  for (int i = 0; i < k.tp; ++i) tp_group.push_back(g.d * k.tp + i);
  for (int i = 0; i < k.ep; ++i) ep_group.push_back(i * k.tp + g.t);
  for (int i = 0; i < k.ep * k.tp; ++i) tp_ep_group.push_back(i);
  if (k.etp == 1) tp_ep_group = ep_group;  // whole experts: the TP peers gather apart
  g.tp = world.make_comm("tp", tp_group, rank);
  g.ep = world.make_comm("ep", ep_group, rank);
  g.tp_ep = world.make_comm("tp_ep", tp_ep_group, rank);
  g.dev = std::make_unique<device::Device>(device::DeviceProfile{}, rank);
  g.model = std::make_unique<GptModel>(c, *g.dev, *g.tp);
  g.model->set_ep_comm(*g.ep, g.tp_ep.get());
  set_biases(*g.model);
  return g;
}

// Only this EP rank's experts, by their global index (at EP > 1 they are the expert-parallel parameters).
void expect_own_experts(GptModel& m, int ep, int ep_rank) {
  const ModelConfig& c = m.config();
  const int64_t local = c.moe.num_experts / ep;
  int moe_layers = 0, experts = 0;
  for (int l : c.moe.layers) moe_layers += l;
  bool found = false;
  const std::string first = "experts.local_experts." + std::to_string(ep_rank * local) + ".linear_fc1.weight";
  for (const ParamInfo& p : m.params().infos()) {
    experts += p.expert_parallel ? 1 : 0;
    found = found || p.name.find(first) != std::string::npos;
  }
  EXPECT_EQ(experts, moe_layers * local * (c.add_bias_linear ? 4 : 2));
  EXPECT_TRUE(found) << first;
}

class ModelExpertParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ModelExpertParallel, RanksMatchTheSingleDevice) {
  omp_set_num_threads(1);
  const Case& k = GetParam();
  const int64_t B = 2, T = 8;
  std::vector<testing::RandomBatch> batches;
  std::vector<Reference> refs;
  for (int d = 0; d < k.ep; ++d) {
    batches.push_back(testing::random_batch(B, T, k.config.vocab, 11 + d));
    refs.push_back(run_reference(k.config, batches.back(), B, T));
  }
  parallel::SimWorld world(k.ep * k.tp);
  world.run([&](int rank) {
    GridRank g = grid_rank(world, k, rank);
    GptModel& m = *g.model;
    TokenBatch b = batches[g.d].view(B, T, false);
    b.aux_loss_scale = 1.0f;
    m.forward(b, 5, true);
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(m.losses(), refs[g.d].losses.data(), B * T, testing::kPathRtol))
        << "per-token losses on rank " << rank;
    // Routing and capacity are decided on the rank's own tokens before dispatch (Megatron's
    // router), so at TP 1 every slot is kept or dropped as on one device with the same batch.
    if (k.tp == 1) {
      EXPECT_EQ(m.aux_losses().routing_hash, refs[g.d].routing) << "routing on rank " << rank;
    }
    m.backward(b, batches[g.d].weights.data(), 5, true, true);
    for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
      const ParamInfo& p = m.params().info(i);
      ASSERT_TRUE(refs[0].grads.count(p.name)) << p.name << " is not a parameter of the single-device model";
      std::vector<float> grad(m.params().grad(i), m.params().grad(i) + p.numel);
      if (p.sequence_parallel_grad || (p.expert_parallel && k.etp == 1)) g.tp->all_reduce_sum(grad.data(), p.numel);
      const std::vector<float> want = wanted_grad(p, refs, g.d);
      EXPECT_TRUE(mtrain::testing::close_in_max_norm(grad.data(), want.data(), p.numel, testing::kPathRtol))
          << "grad of " << p.name << " on rank " << rank << " (ep " << g.d << ", tp " << g.t << ")";
    }
    if (k.ep > 1) expect_own_experts(m, k.ep, g.d);
  });
}

ModelConfig gpt2_biases() {  // GELU experts with fc1 / fc2 biases, looped GEMMs
  ModelConfig c = testing::tiny_gpt2();
  c.moe = testing::tiny_moe().moe;
  c.moe.layers = {1, 1};
  c.moe.shared_ffn = 0;
  c.moe.shared_gate = false;
  c.moe.grouped_gemm = false;
  return c;
}

ModelConfig capacity(bool pad, bool fused_permute) {
  ModelConfig c = testing::tiny_moe();
  c.moe.permute_fusion = fused_permute;
  c.moe.router.capacity_factor = 1.0;  // top-2 of 4 experts: some experts overflow and drop
  c.moe.router.pad_to_capacity = pad;
  return c;
}

INSTANTIATE_TEST_SUITE_P(AllToAll, ModelExpertParallel,
                         ::testing::Values(Case{"ep2", testing::tiny_moe(), 2, 1, 1},
                                           Case{"ep4", testing::tiny_moe(), 4, 1, 1},
                                           Case{"ep2_gelu_fc2_bias_looped", gpt2_biases(), 2, 1, 1},
                                           Case{"ep2_capacity_dropping", capacity(false, false), 2, 1, 1},
                                           Case{"ep4_capacity_padded", capacity(true, false), 4, 1, 1},
                                           Case{"ep2_tp2_etp1", testing::tiny_moe(), 2, 2, 1},
                                           Case{"ep2_tp2_etp2", testing::tiny_moe(), 2, 2, 2},
                                           Case{"ep2_tp2_etp2_gelu_fc2_bias_looped", gpt2_biases(), 2, 2, 2}),
                         [](const auto& info) { return info.param.name; });

// Capacity at TP 1 only: under TP each rank's router drops over its own token
// shard, which one device routing the whole micro-batch does not.
INSTANTIATE_TEST_SUITE_P(AllGather, ModelExpertParallel,
                         ::testing::Values(Case{"ep2", testing::tiny_moe(), 2, 1, 1, true},
                                           Case{"tp2_etp2", testing::tiny_moe(), 1, 2, 2, true},
                                           Case{"ep2_tp2_etp1", testing::tiny_moe(), 2, 2, 1, true},
                                           Case{"ep2_tp2_etp2", testing::tiny_moe(), 2, 2, 2, true},
                                           Case{"ep2_tp2_etp2_gelu_fc2_bias_looped", gpt2_biases(), 2, 2, 2, true},
                                           Case{"ep2_capacity_dropping_fused_permute", capacity(false, true), 2, 1, 1,
                                                true},
                                           Case{"ep2_capacity_padded", capacity(true, false), 2, 1, 1, true}),
                         [](const auto& info) { return info.param.name; });

// What --dry_run sees of one MoE layer (shape only, MetaComm): rank (ep 0,
// tp 0) of EP 2 x TP 2 + SP with ETP 2 holds E/EP experts' F/ETP slices; the
// dispatch buffers and the collectives of one forward have Megatron's sizes.
// Tokens N_loc = B*T/TP = 8 per rank, k = 2, rows M = N_loc*k = 16, C = 16.
struct Recorded {
  std::string group;
  parallel::CommOp op;
  int64_t bytes;
};

std::vector<Recorded> dry_forward(bool allgather, std::map<std::string, int64_t>& buffers, int64_t& expert_numel) {
  ModelConfig c = testing::tiny_moe();
  c.moe.shared_ffn = 0, c.moe.shared_gate = false;
  c.tp = 2, c.sequence_parallel = true, c.moe.ep = 2, c.moe.etp = 2, c.moe.allgather = allgather;
  device::Device dev(device::DeviceProfile{}, 0);
  parallel::MetaComm tp("tp", 0, 2), ep("ep", 0, 2), tp_ep("tp_ep", 0, 4);
  std::vector<Recorded> seen;
  for (parallel::Comm* g :
       {static_cast<parallel::Comm*>(&tp), static_cast<parallel::Comm*>(&ep), static_cast<parallel::Comm*>(&tp_ep)})
    g->set_observer([&](const parallel::CommEvent& e) { seen.push_back({std::string(e.group), e.op, e.bytes}); });
  {  // the model this rank builds: its expert parameters
    device::Device model_dev(device::DeviceProfile{}, 0);
    GptModel m(c, model_dev, tp, /*meta=*/true);
    expert_numel = 0;
    for (const ParamInfo& p : m.params().infos()) expert_numel += p.expert_parallel ? p.numel : 0;
  }
  const moe::MoeLayerConfig mc = moe_layer_config(c);
  moe::MoeActs a;
  moe::MoeWorkspace w;
  moe::allocate_moe_acts(a, mc, 2, 8, dev, true, "layer 0 ");
  moe::allocate_moe_workspace(w, mc, 2, 8, dev, true);
  buffers = dev.live_by_name(device::MemCategory::kActivations);
  moe::MoeWeights wt;
  wt.fc1.assign(mc.num_local, nullptr), wt.fc2 = wt.fc1_bias = wt.fc2_bias = wt.fc1;
  wt.fc1_grad.assign(mc.num_local, nullptr), wt.fc2_grad = wt.fc1_bias_grad = wt.fc2_bias_grad = wt.fc1_grad;
  profiler::ShapeOnlyScope shape;
  const parallel::TpConfig tpc{&tp, true, parallel::Wire{}, nullptr, &ep, &tp_ep};
  moe::moe_forward(mc, tpc, wt, a, w, moe::SpBuffers{}, nullptr, nullptr, 2, 8, true);
  return seen;
}

TEST(ModelExpertParallelDryRun, AllToAllBuffersAndCollectives) {
  std::map<std::string, int64_t> buf;
  int64_t experts = 0;
  const std::vector<Recorded> seen = dry_forward(false, buf, experts);
  EXPECT_EQ(experts, 2 * (2 * 8 / 2 + 8 / 2) * 16) << "E/EP = 2 experts of SwiGLU fc1 (2F/ETP, C) + fc2 (C, F/ETP)";
  const int64_t M = 16, C = 16, f = 4;
  // Charged for balanced routing: ETP x M rows (each of the 4 senders 16 / 4 rows per expert, 4 experts'
  // worth); the host holds ETP x EP x M, the device's contingent if routing collapses.
  EXPECT_EQ(buf.at("moe expert-parallel all-to-all buffer"), 2 * M * C * f) << "ETP x M rows";
  EXPECT_EQ(buf.at("moe rows received over EP"), M * C * f);
  EXPECT_EQ(buf.at("layer 0 moe tokens of every TP rank, grouped by expert"), 2 * M * C * f);
  // all-to-all of the counts, all-to-all-v of the rows over EP; the counts and
  // rows all-gathered over (expert) TP; reduce-scatter back; all-to-all-v back.
  // An even share: each rank receives M rows over EP, so the TP gather moves
  // ETP x M rows (what the ranks hold, as Megatron's all-gather-v), not the buffer.
  // First the router's load-balancing sum of the tokens per expert (4 experts) over its token group (tp).
  const std::vector<Recorded> want = {
      {"tp", parallel::CommOp::kAllReduce, 4 * f},         {"ep", parallel::CommOp::kAllToAll, 2 * 2 * 8},
      {"ep", parallel::CommOp::kAllToAll, M * C * f},      {"tp", parallel::CommOp::kAllGather, 2 * 2 * 8},
      {"tp", parallel::CommOp::kAllGather, 2 * M * C * f}, {"tp", parallel::CommOp::kReduceScatter, 2 * M * C * f},
      {"ep", parallel::CommOp::kAllToAll, M * C * f}};
  ASSERT_EQ(seen.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(seen[i].group, want[i].group) << i;
    EXPECT_EQ(seen[i].op, want[i].op) << i;
    EXPECT_EQ(seen[i].bytes, want[i].bytes) << i << " " << seen[i].group;
  }
}

TEST(ModelExpertParallelDryRun, AllGatherBuffersAndCollectives) {
  std::map<std::string, int64_t> buf;
  int64_t experts = 0;
  const std::vector<Recorded> seen = dry_forward(true, buf, experts);
  const int64_t G = 4, Nl = 8, k = 2, C = 16, f = 4;
  EXPECT_EQ(buf.at("moe allgather dispatcher's tokens of the TP x EP group"), G * Nl * C * f);
  EXPECT_EQ(buf.at("moe allgather dispatcher's slots"), 2 * G * Nl * k * f);
  // Balanced: this rank's experts (half of them) get half of the group's G x N_loc x k routings; the
  // host holds all of them (any gathered row may be local), the rest the device's contingent.
  EXPECT_EQ(buf.at("layer 0 moe permuted tokens"), G * Nl * k / 2 * C * f);
  // tokens, routing map and probs gathered over TP x EP; the output reduce-scattered.
  const std::vector<Recorded> want = {{"tp", parallel::CommOp::kAllReduce, 4 * f},  // the router's aux-loss sum
                                      {"tp_ep", parallel::CommOp::kAllGather, G * Nl * C * f},
                                      {"tp_ep", parallel::CommOp::kAllGather, G * Nl * k * f},
                                      {"tp_ep", parallel::CommOp::kAllGather, G * Nl * k * f},
                                      {"tp_ep", parallel::CommOp::kReduceScatter, G * Nl * C * f}};
  ASSERT_EQ(seen.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(seen[i].group, want[i].group) << i;
    EXPECT_EQ(seen[i].op, want[i].op) << i;
    EXPECT_EQ(seen[i].bytes, want[i].bytes) << i << " " << seen[i].group;
  }
}

}  // namespace
}  // namespace mtrain::model
