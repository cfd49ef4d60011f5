// Regex pre-tokenization (Hugging Face "Split" with behaviour "Isolated"):
// every regex match becomes one piece and so does every stretch of text
// between matches, so the pieces always concatenate back to the input. BPE
// merges never cross a piece boundary. Backed by PCRE2 in UTF + Unicode
// property mode; invalid UTF-8 is tolerated (such bytes end up in gap pieces).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mtrain::data {

// The GPT-2 pre-tokenizer pattern (HF ByteLevel with use_regex=true).
inline constexpr const char* kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A regex matching `text` literally (for HF Split {"String": ...}).
std::string regex_escape(std::string_view text);

class RegexSplitter {
 public:
  // Throws DataError("<where>: invalid pre-tokenizer regex ...") on a bad pattern.
  RegexSplitter(const std::string& pattern, const std::string& where);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends the pieces of `text` to `pieces` (views into `text`).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

}  // namespace mtrain::data
