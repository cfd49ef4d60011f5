#include "shapes.h"

#include <string>

namespace mtrain::bench {

ShapeSpec gpt2_small() {
  model::ModelConfig c;
  c.num_layers = 12;
  c.hidden = 768;
  c.ffn = 4 * 768;
  c.heads = 12;
  c.groups = 12;
  c.head_dim = 64;
  c.vocab = 50304;  // GPT-2's 50257 padded to a multiple of 128
  c.padded_vocab = 50304;
  c.max_positions = 1024;
  c.micro_batch = 4;
  c.seq_length = 64;
  c.rmsnorm = false;
  c.swiglu = false;
  c.rope = false;
  c.untie = false;
  c.add_bias_linear = true;  // every linear incl. qkv has a bias
  c.add_qkv_bias = false;
  return {"gpt2-small", c};
}

ShapeSpec tiny_llama() {
  model::ModelConfig c;
  c.num_layers = 4;
  c.hidden = 256;
  c.ffn = 688;
  c.heads = 4;
  c.groups = 2;
  c.head_dim = 64;
  c.vocab = 8192;
  c.padded_vocab = 8192;
  c.max_positions = 256;
  c.micro_batch = 8;
  c.seq_length = 256;
  c.rmsnorm = true;
  c.swiglu = true;
  c.rope = true;
  c.untie = true;
  c.add_bias_linear = false;
  c.add_qkv_bias = false;
  return {"tiny-llama", c};
}

ShapeSpec tiny_moe(bool grouped) {
  ShapeSpec s = tiny_llama();
  model::MoeSettings& m = s.config.moe;
  m.num_experts = 8;
  m.ffn = 344;
  m.layers.assign(static_cast<size_t>(s.config.num_layers), 1);  // --moe_layer_freq 1
  m.grouped_gemm = grouped;
  m.router.num_experts = m.num_experts;
  m.router.hidden = s.config.hidden;
  m.router.topk = 2;
  m.router.aux_loss_coeff = 0.02;
  s.name = std::string("tiny-moe/") + (grouped ? "grouped" : "looped");
  return s;
}

ShapeSpec tiny_moe_shared(bool grouped) {
  ShapeSpec s = tiny_moe(grouped);
  s.config.moe.shared_ffn = 688;
  s.config.moe.shared_gate = true;
  s.name = std::string("tiny-moe-shared/") + (grouped ? "grouped" : "looped");
  return s;
}

int64_t matmul_params(const model::ModelConfig& c) {
  const int64_t C = c.hidden, gated = c.swiglu ? 3 : 2;  // fc1 (1 or 2 x F) + fc2
  const int64_t attention = c.qkv_width() * C + C * c.heads * c.head_dim;
  int64_t layers = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const int64_t mlp_width =
        c.is_moe_layer(i) ? c.moe.ffn * c.moe.router.topk + c.moe.shared_ffn : c.ffn;  // active MLP width
    layers += attention + gated * mlp_width * C;
  }
  return layers + c.padded_vocab * C;
}

double model_flops(const model::ModelConfig& c, int64_t tokens, int64_t T) {
  const double dense = 6.0 * static_cast<double>(matmul_params(c)) * static_cast<double>(tokens);
  const double attn = 6.0 * static_cast<double>(c.num_layers * c.heads * c.head_dim) * static_cast<double>(T) *
                      static_cast<double>(tokens);
  return dense + attn;
}

}  // namespace mtrain::bench
