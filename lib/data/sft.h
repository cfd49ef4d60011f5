// Supervised fine-tuning data: JSONL records -> conversations -> tokenized
// samples with loss masks. The format is detected per line:
//   alpaca   {"instruction", "output", optional "input", "system"}
//            user turn = instruction, plus "\n" + input when input is non-empty
//   messages {"messages": [{"role", "content"}, ...]}  roles system (first
//            only) / user / assistant; the last message must be the assistant's.
//   sharegpt {"conversations": [{"from", "value"}, ...]}  from system / human /
//            gpt (user / assistant accepted); same rules as messages.
// Detection order: "messages", then "conversations", then alpaca keys.
// Every error names `file:line` and what is wrong.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/progress.h"
#include "data/chat_template.h"
#include "data/sample.h"
#include "data/tokenizer.h"

namespace mtrain::data {

struct SftOptions {
  ChatTemplate chat_template = ChatTemplate::kChatml;
  LossScale loss_scale = LossScale::kDefault;
  int64_t max_length = 0;  // tokens; <= 0: no limit
  TruncationStrategy truncation = TruncationStrategy::kDelete;
  std::string default_system;  // for records without a system prompt; "" = the template's (qwen, default)
};

struct SftDataset {
  std::vector<Sample> samples;
  int64_t num_records = 0;   // conversations read
  int64_t num_too_long = 0;  // longer than max_length: dropped (delete) or truncated (left/right)
  int64_t num_no_loss = 0;   // dropped because no token carries loss (e.g. answer truncated away)
  int64_t num_tokens = 0;    // sum of kept sample lengths
};

// One JSONL record -> conversation; `origin` ("file:line") prefixes errors.
Conversation parse_sft_record(const nlohmann::json& record, const std::string& origin);
// All records of a JSONL file. Throws DataError for an unreadable or empty file.
std::vector<Conversation> read_sft_jsonl(const std::string& path);

// Tokenizes, applies max_length/truncation and drops samples without loss.
// Throws DataError (naming `source`) if no sample survives.
// `progress` (may be null): a progress line over the conversations (common/progress.h).
SftDataset build_sft_dataset(const std::vector<Conversation>& conversations, const Tokenizer& tokenizer,
                             const SftOptions& options, const std::string& source, ProgressSink* progress = nullptr);
SftDataset load_sft_dataset(const std::string& path, const Tokenizer& tokenizer, const SftOptions& options);

}  // namespace mtrain::data
