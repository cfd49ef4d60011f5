// The model split over tensor-parallel ranks (threads of a SimWorld) and over
// pipeline chunks computes what the whole model computes: the same per-token
// losses and, for every parameter, exactly its shard of the full gradient —
// with dropout on, so the mask offsets of heads and token shards are checked too.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
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
  int tp;
  bool sp;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Element (i, j) of this rank's shard of `p`, read from the full tensor.
float full_value(const std::vector<float>& full, const ParamInfo& p, int64_t i, int64_t j) {
  return full[testing::full_index(p, i, j)];
}

struct Reference {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // per parameter name order of the full model
  std::vector<std::string> names;
};

Reference run_reference(const ModelConfig& c, const testing::RandomBatch& rb, int64_t B, int64_t T) {
  device::Device dev(device::DeviceProfile{}, 0);
  GptModel m(c, dev);
  TokenBatch b = rb.view(B, T, false);
  b.aux_loss_scale = 1.0f;  // MoE: the routers' auxiliary losses join the gradient
  m.forward(b, 5, true);
  Reference r;
  r.losses.assign(m.losses(), m.losses() + B * T);
  m.backward(b, rb.weights.data(), 5, true, true);
  for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
    const ParamInfo& p = m.params().info(i);
    r.names.push_back(p.name);
    r.grads.emplace_back(m.params().grad(i), m.params().grad(i) + p.numel);
  }
  return r;
}

// The first T_ref positions of each of the B rows of (B, T) values.
std::vector<float> leading_positions(const float* x, int64_t B, int64_t T, int64_t T_ref) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) out.insert(out.end(), x + b * T, x + b * T + T_ref);
  return out;
}

// Runs `base` on TP ranks over rb's (B, T) batch and checks each rank's
// losses (first T_ref positions of each row) and gradient shards against ref.
void expect_tp_matches(const ModelConfig& base, int tp_size, bool sp, const Reference& ref,
                       const testing::RandomBatch& rb, int64_t B, int64_t T, int64_t T_ref) {
  parallel::SimWorld world(tp_size);
  world.run([&](int rank) {
    ModelConfig c = base;
    c.tp = tp_size;
    c.tp_rank = rank;
    c.sequence_parallel = sp;
    parallel::RankGroup group;
    for (int r = 0; r < tp_size; ++r) group.push_back(r);
    auto tp = world.make_comm("tp", group, rank);
    device::Device dev(device::DeviceProfile{}, rank);
    GptModel m(c, dev, *tp);
    TokenBatch b = rb.view(B, T, false);
    b.aux_loss_scale = 1.0f;
    m.forward(b, 5, true);
    const std::vector<float> losses = leading_positions(m.losses(), B, T, T_ref);
    EXPECT_TRUE(mtrain::testing::close_in_max_norm(losses.data(), ref.losses.data(), B * T_ref, testing::kPathRtol))
        << "per-token losses on TP rank " << rank;
    m.backward(b, rb.weights.data(), 5, true, true);
    for (int i = 0; i < static_cast<int>(m.params().infos().size()); ++i) {
      const ParamInfo& p = m.params().info(i);
      ASSERT_EQ(p.name, ref.names[i]);
      std::vector<float> g(m.params().grad(i), m.params().grad(i) + p.numel);
      // Sequence parallelism (and --qk_layernorm's head split) leaves replicated
      // tensors with partial gradients (summed over TP by the trainer's GradSync): sum them here.
      if (p.sequence_parallel_grad) tp->all_reduce_sum(g.data(), p.numel);
      const int64_t rows = p.shape[0], cols = p.numel / rows;
      std::vector<float> want(g.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) want[r * cols + j] = full_value(ref.grads[i], p, r, j);
      EXPECT_TRUE(mtrain::testing::close_in_max_norm(g.data(), want.data(), g.size(), testing::kPathRtol))
          << "grad of " << p.name << " on TP rank " << rank;
    }
  });
}

class ModelTensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ModelTensorParallel, ShardsMatchTheWholeModel) {
  omp_set_num_threads(1);
  const Case& k = GetParam();
  const int64_t B = 2, T = 8;
  const testing::RandomBatch rb = testing::random_batch(B, T, k.config.vocab, 11);
  const Reference ref = run_reference(k.config, rb, B, T);
  expect_tp_matches(k.config, k.tp, k.sp, ref, rb, B, T, T);
}

// rb's (B, T) rows padded to T_pad as the data loader pads them: pad tokens
// after the last real one, carrying no loss (weight 0).
testing::RandomBatch padded(const testing::RandomBatch& rb, int64_t B, int64_t T, int64_t T_pad) {
  testing::RandomBatch out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T_pad; ++t) {
      const bool real = t < T;
      const int64_t e = b * T + t;
      out.tokens.push_back(real ? rb.tokens[e] : 0);
      out.targets.push_back(real ? rb.targets[e] : 0);
      out.positions.push_back(real ? rb.positions[e] : static_cast<int32_t>(t));
      out.doc_ids.push_back(real ? rb.doc_ids[e] : 0);
      out.weights.push_back(real ? rb.weights[e] : 0.f);
    }
  }
  return out;
}

ModelConfig with_dropout(ModelConfig c) {
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  return c;
}

ModelConfig unfused(ModelConfig c) {
  c.fusions = Fusions{false, false, false, false, false, false, false, false};
  return c;
}

// With RoPE: without it a key bias (k_layernorm.bias) shifts every score of
// a query equally, so its exact gradient is 0 and only rounding noise is left to compare.
ModelConfig qk_layernorm(ModelConfig c) {
  c.qk_layernorm = true;
  c.rope = true;
  return c;
}

// Expert tensor parallelism `etp` on an MoE model; gpt2: GELU experts with
// fc1/fc2 biases and no shared expert (shared experts refuse biases).
ModelConfig moe_etp(ModelConfig c, int64_t etp, bool gpt2) {
  const ModelConfig moe = testing::tiny_moe();
  c.moe = moe.moe;
  c.moe.etp = etp;
  if (gpt2) c.moe.shared_ffn = 0, c.moe.shared_gate = false, c.moe.grouped_gemm = false;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Variants, ModelTensorParallel,
    ::testing::Values(Case{"llama_tp2", with_dropout(testing::tiny_llama()), 2, false},
                      Case{"llama_tp2_sp", with_dropout(testing::tiny_llama()), 2, true},
                      Case{"llama_tp2_sp_unfused", unfused(with_dropout(testing::tiny_llama())), 2, true},
                      Case{"gpt2_tp2_sp", with_dropout(testing::tiny_gpt2()), 2, true},
                      Case{"gpt2_tp4", testing::tiny_gpt2(), 4, false},
                      // --qk_layernorm: replicated norm weights fed by each rank's heads only.
                      Case{"qwen3_tp2", with_dropout(testing::tiny_qwen3()), 2, false},
                      Case{"qwen3_tp2_sp_unfused", unfused(with_dropout(testing::tiny_qwen3())), 2, true},
                      Case{"gpt2_qk_layernorm_tp2_sp", qk_layernorm(testing::tiny_gpt2()), 2, true},
                      // MoE under TP needs SP (Megatron): each rank routes its token
                      // shard through whole experts (ETP 1); the shared expert is split.
                      Case{"moe_tp2_sp", testing::tiny_moe(), 2, true},
                      Case{"moe_tp2_sp_unfused", unfused(testing::tiny_moe()), 2, true},
                      // ETP = TP: each rank runs F/2 of every expert on both ranks' rows.
                      Case{"moe_tp2_sp_etp2", moe_etp(testing::tiny_moe(), 2, false), 2, true},
                      Case{"moe_tp2_sp_etp2_gelu_bias", moe_etp(testing::tiny_gpt2(), 2, true), 2, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Sequence parallelism pads rows of 7 tokens to 8 (a multiple of TP): with
// dropout on, the masks of the second row's tokens must not move with the
// padding, so the padded TP2+SP run equals the unpadded single-device run.
TEST(ModelTensorParallel, PaddedSequenceParallelMatchesUnpaddedRun) {
  omp_set_num_threads(1);
  for (bool flash : {true, false}) {
    ModelConfig c = with_dropout(testing::tiny_llama());
    c.fusions.flash_attention = flash;
    const int64_t B = 2, T = 7, T_pad = 8;
    ASSERT_EQ(c.seq_length, T_pad);
    const testing::RandomBatch rb = testing::random_batch(B, T, c.vocab, 17);
    const Reference ref = run_reference(c, rb, B, T);
    SCOPED_TRACE(flash ? "flash attention" : "unfused attention");
    expect_tp_matches(c, 2, true, ref, padded(rb, B, T, T_pad), B, T_pad, T);
  }
}

// Pipeline chunks run one after another compute the whole model.
TEST(ModelChunks, ChunksComposeToTheWholeModel) {
  omp_set_num_threads(1);
  const ModelConfig whole = with_dropout(testing::tiny_llama());
  const int64_t B = 2, T = 8;
  const testing::RandomBatch rb = testing::random_batch(B, T, whole.vocab, 3);
  const Reference ref = run_reference(whole, rb, B, T);
  const TokenBatch b = rb.view(B, T, false);
  // Two stages of one layer each, as separate models (each rank's view).
  std::vector<std::vector<float>> h(1);
  device::Device dev(device::DeviceProfile{}, 0);
  ModelConfig c0 = whole, c1 = whole;
  c0.chunks = pipeline_chunks(whole.num_layers, 2, 0, 1, 0, 0);
  c1.chunks = pipeline_chunks(whole.num_layers, 2, 1, 1, 0, 0);
  GptModel s0(c0, dev), s1(c1, dev);
  const float* out = s0.forward_chunk(0, 0, b, nullptr, 5, true);
  h[0].assign(out, out + s0.hidden_elems(b));
  EXPECT_EQ(s1.forward_chunk(0, 0, b, h[0].data(), 5, true), nullptr);
  for (int64_t i = 0; i < B * T; ++i) EXPECT_FLOAT_EQ(s1.chunk_losses(0, 0)[i], ref.losses[i]);
  const float* dh = s1.backward_chunk(0, 0, b, nullptr, rb.weights.data(), 5, true, true);
  std::vector<float> dcopy(dh, dh + s1.hidden_elems(b));
  EXPECT_EQ(s0.backward_chunk(0, 0, b, dcopy.data(), nullptr, 5, true, true), nullptr);
  int checked = 0;
  for (GptModel* s : {&s0, &s1}) {
    for (int i = 0; i < static_cast<int>(s->params().infos().size()); ++i) {
      const ParamInfo& p = s->params().info(i);
      int j = 0;
      while (ref.names[j] != p.name) ++j;
      for (int64_t e = 0; e < p.numel; ++e) ASSERT_FLOAT_EQ(s->params().grad(i)[e], ref.grads[j][e]) << p.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(ref.names.size()));
}

}  // namespace
}  // namespace mtrain::model
