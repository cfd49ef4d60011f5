// Pretraining data: document reading (.txt / .jsonl), eod insertion and
// Megatron-style seq_length+1 windows.
#include <gtest/gtest.h>

#include <numeric>

#include "common/errors.h"
#include "data/pretrain.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;
using testing::source_path;
using testing::write_temp_file;
using Ids = std::vector<int32_t>;

TEST(PretrainReadTest, TextDocumentsSeparatedByBlankLines) {
  const std::string path = write_temp_file("c.txt", "first line\nsecond line\n\n\n  \nthird\r\n\r\nfourth\n");
  EXPECT_EQ(read_pretrain_documents(path), (std::vector<std::string>{"first line\nsecond line", "third", "fourth"}));
}

TEST(PretrainReadTest, JsonlTextKey) {
  const std::string path = write_temp_file("c.jsonl", "{\"text\": \"a b\"}\n{\"content\": \"c\", \"text\": \"d\"}\n");
  EXPECT_EQ(read_pretrain_documents(path), (std::vector<std::string>{"a b", "d"}));
  const std::string other = write_temp_file("o.jsonl", "{\"content\": \"x\"}\n");
  EXPECT_EQ(read_pretrain_documents(other, "content"), (std::vector<std::string>{"x"}));
  EXPECT_EQ(data_error_message([&] { read_pretrain_documents(other); }), other + ":1: missing field 'text'");
}

TEST(PretrainReadTest, MissingAndEmptyFiles) {
  EXPECT_EQ(data_error_message([] { read_pretrain_documents("/no/such/corpus.txt"); }),
            "cannot open dataset file '/no/such/corpus.txt': No such file or directory");
  const std::string empty = write_temp_file("e.txt", "\n\n");
  EXPECT_EQ(data_error_message([&] { read_pretrain_documents(empty); }),
            empty + ": the dataset has no documents (the file is empty)");
}

TEST(PretrainWindowsTest, ConsecutiveWindowsOfSeqLengthPlusOne) {
  Ids stream(23);
  std::iota(stream.begin(), stream.end(), 100);  // 100..122
  const std::vector<Sample> samples = make_pretrain_samples(stream, 5, "s");
  // (23 - 1) / 5 = 4 windows: [100..105], [105..110], [110..115], [115..120]; 121, 122 dropped.
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0].tokens, (Ids{100, 101, 102, 103, 104, 105}));
  EXPECT_EQ(samples[1].tokens, (Ids{105, 106, 107, 108, 109, 110}));
  EXPECT_EQ(samples[3].tokens, (Ids{115, 116, 117, 118, 119, 120}));
  for (const Sample& s : samples) EXPECT_EQ(s.loss_mask, std::vector<uint8_t>(6, 1));

  Ids exact(21);  // 21 tokens = 4 * 5 + 1: every token used
  EXPECT_EQ(make_pretrain_samples(exact, 5, "s").size(), 4u);
  EXPECT_EQ(data_error_message([] { make_pretrain_samples(Ids(5), 5, "corpus.txt"); }),
            "corpus.txt: the corpus has 5 tokens, fewer than one sample of 6 (seq_length + 1)");
}

TEST(PretrainTokenizeTest, EodAfterEachDocument) {
  const Tokenizer tok = Tokenizer::load(source_path("tests/data/fixtures/tiny/tokenizer.json"));
  const Ids stream = tokenize_documents({"abc", "ab c", "cc"}, tok, tok.special().eod);
  // abc=10 | ab=8 Ġ=3 c=2 (" c" has no merge) | cc=12, eod=13 after each.
  EXPECT_EQ(stream, (Ids{10, 13, 8, 3, 2, 13, 12, 13}));
}

TEST(PretrainDatasetTest, ShippedDemoCorpus) {
  const Tokenizer tok = Tokenizer::load(source_path("configs/demo/tokenizer.json"));
  const PretrainDataset d = load_pretrain_dataset(source_path("configs/demo/pt.txt"), tok, 128);
  EXPECT_GT(d.num_documents, 1000);
  EXPECT_EQ(static_cast<int64_t>(d.samples.size()), (d.num_tokens - 1) / 128);
  EXPECT_EQ(d.samples[1].tokens.front(), d.samples[0].tokens.back());
  const int64_t eods = std::count(d.samples[0].tokens.begin(), d.samples[0].tokens.end(), tok.special().eod);
  EXPECT_GT(eods, 0);  // documents are short: a window spans several
}

}  // namespace
}  // namespace mtrain::data
