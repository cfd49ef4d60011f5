#include "shapes.h"

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

int64_t matmul_params(const model::ModelConfig& c) {
  const int64_t C = c.hidden;
  const int64_t per_layer = c.qkv_width() * C + C * c.heads * c.head_dim + c.fc1_width() * C + C * c.ffn;
  return per_layer * c.num_layers + c.padded_vocab * C;
}

double model_flops(const model::ModelConfig& c, int64_t tokens, int64_t T) {
  const double dense = 6.0 * static_cast<double>(matmul_params(c)) * static_cast<double>(tokens);
  const double attn = 6.0 * static_cast<double>(c.num_layers * c.heads * c.head_dim) * static_cast<double>(T) *
                      static_cast<double>(tokens);
  return dense + attn;
}

}  // namespace mtrain::bench
