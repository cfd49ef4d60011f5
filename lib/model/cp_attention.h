// Context-parallel attention inside a decoder layer (--context_parallel_size
// > 1): this rank holds 2 of the 2*cp chunks of each sequence and attends
// over the whole sequence by the ring (parallel/ring_attention.h) or by
// Ulysses' all-to-all (parallel/ulysses_attention.h), per ModelConfig::cp_ulysses.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "model/transformer_layer.h"
#include "parallel/tensor_parallel.h"

namespace mtrain::model {

inline bool context_parallel(const parallel::TpConfig& tp) { return tp.cp != nullptr && tp.cp->size() > 1; }

// Kernel scratch the CP attention needs (0 without CP), for (B, T local) rows.
int64_t cp_scratch_floats(const ModelConfig& c, int64_t B, int64_t H, int64_t G, int64_t T, int64_t D);
// The ring's or Ulysses' workspace buffers (none without CP).
void allocate_cp_workspace(Workspace& w, const ModelConfig& c, device::Device& dev, bool meta);

// a.att and a.softmax_stats from a.q, a.k, a.v (this rank's H heads and G
// groups), with attention dropout p of stream `seed`: the single device's
// masks (each chunk at its place in the whole sequence, each head global).
void cp_attention_forward(const ModelConfig& c, const parallel::TpConfig& tp, LayerActs& a, Workspace& w,
                          const TokenBatch& b, int64_t H, int64_t G, int64_t D, float dropout_p, uint64_t seed);
// w.d_q, w.d_k, w.d_v from w.d_att (the forward's dropout_p and seed).
void cp_attention_backward(const ModelConfig& c, const parallel::TpConfig& tp, LayerActs& a, Workspace& w,
                           const TokenBatch& b, int64_t H, int64_t G, int64_t D, float dropout_p, uint64_t seed);

}  // namespace mtrain::model
