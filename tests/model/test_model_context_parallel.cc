// The model split over context-parallel ranks (threads of a SimWorld) computes
// what the whole model computes: each CP rank holds chunks r and 2CP-1-r of
// every row (tokens, targets, true positions, document ids), its per-token
// losses are the whole model's at those positions, and its gradients summed
// over the CP group are the whole model's (every parameter is replicated over
// CP; the trainer sums them over DP x CP). Ring and Ulysses, with and without
// packed documents. Bound: testing::kPathRtol (model_test_util.h), the same
// "two summation orders of one model" bound as tensor parallelism.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "model_test_util.h"
#include "parallel/ring_attention.h"
#include "parallel/sim_comm.h"
#include "test_util/fp32_bounds.h"

namespace mtrain::model {
namespace {

struct Case {
  std::string name;
  int cp;
  bool ulysses, docs;
  bool qk_layernorm = false;  // tiny_qwen3: --qk_layernorm's norms before the ring / all-to-all
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Rows of (B, T) values that CP rank `rank` of `cp` holds: chunks rank and 2cp-1-rank.
template <class V>
V cp_rows(const V& x, int64_t B, int64_t T, int cp, int rank) {
  const int64_t c = T / (2 * cp);
  V out;
  for (int64_t b = 0; b < B; ++b)
    for (int half = 0; half < 2; ++half) {
      const auto first = x.begin() + b * T + parallel::cp_chunk(rank, cp, half) * c;
      out.insert(out.end(), first, first + c);
    }
  return out;
}

class ModelContextParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ModelContextParallel, RanksMatchTheWholeModel) {
  omp_set_num_threads(1);
  const Case& k = GetParam();
  const int64_t B = 2, T = 16;
  ModelConfig base = k.qk_layernorm ? testing::tiny_qwen3() : testing::tiny_llama();
  base.seq_length = T;
  const testing::RandomBatch rb = testing::random_batch(B, T, base.vocab, 13);
  // The whole model (no dropout: CP refuses it).
  device::Device dev0(device::DeviceProfile{}, 0);
  GptModel whole(base, dev0);
  const TokenBatch wb = rb.view(B, T, k.docs);
  whole.forward(wb, 5, true);
  const std::vector<float> ref_losses(whole.losses(), whole.losses() + B * T);
  whole.backward(wb, rb.weights.data(), 5, true, true);

  parallel::SimWorld world(k.cp);
  world.run([&](int rank) {
    ModelConfig c = base;
    c.cp = k.cp, c.cp_rank = rank, c.cp_ulysses = k.ulysses;
    parallel::RankGroup group;
    for (int r = 0; r < k.cp; ++r) group.push_back(r);
    auto cp = world.make_comm("cp", group, rank);
    device::Device dev(device::DeviceProfile{}, rank);
    GptModel m(c, dev);
    m.set_cp_comm(*cp);
    testing::RandomBatch mine;
    mine.tokens = cp_rows(rb.tokens, B, T, k.cp, rank), mine.targets = cp_rows(rb.targets, B, T, k.cp, rank);
    mine.positions = cp_rows(rb.positions, B, T, k.cp, rank), mine.doc_ids = cp_rows(rb.doc_ids, B, T, k.cp, rank);
    mine.weights = cp_rows(rb.weights, B, T, k.cp, rank);
    const TokenBatch b = mine.view(B, T / k.cp, k.docs);
    m.forward(b, 5, true);
    const std::vector<float> want = cp_rows(ref_losses, B, T, k.cp, rank);
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(m.losses(), want.data(), want.size(), testing::kPathRtol))
        << "per-token losses on CP rank " << rank;
    m.backward(b, mine.weights.data(), 5, true, true);
    for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
      const ParamInfo& p = m.params().info(i);
      std::vector<float> g(m.params().grad(i), m.params().grad(i) + p.numel);
      cp->all_reduce_sum(g.data(), p.numel);
      EXPECT_TRUE(mtrain::testing::close_in_max_norm(g.data(), whole.params().grad(i), g.size(), testing::kPathRtol))
          << "grad of " << p.name << " summed over CP, rank " << rank;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelContextParallel,
                         ::testing::Values(Case{"ring_cp2", 2, false, false},
                                           Case{"ring_cp2_documents", 2, false, true},
                                           Case{"ring_cp4_documents", 4, false, true},
                                           Case{"ulysses_cp2_documents", 2, true, true},
                                           Case{"ring_cp2_qk_layernorm", 2, false, true, true},
                                           Case{"ulysses_cp2_qk_layernorm", 2, true, true, true}),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace mtrain::model
