// A tokenized training sample and the per-sample policies shared by SFT and
// pretraining data: which tokens carry loss (loss_scale) and what to do with
// a sample longer than max_length (truncation_strategy), named as in
// ms-swift's --loss_scale / --truncation_strategy.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace mtrain::data {

struct Sample {
  std::vector<int32_t> tokens;     // (L)
  std::vector<uint8_t> loss_mask;  // (L) 1 = the model is trained to predict this token
  // A packed row (data/packing.h): the token counts of the samples it
  // concatenates, in order (sum = L). Empty: one plain sample.
  std::vector<int32_t> doc_lengths = {};
};

// Which tokens of a conversation carry loss.
enum class LossScale {
  kDefault,    // "default": every assistant answer (content + closing end-of-turn token)
  kAll,        // "all": every token (what `pt` uses)
  kLastRound,  // "last_round": only the last assistant answer
};
std::optional<LossScale> loss_scale_from_name(std::string_view name);
const char* loss_scale_name(LossScale scale);

// What happens to a sample with more than max_length tokens.
enum class TruncationStrategy {
  kDelete,  // "delete": drop the sample (default)
  kLeft,    // "left": keep the last max_length tokens
  kRight,   // "right": keep the first max_length tokens
};
std::optional<TruncationStrategy> truncation_strategy_from_name(std::string_view name);
const char* truncation_strategy_name(TruncationStrategy strategy);

// Applies `strategy` when sample.tokens.size() > max_length (max_length <= 0:
// no limit). Returns false when the sample is to be dropped.
bool truncate_sample(Sample& sample, int64_t max_length, TruncationStrategy strategy);

// Number of tokens that are prediction targets (loss_mask[1..L-1]; the first
// token is never a target).
int64_t count_loss_tokens(const Sample& sample);

}  // namespace mtrain::data
