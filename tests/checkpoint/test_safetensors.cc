// safetensors: round trips of several dtypes, the byte layout checked against
// a file assembled by hand from the format description, foreign-but-valid
// layouts, and the reader's and writer's errors for misuse.
#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/safetensors.h"
#include "safetensors_test_util.h"
#include "tensor/precision.h"

namespace mtrain::checkpoint {
namespace {

using testing::checkpoint_error_of;
using testing::file_bytes;
using testing::TempDir;

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

TEST(Safetensors, RoundTripOfSeveralDtypes) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::vector<float> w32 = testing::random_floats(6 * 5, 1);
  std::vector<float> w16 = testing::random_floats(3 * 7, 2);
  std::vector<float> wh = testing::random_floats(33, 3, 100.0f);
  for (float& x : w16) x = kernels::round_bf16(x);  // values training keeps representable
  for (float& x : wh) x = kernels::round_fp16(x);
  const std::vector<int32_t> i32 = {-7, 0, 1 << 30, -(1 << 30)};
  const std::vector<int64_t> i64 = {int64_t{1} << 40, -1, 123456789012345};
  const std::vector<uint8_t> u8 = {0, 1, 254, 255, 7};
  const float scalar = 2.5f;
  const std::vector<TensorToWrite> tensors = {
      TensorToWrite::from_f32("w32", {6, 5}, w32.data()),
      TensorToWrite::from_f32("w16", {3, 7}, w16.data(), StDType::kBF16),
      TensorToWrite::from_f32("wh", {33}, wh.data(), StDType::kF16),
      TensorToWrite::from_bytes("i32", StDType::kI32, {2, 2}, testing::bytes_of(i32)),
      TensorToWrite::from_bytes("i64", StDType::kI64, {3}, testing::bytes_of(i64)),
      TensorToWrite::from_bytes("u8", StDType::kU8, {5}, testing::bytes_of(u8)),
      TensorToWrite::from_f32("scalar", {}, &scalar),
      TensorToWrite::from_f32("empty", {0, 4}, w32.data()),
  };
  const SafetensorsMetadata meta = {{"format", "pt"}, {"mtrain.iteration", "100"}};
  const WrittenFile written = write_safetensors(fs, tmp / "m.safetensors", tensors, meta);

  const int64_t data_bytes = 30 * 4 + 21 * 2 + 33 * 2 + 16 + 24 + 5 + 4 + 0;
  EXPECT_EQ(written.digest, digest_file(fs, tmp / "m.safetensors"));
  SafetensorsFile f = SafetensorsFile::open(fs, tmp / "m.safetensors");
  EXPECT_EQ(f.data_offset() % 8, 0);
  EXPECT_EQ(f.file_size(), f.data_offset() + data_bytes);
  EXPECT_EQ(written.digest.size, f.file_size());
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {  // data order == write order
    EXPECT_EQ(f.tensors()[i].name, tensors[i].name);
    EXPECT_EQ(f.tensors()[i].dtype, tensors[i].dtype);
    EXPECT_EQ(f.tensors()[i].shape, tensors[i].shape);
  }
  auto read_f32 = [&](const char* name) {
    const TensorInfo& t = f.get(name);
    std::vector<float> v(static_cast<size_t>(t.numel));
    f.read_f32(t, v);
    return v;
  };
  EXPECT_TRUE(same_bits(read_f32("w32"), w32));
  EXPECT_TRUE(same_bits(read_f32("w16"), w16));
  EXPECT_TRUE(same_bits(read_f32("wh"), wh));
  EXPECT_EQ(read_f32("scalar"), std::vector<float>{2.5f});
  EXPECT_EQ(f.get("scalar").numel, 1);
  EXPECT_TRUE(read_f32("empty").empty());
  std::vector<int64_t> i64_back(3);
  f.read_bytes(f.get("i64"), std::as_writable_bytes(std::span(i64_back)));
  EXPECT_EQ(i64_back, i64);
  std::vector<int32_t> i32_back(4);
  f.read_bytes(f.get("i32"), std::as_writable_bytes(std::span(i32_back)));
  EXPECT_EQ(i32_back, i32);
  std::vector<uint8_t> u8_back(5);
  f.read_bytes(f.get("u8"), std::as_writable_bytes(std::span(u8_back)));
  EXPECT_EQ(u8_back, u8);
}

TEST(Safetensors, ElementRangesAndRoundingOnWrite) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::vector<float> x = testing::random_floats(100000, 4);  // > one conversion chunk
  const std::vector<TensorToWrite> t = {TensorToWrite::from_f32("x", {100000}, x.data(), StDType::kBF16)};
  write_safetensors(fs, tmp / "x.safetensors", t);
  SafetensorsFile f = SafetensorsFile::open(fs, tmp / "x.safetensors");
  std::vector<float> part(50000);
  f.read_f32(f.get("x"), 40000, 50000, part);
  for (size_t i = 0; i < part.size(); ++i) {
    ASSERT_EQ(part[i], kernels::round_bf16(x[40000 + i])) << i;  // stored rounded to nearest even
  }
}

// The layout, assembled by hand from the format description: 8-byte LE
// length, compact JSON padded with spaces to 8-byte alignment, LE data.
TEST(Safetensors, WriterMatchesAHandBuiltFileByteForByte) {
  TempDir tmp;
  PosixFileSystem fs;
  std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},"c":{"dtype":"F16","shape":[1],"data_offsets":[12,14]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string data = std::string("\x00\x00\x80\x3f", 4) +  // 1.0f
                           std::string("\x00\x00\x00\xc0", 4) +  // -2.0f
                           std::string("\x80\x3f", 2) +          // bf16 1.0
                           std::string("\x00\x3f", 2) +          // bf16 0.5
                           std::string("\x00\x3c", 2);           // fp16 1.0
  const std::string expected = file_bytes(header, data);
  ASSERT_EQ(expected.size() % 8, 6u);  // the data section starts at a multiple of 8

  const float a[] = {1.0f, -2.0f}, b[] = {1.0f, 0.5f}, c[] = {1.0f};
  const std::vector<TensorToWrite> t = {TensorToWrite::from_f32("a", {2}, a),
                                        TensorToWrite::from_f32("b", {1, 2}, b, StDType::kBF16),
                                        TensorToWrite::from_f32("c", {1}, c, StDType::kF16)};
  write_safetensors(fs, tmp / "w.safetensors", t, {{"format", "pt"}});
  EXPECT_EQ(testing::slurp(tmp / "w.safetensors"), expected);
}

TEST(Safetensors, ReadsForeignButValidLayouts) {
  TempDir tmp;
  PosixFileSystem fs;
  // Whitespace and newlines, other key orders, tensors listed out of data
  // order, an empty tensor, no __metadata__, no padding (odd header length).
  const std::string header =
      "{\n  \"z\": {\"data_offsets\": [4, 6], \"shape\": [1], \"dtype\": \"F16\"},\n"
      "  \"y\": {\"shape\": [0], \"dtype\": \"I64\", \"data_offsets\": [4, 4]},\n"
      "  \"x\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}\n}";
  testing::put(tmp / "f", file_bytes(header, std::string("\x00\x00\x40\x40", 4) + std::string("\x00\xc0", 2)));
  SafetensorsFile f = SafetensorsFile::open(fs, tmp / "f");
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].name, "x");
  EXPECT_TRUE(f.metadata().empty());
  float x = 0, z = 0;
  f.read_f32(f.get("x"), std::span(&x, 1));
  f.read_f32(f.get("z"), std::span(&z, 1));
  EXPECT_EQ(x, 3.0f);
  EXPECT_EQ(z, -2.0f);
  EXPECT_EQ(f.get("y").numel, 0);
}

TEST(Safetensors, ReaderMisuseIsAClearError) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::vector<int64_t> ids = {1, 2, 3};
  const float w[] = {1, 2, 3, 4};
  const std::vector<TensorToWrite> t = {TensorToWrite::from_bytes("ids", StDType::kI64, {3}, testing::bytes_of(ids)),
                                        TensorToWrite::from_f32("w", {2, 2}, w)};
  write_safetensors(fs, tmp / "f.safetensors", t);
  SafetensorsFile f = SafetensorsFile::open(fs, tmp / "f.safetensors");
  std::vector<float> out(4);
  const std::string p = tmp / "f.safetensors";
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_NE(checkpoint_error_of([&] { f.get("nope"); }).find(p + ": no tensor 'nope' in the file"), std::string::npos);
  EXPECT_NE(checkpoint_error_of([&] {
              f.read_f32(f.get("ids"), std::span(out).first(3));
            }).find("tensor 'ids' has dtype I64; only F32, BF16 and F16 read as fp32"),
            std::string::npos);
  EXPECT_NE(checkpoint_error_of([&] {
              f.read_f32(f.get("w"), std::span(out).first(3));
            }).find("4 elements of tensor 'w' (F32) are 16 bytes, the buffer holds 12"),
            std::string::npos);
  EXPECT_NE(checkpoint_error_of([&] {
              f.read_f32(f.get("w"), 2, 3, std::span(out).first(3));
            }).find("elements [2, 5) of tensor 'w' are outside its 4 elements"),
            std::string::npos);
  const TensorInfo foreign = f.get("w");  // a copy: not validated by this file
  EXPECT_THROW(f.read_f32(foreign, out), std::invalid_argument);
}

TEST(Safetensors, WriterRefusesInvalidInputAndWritesNothing) {
  TempDir tmp;
  PosixFileSystem fs;
  const float w[] = {1, 2};
  const std::vector<int32_t> i = {1, 2, 3};
  const std::string p = tmp / "bad.safetensors";
  auto refuse = [&](std::vector<TensorToWrite> t, const std::string& what) {
    const std::string msg = checkpoint_error_of([&] { write_safetensors(fs, p, t); });
    EXPECT_NE(msg.find("cannot write " + p + ": " + what), std::string::npos) << msg;
    EXPECT_FALSE(fs.exists(p));
    EXPECT_FALSE(fs.exists(p + ".tmp"));
  };
  refuse({TensorToWrite::from_f32("a", {2}, w), TensorToWrite::from_f32("a", {2}, w)}, "tensor 'a' is given twice");
  refuse({TensorToWrite::from_f32("__metadata__", {2}, w)}, "invalid tensor name '__metadata__'");
  refuse({TensorToWrite::from_bytes("i", StDType::kI32, {2}, testing::bytes_of(i))},
         "tensor 'i' (I32, shape (2)) needs 8 bytes, got 12");
  refuse({TensorToWrite::from_f32("w", {2}, w, StDType::kI32)}, "tensor 'w': fp32 values cannot be stored as I32");
  refuse({TensorToWrite::from_f32("w", {-2}, w)}, "tensor 'w' has an invalid shape (-2)");
}

}  // namespace
}  // namespace mtrain::checkpoint
