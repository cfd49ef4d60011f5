// ModelConfig: the resolved shape and kernel choices of a GPT/Llama model,
// derived once from config::Args (flags) and the tokenizer's vocabulary.
// Also the model-level FLOP and parameter counts used by the log and bench/.
#pragma once

#include <cstdint>
#include <string>

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

struct ModelConfig {
  int64_t num_layers = 0;
  int64_t hidden = 0;        // C
  int64_t ffn = 0;           // F
  int64_t heads = 0;         // H (query heads)
  int64_t groups = 0;        // G (key/value heads)
  int64_t head_dim = 0;      // D = kv_channels
  int64_t vocab = 0;         // tokenizer vocabulary
  int64_t padded_vocab = 0;  // Vp: padded to make_vocab_size_divisible_by * TP
  int64_t max_positions = 0;
  int64_t seq_length = 0;   // T used to size activation buffers
  int64_t micro_batch = 1;  // B used to size activation buffers
  bool rmsnorm = true;
  bool swiglu = true;
  bool rope = true;
  bool untie = true;
  bool add_bias_linear = false;
  bool add_qkv_bias = true;
  float norm_eps = 1e-5f;
  float rotary_base = 10000.f;
  float hidden_dropout = 0.f;
  float attention_dropout = 0.f;
  float init_std = 0.02f;
  uint64_t seed = 42;
  DType dtype = DType::kF32;
  Fusions fusions;
  Recompute recompute = Recompute::kNone;
  // With kFull: --recompute_method block recomputes only the first
  // recompute_num_layers layers; uniform recomputes every layer (each from its
  // own saved input; Megatron's uniform chunks of n > 1 layers compute the
  // same values). 0 = every layer.
  int64_t recompute_block_layers = 0;
  bool layer_recomputed(int64_t layer) const {
    return recompute == Recompute::kFull && (recompute_block_layers == 0 || layer < recompute_block_layers);
  }

  int64_t qkv_width() const { return groups * (heads / groups + 2) * head_dim; }
  int64_t fc1_width() const { return swiglu ? 2 * ffn : ffn; }
};

ModelConfig model_config_from_args(const config::Args& args, int64_t vocab_size);

// Megatron's padding: multiple = divisible_by * tp; padded = ceil(vocab / multiple) * multiple.
int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp);

// Parameters that take part in GEMMs (all linear weights incl. the LM head).
int64_t matmul_params(const ModelConfig& c);
// Model FLOPs of one training step over `tokens` tokens of length-T sequences:
// 6 * matmul_params * tokens (fwd + bwd) + causal attention 6 * L * H * D * T * tokens
// (QK^T and PV, fwd 2 GEMMs * 2 flops, bwd twice that, halved for causality).
double train_flops(const ModelConfig& c, int64_t tokens, int64_t T);

std::string describe(const ModelConfig& c);

}  // namespace mtrain::model
