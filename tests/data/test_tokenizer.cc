// Tokenizer: byte-level alphabet, regex pre-tokenization, hand-computed BPE
// ids on a tiny hand-written tokenizer.json, loading errors, round trips on
// the shipped demo tokenizer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "data/byte_level.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;
using testing::read_file;
using testing::source_path;
using testing::write_temp_file;
using Ids = std::vector<int32_t>;

const std::string kTiny = "tests/data/fixtures/tiny/tokenizer.json";

TEST(ByteLevelTest, Gpt2Alphabet) {
  EXPECT_EQ(byte_to_codepoint('A'), 65u);
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(byte_to_codepoint(0), 0x100u);
  EXPECT_EQ(byte_to_codepoint(127), 0x121u);   // after the 33 bytes 0..32
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);  // the last shifted byte
  EXPECT_EQ(byte_to_codepoint(0xFF), 0xFFu);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(codepoint_to_byte(0x144), -1);
  EXPECT_EQ(bytes_to_symbols("a b\n"),
            "a\xC4\xA0"
            "b\xC4\x8A");
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  EXPECT_EQ(symbols_to_bytes(bytes_to_symbols(all_bytes)), all_bytes);
}

std::vector<std::string> gpt2_pieces(std::string_view text) {
  RegexSplitter splitter(kGpt2SplitPattern, "test");
  std::vector<std::string_view> views;
  splitter.split(text, views);
  return {views.begin(), views.end()};
}

TEST(PreTokenizerTest, Gpt2PatternSplitsLikeGpt2) {
  using V = std::vector<std::string>;
  EXPECT_EQ(gpt2_pieces("Hello world's  123 !!\n\n x"), (V{"Hello", " world", "'s", " ", " 123", " !!", "\n\n", " x"}));
  EXPECT_EQ(gpt2_pieces("你好世界 😀😀"), (V{"你好世界", " 😀😀"}));
  EXPECT_EQ(gpt2_pieces("a   "), (V{"a", "   "}));
  EXPECT_EQ(gpt2_pieces("I'll go"), (V{"I", "'ll", " go"}));
  // Invalid UTF-8 is not lost: it lands in a gap piece.
  const std::string bad = std::string("ab") + '\xff' + "cd";
  std::string joined;
  for (const auto& p : gpt2_pieces(bad)) joined += p;
  EXPECT_EQ(joined, bad);
}

TEST(PreTokenizerTest, QwenPatternCompilesAndSplitsDigitsSingly) {
  // Qwen2's Split regex (case-insensitive contractions, one digit per piece).
  const RegexSplitter qwen(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      "qwen");
  std::vector<std::string_view> views;
  qwen.split("IT'S 123 ok\n\n", views);
  EXPECT_EQ(std::vector<std::string>(views.begin(), views.end()),
            (std::vector<std::string>{"IT", "'S", " ", "1", "2", "3", " ok", "\n\n"}));
}

TEST(PreTokenizerTest, BadRegexNamesWhere) {
  const std::string message = data_error_message([] { RegexSplitter("(unclosed", "my.json: pre_tokenizer"); });
  EXPECT_NE(message.find("my.json: pre_tokenizer: invalid pre-tokenizer regex"), std::string::npos) << message;
}

// Expected ids below are computed by hand from the fixture's vocab and merges:
//   vocab  a=0 b=1 c=2 Ġ=3 d=4 !=5 Ċ=6 Ġa=7 ab=8 Ġab=9 abc=10 Ġabc=11 cc=12
//   merges (rank) 0:Ġ+a 1:a+b 2:Ġa+b 3:ab+c 4:Ġab+c 5:c+c
//   added  <|endoftext|>=13 <|im_start|>=14 <|im_end|>=15
TEST(TokenizerTest, TinyFixtureHandComputedIds) {
  const Tokenizer tok = Tokenizer::load(source_path(kTiny));
  EXPECT_EQ(tok.vocab_size(), 16);
  // "abc": a b c -> ab (rank 1) -> abc (rank 3).
  EXPECT_EQ(tok.encode("abc"), (Ids{10}));
  // " abcc": Ġ a b c c -> Ġa (0) -> Ġab (2) -> Ġabc (4, before c+c at 5) -> [Ġabc, c].
  EXPECT_EQ(tok.encode(" abcc"), (Ids{11, 2}));
  // Pre-tokens "abc" | " abcc" | "!!" | "\n" never merge across.
  EXPECT_EQ(tok.encode("abc abcc!!\n"), (Ids{10, 11, 2, 5, 5, 6}));
  // Equal ranks: the leftmost pair merges first: c c c -> [cc, c].
  EXPECT_EQ(tok.encode("ccc"), (Ids{12, 2}));
  EXPECT_EQ(tok.encode("cccc"), (Ids{12, 12}));
  // "ba": no merge for (b, a).
  EXPECT_EQ(tok.encode("ba"), (Ids{1, 0}));
  EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(TokenizerTest, TinyFixtureSpecialTokensMatchedVerbatim) {
  const Tokenizer tok = Tokenizer::load(source_path(kTiny));
  // "ab" | <|im_end|> | "\n" "c" (\n before a letter is its own pre-token).
  EXPECT_EQ(tok.encode("ab<|im_end|>\nc"), (Ids{8, 15, 6, 2}));
  EXPECT_EQ(tok.encode("<|im_start|><|im_end|><|endoftext|>"), (Ids{14, 15, 13}));
  // A partial special token is ordinary text (and here not encodable: '<' is not in vocab).
  EXPECT_NE(data_error_message([&] { tok.encode("<|im_end"); }).find("no vocabulary token for byte 0x3c"),
            std::string::npos);
  EXPECT_EQ(tok.decode(Ids{8, 15, 6, 2}), "ab<|im_end|>\nc");
  EXPECT_EQ(tok.decode(Ids{8, 15, 6, 2}, /*skip_special_tokens=*/true), "ab\nc");
  EXPECT_TRUE(tok.is_special(15));
  EXPECT_FALSE(tok.is_special(8));
}

TEST(TokenizerTest, TinyFixtureConfigSetsSpecialIds) {
  const Tokenizer tok = Tokenizer::load(source_path(kTiny));
  EXPECT_EQ(tok.special().eos, 15);  // eos_token "<|im_end|>"
  EXPECT_EQ(tok.special().pad, 13);  // pad_token {"content": "<|endoftext|>"}
  EXPECT_EQ(tok.special().bos, -1);  // bos_token null
  EXPECT_EQ(tok.special().eod, 13);
  EXPECT_EQ(tok.special().im_start, 14);
  EXPECT_EQ(tok.special().im_end, 15);
  EXPECT_EQ(tok.chat_template(), "chatml");
  EXPECT_EQ(tok.token_id("\xC4\xA0"
                         "ab"),
            9);
  EXPECT_EQ(tok.token_text(9),
            "\xC4\xA0"
            "ab");
  EXPECT_FALSE(tok.find_token("zz").has_value());
  EXPECT_NE(data_error_message([&] { tok.token_id("zz"); }).find("token 'zz' is not in tokenizer"), std::string::npos);
}

TEST(TokenizerTest, PairFormMergesGiveSameIds) {
  auto j = nlohmann::json::parse(read_file(source_path(kTiny)));
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  j["model"]["merges"] = pairs;
  const Tokenizer tok = Tokenizer::from_json_text(j.dump(), "pairs.json");
  EXPECT_EQ(tok.encode("abc abcc!!\n"), (Ids{10, 11, 2, 5, 5, 6}));
}

TEST(TokenizerTest, SaveThenLoadIsIdentical) {
  const Tokenizer tok = Tokenizer::load(source_path(kTiny));
  const std::string path = write_temp_file("tokenizer.json", "");
  tok.save(path);
  const Tokenizer again = Tokenizer::load(path);
  EXPECT_EQ(again.to_json_text(), tok.to_json_text());
  EXPECT_EQ(again.encode("abc abcc!!\n<|im_end|>"), tok.encode("abc abcc!!\n<|im_end|>"));
}

TEST(TokenizerTest, LoadErrorsNameTheFileAndTheProblem) {
  const std::string missing = "/nonexistent/dir/tokenizer.json";
  const std::string m1 = data_error_message([&] { Tokenizer::load(missing); });
  EXPECT_NE(m1.find("cannot open tokenizer file '/nonexistent/dir/tokenizer.json'"), std::string::npos) << m1;

  const std::string bad_json = write_temp_file("tokenizer.json", "{\"model\": ");
  const std::string m2 = data_error_message([&] { Tokenizer::load(bad_json); });
  EXPECT_NE(m2.find(bad_json + ": invalid JSON"), std::string::npos) << m2;

  auto j = nlohmann::json::parse(read_file(source_path(kTiny)));
  j["model"]["merges"].push_back("ab zz");
  const std::string m3 = data_error_message([&] { Tokenizer::from_json_text(j.dump(), "t.json"); });
  EXPECT_NE(m3.find("t.json: model.merges[6]: right token 'zz' is not in model.vocab"), std::string::npos) << m3;

  j = nlohmann::json::parse(read_file(source_path(kTiny)));
  j["model"]["type"] = "Unigram";
  const std::string m4 = data_error_message([&] { Tokenizer::from_json_text(j.dump(), "t.json"); });
  EXPECT_NE(m4.find("t.json: model.type 'Unigram' is not supported"), std::string::npos) << m4;

  j = nlohmann::json::parse(read_file(source_path(kTiny)));
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  const std::string m5 = data_error_message([&] { Tokenizer::from_json_text(j.dump(), "t.json"); });
  EXPECT_NE(m5.find("t.json: pre_tokenizer 'BertPreTokenizer' is not supported"), std::string::npos) << m5;

  j = nlohmann::json::parse(read_file(source_path(kTiny)));
  j["model"]["vocab"]["zz"] = 3;
  const std::string m6 = data_error_message([&] { Tokenizer::from_json_text(j.dump(), "t.json"); });
  EXPECT_NE(m6.find("t.json: model.vocab: id 3 is given to both"), std::string::npos) << m6;

  const Tokenizer tok = Tokenizer::load(source_path(kTiny));
  const std::string m7 = data_error_message([&] { tok.decode(Ids{99}); });
  EXPECT_NE(m7.find("token id 99 is not in tokenizer"), std::string::npos) << m7;
}

TEST(TokenizerTest, SplitSequencePreTokenizer) {
  auto j = nlohmann::json::parse(read_file(source_path(kTiny)));
  // Split on "b" (literal String pattern, Isolated) then byte-level without regex.
  j["pre_tokenizer"] = nlohmann::json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"String": "b"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})");
  const Tokenizer tok = Tokenizer::from_json_text(j.dump(), "split.json");
  // "abc" -> "a" | "b" | "c": no a+b merge across pieces.
  EXPECT_EQ(tok.encode("abc"), (Ids{0, 1, 2}));
  // " a" stays one piece: Ġ+a merges.
  EXPECT_EQ(tok.encode(" a"), (Ids{7}));
}

// --- The shipped demo tokenizer --------------------------------------------------

Tokenizer demo_tokenizer() { return Tokenizer::load(source_path("configs/demo/tokenizer.json")); }

TEST(DemoTokenizerTest, RoundTrips) {
  const Tokenizer tok = demo_tokenizer();
  const std::vector<std::string> texts = {
      "What is the capital of France?",
      "The quick brown fox jumps over the lazy dog. 1234567890 !@#$%^&*()",
      "你好，世界。日本語のテキスト",
      "emoji 😀🎉👍🏽 and flags 🇫🇷",
      "  leading spaces, trailing spaces   \n\n\ttabs\t\t and\r\nCRLF  ",
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|endoftext|>",
      std::string("raw bytes \xff\xfe\x80 invalid utf-8 \xc3"),
      "",
  };
  for (const auto& text : texts) EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  EXPECT_EQ(tok.decode(tok.encode(all_bytes)), all_bytes);
}

TEST(DemoTokenizerTest, SpecialIdsAndVocab) {
  const Tokenizer tok = demo_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 1024);
  EXPECT_EQ(tok.special().im_start, tok.token_id("<|im_start|>"));
  EXPECT_EQ(tok.special().eos, tok.token_id("<|im_end|>"));
  EXPECT_EQ(tok.special().pad, tok.token_id("<|endoftext|>"));
  EXPECT_EQ(tok.special().eod, tok.token_id("<|endoftext|>"));
  EXPECT_EQ(tok.token_id("<|endoftext|>"), 1021);  // special tokens take the last ids
  EXPECT_EQ(tok.encode("<|im_start|>"), (Ids{1022}));
  EXPECT_EQ(tok.chat_template(), "chatml");
  // Frequent demo words are single tokens.
  EXPECT_EQ(tok.encode(" capital").size(), 1u);
  EXPECT_EQ(tok.encode("The").size(), 1u);
}

}  // namespace
}  // namespace mtrain::data
