// SFT dataset files: JSONL / JSON list / CSV, alpaca / messages / ShareGPT
// records detected per record, folders read in name order, and `path#N`
// sampling (counts, swift's repeat + remainder rule, determinism).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "data/dataset_sample.h"
#include "data/sft.h"
#include "data/sft_files.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::write_temp_file;

std::vector<Conversation> read_all(const std::string& path) {
  SftRecords out;
  read_sft_records(path, {}, out);
  return out.conversations;
}

// "role:content|role:content..." of a conversation.
std::string flat(const Conversation& c) {
  std::string s;
  for (const Message& m : c.messages) s += (s.empty() ? "" : "|") + m.role + ":" + m.content;
  return s;
}

TEST(SftFormats, ShareGpt) {
  const Conversation c = parse_sft_record(nlohmann::json::parse(R"({"conversations": [
      {"from": "system", "value": "S"}, {"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1"},
      {"from": "user", "value": "Q2"}, {"from": "assistant", "value": "A2"}]})"),
                                          "f:3");
  EXPECT_EQ(flat(c), "system:S|user:Q1|assistant:A1|user:Q2|assistant:A2");
  EXPECT_EQ(c.origin, "f:3");
  const std::string m = testing::data_error_message(
      [] { parse_sft_record(nlohmann::json::parse(R"({"conversations": [{"from": "bot", "value": "x"}]})"), "f:4"); });
  EXPECT_EQ(m, "f:4: conversations[0]: 'from' is 'bot', not one of system, human, gpt");
}

TEST(SftFormats, JsonlJsonAndCsvWithEveryFormatDetectedPerRecord) {
  const std::string jsonl = write_temp_file(
      "mixed.jsonl",
      "{\"instruction\": \"I\", \"input\": \"x\", \"output\": \"O\"}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"Q\"}, {\"role\": \"assistant\", \"content\": \"A\"}]}\n"
      "{\"conversations\": [{\"from\": \"human\", \"value\": \"H\"}, {\"from\": \"gpt\", \"value\": \"G\"}]}\n");
  const auto a = read_all(jsonl);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(flat(a[0]), "user:I\nx|assistant:O");
  EXPECT_EQ(flat(a[1]), "user:Q|assistant:A");
  EXPECT_EQ(flat(a[2]), "user:H|assistant:G");
  EXPECT_EQ(a[2].origin, jsonl + ":3");

  const std::string json =
      write_temp_file("list.json",
                      "[\n {\"system\": \"S\", \"instruction\": \"I\", \"output\": \"O\"},\n"
                      " {\"conversations\": [{\"from\": \"human\", \"value\": \"H\"}, {\"from\": \"gpt\", \"value\": "
                      "\"G\"}]}\n]\n");
  const auto j = read_all(json);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(flat(j[0]), "system:S|user:I|assistant:O");
  EXPECT_EQ(j[1].origin, json + "[1]");

  // Quoted cells hold commas, doubled quotes and line breaks; a BOM before the header is dropped.
  const std::string csv = write_temp_file("alpaca.csv",
                                          "\xEF\xBB\xBFinstruction,input,output\n"
                                          "Add,\"1, 2\",3\n"
                                          "\n"
                                          "\"Say \"\"hi\"\"\",,\"line one\nline two\"\n");
  const auto c = read_all(csv);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(flat(c[0]), "user:Add\n1, 2|assistant:3");
  EXPECT_EQ(c[0].origin, csv + ":2");
  EXPECT_EQ(flat(c[1]), "user:Say \"hi\"|assistant:line one\nline two");
  EXPECT_EQ(c[1].origin, csv + ":5");  // the line the row ends on
}

TEST(SftFormats, FolderReadsItsDataFilesInNameOrder) {
  const std::string b = write_temp_file("b.jsonl", "{\"instruction\": \"second\", \"output\": \"2\"}\n");
  const auto dir = std::filesystem::path(b).parent_path();
  write_temp_file("a.csv", "instruction,output\nfirst,1\n");
  write_temp_file("c.json", "[{\"instruction\": \"third\", \"output\": \"3\"}]");
  write_temp_file("notes.txt", "not data");
  write_temp_file(".hidden.jsonl", "not data either");
  EXPECT_EQ(dataset_files(dir.string()), (std::vector<std::string>{(dir / "a.csv").string(), (dir / "b.jsonl").string(),
                                                                   (dir / "c.json").string()}));
  const auto all = read_all(dir.string());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].messages[0].content, "first");
  EXPECT_EQ(all[2].messages[0].content, "third");
}

TEST(DatasetSpec, HashNParsing) {
  EXPECT_EQ(parse_dataset_spec("a.jsonl#20").path, "a.jsonl");
  EXPECT_EQ(parse_dataset_spec("a.jsonl#20").num_samples, 20);
  EXPECT_EQ(parse_dataset_spec("a.jsonl").num_samples, std::nullopt);
  EXPECT_EQ(parse_dataset_spec("dir#v2/a.jsonl").path, "dir#v2/a.jsonl");  // not digits: part of the path
  EXPECT_THROW(parse_dataset_spec("a.jsonl#0"), ConfigError);
  EXPECT_THROW(parse_dataset_spec("a.jsonl#99999999999999999999999"), ConfigError);
}

TEST(DatasetSpec, FewerSamplesAreDistinctAndDeterministic) {
  const auto s = sample_dataset_indices(10, 4, 42, 0);
  ASSERT_EQ(s.size(), 4u);
  std::vector<int64_t> sorted = s;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  EXPECT_TRUE(std::all_of(s.begin(), s.end(), [](int64_t i) { return i >= 0 && i < 10; }));
  EXPECT_EQ(sample_dataset_indices(10, 4, 42, 0), s);
  EXPECT_NE(sample_dataset_indices(10, 4, 43, 0), s);
  EXPECT_NE(sample_dataset_indices(10, 4, 42, 1), s);  // each --dataset entry draws its own subset
}

TEST(DatasetSpec, MoreSamplesRepeatTheDatasetThenAddARandomRemainder) {
  const auto s = sample_dataset_indices(4, 11, 7, 0);  // 11 = 2 * 4 + 3
  ASSERT_EQ(s.size(), 11u);
  EXPECT_EQ(std::vector<int64_t>(s.begin(), s.begin() + 8), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  std::map<int64_t, int> count;
  for (int64_t i : s) ++count[i];
  int thrice = 0;
  for (const auto& [index, n] : count) {
    EXPECT_TRUE(n == 2 || n == 3) << index;
    thrice += n == 3;
  }
  EXPECT_EQ(thrice, 3);
  EXPECT_EQ(sample_dataset_indices(4, 8, 7, 0), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
}

TEST(DatasetSpec, ReadSeveralDatasetsWithCounts) {
  const std::string a = write_temp_file("a.jsonl",
                                        "{\"instruction\": \"a0\", \"output\": \"x\"}\n"
                                        "{\"instruction\": \"a1\", \"output\": \"x\"}\n"
                                        "{\"instruction\": \"a2\", \"output\": \"x\"}\n");
  const std::string b = write_temp_file("b.csv", "instruction,output\nb0,y\nb1,y\n");
  SftRecords stats;
  const auto all = read_sft_datasets({a + "#2", b + "#5"}, {}, 42, 0, stats);
  ASSERT_EQ(all.size(), 7u);
  int from_a = 0;
  for (const Conversation& c : all) from_a += c.messages[0].content[0] == 'a';
  EXPECT_EQ(from_a, 2);
  EXPECT_EQ(all[0].messages[0].content[0], 'a');  // concatenated in --dataset order
  EXPECT_EQ(all[2].messages[0].content, "b0");    // 5 = 2 * 2 + 1: b0 b1 b0 b1 + one of them
  EXPECT_EQ(all[5].messages[0].content, "b1");
  SftRecords again;
  const auto same = read_sft_datasets({a + "#2", b + "#5"}, {}, 42, 0, again);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(flat(all[i]), flat(same[i]));
  EXPECT_EQ(read_sft_datasets({a}, {}, 42, 0, stats).size(), 3u);
}

}  // namespace
}  // namespace mtrain::data
