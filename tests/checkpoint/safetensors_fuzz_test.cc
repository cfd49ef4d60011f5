// Fuzz-style robustness: a valid file with several dtypes gets thousands of
// random corruptions (bit flips, truncations, length-field and offset edits,
// structural bytes, dtype swaps, insertions, trailing garbage). Opening and
// reading every tensor must give either a CheckpointError naming the file or
// a consistent parse -- never another exception, a crash or an out-of-bounds
// read (this file also runs under -fsanitize=address,undefined).
#include <gtest/gtest.h>

#include <random>

#include "checkpoint/safetensors.h"
#include "safetensors_test_util.h"

namespace mtrain::checkpoint {
namespace {

using testing::le64;
using testing::TempDir;

std::string valid_file(FileSystem& fs, const std::string& path) {
  const std::vector<float> a = testing::random_floats(12, 1), b = testing::random_floats(5, 2);
  const std::vector<int64_t> c = {7, -9};
  const std::vector<uint8_t> d = {42};
  const std::vector<TensorToWrite> t = {
      TensorToWrite::from_f32("a", {3, 4}, a.data()),
      TensorToWrite::from_f32("b", {5}, b.data(), StDType::kBF16),
      TensorToWrite::from_bytes("c", StDType::kI64, {2}, testing::bytes_of(c)),
      TensorToWrite::from_bytes("d", StDType::kU8, {}, testing::bytes_of(d)),
      TensorToWrite::from_f32("e", {0, 2}, a.data(), StDType::kF16),
  };
  write_safetensors(fs, path, t, {{"format", "pt"}, {"k", "v"}});
  return testing::slurp(path);
}

class Mutator {
 public:
  Mutator(const std::string& base, uint64_t seed) : base_(base), gen_(seed) {
    header_end_ = 8 + static_cast<size_t>(base[0] & 0xff) + (static_cast<size_t>(base[1] & 0xff) << 8);
  }

  std::string mutate() {
    std::string s = base_;
    const int edits = 1 + static_cast<int>(gen_() % 3);
    for (int i = 0; i < edits && !s.empty(); ++i) apply(s, static_cast<int>(gen_() % 8));
    return s;
  }

 private:
  size_t pick(size_t n) { return n == 0 ? 0 : static_cast<size_t>(gen_() % n); }
  size_t in_header(const std::string& s) { return 8 + pick(std::min(header_end_, s.size()) - 8); }

  void apply(std::string& s, int kind) {
    switch (kind) {
      case 0:  // bit flip, mostly in the header
        s[gen_() % 5 != 0 && s.size() > header_end_ ? in_header(s) : pick(s.size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:  // truncation
        s.resize(pick(s.size()));
        break;
      case 2: {  // the length field
        const uint64_t values[] = {0,
                                   1,
                                   2,
                                   s.size() - 8,
                                   s.size() - 7,
                                   s.size(),
                                   uint64_t{1} << 32,
                                   uint64_t{1} << 63,
                                   UINT64_MAX,
                                   header_end_ - 9,
                                   header_end_ - 7,
                                   pick(s.size())};
        s.replace(0, std::min<size_t>(8, s.size()), le64(values[pick(std::size(values))]));
        break;
      }
      case 3:
        edit_number(s);
        break;
      case 4: {  // a structural or odd byte in the header
        const char bytes[] = {'{', '}', '[', ']', '"', ',', ':', '\\', '\0', '\xff', ' ', '-', '0', '9'};
        if (s.size() > 8) s[in_header(s)] = bytes[pick(sizeof(bytes))];
        break;
      }
      case 5:
        swap_dtype(s);
        break;
      case 6:  // insert or delete a header byte (shifts everything after it)
        if (s.size() > 9) {
          if (gen_() % 2 == 0)
            s.insert(in_header(s), 1, static_cast<char>(gen_()));
          else
            s.erase(in_header(s), 1);
        }
        break;
      default:  // trailing garbage
        s.append(1 + pick(16), static_cast<char>(gen_()));
        break;
    }
  }

  // Replaces one run of digits in the header (a shape, an offset) with another number.
  void edit_number(std::string& s) {
    std::vector<std::pair<size_t, size_t>> runs;
    const size_t end = std::min(header_end_, s.size());
    for (size_t i = 8; i < end; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) continue;
      size_t j = i;
      while (j < end && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      runs.emplace_back(i, j - i);
      i = j;
    }
    if (runs.empty()) return;
    const auto [pos, len] = runs[pick(runs.size())];
    const std::string values[] = {"0",
                                  "1",
                                  std::to_string(pick(2 * s.size())),
                                  "-1",
                                  "18446744073709551616",
                                  "9223372036854775807",
                                  "1e3",
                                  "4294967296",
                                  "",
                                  "2.5",
                                  std::to_string(s.size())};
    s.replace(pos, len, values[pick(std::size(values))]);
  }

  void swap_dtype(std::string& s) {
    const std::string names[] = {"F32", "BF16", "I64", "U8", "F16", "F64", "BOOL", "F33", "I32"};
    const std::string& from = names[pick(5)];
    const size_t at = s.find("\"" + from + "\"");
    if (at != std::string::npos && at < header_end_) s.replace(at + 1, from.size(), names[pick(std::size(names))]);
  }

  const std::string& base_;
  std::mt19937_64 gen_;
  size_t header_end_ = 8;
};

// Opens and reads everything; returns true for a valid parse, false for a clean error.
bool open_and_read_all(FileSystem& fs, const std::string& path) {
  try {
    SafetensorsFile f = SafetensorsFile::open(fs, path);
    int64_t covered = 0;
    for (const TensorInfo& t : f.tensors()) {
      std::vector<std::byte> raw(static_cast<size_t>(t.nbytes()));
      f.read_bytes(t, raw);
      if (st_dtype_is_float16_or_32(t.dtype)) {
        std::vector<float> v(static_cast<size_t>(t.numel));
        f.read_f32(t, v);
      }
      covered += t.nbytes();
    }
    EXPECT_EQ(f.data_offset() + covered, f.file_size()) << "a parse that does not tile the file";
    return true;
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return false;
  }
}

TEST(SafetensorsFuzz, RandomCorruptionsGiveACleanErrorOrAValidParse) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string base = valid_file(fs, tmp / "base.safetensors");
  ASSERT_TRUE(open_and_read_all(fs, tmp / "base.safetensors"));
  Mutator m(base, 20251121);
  int valid = 0, errors = 0;
  constexpr int kCases = 10000;
  for (int i = 0; i < kCases; ++i) {
    // A fresh name per case: rewriting one file through O_TRUNC makes ext4
    // flush on close (auto_da_alloc), which costs milliseconds per case.
    const std::string path = tmp / ("fuzz" + std::to_string(i) + ".safetensors");
    testing::put(path, m.mutate());
    (open_and_read_all(fs, path) ? valid : errors)++;
    fs.remove_all(path);
    if (::testing::Test::HasFailure()) FAIL() << "case " << i;
  }
  // Both outcomes must occur: the corruptions reach the checks, and
  // data-only flips still parse.
  EXPECT_GT(errors, kCases / 2);
  EXPECT_GT(valid, 50);
  std::printf("fuzz: %d cases, %d clean errors, %d valid parses\n", kCases, errors, valid);
}

}  // namespace
}  // namespace mtrain::checkpoint
