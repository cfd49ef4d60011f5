// Bad SFT input: a missing or unreadable file, an empty dataset, an unknown
// file format, malformed records (named `file:line: what is wrong`), the
// --strict false skip with its --max_malformed cap, and samples left empty
// by templating / truncation (dropped and counted, never a crash).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/sft.h"
#include "data/sft_files.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;
using testing::write_temp_file;

// The DataError of reading `path`, message and hint.
std::pair<std::string, std::string> read_error(const std::string& path, SftReadOptions options = {}) {
  try {
    SftRecords out;
    read_sft_records(path, options, out);
  } catch (const DataError& e) {
    return {e.what(), e.hint()};
  }
  ADD_FAILURE() << "expected a DataError for " << path;
  return {};
}

TEST(SftFileFaults, MissingFileNamesThePathWithAHint) {
  const auto [message, hint] = read_error("/nonexistent/train.jsonl");
  EXPECT_EQ(message, "cannot open dataset file '/nonexistent/train.jsonl': No such file or directory");
  EXPECT_NE(hint.find("check the --dataset path"), std::string::npos) << hint;
}

TEST(SftFileFaults, UnreadableFileNamesThePath) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  const std::string path = write_temp_file("locked.jsonl", "{\"instruction\": \"q\", \"output\": \"a\"}\n");
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  EXPECT_EQ(read_error(path).first, "cannot open dataset file '" + path + "': Permission denied");
}

TEST(SftFileFaults, EmptyDatasetsAndFoldersNameThePath) {
  for (const char* name : {"empty.jsonl", "empty.json", "empty.csv"}) {
    const std::string path = write_temp_file(name, "\n");
    EXPECT_EQ(read_error(path).first, path + ": the dataset has no samples (the file is empty)");
  }
  const std::string header_only = write_temp_file("header.csv", "instruction,output\n");
  EXPECT_EQ(read_error(header_only).first, header_only + ": the dataset has no samples (the file is empty)");
  const std::string dir = std::filesystem::path(header_only).parent_path().string() + "/no_data";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/notes.txt") << "x";
  const auto [message, hint] = read_error(dir);
  EXPECT_EQ(message, dir + ": the folder has no dataset files (.jsonl, .json or .csv)");
  EXPECT_NE(hint.find(".jsonl (one record per line)"), std::string::npos);
}

TEST(SftFileFaults, UnknownFormatNamesThePathAndTheFormats) {
  const std::string txt = write_temp_file("data.txt", "{\"instruction\": \"q\", \"output\": \"a\"}\n");
  const auto [message, hint] = read_error(txt);
  EXPECT_EQ(message, txt + ": unknown dataset format '.txt'");
  EXPECT_NE(hint.find(".csv"), std::string::npos) << hint;
  const std::string object = write_temp_file("object.json", "{\"instruction\": \"q\", \"output\": \"a\"}");
  EXPECT_EQ(read_error(object).first, object + ": expected a JSON list of records, got object");
  const std::string prompt = write_temp_file("prompt.jsonl", "{\"prompt\": \"q\", \"completion\": \"a\"}\n");
  EXPECT_EQ(read_error(prompt).first, prompt + ":1: unknown sample format with keys [completion, prompt]");
}

TEST(SftFileFaults, MalformedRecordsNameFileAndLine) {
  const std::string jsonl = write_temp_file("bad.jsonl", "{\"instruction\": \"q\", \"output\": \"a\"}\n{\"instr\n");
  EXPECT_EQ(read_error(jsonl).first.rfind(jsonl + ":2:", 0), 0u) << read_error(jsonl).first;
  EXPECT_NE(read_error(jsonl).first.find("invalid JSON"), std::string::npos);
  const std::string csv = write_temp_file("bad.csv", "instruction,output\nq,a\nonly one cell\n");
  EXPECT_EQ(read_error(csv).first, csv + ":3: the row has 1 cells, the header has 2");
  const std::string quote = write_temp_file("quote.csv", "instruction,output\n\"q,a\n");
  EXPECT_EQ(read_error(quote).first, quote + ":2: malformed CSV: a quoted cell is not closed");
  const std::string json = write_temp_file("bad.json", "[\n{\"instruction\": \"q\", \"output\": \"a\"},\n{\"x\": }\n]");
  EXPECT_EQ(read_error(json).first.rfind(json + ":3: invalid JSON", 0), 0u) << read_error(json).first;
  const std::string element = write_temp_file("element.json", "[{\"instruction\": \"q\"}]");
  EXPECT_EQ(read_error(element).first, element + "[0]: missing field 'output'");
}

TEST(SftFileFaults, NonStrictSkipsAndCountsMalformedRecordsUpToTheCap) {
  const std::string path = write_temp_file("some_bad.jsonl",
                                           "{\"instruction\": \"q1\", \"output\": \"a\"}\n"
                                           "{not json\n"
                                           "{\"instruction\": \"q2\"}\n"
                                           "{\"instruction\": \"q3\", \"output\": \"a\"}\n");
  SftRecords out;
  read_sft_records(path, {.strict = false, .max_malformed = 2}, out);
  ASSERT_EQ(out.conversations.size(), 2u);
  EXPECT_EQ(out.conversations[1].messages[0].content, "q3");
  EXPECT_EQ(out.num_malformed, 2);
  EXPECT_EQ(out.first_malformed.rfind(path + ":2:", 0), 0u) << out.first_malformed;

  // The cap counts over all datasets: a second read of the same file passes it.
  const auto [message, hint] = read_error(path, {.strict = false, .max_malformed = 1});
  EXPECT_EQ(message, path + ":3: missing field 'output' (malformed record 2, more than --max_malformed 1)");
  EXPECT_EQ(hint, "fix the dataset or raise --max_malformed");
  const std::string csv = write_temp_file("bad.csv", "instruction,output\nq,a\nshort\n");
  SftRecords from_csv = out;
  EXPECT_THROW(read_sft_records(csv, {.strict = false, .max_malformed = 2}, from_csv), DataError);

  const std::string all_bad = write_temp_file("all_bad.jsonl", "{\n{\n");
  EXPECT_EQ(read_error(all_bad, {.strict = false}).first,
            all_bad + ": the dataset has no samples (2 malformed records skipped)");
}

TEST(SftFileFaults, SamplesEmptyAfterTemplatingOrTruncationAreDroppedAndCounted) {
  const Tokenizer tok = Tokenizer::load(testing::source_path("configs/demo/tokenizer.json"));
  std::vector<Conversation> conv = {Conversation{{{"user", "q"}, {"assistant", "a fine answer"}}, "x:1"},
                                    Conversation{{{"user", std::string(300, 'q')}, {"assistant", "a"}}, "x:2"}};
  SftOptions o;
  o.max_length = 24;
  o.truncation = TruncationStrategy::kRight;  // keeps the prompt, cuts the answer away: no loss left
  const SftDataset d = build_sft_dataset(conv, tok, o, "x");
  EXPECT_EQ(d.samples.size(), 1u);
  EXPECT_EQ(d.num_too_long, 1);
  EXPECT_EQ(d.num_no_loss, 1);
  o.truncation = TruncationStrategy::kDelete;
  const std::string m = data_error_message([&] { build_sft_dataset({conv[1]}, tok, o, "only_long.jsonl"); });
  EXPECT_EQ(m.rfind("only_long.jsonl: no usable samples: 1 of 1 are longer than max_length=24", 0), 0u) << m;
}

}  // namespace
}  // namespace mtrain::data
