// Regex splitting for the Hugging Face pre-tokenizers. Patterns are compiled
// by Oniguruma (Debian's libonig) with its default syntax and UTF-8, which is
// what the reference `tokenizers` library uses (the onig crate bundles the
// same Oniguruma release): character classes such as \s and \p{N} follow
// Oniguruma's Unicode tables, so U+180E is not whitespace and characters newer
// than its Unicode version are unassigned, exactly as in the reference.
//
// A split marks every match and every stretch between matches; a Hugging
// Face `behavior` then decides what happens to the matches (SplitBehavior).
// Invalid UTF-8 is never handed to the regex engine: each invalid byte is a
// piece of its own and the valid runs around it are split separately.
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

// Hugging Face SplitDelimiterBehavior: what becomes of each match.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A stretch of the input: [begin, end) and whether the pattern matched it.
struct SplitSpan {
  size_t begin, end;
  bool is_match;
};

// Applies `behavior` to spans covering a text in order (HF's split rules;
// `invert` first swaps match and gap) and appends the non-empty pieces.
void apply_split_behavior(std::string_view text, const std::vector<SplitSpan>& spans, SplitBehavior behavior,
                          bool invert, std::vector<std::string_view>& pieces);

class RegexSplitter {
 public:
  // Throws DataError("<where>: invalid pre-tokenizer regex ...") on a bad pattern.
  RegexSplitter(const std::string& pattern, const std::string& where);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Matches and gaps of `text`, in order, covering all of it.
  void find_spans(std::string_view text, std::vector<SplitSpan>& spans) const;
  // Appends the pieces of `text` with behaviour Isolated (views into `text`).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  // `text` with every match replaced by `content` (HF Replace).
  std::string replace_all(std::string_view text, std::string_view content) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  void search_valid_run(std::string_view text, size_t begin, size_t end, std::vector<SplitSpan>& spans) const;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

}  // namespace mtrain::data
