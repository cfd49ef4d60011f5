#include "data/pre_tokenizer_steps.h"

#include "common/errors.h"

namespace mtrain::data {
namespace {

using Json = nlohmann::json;

// Character classes of tokenizers' Rust predicates, as Oniguruma patterns:
// char::is_numeric is \p{N}; char::is_whitespace is White_Space; Punctuation
// is ASCII punctuation or a Unicode P* character. Whitespace's \w+|[^\w\s]+
// runs on Rust's regex crate there, whose \w (UTS #18: Alphabetic, M, Nd,
// Pc, Join_Control) includes U+200D ZWJ, which Oniguruma's \w lacks: spelled
// out, so a ZWJ emoji sequence splits at each ZWJ as in the reference.
constexpr const char* kNumericChar = R"(\p{N})";
constexpr const char* kPunctuationChar = R"([\p{P}\x21-\x2F\x3A-\x40\x5B-\x60\x7B-\x7E])";
constexpr const char* kWhitespaceWords = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]+|)"
                                         R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}\p{White_Space}]+)";
constexpr const char* kWhitespaceRun = R"(\p{White_Space}+)";

SplitBehavior parse_behavior(const Json& node, const std::string& where) {
  const std::string name = node.is_string() ? node.get<std::string>() : "";
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw DataError(where + ": Split behavior '" + node.dump() + "' is not one of Hugging Face's",
                  "use Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

}  // namespace

std::string pattern_regex(const Json& pattern, const std::string& where) {
  if (pattern.is_object() && pattern.contains("String")) return regex_escape(pattern["String"].get<std::string>());
  if (pattern.is_object() && pattern.contains("Regex")) return pattern["Regex"].get<std::string>();
  throw DataError(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}, not " + pattern.dump());
}

PreTokenizer PreTokenizer::byte_level_splits(const std::vector<std::string>& patterns, bool add_prefix_space,
                                             const std::string& where) {
  PreTokenizer p;
  if (add_prefix_space) p.steps_.push_back({.kind = Kind::kByteLevelPrefix});
  for (const auto& pattern : patterns) p.add_split(pattern, SplitBehavior::kIsolated, false, where);
  p.byte_level_ = true;
  return p;
}

PreTokenizer PreTokenizer::from_json(const Json& node, const std::string& where) {
  PreTokenizer p;
  if (!node.is_null()) p.add_step(node, where + ": pre_tokenizer");
  return p;
}

void PreTokenizer::add_split(const std::string& pattern, SplitBehavior behavior, bool invert,
                             const std::string& where) {
  Step step{.kind = Kind::kSplit, .behavior = behavior, .invert = invert};
  step.regex.emplace_back(pattern, where);
  steps_.push_back(std::move(step));
}

void PreTokenizer::add_step(const Json& node, const std::string& where) {
  const std::string type = node.is_object() ? node.value("type", std::string()) : "";
  if (byte_level_) {
    throw DataError(where + ": '" + type + "' after ByteLevel is not supported",
                    "ByteLevel must be the last pre-tokenizer step");
  }
  if (type == "Sequence") {
    for (const auto& step : node.at("pretokenizers")) add_step(step, where);
  } else if (type == "Split") {
    add_split(pattern_regex(node.at("pattern"), where), parse_behavior(node.at("behavior"), where),
              node.value("invert", false), where + ": Split");
  } else if (type == "ByteLevel") {
    if (node.value("add_prefix_space", false)) steps_.push_back({.kind = Kind::kByteLevelPrefix});
    if (node.value("use_regex", true)) add_split(kGpt2SplitPattern, SplitBehavior::kIsolated, false, where);
    byte_level_ = true;
  } else if (type == "Metaspace") {
    Step step{.kind = Kind::kMetaspace};
    step.replacement = node.value("replacement", std::string("\u2581"));
    // Files written before prepend_scheme existed say add_prefix_space instead.
    step.prepend_scheme = node.value("prepend_scheme", node.value("add_prefix_space", true) ? "always" : "never");
    step.metaspace_split = node.value("split", true);
    step.regex.emplace_back(regex_escape(step.replacement), where + ": Metaspace");
    if (step.prepend_scheme != "always" && step.prepend_scheme != "first" && step.prepend_scheme != "never") {
      throw DataError(where + ": Metaspace prepend_scheme '" + step.prepend_scheme + "' is not always/first/never");
    }
    steps_.push_back(std::move(step));
  } else if (type == "Digits") {
    add_split(kNumericChar,
              node.value("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false,
              where);
  } else if (type == "Punctuation") {
    add_split(kPunctuationChar, parse_behavior(node.value("behavior", Json("Isolated")), where), false, where);
  } else if (type == "Whitespace") {
    add_split(kWhitespaceWords, SplitBehavior::kRemoved, true, where);
  } else if (type == "WhitespaceSplit") {
    add_split(kWhitespaceRun, SplitBehavior::kRemoved, false, where);
  } else {
    throw DataError(where + " '" + type + "' is not supported",
                    "supported: Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, "
                    "Sequence");
  }
}

void PreTokenizer::split(std::string_view text, bool at_text_start, std::vector<std::string>& pieces) const {
  pieces.clear();
  if (text.empty()) return;
  pieces.emplace_back(text);
  for (const Step& step : steps_) run_step(step, pieces, at_text_start);
}

void PreTokenizer::run_step(const Step& step, std::vector<std::string>& pieces, bool at_text_start) const {
  std::vector<std::string> out;
  out.reserve(pieces.size());
  std::vector<std::string_view> views;
  std::vector<SplitSpan> spans;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string& piece = pieces[i];
    switch (step.kind) {
      case Kind::kByteLevelPrefix:  // ByteLevel's add_prefix_space, per piece
        if (piece.front() != ' ') piece.insert(piece.begin(), ' ');
        out.push_back(std::move(piece));
        continue;
      case Kind::kMetaspace: {
        std::string replaced;
        for (char c : piece) c == ' ' ? replaced += step.replacement : replaced += c;
        const bool starts = replaced.compare(0, step.replacement.size(), step.replacement) == 0;
        const bool prepend =
            step.prepend_scheme == "always" || (step.prepend_scheme == "first" && at_text_start && i == 0);
        if (prepend && !starts) replaced.insert(0, step.replacement);
        if (!step.metaspace_split) {
          out.push_back(std::move(replaced));
          continue;
        }
        spans.clear();
        step.regex.front().find_spans(replaced, spans);  // each replacement character is a match
        views.clear();
        apply_split_behavior(replaced, spans, SplitBehavior::kMergedWithNext, false, views);
        for (std::string_view v : views) out.emplace_back(v);
        continue;
      }
      case Kind::kSplit:
        spans.clear();
        views.clear();
        step.regex.front().find_spans(piece, spans);
        apply_split_behavior(piece, spans, step.behavior, step.invert, views);
        for (std::string_view v : views) out.emplace_back(v);
        continue;
    }
  }
  pieces.swap(out);
}

}  // namespace mtrain::data
