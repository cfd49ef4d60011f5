// `mtrain tokenizer` argument parsing and output, on the GPT-2 family fixture
// (family_tokenizer_fixture.h; ids derived there). The binary's exit codes are
// tested in tests/apps/test_mtrain_tokenizer.cc.
#include <gtest/gtest.h>

#include <sstream>

#include "common/errors.h"
#include "data/tokenizer_command.h"
#include "data_test_util.h"
#include "family_tokenizer_fixture.h"

namespace mtrain::data {
namespace {

using testing::Family;
using testing::family_tokenizer_json;
using testing::write_temp_file;

std::string run(const std::vector<std::string>& args) {
  std::ostringstream out;
  EXPECT_EQ(run_tokenizer_command(parse_tokenizer_args(args), out), 0);
  return out.str();
}

TEST(TokenizerCommandTest, EncodeShowTokensDecode) {
  const std::string path = write_temp_file("tokenizer.json", family_tokenizer_json(Family::kGpt2).dump());
  // "hello" -> 259; " hi" -> Ġh (260), i (105).
  EXPECT_EQ(run({"--tokenizer", path, "--encode", "hello hi"}), "259,260,105\n");
  EXPECT_EQ(run({"--tokenizer=" + path, "--encode=hello hi", "--show_tokens"}),
            "259,260,105\n259\thello\t\"hello\"\n260\t\xC4\xA0h\t\" h\"\n105\ti\t\"i\"\n");
  EXPECT_EQ(run({"--model", path, "--decode", "268,259, 260,105,267"}), "<|im_start|>hello hi<|endoftext|>\n");
  EXPECT_EQ(run({"--tokenizer", path, "--decode", "268 259 267", "--skip_special_tokens"}), "hello\n");
  const std::string info = run({"--tokenizer", path, "--info"});
  EXPECT_NE(info.find("byte-level BPE, vocab_size 273, 6 added tokens"), std::string::npos) << info;
  EXPECT_NE(info.find("eos: 267 <|endoftext|>"), std::string::npos) << info;
}

TEST(TokenizerCommandTest, UsageErrors) {
  EXPECT_TRUE(parse_tokenizer_args({"--help"}).help);
  EXPECT_THROW(parse_tokenizer_args({"--encode", "x"}), UsageError);          // no tokenizer
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer", "t.json"}), UsageError);  // nothing to do
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer", "t.json", "--bogus"}), UsageError);
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer"}), UsageError);  // no value
  const std::string path = write_temp_file("tokenizer.json", family_tokenizer_json(Family::kGpt2).dump());
  std::ostringstream out;
  EXPECT_THROW(run_tokenizer_command(parse_tokenizer_args({"--tokenizer", path, "--decode", "1,x"}), out), UsageError);
  EXPECT_THROW(run_tokenizer_command(parse_tokenizer_args({"--tokenizer", path, "--decode", "273"}), out), DataError);
}

}  // namespace
}  // namespace mtrain::data
