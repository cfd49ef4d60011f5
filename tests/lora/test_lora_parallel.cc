// Adapters split over tensor-parallel ranks (threads of a SimWorld), with and
// without sequence parallelism and with adapter dropout on, compute what the
// whole model computes: the same per-token losses and, for every adapter,
// exactly its shard of the full gradient (A replicated / B split by rows on
// column-parallel linears; A split by columns / B replicated on row-parallel ones).
#include <gtest/gtest.h>
#include <omp.h>

#include <map>
#include <string>
#include <vector>

#include "lora_test_util.h"
#include "parallel/sim_comm.h"

namespace mtrain::lora {
namespace {

using model::GptModel;
using model::ModelConfig;
using model::ParamInfo;
using model::TokenBatch;
using model::TpSplit;

using model::testing::full_index;

// B = a fixed function of the full index, the same on every layout (B = 0 would leave dA = 0).
void set_lora_b(GptModel& m) {
  for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
    const ParamInfo& p = m.params().info(i);
    if (p.name.find(".lora_B.") == std::string::npos) continue;
    const int64_t rows = p.shape[0], cols = p.numel / rows;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        m.params().param(i)[r * cols + j] = 0.3f * static_cast<float>(std::sin(1.7 * full_index(p, r, j) + 0.5));
  }
}

struct Case {
  std::string name;
  ModelConfig base;
  int tp;
  bool sp;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class LoraTensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(LoraTensorParallel, AdapterShardsMatchTheWholeModel) {
  omp_set_num_threads(1);
  const Case& k = GetParam();
  ModelConfig whole = testing::tiny_lora(k.base);
  whole.lora.dropout = 0.3f;
  whole.hidden_dropout = 0.1f;
  const int64_t B = 2, T = 8;
  const auto rb = model::testing::random_batch(B, T, whole.vocab, 11);
  const TokenBatch b = rb.view(B, T, false);
  std::vector<float> ref_losses;
  std::map<std::string, std::vector<float>> ref_grads;
  {
    device::Device dev(device::DeviceProfile{}, 0);
    GptModel m(whole, dev);
    set_lora_b(m);
    m.forward(b, 5, true);
    ref_losses.assign(m.losses(), m.losses() + B * T);
    m.backward(b, rb.weights.data(), 5, true, true);
    for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i)
      if (m.params().info(i).trainable)
        ref_grads[m.params().info(i).name].assign(m.params().grad(i), m.params().grad(i) + m.params().info(i).numel);
  }
  parallel::SimWorld world(k.tp);
  world.run([&](int rank) {
    ModelConfig c = whole;
    c.tp = k.tp, c.tp_rank = rank, c.sequence_parallel = k.sp;
    parallel::RankGroup group;
    for (int r = 0; r < k.tp; ++r) group.push_back(r);
    auto tp = world.make_comm("tp", group, rank);
    device::Device dev(device::DeviceProfile{}, rank);
    GptModel m(c, dev, *tp);
    set_lora_b(m);
    m.forward(b, 5, true);
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(m.losses(), ref_losses.data(), B * T, model::testing::kPathRtol))
        << "per-token losses on TP rank " << rank;
    m.backward(b, rb.weights.data(), 5, true, true);
    int adapters = 0;
    for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
      const ParamInfo& p = m.params().info(i);
      if (!p.trainable) continue;
      ++adapters;
      const std::vector<float>& full = ref_grads.at(p.name);
      const int64_t rows = p.shape[0], cols = p.numel / rows;
      std::vector<float> want(p.numel);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) want[r * cols + j] = full[full_index(p, r, j)];
      EXPECT_TRUE(
          mtrain::testing::close_in_max_norm(m.params().grad(i), want.data(), p.numel, model::testing::kPathRtol))
          << "grad of " << p.name << " on TP rank " << rank;
    }
    EXPECT_EQ(adapters, 2 * 4 * c.num_layers);
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, LoraTensorParallel,
                         ::testing::Values(Case{"llama_tp2", model::testing::tiny_llama(), 2, false},
                                           Case{"llama_tp2_sp", model::testing::tiny_llama(), 2, true},
                                           Case{"gpt2_tp2_sp", model::testing::tiny_gpt2(), 2, true},
                                           Case{"gpt2_tp4", model::testing::tiny_gpt2(), 4, false}),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace mtrain::lora
