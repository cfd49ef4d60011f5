// lib/tensorboard: CRC-32C against RFC 3720's check values, and event files
// read back by the tests' own reader (event_file_reader.h): framing, both
// CRCs, the Event protos, the file name, the queue, a killed writer's cut
// record.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>

#include "common/errors.h"
#include "tensorboard/crc32c.h"
#include "tensorboard/event_file_reader.h"  // tests/tensorboard
#include "tensorboard/event_writer.h"

namespace mtrain::tensorboard {
namespace {

namespace fs = std::filesystem;
using tbtest::read_event_file;
using tbtest::TempDir;

// RFC 3720 appendix B.4 (CRC examples) and the common "123456789" check.
TEST(Crc32c, MatchesRfc3720CheckValues) {
  std::string zeros(32, '\0'), ones(32, '\xFF'), inc(32, 0), dec(32, 0);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i), dec[i] = static_cast<char>(31 - i);
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec), 0x113FDB5Cu);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  // The tests' bitwise reference agrees on longer, unaligned input.
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>(i * 7 + 3);
  EXPECT_EQ(crc32c(std::string_view(text).substr(1)), tbtest::crc32c_bitwise(std::string_view(text).substr(1)));
}

TEST(Crc32c, MaskIsTensorFlowsRotateAndAdd) {
  // masked = ((c >> 15) | (c << 17)) + 0xA282EAD8, modulo 2^32.
  EXPECT_EQ(mask_crc(0), 0xA282EAD8u);
  EXPECT_EQ(mask_crc(0x00008000u), 0xA282EAD9u);
  EXPECT_EQ(mask_crc(0x00000001u), 0xA284EAD8u);
}

TEST(EventFileWriter, WritesVersionThenOneScalarEventEach) {
  TempDir d;
  std::string path;
  {
    EventFileWriter w((d.path / "runs").string(), 1000);
    path = w.path();
    w.add_scalar("lm loss", 2.5, 1, 100.25);
    w.add_scalar("learning-rate vs samples", 1e-4, 16, 100.5);
  }
  const auto r = read_event_file(path);
  ASSERT_EQ(r.error, "");
  EXPECT_FALSE(r.truncated);
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[0].file_version(), "brain.Event:2");
  EXPECT_GT(r.events[0].wall_time(), 1.6e9);
  const auto pts = tbtest::scalars(r);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].tag, "lm loss");
  EXPECT_EQ(pts[0].step, 1);
  EXPECT_EQ(pts[0].value, 2.5f);
  EXPECT_EQ(pts[0].wall_time, 100.25);
  EXPECT_EQ(pts[1].tag, "learning-rate vs samples");
  EXPECT_EQ(pts[1].step, 16);
  EXPECT_EQ(pts[1].value, static_cast<float>(1e-4));
}

TEST(EventFileWriter, NamesFilesAsTensorBoardAndNeverReusesOne) {
  TempDir d;
  EventFileWriter a(d.path.string(), 10), b(d.path.string(), 10);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::regex name(std::string(R"(events\.out\.tfevents\.\d{10}\.)") + host + "\\." + std::to_string(getpid()) +
                        R"(\.\d+)");
  EXPECT_TRUE(std::regex_match(fs::path(a.path()).filename().string(), name)) << a.path();
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(event_file_name(42, "h", 7, 3), "events.out.tfevents.0000000042.h.7.3");
}

TEST(EventFileWriter, QueueSizeEventsForceAFlush) {
  TempDir d;
  EventFileWriter w(d.path.string(), 3);
  w.add_scalar("a", 1, 1, 1);
  w.add_scalar("a", 2, 2, 2);
  EXPECT_EQ(w.pending(), 2u);
  EXPECT_EQ(read_event_file(w.path()).events.size(), 1u);  // the version record only
  w.add_scalar("a", 3, 3, 3);
  EXPECT_EQ(w.pending(), 0u);
  EXPECT_EQ(tbtest::scalars(read_event_file(w.path())).size(), 3u);
  w.add_scalar("a", 4, 4, 4);
  w.flush();
  EXPECT_EQ(tbtest::scalars(read_event_file(w.path())).size(), 4u);
}

// A writer killed in the middle of a write leaves a cut last record: the
// reader keeps every whole record before it. A flipped byte is caught by a CRC.
TEST(EventFileWriter, CutLastRecordKeepsEarlierOnesAndCorruptionIsCaught) {
  TempDir d;
  std::string path;
  {
    EventFileWriter w(d.path.string(), 1);
    for (int i = 1; i <= 5; ++i) w.add_scalar("lm loss", 1.0 / i, i, i);
    path = w.path();
  }
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), {});
  const auto whole = tbtest::read_event_bytes(bytes);
  ASSERT_EQ(whole.events.size(), 6u);
  for (size_t cut : {size_t{1}, size_t{5}, size_t{14}}) {
    const auto r = tbtest::read_event_bytes(bytes.substr(0, bytes.size() - cut));
    EXPECT_EQ(r.error, "");
    EXPECT_TRUE(r.truncated) << cut;
    const auto pts = tbtest::scalars(r);
    ASSERT_EQ(pts.size(), 4u) << cut;
    EXPECT_EQ(pts.back().step, 4);
  }
  std::string bad = bytes;
  bad[bad.size() - 6] ^= 0x20;  // inside the last record's data
  EXPECT_NE(tbtest::read_event_bytes(bad).error, "");
  bad = bytes;
  bad[bytes.size() - whole.events.back().ByteSizeLong() - 16] ^= 1;  // the last record's length
  EXPECT_NE(tbtest::read_event_bytes(bad).error, "");
}

TEST(EventFileWriter, UnwritableDirectoryIsAConfigErrorNamingIt) {
  TempDir d;
  const fs::path file = d.path / "not_a_dir";
  std::ofstream(file) << "x";
  try {
    EventFileWriter w((file / "runs").string(), 10);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find((file / "runs").string()), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("--tensorboard_dir"), std::string::npos);
  }
}

}  // namespace
}  // namespace mtrain::tensorboard
