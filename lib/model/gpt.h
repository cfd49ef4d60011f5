// GptModel: Megatron's GPT family (GPT-2, Llama, Qwen2 shapes) as one rank
// holds it: embedding -> L decoder layers -> final norm -> LM head ->
// cross-entropy, cut into the model chunks of this rank's pipeline stage
// (ModelConfig::chunks; the whole model by default) and split over the
// tensor-parallel group (ModelConfig::tp: heads, FFN and vocabulary; with
// sequence parallelism the residual stream holds N/tp tokens). The parallel
// layers come from lib/parallel/tensor_parallel.h; this class only picks them.
//
// Parameters live in one ParamStore; activations are allocated once on the
// device: chunk_slots[p] activation sets for the chunks of pool p
// (chunk_pool: chunks of one activation shape share a pool; its slots are the
// micro-batches a pipeline schedule keeps in flight over them), each for up
// to (micro_batch, seq_length) tokens — the memory a real run would hold.
//
// Recompute: with --recompute_granularity full, the recomputed layers of all
// chunks and slots share one activation set and backward re-runs each such
// layer's forward from its saved input (dropout masks are counter-based, so
// recomputation is exact).
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/params.h"
#include "model/transformer_layer.h"
#include "moe/router_metrics.h"
#include "parallel/comm.h"
#include "parallel/parallel_state.h"

namespace mtrain::model {

class GptModel {
 public:
  // Single device (config.tp must be 1).
  GptModel(const ModelConfig& config, device::Device& dev, bool meta = false);
  // One rank of a tensor-parallel group `tp` (size config.tp).
  // `padded_numel` lays the parameters out for the data-parallel gradient
  // buckets (ParamStore::layout) and returns the flat buffer size they need.
  GptModel(const ModelConfig& config, device::Device& dev, parallel::Comm& tp, bool meta = false,
           const std::function<int64_t(ParamStore&)>& padded_numel = {});
  ~GptModel();

  // ---- Whole model (one chunk with embedding and head; slot 0) ----
  // Forward over one micro-batch; keeps what backward needs. Per-token losses
  // (B*T, unweighted) are available from losses() afterwards. `seed` selects
  // the dropout masks of this micro-batch; `training` false disables dropout.
  void forward(const TokenBatch& b, uint64_t seed, bool training);
  const float* losses() const { return chunk_losses(0, 0); }
  // Backward of sum_i dloss[i] * loss_i after the matching forward(); weight
  // gradients accumulate into params().grads(). zero_grads = true (the first
  // micro-batch of a step) first sets every parameter's gradient to zero,
  // each just before its first contribution: the same result as zeroing the
  // whole buffer beforehand, without a separate sweep over it.
  void backward(const TokenBatch& b, const float* dloss, uint64_t seed, bool training, bool zero_grads = false);
  // Logits (B*T, vocab_local) of the last forward() (valid until backward()).
  const float* logits() const;

  // ---- Model chunks (pipeline schedules) ----
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  const ModelChunk& chunk(int c) const { return chunks_[c].spec; }
  int slots(int c) const { return static_cast<int>(pools_[chunks_[c].pool].size()); }
  int pool(int c) const { return chunks_[c].pool; }  // chunk c's activation pool
  // The device bytes of one micro-batch's activation slot of chunk c.
  int64_t slot_bytes(int c) const { return pool_slot_bytes_[chunks_[c].pool]; }
  // Elements of the hidden state a chunk receives or sends for a micro-batch
  // of N = B*T tokens: tokens_local(N) * hidden.
  int64_t hidden_elems(const TokenBatch& b) const { return config_.tokens_local(b.B * b.T) * config_.hidden; }
  // Forward of chunk c in activation slot s. input: the previous stage's
  // output (hidden_elems floats), ignored by a chunk with the embedding.
  // Returns the output hidden state (valid until the slot is reused), or
  // nullptr for the chunk with the loss (chunk_losses(c, s) then holds it).
  const float* forward_chunk(int c, int s, const TokenBatch& b, const float* input, uint64_t seed, bool training);
  const float* chunk_losses(int c, int s) const;
  // Backward of chunk c, slot s. grad_output: d(output) from the next stage
  // (ignored by the chunk with the loss, which uses dloss (B*T)). Returns
  // d(input) (valid until the next call), or nullptr for the chunk with the
  // embedding. zero_grads: first backward of this chunk in the step.
  const float* backward_chunk(int c, int s, const TokenBatch& b, const float* grad_output, const float* dloss,
                              uint64_t seed, bool training, bool zero_grads);

  // ---- Inference with a KV cache (model/kv_cache.h) ----
  // Forward of chunk c (slot 0, no dropout) for b.T new tokens of one
  // sequence (B = 1, positions from cache.length()) after the cached ones.
  // Returns the output hidden state, or nullptr for the chunk with the head
  // (logits() then holds (T, V_loc)). The caller advances the cache once
  // every chunk of the step ran.
  const float* decode_chunk(int c, KvCache& cache, const TokenBatch& b, const float* input);

  // --overlap_grad_reduce: while set, backward reports each flat gradient
  // range [begin, end) as soon as its last contribution of this backward is
  // in (a layer after its backward, the embedding and head at the end of
  // theirs), so the trainer can start reducing it. Null: no reports.
  void set_grad_ready(std::function<void(int64_t begin, int64_t end)> ready) { grad_ready_ = std::move(ready); }

  // The flat parameter ranges [begin, end) chunk c's forward reads (its
  // embedding, layers, final norm and output layer): what an overlapped
  // parameter all-gather must have delivered before that forward starts.
  std::vector<std::pair<int64_t, int64_t>> chunk_param_spans(int c) const;

  // Context parallelism (config.cp > 1): the group whose ranks hold the
  // other chunks of each sequence; attention runs as a ring over it. Must be
  // set before the first forward; its size must be config.cp. tp_cp (size
  // tp * cp; required by an MoE model): the routers' token group (Megatron's
  // tp_cp_group), whose ranks hold the disjoint token shards of a micro-batch.
  void set_cp_comm(parallel::Comm& cp, parallel::Comm* tp_cp = nullptr);
  // The MoE routers' auxiliary losses of chunk c's last forward in slot s
  // (nothing for a dense model; recomputed layers share one activation set,
  // so only the last of them is seen).
  AuxLosses aux_losses(int c, int s);
  AuxLosses aux_losses() { return aux_losses(0, 0); }
  // The router losses of the training forwards since the last call, as
  // Megatron's log line shows them (" load_balancing_loss: X | z_loss: Y |",
  // moe::RouterLossTracker: summed over TP x CP, averaged over DP, summed
  // over pipeline stages, divided by the micro-batches and the MoE layers).
  // A collective over the run's groups (every rank calls it); empty, without
  // communication, for a dense model.
  std::vector<std::pair<std::string, double>> take_aux_log(parallel::ParallelState& st, int64_t microbatches);
  // Aux-loss-free balancing (--moe_router_enable_expert_bias), Megatron's
  // _update_router_expert_bias in finalize_model_grads: once per global batch,
  // after the gradient reduction and before the optimizer step (also when the
  // step is then skipped), the routing counts of the training forwards since
  // the last update, summed over `tp_dp_cp`, move each MoE layer's
  // router.expert_bias by rate * sign(mean - count); the counts restart.
  // A no-op without expert bias.
  void update_expert_bias(parallel::Comm& tp_dp_cp);
  // Each MoE layer's accumulated routing counts (MoE layers of this rank in
  // layer order, E each): what the next update_expert_bias reduces.
  const float* expert_counts() const { return expert_counts_.data(); }

  ParamStore& params() { return params_; }
  const ModelConfig& config() const { return config_; }
  parallel::Comm& tp_comm() { return *tp_; }
  // The expert-parallel group the MoE layers dispatch over (size config().moe.ep) and, for the
  // allgather dispatcher, the expert TP x EP group (size ep * expert_tp()); set before the first step.
  void set_ep_comm(parallel::Comm& ep, parallel::Comm* tp_ep = nullptr);
  device::Device& device() const { return dev_; }

 private:
  GptModel(const ModelConfig& config, device::Device& dev, parallel::Comm* tp, bool meta,
           const std::function<int64_t(ParamStore&)>& padded_numel);

  struct ChunkSlot {
    Tensor residuals;                // (L_chunk+1, N_loc, C): input of each layer, then the chunk output
    std::vector<LayerActs> layers;   // per layer (unused for recomputed layers)
    Tensor lnf, lnf_mean, lnf_rstd;  // post: (N_loc, C), (N_loc), (N_loc)
    Tensor logits;                   // post: (N, V_loc); d(logits) after backward with the fused loss
    Tensor ce_stats;                 // post: (N, 2) fused cross-entropy statistics
    Tensor ce_scratch;               // post: (N, V_loc) probabilities for the unfused loss
    Tensor losses;                   // post: (N)
  };
  struct Chunk {
    ModelChunk spec;
    std::vector<int> layer_index;  // into layers_, per layer of the chunk
    int pool = 0;                  // its activation pool (pools_)
  };
  ChunkSlot& slot_of(int c, int s) { return pools_[chunks_[c].pool][s]; }
  const ChunkSlot& slot_of(int c, int s) const { return pools_[chunks_[c].pool][s]; }

  void build_params();
  void allocate_chunks(bool meta);
  void allocate_slot(ChunkSlot& s, const Chunk& ch, int chunk_id, int slot_id, bool meta);
  void check_grad_coverage() const;
  // Parameters first..last (indices into the ParamStore; first < 0: none).
  std::vector<std::pair<int64_t, int64_t>> grad_spans(int first, int last) const;
  void zero_grads_of(int first, int last);
  void zero_grad(int param) { zero_grads_of(param, param); }
  void zero_layer_grads(int layer) { zero_grads_of(layer_param_span_[layer].first, layer_param_span_[layer].second); }
  void report_ready(int first, int last);
  // Floats between successive layer inputs in a slot's residual stream.
  int64_t residual_stride() const {
    return config_.tokens_local(config_.micro_batch * config_.seq_local()) * config_.hidden;
  }
  LayerActs& acts_for(ChunkSlot& s, int64_t i) { return config_.layer_recomputed(i) ? recompute_acts_ : s.layers[i]; }
  void embed_forward(const TokenBatch& b, float* out, uint64_t seed, bool training);
  void embed_backward(const TokenBatch& b, float* dout, uint64_t seed, bool training, bool zero_grads);
  void head_forward(ChunkSlot& s, const TokenBatch& b, const float* h);
  void head_backward(ChunkSlot& s, const TokenBatch& b, const float* h, const float* dloss, bool zero_grads);
  parallel::TpConfig tp_config() const {
    return parallel::TpConfig{tp_,   config_.sequence_parallel, parallel::Wire::of(config_.dtype), cp_, ep_, tp_ep_,
                              tp_cp_};
  }

  ModelConfig config_;
  device::Device& dev_;
  std::unique_ptr<parallel::Comm> own_tp_;  // single-device constructor: a group of one
  parallel::Comm* tp_ = nullptr;
  parallel::Comm* cp_ = nullptr;     // set_cp_comm
  parallel::Comm* tp_cp_ = nullptr;  // set_cp_comm
  parallel::Comm* ep_ = nullptr;
  parallel::Comm* tp_ep_ = nullptr;  // the allgather dispatcher's group
  ParamStore params_;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, out_w_ = -1;
  std::vector<LayerParams> layers_;                    // the layers this rank holds, in chunk order
  std::vector<std::pair<int, int>> layer_param_span_;  // [first, last] parameter index of each
  std::vector<Chunk> chunks_;
  std::vector<std::vector<ChunkSlot>> pools_;  // per activation pool, its slots
  std::vector<int64_t> pool_slot_bytes_;       // per pool, the device bytes of one slot
  LayerActs recompute_acts_;                   // shared by every recomputed layer
  Workspace ws_;
  Tensor dres_;  // (N_loc, C) gradient of the residual stream
  Tensor dlnf_;  // (N_loc, C)
  std::function<void(int64_t, int64_t)> grad_ready_;
  // The routers' state across the micro-batches of a step (gpt_router.cc).
  void init_router_state(bool meta);
  void record_routing(int layer, int layer_index, const moe::RouterForward& route);
  moe::RouterLossTracker router_losses_;  // logged losses since take_aux_log
  std::vector<int> moe_row_;              // per entry of layers_: its row of expert_counts_, -1 if dense
  Tensor expert_counts_;                  // (MoE layers here, E) routing counts since update_expert_bias
};

}  // namespace mtrain::model
