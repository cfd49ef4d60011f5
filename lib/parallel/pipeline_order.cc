// The pure half of pipeline_schedule.h: Megatron's per-rank compute orders
// and the activation slots they need. No communication here.
#include <fmt/format.h>

#include <algorithm>

#include "common/errors.h"
#include "parallel/pipeline_schedule.h"

namespace mtrain::parallel {
namespace {

void check_shape(const PipelineShape& p) {
  if (p.stages < 1 || p.chunks < 1 || p.microbatches < 1 || p.stage < 0 || p.stage >= p.stages) {
    throw Error(ExitCode::kInternal,
                fmt::format("pipeline shape: stage {} of {} stages, {} chunks, {} microbatches is malformed", p.stage,
                            p.stages, p.chunks, p.microbatches));
  }
  if (!p.chunk_pool.empty()) {
    bool ok = static_cast<int>(p.chunk_pool.size()) == p.chunks;
    for (int c = 0; ok && c < p.chunks; ++c) ok = p.chunk_pool[c] >= 0 && p.chunk_pool[c] < p.chunks;
    if (!ok) throw Error(ExitCode::kInternal, "pipeline shape: chunk_pool needs a pool in [0, chunks) per chunk");
  }
  if (p.stages > 1 && p.chunks > 1 && p.microbatches % p.stages != 0) {
    throw ConfigError(fmt::format("number of microbatches ({}) is not divisible by pipeline-model-parallel-size ({}) "
                                  "when using interleaved schedule",
                                  p.microbatches, p.stages),
                      "make global_batch_size / (micro_batch_size x data parallel size) a multiple of "
                      "pipeline_model_parallel_size, or drop the virtual pipeline");
  }
}

// Forward number k (0-based) of this rank as (chunk, microbatch). Interleaved:
// Megatron's schedule table with groups of `stages` microbatches per chunk.
PipeAction forward_at(const PipelineShape& p, int k) {
  if (p.stages == 1) return PipeAction{PipeOp::kForward, k % p.chunks, k / p.chunks, 0};
  if (p.chunks == 1) return PipeAction{PipeOp::kForward, 0, k, 0};
  const int group = p.stages * p.chunks;
  const int in_group = k % group;
  return PipeAction{PipeOp::kForward, in_group / p.stages, (k / group) * p.stages + in_group % p.stages, 0};
}

// Backward number k: the forward table with the chunk order reversed.
PipeAction backward_at(const PipelineShape& p, int k) {
  PipeAction a = forward_at(p, k);
  a.op = PipeOp::kBackward;
  a.chunk = p.chunks - 1 - a.chunk;
  return a;
}

int warmup_forwards(const PipelineShape& p) {
  const int total = p.chunks * p.microbatches;
  if (p.stages == 1) return 0;
  if (p.chunks == 1) return std::min(p.stages - p.stage - 1, total);
  return std::min((p.stages - p.stage - 1) * 2 + (p.chunks - 1) * p.stages, total);
}

// Sets every action's slot: a forward takes the lowest free slot of its
// chunk's pool, its backward frees it. Returns the slots used per pool.
std::vector<int> assign_slots(const PipelineShape& p, std::vector<PipeAction>& actions) {
  std::vector<std::vector<bool>> busy(p.pools());           // (pools, slots in use so far)
  std::vector<int> slot_of(p.chunks * p.microbatches, -1);  // (chunks, microbatches)
  for (PipeAction& a : actions) {
    std::vector<bool>& used = busy[p.pool_of(a.chunk)];
    int& slot = slot_of[a.chunk * p.microbatches + a.microbatch];
    if (a.op == PipeOp::kForward) {
      slot = static_cast<int>(std::find(used.begin(), used.end(), false) - used.begin());
      if (slot == static_cast<int>(used.size())) used.push_back(false);
      used[slot] = true;
      a.slot = slot;
    } else {
      a.slot = slot;
      used[slot] = false;
    }
  }
  std::vector<int> slots(busy.size());
  for (size_t k = 0; k < busy.size(); ++k) slots[k] = static_cast<int>(busy[k].size());
  return slots;
}

// Order without slots.
std::vector<PipeAction> compute_order(const PipelineShape& p) {
  const int total = p.chunks * p.microbatches;
  std::vector<PipeAction> order;
  order.reserve(2 * total);
  if (p.stages == 1) {  // no pipelining: each microbatch through every chunk and back
    for (int m = 0; m < p.microbatches; ++m) {
      for (int c = 0; c < p.chunks; ++c) order.push_back(PipeAction{PipeOp::kForward, c, m, 0});
      for (int c = p.chunks - 1; c >= 0; --c) order.push_back(PipeAction{PipeOp::kBackward, c, m, 0});
    }
    return order;
  }
  const int warmup = warmup_forwards(p);
  const int steady = total - warmup;
  for (int k = 0; k < warmup; ++k) order.push_back(forward_at(p, k));
  for (int k = 0; k < steady; ++k) {
    order.push_back(forward_at(p, warmup + k));
    order.push_back(backward_at(p, k));
  }
  for (int k = steady; k < total; ++k) order.push_back(backward_at(p, k));
  return order;
}

}  // namespace

int PipelineShape::pools() const {
  int n = chunks;
  if (!chunk_pool.empty()) n = 1 + *std::max_element(chunk_pool.begin(), chunk_pool.end());
  return n;
}

std::vector<PipeAction> pipeline_actions(const PipelineShape& shape) {
  check_shape(shape);
  std::vector<PipeAction> actions = compute_order(shape);
  assign_slots(shape, actions);
  return actions;
}

std::vector<PipeAction> pipeline_forward_only_actions(const PipelineShape& shape) {
  check_shape(shape);
  std::vector<PipeAction> actions(shape.chunks * shape.microbatches);
  for (int k = 0; k < static_cast<int>(actions.size()); ++k) actions[k] = forward_at(shape, k);
  return actions;
}

std::vector<int> pipeline_activation_slots(const PipelineShape& shape) {
  check_shape(shape);
  std::vector<PipeAction> actions = compute_order(shape);
  return assign_slots(shape, actions);
}

}  // namespace mtrain::parallel
