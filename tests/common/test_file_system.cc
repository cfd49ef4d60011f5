// PosixFileSystem: explicit permissions regardless of umask, refusal of
// world-writable modes and symlinked targets, exact reads with bounds, and
// the directory operations a checkpoint commit uses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_system.h"
#include "fs_test_util.h"

namespace mtrain {
namespace {

using testing::mode_of;
using testing::ScopedUmask;
using testing::TempDir;

TEST(PosixFileSystem, DefaultModesIgnoreTheUmask) {
  TempDir tmp;
  PosixFileSystem fs;
  for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{077}}) {
    ScopedUmask scoped(mask);
    const std::string root = tmp / ("u" + std::to_string(mask));
    fs.create_dirs(root + "/a/b");
    EXPECT_EQ(mode_of(root), 0750u) << "umask " << mask;
    EXPECT_EQ(mode_of(root + "/a"), 0750u);
    EXPECT_EQ(mode_of(root + "/a/b"), 0750u);
    auto f = fs.open_for_write(root + "/a/b/x.bin");
    f->append(std::string_view("abc"));
    f->close();
    EXPECT_EQ(mode_of(root + "/a/b/x.bin"), 0640u) << "umask " << mask;
  }
}

TEST(PosixFileSystem, ExplicitModesAreApplied) {
  TempDir tmp;
  PosixFileSystem fs;
  ScopedUmask scoped(0);
  fs.create_dirs(tmp / "d", 0700);
  EXPECT_EQ(mode_of(tmp / "d"), 0700u);
  auto f = fs.open_for_write(tmp / "d/f", 0600);
  f->close();
  EXPECT_EQ(mode_of(tmp / "d/f"), 0600u);
  // Re-opening an existing file applies the new mode too (open(2) would keep the old one).
  fs.open_for_write(tmp / "d/f", 0640)->close();
  EXPECT_EQ(mode_of(tmp / "d/f"), 0640u);
}

TEST(PosixFileSystem, ExistingDirectoriesAreLeftAlone) {
  TempDir tmp;
  PosixFileSystem fs;
  fs.create_dirs(tmp / "keep", 0700);
  fs.create_dirs(tmp / "keep/new");
  EXPECT_EQ(mode_of(tmp / "keep"), 0700u);
  EXPECT_EQ(mode_of(tmp / "keep/new"), 0750u);
  testing::put(tmp / "file", "x");
  try {
    fs.create_dirs(tmp / "file/sub");
    FAIL() << "mkdir under a regular file succeeded";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOTDIR);
    EXPECT_EQ(e.path(), tmp / "file");
  }
}

TEST(PosixFileSystem, RefusesWorldWritableModes) {
  TempDir tmp;
  PosixFileSystem fs;
  for (mode_t bad : {mode_t{0777}, mode_t{0666}, mode_t{0642}, mode_t{010640}}) {
    EXPECT_THROW(fs.create_dirs(tmp / "d", bad), IoError) << std::oct << bad;
    EXPECT_THROW(fs.open_for_write(tmp / "f", bad), IoError) << std::oct << bad;
  }
  EXPECT_FALSE(fs.exists(tmp / "d"));
  EXPECT_FALSE(fs.exists(tmp / "f"));
  try {
    fs.open_for_write(tmp / "f", 0666);
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("0666"), std::string::npos) << e.what();
  }
}

TEST(PosixFileSystem, DoesNotWriteThroughASymlink) {
  TempDir tmp;
  PosixFileSystem fs;
  testing::put(tmp / "victim", "precious");
  ASSERT_EQ(::symlink((tmp / "victim").c_str(), (tmp / "link").c_str()), 0);
  try {
    fs.open_for_write(tmp / "link");
    FAIL() << "opened a symlink for writing";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ELOOP);
  }
  EXPECT_EQ(testing::slurp(tmp / "victim"), "precious");
}

TEST(PosixFileSystem, ExchangeSwapsTwoDirectoriesAtomically) {
  TempDir tmp;
  PosixFileSystem fs;
  fs.create_dirs(tmp / "a");
  fs.create_dirs(tmp / "b");
  testing::put(tmp / "a/f", "old");
  testing::put(tmp / "b/f", "new");
  fs.exchange(tmp / "b", tmp / "a");
  EXPECT_EQ(testing::slurp(tmp / "a/f"), "new");
  EXPECT_EQ(testing::slurp(tmp / "b/f"), "old");
  try {
    fs.exchange(tmp / "a", tmp / "missing");
    FAIL() << "exchanged with a missing path";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
  }
}

TEST(PosixFileSystem, WriteReadRoundTripAndExactRanges) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string p = tmp / "data";
  auto w = fs.open_for_write(p);
  w->append(std::string_view("0123456789"));
  w->append(std::string_view("abcdef"));
  EXPECT_EQ(w->size(), 16);
  w->sync();
  w->close();
  w->close();  // idempotent
  EXPECT_THROW(w->append(std::string_view("x")), IoError);
  EXPECT_EQ(fs.file_size(p), 16);

  auto r = fs.open_for_read(p);
  EXPECT_EQ(r->size(), 16);
  std::string buf(4, '\0');
  r->read_at(8, std::as_writable_bytes(std::span(buf.data(), buf.size())));
  EXPECT_EQ(buf, "89ab");
  // Past the end: an error naming the numbers, not a short read.
  try {
    r->read_at(14, std::as_writable_bytes(std::span(buf.data(), buf.size())));
    FAIL() << "read past the end succeeded";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("4 bytes at offset 14 are past the end of the 16-byte file"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(r->read_at(-1, std::as_writable_bytes(std::span(buf.data(), 1))), IoError);

  EXPECT_EQ(fs.read_file(p, 16), "0123456789abcdef");
  try {
    fs.read_file(p, 15);
    FAIL() << "read_file ignored its bound";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), EFBIG);
  }
}

TEST(PosixFileSystem, OpenForReadRefusesMissingFilesAndDirectories) {
  TempDir tmp;
  PosixFileSystem fs;
  try {
    fs.open_for_read(tmp / "missing");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_EQ(e.path(), tmp / "missing");
  }
  EXPECT_THROW(fs.open_for_read(tmp.path()), IoError);
  EXPECT_THROW(fs.file_size(tmp.path()), IoError);
}

TEST(PosixFileSystem, RenameListRemove) {
  TempDir tmp;
  PosixFileSystem fs;
  fs.create_dirs(tmp / "step.tmp/sub");
  testing::put(tmp / "step.tmp/b", "b");
  testing::put(tmp / "step.tmp/a", "a");
  fs.sync_dir(tmp / "step.tmp");
  fs.rename(tmp / "step.tmp", tmp / "step");  // a directory commit
  fs.sync_dir(tmp.path());
  EXPECT_FALSE(fs.exists(tmp / "step.tmp"));
  const std::vector<DirEntry> entries = fs.list_dir(tmp / "step");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "a");
  EXPECT_FALSE(entries[0].is_dir);
  EXPECT_EQ(entries[1].name, "b");
  EXPECT_EQ(entries[2].name, "sub");
  EXPECT_TRUE(entries[2].is_dir);
  // rename onto a non-empty directory fails (the commit must rename into a free name).
  fs.create_dirs(tmp / "other/x");
  EXPECT_THROW(fs.rename(tmp / "other", tmp / "step"), IoError);

  fs.remove_all(tmp / "step");
  EXPECT_FALSE(fs.exists(tmp / "step"));
  fs.remove_all(tmp / "step");  // missing: not an error
  EXPECT_THROW(fs.list_dir(tmp / "step"), IoError);
  EXPECT_THROW(fs.sync_dir(tmp / "step"), IoError);
  EXPECT_GT(fs.free_bytes(tmp.path()), 0);
}

TEST(FileSystemHelpers, ParentDir) {
  EXPECT_EQ(parent_dir("/a/b/c"), "/a/b");
  EXPECT_EQ(parent_dir("c"), ".");
  EXPECT_EQ(parent_dir("/c"), "/");
  EXPECT_EQ(parent_dir("a/c"), "a");
}

}  // namespace
}  // namespace mtrain
