// The reader's validation, one hand-built bad file per rule: each error names
// the file and says what is wrong with the expected and the actual value.
#include <gtest/gtest.h>

#include "checkpoint/safetensors.h"
#include "safetensors_test_util.h"

namespace mtrain::checkpoint {
namespace {

using testing::checkpoint_error_of;
using testing::file_bytes;
using testing::le64;
using testing::TempDir;

struct BadHeader {
  const char* what;
  std::string header;
  size_t data_bytes;
  std::string expected;  // a substring of the error
};

const std::string kF32x1 = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";

std::vector<BadHeader> bad_headers() {
  return {
      {"not an object", "[1]", 0, "the header must start with '{', found byte 0x5b"},
      {"truncated JSON", R"({"a":)", 0, "the header is not valid JSON"},
      {"invalid UTF-8", "{\"a\xff\":" + kF32x1 + "}", 4, "the header is not valid JSON"},
      {"duplicate tensor", R"({"a":)" + kF32x1 + R"(,"a":)" + kF32x1 + "}", 4, "duplicate key 'a'"},
      {"duplicate field", R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4,
       "duplicate key 'dtype'"},
      {"unknown dtype", R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4,
       "tensor 'a': unknown dtype \"F33\" (known: BOOL"},
      {"dtype not a string", R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4, "dtype 4 is not a string"},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "tensor 'a': shape[0] is -1, expected a non-negative integer"},
      {"float dim", R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4, "shape[0] is 1.0"},
      {"shape not an array", R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4, "shape 1 is not an array"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "tensor 'a': data_offsets [0, 8] hold 8 bytes, but F32 shape (3) needs 12"},
      {"past the end", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
       "data_offsets [0, 16] reach past the end of the 8-byte data section"},
      {"reversed", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
       "data_offsets [8, 4] end before they begin"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "tensor 'b' data_offsets [4, 12] overlap tensor 'a' data_offsets [0, 8]"},
      {"hole",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       12, "data section bytes [4, 8] before tensor 'b' belong to no tensor"},
      {"trailing bytes", R"({"a":)" + kF32x1 + "}", 8, "the data section is 8 bytes, but the tensors cover 4"},
      {"offsets arity", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
       "data_offsets [0] is not [begin, end]"},
      {"offset beyond int64", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4,
       "is not [begin, end] of non-negative integers"},
      {"numel overflow", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4,
       "has more elements than can be stored"},
      {"missing field", R"({"a":{"dtype":"F32","shape":[1]}})", 0, "tensor 'a' has no \"data_offsets\""},
      {"unknown field", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
       "tensor 'a' has an unknown field 'x'"},
      {"tensor not an object", R"({"a":[1]})", 0, "tensor 'a' is a JSON array, expected an object"},
      {"metadata value", R"({"__metadata__":{"k":1}})", 0, "__metadata__ value of 'k' is a JSON number"},
      {"metadata not an object", R"({"__metadata__":"x"})", 0, "__metadata__ is a JSON string, expected an object"},
      {"deep nesting", R"({"a":{"dtype":"F32","shape":[[[1]]],"data_offsets":[0,4]}})", 4, "nested deeper"},
      {"control bytes in a name", "{\"a\\u0001b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
       "tensor 'a?b'"},
  };
}

TEST(SafetensorsHeader, EachRuleHasAClearError) {
  TempDir tmp;
  PosixFileSystem fs;
  int i = 0;
  for (const BadHeader& c : bad_headers()) {
    const std::string path = tmp / ("bad" + std::to_string(i++) + ".safetensors");
    testing::put(path, file_bytes(c.header, std::string(c.data_bytes, '\0')));
    const std::string msg = checkpoint_error_of([&] { SafetensorsFile::open(fs, path); });
    EXPECT_NE(msg.find(path + ": invalid safetensors file: "), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.what << ": " << msg;
  }
}

TEST(SafetensorsHeader, LengthFieldIsBoundedByTheFileAndTheCap) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string p = tmp / "f.safetensors";
  auto error_for = [&](const std::string& bytes, const SafetensorsLimits& limits = {}) {
    testing::put(p, bytes);
    return checkpoint_error_of([&] { SafetensorsFile::open(fs, p, limits); });
  };
  EXPECT_NE(error_for("").find("the file is 0 bytes, shorter than the 8-byte header length"), std::string::npos);
  EXPECT_NE(error_for(std::string("\x02\x00\x00", 3)).find("the file is 3 bytes"), std::string::npos);
  EXPECT_NE(error_for(le64(100) + "{}")
                .find("header length 100 bytes exceeds the 2 bytes after the length field (the "
                      "file is 10 bytes; truncated?)"),
            std::string::npos);
  EXPECT_NE(error_for(le64(UINT64_MAX) + "{}")
                .find("header length 18446744073709551615 bytes exceeds the "
                      "104857600-byte limit"),
            std::string::npos);
  EXPECT_NE(error_for(le64(40) + std::string(40, ' '), {.max_header_bytes = 32})
                .find("header length 40 bytes exceeds the 32-byte limit"),
            std::string::npos);
  EXPECT_NE(error_for(le64(0)).find("the header must start with '{', found byte 0x00"), std::string::npos);
  // Rank above the cap.
  EXPECT_NE(error_for(file_bytes(R"({"a":{"dtype":"U8","shape":[1,1,1],"data_offsets":[0,1]}})", "x"), {.max_rank = 2})
                .find("shape has 3 dimensions, more than the 2 allowed"),
            std::string::npos);
  // A minimal valid file: no tensors at all.
  testing::put(p, le64(2) + "{}");
  EXPECT_TRUE(SafetensorsFile::open(fs, p).tensors().empty());
}

TEST(SafetensorsHeader, MissingFileAndDirectoryAreCheckpointErrors) {
  TempDir tmp;
  PosixFileSystem fs;
  EXPECT_NE(checkpoint_error_of([&] {
              SafetensorsFile::open(fs, tmp / "missing.safetensors");
            }).find("cannot read checkpoint file " + (tmp / "missing.safetensors")),
            std::string::npos);
  EXPECT_NE(checkpoint_error_of([&] { SafetensorsFile::open(fs, tmp.path()); }).find("not a regular file"),
            std::string::npos);
}

}  // namespace
}  // namespace mtrain::checkpoint
