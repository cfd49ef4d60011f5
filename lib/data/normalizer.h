// Internal to lib/data: the `normalizer` of a tokenizer.json as Hugging Face
// defines it: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend and
// Sequence of these. Unicode normalization and lowercasing come from ICU
// (Debian's libicu), the case mapping of Rust's str::to_lowercase that the
// reference uses (full mappings, final sigma). Replace with a Regex pattern
// uses Oniguruma, as the reference. Other normalizers (Precompiled,
// BertNormalizer, StripAccents, NMT, ByteLevel) are refused by name.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/pretokenizer.h"

namespace mtrain::data {

class Normalizer {
 public:
  Normalizer() = default;  // identity
  // Parses a tokenizer.json `normalizer` (null = none); throws DataError naming `where`.
  static Normalizer from_json(const nlohmann::json& node, const std::string& where);

  bool empty() const { return steps_.empty(); }
  // Normalized text. Unicode steps (NFC.., Lowercase, Strip) turn bytes that
  // are not valid UTF-8 into U+FFFD (the reference only takes valid text).
  std::string normalize(std::string_view text) const;

  Normalizer(Normalizer&&) noexcept = default;
  Normalizer& operator=(Normalizer&&) noexcept = default;

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip, kReplace, kPrepend };
  struct Step {
    Kind kind;
    bool left = false, right = false;    // kStrip
    std::string content{};               // kReplace: replacement; kPrepend: prefix
    std::vector<RegexSplitter> regex{};  // kReplace: the pattern (literal strings are escaped)
  };
  void add_step(const nlohmann::json& node, const std::string& where);
  static std::string run_step(const Step& step, std::string text);

  std::vector<Step> steps_;
};

}  // namespace mtrain::data
