// The tokenizer.json pipeline components on small inputs whose expected
// values follow from Hugging Face's documented semantics (the real files are
// checked against the reference library in test_tokenizer_reference.cc):
// Split behaviours, Oniguruma character classes, SentencePiece-style BPE
// (byte_fallback, fuse_unk, continuing_subword_prefix / end_of_word_suffix),
// add_special_tokens, and refusals naming the component.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/pretokenizer.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using nlohmann::json;
using testing::data_error_message;
using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string_view>;

Pieces split(const std::string& pattern, std::string_view text, SplitBehavior behavior, bool invert = false) {
  const RegexSplitter splitter(pattern, "test");
  std::vector<SplitSpan> spans;
  splitter.find_spans(text, spans);
  Pieces pieces;
  apply_split_behavior(text, spans, behavior, invert, pieces);
  return pieces;
}

// The example of Hugging Face's SplitDelimiterBehavior documentation.
TEST(SplitBehaviorTest, EveryBehaviorAsHuggingFaceDocumentsIt) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(split("-", text, SplitBehavior::kRemoved), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split("-", text, SplitBehavior::kIsolated), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("-", text, SplitBehavior::kMergedWithPrevious), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("-", text, SplitBehavior::kMergedWithNext), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("-", text, SplitBehavior::kContiguous), (Pieces{"the", "-", "final", "--", "countdown"}));
  // invert: the stretches between dashes are the matches.
  EXPECT_EQ(split("-", text, SplitBehavior::kRemoved, true), (Pieces{"-", "-", "-"}));
  EXPECT_EQ(split("-", text, SplitBehavior::kMergedWithPrevious, true), (Pieces{"the", "-final", "-", "-countdown"}));
}

TEST(SplitBehaviorTest, OnigurumaClassesAndInvalidUtf8) {
  // U+180E MONGOLIAN VOWEL SEPARATOR is not White_Space (Unicode 6.3+), U+3000 is.
  EXPECT_EQ(split(R"(\s+)", "a\u180Eb", SplitBehavior::kIsolated), (Pieces{"a\u180Eb"}));
  EXPECT_EQ(split(R"(\s+)", "a\u3000b", SplitBehavior::kIsolated), (Pieces{"a", "\u3000", "b"}));
  // An invalid byte is a piece of its own; the valid text around it is still split.
  EXPECT_EQ(split(R"(\p{L}+)",
                  "ab\xFF"
                  "cd e",
                  SplitBehavior::kIsolated),
            (Pieces{"ab", "\xFF", "cd", " ", "e"}));
}

// A SentencePiece-style BPE tokenizer.json (no ByteLevel): characters are the
// initial symbols.
json sentencepiece_style(bool byte_fallback, bool fuse_unk) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"a", 3}, {"b", 4}, {"ab", 5}, {"\u2581", 6}};
  vocab["<0xE2>"] = 7;
  vocab["<0x98>"] = 8;
  vocab["<0x83>"] = 9;  // "☃" U+2603 is E2 98 83
  return {{"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                        {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                        {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
          {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}},
                                    {{"Sequence", {{"id", "A"}}}},
                                    {{"SpecialToken", {{"id", "</s>"}}}}})},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}}}, {"</s>", {{"id", "</s>"}, {"ids", {2}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                      {{"type", "ByteFallback"}},
                                      {{"type", "Fuse"}}})}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"byte_fallback", byte_fallback},
            {"fuse_unk", fuse_unk},
            {"vocab", vocab},
            {"merges", json::array({"a b"})}}}};
}

TEST(SentencePieceStyleBpeTest, ByteFallbackUnknownFusionAndTemplate) {
  const Tokenizer with_bytes = Tokenizer::from_json_text(sentencepiece_style(true, false).dump(), "sp.json");
  EXPECT_EQ(with_bytes.encode("ab ☃a"), (Ids{5, 6, 7, 8, 9, 3}));
  EXPECT_EQ(with_bytes.encode("ab ☃a", true), (Ids{1, 5, 6, 7, 8, 9, 3, 2}));  // TemplateProcessing <s> $A </s>
  EXPECT_EQ(with_bytes.decode(with_bytes.encode("ab ☃a")), "ab ☃a");
  EXPECT_EQ(with_bytes.encode("ab<s>b"), (Ids{5, 1, 4}));  // added tokens are cut out before the normalizer
  EXPECT_EQ(with_bytes.kind(), "BPE");
  const Tokenizer saved = Tokenizer::from_json_text(with_bytes.to_json_text(), "saved.json");  // save keeps it all
  EXPECT_EQ(saved.encode("ab ☃a", true), (Ids{1, 5, 6, 7, 8, 9, 3, 2}));
  EXPECT_EQ(saved.decode(saved.encode("ab ☃a")), "ab ☃a");

  json roberta = sentencepiece_style(true, false);  // RobertaProcessing: cls $A sep
  roberta["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 1}}};
  EXPECT_EQ(Tokenizer::from_json_text(roberta.dump(), "r.json").encode("ab", true), (Ids{1, 5, 2}));

  // Without byte pieces a missing character is <unk>; fuse_unk makes a run of them one token.
  const Tokenizer unfused = Tokenizer::from_json_text(sentencepiece_style(false, false).dump(), "sp.json");
  EXPECT_EQ(unfused.encode("a☃☃b"), (Ids{3, 0, 0, 4}));
  const Tokenizer fused = Tokenizer::from_json_text(sentencepiece_style(false, true).dump(), "sp.json");
  EXPECT_EQ(fused.encode("a☃☃b"), (Ids{3, 0, 4}));
}

TEST(SentencePieceStyleBpeTest, SubwordPrefixAndSuffix) {
  json j = sentencepiece_style(false, false);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  j["model"]["continuing_subword_prefix"] = "##";
  j["model"]["end_of_word_suffix"] = "</w>";
  j["model"]["vocab"] = {{"<unk>", 0},   {"<s>", 1},    {"</s>", 2},  {"a", 3},
                         {"##b</w>", 4}, {"ab</w>", 5}, {"b</w>", 6}, {"a</w>", 7}};
  j["model"]["merges"] = json::array({"a ##b</w>"});  // "a" + "##b</w>" makes "ab</w>"
  const Tokenizer tok = Tokenizer::from_json_text(j.dump(), "wp.json");
  EXPECT_EQ(tok.encode("ab b a"), (Ids{5, 6, 7}));
}

TEST(TokenizerPipelineTest, UnsupportedComponentsAreRefusedByName) {
  const auto refusal = [](const char* section, json value) {
    json j = sentencepiece_style(true, false);
    j[section] = std::move(value);
    return data_error_message([&] { Tokenizer::from_json_text(j.dump(), "t.json"); });
  };
  EXPECT_NE(refusal("normalizer", {{"type", "Precompiled"}}).find("t.json: normalizer 'Precompiled' is not supported"),
            std::string::npos);
  EXPECT_NE(refusal("pre_tokenizer", {{"type", "UnicodeScripts"}})
                .find("t.json: pre_tokenizer 'UnicodeScripts' is not supported"),
            std::string::npos);
  EXPECT_NE(refusal("decoder", {{"type", "WordPiece"}}).find("t.json: decoder 'WordPiece' is not supported"),
            std::string::npos);
  EXPECT_NE(refusal("post_processor", {{"type", "Unknown"}}).find("t.json: post_processor 'Unknown' is not supported"),
            std::string::npos);
  json dropout = sentencepiece_style(true, false);
  dropout["model"]["dropout"] = 0.1;
  const std::string m = data_error_message([&] { Tokenizer::from_json_text(dropout.dump(), "t.json"); });
  EXPECT_NE(m.find("t.json: model.dropout 0.1 is not supported"), std::string::npos) << m;
}

}  // namespace
}  // namespace mtrain::data
