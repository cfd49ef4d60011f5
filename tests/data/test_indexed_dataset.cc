// Megatron .bin/.idx: byte-exact writer output against a hand-built file,
// round trips in every integer dtype, and refusals of damaged files (named
// cases plus random corruptions that must never crash or read out of bounds).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "data/indexed_dataset.h"
#include "data_test_util.h"

namespace mtrain::data {
namespace {

using testing::data_error_message;
using testing::read_file;
using testing::write_temp_file;

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Documents {1,2,3} and {4,5} as Megatron's builder writes them in uint16.
std::string expected_idx() {
  std::string s("MMIDIDX\0\0", 9);
  put<uint64_t>(s, 1);
  put<uint8_t>(s, 8);
  put<uint64_t>(s, 2);  // sequences
  put<uint64_t>(s, 3);  // document indices
  put<int32_t>(s, 3);
  put<int32_t>(s, 2);
  put<int64_t>(s, 0);
  put<int64_t>(s, 6);
  for (int64_t d : {0, 1, 2}) put<int64_t>(s, d);
  return s;
}

std::string write_two_documents(IndexedDType dtype = IndexedDType::kUInt16) {
  const std::string prefix = write_temp_file("placeholder", "").substr(0) + "_ds";
  IndexedDatasetBuilder b(indexed_bin_path(prefix), dtype);
  const std::vector<int32_t> a{1, 2, 3}, c{4, 5};
  b.add_item(a);
  b.end_document();
  const int32_t len = 2;
  b.add_document(c, std::span<const int32_t>(&len, 1));
  b.finalize(indexed_idx_path(prefix));
  return prefix;
}

TEST(IndexedDataset, WriterOutputIsByteExactMegatronLayout) {
  const std::string prefix = write_two_documents();
  EXPECT_EQ(read_file(indexed_idx_path(prefix)), expected_idx());
  EXPECT_EQ(read_file(indexed_bin_path(prefix)), std::string("\1\0\2\0\3\0\4\0\5\0", 10));
}

TEST(IndexedDataset, ReadsWhatItWroteInEveryIntegerDtype) {
  for (IndexedDType d : {IndexedDType::kUInt8, IndexedDType::kInt8, IndexedDType::kInt16, IndexedDType::kUInt16,
                         IndexedDType::kInt32, IndexedDType::kInt64}) {
    const std::string prefix = write_two_documents(d);
    IndexedDataset ds(prefix);
    EXPECT_EQ(ds.dtype(), d);
    EXPECT_EQ(ds.num_sequences(), 2);
    EXPECT_EQ(ds.num_documents(), 2);
    EXPECT_EQ(ds.get(0), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(ds.get(1), (std::vector<int32_t>{4, 5}));
    std::vector<int32_t> part;
    ds.read(0, 1, 2, part);
    EXPECT_EQ(part, (std::vector<int32_t>{2, 3}));
    EXPECT_NE(data_error_message([&] { ds.read(1, 1, 2, part); }).find("outside sequence 1"), std::string::npos);
  }
}

TEST(IndexedDataset, OptimalDtypeFollowsMegatron) {
  EXPECT_EQ(optimal_indexed_dtype(65499), IndexedDType::kUInt16);
  EXPECT_EQ(optimal_indexed_dtype(65500), IndexedDType::kInt32);
}

TEST(IndexedDataset, TokenTooLargeForTheDtypeIsADataError) {
  const std::string prefix = write_temp_file("x", "") + "_big";
  IndexedDatasetBuilder b(indexed_bin_path(prefix), IndexedDType::kUInt16);
  const std::vector<int32_t> t{70000};
  EXPECT_NE(data_error_message([&] { b.add_item(t); }).find("does not fit dtype uint16"), std::string::npos);
}

// Rewrites the .idx of `prefix` with `edit` applied and returns the error.
std::string corrupt(const std::string& prefix, const std::function<void(std::string&)>& edit) {
  std::string idx = expected_idx();
  edit(idx);
  std::ofstream(indexed_idx_path(prefix), std::ios::binary | std::ios::trunc) << idx;
  return data_error_message([&] { IndexedDataset ds(prefix); });
}

TEST(IndexedDataset, DamagedIndexFilesAreRefusedNamingFileAndReason) {
  const std::string prefix = write_two_documents();
  const std::string idx = indexed_idx_path(prefix);
  auto expect = [&](const std::function<void(std::string&)>& edit, const std::string& reason) {
    const std::string msg = corrupt(prefix, edit);
    EXPECT_NE(msg.find(idx), std::string::npos) << msg;
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
  };
  expect([](std::string& s) { s[0] = 'X'; }, "bad magic");
  expect([](std::string& s) { s[9] = 2; }, "unsupported version 2");
  expect([](std::string& s) { s[17] = 9; }, "unknown dtype code 9");
  expect([](std::string& s) { s[17] = 7; }, "cannot hold token ids");
  expect([](std::string& s) { s.resize(20); }, "truncated header");
  expect([](std::string& s) { s.pop_back(); }, "does not match 2 sequences");
  expect([](std::string& s) { s[18] = 3; }, "does not match 3 sequences");
  expect([](std::string& s) { s[25] = 0x7f; }, "more than the file");
  expect([](std::string& s) { s[37] = '\x80'; }, "negative length");
  expect([](std::string& s) { s[42 + 8] = 7; }, "pointer 7 does not follow");
  expect([](std::string& s) { s[58 + 8] = 3; }, "not monotonic at 2");
  expect([](std::string& s) { s[58] = 1; }, "must start with 0");
  expect([](std::string& s) { s[58 + 16] = 1; }, "is not the sequence count 2");
  // A .bin shorter than the index says.
  std::ofstream(idx, std::ios::binary | std::ios::trunc) << expected_idx();
  std::filesystem::resize_file(indexed_bin_path(prefix), 8);
  const std::string msg = data_error_message([&] { IndexedDataset ds(prefix); });
  EXPECT_NE(msg.find(indexed_bin_path(prefix) + ": size 8 bytes does not match"), std::string::npos) << msg;
}

TEST(IndexedDataset, MissingFilesAreDataErrors) {
  EXPECT_NE(data_error_message([] { IndexedDataset ds("/nonexistent/prefix"); }).find("/nonexistent/prefix.idx"),
            std::string::npos);
}

// Random byte edits, truncations and extensions of both files: opening either
// fails with a DataError or yields a dataset whose every token can be read.
TEST(IndexedDataset, RandomCorruptionsNeverCrash) {
  const std::string prefix = write_two_documents();
  const std::string good_idx = expected_idx(), good_bin = read_file(indexed_bin_path(prefix));
  std::mt19937 rng(7);
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string idx = good_idx, bin = good_bin;
    std::string& target = rng() % 4 == 0 ? bin : idx;
    switch (rng() % 4) {
      case 0:
        target.resize(rng() % (target.size() + 1));
        break;
      case 1:
        target.append(rng() % 24, static_cast<char>(rng()));
        break;
      default:
        for (int e = 1 + rng() % 3; e > 0 && !target.empty(); --e)
          target[rng() % target.size()] = static_cast<char>(rng());
    }
    std::ofstream(indexed_idx_path(prefix), std::ios::binary | std::ios::trunc) << idx;
    std::ofstream(indexed_bin_path(prefix), std::ios::binary | std::ios::trunc) << bin;
    try {
      IndexedDataset ds(prefix);
      for (int64_t s = 0; s < ds.num_sequences(); ++s) {
        const std::vector<int32_t> t = ds.get(s);
        ASSERT_EQ(static_cast<int64_t>(t.size()), ds.sequence_lengths()[s]);
      }
      ++opened;
    } catch (const DataError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);  // nearly every edit is caught
  EXPECT_GT(opened, 0);      // edits of token bytes keep a valid file
}

}  // namespace
}  // namespace mtrain::data
