// The model split over context-parallel ranks (threads of a SimWorld) computes
// what the whole model computes: each CP rank holds chunks r and 2CP-1-r of
// every row (tokens, targets, true positions, document ids), its per-token
// losses are the whole model's at those positions, and its gradients summed
// over the CP group are the whole model's (every parameter is replicated over
// CP; the trainer sums them over DP x CP). Ring and Ulysses, with and without
// packed documents, with dropout (hidden, attention and LoRA: a CP rank must
// draw exactly its slice of the whole model's masks, numbered by position in
// the whole sequence and by global head), and CP x TP with sequence
// parallelism (heads and token shards on top of the chunks). Bound:
// testing::kPathRtol (model_test_util.h), the same "two summation orders of
// one model" bound as tensor parallelism; a wrong mask moves a loss by 1e-2.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "../lora/lora_test_util.h"
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
  float hidden_dropout = 0.f, attention_dropout = 0.f;
  bool lora = false;          // adapters on every linear with --lora_dropout 0.3
  int tp = 1;                 // with sequence parallelism when > 1
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

ModelConfig config_of(const Case& k, int64_t T) {
  ModelConfig c = k.qk_layernorm ? testing::tiny_qwen3() : testing::tiny_llama();
  if (k.lora) {
    c = lora::testing::tiny_lora(c);
    c.lora.dropout = 0.3f;
  }
  c.seq_length = T;
  c.hidden_dropout = k.hidden_dropout;
  c.attention_dropout = k.attention_dropout;
  return c;
}

class ModelContextParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ModelContextParallel, RanksMatchTheWholeModel) {
  omp_set_num_threads(1);
  const Case& k = GetParam();
  const int64_t B = 2, T = 16;
  const ModelConfig base = config_of(k, T);
  const testing::RandomBatch rb = testing::random_batch(B, T, base.vocab, 13);
  device::Device dev0(device::DeviceProfile{}, 0);
  GptModel whole(base, dev0);
  if (k.lora) lora::testing::randomize_lora_b(whole.params(), 3);
  const TokenBatch wb = rb.view(B, T, k.docs);
  whole.forward(wb, 5, true);
  const std::vector<float> ref_losses(whole.losses(), whole.losses() + B * T);
  whole.backward(wb, rb.weights.data(), 5, true, true);

  // Rank = tp_rank + cp_rank * TP (Megatron's order): TP groups are
  // consecutive ranks, CP groups stride by TP.
  parallel::SimWorld world(k.cp * k.tp);
  world.run([&](int rank) {
    const int tp_rank = rank % k.tp, cp_rank = rank / k.tp;
    ModelConfig c = base;
    c.cp = k.cp, c.cp_rank = cp_rank, c.cp_ulysses = k.ulysses;
    c.tp = k.tp, c.tp_rank = tp_rank, c.sequence_parallel = k.tp > 1;
    parallel::RankGroup tp_group, cp_group;
    for (int r = 0; r < k.tp; ++r) tp_group.push_back(cp_rank * k.tp + r);
    for (int r = 0; r < k.cp; ++r) cp_group.push_back(r * k.tp + tp_rank);
    auto tp = world.make_comm("tp" + std::to_string(cp_rank), tp_group, rank);
    auto cp = world.make_comm("cp" + std::to_string(tp_rank), cp_group, rank);
    device::Device dev(device::DeviceProfile{}, rank);
    GptModel m(c, dev, *tp);
    m.set_cp_comm(*cp);
    if (k.lora) lora::testing::randomize_lora_b(m.params(), 3);  // TP 1 here when LoRA: the same values
    testing::RandomBatch mine;
    mine.tokens = cp_rows(rb.tokens, B, T, k.cp, cp_rank), mine.targets = cp_rows(rb.targets, B, T, k.cp, cp_rank);
    mine.positions = cp_rows(rb.positions, B, T, k.cp, cp_rank);
    mine.doc_ids = cp_rows(rb.doc_ids, B, T, k.cp, cp_rank);
    mine.weights = cp_rows(rb.weights, B, T, k.cp, cp_rank);
    const TokenBatch b = mine.view(B, T / k.cp, k.docs);
    m.forward(b, 5, true);
    const std::vector<float> want = cp_rows(ref_losses, B, T, k.cp, cp_rank);
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(m.losses(), want.data(), want.size(), testing::kPathRtol))
        << "per-token losses on CP rank " << cp_rank << ", TP rank " << tp_rank;
    m.backward(b, mine.weights.data(), 5, true, true);
    for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
      const ParamInfo& p = m.params().info(i);
      if (!p.trainable) continue;
      std::vector<float> g(m.params().grad(i), m.params().grad(i) + p.numel);
      cp->all_reduce_sum(g.data(), p.numel);
      // Sequence parallelism leaves replicated tensors with partial gradients (the trainer sums them over TP).
      if (p.sequence_parallel_grad) tp->all_reduce_sum(g.data(), p.numel);
      const int64_t rows = p.shape[0], cols = p.numel / rows;
      std::vector<float> ref(g.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) ref[r * cols + j] = whole.params().grad(i)[testing::full_index(p, r, j)];
      EXPECT_TRUE(mtrain::testing::close_in_max_norm(g.data(), ref.data(), g.size(), testing::kPathRtol))
          << "grad of " << p.name << " summed over CP, CP rank " << cp_rank << ", TP rank " << tp_rank;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Variants, ModelContextParallel,
    ::testing::Values(Case{"ring_cp2", 2, false, false}, Case{"ring_cp2_documents", 2, false, true},
                      Case{"ring_cp4_documents", 4, false, true}, Case{"ulysses_cp2_documents", 2, true, true},
                      Case{"ring_cp2_dropout", 2, false, true, 0.2f, 0.2f},
                      Case{"ulysses_cp2_dropout", 2, true, true, 0.2f, 0.2f},
                      Case{"ring_cp4_lora_dropout", 4, false, true, 0.f, 0.2f, true},
                      Case{"ulysses_cp2_lora_dropout", 2, true, false, 0.1f, 0.1f, true},
                      Case{"ring_cp2_tp2_sp_dropout", 2, false, true, 0.2f, 0.2f, false, 2},
                      Case{"ring_cp2_qk_layernorm", 2, false, true, 0.f, 0.f, false, 1, true},
                      Case{"ulysses_cp2_qk_layernorm_dropout", 2, true, true, 0.1f, 0.1f, false, 1, true},
                      Case{"ring_cp2_tp2_sp_qk_layernorm", 2, false, true, 0.f, 0.f, false, 2, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace mtrain::model
