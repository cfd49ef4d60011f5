// SentencePiece tokenizer.model (Llama-2 family) behind the Tokenizer
// interface. The model is trained in the test (libsentencepiece's trainer, BPE
// with byte fallback, identity normalization, like Llama-2's) on a few lines
// written here, so the id layout is known: <unk> 0, <s> 1, </s> 2, then the
// 256 byte pieces <0x00>..<0xFF> at 3..258, then learned pieces.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>

#include "data/tokenizer.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;
using testing::write_temp_file;
using Ids = std::vector<int32_t>;

constexpr int kVocabSize = 300;

// Trains tokenizer.model into a fresh directory; returns the model path.
std::string train_model() {
  std::string corpus;
  for (int i = 0; i < 20; ++i) {
    corpus += "hello world, the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
    corpus += "a tokenizer turns text into pieces and pieces into ids\n";
  }
  const std::string input = write_temp_file("corpus.txt", corpus);
  const std::string prefix = (std::filesystem::path(input).parent_path() / "tokenizer").string();
  const auto status = sentencepiece::SentencePieceTrainer::Train({{"input", input},
                                                                  {"model_prefix", prefix},
                                                                  {"model_type", "bpe"},
                                                                  {"vocab_size", std::to_string(kVocabSize)},
                                                                  {"byte_fallback", "true"},
                                                                  {"character_coverage", "1.0"},
                                                                  {"normalization_rule_name", "identity"},
                                                                  {"remove_extra_whitespaces", "false"}});
  EXPECT_TRUE(status.ok()) << status.ToString();
  return prefix + ".model";
}

// Each test trains its own model (milliseconds) in its own temporary directory.
class SentencePieceTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override { model_path = train_model(); }
  std::string model_path;
};

TEST_F(SentencePieceTokenizerTest, IdLayoutAndSpecialIds) {
  const Tokenizer tok = Tokenizer::load(model_path);
  EXPECT_TRUE(tok.is_sentencepiece());
  EXPECT_EQ(tok.vocab_size(), kVocabSize);
  EXPECT_EQ(tok.special().bos, 1);
  EXPECT_EQ(tok.special().eos, 2);
  EXPECT_EQ(tok.special().pad, 2);  // the model has no pad piece: eos
  EXPECT_EQ(tok.token_text(0), "<unk>");
  EXPECT_EQ(tok.token_text(3), "<0x00>");
  EXPECT_EQ(tok.token_id("<0xE4>"), 3 + 0xE4);
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_FALSE(tok.is_special(3));
  EXPECT_EQ(tok.added_tokens().size(), 3u);
}

TEST_F(SentencePieceTokenizerTest, UnseenCjkAndEmojiFallBackToBytes) {
  const Tokenizer tok = Tokenizer::load(model_path);
  const int32_t space = tok.token_id("\xE2\x96\x81");  // "▁": the dummy prefix, a piece of its own
  // "你" = E4 BD A0 never occurs in the corpus: "▁" then one byte piece per byte (id = 3 + byte).
  EXPECT_EQ(tok.encode("你"), (Ids{space, 3 + 0xE4, 3 + 0xBD, 3 + 0xA0}));
  // "👋" = F0 9F 91 8B.
  EXPECT_EQ(tok.encode("👋"), (Ids{space, 3 + 0xF0, 3 + 0x9F, 3 + 0x91, 3 + 0x8B}));
}

TEST_F(SentencePieceTokenizerTest, SpecialTokensSplitOutLikeHuggingFace) {
  const Tokenizer tok = Tokenizer::load(model_path);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model_path).ok());
  const std::vector<int> hello = sp.EncodeAsIds("hello world");
  ASSERT_FALSE(hello.empty());
  Ids expected = {1};
  expected.insert(expected.end(), hello.begin(), hello.end());
  expected.push_back(2);
  EXPECT_EQ(tok.encode("<s>hello world</s>"), expected);
  EXPECT_EQ(tok.decode(expected), "<s>hello world</s>");
  EXPECT_EQ(tok.decode(expected, /*skip_special_tokens=*/true), "hello world");
  EXPECT_NE(data_error_message([&] { tok.decode(Ids{kVocabSize}); }).find("is not in tokenizer"), std::string::npos);
}

TEST_F(SentencePieceTokenizerTest, RoundTrips) {
  const Tokenizer tok = Tokenizer::load(model_path);
  for (const std::string text :
       {"hello world", "the  lazy   dog\n\nand\ttabs", "你好，世界 👋🏽", "x<s>y</s>", "ids 0123456789"}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
}

TEST_F(SentencePieceTokenizerTest, ModelDirectoryWithConfig) {
  const std::string dir = std::filesystem::path(model_path).parent_path().string();
  write_temp_file("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>"})");
  const Tokenizer tok = Tokenizer::load(dir);  // no tokenizer.json there: tokenizer.model
  EXPECT_EQ(tok.source(), model_path);
  EXPECT_EQ(tok.special().pad, 0);
  EXPECT_EQ(tok.special().eos, 2);
  std::filesystem::remove(std::filesystem::path(dir) / "tokenizer_config.json");
  EXPECT_NE(data_error_message([&] { tok.to_json_text(); }).find("SentencePiece"), std::string::npos);
}

TEST(SentencePieceLoadTest, ErrorsNameTheFile) {
  const std::string garbage = write_temp_file("tokenizer.model", "not a protobuf");
  std::string message = data_error_message([&] { Tokenizer::load(garbage); });
  EXPECT_NE(message.find(garbage + ": not a SentencePiece model"), std::string::npos) << message;
  message = data_error_message([&] { Tokenizer::load("/nonexistent/tokenizer.model"); });
  EXPECT_NE(message.find("'/nonexistent/tokenizer.model'"), std::string::npos) << message;
}

}  // namespace
}  // namespace mtrain::data
