// ModelConfig: the resolved shape and kernel choices of a GPT/Llama model,
// derived once from config::Args (flags) and the tokenizer's vocabulary.
// Also the model-level FLOP and parameter counts used by the log and bench/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/rng.h"
#include "lora/lora_config.h"
#include "moe/router.h"
#include "tensor/tensor.h"

namespace mtrain::config {
struct Args;
}

namespace mtrain::model {

struct Fusions {
  bool masked_softmax = true;     // --masked_softmax_fusion
  bool bias_dropout = true;       // --bias_dropout_fusion
  bool bias_activation = true;    // --bias_swiglu_fusion / --bias_activation_fusion
  bool cross_entropy = true;      // --cross_entropy_loss_fusion
  bool rope = true;               // --apply_rope_fusion
  bool rmsnorm = true;            // --use_fused_rmsnorm
  bool flash_attention = true;    // --attention_backend flash / --use_flash_attn
  bool grad_accumulation = true;  // --gradient_accumulation_fusion
};

enum class Recompute { kNone, kSelective, kFull };

// Mixture of experts (--num_experts): the layers `layers` marks replace the
// dense MLP by an MoE layer (lib/moe/moe_layer.h) of num_experts routed
// experts of hidden size ffn, plus an optional shared expert.
struct MoeSettings {
  int64_t num_experts = 0;  // E; 0: a dense model
  int64_t ffn = 0;          // --moe_ffn_hidden_size
  std::vector<int> layers;  // per global layer: 1 = MoE (--moe_layer_freq)
  int64_t shared_ffn = 0;   // --moe_shared_expert_intermediate_size (0: none)
  bool shared_gate = false;
  bool grouped_gemm = true;
  bool permute_fusion = false;
  int64_t etp = 1;  // --expert_tensor_parallel_size: 1 (whole experts per TP rank) or tp
  // --expert_model_parallel_size: EP rank r holds experts [r*E/ep, (r+1)*E/ep) (Megatron's split).
  int64_t ep = 1, ep_rank = 0;
  bool allgather = false;          // --moe_token_dispatcher_type allgather
  double routing_imbalance = 1.0;  // --moe_routing_imbalance (moe::MoeLayerConfig)
  int64_t num_local() const { return num_experts / ep; }
  int64_t first_local() const { return ep_rank * num_local(); }
  moe::RouterConfig router;
};

// A contiguous range of decoder layers held by one rank (one pipeline stage,
// or one virtual stage of an interleaved pipeline). `pre`: it starts with the
// embedding (first virtual stage); `post`: it ends with the final norm, the
// output layer and the loss (last virtual stage).
struct ModelChunk {
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  bool pre = true;
  bool post = true;
};

struct ModelConfig {
  int64_t num_layers = 0;
  int64_t hidden = 0;        // C
  int64_t ffn = 0;           // F
  int64_t heads = 0;         // H (query heads)
  int64_t groups = 0;        // G (key/value heads)
  int64_t head_dim = 0;      // D = kv_channels
  int64_t vocab = 0;         // tokenizer vocabulary
  int64_t padded_vocab = 0;  // Vp: padded to make_vocab_size_divisible_by * TP
  // --mask_padded_vocab: ids [vocab, Vp) get -inf logits, so the loss is the
  // model's own at every TP; false: Megatron's softmax over all Vp logits.
  bool mask_padded_vocab = true;
  int64_t max_positions = 0;
  int64_t seq_length = 0;   // T used to size activation buffers
  int64_t micro_batch = 1;  // B used to size activation buffers
  bool rmsnorm = true;
  bool swiglu = true;
  bool rope = true;
  bool untie = true;
  bool add_bias_linear = false;
  bool add_qkv_bias = true;
  bool qk_layernorm = false;  // --qk_layernorm: model/qk_norm.h
  float norm_eps = 1e-5f;
  float rotary_base = 10000.f;
  float hidden_dropout = 0.f;
  float attention_dropout = 0.f;
  float init_std = 0.02f;
  uint64_t seed = 42;
  DType dtype = DType::kF32;
  // The main gradients' dtype: fp32, or bf16 under --grad_reduce_in_bf16
  // (every micro-batch's accumulation rounded to it, ParamStore::finalize).
  DType grad_dtype = DType::kF32;
  Fusions fusions;
  Recompute recompute = Recompute::kNone;
  // --train_type lora: adapters on the targeted linears, everything else
  // frozen except modules_to_save (and biases with --lora_bias all).
  lora::LoraConfig lora;
  MoeSettings moe;
  // The experts' tensor-parallel split on this rank: the TP group with
  // --expert_tensor_parallel_size > 1 (validated to equal TP), else 1.
  int64_t expert_tp() const { return moe.etp > 1 ? tp : 1; }
  bool is_moe_layer(int64_t layer) const {
    return moe.num_experts > 0 && layer >= 0 && layer < static_cast<int64_t>(moe.layers.size()) && moe.layers[layer];
  }
  // With kFull: --recompute_method block recomputes only the first
  // recompute_num_layers layers; uniform recomputes every layer (each from its
  // own saved input; Megatron's uniform chunks of n > 1 layers compute the
  // same values). 0 = every layer.
  // Megatron counts the block from the start of each model chunk.
  int64_t recompute_block_layers = 0;
  bool layer_recomputed(int64_t layer_in_chunk) const {
    return recompute == Recompute::kFull && (recompute_block_layers == 0 || layer_in_chunk < recompute_block_layers);
  }

  // Tensor parallelism of this rank: query heads, query groups, the FFN and
  // the (padded) vocabulary are split over tp ranks; with sequence_parallel
  // the residual stream between the TP regions holds N / tp tokens.
  int64_t tp = 1;
  int64_t tp_rank = 0;
  bool sequence_parallel = false;
  // Context parallelism: this rank holds 2 of the 2*cp chunks of every
  // sequence (parallel/ring_attention.h), seq_local() = seq_length / cp rows.
  int64_t cp = 1;
  int64_t cp_rank = 0;
  bool cp_ulysses = false;  // --context_parallel_algo ulysses_cp_algo (parallel/ulysses_attention.h), else the ring
  bool cp_general_mask = false;  // --cp_attention_mask_type general: the ring computes whole masked blocks
  int64_t seq_local() const { return seq_length / cp; }
  // What this rank holds; empty = the whole model as one chunk.
  std::vector<ModelChunk> chunks;
  // The activation pool of each chunk (chunk_pools; empty = chunk c is pool
  // c) and the activation sets per pool (micro-batches in flight); empty =
  // one each.
  std::vector<int> chunk_pool;
  std::vector<int> chunk_slots;

  int64_t qkv_width() const { return groups * (heads / groups + 2) * head_dim; }
  int64_t fc1_width() const { return swiglu ? 2 * ffn : ffn; }
  // This TP rank's share.
  int64_t heads_local() const { return heads / tp; }
  int64_t groups_local() const { return groups / tp; }
  int64_t ffn_local() const { return ffn / tp; }
  int64_t qkv_width_local() const { return qkv_width() / tp; }
  int64_t fc1_width_local() const { return fc1_width() / tp; }
  int64_t vocab_local() const { return padded_vocab / tp; }
  int64_t vocab_start() const { return tp_rank * vocab_local(); }
  // Ids [0, softmax_vocab()) take part in the softmax of the loss.
  int64_t softmax_vocab() const { return mask_padded_vocab ? vocab : padded_vocab; }
  // Tokens of an N-token micro-batch in this rank's residual stream.
  int64_t tokens_local(int64_t N) const { return sequence_parallel ? N / tp : N; }
  // The dropout numbering of this rank's residual-stream rows of a (B, T)
  // micro-batch (common/rng.h): its token shard under sequence parallelism,
  // its two sequence chunks under context parallelism, positions pitched by
  // --seq_length so a padded batch keeps every real token's mask.
  TokenNumbering token_numbering(int64_t B, int64_t T) const {
    return TokenNumbering{sequence_parallel ? tp_rank * tokens_local(B * T) : 0, T, std::max(T, seq_length), cp,
                          cp_rank};
  }
  std::vector<ModelChunk> chunk_list() const {
    return chunks.empty() ? std::vector<ModelChunk>{ModelChunk{0, num_layers, true, true}} : chunks;
  }
};

ModelConfig model_config_from_args(const config::Args& args, int64_t vocab_size);

// The chunks pipeline stage `stage` holds (Megatron's layouts): even stages;
// uneven first/last stages (first_stage_layers / last_stage_layers > 0, the
// other stages share the rest evenly); or, with vpp > 1 chunks per stage, the
// interleaved layout where chunk c of stage s is virtual stage c * pp + s.
// Throws Error(kInternal) when the layers do not split as validated.
std::vector<ModelChunk> pipeline_chunks(int64_t num_layers, int pp, int stage, int vpp, int64_t first_stage_layers,
                                        int64_t last_stage_layers);
// Sets tp_rank and the chunks of pipeline stage `pp_stage` from the flags.
void place_on_rank(ModelConfig& c, const config::Args& args, int tp_rank, int pp_stage);

// The activation pool of each of c.chunks: chunks whose micro-batch
// activations have the same shape (layer count, each layer dense or MoE and
// recomputed or not, the loss head or not) share one, numbered in order of
// first appearance. The embedding adds nothing per micro-batch.
std::vector<int> chunk_pools(const ModelConfig& c);

// Megatron's padding: multiple = divisible_by * tp; padded = ceil(vocab / multiple) * multiple.
int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp);

// FLOPs of a training iteration: model/flops.h (Megatron's formula).

std::string describe(const ModelConfig& c);

}  // namespace mtrain::model
