// Byte-level BPE tokenizer (GPT-2 / Qwen2 / Llama-3 families) read from and
// written to the Hugging Face `tokenizer.json` format, or a SentencePiece
// `tokenizer.model` (Llama-2 family, through libsentencepiece) behind the same
// interface. Text is first cut at added (special) tokens, which are matched
// verbatim; each remaining stretch is split by the pre-tokenizer regexes,
// mapped to the byte-level alphabet (byte_level.h) and merged by BPE rank.
// Special ids (eos/pad/bos, chatml markers) come from a sibling
// `tokenizer_config.json` when present, else from well-known names.
//
// The model part is immutable and shared between copies, so a Tokenizer is
// cheap to copy and encode/decode are safe to call from several threads.
//
// tokenizer.json scope: Hugging Face's pipeline (normalizer, pre_tokenizer,
// BPE model, post_processor, decoder; see tokenizer_internal.h) for the
// components real files use: byte-level BPE (GPT-2, Qwen, Llama-3, DeepSeek,
// GPT-4o) and SentencePiece-converted BPE with byte_fallback (Llama-2,
// Mistral, Gemma). Ids equal the reference `tokenizers` library's
// (tests/data/test_tokenizer_reference.cc). A component mtrain does not
// implement is refused naming it. encode() adds no BOS/EOS unless asked
// (add_special_tokens=true applies the post_processor, or tokenizer_config's
// add_bos_token/add_eos_token). Added tokens honour lstrip/rstrip (ASCII
// whitespace next to the token is absorbed into it), single_word (no ASCII
// letter, digit, '_' or non-ASCII byte on either side) and `normalized`
// (matched on the normalized text).
//
// A SentencePiece model is encoded by libsentencepiece after its control and
// unknown pieces (<s>, </s>, <unk>) are cut out of the text as special tokens,
// as Hugging Face's Llama tokenizer does; it cannot be saved as tokenizer.json.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mtrain::data {

// A token matched verbatim in raw text before pre-tokenization.
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = true;       // special tokens are dropped by decode(..., skip_special_tokens=true)
  bool lstrip = false;       // absorb whitespace before the token
  bool rstrip = false;       // absorb whitespace after the token
  bool single_word = false;  // match only when not inside a word
  bool normalized = false;   // matched after normalization (see above)
};

// Ids of the tokens the data pipeline needs; -1 when the tokenizer has none.
struct SpecialTokenIds {
  int32_t eos = -1;       // end of a sequence / turn (tokenizer_config eos_token)
  int32_t pad = -1;       // padding (pad_token, else eos)
  int32_t bos = -1;       // optional begin-of-sequence
  int32_t eod = -1;       // end of document in pretraining streams (<|endoftext|>, else eos)
  int32_t im_start = -1;  // chatml <|im_start|>
  int32_t im_end = -1;    // chatml <|im_end|>
};

// Everything that defines a byte-level BPE model; tokenizer.json holds the same.
struct BpeModelSpec {
  std::vector<std::pair<std::string, int32_t>> vocab;       // byte-level symbol string -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order (rank 0 first)
  std::vector<AddedToken> added_tokens;
  std::vector<std::string> split_patterns;  // regexes applied in order; GPT-2 pattern by default
  bool add_prefix_space = false;            // prepend ' ' to text not starting with one
  bool ignore_merges = false;               // a word found whole in vocab is not merged (Llama-3 style)
  std::string unk_token;                    // used for bytes missing from vocab; empty = error instead
  // SentencePiece-style BPE (no ByteLevel pre-tokenizer): a character missing
  // from vocab becomes its "<0xNN>" byte tokens (byte_fallback), else unk,
  // and consecutive unks are one token when fuse_unk.
  bool byte_fallback = false;
  bool fuse_unk = false;
  std::string continuing_subword_prefix;  // prepended to every non-first character symbol
  std::string end_of_word_suffix;         // appended to the last character symbol
};

class Tokenizer {
 public:
  // Reads a Hugging Face tokenizer.json, a SentencePiece *.model, or a
  // directory holding one of them (tokenizer.json preferred), and the
  // tokenizer_config.json next to it, if any. Throws DataError naming the file
  // and what is wrong.
  static Tokenizer load(const std::string& path);
  // Reads a SentencePiece model file (and tokenizer_config.json next to it).
  static Tokenizer load_sentencepiece(const std::string& model_path);
  // Builds from parts; `source` names the tokenizer in error messages.
  static Tokenizer from_spec(BpeModelSpec spec, std::string source);
  // Parses tokenizer.json text (no tokenizer_config.json); `source` is used in errors.
  static Tokenizer from_json_text(std::string_view json_text, std::string source);

  // add_special_tokens=false (the default, what the data pipeline uses: chat
  // templates and --append_eod write special tokens themselves) gives the
  // ids of the text alone; true adds what the post-processor adds (e.g.
  // Llama's BOS), as Hugging Face's encode(text) does by default.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out, bool add_special_tokens = false) const;
  // Throws DataError on an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;                                       // largest id + 1 (model vocab and added tokens)
  std::optional<int32_t> find_token(std::string_view token) const;  // added token content or vocab symbol string
  int32_t token_id(std::string_view token) const;                   // like find_token, throws DataError if absent
  const std::string& token_text(int32_t id) const;                  // vocab symbol string / added token content
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  const SpecialTokenIds& special() const;
  // Applies tokenizer_config-style names (empty = keep). Throws DataError for unknown tokens.
  void set_special_tokens(const std::string& eos, const std::string& pad, const std::string& bos);
  // chat_template from tokenizer_config.json ("" if none): a template name such
  // as "chatml" or a Jinja string; of a list of named templates, "default".
  const std::string& chat_template() const;
  const std::string& source() const;  // file path or a description
  bool is_sentencepiece() const;
  // "SentencePiece", "byte-level BPE", or "BPE" (SentencePiece-style tokenizer.json).
  std::string kind() const;

  // Hugging Face tokenizer.json (pretty-printed, vocab in id order, trailing
  // newline). Throws DataError for a SentencePiece tokenizer.
  std::string to_json_text() const;
  void save(const std::string& path) const;

  Tokenizer(const Tokenizer&) = default;
  Tokenizer& operator=(const Tokenizer&) = default;
  Tokenizer(Tokenizer&&) noexcept = default;
  Tokenizer& operator=(Tokenizer&&) noexcept = default;
  ~Tokenizer();

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  void resolve_default_special_tokens();
  // Applies eos/pad/bos, chat_template and add_bos_token/add_eos_token of a
  // tokenizer_config.json, if it exists.
  void apply_config_file(const std::string& config_path);

  std::shared_ptr<const Impl> impl_;  // vocabulary, merges, pre-tokenizer, word cache
  SpecialTokenIds special_;
  std::string chat_template_;
  // add_special_tokens=true wraps ids in these (post_processor, or config).
  std::vector<int32_t> special_prefix_, special_suffix_;
};

// Trains a byte-level BPE tokenizer on `texts` (GPT-2 pre-tokenizer, all 256
// byte symbols in the base vocabulary). `vocab_size` counts everything: 256
// byte symbols + merges + `special_tokens`, which get the last ids. Special
// token strings inside `texts` are cut out, never learned. Pairs occurring
// fewer than `min_frequency` times are not merged. Deterministic: equal
// counts are broken by the smaller (left id, right id) pair.
Tokenizer train_bpe(const std::vector<std::string>& texts, int vocab_size,
                    const std::vector<std::string>& special_tokens, int min_frequency = 2);

}  // namespace mtrain::data
