// `mtrain tokenizer` argument parsing and output, on the GPT-2 family fixture
// (family_tokenizer_fixture.h; ids derived there). The binary's exit codes are
// tested in tests/apps/test_mtrain_tokenizer.cc.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
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

TEST(TokenizerCommandTest, InputFileOrStdinOneTextPerLineWithThroughput) {
  const std::string path = write_temp_file("tokenizer.json", family_tokenizer_json(Family::kGpt2).dump());
  const std::string texts = write_temp_file("texts.txt", "hello hi\nhello\n\nhi");
  std::ostringstream out, report;
  std::istringstream no_stdin;
  run_tokenizer_command(parse_tokenizer_args({"--tokenizer", path, "--input", texts}), out, no_stdin, report);
  // "hello hi" -> 259,260,105; "hello" -> 259; "" -> nothing; "hi" -> h (104), i (105).
  EXPECT_EQ(out.str(), "259,260,105\n259\n\n104,105\n");
  EXPECT_NE(report.str().find("tokenizer: 4 texts, 0.00 MB, 6 tokens in "), std::string::npos) << report.str();
  EXPECT_NE(report.str().find(" tokens/s, "), std::string::npos) << report.str();
  EXPECT_NE(report.str().find(" MB/s"), std::string::npos) << report.str();

  std::ostringstream whole;
  std::istringstream stdin_text("hello\nhi");
  run_tokenizer_command(parse_tokenizer_args({"--tokenizer", path, "--input", "-", "--whole_file", "--show_tokens"}),
                        whole, stdin_text, report);
  EXPECT_EQ(whole.str(), "259,10,104,105\t[\"hello\",\"\xC4\x8A\",\"h\",\"i\"]\n");  // "\n" is byte id 10, piece Ċ

  std::istringstream empty;
  EXPECT_THROW(run_tokenizer_command(parse_tokenizer_args({"--tokenizer", path, "--input", texts + ".missing"}), out,
                                     empty, report),
               DataError);
}

// A Llama-style post-processor adds BOS for --add_special_tokens true (the
// default, as Hugging Face's encode) and nothing for false.
TEST(TokenizerCommandTest, AddSpecialTokensChoice) {
  nlohmann::json j = family_tokenizer_json(Family::kGpt2);
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<|im_start|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                         {"special_tokens", {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {268}}}}}}};
  const std::string path = write_temp_file("tokenizer.json", j.dump());
  EXPECT_EQ(run({"--tokenizer", path, "--encode", "hello"}), "268,259\n");
  EXPECT_EQ(run({"--tokenizer", path, "--encode", "hello", "--add_special_tokens", "false"}), "259\n");
  EXPECT_EQ(run({"--tokenizer", path, "--encode", "hello", "--add_special_tokens=true"}), "268,259\n");
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer", path, "--encode", "x", "--add_special_tokens", "yes"}), UsageError);
}

TEST(TokenizerCommandTest, UsageErrors) {
  EXPECT_TRUE(parse_tokenizer_args({"--help"}).help);
  EXPECT_THROW(parse_tokenizer_args({"--encode", "x"}), UsageError);          // no tokenizer
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer", "t.json"}), UsageError);  // nothing to do
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer", "t.json", "--bogus"}), UsageError);
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer"}), UsageError);  // no value
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer", "t.json", "--encode", "x", "--input", "-"}), UsageError);
  EXPECT_THROW(parse_tokenizer_args({"--tokenizer", "t.json", "--encode", "x", "--whole_file"}), UsageError);
  const std::string path = write_temp_file("tokenizer.json", family_tokenizer_json(Family::kGpt2).dump());
  std::ostringstream out;
  EXPECT_THROW(run_tokenizer_command(parse_tokenizer_args({"--tokenizer", path, "--decode", "1,x"}), out), UsageError);
  EXPECT_THROW(run_tokenizer_command(parse_tokenizer_args({"--tokenizer", path, "--decode", "273"}), out), DataError);
}

}  // namespace
}  // namespace mtrain::data
