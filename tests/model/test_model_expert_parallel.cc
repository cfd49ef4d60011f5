// The MoE model under expert parallelism (EP ranks = threads of a SimWorld,
// each with its own micro-batch, as EP ranks are data-parallel ranks of the
// dense model): every rank computes the single device's per-token losses and
// routing (kept / dropped slots included) on its own batch; its dense
// gradients are the single device's on that batch, and the gradients of the
// experts it holds (Megatron's split: EP rank r holds [r E/ep, (r+1) E/ep))
// are the single device's summed over every rank's batch, since the
// all-to-all brought it every token routed to them.
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "parallel/sim_comm.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::model {
namespace {

struct Case {
  std::string name;
  ModelConfig config;
  int ep;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// One single-device run on one batch.
struct Reference {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> grads;
  uint64_t routing = 0;  // the MoE layers' expert choices and kept / dropped slots
};

Reference run_reference(const ModelConfig& c, const testing::RandomBatch& rb, int64_t B, int64_t T) {
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
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

// body(rank, model) on k.ep SimWorld threads, each an EP rank of k.config's model.
void on_ep_ranks(const Case& k, const std::function<void(int, GptModel&)>& body) {
  parallel::SimWorld world(k.ep);
  world.run([&](int rank) {
    ModelConfig c = k.config;
    c.moe.ep = k.ep;
    c.moe.ep_rank = rank;
    parallel::RankGroup group;
    for (int r = 0; r < k.ep; ++r) group.push_back(r);
    auto ep = world.make_comm("ep", group, rank);
    device::Device dev(device::DeviceProfile{}, rank);
    GptModel m(c, dev);
    m.set_ep_comm(*ep);
    body(rank, m);
  });
}

class ModelExpertParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ModelExpertParallel, RanksMatchTheSingleDevice) {
  omp_set_num_threads(1);
  const Case& k = GetParam();
  const int64_t B = 2, T = 8;
  std::vector<testing::RandomBatch> batches;
  std::vector<Reference> refs;
  for (int r = 0; r < k.ep; ++r) {
    batches.push_back(testing::random_batch(B, T, k.config.vocab, 11 + r));
    refs.push_back(run_reference(k.config, batches.back(), B, T));
  }
  on_ep_ranks(k, [&](int rank, GptModel& m) {
    const ModelConfig& c = m.config();
    TokenBatch b = batches[rank].view(B, T, false);
    b.aux_loss_scale = 1.0f;
    m.forward(b, 5, true);
    const Reference& ref = refs[rank];
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(m.losses(), ref.losses.data(), B * T, testing::kPathRtol))
        << "per-token losses on EP rank " << rank;
    // Routing and capacity are decided on the rank's own tokens before dispatch (Megatron's
    // router), so every slot is kept or dropped as on one device with the same batch.
    EXPECT_EQ(m.aux_losses().routing_hash, ref.routing) << "routing on EP rank " << rank;
    m.backward(b, batches[rank].weights.data(), 5, true, true);
    int experts = 0;
    for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
      const ParamInfo& p = m.params().info(i);
      ASSERT_TRUE(ref.grads.count(p.name)) << p.name << " is not a parameter of the single-device model";
      std::vector<double> want(p.numel, 0.0);
      for (int r = 0; r < (p.expert_parallel ? k.ep : 1); ++r) {
        const std::vector<float>& g = refs[p.expert_parallel ? r : rank].grads.at(p.name);
        for (int64_t j = 0; j < p.numel; ++j) want[j] += g[j];
      }
      const std::vector<float> wantf(want.begin(), want.end());
      EXPECT_TRUE(mtrain::testing::close_in_max_norm(m.params().grad(i), wantf.data(), p.numel, testing::kPathRtol))
          << "grad of " << p.name << " on EP rank " << rank;
      experts += p.expert_parallel ? 1 : 0;
    }
    // Only this rank's experts, by their global index.
    const int64_t local = c.moe.num_experts / k.ep;
    int moe_layers = 0;
    for (int l : c.moe.layers) moe_layers += l;
    EXPECT_EQ(experts, moe_layers * local * (c.add_bias_linear ? 4 : 2));
    const std::string first = "experts.local_experts." + std::to_string(rank * local) + ".linear_fc1.weight";
    bool found = false;
    for (const ParamInfo& p : m.params().infos()) found = found || p.name.find(first) != std::string::npos;
    EXPECT_TRUE(found) << first;
  });
}

ModelConfig capacity(bool pad) {
  ModelConfig c = testing::tiny_moe();
  c.moe.router.capacity_factor = 1.0;  // top-2 of 4 experts: some experts overflow and drop
  c.moe.router.pad_to_capacity = pad;
  return c;
}

ModelConfig gpt2_biases() {
  ModelConfig c = testing::tiny_gpt2();
  c.moe = testing::tiny_moe().moe;
  c.moe.layers = {1, 1};
  c.moe.shared_ffn = 0;
  c.moe.shared_gate = false;
  c.moe.grouped_gemm = false;
  return c;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ModelExpertParallel,
                         ::testing::Values(Case{"ep2", testing::tiny_moe(), 2}, Case{"ep4", testing::tiny_moe(), 4},
                                           Case{"ep2_gelu_fc2_bias_looped", gpt2_biases(), 2},
                                           Case{"ep2_capacity_dropping", capacity(false), 2},
                                           Case{"ep4_capacity_padded", capacity(true), 4}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace mtrain::model
