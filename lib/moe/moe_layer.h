// The MoE layer (Megatron-core's MoELayer) of one rank: shared experts (a
// dense MLP on every token, optionally scaled by a sigmoid gate) + router +
// token dispatch + the local routed experts, as a forward/backward pair over
// caller-owned buffers. It replaces the dense MLP of the layers
// --moe_layer_freq selects; the model (lib/model/moe_block.h) registers the
// parameters and hands their addresses in MoeWeights.
//
//   x (N_loc, C)  -> router -> expert ids / combine probs (N_loc, k)
//                 -> permute (expert-major rows, moe/permute.h)
//                 -> experts: fc1 (grouped GEMM), bias + SwiGLU/GELU, fc2
//                 -> unpermute weighted by the probs -> + shared(x) = out (N_loc, C)
//
// Tensor parallelism (Megatron: MoE under TP needs sequence parallelism, so
// x is this rank's token shard): the router and the routed experts see only
// the rank's tokens. Expert tensor parallelism etp = 1: every rank holds
// whole experts (replicated over TP, their gradients summed over TP like a
// sequence-parallel weight's); etp = tp: each rank holds F/tp of every
// expert and runs it on every TP rank's permuted rows (moe/expert_tp.h).
// The shared expert is split over TP as the dense MLP (column-parallel
// fc1, row-parallel fc2, SP gather/scatter).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lora/lora_linear.h"
#include "moe/expert_lora.h"
#include "moe/router.h"
#include "parallel/tensor_parallel.h"
#include "tensor/tensor.h"

namespace mtrain::moe {

struct MoeLayerConfig {
  RouterConfig router;
  int64_t hidden = 0;        // C
  int64_t ffn = 0;           // F of each routed expert
  int64_t num_local = 0;     // routed experts on this rank (all E without expert parallelism)
  int64_t shared_ffn = 0;    // the shared experts' total F (0: none); this rank holds shared_ffn / tp
  bool shared_gate = false;  // Qwen2-MoE: shared output *= sigmoid(x . gate_weight)
  bool swiglu = true;
  bool fused_activation = true;   // --bias_swiglu_fusion
  bool grouped_gemm = true;       // --moe_grouped_gemm
  bool permute_fusion = false;    // --moe_permute_fusion
  bool grad_accumulation = true;  // --gradient_accumulation_fusion (shared expert's linears)
  DType dtype = DType::kF32;
  int64_t tp = 1;
  bool sequence_parallel = false;
  int64_t etp = 1;  // expert tensor parallel size: 1 or tp (the TP group)
  // Expert parallel size: this rank holds E / ep experts (their F/etp slices)
  // and dispatches its rows over TpConfig::ep, then over the TP group when
  // etp > 1 (moe/expert_dispatch.h).
  int64_t ep = 1;
  // --moe_token_dispatcher_type allgather: with etp * ep > 1 every rank
  // gathers the tokens of its expert TP x EP group (TpConfig::tp_ep,
  // moe/allgather_dispatch.h) instead of the all-to-all.
  bool allgather = false;
  int64_t gather_group() const { return allgather ? etp * ep : 1; }
  bool allgather_dispatch() const { return gather_group() > 1; }
  // --moe_routing_imbalance: the most rows an expert receives from a sender
  // as a multiple of its balanced share, what the expert buffers are planned for.
  double routing_imbalance = 1.0;
  int64_t lora_rank = 0;     // r of the experts' and shared expert's LoRA adapters (0: none)
  float lora_dropout = 0.f;  // their --lora_dropout
  int64_t fc1_width() const { return swiglu ? 2 * ffn : ffn; }
  int64_t ffn_local() const { return ffn / etp; }
  int64_t fc1_local() const { return fc1_width() / etp; }
  int64_t shared_local() const { return shared_ffn / tp; }
  int64_t shared_fc1_local() const { return (swiglu ? 2 : 1) * shared_local(); }
  // The most permuted rows of N_loc tokens: k per token, or every expert (of all E) padded to capacity.
  int64_t max_rows(int64_t n_loc) const;
  // The most rows the experts see: this rank's, with etp > 1 every TP rank's,
  // with ep > 1 every EP rank's (all of them could pick this rank's experts).
  int64_t max_expert_rows(int64_t n_loc) const { return etp * ep * max_rows(n_loc); }
  // The rows the device is charged for (moe_buffers.cc), as the frameworks'
  // dynamically sized dispatch holds them: every expert at most its capacity
  // from each sender under --moe_expert_capacity_factor, else its balanced
  // share (rounded up) times routing_imbalance; at most max_expert_rows.
  int64_t planned_expert_rows(int64_t n_loc) const;
  // The most rows this rank permutes: with the allgather dispatcher, of its group's tokens.
  int64_t perm_rows(int64_t n_loc) const { return gather_group() * max_rows(n_loc); }
};

// Addresses of one layer's parameters (gradients null when frozen; biases null when absent).
struct MoeWeights {
  const float* router = nullptr;  // (E, C)
  float* router_grad = nullptr;
  const float* expert_bias = nullptr;  // (E) or null
  // per local expert: (FC1/etp, C), (C, F/etp), (FC1/etp), (C)
  std::vector<const float*> fc1, fc2, fc1_bias, fc2_bias;
  std::vector<float*> fc1_grad, fc2_grad, fc1_bias_grad, fc2_bias_grad;
  const float* shared_fc1 = nullptr;   // (FC1s_local, C)
  const float* shared_fc2 = nullptr;   // (C, Fs_local)
  const float* shared_gate = nullptr;  // (1, C)
  float* shared_fc1_grad = nullptr;
  float* shared_fc2_grad = nullptr;
  float* shared_gate_grad = nullptr;
  ExpertAdapters lora;  // the routed experts' LoRA adapters (moe/expert_lora.h)
  // The shared expert's adapters, split over TP as the dense MLP's (A null: none).
  lora::AdapterWeights shared_fc1_lora, shared_fc2_lora;
};

// Device bytes a real micro-batch holds beyond the planned expert rows, as
// their own allocation (the buffers' host storage already has room): held
// from the dispatch that brought the rows to the end of the layer's backward.
class MoeRowsBeyondPlan {
 public:
  MoeRowsBeyondPlan() = default;
  MoeRowsBeyondPlan(device::Device& dev, std::string name) : dev(&dev), name(std::move(name)) {}
  MoeRowsBeyondPlan(MoeRowsBeyondPlan&& o) noexcept { *this = std::move(o); }
  MoeRowsBeyondPlan& operator=(MoeRowsBeyondPlan&& o) noexcept;
  ~MoeRowsBeyondPlan() { hold(0); }
  void hold(int64_t bytes);  // gives back what it held, then holds `bytes`

 private:
  device::Device* dev = nullptr;
  int64_t bytes = 0;
  std::string name;
};

// What the layer's acts / workspace buffers need beyond their charge when
// the experts see `rows` rows (0 when rows are within the plan).
struct MoeBufferBytes {
  int64_t acts = 0, workspace = 0;
};
MoeBufferBytes moe_rows_beyond_plan(const MoeLayerConfig& c, int64_t B, int64_t T, int64_t rows);

// What one layer keeps from forward to backward (activations on the device).
// M = permuted rows (perm_rows), N = all tokens of the micro-batch, N_loc this rank's.
struct MoeActs {
  RouterForward route;
  std::vector<int64_t> rows;  // (E) rows per expert of this rank's permutation (all experts)
  int64_t M = 0;              // rows used
  Tensor routing;             // int32 (2*M + N_loc*k): row_token, row_slot, slot_row
  Tensor x_perm;              // (M, C) permuted tokens
  Tensor probs_perm;          // (M) their combine weights
  // etp > 1 / ep > 1: every TP / EP rank's rows for the local experts, grouped
  // by expert (Mg = max_expert_rows at most)
  std::vector<int64_t> counts;               // (etp or ep, E_local) rows of each rank per local expert
  std::vector<int64_t> rows_grp;             // (E_local); allgather: the local experts' rows of x_perm
  std::vector<int64_t> counts_etp, rows_ep;  // ep > 1 and etp > 1: (etp, E_local), (E_local), expert_dispatch.h
  Tensor x_grp;                              // (Mg, C)
  Tensor fc1;                                // (Mg, FC1/etp) pre-activation (Mg = M without ETP)
  Tensor act;                                // (Mg, F/etp)
  Tensor y_perm;                             // (M, C) expert outputs (with fc2 bias), before the combine weights
  Tensor shared_fc1;                         // (N, FC1s_local)
  Tensor shared_act;                         // (N, Fs_local)
  Tensor shared_out;                         // gate: (N_loc, C) the shared output before the gate
  Tensor gate;                               // gate: (N_loc) sigmoid scores
  Tensor lora_h;                             // LoRA: (2, Mg, r) the experts' fc1 | fc2 adapter activations
  Tensor shared_lora_h;                      // LoRA: (2, N, r) the shared expert's fc1 | fc2 adapter activations
  std::vector<int64_t> lora_ids;             // LoRA dropout: (Mg) the expert rows' mask ids (moe/expert_lora.h)
  std::vector<uint64_t> lora_seeds;          // ... and under EP (2, Mg) their fc1 | fc2 mask streams
  int64_t sized_B = 0, sized_T = 0;          // the micro-batch the buffers are sized for (the largest)
  int64_t received = 0;                      // EP / allgather: the rows the local experts got (sum rows_grp)
  MoeRowsBeyondPlan beyond;                  // their bytes beyond the planned rows, until the backward ends
};

// Temporaries shared by all MoE layers.
struct MoeWorkspace {
  Tensor d_perm;             // (M, C) d(y_perm), then d(x_perm)
  Tensor d_fc1;              // (Mg, FC1/etp)
  Tensor d_act;              // (Mg, F/etp)
  Tensor gathered;           // etp > 1: (etp * M, C) the all-gather / reduce-scatter buffer; ep > 1: (etp * ep * M,
                             // C) the all-to-all-v receive (and expert-TP gather) buffer; allgather: (G * N_loc, C)
  Tensor grp;                // etp > 1 or ep > 1: (Mg, C) grouped expert outputs / their gradients
  Tensor ep_grp;             // ep > 1 and etp > 1: (ep * M, C) the rows received over EP, by local expert
  Tensor ag_slots;           // allgather: (2 * G * N_loc * k) the group's expert ids and probs; then d(probs)
  Tensor dprobs;             // (N_loc * k)
  Tensor dlogits;            // (N_loc, E)
  Tensor routed;             // (N_loc, C) unpermuted routed output
  Tensor d_shared;           // (N_loc, C) d(shared output before the gate)
  Tensor shared_d_fc1;       // (N, FC1s_local)
  Tensor shared_d_act;       // (N, Fs_local)
  Tensor scratch;            // unfused activation / unpermute / weight-gradient scratch
  Tensor lora_dh;            // LoRA: (max(Mg, N), r) adapter gradient
  Tensor lora_scratch;       // LoRA: (max(N, Mg), max(C, Fs_local, F_local)) the adapters' dropout(x) / d(x)
  MoeRowsBeyondPlan beyond;  // a layer's rows beyond the plan, while it runs
};

// The dense layer's sequence-parallel buffers, shared with the MoE layer (N, C) each.
struct SpBuffers {
  float* full_in = nullptr;
  float* full_out = nullptr;
};

// B, T: the micro-batch sizes the buffers are for (max); tag prefixes the tensor names.
void allocate_moe_acts(MoeActs& a, const MoeLayerConfig& c, int64_t B, int64_t T, device::Device& dev, bool meta,
                       const std::string& tag);
void allocate_moe_workspace(MoeWorkspace& w, const MoeLayerConfig& c, int64_t B, int64_t T, device::Device& dev,
                            bool meta);

// x (N_loc, C) -> out (N_loc, C) OVERWRITTEN. N = B*T tokens in the micro-batch.
void moe_forward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                 MoeWorkspace& w, const SpBuffers& sp, float* out, const float* x, int64_t B, int64_t T, bool training);
// dx (N_loc, C) OVERWRITTEN from dout (N_loc, C); weight gradients ACCUMULATED.
// aux_loss_scale: the weight of one token loss in the total (loss scale /
// loss tokens of the global batch); the router's aux_grad_scale is that times
// its N_loc tokens times the token group's size, as Megatron's per-token loss.
void moe_backward(const MoeLayerConfig& c, const parallel::TpConfig& tp, const MoeWeights& wt, MoeActs& a,
                  MoeWorkspace& w, const SpBuffers& sp, float* dx, const float* dout, const float* x, int64_t B,
                  int64_t T, float aux_loss_scale);

}  // namespace mtrain::moe
