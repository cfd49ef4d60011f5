// Internal to lib/data: the shared, immutable state behind a Tokenizer, laid
// out as Hugging Face's pipeline: added tokens are cut out of the raw text,
// the rest is normalized (normalizer.h), cut into pieces (pre_tokenizer_steps.h),
// each piece is BPE-encoded (here, with a word cache), and add_special_tokens
// wraps the ids (post_processor.h); decoding runs decoder.h over the token
// strings. tokenizer.cc encodes and decodes; tokenizer_json.cc reads and
// writes tokenizer.json; sentencepiece_model.cc fills it from a SentencePiece
// model (then `spm` encodes and decodes the ordinary text).
#pragma once

#include <array>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/decoder.h"
#include "data/normalizer.h"
#include "data/post_processor.h"
#include "data/pre_tokenizer_steps.h"
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

  std::array<int32_t, 256> byte_fallback_ids{};  // id of "<0xNN>", -1 if absent
  int32_t unk_id = -1;

  // Added tokens matched on the raw text (normalized=false, or all of them
  // when there is no normalizer) and on the normalized text; `content` of the
  // latter is the normalized content. A match at text[at] looks up each
  // content length of tokens starting with that byte, longest first: a few
  // hash look-ups even for Gemma's 6,415 added tokens. Not copyable (views).
  struct AddedTokenSet {
    std::vector<AddedToken> tokens;
    std::unordered_map<std::string_view, size_t> by_content;  // views into `tokens`
    std::array<std::vector<size_t>, 256> lengths;             // by first byte, descending
    bool empty = true;
    AddedTokenSet() = default;
    AddedTokenSet(const AddedTokenSet&) = delete;
    AddedTokenSet& operator=(const AddedTokenSet&) = delete;
    void build(std::vector<AddedToken> list);
  };
  AddedTokenSet added_raw, added_normalized;
  std::unordered_map<std::string, int32_t> added_ids;

  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Decoder decoder;
  PostProcessor post_processor;
  std::shared_ptr<const SentencePieceModel> spm;  // set for a tokenizer.model; null for byte-level BPE

  mutable WordCache cache;

  // Validates `spec` and builds the lookup tables; throws DataError naming
  // `source`. The pipeline is the byte-level one of spec.split_patterns;
  // tokenizer.json replaces it with set_added_tokens()/the parsed components.
  static std::shared_ptr<Impl> build(BpeModelSpec spec, std::string source);
  // (Re)builds added_raw/added_normalized from spec.added_tokens and `normalizer`.
  void index_added_tokens();

  // An added token found at text[at] and the span it consumes (with lstrip/rstrip whitespace).
  struct AddedMatch {
    const AddedToken* token = nullptr;
    size_t begin = 0, end = 0;
  };
  // Longest token of `set` matching at text[at]; lstrip stops at `floor`.
  static AddedMatch match_added(const AddedTokenSet& set, std::string_view text, size_t at, size_t floor);
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // Cuts the tokens of `set` out of `text`; each stretch between them goes to
  // `gap(stretch, starts_text)`.
  template <typename Gap>
  void split_added(const AddedTokenSet& set, std::string_view text, std::vector<int32_t>& out, Gap&& gap) const;
  // Model (non-added) ids -> text: byte-level symbols to bytes, or SentencePiece decoding.
  std::string decode_model_run(std::span<const int32_t> ids) const;
  // Normalized text without added tokens: pre-tokenizer, BPE per piece.
  void encode_ordinary(std::string_view text, bool at_text_start, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // A piece's initial symbols: byte symbols, or characters with
  // byte_fallback / unk (fused when fuse_unk).
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void merge_symbols(std::vector<int32_t>& symbols) const;
};

inline uint64_t merge_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace mtrain::data
