// Byte-level BPE per model family: the GPT-2, Qwen2 and Llama-3 pre-tokenizer
// regexes split text into hand-written pieces, and a tiny tokenizer.json per
// family (family_tokenizer_fixture.h: the vocabulary and merge ranks the
// expected ids below are derived from) encodes CJK, emoji, digits and
// whitespace runs to hand-derived ids; added-token flags and
// tokenizer_config.json variants.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/pretokenizer.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "family_tokenizer_fixture.h"

namespace mtrain::data {
namespace {

using testing::Family;
using testing::family_tokenizer_json;
using testing::write_temp_file;
using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;

Pieces split(const char* pattern, std::string_view text) {
  const RegexSplitter splitter(pattern, "test");
  std::vector<std::string_view> views;
  splitter.split(text, views);
  return Pieces(views.begin(), views.end());
}

Tokenizer family_tokenizer(Family family) {
  return Tokenizer::from_json_text(family_tokenizer_json(family).dump(), "family.json");
}

// Walk-through of the Llama-3 pattern on "I'm 12345 fine!!\n\n  ok": "'m" by
// the contractions; " 12345" is not letters, so the space stands alone (\s+)
// and the digits go in threes (\p{N}{1,3}); "!!\n\n" is punctuation with its
// trailing newlines; of the two spaces before "ok" the last joins the word
// ([^\r\n\p{L}\p{N}]?\p{L}+) and the first is \s+(?!\S).
TEST(FamilyPreTokenizerTest, Llama3Splits) {
  EXPECT_EQ(split(testing::kLlama3Pattern, "I'm 12345 fine!!\n\n  ok"),
            (Pieces{"I", "'m", " ", "123", "45", " fine", "!!\n\n", " ", " ok"}));
  // (?i:...) contractions; one non-letter may lead a word ("$hello"), two may not (" $" | "hello").
  EXPECT_EQ(split(testing::kLlama3Pattern, "I'M$hello $hi"), (Pieces{"I", "'M", "$hello", " $", "hi"}));
  EXPECT_EQ(split(testing::kLlama3Pattern, "a\n\nb  "), (Pieces{"a", "\n\n", "b", "  "}));
  EXPECT_EQ(split(testing::kLlama3Pattern, "hello 世界👋🏽!"), (Pieces{"hello", " 世界", "👋🏽!"}));
  EXPECT_EQ(split(testing::kLlama3Pattern, "1234567"), (Pieces{"123", "456", "7"}));
}

// Qwen2 differs from Llama-3 only in \p{N}: every digit is its own piece.
TEST(FamilyPreTokenizerTest, Qwen2Splits) {
  EXPECT_EQ(split(testing::kQwen2Pattern, "I'm 12345 fine!!\n\n  ok"),
            (Pieces{"I", "'m", " ", "1", "2", "3", "4", "5", " fine", "!!\n\n", " ", " ok"}));
  // The full-width comma is not a letter, so it leads the next word like "$" above.
  EXPECT_EQ(split(testing::kQwen2Pattern, "你好，世界"), (Pieces{"你好", "，世界"}));
}

// GPT-2: case-sensitive contractions, " ?\p{N}+" keeps a number whole with
// its space, and a newline run before a word keeps its last whitespace apart.
TEST(FamilyPreTokenizerTest, Gpt2Splits) {
  EXPECT_EQ(split(kGpt2SplitPattern, "I'm 12345 fine!!\n\n  ok"),
            (Pieces{"I", "'m", " 12345", " fine", "!!", "\n\n ", " ok"}));
  EXPECT_EQ(split(kGpt2SplitPattern, "I'M$hello $hi"), (Pieces{"I", "'", "M", "$", "hello", " $", "hi"}));
  EXPECT_EQ(split(kGpt2SplitPattern, "a\n\nb  "), (Pieces{"a", "\n", "\n", "b", "  "}));
}

// The Split regex comes from the file: the loaded tokenizers differ only there.
TEST(FamilyTokenizerTest, DigitsFollowEachFamilysRegex) {
  // GPT-2: "hello" -> h e l l o -> he (r0) -> ll (r1) -> hell (r2) -> hello (r3) = 259.
  //   " 12345" is one piece: Ġ 1 2 3 4 5 -> 34 (r5, lower than 12's r6) -> 12 (r6) -> [32, 262, 261, 53].
  EXPECT_EQ(family_tokenizer(Family::kGpt2).encode("hello 12345"), (Ids{259, 32, 262, 261, 53}));
  // Llama-3: " " | "123" | "45": 1 2 3 -> 12 (r6) -> [262, 51]; 4 5 has no merge -> [52, 53].
  EXPECT_EQ(family_tokenizer(Family::kLlama3).encode("hello 12345"), (Ids{259, 32, 262, 51, 52, 53}));
  // Qwen2: each digit alone -> its byte id.
  EXPECT_EQ(family_tokenizer(Family::kQwen2).encode("hello 12345"), (Ids{259, 32, 49, 50, 51, 52, 53}));
}

TEST(FamilyTokenizerTest, CjkEmojiAndIgnoreMerges) {
  // Pieces for all three: " hi" | " 你好" | "👋".
  // " 你好" = Ġ E4 BD A0 E5 A5 BD: ä ½ -> ä½ (r7), ä½ ł -> 你 (r8); 好 has no merge -> [32, 264, 229, 165, 189].
  // "👋" = F0 9F 91 8B, no merges -> [240, 159, 145, 139].
  const Ids rest = {32, 264, 229, 165, 189, 240, 159, 145, 139};
  Ids merged = {260, 105};  // " hi": Ġ h -> Ġh (r4), then i (105)
  merged.insert(merged.end(), rest.begin(), rest.end());
  Ids whole = {266};  // Llama-3 ignore_merges: "Ġhi" is in the vocabulary, taken whole
  whole.insert(whole.end(), rest.begin(), rest.end());
  EXPECT_EQ(family_tokenizer(Family::kGpt2).encode(" hi 你好👋"), merged);
  EXPECT_EQ(family_tokenizer(Family::kQwen2).encode(" hi 你好👋"), merged);
  EXPECT_EQ(family_tokenizer(Family::kLlama3).encode(" hi 你好👋"), whole);
}

TEST(FamilyTokenizerTest, WhitespaceRuns) {
  // GPT-2: "hello" | "   \n" | "\n" | "he" -> [259], [32 32 32 10], [10], [256]: the newlines never meet.
  EXPECT_EQ(family_tokenizer(Family::kGpt2).encode("hello   \n\nhe"), (Ids{259, 32, 32, 32, 10, 10, 256}));
  // Llama-3 / Qwen2: \s*[\r\n]+ takes "   \n\n" whole, so Ċ Ċ -> ĊĊ (r9) = 265.
  EXPECT_EQ(family_tokenizer(Family::kLlama3).encode("hello   \n\nhe"), (Ids{259, 32, 32, 32, 265, 256}));
  EXPECT_EQ(family_tokenizer(Family::kQwen2).encode("hello   \n\nhe"), (Ids{259, 32, 32, 32, 265, 256}));
}

TEST(FamilyTokenizerTest, RoundTripsAndSpecialTokens) {
  for (Family f : {Family::kGpt2, Family::kQwen2, Family::kLlama3}) {
    const Tokenizer tok = family_tokenizer(f);
    for (const std::string text : {"hello 12345", " hi 你好👋🏽", "a\t\t b \n\n  c  ",
                                   "<|im_start|>hello<|endoftext|>", "x<tool>y", "\xFF\xFE raw bytes"}) {
      EXPECT_EQ(tok.decode(tok.encode(text)), text);
    }
    // Special tokens are cut out before pre-tokenization: "hello" between them merges as usual.
    EXPECT_EQ(tok.encode("<|im_start|>hello<|endoftext|>"), (Ids{268, 259, 267}));
    EXPECT_EQ(tok.decode(Ids{268, 259, 267}, /*skip_special_tokens=*/true), "hello");
    EXPECT_EQ(tok.decode(Ids{269, 259}, /*skip_special_tokens=*/true), "<tool>hello");  // special: false stays
    EXPECT_TRUE(tok.is_special(267));
    EXPECT_FALSE(tok.is_special(269));
    EXPECT_EQ(tok.vocab_size(), 273);
  }
}

TEST(FamilyTokenizerTest, AddedTokenStripAndSingleWord) {
  const Tokenizer tok = family_tokenizer(Family::kGpt2);
  // <mask> has lstrip: the spaces before it belong to it (else "hello" [32 32] <mask>).
  EXPECT_EQ(tok.encode("hello  <mask>"), (Ids{259, 270}));
  EXPECT_EQ(tok.encode("<mask> he"), (Ids{270, 32, 256}));  // no rstrip: " he" stays (Ġ h e -> he r0)
  // <r> has rstrip: the spaces after it belong to it.
  EXPECT_EQ(tok.encode("he <r>  he"), (Ids{256, 32, 271, 256}));
  // <w> is single_word: not matched inside a word, matched between spaces.
  EXPECT_EQ(tok.encode("he<w>"), (Ids{256, 60, 119, 62}));  // '<' 'w' '>' as bytes
  EXPECT_EQ(tok.encode("he <w> he"), (Ids{256, 32, 272, 32, 256}));
  // save() keeps the flags.
  const Tokenizer again = Tokenizer::from_json_text(tok.to_json_text(), "saved.json");
  EXPECT_EQ(again.encode("hello  <mask>"), (Ids{259, 270}));
  EXPECT_TRUE(again.added_tokens()[3].lstrip);
  EXPECT_TRUE(again.added_tokens()[4].rstrip);
  EXPECT_TRUE(again.added_tokens()[5].single_word);
}

TEST(FamilyTokenizerTest, ConfigFromModelDirectory) {
  const std::string json = write_temp_file("tokenizer.json", family_tokenizer_json(Family::kLlama3).dump());
  write_temp_file("tokenizer_config.json", R"({
    "bos_token": "<|im_start|>", "eos_token": {"content": "<|endoftext|>", "special": true}, "pad_token": null,
    "chat_template": [{"name": "tool_use", "template": "{{ tools }}"}, {"name": "default", "template": "chatml"}]})");
  const std::string dir = std::filesystem::path(json).parent_path().string();
  const Tokenizer tok = Tokenizer::load(dir);  // a directory: its tokenizer.json
  EXPECT_EQ(tok.source(), json);
  EXPECT_EQ(tok.special().bos, 268);
  EXPECT_EQ(tok.special().eos, 267);
  EXPECT_EQ(tok.special().pad, 267);  // no pad_token: eos
  EXPECT_EQ(tok.chat_template(), "chatml");
  EXPECT_FALSE(tok.is_sentencepiece());
  const std::string empty_dir = std::filesystem::path(dir).parent_path().string() + "/no_tokenizer_here";
  std::filesystem::create_directories(empty_dir);
  const std::string message = testing::data_error_message([&] { Tokenizer::load(empty_dir); });
  EXPECT_NE(message.find(empty_dir), std::string::npos) << message;
  EXPECT_NE(message.find("neither tokenizer.json nor tokenizer.model"), std::string::npos) << message;
}

}  // namespace
}  // namespace mtrain::data
