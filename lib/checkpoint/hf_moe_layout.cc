// The tensors of one MoE layer: Megatron-core's names (lib/model/moe_block.cc,
// global expert indices) and the Hugging Face ones (hf_layout.h).
//
//   mtrain decoder.layers.N.mlp.                     Qwen2-MoE model.layers.N.mlp.       Mixtral
//   model.layers.N.block_sparse_moe. router.weight (E, C)                             gate.weight gate.weight
//   experts.local_experts.e.linear_fc1 (2F, C)       experts.e.{gate,up}_proj.weight     experts.e.{w1,w3}.weight
//   experts.local_experts.e.linear_fc2 (C, F)        experts.e.down_proj.weight          experts.e.w2.weight
//   shared_experts.linear_fc1 (2Fs, C)               shared_expert.{gate,up}_proj.weight
//   shared_experts.linear_fc2 (C, Fs)                shared_expert.down_proj.weight
//   shared_experts.gate_weight (1, C)                shared_expert_gate.weight
//
// transformers: Qwen2MoeSparseMoeBlock (gate, experts = Qwen2MoeMLP, shared_expert,
// shared_expert_gate = Linear(C, 1)), MixtralSparseMoeBlock (gate, experts =
// MixtralBlockSparseTop2MLP with w2(silu(w1 x) * w3 x)).
#include <string>

#include "checkpoint/hf_layout.h"

namespace mtrain::checkpoint {

namespace {

HfTensorMap one(std::string mcore, Shape shape, std::string hf) {
  HfTensorMap m;
  m.mcore_name = std::move(mcore);
  m.mcore_shape = shape;
  m.hf_names = {std::move(hf)};
  m.hf_shapes = {std::move(shape)};
  return m;
}

// A SwiGLU MLP's [gate; up] fc1 and its fc2 under the given names.
void add_swiglu(std::vector<HfTensorMap>& out, const std::string& mcore, const std::string& hf_gate,
                const std::string& hf_up, const std::string& hf_down, int64_t ffn, int64_t hidden) {
  HfTensorMap fc1;
  fc1.mcore_name = mcore + "linear_fc1.weight";
  fc1.mcore_shape = {2 * ffn, hidden};
  fc1.transform = HfTransform::kGateUpSplit;
  fc1.hf_names = {hf_gate, hf_up};
  fc1.hf_shapes = {{ffn, hidden}, {ffn, hidden}};
  out.push_back(std::move(fc1));
  out.push_back(one(mcore + "linear_fc2.weight", {hidden, ffn}, hf_down));
}

}  // namespace

std::vector<HfTensorMap> hf_moe_layer_maps(int64_t layer, const HfModelShape& s) {
  const std::string n = std::to_string(layer);
  const std::string mcore = "decoder.layers." + n + ".mlp.";
  const bool mixtral = s.arch == HfArch::kMixtral;
  const std::string hf = "model.layers." + n + (mixtral ? ".block_sparse_moe." : ".mlp.");
  const int64_t C = s.hidden, E = s.moe.num_experts;
  std::vector<HfTensorMap> out{one(mcore + "router.weight", {E, C}, hf + "gate.weight")};
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = hf + "experts." + std::to_string(e) + ".";
    const std::string m = mcore + "experts.local_experts." + std::to_string(e) + ".";
    if (mixtral)
      add_swiglu(out, m, x + "w1.weight", x + "w3.weight", x + "w2.weight", s.moe.ffn, C);
    else
      add_swiglu(out, m, x + "gate_proj.weight", x + "up_proj.weight", x + "down_proj.weight", s.moe.ffn, C);
  }
  if (s.moe.shared_ffn > 0) {
    const std::string x = hf + "shared_expert.";
    add_swiglu(out, mcore + "shared_experts.", x + "gate_proj.weight", x + "up_proj.weight", x + "down_proj.weight",
               s.moe.shared_ffn, C);
    out.push_back(one(mcore + "shared_experts.gate_weight", {1, C}, hf + "shared_expert_gate.weight"));
  }
  return out;
}

}  // namespace mtrain::checkpoint
