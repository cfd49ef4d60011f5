// Internal to lib/data: what `add_special_tokens=true` adds around the ids of
// one sequence. From tokenizer.json's `post_processor` (TemplateProcessing's
// "single" template, e.g. Llama-3's automatic <|begin_of_text|>; ByteLevel,
// which adds no ids; RobertaProcessing/BertProcessing cls ... sep; Sequence),
// or, as transformers' Llama and Gemma fast tokenizers do, rebuilt from
// tokenizer_config.json's add_bos_token / add_eos_token. Other processors are
// refused by name.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mtrain::data {

struct PostProcessor {
  std::vector<int32_t> prefix;  // ids before the sequence
  std::vector<int32_t> suffix;  // ids after it

  // Parses a tokenizer.json `post_processor` (null = none); throws DataError naming `where`.
  static PostProcessor from_json(const nlohmann::json& node, const std::string& where);
};

}  // namespace mtrain::data
