// Internal to lib/moe: what the MoE layer's files share. moe_layer.cc runs
// forward / backward, moe_buffers.cc allocates MoeActs / MoeWorkspace, and
// expert_lora.cc numbers the dispatched rows for the experts' LoRA dropout.
#pragma once

#include <cstdint>

#include "moe/allgather_dispatch.h"
#include "moe/moe_layer.h"
#include "parallel/tensor_parallel.h"

namespace mtrain::moe::detail {

// This rank's tokens of the micro-batch's N: its shard under sequence parallelism.
inline int64_t tokens_local(const MoeLayerConfig& c, int64_t N) { return c.sequence_parallel ? N / c.tp : N; }

// The routing index arrays inside MoeActs::routing (int32 stored in fp32-sized slots).
using Routing = AgPermutation;
inline Routing routing_of(MoeActs& a, int64_t m_max) {
  auto* p = reinterpret_cast<int32_t*>(a.routing.data());
  return {p, p + m_max, p + 2 * m_max};
}

// LoRA dropout on the experts: the mask ids of the rows the experts see
// (a.lora_ids; under EP also their mask streams, a.lora_seeds), computed where
// the rows are permuted and, under ETP / EP, sent with them (after the rows'
// own dispatch, whose counts they reuse). Clears both without dropout or in a
// dry run. B, T: the micro-batch's sequences and tokens.
void dispatch_row_ids(const MoeLayerConfig& c, const parallel::TpConfig& tp, const ExpertAdapters& ad, MoeActs& a,
                      MoeWorkspace& w, int64_t B, int64_t T);

}  // namespace mtrain::moe::detail
