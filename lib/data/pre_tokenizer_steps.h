// Internal to lib/data: the `pre_tokenizer` of a tokenizer.json as Hugging
// Face defines it, a sequence of steps that each cut every current piece
// further (Split with each behavior and invert, ByteLevel, Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit, Sequence). A component that mtrain
// does not implement is refused by name when the file is read.
//
// ByteLevel does not rewrite the pieces: it marks them as byte-level, and
// the BPE model maps each piece's bytes to byte symbols (byte_level.h) on a
// word-cache miss only, which keeps the common path free of copies.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/pretokenizer.h"

namespace mtrain::data {

// The regex of a tokenizer.json pattern: {"String": literal} (escaped) or
// {"Regex": Oniguruma pattern}; throws DataError naming `where`.
std::string pattern_regex(const nlohmann::json& pattern, const std::string& where);

class PreTokenizer {
 public:
  // An empty pipeline: the whole text is one piece.
  PreTokenizer() = default;
  // The pipeline mtrain writes for trained tokenizers: Split(pattern) per
  // pattern, then ByteLevel(add_prefix_space).
  static PreTokenizer byte_level_splits(const std::vector<std::string>& patterns, bool add_prefix_space,
                                        const std::string& where);
  // Parses a tokenizer.json `pre_tokenizer` (null = none); throws DataError
  // naming `where` and the component.
  static PreTokenizer from_json(const nlohmann::json& node, const std::string& where);

  // Cuts `text` into pieces. `at_text_start`: the text begins the input (for
  // Metaspace prepend_scheme "first").
  void split(std::string_view text, bool at_text_start, std::vector<std::string>& pieces) const;
  // True when a ByteLevel step maps the pieces to byte symbols.
  bool byte_level() const { return byte_level_; }

  PreTokenizer(PreTokenizer&&) noexcept = default;
  PreTokenizer& operator=(PreTokenizer&&) noexcept = default;

 private:
  enum class Kind { kSplit, kByteLevelPrefix, kMetaspace };
  struct Step {
    Kind kind;
    std::vector<RegexSplitter>
        regex{};  // kSplit: the pattern; kMetaspace: the replacement (a vector keeps Step movable)
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    std::string replacement{};     // kMetaspace
    std::string prepend_scheme{};  // kMetaspace: always / first / never
    bool metaspace_split = true;   // kMetaspace
  };
  void add_step(const nlohmann::json& node, const std::string& where);
  void add_split(const std::string& pattern, SplitBehavior behavior, bool invert, const std::string& where);
  void run_step(const Step& step, std::vector<std::string>& pieces, bool at_text_start) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace mtrain::data
