// Internal to lib/data: the shared, immutable state behind a Tokenizer.
// tokenizer.cc encodes and decodes with it; tokenizer_json.cc reads and
// writes it as tokenizer.json; sentencepiece_model.cc fills it from a
// SentencePiece model (then `spm` encodes and decodes the ordinary text).
#pragma once

#include <array>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/pretokenizer.h"
#include "data/sentencepiece_model.h"
#include "data/tokenizer.h"

namespace mtrain::data {

struct Tokenizer::Impl {
  enum class Kind : uint8_t { kUnused, kModel, kAdded };
  struct MergeRule {
    int32_t rank;
    int32_t merged_id;
  };
  // Memoised BPE output per pre-token (words repeat a lot in natural text).
  struct WordCache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> ids;
  };

  std::string source;
  BpeModelSpec spec;               // as built; save() writes it back
  nlohmann::json loaded_sections;  // normalizer/pre_tokenizer/post_processor/decoder of a loaded file (null if built)

  std::vector<std::string> id_to_text;  // (vocab_size) symbol string or added content
  std::vector<Kind> kinds;              // (vocab_size)
  std::vector<uint8_t> special_flags;   // (vocab_size) 1 for special added tokens
  std::unordered_map<std::string, int32_t> model_ids;
  std::unordered_map<uint64_t, MergeRule> merge_rules;  // key (left id << 32 | right id)
  std::array<int32_t, 256> byte_ids{};                  // id of each byte's symbol, -1 if absent
  int32_t unk_id = -1;

  std::vector<AddedToken> added_longest_first;
  std::unordered_map<std::string, int32_t> added_ids;
  std::array<bool, 256> added_first_byte{};
  std::vector<RegexSplitter> splitters;
  std::shared_ptr<const SentencePieceModel> spm;  // set for a tokenizer.model; null for byte-level BPE

  mutable WordCache cache;

  // Validates `spec` and builds the lookup tables; throws DataError naming `source`.
  static std::shared_ptr<Impl> build(BpeModelSpec spec, std::string source);

  // An added token found at text[at] and the span it consumes (with lstrip/rstrip whitespace).
  struct AddedMatch {
    const AddedToken* token = nullptr;
    size_t begin = 0, end = 0;
  };
  // Longest added token matching at text[at]; lstrip stops at `floor`.
  AddedMatch match_added(std::string_view text, size_t at, size_t floor) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // Model (non-added) ids -> text: byte-level symbols to bytes, or SentencePiece decoding.
  std::string decode_model_run(std::span<const int32_t> ids) const;
  // Text without added tokens: prefix space, regex split, BPE per piece.
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_symbols(std::vector<int32_t>& symbols) const;
};

inline uint64_t merge_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace mtrain::data
