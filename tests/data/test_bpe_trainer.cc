// BPE trainer: hand-computed merges, determinism, special tokens, HF format,
// and the shipped demo tokenizer being exactly what the trainer produces.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "data/chat_template.h"
#include "data/pretrain.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;
using testing::read_file;
using testing::source_path;
using testing::write_temp_file;
using Merges = std::vector<std::string>;

Merges merges_of(const Tokenizer& tok) {
  const auto j = nlohmann::json::parse(tok.to_json_text());
  return j["model"]["merges"].get<Merges>();
}

// "ab ab ab cd" -> words "ab" x1, " ab" x2, " cd" x1 (Ġ = space).
// Pair counts: a+b 3, Ġ+a 2, Ġ+c 1, c+d 1.
//   1. a+b (3)            -> words [ab] [Ġ ab]x2 [Ġ c d]
//   2. Ġ+ab (2)
//   3. tie Ġ+c / c+d (1): smaller left id wins; 'c' (99) has id 66, Ġ has id 220
//   4. Ġ+cd (1)
TEST(BpeTrainerTest, HandComputedMerges) {
  const Tokenizer tok = train_bpe({"ab ab ab cd"}, 256 + 4, {}, /*min_frequency=*/1);
  EXPECT_EQ(merges_of(tok), (Merges{"a b", "\xC4\xA0 ab", "c d", "\xC4\xA0 cd"}));
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.token_id("a"), 64);  // GPT-2's byte order: '!' = 0 ... 'a' = 64, 'Ġ' = 220
  EXPECT_EQ(tok.token_id("\xC4\xA0"), 220);
  EXPECT_EQ(tok.token_id("ab"), 256);
  EXPECT_EQ(tok.token_id("\xC4\xA0"
                         "cd"),
            259);
  EXPECT_EQ(tok.encode("ab cd"), (std::vector<int32_t>{256, 259}));

  const Tokenizer frequent_only = train_bpe({"ab ab ab cd"}, 256 + 4, {}, /*min_frequency=*/2);
  EXPECT_EQ(merges_of(frequent_only), (Merges{"a b", "\xC4\xA0 ab"}));
}

// Without the special tokens the corpus is " hello" x2 and "x" (all pairs of
// " hello" occur twice). Ties go to the smaller left id (e=68 h=71 l=75 Ġ=220,
// merged tokens get 256+): e+l, h+el, l+o, Ġ+hel, Ġhel+lo; then nothing
// repeats, so training stops below the requested 300.
TEST(BpeTrainerTest, SpecialTokensTakeLastIdsAndAreNotLearned) {
  const std::vector<std::string> texts = {"<|endoftext|><|endoftext|><|endoftext|> hello hello", "<|im_end|>x"};
  const Tokenizer tok = train_bpe(texts, 300, {"<|endoftext|>", "<|im_end|>"});
  EXPECT_EQ(merges_of(tok), (Merges{"e l", "h el", "l o", "\xC4\xA0 hel", "\xC4\xA0hel lo"}));
  EXPECT_EQ(tok.vocab_size(), 256 + 5 + 2);
  EXPECT_EQ(tok.token_id("<|endoftext|>"), tok.vocab_size() - 2);
  EXPECT_EQ(tok.token_id("<|im_end|>"), tok.vocab_size() - 1);
  for (const auto& m : merges_of(tok)) EXPECT_EQ(m.find('<'), std::string::npos) << m;
  EXPECT_EQ(tok.encode("<|im_end|>").size(), 1u);
}

TEST(BpeTrainerTest, DeterministicAndLoadableAfterSave) {
  const std::vector<std::string> texts = {"the cat sat on the mat", "the dog sat on the log", "你好 你好 世界 😀😀"};
  const Tokenizer a = train_bpe(texts, 290, {"<|endoftext|>"});
  const Tokenizer b = train_bpe(texts, 290, {"<|endoftext|>"});
  EXPECT_EQ(a.to_json_text(), b.to_json_text());
  const std::string path = write_temp_file("tokenizer.json", "");
  a.save(path);
  const Tokenizer loaded = Tokenizer::load(path);
  for (const auto& text : texts) {
    EXPECT_EQ(loaded.encode(text), a.encode(text));
    EXPECT_EQ(loaded.decode(loaded.encode(text)), text);
  }
  // The file has the fields Hugging Face tokenizers expects.
  const auto j = nlohmann::json::parse(read_file(path));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["use_regex"], true);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["special"], true);
  EXPECT_EQ(j["model"]["vocab"].size() + j["added_tokens"].size(), static_cast<size_t>(a.vocab_size()));
}

TEST(BpeTrainerTest, VocabTooSmallIsAnError) {
  const std::string m = data_error_message([] { train_bpe({"abc"}, 256, {"<|endoftext|>"}); });
  EXPECT_NE(m.find("vocab_size 256 is too small"), std::string::npos) << m;
}

// The demo tokenizer is trained on the rendered SFT conversations and the
// pretraining corpus of configs/demo. MTRAIN_REGEN_GOLDEN=1 rewrites the file
// (scripts/regen_demo_tokenizer.sh) instead of comparing.
TEST(TokenizerTest, ShippedDemoTokenizerIsReproducible) {
  const std::string dir = source_path("configs/demo/");
  std::vector<std::string> texts;
  for (const auto& c : read_sft_jsonl(dir + "sft.jsonl")) texts.push_back(render_chat_text(c, ChatTemplate::kChatml));
  for (auto& doc : read_pretrain_documents(dir + "pt.txt")) texts.push_back(std::move(doc));
  const Tokenizer trained = train_bpe(texts, 1024, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  ASSERT_EQ(trained.vocab_size(), 1024);
  const char* regen = std::getenv("MTRAIN_REGEN_GOLDEN");
  if (regen != nullptr && std::string(regen) == "1") {
    trained.save(dir + "tokenizer.json");
    GTEST_SKIP() << "rewrote " << dir << "tokenizer.json";
  }
  EXPECT_TRUE(trained.to_json_text() == read_file(dir + "tokenizer.json"))
      << "configs/demo/tokenizer.json differs from what train_bpe produces; if the change is intended, run "
         "scripts/regen_demo_tokenizer.sh and commit the new file";
}

}  // namespace
}  // namespace mtrain::data
