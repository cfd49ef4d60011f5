// Expert capacity (Megatron's get_capacity) for token dropping.
#include <cmath>

#include "moe/router.h"

namespace mtrain::moe {

int64_t expert_capacity(int64_t num_tokens, int64_t num_experts, int topk, double capacity_factor) {
  // Same order of operations as math.ceil((num_tokens * topk / E) * factor)
  // in double, so the rounding point matches Python's.
  const double per_expert = static_cast<double>(num_tokens * topk) / static_cast<double>(num_experts);
  return static_cast<int64_t>(std::ceil(per_expert * capacity_factor));
}

}  // namespace mtrain::moe
