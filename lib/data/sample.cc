#include "data/sample.h"

#include <numeric>

namespace mtrain::data {

std::optional<LossScale> loss_scale_from_name(std::string_view name) {
  if (name == "default") return LossScale::kDefault;
  if (name == "all") return LossScale::kAll;
  if (name == "last_round") return LossScale::kLastRound;
  return std::nullopt;
}

const char* loss_scale_name(LossScale scale) {
  switch (scale) {
    case LossScale::kDefault:
      return "default";
    case LossScale::kAll:
      return "all";
    case LossScale::kLastRound:
      return "last_round";
  }
  return "?";
}

std::optional<TruncationStrategy> truncation_strategy_from_name(std::string_view name) {
  if (name == "delete") return TruncationStrategy::kDelete;
  if (name == "left") return TruncationStrategy::kLeft;
  if (name == "right") return TruncationStrategy::kRight;
  return std::nullopt;
}

const char* truncation_strategy_name(TruncationStrategy strategy) {
  switch (strategy) {
    case TruncationStrategy::kDelete:
      return "delete";
    case TruncationStrategy::kLeft:
      return "left";
    case TruncationStrategy::kRight:
      return "right";
  }
  return "?";
}

bool truncate_sample(Sample& sample, int64_t max_length, TruncationStrategy strategy) {
  const auto length = static_cast<int64_t>(sample.tokens.size());
  if (max_length <= 0 || length <= max_length) return true;
  switch (strategy) {
    case TruncationStrategy::kDelete:
      return false;
    case TruncationStrategy::kLeft:
      sample.tokens.erase(sample.tokens.begin(), sample.tokens.end() - max_length);
      sample.loss_mask.erase(sample.loss_mask.begin(), sample.loss_mask.end() - max_length);
      return true;
    case TruncationStrategy::kRight:
      sample.tokens.resize(max_length);
      sample.loss_mask.resize(max_length);
      return true;
  }
  return true;
}

int64_t count_loss_tokens(const Sample& sample) {
  if (sample.loss_mask.size() < 2) return 0;
  return std::accumulate(sample.loss_mask.begin() + 1, sample.loss_mask.end(), int64_t{0});
}

}  // namespace mtrain::data
